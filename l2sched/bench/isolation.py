"""Per-arm persisting-L2 set-aside in an interleaved benchmark.

The set-aside is device-wide state (``runtime.set_aside``): once one arm's
plan asks for ``set_aside max``, the ledger keeps the largest request in
force for every arm captured on that device, ``none`` included, and its
``evict_last`` lines stay persisting after the limit changes. The fit
proof of 2026-12-01 measured the result (benchmarks/results/
h200-2026-12-01-fit-proof.md): the no-prefetch step was 3.5% (M=1) to 22%
(M=64) slower than in the day's runs without a set-aside, so every gain in
it was against a degraded baseline.

``SetAsideIsolation`` gives each arm its own set-aside during the replays:
the runtimes' requests (made at ``prepare``, before capture) are withdrawn
once every arm is captured, and before each replay the arm's own request
is made under one owner and the persisting lines of the previous replay
are demoted to normal (``reset_persisting_lines``). A set-aside is not
captured into a CUDA graph, so the graphs replay unchanged.
"""

from __future__ import annotations

from l2sched.runtime.set_aside import (apply_set_aside, release_set_aside,
                                       reset_persisting_lines)

#: The ledger owner of the replay-time requests.
OWNER = "bench replay"


class SetAsideIsolation:
    """The set-aside of each arm during replays.

    ``set_asides``: arm name -> the plan's ``set_aside`` (bytes, -1 = the
    device maximum, 0 = none; arms without a plan are 0). ``device``: the
    CUDA device index. Inactive (every call a no-op) when no arm asks for
    a set-aside or ``dry`` (no GPU): then nothing device-wide changes and
    the replays are as before.

    ``before(arm)`` is called before each replay of ``arm`` (outside its
    timed region), ``close()`` once after the last replay. ``record()`` is
    what the result file stores: ``{"active", "per_arm", "resets",
    "refused"}``."""

    def __init__(self, set_asides: dict[str, int], device: int = 0, dry: bool = False):
        self.per_arm = dict(set_asides)
        self.device = device
        self.active = not dry and any(v != 0 for v in self.per_arm.values())
        self._current: int | None = None
        self.resets = 0
        self.refused = 0

    def start(self, runtimes) -> None:
        """Withdraw the set-aside requests ``runtimes`` made when they were
        prepared (``close()`` of each; None entries are skipped)."""
        if not self.active:
            return
        for rt in runtimes:
            if rt is not None and hasattr(rt, "close"):
                rt.close()

    def before(self, arm: str) -> None:
        """Put ``arm``'s set-aside in force and demote the persisting lines
        the previous replay left."""
        if not self.active:
            return
        want = self.per_arm.get(arm, 0)
        if want != self._current:
            got = (apply_set_aside(self.device, want, OWNER, capturing=False) if want
                   else release_set_aside(self.device, OWNER, capturing=False))
            if want and got is None:
                self.refused += 1
            self._current = want
        if reset_persisting_lines(self.device):
            self.resets += 1

    def close(self) -> None:
        """Withdraw the replay-time request (the limit before it returns)."""
        if self.active and self._current:
            release_set_aside(self.device, OWNER, capturing=False)
        self._current = None

    def record(self) -> dict:
        """What the result file says about the set-aside of the replays."""
        return {"active": self.active, "per_arm": self.per_arm,
                "resets": self.resets, "refused": self.refused}
