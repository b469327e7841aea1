"""Issue 48: find the dispatch tax by bisection between the real step and a
synthetic one.

In ``l2sched bench run``'s GLM-shaped step on the H200 a lone 0.5 MB window
at hook A or C costs the step 90 / 170 us at M = 4 / 16 with ``fork``
(benchmarks/results/h200-2026-12-03-capture-launches/); in the synthetic
captured step of ``../shared/probes/dispatch.cu`` (same fork/join layout of
the shared experts, spin kernels for attention and all-reduce, streaming
kernels for the weights) a fill costs 0.01-0.09 us. This runs the bench's
lone-window arms on *rungs*: the real step with one or more of its parts
swapped for the synthetic step's, each rung in its own process, so the part
whose swap removes the tax is named.

Parts (a rung is ``real`` or parts joined by ``+``):

- ``stream``: every cuBLAS GEMM of the step (projections, MLA ``bmm``, the
  batched expert GEMMs) becomes one Triton streaming-read kernel over the
  same weight bytes (no cuBLAS node, no split-K reduction);
- ``xstream``: as ``stream`` for the batched expert GEMMs only (the
  projections and MLA ``bmm`` stay cuBLAS);
- ``pstream``: as ``stream`` for everything but the expert GEMMs (which stay
  the real grouped kernels); ``xstream+pstream`` = ``stream``;
- ``tfill``: the runtime's CuTe DSL fill kernel (launched through TVM-FFI)
  becomes a Triton streaming read of the issue's byte count from a scratch
  buffer, launched on the same side stream after the same fork;
- ``torchsync``: the fork and join use ``torch.cuda.Event`` objects
  (``ForkJoin(sync="torch")``) instead of driver calls on raw handles;
- ``noaux``: the shared experts run on the model's stream (no aux-stream
  fork/join per MoE layer);
- ``nospin``: the all-reduce stand-ins (idle intervals, spin kernels) are
  left out;
- ``memset``: a 4-byte driver memset (``cuMemsetD32Async``, a MEMSET node in
  the captured graph) on the model's stream before every MoE layer's expert
  GEMM, as cuBLAS's batched GEMM issues one there (the census of
  2026-12-06: 42 MEMSET nodes in ``real`` and ``pstream``, none in
  ``stream``); with ``stream`` it puts back only the memsets;
- ``conn1``: the rung's process runs with ``CUDA_DEVICE_MAX_CONNECTIONS=1``
  (one hardware queue: the lone-window loss was gone that way on
  2026-12-01, benchmarks/results/h200-2026-12-01-diag-connections.md);
- ``synthetic`` = ``stream+tfill+torchsync``.

Arms per rung: ``none``, ``none-aa`` (the A/A floor), ``compiled`` (the whole
hand-tuned schedule) and windows A and C alone at 0.5 MB with ``fork`` and
with ``deferred`` (``capture_launches.sh``'s variants).

Usage (repository root, GPU machine, after ``benchmarks/gpu_session.sh``'s
set-up)::

    python3 -m lab.experiments.tax_bisect -o OUT --rungs real,stream,tfill,synthetic \
        --tokens 4,16 --replays 20

writes ``OUT/rung-<RUNG>.json`` (``+`` as ``_``; each a ``bench run`` result) and
``OUT/tax-bisect.json`` / ``.md``: per rung and M the gain of each arm over
``none`` (us, + = faster) and the A/A floor. ``--dry`` runs the rungs on the
meta device (shapes only, no GPU), which checks the wiring on a CPU.
``--census K`` also writes ``OUT/census-<RUNG>.json``: the first K graphs a
rung captures, node by node (``graph_census.py``; compare two rungs with
``python -m lab.experiments.graph_census``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from lab.experiments.capture_launches_table import gains

#: rung part -> what it swaps (the module docstring says how).
PARTS = ("stream", "xstream", "pstream", "tfill", "torchsync", "noaux", "nospin", "memset",
         "conn1")
#: named rungs that stand for a set of parts.
ALIASES = {"real": (), "synthetic": ("stream", "tfill", "torchsync")}
_ZERO = "window.A_MLA.budget=0MB"
_ALONE = {
    "A0.5": f"{_ZERO},window.B.budget=0MB,window.C.budget=0MB,window.A.budget=0.5MB",
    "C0.5": f"{_ZERO},window.A.budget=0MB,window.B.budget=0MB,window.C.budget=0.5MB",
}
#: the arms every rung runs beside none, none-aa and compiled.
VARIANTS = [f"{w}-{launch}:{items},launch={launch}"
            for launch in ("fork", "deferred") for w, items in _ALONE.items()]


def variants(grids=(), arms=()) -> list[str]:
    """``VARIANTS`` plus, per CTA count in ``grids``, windows A and C alone with
    ``fork`` and every fill launched with that many CTAs (``grid=N``): does
    the tax follow how many SMs the fill touches? Then per ``NAME:ITEMS`` of
    ``arms``, windows A and C alone with those ``--variant`` items
    (``A0.5-NAME``, ``C0.5-NAME``)."""
    out = VARIANTS + [f"{w}-fork-g{g}:{items},launch=fork,grid={g}"
                      for g in grids for w, items in _ALONE.items()]
    for arm in arms:
        name, _, extra = arm.partition(":")
        out += [f"{w}-{name}:{items},{extra}" for w, items in _ALONE.items()]
    return out


def parse_grids(text: str) -> tuple[int, ...]:
    """``--grids`` (``"8,32"``) as CTA counts; raises ``ValueError`` naming a
    value that is not a positive integer."""
    out = []
    for g in (x.strip() for x in text.split(",") if x.strip()):
        if not (g.isascii() and g.isdigit()) or int(g) < 1:
            raise ValueError(f"--grids: {g!r} is not a CTA count (a positive integer)")
        out.append(int(g))
    return tuple(out)


def rung_parts(rung: str) -> tuple[str, ...]:
    """The parts of ``rung`` (``real``, ``synthetic`` or parts joined by
    ``+``). Raises ``ValueError`` for an unknown part."""
    if rung in ALIASES:
        return ALIASES[rung]
    parts = tuple(p for p in rung.split("+") if p)
    bad = [p for p in parts if p not in PARTS and p not in ALIASES]
    if bad or not parts:
        raise ValueError(f"rung {rung!r}: unknown part {bad[0] if bad else '(none)'} "
                         f"(parts: {', '.join(PARTS)}; or {', '.join(ALIASES)})")
    out: list[str] = []
    for p in parts:
        out += ALIASES.get(p, (p,))
    return tuple(dict.fromkeys(out))


# -- the swaps (applied in the rung's own process) ----------------------------

def _triton_read():
    """A Triton kernel that reads ``n`` int32 words once and writes one
    partial sum per program: a pure streaming read, one launch."""
    import triton
    import triton.language as tl

    @triton.jit
    def read_words(ptr, n, out, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        step = tl.num_programs(0) * BLOCK
        acc = tl.zeros([BLOCK], dtype=tl.int32)
        for start in range(pid * BLOCK, n, step):
            offs = start + tl.arange(0, BLOCK)
            acc += tl.load(ptr + offs, mask=offs < n, other=0)
        tl.store(out + pid, tl.sum(acc))

    return read_words


class _Reader:
    """Launches the streaming read over a tensor's bytes on the current
    stream (grid: 4 programs per SM at most, 1024 words each per pass)."""

    def __init__(self, torch):
        self.torch = torch
        self.kernel = _triton_read()
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.out = torch.zeros(4 * self.sms, dtype=torch.int32, device="cuda")
        self.words: dict = {}

    def words_of(self, t):
        """An int32 view of the bytes ``t`` spans (its storage from its
        offset, ``numel * element_size`` bytes rounded down to words)."""
        key = (t.data_ptr(), t.numel(), t.element_size())
        w = self.words.get(key)
        if w is None:
            torch = self.torch
            nbytes = t.numel() * t.element_size()
            w = torch.empty(0, dtype=torch.uint8, device=t.device)
            w.set_(t.untyped_storage(), t.storage_offset() * t.element_size(), (nbytes,))
            w = w[: nbytes - nbytes % 4].view(torch.int32)
            self.words[key] = w
        return w

    def read(self, t) -> None:
        w = self.words_of(t)
        n = w.numel()
        grid = (max(1, min(4 * self.sms, -(-n // 1024))),)
        self.kernel[grid](w, n, self.out, BLOCK=1024)


def apply_parts(parts) -> None:
    """Swap the parts of the real step named by ``parts`` (``PARTS``) in this
    process: subclass ``StepRunner`` into ``l2sched.bench.run`` and patch
    ``CudaRuntime`` (lab only; the installed product is untouched)."""
    import torch

    import l2sched.bench.run as bench_run
    from l2sched.attrs import resolve_path
    from l2sched.bench.step import StepRunner
    from l2sched.runtime.cuda import CudaRuntime

    parts = set(parts)
    reader: list = []

    def get_reader():
        if not reader:
            reader.append(_Reader(torch))
        return reader[0]

    word: list = []

    def memset_word(torch) -> None:
        from cuda.bindings import driver as drv
        if not word:
            word.append(torch.zeros(1, dtype=torch.int32, device="cuda"))
        err, = drv.cuMemsetD32Async(word[0].data_ptr(), 0, 1,
                                    drv.CUstream(torch.cuda.current_stream().cuda_stream))
        if err != drv.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuMemsetD32Async: {err}")

    class RungRunner(StepRunner):
        def _body(self, lay, op) -> None:
            if not self.cuda:
                return super()._body(lay, op)
            if "nospin" in parts and op.cls == "collective":
                return None
            if "memset" in parts and op.cls == "expert_stream":
                memset_word(torch)
            experts = bool(parts & {"stream", "xstream"})
            if experts and op.cls == "expert_stream":
                pool = resolve_path(lay, op.reads[0])
                s, d = self.expert_range[lay.layer_idx]
                get_reader().read(pool[s:s + d])
                return None
            if parts & {"stream", "pstream"}:
                if op.cls not in ("collective", "attention_core", "expert_stream"):
                    reads = self._matrix_reads(lay, op)
                    if reads:
                        for _path, w, _x in reads:
                            get_reader().read(w)
                        return None
            return super()._body(lay, op)

        def _moe_runner(self, lay, experts):
            if "noaux" not in parts or not self.cuda:
                return super()._moe_runner(lay, experts)
            ops = self._ops
            for n in ("moe.shared.gate_up_proj", "moe.shared.act", "moe.shared.down_proj"):
                if n in ops:
                    self.exec_op(lay, ops[n])
            lay.mlp.gate(None)
            self.exec_op(lay, ops["moe.routing"])
            experts.routed_experts.forward_modular()
            self.exec_op(lay, ops["moe.sum"])
            if "moe.all_reduce" in ops:
                experts._maybe_reduce_final_output(None)
            return None

    bench_run.StepRunner = RungRunner
    if "torchsync" in parts:
        CudaRuntime.__init__.__kwdefaults__["sync"] = "torch"
    if "tfill" in parts:
        scratch: list = []

        def launch(self, i, b, e):
            if not scratch:
                scratch.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
            nbytes = max(4, min(int(self.table.nbytes[i]), scratch[0].numel()))
            with torch.cuda.stream(self.side):
                get_reader().read(scratch[0][:nbytes])
            return True

        CudaRuntime._launch = launch


# -- driving the rungs ----------------------------------------------------------

def bench_argv(out: str, tokens: str, replays: int, dry: bool,
               grids=(), arms=()) -> list[str]:
    """``l2sched bench run`` arguments of one rung (writes ``out``); ``grids``,
    ``arms``: the extra arms (``variants``)."""
    argv = ["bench", "run", "--aa", "-o", out, "--tokens", tokens,
            "--replays", str(replays), "--ideal-reps", "1"]
    for v in variants(grids, arms):
        argv += ["--variant", v]
    return argv + (["--dry"] if dry else [])


def rung_tag(rung: str) -> str:
    """``rung`` as it appears in file names (``+`` written as ``_``)."""
    return rung.replace("+", "_")


def rung_path(folder: str, rung: str) -> str:
    """Where a rung's ``bench run`` result goes."""
    return os.path.join(folder, f"rung-{rung_tag(rung)}.json")


