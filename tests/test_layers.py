"""One layer order: pyproject.toml's import-linter layers contract is the
truth; README's pipeline table and the package map in
``l2sched/__init__.py`` list the same packages in the same order (bottom up)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

import l2sched

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = "pipeline stages import only the stages below them"


def contract_layers() -> list[set[str]]:
    """The stage packages of pyproject's layers contract, bottom up, one set
    per layer (``a | b``: independent siblings); base modules are left out
    (they are not packages of the table)."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    [contract] = [c for c in data["tool"]["importlinter"]["contracts"]
                  if c["name"] == CONTRACT]
    layers = []
    for layer in reversed(contract["layers"]):
        names = {n.strip().removeprefix("l2sched.") for n in layer.split("|")}
        stages = {n for n in names if (ROOT / "l2sched" / n).is_dir()}
        if stages:
            layers.append(stages)
    return layers


def readme_order() -> list[str]:
    """The packages of README's pipeline table (``l2sched/X/``), top row first."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    return [m.group(1) for line in rows
            if (m := re.search(r"`l2sched/(\w+)/`", line.split("|")[2]))]


def package_map_order() -> list[str]:
    """The packages the package map in ``l2sched/__init__.py`` lists, in order."""
    return re.findall(r"^- ``(\w+)``:", l2sched.__doc__, flags=re.M)


def follows(order: list[str], layers: list[set[str]]) -> bool:
    """Whether ``order`` holds every stage exactly once, each layer's
    stages (in any order among siblings) before the next layer's."""
    flat = [sorted(layer) for layer in layers]
    if sorted(order) != sorted(n for layer in flat for n in layer):
        return False
    rank = {n: i for i, layer in enumerate(layers) for n in layer}
    return [rank[n] for n in order] == sorted(rank[n] for n in order)


def test_every_stage_package_is_a_layer():
    packages = {p.name for p in (ROOT / "l2sched").iterdir()
                if (p / "__init__.py").exists() and p.name != "data"}
    assert packages == set().union(*contract_layers())


@pytest.mark.parametrize("name,order", [("README's table", readme_order),
                                        ("l2sched/__init__.py's map", package_map_order)])
def test_listing_follows_the_contract(name, order):
    got = order()
    assert follows(got, contract_layers()), (
        f"{name} lists {got}; pyproject's layers, bottom up: {contract_layers()}")


def test_follows_catches_a_swap():
    layers = [{"device"}, {"lint", "runtime"}, {"cli"}]
    assert follows(["device", "runtime", "lint", "cli"], layers)
    assert not follows(["lint", "device", "runtime", "cli"], layers)
    assert not follows(["device", "lint", "cli"], layers)
