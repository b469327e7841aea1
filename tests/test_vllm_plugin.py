"""The vLLM plugin on vLLM 0.33.0's real ``Glm5NextForCausalLM``, TP2, CPU.

Two gloo ranks each build the real model from a tiny GLM-5.3-shaped config
(layer 0 KDA+dense, layers 1-2 KDA+MoE, layer 3 MLA+MoE), run decode-shaped
forwards through vLLM's own layer code, then go through the plugin path:
``l2sched.vllm.register()`` wraps vLLM's
``process_weights_after_loading``; calling it with
``additional_config={"l2sched": {...}}`` compiles the shipped SM120 schedule
(``set tp=2`` and a small window B so it carries into C) against the rank's
live inventory and installs it with the dry-run backend. The dry-run events
and vLLM's real all-reduce calls are recorded in one ordered trace.

Asserted: per layer kind the exact interleaving of window issues with the
real all-reduces (A after the first projection GEMM; B after the o_proj GEMM
and before its all-reduce; C after the routed-expert output and before the
MoE all-reduce); one join per forward, after the last layer; next-layer and
last-to-first targets; bitwise identical outputs with and without the plan;
and that a bad schedule path, a syntax error, a TP mismatch and a lint error
each give exactly one "prefetch OFF" line per rank and the model still runs.

CPU substitutions (kernels with no CPU implementation in the CUDA wheel; see
``vllm_forward.SUBSTITUTIONS``):

1. CustomOp modules (mHC pre/fused-post-pre/post, FusedRMSNormGated,
   SiluAndMulWithClamp, RMSNorm) run vLLM's own ``forward_native``.
2. ``LinearBase.cpu_linear`` = ``F.linear`` (vLLM's own CPU fallback),
   wrapped to record each GEMM.
3. ``fused_q_kv_rmsnorm`` (Triton) -> two fp32 RMSNorms.
4. ``fwht128_quant_fp8`` (Triton) -> orthonormal Walsh-Hadamard over 128-wide
   blocks + per-row fp8 e4m3 quantisation.
5. ``MLAAttention.impl.record_logical_topk_ready`` (CUDA event) -> no-op.
6. ``RoutedExperts.forward_modular`` (CPU MoE backend needs ``_C`` ops) ->
   per-token reference: w13 GEMM, the layer's SiluAndMulWithClamp, w2 GEMM,
   top-k weighted sum.
7. The body of ``process_weights_after_loading``: only the deferred attention
   layers' post-load step (MLA ``W_UK_T``/``W_UV``) and the model-level hook
   (the CPU per-module step would repack linears for ``_C`` GEMMs); the
   plugin's wrapper around it is the real one.
8. Attention cores (KDA conv + recurrence, sparse MLA decode, indexer top-k)
   do not run: forwards use ``attn_metadata=None``, vLLM's own profile-run
   path where the cores return early. Every hook point used here lies outside
   the cores.
9. In that path the KDA core leaves its ``torch.empty`` output
   uninitialised; it is zero-filled, as vLLM's MLA profile-run path does.

The lint-error case injects a stand-in ``l2sched.lint`` module that reports
one error (the plugin's handling is what is tested; the real lint has its own
tests). Runtime on a 2-core machine: about a minute.
"""

from __future__ import annotations

import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vllm_cpu import TINY_GLM, plugin_log_records, run_ranks, vllm_available  # noqa: E402

_OK, _WHY = vllm_available()
if not _OK:
    if os.environ.get("L2SCHED_REQUIRE_VLLM") == "1":
        raise RuntimeError(f"L2SCHED_REQUIRE_VLLM=1 but vLLM tests cannot run: {_WHY}")
    pytestmark = [pytest.mark.vllm, pytest.mark.skip(reason=_WHY)]
else:
    pytestmark = [pytest.mark.vllm]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEDULE = os.path.join(ROOT, "schedules", "glm53-flash-sm120-tp4.l2s")

#: A tiny GLM-5.3 config: 4 layers, hidden 256, 8 experts.
TINY = dict(TINY_GLM)

#: B small enough to leave a remainder for C (carry) on the tiny model.
PLUGIN_SECTION = {"schedule": SCHEDULE, "backend": "dry-run",
                  "set": {"tp": "2", "window.B.budget": "64KiB"}}


def _token(ev) -> str | None:
    """A compact token for the events the interleaving assertions read."""
    if ev[0] == "gemm":
        name = ev[1]
        for suffix in ("self_attn.in_proj_qkvbfg_a", "self_attn.fused_qkv_a_proj",
                       "self_attn.o_proj", "mlp.down_proj"):
            if name.endswith(suffix):
                layer = name.split(".")[2]
                return f"gemm {suffix.split('.')[-1]} {layer}"
        return None
    if ev[0] == "experts":
        return f"experts {ev[1].split('.')[2]}"
    if ev[0] == "all_reduce":
        site = ev[1]
        kind = ("linear" if "layers/linear.py" in site else
                "moe" if "_maybe_reduce_final_output" in site else
                "embed" if "vocab_parallel_embedding" in site else site)
        return f"ar {kind}"
    if ev[0] == "l2s":
        op, window, layer = ev[1], ev[2], ev[3]
        return "join" if op == "join" else f"{op} {window} {layer}"
    return None


def _split_batch(cfg, name):
    """Turn on DBO (``enable_dbo``) or micro-batching (``ubatch_size=2``) in
    the rank's parallel config; returns the undo."""
    pc = cfg.parallel_config
    saved = (pc.enable_dbo, pc.ubatch_size)
    if name == "dbo":
        object.__setattr__(pc, "enable_dbo", True)
    else:
        object.__setattr__(pc, "ubatch_size", 2)

    def undo():
        object.__setattr__(pc, "enable_dbo", saved[0])
        object.__setattr__(pc, "ubatch_size", saved[1])
    return undo


def _fake_gb10(torch):
    """Make torch report one CUDA GPU, an "NVIDIA GB10" (sm_121, 24 MiB L2,
    48 SMs), and the kernel module call it supported; returns the undo."""
    import types

    from l2sched.runtime import kernel as K

    props = types.SimpleNamespace(name="NVIDIA GB10", L2_cache_size=24 * 2**20,
                                  multi_processor_count=48, major=12, minor=1)
    fakes = {"is_available": lambda: True, "current_device": lambda: 0,
             "get_device_properties": lambda d=0: props,
             "get_device_capability": lambda d=0: (12, 1),
             "get_device_name": lambda d=0: "NVIDIA GB10"}
    saved = {k: getattr(torch.cuda, k) for k in fakes}
    saved_supported = K.device_supported
    for k, v in fakes.items():
        setattr(torch.cuda, k, v)
    K.device_supported = lambda d=0: (True, "")

    def undo():
        for k, v in saved.items():
            setattr(torch.cuda, k, v)
        K.device_supported = saved_supported
    return undo


