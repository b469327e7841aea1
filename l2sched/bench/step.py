"""Running one decode step of the bench tree in the adapter's op order.

``StepRunner(model, device_profile, tokens)`` executes, per decoder layer, the
ops of the default adapter's ``decode_timeline(kind)`` (GLM-5.3-Flash's) (conditions evaluated at TP = the
inventory's), each as:

- ``gemm`` / ``small`` / ``shared_expert`` ops that read 2-D/3-D weights: real
  cuBLAS GEMMs (``F.linear`` on ``[M, in]`` random inputs; MLA ``W_UK_T``/
  ``W_UV``: ``bmm`` on ``[heads, M, k]``), reading every byte of the weight;
- ``expert_stream`` (``moe.w13``, ``moe.w2``): one batched cuBLAS GEMM over the
  ``distinct_experts(M)`` experts of a random contiguous range of the layer's
  pool (``m_e = ceil(8 M / D)`` tokens each): the bytes of the real step;
- ``attention_core``: a read+write pass over the recurrent/KV state
  footprint (the adapter's ``core_state_bytes(M, tp)``) plus a spin kernel of the
  device profile's ``attention_core_us``;
- ``small`` ops with no matrix weight: a spin kernel of ``small_kernel_us``;
- ``collective`` (all-reduces): an IDLE INTERVAL, a spin kernel of the device
  profile's collective model (``DeviceProfile.allreduce_us(tp, M*hidden*2)``):
  no data moves; this single GPU stands in for rank 0 of TP4.

Hooks fire where vLLM's do: ops run inside the module calls/methods the
adapter's ``Install`` records name (first projections, ``o_proj`` +
all-reduce, the KDA ``_forward`` core, the MLA core module, the MoE runner,
``forward_modular``, ``_maybe_reduce_final_output``), so
``l2sched.vllm_plugin._install`` places the plan unchanged.

Timing (``timing=True``; the events are ``StepTiming``'s, the base class of
``StepRunner``): an event before and after every op on its stream
(``main``/``aux``), and an event on the l2sched side stream after every op
during or before which fills were issued (``fill_count``, the runtime's
``stats.issued``, grew); its time is the last fill kernel's *exit*, not the
landing of its lines (a bulk ``cp.async.bulk.prefetch`` kernel exits once its
requests are issued). Two flavours:

- ``in_graph=False`` (eager fallback): plain events, recorded while the host
  launches; an eager step is host-launch-bound, so these per-op times are not
  the graph's;
- ``in_graph=True``: ``torch.cuda.Event(enable_timing=True, external=True)``.
  Recorded during a CUDA-graph capture, such an event becomes an event-record
  *node* of the graph (c10 ``CUDAEvent::record`` passes
  ``cudaEventRecordExternal`` when the current stream is capturing and the
  event is external), so after every replay ``elapsed_time`` between two of
  them is the in-graph time. The events come from a per-capture pool
  (``new_event_pool``): one uncaptured timed step creates them, the capture
  re-records the same objects in the same order.

Units: microseconds. ``device="meta"`` runs shapes only with a fake clock
(``FakeEvent``, +1 us per event; CPU dry mode).
"""

from __future__ import annotations

import math
import random

from l2sched.attrs import resolve_path
from l2sched.bench.tree import distinct_experts
from l2sched.model.adapters import DEFAULT_ADAPTER, get_adapter
from l2sched.runtime.streams import side_stream
from l2sched.device import DeviceProfile

#: The adapter whose decode step the probes measure: the model of the op
#: tables ``l2sched profile`` writes (``[ops.MODEL."KIND"]``).
MODEL = DEFAULT_ADAPTER
#: The adapter of that model: its decode timeline is the step the profile times.
STEP_ADAPTER = get_adapter(MODEL)

