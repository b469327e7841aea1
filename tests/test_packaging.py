"""Issue 43: what users install holds the whole package. The wheel and the
sdist are built from a copy of the checkout with setuptools' own PEP 517
backend (offline; setuptools >= 77 comes with the ``test`` extra), and
their file lists are compared with the checkout: every file of every
package folder under ``l2sched/`` (modules and the data the code reads:
model configs, plan schema, device profiles), the grammar and the shipped
schedules, and nothing else (no ``lab/``, ``tests/`` or ``benchmarks/``).
The wheel of 2af54cc lacked ``l2sched.model.adapters.qwen3_moe``, so every
command of an installed l2sched ended in ModuleNotFoundError.

.ci/smoke-installed installs the two and runs the CLI and the vLLM entry
point from outside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Source folders at the repository root that ship as data packages inside
#: ``l2sched`` (setup.py's ``ROOT_DATA_PACKAGES``), and where they land.
#: Their subfolders (``schedules/bench/``, the lab's) do not ship.
ROOT_DATA = {"grammar": "l2sched/grammar", "schedules": "l2sched/schedules"}

#: What building leaves in a checkout, never part of the source.
NOT_SOURCE = (".git", ".venv", "__pycache__", "*.pyc", "*.egg-info", "build", "dist",
              ".pytest_cache", ".hypothesis", ".whl", ".vllmstage")


def package_files(src: Path) -> dict[str, str]:
    """Installed path -> path in the source tree ``src`` (both relative,
    ``/``-separated) of every file the wheel must hold: each file under
    ``l2sched/`` but bytecode, and each file directly in a ``ROOT_DATA``
    folder."""
    out = {}
    for f in (src / "l2sched").rglob("*"):
        rel = f.relative_to(src)
        if f.is_file() and "__pycache__" not in rel.parts and f.suffix != ".pyc":
            out[rel.as_posix()] = rel.as_posix()
    for folder, package in ROOT_DATA.items():
        for f in (src / folder).iterdir():
            if f.is_file() and f.suffix != ".pyc":
                out[f"{package}/{f.name}"] = f"{folder}/{f.name}"
    return out


def build(src: Path, kind: str, out: Path) -> Path:
    """Build the ``kind`` (``wheel`` or ``sdist``) of the source tree
    ``src`` into ``out`` with ``setuptools.build_meta`` in a fresh
    interpreter; the built file's path. Fails the test with the backend's
    output when the build fails."""
    code = ("import sys\nfrom setuptools import build_meta\n"
            f"print(build_meta.build_{kind}(sys.argv[1]))")
    r = subprocess.run([sys.executable, "-c", code, str(out)], cwd=src,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"building the {kind} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return out / r.stdout.strip().splitlines()[-1]


def wheel_files(path: Path) -> set[str]:
    """The files of wheel ``path`` outside its ``.dist-info`` folder."""
    with zipfile.ZipFile(path) as z:
        return {n for n in z.namelist()
                if not n.endswith("/") and ".dist-info/" not in n}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A copy of the checkout (without build outputs, which setuptools
    would pack again), its wheel and its sdist."""
    import setuptools
    have = tuple(int(p) for p in setuptools.__version__.split(".")[:2])
    assert have >= (77, 0), (f"setuptools {setuptools.__version__} cannot build "
                             f"l2sched (needs >= 77: pip install -e '.[test]')")
    tmp = tmp_path_factory.mktemp("packaging")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    wheel = build(src, "wheel", tmp / "dist")
    sdist = build(src, "sdist", tmp / "dist")
    return src, wheel, sdist, tmp


def test_wheel_holds_exactly_the_package_files(built):
    """Every package folder under ``l2sched/`` (the Qwen3-MoE adapter's
    included) with all its files, the grammar and the shipped schedules are
    in the wheel, and nothing else is."""
    src, wheel, _sdist, _tmp = built
    want = set(package_files(src))
    have = wheel_files(wheel)
    packages = sorted({str(Path(p).parent) for p in want
                       if p.endswith("/__init__.py") and p not in have})
    assert packages == [], f"package folders missing from {wheel.name}: {packages}"
    assert sorted(want - have) == [], f"files missing from {wheel.name}"
    assert sorted(have - want) == [], f"files in {wheel.name} that are no package's"
    assert "l2sched/model/adapters/qwen3_moe/__init__.py" in have
    with zipfile.ZipFile(wheel) as z:
        entry_points = z.read("l2sched-0.1.0.dist-info/entry_points.txt").decode()
    assert "l2sched = l2sched.cli:main" in entry_points
    assert "[vllm.general_plugins]\nl2sched = l2sched.vllm:register" in entry_points