def _reload_summary(model, records, base, vf, cfg, *, o_proj_ptr=None):
    """After a reload path ran: what is installed, what the log says, whether
    the rows were refreshed before any forward, and what one forward
    issues."""
    from l2sched.runtime.install import tensor_row
    from l2sched.vllm import plugin as vllm_plugin

    got = {"installed": len(vllm_plugin.INSTALLED), "records": list(records),
           "off_lines": [r for r in records if "prefetch OFF" in r],
           "summaries": [r for r in records if r.startswith("INFO") and
                         " installed, backend" in r]}
    if not vllm_plugin.INSTALLED:
        return got
    inst = vllm_plugin.INSTALLED[-1]
    rt = inst.runtime
    w = model.model.layers[3].self_attn.o_proj.weight
    want, have = [], []
    for i, wi in enumerate(inst.plan.issues):
        for j, r in enumerate(wi.ranges):
            if (r.layer, r.tensor) == (3, "self_attn.o_proj.weight"):
                want.append(tensor_row(w, r.offset, r.nbytes))
                have.append(rt.rows[i][j] if j < len(rt.rows[i]) else None)
    got["o_proj_rows_refreshed"] = bool(want) and want == have
    got["o_proj_ptr_moved"] = o_proj_ptr is not None and o_proj_ptr != w.data_ptr()
    rt.events.clear()
    same = vf.output_bytes(vf.decode_forward(model, cfg)) == base
    ops = [e.op for e in rt.events]
    got.update(same_output=same, launches=ops.count("launch"), joins=ops.count("join"),
               issues=len(inst.plan.issues), runtimes=len({id(i.runtime) for i in
                                                           vllm_plugin.INSTALLED}))
    return got


def _reload_scenario(model, cfg, records, base):
    """Issue 17 item 1: every reload path removes the installation exactly,
    installs the new plan (refreshing the rows at once) and issues only the
    new plan's fills."""
    import types

    import torch
    import vllm.model_executor.model_loader.reload.inplace as inplace
    import vllm.model_executor.model_loader.utils as loader_utils
    import vllm.v1.worker.gpu_worker as gpu_worker
    import vllm_forward as vf

    from l2sched.vllm import plugin as vllm_plugin

    out = {}
    w = model.model.layers[3].self_attn.o_proj.weight
    old = vllm_plugin.INSTALLED[-1]

    # 1. a second process_weights_after_loading after a weight's storage moved
    ptr = w.data_ptr()
    w.data = w.data.clone()
    records.clear()
    loader_utils.process_weights_after_loading(model, cfg.model_config,
                                               torch.device("cpu"))
    out["second_pwal"] = _reload_summary(model, records, base, vf, cfg, o_proj_ptr=ptr)
    out["second_pwal"]["old_hooks_removed"] = all(
        i.removed for i in old.installations)

    # 2. vLLM's reload_weights (in kernel format, as RL weight updates do),
    # with a storage swap inside it like a post-load step that rebuilds a
    # weight (MLA's W_UK_T/W_UV in the public reports)
    weights = [(n, p.detach().clone()) for n, p in model.named_parameters()]

    def swapping_iter():
        yield from weights
        w.data = w.data.clone()

    ptr = w.data_ptr()
    records.clear()
    with torch.no_grad():  # as the worker's RPC runs it
        inplace.reload_weights(cfg, model, swapping_iter(), None, False)
    out["reload_weights"] = _reload_summary(model, records, base, vf, cfg,
                                            o_proj_ptr=ptr)

    # 3. a wake-up after sleep: vLLM's own Worker.wake_up on a stand-in
    # worker (CuMemAllocator has no CPU build); the weights moved meanwhile
    fake = types.SimpleNamespace(
        sleep_mode_backend=types.SimpleNamespace(resume=lambda tags: None),
        vllm_config=cfg, _sleep_saved_parameters={}, _sleep_saved_buffers={},
        _sleep_saved_draft_buffers={}, model_runner=types.SimpleNamespace(model=model),
        get_draft_model=lambda: None, synchronize_device=lambda: None)
    ptr = w.data_ptr()
    w.data = w.data.clone()
    records.clear()
    gpu_worker.Worker.wake_up(fake, None)
    out["wake_up"] = _reload_summary(model, records, base, vf, cfg, o_proj_ptr=ptr)

    # 4. a reload whose new plan cannot be installed: the old one goes too
    real = vllm_plugin.run_lint

    def failing_lint(*a, **k):
        raise RuntimeError("stand-in lint crash")

    vllm_plugin.run_lint = failing_lint
    try:
        records.clear()
        loader_utils.process_weights_after_loading(model, cfg.model_config,
                                                   torch.device("cpu"))
    finally:
        vllm_plugin.run_lint = real
    old = vllm_plugin.INSTALLED[-1] if vllm_plugin.INSTALLED else None
    out["failed_reload"] = _reload_summary(model, records, base, vf, cfg)
    # and prefetch comes back at the next load
    records.clear()
    loader_utils.process_weights_after_loading(model, cfg.model_config,
                                               torch.device("cpu"))
    out["after_failed"] = _reload_summary(model, records, base, vf, cfg)
    del old
    return out


def _loss_lint(schedule, inventory, **kw):
    """A stand-in ``run_lint``: the real lint, plus an L2S110 finding (23.4
    us predicted loss) at M=4."""
    from l2sched.lint import run_lint
    from l2sched.lint.rules.base import Finding

    run = run_lint(schedule, inventory, **kw)
    if kw.get("tokens") == 4:
        run.findings.append(Finding("L2S110", "stand-in predicted loss", None,
                                    {"tokens": 4, "loss_us": 23.4}))
    return run