#: Op groups run inside a module call or method (hook targets), per path.
_MODULE_OPS = {
    "self_attn.in_proj_qkvbfg_a": ("kda.in_proj",),
    "self_attn.fused_qkv_a_proj": ("mla.fused_qkv_a_proj",),
    "self_attn.o_proj": ("attn.o_proj", "attn.all_reduce"),
    "mlp.gate_up_proj": ("mlp.gate_up_proj",),
    "mlp.down_proj": ("mlp.down_proj", "mlp.all_reduce"),
    "mlp.gate": ("moe.gate",),
    "self_attn.mla_attn.mla_attn": ("mla.kv_cache_update", "mla.uk_bmm",
                                    "mla.sparse_decode", "mla.uv_bmm"),
    "mlp.experts": ("moe.shared.gate_up_proj", "moe.shared.act",
                    "moe.shared.down_proj", "moe.gate", "moe.routing",
                    "moe.align", "moe.w13", "moe.act", "moe.w2", "moe.sum",
                    "moe.all_reduce"),
}
_METHOD_OPS = {
    "_forward": ("kda.conv", "kda.recurrent"),
    "forward_modular": ("moe.align", "moe.w13", "moe.act", "moe.w2"),
    "_maybe_reduce_final_output": ("moe.all_reduce",),
}
#: Ops whose GEMM goes through ``quant_method.apply`` (wrap_after target).
_APPLY_OPS = {"attn.o_proj": "self_attn.o_proj", "mlp.down_proj": "mlp.down_proj"}



class FakeEvent:
    """Dry-mode event: a fake time stamp (us) from a counter."""

    def __init__(self, t: float):
        self.t = t

    def elapsed_time(self, other) -> float:
        """Milliseconds from ``self`` to ``other`` (CUDA-event convention)."""
        return (other.t - self.t) / 1000.0


def external_event(torch):
    """A timing CUDA event that becomes an event-record node when recorded
    during a capture (``torch.cuda.Event(..., external=True)``)."""
    try:
        return torch.cuda.Event(enable_timing=True, external=True)
    except TypeError as e:  # torch without external events
        raise RuntimeError("in-graph timing needs torch.cuda.Event(external=True) "
                           "(the eager fallback: bench.run.run(args) with "
                           "args.per_op = 'eager')") from e


