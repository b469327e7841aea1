"""Issue 17 item 5: a kernel's fallback to the generic launch path rebuilds
the same variant (the key carries mode, grid, threads, chunk, stages and
policy), and a failed fallback turns off only that variant. CPU: the CuTe
DSL compiler is replaced by a recorder."""

from __future__ import annotations

import pytest

from l2sched.runtime import kernel as K


@pytest.fixture
def compiles(monkeypatch):
    """Every ``compile_fill`` call as ``(spec, use_ffi)``; the specs in
    ``fail`` fail to compile on the generic path."""
    calls, fail = [], set()

    def compile_fill(spec, policy, use_ffi):
        calls.append((spec, use_ffi))
        if not use_ffi and spec in fail:
            raise RuntimeError("generic path broken")
        return object()

    monkeypatch.setattr(K, "compile_fill", compile_fill)
    monkeypatch.setattr(K, "_generic_args", lambda: None)
    K.reset_for_tests()
    yield calls, fail
    K.reset_for_tests()


def test_item05_fallback_keeps_the_mode_and_every_parameter(compiles):
    calls, _ = compiles
    load = K.KernelSpec(mode="load", grid=1056, threads=128, chunk=128, policy="evict_last")
    kern = K._compile_first(0, load, (True,))
    assert kern.key == (0, load) and kern.spec.mode == "load"
    again = K.fallback_to_generic(kern)
    assert again is not None and again.spec == load and not again.ffi
    assert calls[-1] == (load, False)  # not rebuilt as bulk


def test_item05_a_failed_fallback_disables_only_that_variant(compiles, caplog):
    calls, fail = compiles
    copy = K.KernelSpec(mode="copy", grid=66, threads=32, chunk=32768, stages=4)
    bulk = K.KernelSpec(mode="bulk")
    k_copy = K._compile_first(0, copy, (True,))
    k_bulk = K._compile_first(0, bulk, (True,))
    fail.add(copy)
    caplog.set_level("WARNING", logger="l2sched")
    assert K.fallback_to_generic(k_copy) is None
    assert "failed to compile; it stays off" in caplog.text
    assert K.disabled_reason() is None  # the process keeps prefetching
    assert K.fallback_to_generic(k_bulk) is not None