def _rank_scenario(ctx):
    """Runs in each rank process (see the module docstring)."""
    import tempfile
    import types

    import torch
    import vllm.model_executor.model_loader.utils as loader_utils
    import vllm_forward as vf

    import l2sched.vllm as vllm_registration
    from l2sched.errors import Diagnostic
    from l2sched.vllm import plugin as vllm_plugin

    records = plugin_log_records()

    model = ctx.build()
    cfg = ctx.vllm_config
    vf.fill_weights(model, seed=1000 + ctx.rank)
    trace = vf.Trace()
    vf.apply_cpu_substitutions(model, trace)
    out = {"rank": ctx.rank}

    trace.on = False
    base = vf.output_bytes(vf.decode_forward(model, cfg))

    # The plugin path: register() wraps process_weights_after_loading, which
    # vLLM's loaders call after loading. When l2sched is pip-installed, vLLM
    # itself already ran register() through the entry point in this process.
    out["registered_by_vllm"] = vllm_registration._registered
    vllm_registration.register()
    vllm_registration.register()  # idempotent
    assert getattr(loader_utils.process_weights_after_loading, "__l2sched__", False)
    # Substitution 7: the same wrapper around the CPU body.
    loader_utils.process_weights_after_loading = vf.cpu_post_load
    vllm_registration._patch_loader_utils(loader_utils)
    assert getattr(loader_utils.process_weights_after_loading, "__l2sched__", False)
    cfg.additional_config = {"l2sched": dict(PLUGIN_SECTION)}
    records.clear()
    loader_utils.process_weights_after_loading(model, cfg.model_config,
                                               torch.device("cpu"))
    out["activation_log"] = list(records)
    assert vllm_plugin.INSTALLED, records
    inst = vllm_plugin.INSTALLED[-1]
    rt = inst.runtime
    out["backend"] = type(rt).__name__
    vf.trace_runtime(rt, trace)
    out["plan"] = [(wi.window, wi.hook, wi.layer, wi.carried_in,
                    [(r.layer, r.tensor, r.nbytes) for r in wi.ranges])
                   for wi in inst.plan.issues]
    out["left_over"] = sum(lo.nbytes for lo in inst.plan.left_over)

    trace.events.clear()
    trace.on = True
    with_plan = []
    for _ in range(2):
        with_plan.append(vf.output_bytes(vf.decode_forward(model, cfg)))
        out.setdefault("traces", []).append(list(trace.events))
        trace.events.clear()
    out["rows"] = [list(r) for r in rt.rows]
    out["same_with_plan"] = [b == base for b in with_plan]
    trace.on = False
    out["reload"] = _reload_scenario(model, cfg, records, base)
    trace.on = True
    inst = vllm_plugin.INSTALLED[-1]
    inst.remove()
    vllm_plugin.INSTALLED.clear()
    out["same_after_remove"] = vf.output_bytes(vf.decode_forward(model, cfg)) == base
    out["events_after_remove"] = [e for e in trace.events if e[0] == "l2s"]
    trace.events.clear()

    # Failure paths: one "prefetch OFF" line per rank, the model still runs.
    with tempfile.TemporaryDirectory() as d:
        bad_syntax = os.path.join(d, "broken.l2s")
        with open(bad_syntax, "w") as f:
            f.write("schedule broken\nmodel glm5next\nwindow A at\n")
        def fake_lint(schedule, inventory, **kw):
            return types.SimpleNamespace(
                findings=[Diagnostic("fill overlaps the expert stream (stand-in)",
                                     severity="error", code="L2S101")])
        cases = {
            "bad_path": ({"schedule": os.path.join(d, "missing.l2s"),
                          "backend": "dry-run"}, None),
            "syntax": ({"schedule": bad_syntax, "backend": "dry-run"}, None),
            "tp_mismatch": ({"schedule": SCHEDULE, "backend": "dry-run"}, None),
            "lint_error": (dict(PLUGIN_SECTION), fake_lint),
            # item 14: malformed sections are "bad configuration" with the
            # real TP rank and the key
            "config_empty": ({}, None),
            "config_set_string": ({"schedule": SCHEDULE,
                                   "set": "window.B.budget=25MB"}, None),
            "config_not_object": ("x.l2s", None),
            # item 3: a GPU the schedule's profile does not describe (same
            # capability family, another L2): prefetch off, nothing installed
            "device_mismatch": (dict(PLUGIN_SECTION, backend="cuda"), None),
            # item 4: DBO / micro-batching run forwards in worker threads
            "dbo": (dict(PLUGIN_SECTION), None),
            "ubatch": (dict(PLUGIN_SECTION), None),
        }
        out["failures"] = {}
        out["tmpdir"] = d
        real_lint = vllm_plugin.run_lint
        for name, (section, lint_fn) in cases.items():
            if lint_fn is not None:
                vllm_plugin.run_lint = lint_fn
            undo = (_fake_gb10(torch) if name == "device_mismatch" else
                    _split_batch(cfg, name) if name in ("dbo", "ubatch") else
                    (lambda: None))
            try:
                cfg.additional_config = {"l2sched": section}
                records.clear()
                got = loader_utils.process_weights_after_loading(
                    model, cfg.model_config, torch.device("cpu"))
            finally:
                vllm_plugin.run_lint = real_lint
                undo()
            trace.events.clear()
            same = vf.output_bytes(vf.decode_forward(model, cfg)) == base
            out["failures"][name] = {
                "returned": got, "installed": len(vllm_plugin.INSTALLED),
                "off_lines": [r for r in records if "prefetch OFF" in r],
                "records": list(records), "same_output": same,
                "l2s_events": [e for e in trace.events if e[0] == "l2s"]}
        # item 6: "lint": "warn" installs despite a lint error, and says so
        vllm_plugin.run_lint = fake_lint
        try:
            cfg.additional_config = {"l2sched": dict(PLUGIN_SECTION, lint="warn")}
            records.clear()
            loader_utils.process_weights_after_loading(
                model, cfg.model_config, torch.device("cpu"))
        finally:
            vllm_plugin.run_lint = real_lint
        out["lint_warn"] = {"installed": len(vllm_plugin.INSTALLED),
                            "records": list(records)}
        for inst in vllm_plugin.INSTALLED:
            inst.remove()
        vllm_plugin.INSTALLED.clear()
        # issue 31: a plan predicted slower at a captured M (a stand-in lint
        # reporting L2S110 at M=4) is refused with one line; warn installs
        out["loss"] = {}
        for mode in ("off", "warn"):
            vllm_plugin.run_lint = _loss_lint
            try:
                section = dict(PLUGIN_SECTION)
                if mode == "warn":
                    section["on_predicted_loss"] = "warn"
                cfg.additional_config = {"l2sched": section}
                records.clear()
                loader_utils.process_weights_after_loading(
                    model, cfg.model_config, torch.device("cpu"))
            finally:
                vllm_plugin.run_lint = real_lint
            out["loss"][mode] = {"installed": len(vllm_plugin.INSTALLED),
                                 "records": list(records)}
            for inst in vllm_plugin.INSTALLED:
                inst.remove()
            vllm_plugin.INSTALLED.clear()
        for inst in vllm_plugin.INSTALLED:
            inst.remove()
        vllm_plugin.INSTALLED.clear()
        out["switch"] = _switch_scenario(model, cfg, records, base, loader_utils)
        out["auto"] = _auto_scenario(model, cfg, records, loader_utils, d)
        out["verify"] = _verify_scenario(model, cfg, records, loader_utils, ctx.rank)
        out["multinode"] = _multinode_scenario(model, cfg, records, loader_utils,
                                               ctx.rank)
    cfg.additional_config = {}
    return out


