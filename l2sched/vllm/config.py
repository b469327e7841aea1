"""What a user asks the vLLM plugin for: ``--additional-config
'{"l2sched": {...}}'`` (``vllm_config.additional_config``) or the
``L2SCHED_*`` environment variables, read into a ``PluginConfig``.
``"schedule": "auto"`` (``L2SCHED_SCHEDULE=auto``) asks for a schedule
fitted to the live engine (``vllm.auto``) instead of a file; it takes no
``set`` overrides.

One source, never a mix: when ``additional_config`` has an ``l2sched``
section it is the whole configuration (every key; a key it leaves out takes
its default, not the environment's value), else the environment is. The
section is validated against ``CONFIG_SCHEMA`` (JSON Schema 2020-12,
checked with ``jsonschema``) and the environment values one by one; every
problem is an ``L2sPluginError("bad configuration", ...)`` naming the key or
variable, which the plugin logs as its one "prefetch OFF" line.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping

import jsonschema

from l2sched.env import NO_WORDS, YES_WORDS
from l2sched.errors import L2sPluginError, suggest
from l2sched.runtime.capture_nodes import CAPTURE_LAUNCHES

ENV_SCHEDULE, ENV_SET = "L2SCHED_SCHEDULE", "L2SCHED_SET"
ENV_BACKEND, ENV_LINT = "L2SCHED_BACKEND", "L2SCHED_LINT"
ENV_DEVICE = "L2SCHED_DEVICE"
ENV_ON_PREDICTED_LOSS = "L2SCHED_ON_PREDICTED_LOSS"
#: The ``schedule`` value that asks for a fitted schedule (``vllm.auto``);
#: a file of that name is ``./auto``.
AUTO = "auto"
ENV_FILLS = "L2SCHED_FILLS"
ENV_VERIFY = "L2SCHED_VERIFY"
ENV_CAPTURE_LAUNCH = "L2SCHED_CAPTURE_LAUNCH"
ENV_AGREE_TIMEOUT = "L2SCHED_AGREE_TIMEOUT_S"
#: Seconds a configured rank waits for every other rank's configuration
#: after the decode graphs are captured (``vllm.agreement``), and the bound
#: of each of ``verify``'s agreements. vLLM's executors start that step on
#: every worker only after every worker loaded its weights, so the wait is
#: the ranks' capture skew; it runs out only where a rank never answers (no
#: l2sched there), and then every configured rank turns prefetch off.
AGREE_TIMEOUT_S = 30.0
#: The largest ``agree_timeout_s`` a user may ask for, seconds.
MAX_AGREE_TIMEOUT_S = 3600.0
#: Rounds of the start-up A/B (``verify``) a user may ask for: each round
#: replays every measured size's decode graph 3 x (1 + ``replay.REPLAYS``) times.
MAX_VERIFY_ROUNDS = 50

#: Runtime backends the plugin offers.
BACKENDS = ("cuda", "dry-run")
#: What the lint gate does with an error-severity finding: ``error`` refuses
#: to install (the default), ``warn`` installs anyway with a logged override,
#: ``off`` does not lint.
LINT_MODES = ("error", "warn", "off")
#: What the gate does with a plan predicted slower than no prefetch at a
#: captured batch size (L2S110, ``vllm.loss_gate``): ``off`` keeps prefetch
#: off (the default), ``warn`` installs anyway with a logged override.
LOSS_MODES = ("off", "warn")
#: The run-time switch at install (``runtime.switch``): ``on`` (default) or
#: ``off`` (installed and captured, kernels exit at once until switched on:
#: ``l2sched.vllm.switch``).
FILL_STATES = ("on", "off")

#: The JSON schema of ``additional_config["l2sched"]``.
CONFIG_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": 'additional_config["l2sched"] of the l2sched vLLM plugin',
    "type": "object",
    "required": ["schedule"],
    "additionalProperties": False,
    "properties": {
        "schedule": {"type": "string", "minLength": 1,
                     "description": 'path of the .l2s schedule, or "auto" (fit '
                                    'one for the live engine)'},
        "set": {"type": ["object", "array"],
                "additionalProperties": {"type": ["string", "number"]},
                "items": {"type": "string"},
                "description": 'overrides: {"window.B.budget": "25MB"} or a list '
                               'of "KEY=VALUE" strings'},
        "backend": {"enum": list(BACKENDS)},
        "lint": {"enum": [True, False, *LINT_MODES]},
        "device": {"type": "string", "minLength": 1,
                   "description": "device profile: a shipped name or a .toml path"},
        "on_predicted_loss": {"enum": list(LOSS_MODES)},
        "fills": {"enum": list(FILL_STATES)},
        "verify": {"type": "integer", "minimum": 0, "maximum": MAX_VERIFY_ROUNDS,
                   "description": "rounds of the start-up A/B of the captured decode "
                                  "graphs with prefetch on/off (0: none); prefetch "
                                  "stays on only when measured faster"},
        "capture_launch": {"enum": list(CAPTURE_LAUNCHES),
                           "description": "how a fill enters vLLM's FULL decode graphs "
                                          "(docs/runtime.md)"},
        "agree_timeout_s": {"type": "number", "exclusiveMinimum": 0,
                            "maximum": MAX_AGREE_TIMEOUT_S,
                            "description": "seconds a rank waits for the other ranks' "
                                           "l2sched configuration (then prefetch off)"},
    },
}


@dataclass(frozen=True)
class PluginConfig:
    """What the user asked for: ``schedule`` path (or ``AUTO``,
    ``is_auto``), ``overrides`` as
    ``KEY=VALUE`` strings (the CLI's ``--set``), ``backend`` (``cuda`` or
    ``dry-run``), ``lint`` (``LINT_MODES``), ``device`` (a device profile
    name or ``.toml`` path replacing the schedule's, ``None`` = the
    schedule's), ``source`` (``additional-config`` or ``env``) for the
    log lines, ``on_predicted_loss`` (``LOSS_MODES``) and ``fills``, the
    run-time switch at install (``FILL_STATES``), ``verify``, the rounds
    of the start-up A/B after graph capture (``vllm.verify_startup``; 0 =
    none), and ``capture_launch``, how a fill enters a FULL graph
    (``runtime.capture_nodes.CAPTURE_LAUNCHES``; ``None`` = the runtime's
    default), and ``agree_timeout_s``, the bound in seconds of every
    agreement between ranks (``vllm.agreement``)."""

    schedule: str
    overrides: tuple[str, ...] = ()
    backend: str = "cuda"
    lint: str = "error"
    device: str | None = None
    source: str = "env"
    on_predicted_loss: str = "off"
    fills: str = "on"
    verify: int = 0
    capture_launch: str | None = None
    agree_timeout_s: float = AGREE_TIMEOUT_S

    @property
    def is_auto(self) -> bool:
        """True for ``"schedule": "auto"``: fit the schedule (``vllm.auto``)."""
        return self.schedule == AUTO


def _no_set_with_auto(where: str) -> L2sPluginError:
    """The error for overrides given with ``"schedule": "auto"``."""
    return _bad(f'{where}: not with "schedule": "auto" (the fit chooses every '
                "setting; to change one, write the fitted schedule to a file, "
                "l2sched check it with the overrides, and name that file)")


def _bad(detail: str) -> L2sPluginError:
    return L2sPluginError("bad configuration", detail)


# --------------------------------------------------------------------------
# additional_config["l2sched"]

_JSON_TYPE = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
              int: "a number", float: "a number", type(None): "null"}


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _schema_problem(err) -> str:
    """One ``jsonschema`` validation error as ``additional_config PATH:
    message``, PATH the dotted key (``l2sched.set.window.B.budget``,
    ``l2sched.set[1]``)."""
    path = "l2sched" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}"
                               for p in err.absolute_path)
    inst, kind = err.instance, err.validator
    got = ("got null" if inst is None else
           f"got {_JSON_TYPE.get(type(inst), type(inst).__name__)} {_shown(inst)}")
    keys = list(CONFIG_SCHEMA["properties"])
    if kind == "required":
        missing = next(k for k in err.validator_value if k not in inst)
        return (f"additional_config {path}.{missing}: missing (the path of the .l2s "
                'schedule, e.g. {"l2sched": {"schedule": "x.l2s"}})')
    if kind == "additionalProperties":
        extra = sorted(k for k in inst if k not in keys)[0]
        return (f"additional_config {path}.{extra}: unknown key{suggest(extra, keys)} "
                f"(keys: {', '.join(keys)})")
    if kind == "minLength":
        hint = ' (a .l2s path, or "auto")' if path == "l2sched.schedule" else ""
        return f"additional_config {path}: must not be empty{hint}"
    if kind == "enum":
        choices = " or ".join(_shown(c) for c in err.validator_value).replace('"', "'")
        return f"additional_config {path}: must be {choices}, {got}"
    if path == "l2sched" and kind == "type":
        return ('additional_config l2sched: must be an object like {"schedule": '
                f'"x.l2s"}}, {got}')
    if kind in ("minimum", "maximum"):
        lo, hi = err.schema.get("minimum"), err.schema.get("maximum")
        return f"additional_config {path}: must be a whole number from {lo} to {hi}, {got}"
    if kind == "type":
        want = err.validator_value
        want = [want] if isinstance(want, str) else want
        text = " or ".join({"object": "an object", "array": "a list",
                            "integer": "a whole number"}.get(w, f"a {w}")
                           for w in want)
        desc = err.schema.get("description")
        return (f"additional_config {path}: expected {text}, {got}"
                + (f" ({desc})" if desc else ""))
    return f"additional_config {path}: {err.message}"  # pragma: no cover


def _from_section(section: Any) -> PluginConfig:
    """The ``PluginConfig`` of a validated ``additional_config["l2sched"]``."""
    validator = jsonschema.Draft202012Validator(CONFIG_SCHEMA)
    errors = sorted(validator.iter_errors(section),
                    key=lambda e: [str(p) for p in e.absolute_path])
    typed = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    # a value of the wrong type gets that one message (Infinity is also
    # above the maximum)
    errors = [e for e in errors
              if e.validator == "type" or tuple(e.absolute_path) not in typed]
    if errors:
        raise _bad("; ".join(dict.fromkeys(_schema_problem(e) for e in errors)))
    sets = section.get("set") or {}
    if sets and section["schedule"] == AUTO:
        raise _no_set_with_auto("additional_config l2sched.set")
    if isinstance(sets, Mapping):
        overrides = tuple(f"{k}={v}" for k, v in sets.items())
    else:
        overrides = tuple(sets)
    lint = section.get("lint", "error")
    lint = {True: "error", False: "off"}.get(lint, lint) if isinstance(lint, bool) \
        else lint
    return PluginConfig(section["schedule"], overrides,
                        section.get("backend", "cuda"), lint,
                        section.get("device"), "additional-config",
                        section.get("on_predicted_loss", "off"),
                        section.get("fills", "on"),
                        int(section.get("verify", 0)),  # JSON's 2.0 is an integer
                        section.get("capture_launch"),
                        float(section.get("agree_timeout_s", AGREE_TIMEOUT_S)))


# --------------------------------------------------------------------------
# environment

#: Two overrides joined by a comma: ``...,KEY=`` (a value never holds ``=``).
_COMMA_JOINED = re.compile(r",\s*[A-Za-z_][A-Za-z0-9_.]*\s*=")


def parse_set_env(text: str) -> tuple[str, ...]:
    """``L2SCHED_SET`` -> its ``KEY=VALUE`` overrides. Overrides are
    separated by ``;`` (or a newline): a layer selector holds commas
    (``window.B.layers=moe, 44``) and never a ``;``. A ``;`` inside a
    double-quoted string (a device profile path) does not separate. Blank
    parts are dropped."""
    parts, cur, quoted = [], [], False
    for ch in text or "":
        if ch == '"':
            quoted = not quoted
        if ch in ";\n" and not quoted:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return tuple(p.strip() for p in parts if p.strip())


def _env_lint(env: Mapping[str, str]) -> str:
    text = (env.get(ENV_LINT) or "").strip().lower()
    if not text or text in YES_WORDS or text == "error":
        return "error"
    if text in NO_WORDS or text == "off":
        return "off"
    if text == "warn":
        return "warn"
    raise _bad(f"{ENV_LINT}={env.get(ENV_LINT)!r}: expected error (or "
               f"{'/'.join(YES_WORDS)}), warn, or off (or {'/'.join(NO_WORDS)})")


def _from_env(env: Mapping[str, str]) -> PluginConfig | None:
    path = (env.get(ENV_SCHEDULE) or "").strip()
    if not path:
        return None
    sets = parse_set_env(env.get(ENV_SET, ""))
    if sets and path == AUTO:
        raise _no_set_with_auto(f"{ENV_SET}={env.get(ENV_SET)!r}")
    if any(_COMMA_JOINED.search(s) for s in sets):
        raise _bad(f"{ENV_SET}={env.get(ENV_SET)!r}: separate overrides with ';', "
                   "not ',' (a comma belongs to a layer selector), e.g. "
                   f'{ENV_SET}="window.B.budget=25MB; window.B.layers=moe, 44"')
    backend = (env.get(ENV_BACKEND) or "").strip() or "cuda"
    if backend not in BACKENDS:
        raise _bad(f"{ENV_BACKEND}={env.get(ENV_BACKEND)!r}: expected "
                   f"{' or '.join(BACKENDS)}")
    device = (env.get(ENV_DEVICE) or "").strip() or None
    loss = (env.get(ENV_ON_PREDICTED_LOSS) or "").strip().lower() or "off"
    if loss not in LOSS_MODES:
        raise _bad(f"{ENV_ON_PREDICTED_LOSS}={env.get(ENV_ON_PREDICTED_LOSS)!r}: "
                   f"expected {' or '.join(LOSS_MODES)}")
    fills = (env.get(ENV_FILLS) or "").strip().lower() or "on"
    fills = "on" if fills in YES_WORDS else "off" if fills in NO_WORDS else fills
    if fills not in FILL_STATES:
        raise _bad(f"{ENV_FILLS}={env.get(ENV_FILLS)!r}: expected on (or "
                   f"{'/'.join(YES_WORDS)}) or off (or {'/'.join(NO_WORDS)})")
    launch = (env.get(ENV_CAPTURE_LAUNCH) or "").strip().lower() or None
    if launch is not None and launch not in CAPTURE_LAUNCHES:
        raise _bad(f"{ENV_CAPTURE_LAUNCH}={env.get(ENV_CAPTURE_LAUNCH)!r}: expected "
                   f"{' or '.join(CAPTURE_LAUNCHES)}{suggest(launch, CAPTURE_LAUNCHES)}")
    return PluginConfig(path, sets, backend, _env_lint(env), device, "env", loss,
                        fills, _env_verify(env), launch, _env_agree_timeout(env))


def _env_agree_timeout(env: Mapping[str, str]) -> float:
    text = (env.get(ENV_AGREE_TIMEOUT) or "").strip()
    if not text:
        return AGREE_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_AGREE_TIMEOUT_S:  # also NaN
        raise _bad(f"{ENV_AGREE_TIMEOUT}={env.get(ENV_AGREE_TIMEOUT)!r}: expected seconds "
                   f"above 0 and at most {MAX_AGREE_TIMEOUT_S:g}")
    return seconds


def _env_verify(env: Mapping[str, str]) -> int:
    text = (env.get(ENV_VERIFY) or "").strip()
    if not text:
        return 0
    # ASCII digits only: int() also reads "1_0" and other scripts' digits
    n = int(text) if re.fullmatch(r"[0-9]+", text) else -1
    if not 0 <= n <= MAX_VERIFY_ROUNDS:
        raise _bad(f"{ENV_VERIFY}={env.get(ENV_VERIFY)!r}: expected a whole number of "
                   f"rounds from 0 (none) to {MAX_VERIFY_ROUNDS}")
    return n


def read_config(additional_config: Mapping | None,
                environ: Mapping[str, str] | None = None) -> PluginConfig | None:
    """The ``PluginConfig`` from ``additional_config["l2sched"]`` when that
    section exists (the environment is then not read), else from the
    environment (``L2SCHED_SCHEDULE``, ``L2SCHED_SET``, ``L2SCHED_BACKEND``,
    ``L2SCHED_LINT``, ``L2SCHED_DEVICE``, ``L2SCHED_ON_PREDICTED_LOSS``,
    ``L2SCHED_FILLS``, ``L2SCHED_VERIFY``, ``L2SCHED_CAPTURE_LAUNCH``,
    ``L2SCHED_AGREE_TIMEOUT_S``; ``environ`` default
    ``os.environ``); ``None`` when neither names a schedule. Raises
    ``L2sPluginError("bad configuration", ...)`` naming the bad key or
    variable."""
    env = os.environ if environ is None else environ
    extra = additional_config or {}
    if "l2sched" in extra:
        return _from_section(extra["l2sched"])
    return _from_env(env)
