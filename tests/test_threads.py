"""Issue 17 item 4: split-batch (DBO / micro-batching) threads. vLLM 0.33.0's
ubatch wrapper runs model forwards in worker threads while the main thread
holds the capture. l2sched refuses to install when DBO or micro-batching is
on (one log line, tested in ``tests/test_vllm_plugin.py``), the capture
phase it tracks is process-wide (a warm-up forward in any thread inside
vLLM's ``graph_capture`` is recognised), and a runtime issues and joins from
one thread only (fills from any other thread are skipped, logged once), so
its fork/join events and pending join are never shared across threads."""

from __future__ import annotations

import logging
import threading

import pytest

from l2sched.compiler.plan import ByteRange, Plan, WindowIssue
from l2sched.runtime import make_runtime
from l2sched.runtime.gate import StepInfo
from l2sched.vllm.step_info import capture_phase, in_capture_phase, vllm_step_info


def _plan():
    issues = (WindowIssue("A", "attn.after_first_proj", 0, 4096,
                          (ByteRange(0, "w", 0, 4096),)),)
    return Plan(schedule="t", model="glm5next", device="h200", tp=1, tp_rank=0,
                ep=False, policy="evict_last", max_tokens=256, set_aside=0,
                num_layers=1, issues=issues)


def _in_thread(fn):
    box = []
    t = threading.Thread(target=lambda: box.append(fn()))
    t.start()
    t.join()
    return box[0]


def test_item04_capture_phase_is_process_wide():
    assert not in_capture_phase()
    with capture_phase():
        assert in_capture_phase()
        assert _in_thread(in_capture_phase)  # was False: threading.local
        # vLLM's forward context is absent here: the step is a warm-up
        assert _in_thread(vllm_step_info).warmup
        with capture_phase():
            pass
        assert in_capture_phase()
    assert not in_capture_phase() and not _in_thread(in_capture_phase)


def test_item04_capture_phase_balances_on_error():
    with pytest.raises(RuntimeError):
        with capture_phase():
            raise RuntimeError("capture failed")
    assert not in_capture_phase()


def test_item04_runtime_issues_from_one_thread_only(caplog):
    caplog.set_level(logging.WARNING, logger="l2sched")
    rt = make_runtime(_plan(), "dry-run")
    rt.set_step(StepInfo(num_tokens=1))
    assert rt.issue(0)
    assert _in_thread(lambda: rt.issue(0)) is False
    assert _in_thread(lambda: rt.issue(0)) is False
    _in_thread(rt.join)  # a join from another thread does nothing
    assert [e.op for e in rt.events] == ["fork", "launch"]
    rt.join()
    assert [e.op for e in rt.events] == ["fork", "launch", "join"]
    assert rt.stats.skipped == {"other-thread": 2}
    warned = [r.getMessage() for r in caplog.records if "thread" in r.getMessage()]
    assert len(warned) == 1, warned


def test_item04_cuda_runtime_skips_other_threads_before_touching_cuda():
    rt = make_runtime(_plan(), "cuda")
    rt._thread = threading.get_ident() + 1  # another thread issued first
    assert rt.issue(0) is False and rt.stats.skipped == {"other-thread": 1}
    rt.join()
    assert rt.stats.joined == 0