def _auto_scenario(model, cfg, records, loader_utils, tmpdir):
    """Issue 31 item 2: ``"schedule": "auto"`` fits the live tiny model at
    TP2 on the h200 profile (dry-run backend: no GPU identity to match),
    twice: the second activation reads the first one's cache entry."""
    import torch

    from l2sched.vllm import plugin as vllm_plugin

    os.environ["L2SCHED_CACHE_DIR"] = os.path.join(tmpdir, "auto-cache")
    got = []
    for _ in range(2):
        cfg.additional_config = {"l2sched": {"schedule": "auto", "backend": "dry-run",
                                             "device": "h200"}}
        records.clear()
        loader_utils.process_weights_after_loading(model, cfg.model_config,
                                                   torch.device("cpu"))
        got.append({"records": list(records), "installed": len(vllm_plugin.INSTALLED)})
        for inst in vllm_plugin.INSTALLED:
            inst.remove()
        vllm_plugin.INSTALLED.clear()
    return got


def _verify_scenario(model, cfg, records, loader_utils, rank):
    """Issue 31 item 4, the plugin's ``verify`` option: after the capture
    (vLLM's ``Worker.compile_or_warm_up_model``, wrapped), both ranks time
    their decode graphs with prefetch on/off and agree over vLLM's real
    world group (gloo). The worker is a stand-in holding the real config,
    model and installation; its FULL decode graphs are keyed by vLLM's real
    ``BatchExecutionDescriptor``; on a CPU their replay time is scripted
    (``replay.time_replays``): ``1000 + M`` us, less the rank's gain with
    prefetch on."""
    import types

    import torch
    from vllm.config import CUDAGraphMode
    from vllm.v1.worker import gpu_worker
    from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor

    from l2sched.vllm import plugin as vllm_plugin
    from l2sched.vllm import replay as replay_mod
    from l2sched.vllm.verify_startup import verify_after_capture

    got = {"wrapped": getattr(gpu_worker.Worker.compile_or_warm_up_model,
                              "__l2sched__", False), "cases": {}}
    sizes = [1, 2, 4, 8]
    saved = (cfg.compilation_config.cudagraph_capture_sizes, replay_mod.time_replays)

    class Graph:
        def __init__(self, n):
            self.n, self.replays = n, 0

        def replay(self):
            self.replays += 1

    cases = {"both-faster": ({0: 50.0, 1: 50.0}, True),
             "rank1-slower": ({0: 50.0, 1: -50.0}, True),
             "rank1-no-graphs": ({0: 50.0, 1: 50.0}, rank != 1),
             "verify-0": ({0: 50.0, 1: 50.0}, True)}
    try:
        cfg.compilation_config.cudagraph_capture_sizes = sizes
        for name, (gains, with_graphs) in cases.items():
            cfg.additional_config = {"l2sched": dict(
                PLUGIN_SECTION, verify=0 if name == "verify-0" else 3)}
            loader_utils.process_weights_after_loading(model, cfg.model_config,
                                                       torch.device("cpu"))
            inst = vllm_plugin.INSTALLED[-1]
            graphs = {BatchExecutionDescriptor(CUDAGraphMode.FULL, n, n, 1): Graph(n)
                      for n in sizes} if with_graphs else {}
            # a PIECEWISE graph of the same size is never timed
            graphs[BatchExecutionDescriptor(CUDAGraphMode.PIECEWISE, 4, None)] = None
            calls = []

            def timer(graph, replays, inst=inst, gains=gains, calls=calls):
                calls.append((graph.n, inst.runtime.fills_on))
                on = inst.runtime.fills_on
                return 1000.0 + graph.n - (gains[rank] if on else 0.0) + \
                    (0.5 if len(calls) % 2 else -0.5)

            replay_mod.time_replays = timer
            runner = types.SimpleNamespace(
                get_model=lambda: model,
                cudagraph_manager=types.SimpleNamespace(graphs=graphs))
            worker = types.SimpleNamespace(vllm_config=cfg, model_runner=runner)
            records.clear()
            # vLLM's executor starts compile_or_warm_up_model on a worker only
            # after every worker loaded: no rank reads the other's answer of
            # the previous case (same capture count) as this one's
            torch.distributed.barrier()
            verify_after_capture(worker)
            got["cases"][name] = {"records": list(records), "timed": len(calls),
                                  "on_after": inst.runtime.fills_on,
                                  "sizes": sorted({n for n, _ in calls})}
            for i in vllm_plugin.INSTALLED:
                i.remove()
            vllm_plugin.INSTALLED.clear()
        # the schedule does not load: the post-load step's one 'prefetch OFF'
        # line is the rank's only line (verify's own reason is DEBUG)
        cfg.additional_config = {"l2sched": dict(PLUGIN_SECTION, schedule="missing.l2s",
                                                 verify=3)}
        records.clear()
        loader_utils.process_weights_after_loading(model, cfg.model_config,
                                                   torch.device("cpu"))
        runner = types.SimpleNamespace(get_model=lambda: model,
                                       cudagraph_manager=types.SimpleNamespace(graphs={}))
        torch.distributed.barrier()  # as above
        verify_after_capture(types.SimpleNamespace(vllm_config=cfg, model_runner=runner))
        got["cases"]["install-failed"] = {"records": list(records),
                                          "installed": len(vllm_plugin.INSTALLED)}
    finally:
        cfg.compilation_config.cudagraph_capture_sizes, replay_mod.time_replays = saved
    return got


