"""Where a device profile meets a model: the profile's op tables
(``[ops.MODEL."KIND"]``, read by ``l2sched.device`` without knowing any
model) checked against the model adapters' layer kinds and decode
timelines. Called where a schedule's model and its device profile are
both known (``lint.run_lint``, ``l2sched fit``)."""

from __future__ import annotations

import logging

from l2sched.device import DeviceProfile, profile_error
from l2sched.device.schema import LEGACY_OPS_MODEL
from l2sched.errors import suggest
from l2sched.model.adapters import DEFAULT_ADAPTER, adapter_names, get_adapter
from l2sched.model.config import default_config

log = logging.getLogger("l2sched.device")


def known_ops(model: str) -> dict[str, frozenset[str]]:
    """Layer kind (as written in a profile, ``kda+moe``) -> the names of its
    decode-step ops, for adapter ``model``: every kind the adapter lists
    (its attention x MLP kinds where it exports them, else the kinds of its
    embedded config). Raises ``KeyError`` for an unknown adapter."""
    ad = get_adapter(model)
    attn, mlp, make = (getattr(ad, n, None) for n in ("ATTENTION_KINDS", "MLP_KINDS",
                                                     "LayerKind"))
    if attn and mlp and make is not None:
        kinds = [make(a, m) for a in attn for m in mlp]
    else:
        kinds = list(dict.fromkeys(ad.layer_kinds(default_config(model))))
    return {str(k): frozenset(op.name for op in ad.decode_timeline(k)) for k in kinds}


def check_device_ops(device_profile: DeviceProfile, model: str | None = None) -> None:
    """Check the op tables of ``device_profile`` against the model adapters:
    each ``[ops.MODEL]`` names an adapter, each ``[ops.MODEL."KIND"]`` one
    of its layer kinds, each entry an op of that kind's decode timeline.
    ``model``: check the kinds and ops of that adapter's tables only (the
    schedule's model; a table of the old layout, which names no model, is
    checked as its); ``None``: every table (the old layout's as the default
    adapter's). A table naming no adapter is an error either way: a typo
    there would silently leave the schedule's model without measured op
    times. The profile's notes (``DeviceProfile.notes``) are logged once
    per profile (WARNING, ``l2sched.device``). Raises ``L2sInputError``
    with every problem at its key's ``path:line:column`` in the profile."""
    _log_notes(device_profile)
    names = adapter_names()
    problems = []
    for name, table in device_profile.ops.items():
        legacy = name == LEGACY_OPS_MODEL
        against = (model or DEFAULT_ADAPTER) if legacy else name
        # the old layout's sections are written without a model part
        where = "ops" if legacy else f"ops.{name}"
        if against not in names:
            problems.append((where, "", f"unknown model {name!r}"
                             f"{suggest(name, names)} (adapters: {', '.join(names)})"))
            continue
        if model is not None and against != model:
            continue
        known = known_ops(against)
        bad_kinds = set()
        for kind, op in table:
            if kind not in known:
                if kind not in bad_kinds:
                    bad_kinds.add(kind)
                    why = (f"; [ops.{kind}] holds op entries with no layer kind: write "
                           f"[ops.{kind}.\"KIND\"]" if legacy and kind in names else
                           f" (known: {', '.join(sorted(known))})")
                    problems.append((f"{where}.{kind}", "", f"unknown layer kind {kind!r}{why}"))
            elif op not in known[kind]:
                problems.append((f"{where}.{kind}", op, f"unknown op of a {kind} layer"))
    if problems:
        raise profile_error(device_profile, problems)


_noted: set[str] = set()


def _log_notes(device_profile: DeviceProfile) -> None:
    """Log each note of ``device_profile`` once per process (WARNING)."""
    for note in device_profile.notes:
        if note not in _noted:
            _noted.add(note)
            log.warning("note: %s", note)
