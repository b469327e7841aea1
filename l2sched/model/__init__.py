"""Facts about the model and the device, as data with sources.

``adapters`` (one package per model family: layer kinds, hook catalogue,
decode timeline, tensor shapes), ``config`` (reading and validating a
Hugging Face ``config.json``), ``inventory`` (per-rank tensors of every
decoder layer, analytical or read off a live module tree), ``devices`` (the
device profiles the lint's model reads) and ``allreduce_fit`` (fitting the
profile's all-reduce model to measurements).
"""