def _multinode_scenario(model, cfg, records, loader_utils, rank):
    """Issue 43, multi-node serving: configuration that reaches some ranks
    only (Ray copies ``L2SCHED_*`` to the head node's workers alone). Each
    case loads (the wrapped ``process_weights_after_loading``) and then runs
    the after-capture step (``verify_after_capture``, as the wrapped
    ``Worker.compile_or_warm_up_model`` does) on both gloo ranks, timing how
    long each rank takes to be off. Cases:

    - ``env-rank0-only``: rank 0 has ``L2SCHED_SCHEDULE/SET/VERIFY`` in its
      environment, rank 1 nothing (the reported hang: rank 0's ``verify``
      waited in the ranks' agreement);
    - ``other-set``: both use ``--additional-config``, rank 1 with another
      override;
    - ``rank1-loads-late``: one configuration on both, rank 1 loads 1.5 s
      after rank 0 reaches the agreement, its answer for the previous
      capture (``other-set``) still in the store: rank 0 waits for the new
      one, both stay on;
    - ``rank1-absent``: rank 1 has no l2sched at all (it never answers);
      rank 0 waits ``agree_timeout_s`` = 2 s, then off.
    """
    import time
    import types

    import torch
    import torch.distributed as dist

    from l2sched.vllm import plugin as vllm_plugin
    from l2sched.vllm.verify_startup import verify_after_capture

    runner = types.SimpleNamespace(get_model=lambda: model,
                                   cudagraph_manager=types.SimpleNamespace(graphs={}))
    worker = types.SimpleNamespace(vllm_config=cfg, model_runner=runner)
    env_keys = ("L2SCHED_SCHEDULE", "L2SCHED_SET", "L2SCHED_VERIFY",
                "L2SCHED_BACKEND", "L2SCHED_AGREE_TIMEOUT_S")
    got = {}
    cases = ("env-rank0-only", "other-set", "rank1-loads-late", "rank1-absent")
    try:
        for name in cases:
            for k in env_keys:
                os.environ.pop(k, None)
            cfg.additional_config = {}
            if name == "env-rank0-only" and rank == 0:
                os.environ.update({
                    "L2SCHED_SCHEDULE": SCHEDULE, "L2SCHED_BACKEND": "dry-run",
                    "L2SCHED_SET": "tp=2; window.B.budget=64KiB", "L2SCHED_VERIFY": "3",
                    "L2SCHED_AGREE_TIMEOUT_S": "20"})
            elif name == "other-set":
                section = dict(PLUGIN_SECTION, verify=3)
                if rank == 1:
                    section["set"] = {"tp": "2", "window.B.budget": "32KiB"}
                cfg.additional_config = {"l2sched": section}
            elif name == "rank1-loads-late":
                cfg.additional_config = {"l2sched": dict(PLUGIN_SECTION)}
            elif name == "rank1-absent" and rank == 0:
                cfg.additional_config = {"l2sched": dict(PLUGIN_SECTION, verify=3,
                                                         agree_timeout_s=2)}
            absent = name == "rank1-absent" and rank == 1
            records.clear()
            late = name == "rank1-loads-late"
            if late:
                dist.barrier()
                if rank == 1:
                    time.sleep(1.5)
            if not absent:
                loader_utils.process_weights_after_loading(model, cfg.model_config,
                                                           torch.device("cpu"))
            else:  # no l2sched on this rank: its earlier answer is not there
                from l2sched.vllm import agreement

                agreement.withdraw()
                dist.distributed_c10d._get_default_store().delete_key(
                    f"l2sched/config/{rank}")
            inst = vllm_plugin.INSTALLED[-1] if vllm_plugin.INSTALLED else None
            if not late:
                dist.barrier()  # both ranks loaded: vLLM's executor phases
            t0 = time.monotonic()
            if absent:
                from l2sched.vllm import agreement

                agreement._state["generation"] += 1  # stays in step with rank 0
            else:
                verify_after_capture(worker)
            got[name] = {"seconds": time.monotonic() - t0, "records": list(records),
                         "installed": inst is not None,
                         "on_after": None if inst is None else inst.runtime.fills_on}
            dist.barrier()
            for i in vllm_plugin.INSTALLED:
                i.remove()
            vllm_plugin.INSTALLED.clear()
    finally:
        for k in env_keys:
            os.environ.pop(k, None)
    return got


def _switch_scenario(model, cfg, records, base, loader_utils):
    """Issue 31 item 3: installed with ``"fills": "off"``, eager forwards
    launch nothing (gate reason ``switched-off``); the worker extension's
    RPC method switches on (launches resume, output unchanged) and off."""
    import torch
    import vllm_forward as vf

    from l2sched.vllm import plugin as vllm_plugin
    from l2sched.vllm.switch import PrefetchSwitchExtension, prefetch_state

    cfg.additional_config = {"l2sched": dict(PLUGIN_SECTION, fills="off")}
    records.clear()
    loader_utils.process_weights_after_loading(model, cfg.model_config,
                                               torch.device("cpu"))
    got = {"records": list(records), "installed": len(vllm_plugin.INSTALLED),
           "state0": prefetch_state().as_dict(), "rounds": []}
    rt = vllm_plugin.INSTALLED[-1].runtime
    rpc = PrefetchSwitchExtension()
    for on in (None, True, False):
        answer = None if on is None else rpc.l2sched_set_prefetch(on)
        rt.clear()
        same = vf.output_bytes(vf.decode_forward(model, cfg)) == base
        got["rounds"].append({
            "answer": answer, "same": same,
            "launches": sum(1 for e in rt.events if e.op == "launch"),
            "switched_off": sum(1 for e in rt.events if e.reason == "switched-off")})
    got["issues"] = len(rt.plan.issues)
    for inst in vllm_plugin.INSTALLED:
        inst.remove()
    vllm_plugin.INSTALLED.clear()
    return got


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(_rank_scenario, TINY, tp=2, device="cpu", timeout=600)


def _expected_tokens() -> list[str]:
    seq = ["ar embed"]
    # layer 0: KDA + dense, never prefetched
    seq += ["gemm in_proj_qkvbfg_a 0", "gemm o_proj 0", "ar linear",
            "gemm down_proj 0", "ar linear"]
    for i in (1, 2):  # KDA + MoE
        seq += [f"gemm in_proj_qkvbfg_a {i}", f"fork A {i}", f"launch A {i}",
                f"gemm o_proj {i}", f"fork B {i}", f"launch B {i}", "ar linear",
                f"experts {i}", f"fork C {i}", f"launch C {i}", "ar moe"]
    seq += ["gemm fused_qkv_a_proj 3", "fork A_MLA 3", "launch A_MLA 3",
            "gemm o_proj 3", "fork B 3", "launch B 3", "ar linear",
            "experts 3", "fork C 3", "launch C 3", "ar moe", "join"]
    return seq


