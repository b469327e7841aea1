"""Facts about the model and the device, as data with sources.

``adapters`` (one package per model family: layer kinds, hook catalogue,
decode timeline, tensor shapes), ``config`` (reading and validating a
Hugging Face ``config.json``), ``inventory`` (per-rank tensors of every
decoder layer, analytical or read off a live module tree) and
``device_ops`` (a device profile's op tables checked against the model's
layer kinds and decode timeline; the profiles themselves are
``l2sched.device``).
"""
