"""The device profile's data: ``DeviceProfile`` (one GPU's cost-model
numbers), ``FillMode`` (one fill kernel's shape and cost), ``OpTimes`` (one
op's measured times, per model in ``DeviceProfile.ops``) and the bulk
fill's default launch shape. ``parse`` builds them from a TOML file
(``docs/devices.md``). Units: bytes (B), GB/s = 10^9 B/s, microseconds
(us)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from l2sched.device.allreduce import AllReduceModel
from l2sched.device.interpolate import linear_points, log_interp
from l2sched.device.limits import DeviceLimits
from l2sched.device.provenance import FieldOrigin

#: The key of op tables in the layout before they were keyed by model
#: (``[ops."KIND"]``, no model part): such a table names no model, so it
#: applies to any (````DeviceProfile.op_times````; the model's check,
#: ``l2sched.model.device_ops``, checks it against the schedule's model) and
#: the profile gets a note (``DeviceProfile.notes``), so the profiles
#: recorded in earlier results still load.
LEGACY_OPS_MODEL = "*"


#: The kernel classes a concurrent fill slows, each with its own term in
#: ``[fill.MODE]`` (issue 45): ``gemm`` (a memory-bound GEMM; its L2 hits are
#: slowed by ``gemm_slowdown``), ``small`` (a latency-bound small kernel,
#: ``slowdown``), ``attention`` (an attention core: KDA recurrent, MLA sparse
#: decode; ``attention_slowdown``), ``routing`` (routing and top-k,
#: ``routing_slowdown``) and ``allreduce`` (a collective,
#: ``allreduce_slowdown``).
INTERFERENCE_CLASSES = ("gemm", "small", "attention", "routing", "allreduce")
#: ``[fill.MODE]`` key of each class's slowdown.
CLASS_KEYS = {"gemm": "gemm_slowdown", "small": "slowdown",
              "attention": "attention_slowdown", "routing": "routing_slowdown",
              "allreduce": "allreduce_slowdown"}


#: Launch shape of the bulk fill when a profile gives none (no ``[fill.bulk]``
#: table): 16 KiB chunks as vLLM 0.33.0's Kimi-K3 prefetch kernel
#: (docs/sources.md#kimi-k3-prefetch), 264 CTAs x 32 threads, the best shape
#: of the earlier H200 probe (docs/sources.md#h200-early-probes).
DEFAULT_BULK_SHAPE = {"grid": 264, "threads": 32, "chunk": 16384, "stages": 1}


@dataclass(frozen=True)
class FillMode:
    """How one fill kernel (``units.FILL_MODES``) runs and performs on a
    device: its launch shape (``grid`` CTAs, ``threads`` per CTA, ``chunk``
    bytes per request, ``stages`` shared-memory buffers for ``copy``), the
    landed fill rate ``gbps`` (GB/s), ``effect`` (the share of the
    cold-to-L2-hot time difference a consumer gains from bytes the fill made
    resident; 1 = as fast as a hot re-read), ``launch_us`` (fork + launch,
    us), ``slowdown`` (the fraction by which a latency-bound kernel that
    runs while the fill reads device memory is slowed: 0.1 = 10% longer)
    and ``gemm_slowdown`` (the same for a GEMM whose weight is L2-resident:
    what the fill costs it besides device-memory bandwidth, i.e. SMs and L2;
    None = not measured, ``slowdown`` applies), ``allreduce_slowdown`` (the
    same for an all-reduce: it advances at ``1 / (1 + allreduce_slowdown)``
    of its rate while the fill reads device memory; derived from ``l2sched
    bench tp``'s all-reduce-with-fill measurement by
    ``device.overlap.slowdown_for_extra``; 0 = not measured).
    Per kernel class a fill can overlap (issue 45, ``INTERFERENCE_CLASSES``):
    ``attention_slowdown`` (an attention core: the KDA recurrent core, MLA
    sparse decode) and ``routing_slowdown`` (routing and top-k kernels:
    ``moe.routing``, ``moe.align``, the indexer's ``topk``), each None when
    the profile does not write it: then ``slowdown`` applies to that class
    (one slowdown for every latency-bound kernel, the layout before per-class
    terms). ``slowdown`` itself is the latency-bound small kernel's class.
    ``source``: the measurement the numbers come from."""

    mode: str
    grid: int
    threads: int
    chunk: int
    stages: int
    gbps: float
    effect: float
    launch_us: float
    slowdown: float = 0.0
    source: str = ""
    landed: tuple[tuple[float, float], ...] = ()
    allreduce_slowdown: float = 0.0
    gemm_slowdown: float | None = None
    attention_slowdown: float | None = None
    routing_slowdown: float | None = None

    def class_slowdown(self, cls: str) -> float:
        """The slowdown (fraction) this fill gives a concurrent kernel of
        interference class ``cls`` (``INTERFERENCE_CLASSES``): the class's
        own term where the profile writes one, else ``slowdown`` (the
        all-reduce class: ``allreduce_slowdown``, 0 when not measured)."""
        if cls == "allreduce":
            return self.allreduce_slowdown
        own = {"gemm": self.gemm_slowdown, "attention": self.attention_slowdown,
               "routing": self.routing_slowdown}.get(cls)
        return self.slowdown if own is None else own

    def effect_at(self, nbytes: int) -> float:
        """The landed fraction for a fill of ``nbytes`` bytes: ``landed``
        (``(MB, fraction)`` points measured by ``l2sched profile``)
        interpolated linearly in size, held flat outside them; ``effect``
        without points."""
        if not self.landed:
            return self.effect
        return linear_points(self.landed, nbytes / 1e6)


@dataclass(frozen=True)
class OpTimes:
    """Measured times of one op of the decode step (``l2sched profile``):
    ``cold_us``/``hot_us`` (us) at each token count of ``m``: weights read
    from device memory after an L2 flush / L2-resident right after itself.
    ``step_gap_us`` at each token count of ``step_m`` (both empty without
    them): the cold -> hot gap the op shows inside the decode step (time a
    fill saves it per share of its bytes made resident), measured by the
    profile's ``step_fill`` probe (``bench.profile_gaps``); where given, it
    replaces ``cold - hot``."""

    m: tuple[int, ...]
    cold_us: tuple[float, ...]
    hot_us: tuple[float, ...]
    step_m: tuple[int, ...] = ()
    step_gap_us: tuple[float, ...] = ()

    def at(self, tokens: int) -> tuple[float, float]:
        """``(cold_us, hot_us)`` at ``tokens``: linear in log(tokens)
        between measured points, held flat outside them; hot = cold - the
        step gap where the profile measured one."""
        cold, hot = log_interp(self.m, (self.cold_us, self.hot_us), tokens)
        if self.step_m:
            (gap,) = log_interp(self.step_m, (self.step_gap_us,), tokens)
            hot = max(0.0, cold - gap)
        return cold, hot


@dataclass(frozen=True)
class DeviceProfile:
    """One GPU's cost-model numbers (see ``docs/devices.md``).

    Bytes: ``l2_bytes``, ``set_aside_max_bytes``,
    ``evict_last_protected_bytes`` (evict_last bytes that survive a stream
    without a set-aside). Fractions: ``evict_normal_survival``,
    ``fill_effect`` (the share of the cold-to-L2-hot time difference that a
    consumer gains from bytes a fill made resident; 1 = as fast as a hot
    re-read, measured by effect per device and fill kernel). Bandwidths in
    GB/s: ``dram_read_gbps`` (device-memory ceiling shared by all concurrent
    reads), ``gemm_dram_gbps``/``gemm_l2_gbps`` (an M<=256 GEMM reading its
    weight from device memory / from L2), ``fill_gbps`` (bulk-prefetch fill).
    Times in us: ``gemm_fixed_us``, ``fill_launch_us``, ``kernel_gap_us``,
    ``small_kernel_us``, ``attention_core_us``. ``allreduce`` maps a TP
    degree to its ``AllReduceModel``. The GPU the profile describes, as the
    driver reports it (``[gpu]`` and ``compute_capability`` in the file;
    ``identity_mismatches`` compares them with a GPU): ``compute_capability``
    ``(major, minor)``, ``gpu_names`` (device names, e.g. ``"NVIDIA
    H200"``), ``sm_count`` (streaming multiprocessors), and ``l2_bytes``;
    ``None``/empty when not given (then not compared).
    ``smem_per_block_optin_bytes``: the GPU's opt-in shared memory per
    thread block (``[gpu] smem_per_block_optin_bytes``, B; ``None`` when not
    given); with ``sm_count``, ``l2_bytes``, ``set_aside_max_bytes`` and
    ``compute_capability`` it makes ``limits``, the ``DeviceLimits`` a fill
    kernel is fitted to when the GPU is not present.
    ``effective_l2_bytes``: the L2 bytes a re-read still hits (the measured
    knee, ``l2.effective_bytes``); ``ops``: measured per-op times per model
    (``model -> (layer kind, op) -> OpTimes``, ``[ops.MODEL."KIND"]``
    tables; ``op_times(model)`` reads one model's) that replace the GEMM
    rates for those ops; ``provenance``/``measured``: where a
    measured profile came from and the probe and median/p10/p90 of each
    number.
    ``fill_modes`` maps each fill kernel the profile has numbers for to its
    ``FillMode`` (``[fill.MODE]`` tables; without a ``[fill.bulk]`` table the
    bulk mode is ``fill_gbps``/``fill_effect``/``fill_launch_us`` with
    ``DEFAULT_BULK_SHAPE``); ``fill_default`` is the mode a schedule that
    names none gets (``[fill] default``, else ``bulk``).
    ``fill_slowdown_scale`` (``latency.fill_slowdown_scale``, optional,
    default 1): a main-stream op other than a collective or the expert
    stream runs at ``1 / (1 + fill_slowdown_scale x slowdown)`` of its rate
    while a fill of kernel ``slowdown`` reads device memory (h200: calibrated
    on tests/data/results/h200-2026-12-01-fit-proof-2a.json.gz).
    ``set_aside_stream_slowdown`` (``l2.set_aside_stream_slowdown``,
    optional, default 0): the fraction by which the routed-expert stream's
    device-memory reads are slower with ``set_aside_max_bytes`` reserved,
    linear in the reserved bytes (h200: the same result's ``aside-max``
    arm). ``fill_fork_m``/``fill_fork_us`` (``latency.fill_fork_m`` /
    ``latency.fill_fork_us``, optional, together; empty = no term, 0 us):
    the main-stream cost (us) per fill forked at a hook op of a FULL-captured
    decode step, at each token count of ``fill_fork_m``: the main stream's
    next op after the hook op starts that much later per fill forked there
    (``fill_fork_at``; measured by ``l2sched profile``'s ``fill_fork`` probe,
    lone windows at 0.5 MB in the bench's decode step with the shared
    experts on their aux stream). ``source_text``: the TOML text the profile was read from (for
    locating a problem found after loading, ``parse.profile_error``; ``""``
    for one built in code). ``notes``: what the reader did that the file
    should say itself (op tables of the old layout, ``[ops."KIND"]``, read
    under ``parse.LEGACY_OPS_MODEL``, any model's; ``legacy_ops`` is then True).
    ``origins``: the ``[origin]`` table, field -> ``FieldOrigin`` (where
    each number came from; ``provenance.field_origins`` fills in the fields
    a file without one leaves out).
    """

    name: str
    description: str
    path: str
    l2_bytes: int
    set_aside_max_bytes: int
    evict_last_protected_bytes: int
    evict_normal_survival: float
    fill_effect: float
    dram_read_gbps: float
    gemm_dram_gbps: float
    gemm_l2_gbps: float
    gemm_fixed_us: float
    fill_gbps: float
    fill_launch_us: float
    kernel_gap_us: float
    small_kernel_us: float
    attention_core_us: float
    allreduce: Mapping[int, AllReduceModel] = field(default_factory=dict)
    compute_capability: tuple[int, int] | None = None
    gpu_names: tuple[str, ...] = ()
    sm_count: int | None = None
    smem_per_block_optin_bytes: int | None = None
    fill_modes: Mapping[str, FillMode] = field(default_factory=dict)
    fill_default: str = "bulk"
    effective_l2_bytes: int | None = None
    ops: Mapping[str, Mapping[tuple[str, str], OpTimes]] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)
    measured: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    fill_slowdown_scale: float = 1.0
    set_aside_stream_slowdown: float = 0.0
    fill_fork_m: tuple[int, ...] = ()
    fill_fork_us: tuple[float, ...] = ()
    source_text: str = field(default="", repr=False, compare=False)
    notes: tuple[str, ...] = ()
    legacy_ops: bool = False
    origins: Mapping[str, FieldOrigin] = field(default_factory=dict)

    @property
    def is_measured(self) -> bool:
        """True when ``l2sched profile`` wrote this profile on the GPU it
        describes (a ``[provenance]`` table); False for an estimate from
        published numbers, whose lint verdicts are unverified."""
        return bool(self.provenance)

    def fill_fork_at(self, tokens: int) -> float:
        """The main-stream cost (us) of one fill forked in a FULL-captured
        decode step of ``tokens`` tokens: ``fill_fork_us`` linear in
        log(tokens) between the token counts of ``fill_fork_m``, held flat
        outside them (as ``OpTimes.at``); 0 without the term."""
        if not self.fill_fork_m:
            return 0.0
        return log_interp(self.fill_fork_m, (self.fill_fork_us,), tokens)[0]

    def op_times(self, model: str) -> Mapping[tuple[str, str], OpTimes]:
        """The measured op times of adapter ``model`` (``(layer kind, op) ->
        OpTimes``, the ``[ops.MODEL."KIND"]`` tables); empty when the
        profile has none for it (the lint then uses the GEMM rates). A
        table of the old layout, which names no model, serves any model: its
        entries stand where the model's own tables have none."""
        own, legacy = self.ops.get(model), self.ops.get(LEGACY_OPS_MODEL)
        if own and legacy:
            return {**legacy, **own}
        return own or legacy or {}

    @property
    def limits(self) -> DeviceLimits | None:
        """The GPU's ``DeviceLimits`` as this profile gives them (``[gpu]``
        ``smem_per_block_optin_bytes`` and ``sm_count``, ``l2.bytes``,
        ``l2.set_aside_max_bytes``, ``compute_capability``); ``None`` when
        the profile lacks the shared-memory limit, the SM count or the
        compute capability."""
        if (self.smem_per_block_optin_bytes is None or self.sm_count is None
                or self.compute_capability is None):
            return None
        return DeviceLimits(self.smem_per_block_optin_bytes, self.sm_count,
                            self.l2_bytes, self.set_aside_max_bytes,
                            tuple(self.compute_capability),
                            source=f"device profile {self.path or self.name}")

    @property
    def capacity_bytes(self) -> int:
        """Bytes of filled lines the L2 holds for readers on every SM: the
        measured effective L2 (``l2.effective_bytes``), else ``l2_bytes``."""
        return self.effective_l2_bytes or self.l2_bytes

    def fill_mode(self, mode: str = "") -> FillMode:
        """The ``FillMode`` of fill kernel ``mode`` (``""`` = the profile's
        default). Raises ``KeyError`` when the profile has no numbers for
        it."""
        return self.fill_modes[mode or self.fill_default]

    def allreduce_us(self, tp: int, nbytes: int) -> float:
        """All-reduce time (us) at TP degree ``tp`` for ``nbytes`` bytes; 0 at
        TP 1. A degree missing from the profile uses the nearest larger one
        (else the largest), so the estimate errs slow."""
        if tp <= 1 or not self.allreduce:
            return 0.0
        degrees = sorted(self.allreduce)
        pick = next((d for d in degrees if d >= tp), degrees[-1])
        return self.allreduce[pick].time_us(nbytes)

    def reserved_bytes(self, set_aside: int) -> int:
        """Bytes of L2 a schedule's ``set_aside`` (bytes, -1 = the device
        maximum) reserves as persisting, whatever its policy."""
        if set_aside < 0:
            return self.set_aside_max_bytes
        return min(max(0, set_aside), self.set_aside_max_bytes)

    def set_aside_stream_factor(self, set_aside: int) -> float:
        """Time factor (>= 1) of the routed-expert stream's device-memory
        reads with ``set_aside`` reserved: ``1 + set_aside_stream_slowdown x
        reserved / set_aside_max_bytes``; 1 without a reservation."""
        if self.set_aside_max_bytes <= 0:
            return 1.0
        return 1.0 + self.set_aside_stream_slowdown * (
            self.reserved_bytes(set_aside) / self.set_aside_max_bytes)

    def protected_bytes(self, set_aside: int, policy: str) -> int:
        """Bytes of filled lines that survive streaming traffic: the
        persisting set-aside when one is reserved (``set_aside`` bytes, -1 =
        the device maximum), else the profile's measured no-set-aside figure;
        0 for policies other than ``evict_last``."""
        if policy != "evict_last":
            return 0
        if set_aside < 0:
            return self.set_aside_max_bytes
        if set_aside > 0:
            return min(set_aside, self.set_aside_max_bytes)
        return self.evict_last_protected_bytes
