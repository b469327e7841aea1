"""The engine ``l2sched verify`` measures: vLLM's offline ``LLM`` with the
l2sched plugin configured and the switch worker extension
(``switch.WORKER_EXTENSION``), wrapped as a ``verify.Engine``. Imports vLLM
only inside ``start_engine``."""

from __future__ import annotations

import random
import time

from l2sched.vllm.replay import worst_of_ranks
from l2sched.vllm.switch import WORKER_EXTENSION


class SwitchFailed(RuntimeError):
    """A worker has no installed schedule, refused the switch, or could not
    time its decode graphs."""


class VllmEngine:
    """``verify.Engine`` over a started ``vllm.LLM``: fixed prompts of
    ``input_len`` token ids per batch size (seeded, so every arm decodes the
    same prompts), greedy sampling with ``ignore_eos``."""

    def __init__(self, llm, sampling_params_cls, input_len: int, vocab: int):
        self.llm = llm
        self._sp = sampling_params_cls
        self.input_len = input_len
        self.vocab = vocab
        self._prompts: dict[int, list] = {}

    def prompts(self, batch: int) -> list:
        """The ``batch`` prompts (token ids in ``[100, vocab - 100)``)."""
        if batch not in self._prompts:
            rng = random.Random(1_000_003 * batch + self.input_len)
            hi = max(self.vocab - 100, 101)
            self._prompts[batch] = [
                {"prompt_token_ids": [rng.randrange(100, hi)
                                      for _ in range(self.input_len)]}
                for _ in range(batch)]
        return self._prompts[batch]

    def generate(self, batch: int, max_tokens: int) -> tuple[float, list]:
        """``verify.Engine.generate``."""
        sp = self._sp(temperature=0.0, max_tokens=max_tokens, ignore_eos=True,
                      detokenize=False)
        ps = self.prompts(batch)
        t0 = time.perf_counter()
        outs = self.llm.generate(ps, sp, use_tqdm=False)
        dt = time.perf_counter() - t0
        return dt, [list(o.outputs[0].token_ids) for o in outs]

    def state(self) -> list[dict]:
        """Every worker's ``switch.SwitchState`` as a dict."""
        return list(self.llm.collective_rpc("l2sched_prefetch_state"))

    def switch(self, on: bool) -> None:
        """``verify.Engine.switch``. Raises ``SwitchFailed``."""
        try:
            answers = self.llm.collective_rpc("l2sched_set_prefetch", args=(bool(on),))
        except Exception as e:  # the worker's traceback is in the engine log
            raise SwitchFailed(f"the switch RPC failed: {type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''}") from None
        for rank, a in enumerate(answers):
            if not a.get("installed"):
                raise SwitchFailed(f"worker {rank} has no installed schedule (its "
                                   "'prefetch OFF' line in the engine log says why)")
            if a.get("refused"):
                raise SwitchFailed(f"worker {rank} refused the switch (a CUDA graph "
                                   "capture was in progress)")


    def missing_graphs(self, batches: list[int]) -> str:
        """"" when every worker captured a FULL decode graph of every batch
        size in ``batches``, else one line naming the first worker that did
        not, the sizes it lacks and the ones it has. Raises ``SwitchFailed``
        when the RPC fails."""
        try:
            answers = self.llm.collective_rpc("l2sched_decode_graph_sizes")
        except Exception as e:
            raise SwitchFailed(f"listing the decode graphs failed: {type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''}") from None
        for rank, have in enumerate(answers):
            lack = [b for b in batches if b not in set(have)]
            if lack:
                return (f"worker {rank} has no FULL decode CUDA graph for batch size "
                        f"{', '.join(map(str, lack))} (captured: "
                        f"{', '.join(map(str, have)) or 'none: enforce_eager, or no FULL mode'})")
        return ""

    def replay_ab(self, batch: int, rounds: int, warmup: int, replays: int) -> dict:
        """``verify.ReplayEngine.replay_ab`` through every worker
        (``switch.PrefetchSwitchExtension.l2sched_replay_ab``), the slowest
        rank's times. Raises ``SwitchFailed`` with the worker's first line
        (a batch size without a FULL decode graph, no installed schedule)."""
        try:
            answers = self.llm.collective_rpc(
                "l2sched_replay_ab", args=([int(batch)], rounds, warmup, replays))
        except Exception as e:  # the worker's traceback is in the engine log
            raise SwitchFailed(f"timing the decode graphs failed: {type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''}") from None
        try:
            return worst_of_ranks(list(answers))[int(batch)]
        except (ValueError, KeyError) as e:  # answers of another shape or batch
            raise SwitchFailed(f"the workers' decode graph timings do not match: {e}"
                               ) from None


def start_engine(model: str, *, tp: int, ep: bool, section: dict, load_format: str,
                 max_batch: int, input_len: int, output_len: int,
                 engine_args: dict) -> VllmEngine:
    """Start ``vllm.LLM`` for ``model`` (a directory with ``config.json``)
    with the plugin section ``section`` (``additional_config["l2sched"]``),
    the switch extension, ``tensor_parallel_size=tp``, expert parallel
    ``ep``, ``max_num_seqs >= max_batch``, ``seed=0``, no tokenizer; then
    ``engine_args`` (``vllm.LLM`` keyword arguments) override any of these.
    Raises whatever vLLM raises."""
    from vllm import LLM, SamplingParams

    kwargs = dict(model=model, load_format=load_format, skip_tokenizer_init=True,
                  seed=0, tensor_parallel_size=tp, enable_expert_parallel=ep,
                  max_num_seqs=max(max_batch, 1),
                  max_model_len=input_len + output_len + 16,
                  worker_extension_cls=WORKER_EXTENSION,
                  additional_config={"l2sched": section})
    kwargs.update(engine_args)
    llm = LLM(**kwargs)
    hf = llm.llm_engine.model_config.hf_text_config
    vocab = int(getattr(hf, "vocab_size", 32000) or 32000)
    return VllmEngine(llm, SamplingParams, input_len, vocab)