def test_plugin_activates_and_logs_one_summary_per_rank(ranks):
    for r in ranks:
        assert r["backend"] == "DryRunRuntime"
        lines = [x for x in r["activation_log"] if "installed" in x]
        assert len(lines) == 1, r["activation_log"]
        line = lines[0]
        assert line.startswith(f"INFO l2sched: TP rank {r['rank']}/2: schedule "
                               "glm53-flash-sm120-tp4"), line
        for part in ("backend dry-run", "device sm120-rtx-pro-6000-maxq",
                     "kda+dense: none", "kda+moe: A+B+C", "mla+moe: A_MLA+B+C",
                     "per decode step"):
            assert part in line, (part, line)


def test_interleaving_with_real_all_reduces_per_layer_kind(ranks):
    expected = _expected_tokens()
    for r in ranks:
        for trace in r["traces"]:
            got = [t for t in map(_token, trace) if t is not None]
            assert got == expected, "\n".join(
                f"{a!s:28} {b!s}" for a, b in zip(got, expected))


def test_one_join_per_forward(ranks):
    for r in ranks:
        for trace in r["traces"]:
            l2s = [e for e in trace if e[0] == "l2s"]
            assert [e[1] for e in l2s].count("join") == 1
            assert l2s[-1][1] == "join"


def test_next_layer_and_last_to_first_targets(ranks):
    for r in ranks:
        plan = {(w, layer): ranges for w, _h, layer, _c, ranges in r["plan"]}
        b_or_c = {}
        for (w, layer), ranges in plan.items():
            if w in ("B", "C"):
                b_or_c.setdefault(layer, set()).update(t for t, _p, _n in ranges)
        assert b_or_c[1] == {1, 2} and b_or_c[2] == {2, 3}
        assert b_or_c[3] == {3, 0}  # the last layer fills layer 0 of the next step
        last = [p for w, _h, layer, _c, rs in r["plan"] if w in ("B", "C")
                and layer == 3 for t, p, _n in rs if t == 0]
        assert "input_layernorm.weight" in last
        assert any(p.startswith("self_attn.in_proj_qkvbfg_a") for p in last)
        # A fills this layer's o_proj (MLA: also the absorbed decode weights)
        assert [p for _t, p, _n in plan[("A", 1)]] == ["self_attn.o_proj.weight"]
        mla = [p for _t, p, _n in plan[("A_MLA", 3)]]
        assert mla[-1] == "self_attn.o_proj.weight"
        # the absorbed W_UK_T/W_UV are strided views: fetched as kv_b_proj's
        # storage, once
        assert mla[0] == "self_attn.kv_b_proj.weight"
        # C carries what B's 64 KiB could not take
        carried = [c for w, _h, _l, c, _rs in r["plan"] if w == "C"]
        assert carried and all(c > 0 for c in carried)
        # Every range is bound after the forwards, lazy ones too (the
        # indexer's _wp_fp32), except KDA's _merged_conv_weight:
        # vLLM builds it inside the KDA core, which does not run here
        # (substitution 8); lazy binding retries it at every firing. Tensors
        # too small to hold an aligned 16-byte block clamp to an empty row.
        for (_w, _h, _l, _c, ranges), rows in zip(r["plan"], r["rows"]):
            assert len(rows) == len(ranges)
            for (_t, path, _n), (_a, nbytes) in zip(ranges, rows):
                assert (nbytes > 0 or path == "self_attn._merged_conv_weight"
                        or 0 < _n < 32), (path, _n)


def test_outputs_bitwise_identical_with_and_without_plan(ranks):
    for r in ranks:
        assert r["same_with_plan"] == [True, True]
        assert r["same_after_remove"]
        assert r["events_after_remove"] == []


@pytest.mark.parametrize("case,needle", [
    ("bad_path", "cannot read schedule"),
    ("syntax", "syntax error in schedule"),
    ("tp_mismatch", "schedule/layout mismatch"),
    ("lint_error", "lint error with device profile sm120-rtx-pro-6000-maxq"),
])
def test_failures_log_one_line_per_rank_and_keep_serving(ranks, case, needle):
    for r in ranks:
        assert needle in _off_detail(r, case)


def _off_detail(r, case: str) -> str:
    """Rank ``r``'s failure ``case`` left prefetch off as it should (nothing
    installed, exactly one ``TP rank r/2: prefetch OFF`` line, the model
    serving with unchanged outputs and no fills); the line's reason and
    detail."""
    f = r["failures"][case]
    assert f["returned"] is None and f["installed"] == 0
    assert len(f["off_lines"]) == 1, f["records"]
    line = f["off_lines"][0]
    head = f"ERROR l2sched: TP rank {r['rank']}/2: prefetch OFF: "
    assert line.startswith(head) and "\n" not in line, line
    assert not [x for x in f["records"] if " installed, backend" in x]
    assert f["same_output"] and f["l2s_events"] == []
    return line[len(head):]


@pytest.mark.parametrize("case,needle", [
    ("config_empty", "bad configuration: additional_config l2sched.schedule: missing"),
    ("config_set_string", "bad configuration: additional_config l2sched.set: expected "
                          "an object or a list"),
    ("config_not_object", "bad configuration: additional_config l2sched: must be an "
                          "object"),
])
def test_item14_bad_configuration_names_rank_and_key(ranks, case, needle):
    for r in ranks:
        detail = _off_detail(r, case)
        assert detail.startswith(needle) and "unexpected" not in detail, detail


@pytest.mark.parametrize("path", ["second_pwal", "reload_weights", "wake_up"])
def test_item01_reload_replaces_the_installation(ranks, path):
    """Each reload path removes the old installation exactly and installs the
    new plan: one summary line, no 'slot already held', the moved weight's
    rows refreshed before any forward (a FULL graph replay runs no Python
    hook), and a forward issues exactly the new plan's fills."""
    for r in ranks:
        got = r["reload"][path]
        assert got["off_lines"] == [], got["records"]
        assert len(got["summaries"]) == 1, got["records"]
        assert "reinstalled after a weight reload" in got["summaries"][0]
        assert got["installed"] == 1 and got["runtimes"] == 1
        assert got["o_proj_ptr_moved"] and got["o_proj_rows_refreshed"], got
        assert got["launches"] == got["issues"] and got["joins"] == 1, got
        assert got["same_output"]
    assert all(r["reload"]["second_pwal"]["old_hooks_removed"] for r in ranks)


def test_item01_failed_reload_leaves_prefetch_off_and_says_so(ranks):
    for r in ranks:
        got = r["reload"]["failed_reload"]
        assert got["installed"] == 0, got["records"]
        assert len(got["off_lines"]) == 1, got["records"]
        line = got["off_lines"][0]
        assert line.startswith(f"ERROR l2sched: TP rank {r['rank']}/2: prefetch OFF: ")
        assert "stand-in lint crash" in line
        assert "the plan installed before the reload was removed" in line, line
        again = r["reload"]["after_failed"]
        assert again["installed"] == 1 and again["off_lines"] == []
        assert again["launches"] == again["issues"] and again["same_output"]


