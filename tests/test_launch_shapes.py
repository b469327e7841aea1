"""Issue 48: a fill launch asks for the CTAs its bytes need, never the whole
grid for a small fill (``fill_kernels.launch_ctas``, ``launch_shapes.sized_specs``)."""

from __future__ import annotations

import dataclasses

import pytest

from l2sched.compiler.plan import ByteRange, Plan, WindowIssue
from l2sched.device import load_device
from l2sched.runtime.cuda import CudaRuntime
from l2sched.runtime.fill_kernels import launch_ctas
from l2sched.runtime.kernel import KernelSpec

MB = 10 ** 6
BULK = KernelSpec(mode="bulk", grid=264, threads=32, chunk=16384)
LOAD = KernelSpec(mode="load", grid=1056, threads=128, chunk=128)
COPY = KernelSpec(mode="copy", grid=66, threads=32, chunk=32768, stages=4)


def _chunks(spec, sizes, chunk):
    return sum(-(-(n & -16) // chunk) for n in sizes)


@pytest.mark.parametrize("spec,sizes,want", [
    (BULK, [524_288], 1),             # 0.5 MiB = 32 chunks of 16 KiB: one CTA of 32 workers
    (BULK, [20 * MB], 64),            # 1221 chunks -> 39 CTAs -> 64
    (BULK, [200 * MB], 264),          # more chunks than workers: the whole grid
    (LOAD, [524_288], 32),            # 4096 chunks of 128 B, 128 workers a CTA
    (COPY, [524_288], 16),            # a CTA per worker: 16 chunks of 32 KiB
    (COPY, [100 * MB], 66),
    (BULK, [4096, 4096, 4096], 1),    # one chunk per row
    (BULK, [], 1),                    # nothing bound: one CTA that exits
    (BULK, [5 * MB, -1], 264),        # a lazy whole tensor of unknown size: the whole grid
])
def test_launch_ctas_gives_each_worker_at_most_one_chunk_with_few_ctas(spec, sizes, want):
    got = launch_ctas(spec, sizes)
    assert got == want
    chunk = 128 if spec.mode == "load" else spec.chunk
    per_cta = 1 if spec.mode == "copy" else spec.threads
    if all(n >= 0 for n in sizes):
        # as many workers as chunks (or the whole grid's): nothing a worker issues changes
        assert got * per_cta >= min(_chunks(spec, sizes, chunk), spec.grid * per_cta)
        assert got == spec.grid or got // 2 * per_cta < max(1, _chunks(spec, sizes, chunk))


def _plan(issues):
    return Plan(schedule="t", model="glm5next", device="h200", tp=1, tp_rank=0, ep=False,
                policy="evict_last", max_tokens=256, set_aside=0, num_layers=4,
                issues=tuple(issues))


def _wi(window, hook, layer, *sizes, kernel=""):
    return WindowIssue(window, hook, layer, sum(sizes),
                       tuple(ByteRange(layer, f"{window}.w{k}", 0, n)
                             for k, n in enumerate(sizes)), kernel=kernel)


def test_each_launch_group_gets_the_grid_of_its_bytes_one_spec_per_group():
    plan = _plan([_wi("A", "attn.pre_all_reduce", 1, 262_144), _wi("B", "attn.pre_all_reduce",
                  1, 262_144, 20 * MB), _wi("C", "moe.pre_all_reduce", 1, 524_288),
                  _wi("D", "moe.pre_all_reduce", 2, 524_288, kernel="copy")])
    fill = load_device("h200").fill_modes
    rt = CudaRuntime(plan, fill=fill)
    assert rt.launch_groups == [(0, 1), (2,), (3,)]
    grids = [s.grid for s in rt.specs]
    assert grids[0] == grids[1] == launch_ctas(rt.specs[0], [262_144, 262_144, 20 * MB]) == 64
    assert grids[2] == 1 and grids[3] == 16
    assert [dataclasses.replace(s, grid=0) for s in rt.specs[:2]][0] == \
        dataclasses.replace(rt.specs[1], grid=0)
    # grid=N launches exactly N; size_grid=False keeps the profile's grid
    assert {s.grid for s in CudaRuntime(plan, fill=fill, grid=8).specs} == {8}
    full = CudaRuntime(plan, fill=fill, size_grid=False).specs
    assert [s.grid for s in full] == [fill["bulk"].grid] * 3 + [fill["copy"].grid]
    # one launch per issue: each issue sized alone
    alone = CudaRuntime(plan, fill=fill, merge_fills=False).specs
    assert [s.grid for s in alone] == [1, 64, 1, 16]
