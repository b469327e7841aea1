"""Where a schedule's gain goes inside vLLM's engine (issue 44): kernel
traces of the engine's captured FULL decode graphs with prefetch off and on,
beside the same traces of ``l2sched bench run``'s step.

``session trace DIR`` starts one engine on the rank model with the
schedule forced on (``$SCHEDULE``, else ``auto``'s fit), then, in the
worker (``LLM.collective_rpc`` with ``trace_in_worker``), replays each M's
FULL decode graph once per arm under ``torch.profiler``
(``l2sched.bench.trace.trace_replays``; the switch,
``l2sched.vllm.switch.set_prefetch``, between the arms: no recapture).
``session trace-bench DIR``, a process of its own after the engine's has
freed the GPU, runs ``l2sched bench run --trace-dir`` on the same schedule
(the bench step's ``none`` and ``compiled`` arms). ``summarize`` lines
each pair's main streams up (``compare_timelines``) and writes
``DIR/trace.json`` + ``DIR/trace.md``: per M and side, the span of each
arm and the kernels that account for the difference (negative: prefetch
on is faster there). Units: microseconds of one replay (one trace, not a
median: the timed medians are ``verify.json`` and ``bench.json``).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

#: Kernels named per M in the report (largest |change| first).
TOP = 12


def trace_in_worker(worker, batches: list, trace_dir: str) -> dict:
    """Run inside a vLLM worker (``collective_rpc``'s first argument is the
    worker): for each M of ``batches``, one traced replay of its FULL decode
    graph with prefetch off, then on. Writes
    ``trace_dir/trace-M<M>-{off,on}.json``; returns ``{M: {arm: path}}``.
    Leaves prefetch on. Raises ``l2sched.vllm.replay.ReplayUnavailable``
    for an M without a FULL decode graph, ``RuntimeError`` when the switch
    is refused or nothing is installed."""
    import torch

    from l2sched.bench.trace import trace_replays
    from l2sched.vllm.replay import graphs_for
    from l2sched.vllm.switch import set_prefetch_or_raise

    out = {}
    for m, g in graphs_for(worker.model_runner, [int(b) for b in batches]).items():
        out[m] = trace_replays({"off": g, "on": g}, trace_dir, m, torch,
                               before=lambda arm: set_prefetch_or_raise(arm == "on"))
    set_prefetch_or_raise(True)
    return out


def _pair_summary(off_path: str, on_path: str) -> dict:
    """``compare_timelines`` of one off/on pair, cut to the report's size:
    spans, extra kernel and gap time of the on arm (us; negative = faster),
    the ``TOP`` kernel names by |change| and the other streams' kernel
    counts and busy time (the fills, the shared experts' aux stream)."""
    from l2sched.bench.trace import compare_timelines, kernel_timeline, main_stream

    off, on = kernel_timeline(off_path), kernel_timeline(on_path)
    cmp = compare_timelines(off, on)
    by = sorted(cmp["by_kernel"].items(),
                key=lambda kv: -abs(kv[1]["kernel_us"] + kv[1]["gap_us"]))
    side = {}
    for arm, tl in (("off", off), ("on", on)):
        ms = main_stream(tl)
        side[arm] = {str(s): {"kernels": len(k), "busy_us": round(sum(d for _, d, _ in k), 1)}
                     for s, k in tl.items() if s != ms}
    return {"span_off_us": round(cmp["span_us"][0], 1), "span_on_us": round(cmp["span_us"][1], 1),
            "change_us": round(cmp["span_us"][1] - cmp["span_us"][0], 1),
            "kernel_us": round(cmp["kernel_us"], 1), "gap_us": round(cmp["gap_us"], 1),
            "top": [{"kernel": name[:90], "count": r["count"],
                     "kernel_us": round(r["kernel_us"], 1), "gap_us": round(r["gap_us"], 1)}
                    for name, r in by[:TOP]],
            "other_streams": side}


def summarize(d: Path) -> dict:
    """Read ``d/traces-engine`` (``trace_in_worker``) and ``d/traces-bench``
    (``bench run --trace-dir``: arms ``none`` and ``compiled``); write
    ``d/trace.json`` and ``d/trace.md``; return the JSON's dict. A pair
    whose main streams differ is reported with its error."""
    res = {}
    for side, a, b in (("engine", "off", "on"), ("bench", "none", "compiled")):
        for off_path in sorted((d / f"traces-{side}").glob(f"trace-M*-{a}.json")):
            m = off_path.name.split("-")[1][1:]
            on_path = off_path.with_name(f"trace-M{m}-{b}.json")
            try:
                res.setdefault(m, {})[side] = _pair_summary(str(off_path), str(on_path))
            except (OSError, ValueError) as e:
                res.setdefault(m, {})[side] = {"error": str(e)}
    (d / "trace.json").write_text(json.dumps(res, indent=1))
    lines = ["# Kernel traces: prefetch off vs on, vLLM's engine and the bench step", "",
             "One traced replay per arm (us); change = on - off (negative: faster with "
             "prefetch); kernel / gap: the main stream's change inside kernels and in the "
             "gaps before them.", ""]
    for m in sorted(res, key=int):
        for side, s in res[m].items():
            lines.append(f"## M={m}, {side}")
            if "error" in s:
                lines += ["", f"not compared: {s['error']}", ""]
                continue
            lines += ["", f"span off {s['span_off_us']}, on {s['span_on_us']}, change "
                      f"{s['change_us']} (kernels {s['kernel_us']}, gaps {s['gap_us']}); "
                      f"other streams: {json.dumps(s['other_streams'])}", "",
                      "| kernel | count | kernel us | gap us |", "|---|---|---|---|"]
            lines += [f"| `{t['kernel']}` | {t['count']} | {t['kernel_us']} | {t['gap_us']} |"
                      for t in s["top"]]
            lines.append("")
    (d / "trace.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return res


def trace_engine(d: Path, engine_kwargs: dict, section: dict, batches: tuple,
                 env: dict) -> int:
    """The engine half (``session trace``): one engine with ``section``, the
    traces of ``trace_in_worker`` into ``d/traces-engine``. Returns 1 when
    nothing is installed. The engine holds most of the GPU's memory until
    its process ends: the bench half runs in a process of its own."""
    os.environ.update(env)
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc of a function
    from l2sched.vllm.verify_engine import start_engine

    engine = start_engine(str(d / "rank"), tp=1, ep=False, section=section,
                          load_format="dummy", max_batch=max(batches), input_len=32,
                          output_len=16, engine_args=engine_kwargs)
    state = engine.state()
    if not all(w.get("installed") for w in state):
        print("session trace: no schedule installed:", state, flush=True)
        return 1
    paths = engine.llm.collective_rpc(trace_in_worker,
                                      args=(list(batches), str(d / "traces-engine")))
    print("session trace: engine traces", json.dumps(paths), flush=True)
    return 0


def trace_bench(d: Path, spec: dict, schedule: Path, batches: tuple, env: dict) -> int:
    """The bench half (``session trace-bench``): ``l2sched bench run
    --trace-dir d/traces-bench`` of ``schedule`` on the run's model and
    emulation profile, then ``summarize``. Returns the bench's exit status."""
    cmd = [sys.executable, "-m", "l2sched", "bench", "run", "--schedule", str(schedule),
           "--device-profile", spec["device_profile"], "--model-config", str(d / "full.json"),
           "--tokens", ",".join(map(str, batches)), "--trace-dir", str(d / "traces-bench"),
           "--out", str(d / "bench-trace.json")]
    print("session trace-bench:", shlex.join(cmd), flush=True)
    rc = subprocess.run(cmd, env=env).returncode
    if rc == 0:
        summarize(d)
    return rc
