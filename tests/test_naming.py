"""One name for the device profile (issue 47): a loaded ``DeviceProfile``
is called ``device_profile``; ``device`` is the name or path a schedule or
``--device`` writes (``l2sched/device/__init__.py``).

Every ``l2sched/**/*.py`` is parsed; these must be named
``device_profile``:

- a function parameter annotated ``DeviceProfile`` (or
  ``DeviceProfile | None``, ``Optional[DeviceProfile]``, the same as a
  string) or defaulting to a loaded profile (``load_device(...)``);
- a class field (a dataclass's ``name: type`` line) of those types.

A variable assigned straight from a loader (``load_device``,
``load_device_text``, ``parse_device``, ``check_device_arg``,
``checked_device_profile``) is ``device_profile``, or ``ROLE_device_profile``
where a scope holds a second one. The checker is tested on a bad snippet
too, so it is known to fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ROOT / "l2sched"

NAME = "device_profile"
TYPE = "DeviceProfile"
#: Calls that return a loaded profile.
LOADERS = {"load_device", "load_device_text", "parse_device", "check_device_arg",
           "checked_device_profile"}


def _call_name(node) -> str | None:
    """The called function's last name of ``node`` when it is a call."""
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)


def _is_profile_type(ann) -> bool:
    """True when annotation ``ann`` is one profile, possibly optional:
    ``DeviceProfile``, ``X.DeviceProfile``, ``DeviceProfile | None``,
    ``Optional[DeviceProfile]`` or any of these as a string (not a
    collection of profiles)."""
    if ann is None:
        return False
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            return _is_profile_type(ast.parse(ann.value, mode="eval").body)
        except SyntaxError:
            return False
    if isinstance(ann, ast.Name):
        return ann.id == TYPE
    if isinstance(ann, ast.Attribute):
        return ann.attr == TYPE
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        sides = [ann.left, ann.right]
        none = [s for s in sides if isinstance(s, ast.Constant) and s.value is None]
        return len(none) == 1 and any(_is_profile_type(s) for s in sides)
    if isinstance(ann, ast.Subscript) and getattr(ann.value, "id", None) == "Optional":
        return _is_profile_type(ann.slice)
    return False


def _params_with_defaults(fn) -> list[tuple[ast.arg, ast.expr | None]]:
    """Every parameter of ``fn`` with its default (None without one)."""
    a = fn.args
    pos = a.posonlyargs + a.args
    pos_defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    return list(zip(pos, pos_defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))


def naming_problems(source: str, where: str) -> list[str]:
    """``where:line: ...`` for every name in ``source`` that holds a loaded
    profile under another name than ``device_profile`` (module docstring)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for arg, default in _params_with_defaults(node):
                typed = _is_profile_type(arg.annotation)
                loaded = _call_name(default) in LOADERS
                if (typed or loaded) and arg.arg != NAME:
                    out.append(f"{where}:{arg.lineno}: parameter {arg.arg!r} of "
                               f"{node.name}() holds a {TYPE}: name it {NAME}")
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                        and _is_profile_type(item.annotation) and item.target.id != NAME):
                    out.append(f"{where}:{item.lineno}: field {item.target.id!r} of "
                               f"{node.name} holds a {TYPE}: name it {NAME}")
        elif isinstance(node, ast.Assign) and _call_name(node.value) in LOADERS:
            for target in node.targets:
                if isinstance(target, ast.Name) and not (
                        target.id == NAME or target.id.endswith("_" + NAME)):
                    out.append(f"{where}:{node.lineno}: {target.id!r} = "
                               f"{_call_name(node.value)}(...) holds a {TYPE}: "
                               f"name it {NAME}")
    return out


def test_device_profile_has_one_name():
    problems, scanned = [], 0
    for path in sorted(PRODUCT.rglob("*.py")):
        scanned += 1
        problems += naming_problems(path.read_text(encoding="utf-8"),
                                    str(path.relative_to(ROOT)))
    assert scanned > 100
    assert not problems, "\n".join(problems)


def test_the_check_finds_each_kind_of_bad_name():
    bad = (
        "from dataclasses import dataclass\n"
        "def lint(schedule, device: DeviceProfile): ...\n"
        "def fit(*, profile: 'DeviceProfile | None' = None): ...\n"
        "def bench(prof=load_device('h200')): ...\n"
        "@dataclass\n"
        "class Run:\n"
        "    device: DeviceProfile\n"
        "def cmd(args):\n"
        "    base = load_device(args.base)\n")
    found = naming_problems(bad, "bad.py")
    assert [p.split(":")[1] for p in found] == ["2", "3", "4", "7", "9"], found
    good = (
        "def lint(schedule, device: str, device_profile: DeviceProfile): ...\n"
        "def many(device_profiles: list[DeviceProfile]): ...\n"
        "def cmd(args):\n"
        "    device_profile = load_device(args.device)\n"
        "    low_device_profile = load_device_text('', 'x')\n")
    assert naming_problems(good, "good.py") == []