def run_one(rung: str, out: str, tokens: str, replays: int, dry: bool,
            census: int = 0, dot: int = 0, grids=(), arms=()) -> int:
    """Run the bench on ``rung`` in this process; the CLI's exit code.
    ``census``: census the first that many captured graphs
    (``graph_census.keep_census``, ``census-<rung>.json`` beside ``out``);
    ``dot``: the first that many of them also as DOT files."""
    from l2sched.cli import main
    apply_parts(rung_parts(rung))  # on the meta device the swapped bodies defer to the real ones
    if census and not dry:
        import torch

        from lab.experiments.graph_census import keep_census
        keep_census(torch, os.path.dirname(out) or ".", rung_tag(rung), census, dot)
    return main(bench_argv(out, tokens, replays, dry, grids, arms))


def table(results: dict, grids=(), extra=()) -> str:
    """Markdown: one row per (rung, M), the A/A floor, then each arm's gain
    over ``none`` (us, + = faster)."""
    arms = ["compiled"] + [v.split(":", 1)[0] for v in variants(grids, extra)]
    lines = ["| rung | M | none step, us | A/A floor, us | " + " | ".join(arms) + " |",
             "|---" * (4 + len(arms)) + "|"]
    for rung, per_m in results.items():
        if "error" in per_m:
            lines.append(f"| {rung} | - | {per_m['error']} |" + " |" * (2 + len(arms)))
            continue
        for m, g in per_m.items():
            cells = [f"{g['arms'][a]:+.1f}" if a in g["arms"] else "-" for a in arms]
            floor = f"{g['floor_us']:.1f}" if g.get("floor_us") is not None else "-"
            lines.append(f"| {rung} | {m} | {g['none_us']:.0f} | {floor} | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True, help="output folder")
    ap.add_argument("--rungs", default="real,stream,tfill,torchsync,noaux,nospin,synthetic",
                    help="rungs to run, comma-separated (real, synthetic, or parts "
                         f"joined by '+': {', '.join(PARTS)})")
    ap.add_argument("--tokens", default="4,16", help="decode tokens M per step (list)")
    ap.add_argument("--replays", type=int, default=20, help="timed rounds per M")
    ap.add_argument("--timeout", type=float, default=150.0,
                    help="seconds one rung's process may run")
    ap.add_argument("--dry", action="store_true", help="meta device, no GPU")
    ap.add_argument("--census", type=int, default=0, metavar="K",
                    help="census the first K captured graphs of each rung (node, edge "
                         "and kernel counts, launch attributes: graph_census.py) into "
                         "census-<rung>.json")
    ap.add_argument("--dot", type=int, default=0, metavar="K",
                    help="with --census: the first K of those graphs also as DOT "
                         "(graph-<rung>-<i>.dot.gz, cuGraphDebugDotPrint verbose)")
    ap.add_argument("--grids", default="", metavar="N,N",
                    help="also windows A and C alone with fork, every fill launched "
                         "with N CTAs (one arm pair per N; the profile's grid otherwise)")
    ap.add_argument("--arm", action="append", default=[], metavar="NAME:ITEMS",
                    help="also windows A and C alone with these --variant items "
                         "(e.g. jl:launch=fork,join=every-layer), arms A0.5-NAME, C0.5-NAME")
    ap.add_argument("--one", help="run this one rung in this process (internal)")
    a = ap.parse_args(argv)
    try:
        a.grids = parse_grids(a.grids)
    except ValueError as e:
        ap.error(str(e))
    if a.replays < 1:
        ap.error(f"--replays must be at least 1, got {a.replays}")
    if a.one:
        return run_one(a.one, rung_path(a.output, a.one),
                       a.tokens, a.replays, a.dry, a.census, a.dot, a.grids, a.arm)
    rungs = [r for r in a.rungs.split(",") if r]
    try:  # refuse an unknown part or arm before anything runs
        for r in rungs:
            rung_parts(r)
        from l2sched.bench.arms import check_variants
        from l2sched.bench.options import SCHEDULE
        check_variants(variants(a.grids, a.arm), SCHEDULE)
    except ValueError as e:
        ap.error(str(e))
    if os.path.exists(a.output) and not os.path.isdir(a.output):
        ap.error(f"-o {a.output}: exists and is not a folder")
    os.makedirs(a.output, exist_ok=True)
    failed = []
    results: dict = {}
    for r in rungs:
        t0 = time.time()
        cmd = [sys.executable, "-m", "lab.experiments.tax_bisect", "--one", r,
               "-o", a.output, "--tokens", a.tokens, "--replays", str(a.replays),
               "--census", str(a.census), "--dot", str(a.dot),
               "--grids", ",".join(map(str, a.grids))] + [f"--arm={x}" for x in a.arm]
        cmd += ["--dry"] if a.dry else []
        path = rung_path(a.output, r)
        if os.path.exists(path):
            os.remove(path)  # a rung that fails must not leave an older run's result to read
        env = dict(os.environ)
        if "conn1" in rung_parts(r):
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
        try:
            rc = subprocess.run(cmd, timeout=a.timeout, env=env).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        print(f"rung {r}: rc={rc} in {time.time() - t0:.0f} s", flush=True)
        if rc != 0:
            failed.append(r)
        try:
            with open(path, encoding="utf-8") as f:
                run = json.load(f)
            results[r] = {} if a.dry else gains(run)
        except (OSError, ValueError, KeyError) as e:
            results[r] = {"error": f"rc={rc}: {type(e).__name__}: {e}"}
        write_tables(a, rungs, results)  # after every rung: a cut-short run keeps its rows
    print(table(results, a.grids, a.arm))
    if failed:
        print(f"tax_bisect: rung(s) {', '.join(failed)} failed (their rows say why)",
              file=sys.stderr)
    return 1 if failed else 0


def write_tables(a, rungs: list[str], results: dict) -> None:
    """Write ``tax-bisect.json`` and ``.md`` of the rungs run so far."""
    with open(os.path.join(a.output, "tax-bisect.json"), "w", encoding="utf-8") as f:
        json.dump({"rungs": rungs, "variants": variants(a.grids, a.arm), "tokens": a.tokens,
                   "replays": a.replays, "gains": results}, f, indent=1)
    with open(os.path.join(a.output, "tax-bisect.md"), "w", encoding="utf-8") as f:
        f.write(table(results, a.grids, a.arm))


if __name__ == "__main__":
    sys.exit(main())
