"""GPU test (CUDA, compute capability >= 9.0) of ``bench tp``'s
collective-interference measurement in one process: a 1-rank NCCL group,
the all-reduce captured in a CUDA graph alone and with each fill kernel of
the h200 profile forked onto the side stream before it, replayed in
lockstep rounds (``tp_allreduce.measure_allreduce_fill``). A pre-flight of
the 2-GPU run's new GPU path (graphs with an NCCL all-reduce and a fill on
the side stream, external events, the fill source switch and L2 flush)."""

import os
import sys
from types import SimpleNamespace

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from extras import TORCH_MISSING  # noqa: E402

torch = pytest.importorskip("torch", reason=TORCH_MISSING)

_ok = torch.cuda.is_available() and torch.cuda.get_device_capability(0) >= (9, 0)
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _ok, reason="needs CUDA with sm >= 9.0")]


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    import torch.distributed as dist

    from l2sched.bench.tp import MULTICAST_OFF
    if dist.is_initialized():
        pytest.skip("a process group already exists in this process")
    os.environ.update(MULTICAST_OFF)
    store = tmp_path_factory.mktemp("pg") / "store"
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    yield dist, dist.new_group(backend="gloo")
    dist.destroy_process_group()


def test_allreduce_with_each_fill_kernel_in_a_graph(groups):
    from l2sched.bench.tp_allreduce import measure_allreduce_fill
    from l2sched.bench.tp_step import has_external_events
    from l2sched.device import load_device
    from l2sched.runtime import kernel as K
    dist, ctl = groups
    if not has_external_events(torch):
        pytest.skip("torch without external CUDA events")
    prof = load_device("h200")
    runner = SimpleNamespace(torch=torch, dist=dist, cuda=True,
                             device=torch.device("cuda", 0), hidden=4096,
                             external_events=True)
    out = measure_allreduce_fill(runner, prof, [1, 64], 30 * 10**6, 5, ctl, seed=3)
    if K.disabled_reason():
        pytest.skip(f"fill kernels disabled: {K.disabled_reason()}")
    assert "error" not in out
    assert {m: x.get("error") for m, x in out["modes"].items()} == \
        {m: None for m in prof.fill_modes}
    assert [r["tokens"] for r in out["rows"]] == [1, 64]
    for row in out["rows"]:
        assert "error" not in row, row.get("error")
        assert row["alone_us"]["n"] == 5 and row["alone_us"]["median"] > 0
        assert set(row["modes"]) == set(prof.fill_modes)
        for x in row["modes"].values():
            assert x["with_fill_us"]["median"] > 0 and x["extra_us"]["n"] == 5
    torch.cuda.synchronize()