def spin_cycles_per_us(torch) -> float:
    """The spin kernel's (``torch.cuda._sleep``) cycles per microsecond on
    the current CUDA device at its clock now: the median of three
    2,000,000-cycle spins timed with CUDA events, after one warm spin."""
    n = 2_000_000
    torch.cuda._sleep(n)  # warm
    torch.cuda.synchronize()
    rates = []
    for _ in range(3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(n)
        b.record()
        torch.cuda.synchronize()
        rates.append(n / (a.elapsed_time(b) * 1000.0))
    return sorted(rates)[1]


class StepTiming:
    """The clock and the timing events of ``StepRunner`` (its base class):
    the spin kernel and its calibration, timing events (fake clock off the
    GPU, external events from a per-capture pool with ``in_graph``) and the
    side-stream events after ops at which fills were issued. It keeps no
    state of its own: the attributes it uses (``torch``, ``cuda``,
    ``device``, ``cycles_per_us``, ``in_graph``, ``fill_count``,
    ``side_records`` and the pool and counters behind them) are set by
    ``StepRunner.__init__``."""

    def calibrate_sleep(self) -> float:
        """Measure the spin kernel's cycles per microsecond (GPU clock now)."""
        if self.cuda:
            self.cycles_per_us = spin_cycles_per_us(self.torch)
        return self.cycles_per_us

    def spin(self, us: float) -> None:
        """A kernel that runs ``us`` microseconds and touches no memory."""
        if self.cuda and us > 0:
            self.torch.cuda._sleep(max(1, int(us * self.cycles_per_us)))


    def event(self, stream=None):
        """Record a timing event on ``stream`` (default: current). With
        ``in_graph``: the pool's next external event (created on first use,
        see ``new_event_pool``)."""
        if not self.cuda:
            self._fake_t += 1.0
            return FakeEvent(self._fake_t)
        if self.in_graph:
            if self._pool_i < len(self._pool):
                e = self._pool[self._pool_i]
            else:
                if self.torch.cuda.is_current_stream_capturing():
                    raise RuntimeError("timed capture needs more events than the "
                                       "uncaptured timed step created")
                e = external_event(self.torch)
                self._pool.append(e)
            self._pool_i += 1
        else:
            e = self.torch.cuda.Event(enable_timing=True)
        e.record(stream) if stream is not None else e.record()
        return e

    def new_event_pool(self) -> None:
        """Start a fresh pool of external events for one timed graph: the
        next timed step (uncaptured) creates them, the capture after it
        records the same events (so no event is created during a capture)."""
        self._pool = []
        self._pool_i = 0

    def _side_stream(self):
        if not self.cuda:
            return None
        return side_stream(self.device.index or 0)

    def _mark_fills(self, layer: int, op) -> None:
        """After op ``op`` of ``layer``: a side-stream event when fills were
        issued since the last one (``fill_count``); without ``fill_count``
        (eager only) after every op with hooks. ``op`` None: the end of the
        step (recorded as op ``step_end``)."""
        if self.fill_count is not None:
            n = self.fill_count()
            new = n - self._fills_seen
            if new <= 0:
                return
            self._fills_seen = n
        elif op.hooks_after or op.hooks_before:
            if self.in_graph:
                return  # an unforked side stream cannot be recorded in a capture
            new = 0
        else:
            return
        name = op.name if op is not None else "step_end"
        if self.in_graph and not self.fill_events:
            # fills captured as nodes of this stream's own capture: the side
            # stream was never forked, so only the count is kept
            self.side_records.append((layer, name, new, None))
            return
        self.side_records.append((layer, name, new, self.event(self._side_stream())))


class StepRunner(StepTiming):
    """Runs decode steps of ``model`` (``tree.build_tree``) at ``tokens``
    tokens. ``device_profile``: ``DeviceProfile`` (durations of the stand-in kernels,
    collective model); ``tp``: the inventory's TP size; ``seed``: routing.
    Timing switches: ``timing`` (record events), ``in_graph`` (external
    events from the pool, see the module docstring), ``fill_count`` (a
    callable returning the fills issued so far, or None: then, eagerly, a
    side event follows every op with hooks). Attributes after a timed step:
    ``records`` = ``[(layer, op, stream, ev_before, ev_after)]``,
    ``side_records`` = ``[(layer, op, fills issued since the previous side
    event, ev)]``, ``start_event``, ``end_event``."""

    def __init__(self, model, device_profile: DeviceProfile, *, tokens: int = 1, seed: int = 0,
                 top_k: int = 8):
        import torch
        self.torch = torch
        self.model = model
        self.inv = model.inventory
        self.device_profile = device_profile
        self.tp = self.inv.tp
        self.n = len(self.inv.layers)
        p0 = next(iter(model.parameters()))
        self.device = p0.device
        self.meta = self.device.type == "meta"
        self.cuda = self.device.type == "cuda"
        self.seed = seed
        self.top_k = top_k
        self.timing = False
        self.in_graph = False
        self.fill_count = None
        #: whether a timed capture may record the fills' exit on the side
        #: stream (False when the runtime captures fills as nodes of the
        #: model stream: ``runtime.capture_nodes.NODE_LAUNCHES``)
        self.fill_events = True
        self.records: list = []
        self.side_records: list = []
        self._pool: list = []
        self._pool_i = 0
        self._fills_seen = 0
        self._fake_t = 0.0
        self.cycles_per_us = 1500.0
        self._inputs: dict = {}
        self.aux = torch.cuda.Stream() if self.cuda else None
        self.side = None
        self.hidden = int(self.inv.tensor(0, "input_layernorm.weight").shape[0])
        for lay in model.layers:
            lay.step = self
            for m in lay.modules():
                if m is not lay:
                    m.step = self
        self.set_tokens(tokens)

    # -- setup ---------------------------------------------------------------
    def set_tokens(self, tokens: int) -> None:
        """Set M: inputs, expert ranges (a random contiguous range of
        ``distinct_experts(M)`` experts per MoE layer) and state buffers."""
        torch = self.torch
        self.M = tokens
        rng = random.Random(self.seed * 1000 + tokens)
        self.expert_range: dict[int, tuple[int, int]] = {}
        for i, kind in enumerate(self.inv.kinds):
            if kind.mlp != "moe":
                continue
            pool = self.model.layers[i].mlp.experts.routed_experts.w13_weight.shape[0]
            d = min(self.distinct_experts(tokens), pool)
            s = rng.randrange(0, pool - d + 1)
            self.expert_range[i] = (s, d)
        st = max(1, STEP_ADAPTER.core_state_bytes(tokens, self.tp) // 4)
        self.state = self._rand((st,), torch.float32)
        self._inputs = {}

    def distinct_experts(self, tokens: int) -> int:
        """Distinct routed experts a step of ``tokens`` tokens reads per MoE
        layer (``tree.distinct_experts`` with the step's top-k and the
        experts per layer of its inventory)."""
        n = next((t.shape[0] for i, k in enumerate(self.inv.kinds) if k.mlp == "moe"
                  for t in self.inv.layers[i]
                  if t.path == "mlp.experts.routed_experts.w13_weight"), 0)
        return distinct_experts(tokens, self.top_k, n) if n else 0

    def _rand(self, shape, dtype):
        torch = self.torch
        if self.meta:
            return torch.empty(shape, dtype=dtype, device="meta")
        return (torch.randn(shape, device=self.device, dtype=torch.float32)
                .mul_(0.5).add_(0.1)).to(dtype)

    def inp(self, shape, dtype):
        """A cached random input (never zeros) of ``shape``/``dtype``."""
        key = (tuple(shape), dtype)
        t = self._inputs.get(key)
        if t is None:
            t = self._inputs[key] = self._rand(shape, dtype)
        return t

    # -- the step --------------------------------------------------------------
    def step(self, lead_us: float = 0.0) -> None:
        """One decode step over all layers. ``lead_us``: a spin kernel first
        (timed eager passes: lets the host enqueue ahead of the GPU)."""
        if lead_us:
            self.spin(lead_us)
        if self.timing:
            self.records, self.side_records = [], []
            self._pool_i = 0
            self._fills_seen = self.fill_count() if self.fill_count else 0
            self.start_event = self.event()
        x = self.inp((self.M, self.hidden), self.torch.bfloat16)
        for lay in self.model.layers:
            lay(x)
        if self.timing:
            if self.fill_count is not None and self.records:
                # fills issued after the last op (a trailing hook)
                self._mark_fills(self.records[-1][0], None)
            self.end_event = self.event()
            if self.cuda and any(r[3] is not None for r in self.side_records):
                # The side events come after the runtime's joins: join the
                # side stream back (after the end event, so it times nothing),
                # as a capture must end with every forked stream joined.
                self.torch.cuda.current_stream().wait_stream(self._side_stream())

    def ops_of(self, layer_idx: int):
        """Active ops of layer ``layer_idx`` in timeline order."""
        kind = self.inv.kinds[layer_idx]
        return [op for op in STEP_ADAPTER.decode_timeline(kind)
                if STEP_ADAPTER.condition_holds(op.condition, layer_idx, self.n, self.tp,
                                      self.inv.ep)]

    def layer_forward(self, lay, x):
        """Layer forward: the timeline, grouping ops into the module calls
        and methods whose hooks vLLM's install uses."""
        ops = self.ops_of(lay.layer_idx)
        names = [o.name for o in ops]
        self._ops = {o.name: o for o in ops}
        i = 0
        while i < len(names):
            name = names[i]
            mod_path = next((p for p, g in _MODULE_OPS.items() if g[0] == name
                             or (p == "mlp.experts" and name in g)), None)
            if name in _METHOD_OPS["_forward"] and lay.kind.attention == "kda":
                lay.self_attn._forward()
                i += len(_METHOD_OPS["_forward"])
                continue
            if mod_path is not None:
                mod = resolve_path(lay, mod_path)
                group = [g for g in _MODULE_OPS[mod_path] if g in self._ops]
                mod(x)
                i = names.index(group[-1]) + 1
                continue
            self.exec_op(lay, self._ops[name])
            i += 1
        return x

    def module_forward(self, mod, x=None, *a, **k):
        """Forward of a tree module: run its op group (``_MODULE_OPS``)."""
        lay = self.model.layers[mod.layer_idx]
        ops = self._ops
        if mod.path == "mlp.experts":
            return self._moe_runner(lay, mod)
        for name in _MODULE_OPS.get(mod.path, ()):
            if name in ops:
                self.exec_op(lay, ops[name])
        return x

    def method_forward(self, mod, method: str):
        """A wrapped method (``_forward``, ``forward_modular``,
        ``_maybe_reduce_final_output``): run its op group."""
        lay = self.model.layers[mod.layer_idx]
        for name in _METHOD_OPS[method]:
            if name in self._ops:
                self.exec_op(lay, self._ops[name])

    def _moe_runner(self, lay, experts):
        torch = self.torch
        ops = self._ops
        main = torch.cuda.current_stream() if self.cuda else None
        shared = [n for n in ("moe.shared.gate_up_proj", "moe.shared.act",
                              "moe.shared.down_proj") if n in ops]
        if self.cuda:
            self.aux.wait_stream(main)
            with torch.cuda.stream(self.aux):
                for n in shared:
                    self.exec_op(lay, ops[n], stream="aux")
        else:
            for n in shared:
                self.exec_op(lay, ops[n], stream="aux")
        lay.mlp.gate(None)
        self.exec_op(lay, ops["moe.routing"])
        experts.routed_experts.forward_modular()
        if self.cuda:
            main.wait_stream(self.aux)
        self.exec_op(lay, ops["moe.sum"])
        if "moe.all_reduce" in ops:
            experts._maybe_reduce_final_output(None)

    def exec_op(self, lay, op, stream: str = "main") -> None:
        """Run one op (see the module docstring), timed when ``timing``."""
        if self.timing:
            s = self.aux if stream == "aux" else None
            e0 = self.event(s)
        self._body(lay, op)
        if self.timing:
            e1 = self.event(s)
            self.records.append((lay.layer_idx, op.name, stream, e0, e1))
            self._mark_fills(lay.layer_idx, op)


    def run_op(self, layer_idx: int, op) -> None:
        """Run the body of ``op`` (an adapter ``Op``) of decoder layer
        ``layer_idx`` once, untimed (the profile's op table times it)."""
        self._body(self.model.layers[layer_idx], op)

    def matrix_reads(self, layer_idx: int, op) -> list:
        """``(path, weight, input)`` of each 2-D/3-D weight ``op`` reads in
        decoder layer ``layer_idx``, with the input its GEMM multiplies (the
        cached random input, ``[M, in]`` or ``[heads, M, k]``); empty for an
        op without a matrix weight. The profile's ops probe times these."""
        return self._matrix_reads(self.model.layers[layer_idx], op)

    def _matrix_reads(self, lay, op):
        out = []
        for path in op.reads:
            try:
                w = resolve_path(lay, path)
            except AttributeError:
                continue
            if not hasattr(w, "dim") or w.dim() not in (2, 3):
                continue
            shape = (self.M, w.shape[-1]) if w.dim() == 2 else (w.shape[0], self.M, w.shape[1])
            out.append((path, w, self.inp(shape, w.dtype)))
        return out

    def _body(self, lay, op) -> None:
        torch = self.torch
        F = torch.nn.functional
        M = self.M
        device_profile = self.device_profile
        if op.cls == "collective":
            self.spin(device_profile.allreduce_us(self.tp, M * self.hidden * 2))
            return
        if op.cls == "expert_stream":
            pool = resolve_path(lay, op.reads[0])
            s, d = self.expert_range[lay.layer_idx]
            me = max(1, math.ceil(M * 8 / d))
            w = pool[s:s + d]
            x = self.inp((d, me, w.shape[2]), w.dtype)
            torch.bmm(x, w.transpose(1, 2))
            return
        if op.cls == "attention_core":
            self.state.mul_(1.0)
            self.spin(device_profile.attention_core_us)
            return
        did = False
        for path, w, x in self._matrix_reads(lay, op):
            if op.name in _APPLY_OPS and path.endswith(".weight"):
                mod = resolve_path(lay, _APPLY_OPS[op.name])
                mod.quant_method.apply(mod, x)
            elif w.dim() == 2:
                F.linear(x, w)
            else:
                torch.bmm(x, w)
            did = True
        if not did:
            self.spin(device_profile.small_kernel_us)
