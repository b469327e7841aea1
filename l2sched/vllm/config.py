"""What a user asks the vLLM plugin for: ``--additional-config
'{"l2sched": {...}}'`` (``vllm_config.additional_config``) or the
``L2SCHED_*`` environment variables, read into a ``PluginConfig``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

ENV_SCHEDULE, ENV_SET = "L2SCHED_SCHEDULE", "L2SCHED_SET"
ENV_BACKEND, ENV_LINT = "L2SCHED_BACKEND", "L2SCHED_LINT"


@dataclass(frozen=True)
class PluginConfig:
    """What the user asked for: ``schedule`` path, ``overrides`` as
    ``KEY=VALUE`` strings (the CLI's ``--set``), ``backend`` (``cuda`` or
    ``dry-run``), ``lint`` on/off, and ``source`` (``additional-config`` or
    ``env``) for the log lines."""

    schedule: str
    overrides: tuple[str, ...] = ()
    backend: str = "cuda"
    lint: bool = True
    source: str = "env"


def _as_bool(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() not in ("0", "false", "off", "no", "")
    return bool(v)


def parse_set_env(text: str) -> tuple[str, ...]:
    """``"k=v,k=v"`` (``L2SCHED_SET``) -> ``("k=v", "k=v")``; blanks dropped."""
    return tuple(p.strip() for p in (text or "").split(",") if p.strip())


def read_config(additional_config: Mapping | None,
                environ: Mapping[str, str] | None = None) -> PluginConfig | None:
    """The ``PluginConfig`` from ``additional_config["l2sched"]`` (a dict with
    ``schedule`` and optional ``set``: a dict or a list of ``KEY=VALUE``,
    ``backend``, ``lint``), else from the environment (``L2SCHED_SCHEDULE``,
    ``L2SCHED_SET``, ``L2SCHED_BACKEND``, ``L2SCHED_LINT``); ``None`` when
    neither names a schedule. Raises ``ValueError`` on a malformed value."""
    env = os.environ if environ is None else environ
    section = (additional_config or {}).get("l2sched")
    if section is not None:
        if not isinstance(section, Mapping) or not section.get("schedule"):
            raise ValueError('additional_config "l2sched" must be an object with '
                             'a "schedule" path, e.g. {"l2sched": {"schedule": '
                             '"x.l2s"}}')
        sets = section.get("set") or {}
        if isinstance(sets, Mapping):
            overrides = tuple(f"{k}={v}" for k, v in sets.items())
        elif isinstance(sets, (list, tuple)):
            overrides = tuple(str(s) for s in sets)
        else:
            raise ValueError('additional_config "l2sched.set" must be an object '
                             '{"window.B.budget": "25MB"} or a list of "k=v"')
        return PluginConfig(str(section["schedule"]), overrides,
                            str(section.get("backend", env.get(ENV_BACKEND, "cuda"))),
                            _as_bool(section.get("lint", env.get(ENV_LINT, "1"))),
                            "additional-config")
    path = env.get(ENV_SCHEDULE, "").strip()
    if not path:
        return None
    return PluginConfig(path, parse_set_env(env.get(ENV_SET, "")),
                        env.get(ENV_BACKEND, "cuda").strip() or "cuda",
                        _as_bool(env.get(ENV_LINT, "1")), "env")