def test_sdist_builds_the_same_wheel(built):
    """The sdist holds every source file of the wheel (and no tests, lab or
    benchmarks), and the wheel built from the unpacked sdist, as pip does
    when it installs one, has the same files as the checkout's."""
    src, wheel, sdist, tmp = built
    with tarfile.open(sdist) as t:
        # the "data" filter where this Python has it (3.10.12+, 3.11.4+)
        t.extractall(tmp / "unpacked", **({"filter": "data"}
                                          if hasattr(tarfile, "data_filter") else {}))
        names = {m.name.split("/", 1)[1] for m in t.getmembers()
                 if m.isfile() and "/" in m.name}
    missing = sorted(set(package_files(src).values()) - names)
    assert missing == [], f"source files missing from {sdist.name}"
    assert {"pyproject.toml", "setup.py", "README.md"} <= names
    stray = sorted(n for n in names if n.split("/")[0] in ("tests", "lab", "benchmarks"))
    assert stray == [], f"{sdist.name} ships what is not the package"
    (unpacked,) = (tmp / "unpacked").iterdir()
    again = build(unpacked, "wheel", tmp / "from-sdist")
    assert sorted(wheel_files(again) ^ wheel_files(wheel)) == []


#: Run in a fresh interpreter whose only l2sched is the wheel unpacked in
#: ``argv[1]`` (a pure-Python wheel unpacked is an install): the commands of
#: .ci/smoke-installed through the wheel's own entry points, from outside
#: the checkout ``argv[2]``.
INSTALLED_RUN = r'''
import contextlib, io, sys
import importlib.metadata as md
from pathlib import Path
site, root = Path(sys.argv[1]), Path(sys.argv[2])
import l2sched
assert Path(l2sched.__file__).is_relative_to(site), l2sched.__file__
(dist,) = md.distributions(path=[str(site)])
eps = {(e.group, e.name): e for e in dist.entry_points}
main = eps["console_scripts", "l2sched"].load()
sched, data = site / "l2sched" / "schedules", site / "l2sched" / "data"
glm, qwen = sched / "glm53-flash-sm120-tp4.l2s", sched / "qwen3-30b-a3b-h200-tp1.l2s"
for args in (["check", glm, qwen], ["lint", glm], ["lint", qwen],
             ["inventory", "--tp", "4"],
             ["inventory", "--model-config", data / "qwen3-30b-a3b-config.json"],
             ["docs", "hooks", "--check", "--file", root / "docs" / "hooks.md"],
             ["docs", "hooks", "--model", "qwen3_moe", "--check",
              "--file", root / "docs" / "hooks-qwen3_moe.md"],
             ["docs", "lint", "--check", "--file", root / "docs" / "lint.md"]):
    print("+ l2sched", *args, flush=True)
    assert main([str(a) for a in args]) == 0, args
register = eps["vllm.general_plugins", "l2sched"].load()
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    result = register()
assert (result, out.getvalue(), err.getvalue()) == (None, "", ""), (out.getvalue(), err.getvalue())
print("installed run OK")
'''


def test_installed_wheel_runs_from_outside_the_checkout(built):
    """The wheel, unpacked as pip installs it and alone on the path, runs
    from another directory: check and lint of one shipped schedule per
    model (the packaged copies), inventory for each adapter, the generated
    docs equal to the checkout's (``docs lint`` lints the packaged
    schedules its rules quote), and the vLLM entry point with no
    configuration doing nothing. On 2af54cc every command ended in
    ``ModuleNotFoundError: l2sched.model.adapters.qwen3_moe``."""
    _src, wheel, _sdist, tmp = built
    site = tmp / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    away = tmp / "elsewhere"
    away.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("L2SCHED_")}
    env.update(PYTHONPATH=str(site), PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([sys.executable, "-c", INSTALLED_RUN, str(site), str(ROOT)],
                       cwd=away, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "installed run OK" in r.stdout, \
        f"{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
