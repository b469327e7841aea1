"""The run-time switch: one device-resident int32 word per runtime (per
installed schedule) that every fill kernel reads before it moves a byte
(``fill_kernels``: low bit 0 = walk no row, exit at once).

A CUDA graph captured with the plan's fills bakes the word's address in, so
writing the word turns the fills of every later replay on or off with no
recapture; the weights the GEMMs read are never written by a fill, so the
numerics are the same either way. One word per schedule, not per window:
the lint and ``l2sched verify`` judge a schedule as a whole (windows do not
add up: benchmarks/results/h200-2026-12-01-diag-*.md), and one word is one
load per worker.

Kernels launched without a runtime's word (probes, tests) read the
device's always-on word (``always_on``).
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
#: device index -> the always-on word (kept for the process: captured
#: graphs may hold its address).
_ALWAYS_ON: dict[int, object] = {}


class SwitchWord:
    """One int32 switch word on ``device`` (torch tensor ``[1]``), 1 = fills
    on. ``ptr`` is its device address (what kernels get). Created on."""

    def __init__(self, torch, device: int, on: bool = True):
        self._torch = torch
        self.device = device
        # a normal tensor even when made inside a forward under
        # torch.inference_mode (vLLM's): an inference tensor refuses the
        # in-place write of ``set`` outside that mode (H200 run, 2026-12-03)
        with torch.inference_mode(False):
            self.tensor = torch.full((1,), 1 if on else 0, dtype=torch.int32,
                                     device=device)
        self.ptr = int(self.tensor.data_ptr())
        self.on = on

    def set(self, on: bool) -> bool:
        """Write the word (1 or 0) and wait for the write, so the next replay
        or launch on any stream reads the new value. Returns False, changing
        nothing, while the current stream is being captured (a write inside
        a capture would replay with every step)."""
        torch = self._torch
        if torch.cuda.is_current_stream_capturing():
            return False
        with torch.cuda.device(self.device), torch.inference_mode(False):
            self.tensor.fill_(1 if on else 0)
            torch.cuda.current_stream(self.device).synchronize()
        self.on = bool(on)
        return True


def always_on(device: int) -> int:
    """Device address of ``device``'s always-on switch word (int32 1), made
    once per process and never freed. Raises what torch raises without a
    CUDA device."""
    with _lock:
        word = _ALWAYS_ON.get(device)
        if word is None:
            import torch

            word = _ALWAYS_ON[device] = SwitchWord(torch, device, on=True)
        return word.ptr