def test_item03_device_mismatch_keeps_prefetch_off(ranks):
    """The GB10 (sm_121, 24 MiB L2) is not the SM120 profile's GPU: no lint
    with a profile of another L2, no 50 MB windows, one line per rank."""
    for r in ranks:
        detail = _off_detail(r, "device_mismatch")
        assert detail.startswith(
            "device mismatch: device profile sm120-rtx-pro-6000-maxq describes another "
            "GPU than this one, NVIDIA GB10 (sm_121, 48 SMs, 25,165,824 B L2)"), detail


def test_item17_documented_log_lines_are_real(ranks):
    """docs/vllm.md's "real line" examples are this run's lines (paths
    shortened as the docs write them)."""
    doc = open(os.path.join(ROOT, "docs", "vllm.md"), encoding="utf-8").read()
    summary = [x for x in ranks[0]["activation_log"] if " installed, backend" in x][0]
    line = summary.split(" ", 1)[1].replace(os.path.dirname(SCHEDULE) + os.sep, "/…/")
    assert f"\n{line}\n" in doc, line
    r1 = ranks[1]
    for case in ("bad_path", "syntax", "tp_mismatch"):
        line = r1["failures"][case]["off_lines"][0].split(" ", 1)[1]
        line = line.replace(r1["tmpdir"], "/tmp/x")
        assert f"\n{line}\n" in doc, line


@pytest.mark.parametrize("case, words", [
    ("dbo", "enable_dbo=True"), ("ubatch", "ubatch_size=2")])
def test_item04_split_batch_threads_are_refused(ranks, case, words):
    for r in ranks:
        detail = _off_detail(r, case)
        assert detail.startswith("unsupported layout: micro-batching"), detail
        assert words in detail and "threads" in detail, detail
        if case == "dbo":  # docs/vllm.md shows this line
            assert "prefetch OFF: " + detail in open(
                os.path.join(ROOT, "docs", "vllm.md")).read()


def test_item06_lint_warn_installs_with_a_logged_override(ranks):
    for r in ranks:
        w = r["lint_warn"]
        assert w["installed"] == 1, w["records"]
        over = [x for x in w["records"] if x.startswith(
            f"WARNING l2sched: TP rank {r['rank']}/2: installing despite 1 error "
            '("lint": "warn" in the plugin configuration)')]
        assert len(over) == 1, w["records"]
        assert "fill overlaps the expert stream (stand-in)" in over[0]
        summary = [x for x in w["records"] if x.startswith("INFO") and "installed" in x]
        assert len(summary) == 1 and "1 error (overridden: lint warn)" in summary[0]
        assert not [x for x in w["records"] if "prefetch OFF" in x]


def test_read_config_sources():
    from l2sched.errors import L2sPluginError
    from l2sched.vllm.config import PluginConfig, read_config

    assert read_config({}, {}) is None
    env = {"L2SCHED_SCHEDULE": "x.l2s", "L2SCHED_SET": "tp=2; window.B.budget=25MB"}
    assert read_config(None, env) == PluginConfig("x.l2s", ("tp=2", "window.B.budget=25MB"))
    extra = {"l2sched": {"schedule": "y.l2s", "set": {"tp": "2"}, "backend": "dry-run"}}
    got = read_config(extra, env)  # additional_config wins over the environment
    assert (got.schedule, got.overrides, got.backend, got.source) == (
        "y.l2s", ("tp=2",), "dry-run", "additional-config")
    with pytest.raises(L2sPluginError):
        read_config({"l2sched": {"set": {}}}, {})


def test_issue31_predicted_loss_keeps_prefetch_off(ranks):
    """A plan the lint predicts slower at a captured M (L2S110) is not
    installed: one WARNING line per rank in the issue's form."""
    for r in ranks:
        got = r["loss"]["off"]
        assert got["installed"] == 0, got["records"]
        off = [x for x in got["records"] if "prefetch OFF" in x]
        assert off == [f"WARNING l2sched: TP rank {r['rank']}/2: prefetch OFF: "
                       "predicted slower at M=4 by 23 us (lower bound); "
                       "on_predicted_loss=warn installs anyway"], got["records"]
        assert not [x for x in got["records"] if " installed, backend" in x]


def test_issue31_on_predicted_loss_warn_installs(ranks):
    for r in ranks:
        got = r["loss"]["warn"]
        assert got["installed"] == 1, got["records"]
        warn = [x for x in got["records"] if "predicted slower" in x
                and x.startswith("WARNING")]
        assert warn == [f"WARNING l2sched: TP rank {r['rank']}/2: predicted slower at "
                        "M=4 by 23 us (lower bound); installing anyway "
                        "(on_predicted_loss=warn)"], got["records"]
        summary = [x for x in got["records"] if " installed, backend" in x]
        assert len(summary) == 1 and "overridden: on_predicted_loss warn" in summary[0]
        assert not [x for x in got["records"] if "prefetch OFF" in x]


def test_issue31_plan_predicted_faster_installs(ranks):
    """The real lint predicts the tiny model's plan faster at every M: the
    default gate installs it (the activation above) without a loss line."""
    for r in ranks:
        assert not [x for x in r["activation_log"] if "predicted slower" in x]
        assert [x for x in r["activation_log"] if " installed, backend" in x]



def test_issue31_verify_option_keeps_prefetch_only_where_every_rank_measured_a_gain(ranks):
    """Issue 31 item 4, ``verify = N`` at start-up (see ``_verify_scenario``):
    both ranks faster -> ON on both, one line each with every size's gain;
    rank 1 slower -> OFF on both, rank 0 says another rank was not faster;
    rank 1 without FULL decode graphs -> no rank replays anything, both OFF
    with one line; ``verify: 0`` -> nothing measured, nothing logged."""
    for r in ranks:
        got = r["verify"]
        assert got["wrapped"]
        c = got["cases"]["both-faster"]
        assert c["on_after"] is True and c["sizes"] == [1, 2, 4, 8]
        assert c["timed"] == 4 * 3 * (1 + 3)  # sizes x arms x (warm-up + rounds)
        (line,) = [x for x in c["records"] if "verify" in x]
        assert line.startswith("INFO") and "prefetch ON" in line, line
        assert re.search(r"M=1 \+5[01]\.0 us \(noise \d.*\) faster", line), line
        c = got["cases"]["rank1-slower"]
        assert c["on_after"] is False
        (line,) = [x for x in c["records"] if "verify" in x]
        assert line.startswith("WARNING") and "prefetch OFF: not faster" in line, line
        if r["rank"] == 0:
            assert "faster here; another rank was not" in line, line
        else:
            assert re.search(r"M=8 -(49|50|51)\.0 us .* slower", line), line
        c = got["cases"]["rank1-no-graphs"]
        assert c["on_after"] is False and c["timed"] == 0
        (line,) = [x for x in c["records"] if "verify" in x]
        assert "prefetch OFF: verify: not measured:" in line, line
        assert ("another rank cannot measure" if r["rank"] == 0
                else "no FULL decode CUDA graph") in line, line
        c = got["cases"]["verify-0"]
        assert c["on_after"] is True and c["timed"] == 0
        assert not [x for x in c["records"] if "verify" in x]
        c = got["cases"]["install-failed"]
        assert c["installed"] == 0
        offs = [x for x in c["records"] if "prefetch OFF" in x]
        assert len(offs) == 1 and "cannot read schedule" in offs[0], c["records"]


