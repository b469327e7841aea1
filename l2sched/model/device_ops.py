"""Where a device profile meets a model: the profile's op tables
(``[ops.MODEL."KIND"]``, read by ``l2sched.device`` without knowing any
model) checked against the model adapters' layer kinds and decode
timelines. Called where a schedule's model and its device profile are
both known (``lint.run_lint``, ``l2sched fit``)."""

from __future__ import annotations

from l2sched.device import DeviceProfile, profile_error
from l2sched.device.schema import LEGACY_OPS_MODEL
from l2sched.errors import suggest
from l2sched.model.adapters import DEFAULT_ADAPTER, adapter_names, get_adapter
from l2sched.model.config import default_config


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
    ``model``: check only that adapter's tables (the schedule's model);
    ``None``: every table. Raises ``L2sInputError`` with every problem at
    its key's ``path:line:column`` in the profile."""
    names = adapter_names()
    problems = []
    for name, table in device_profile.ops.items():
        # a table of the old layout names no model: it serves the schedule's
        # model (the default adapter's, when every table is checked)
        against = (model or DEFAULT_ADAPTER) if name == LEGACY_OPS_MODEL else name
        if model is not None and against != model:
            continue
        if against not in names:
            problems.append((f"ops.{name}", "", f"unknown model {name!r}"
                             f"{suggest(name, names)} (adapters: {', '.join(names)})"))
            continue
        known = known_ops(against)
        bad_kinds = set()
        for kind, op in table:
            if kind not in known:
                if kind not in bad_kinds:
                    bad_kinds.add(kind)
                    problems.append((f"ops.{name}.{kind}", "", f"unknown layer kind {kind!r} "
                                     f"(known: {', '.join(sorted(known))})"))
            elif op not in known[kind]:
                problems.append((f"ops.{name}.{kind}", op, f"unknown op of a {kind} layer"))
    if problems:
        raise profile_error(device_profile, problems)
