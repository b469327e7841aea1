"""The wheel's packages, found rather than listed (everything else about the
build is in pyproject.toml).

pyproject.toml's ``[tool.setuptools] packages`` is either a list or one
``find`` directive, and the wheel needs both: every package folder under
``l2sched/`` (found, so a new folder cannot be left out, as the Qwen3-MoE
adapter once was) and the two data packages whose folders sit at the
repository root. Package data (the grammar, the schedules, the model
configs, the device profiles) is picked by file pattern in pyproject.toml's
``[tool.setuptools.package-data]``. ``lab/``, ``tests/`` and ``benchmarks/``
do not ship. tests/test_packaging.py builds the wheel and the sdist and
checks that every file of every package is in them.
"""

from setuptools import find_namespace_packages, setup

#: Data packages whose folders sit at the repository root and ship inside
#: ``l2sched``, so an installed package finds them with importlib.resources
#: (``l2sched.files.packaged_dir``). ``schedules/bench/`` (the lab's
#: deliberately bad schedules) is not a package and does not ship.
ROOT_DATA_PACKAGES = {"l2sched.grammar": "grammar", "l2sched.schedules": "schedules"}

setup(
    packages=find_namespace_packages(include=["l2sched", "l2sched.*"],
                                     exclude=["*.__pycache__"])
    + sorted(ROOT_DATA_PACKAGES),
    package_dir=ROOT_DATA_PACKAGES,
)