def test_issue43_configuration_on_some_ranks_turns_every_rank_off_without_waiting(ranks):
    """Issue 43, multi-node (``_multinode_scenario``): where the ranks'
    l2sched configurations disagree, or a rank has none, every rank ends
    with prefetch off and one WARNING line naming the other rank and the fix
    (``--additional-config``, or ``VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY``
    for the variables); no rank waits for an unconfigured one (before: rank
    0's ``verify`` waited in a collective rank 1 never joined), and a rank
    with no l2sched at all costs the others ``agree_timeout_s`` (2 s)."""
    by = {r["rank"]: r["multinode"] for r in ranks}
    c0, c1 = by[0]["env-rank0-only"], by[1]["env-rank0-only"]
    assert c0["installed"] and c0["on_after"] is False
    assert not c1["installed"]
    (line0,) = [x for x in c0["records"] if "prefetch OFF" in x]
    assert line0.startswith("WARNING") and "rank 1 (TP rank 1/2) has no l2sched " \
        "configuration" in line0 and "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY=L2SCHED_" \
        in line0 and "--additional-config" in line0, line0
    (line1,) = [x for x in c1["records"] if "l2sched" in x]
    m = re.search(r"this rank has no l2sched configuration while rank 0 "
                  r"\(TP rank 0/2, from env ([A-Z0-9_, ]+)\) has one", line1)
    assert line1.startswith("WARNING") and m, line1
    assert {"L2SCHED_SCHEDULE", "L2SCHED_SET", "L2SCHED_VERIFY"} <= set(
        m.group(1).split(", ")), line1
    assert not [x for x in c0["records"] + c1["records"] if "verify (" in x]
    for c in (c0, c1):  # no wait: rank 1 answers 'none' at once
        assert c["seconds"] < 5.0, c
    for r in (0, 1):
        c = by[r]["other-set"]
        assert c["installed"] and c["on_after"] is False, c
        (line,) = [x for x in c["records"] if "prefetch OFF" in x]
        assert re.search(r"rank \d \(TP rank \d/2\) has overrides \[.*'window.B.budget="
                         r"(64|32)KiB'\] where rank \d \(TP rank \d/2\) has \[.*"
                         r"'window.B.budget=(32|64)KiB'\]", line), line
        assert c["seconds"] < 5.0, c
    for r in (0, 1):  # rank 1's answer of 'other-set' was not read as this one's
        c = by[r]["rank1-loads-late"]
        assert c["installed"] and c["on_after"] is True, c
        assert not [x for x in c["records"] if "prefetch OFF" in x], c["records"]
    assert 1.0 <= by[0]["rank1-loads-late"]["seconds"] < 10.0, by[0]["rank1-loads-late"]
    c = by[0]["rank1-absent"]
    assert c["installed"] and c["on_after"] is False
    (line,) = [x for x in c["records"] if "prefetch OFF" in x]
    assert "rank 1 did not answer within 2 s" in line, line
    assert 2.0 <= c["seconds"] < 6.0, c


def test_issue31_fills_off_installs_switched_off_and_rpc_switches(ranks):
    """Issue 31 item 3 with vLLM's real model: ``"fills": "off"`` installs
    (one summary line saying so) and eager forwards launch nothing; the
    worker extension's ``l2sched_set_prefetch(True)`` makes every issue
    launch again, ``False`` stops them; outputs bitwise the same."""
    for r in ranks:
        got = r["switch"]
        assert got["installed"] == 1, got["records"]
        summary = [x for x in got["records"] if "installed switched off" in x]
        assert len(summary) == 1, got["records"]
        assert got["state0"]["installed"] == 1 and got["state0"]["on"] == 0
        off0, on, off1 = got["rounds"]
        assert off0["launches"] == 0 and off0["switched_off"] == got["issues"] > 0
        assert on["answer"] == {"installed": 1, "on": 1, "refused": 0,
                                "schedules": on["answer"]["schedules"]}
        assert on["launches"] == got["issues"] and on["switched_off"] == 0
        assert off1["answer"]["on"] == 0 and off1["launches"] == 0
        assert all(x["same"] for x in got["rounds"])


def test_issue31_auto_fits_the_live_model_once_and_caches(ranks):
    """``"schedule": "auto"``: the first activation fits (one line saying
    what it chose: windows and the predicted gain, or no prefetch with the
    fit's lower bound), the second reads the cache; the same answer both
    times, on both ranks."""
    import re

    answers = []
    for r in ranks:
        first, second = r["auto"]
        lines = []
        # the first activation fits on one rank; the other may wait for its
        # lock and read the entry it wrote
        for got, hows in ((first, ("(fitted in ", "(from the cache, ")),
                          (second, ("(from the cache, ",))):
            auto = [x for x in got["records"] if "l2sched:" in x and "auto:" in x]
            assert auto, got["records"]
            if got["installed"]:
                assert any(h in x for x in auto for h in hows), auto
                assert any(" installed, backend dry-run" in x for x in got["records"])
            else:
                off = [x for x in got["records"] if "prefetch OFF: auto: no prefetch" in x]
                assert len(off) == 1 and off[0].startswith("INFO"), got["records"]
                assert any(h in off[0] for h in hows) and "lower bound" in off[0], off
            lines.append(re.sub(r" \((fitted in|from the cache,) [^)]*\)", "", auto[0]))
        assert first["installed"] == second["installed"]
        assert lines[0] == lines[1]
        answers.append(first["installed"])
    assert len(set(answers)) == 1
