"""Evaluating batches of candidate texts, in worker processes when more
than one job is asked for.

Results come back in submission order and every evaluation is a pure
function of the text, so the number of jobs never changes the answer (the
fitted file is byte-identical with ``--jobs 1`` and ``--jobs 4``).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import threading
from concurrent.futures import ProcessPoolExecutor

from l2sched.fit.evaluate import Evaluator

_WORKER: Evaluator | None = None
_ALL_STARTED = None  # the workers' barrier (a multiprocessing Barrier)

# how long the parent waits for every worker to start and build its
# Evaluator (a few seconds on a 2-core CI machine) before it gives up
START_TIMEOUT_S = 300.0


def _init(args: tuple, kwargs: dict, all_started) -> None:
    global _WORKER, _ALL_STARTED
    # Ctrl-C reaches the whole process group: the parent reports it once,
    # the workers stop quietly when it shuts the pool down
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _ALL_STARTED = all_started
    _WORKER = Evaluator(*args, **kwargs)


def _work(item: tuple):
    assert _WORKER is not None
    return _WORKER.evaluate(*item)


def _wait_for_the_others() -> None:
    # each worker holds this task until all of them run it, so no worker
    # is idle and the pool starts a new process for every such task
    _ALL_STARTED.wait(START_TIMEOUT_S)


@contextlib.contextmanager
def _stop_signals_deferred():
    """SIGINT and SIGTERM that arrive inside the block are delivered, to
    the handlers in place before it, when it ends. A worker that the
    forkserver is still starting when its parent shuts the pool down
    fails to unpickle the pool's semaphores and prints a traceback
    (FileNotFoundError, seen in CI); starting every worker inside this
    block keeps a stop from landing between the two."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    wanted = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda signum, frame: arrived.append(signum))
                for s in wanted}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(arrived):
            signal.raise_signal(s)


class BatchEvaluator:
    """An ``Evaluator`` (built from ``args``/``kwargs``) plus, for ``jobs``
    > 1, a process pool with one copy per worker. ``count`` is the number of
    texts evaluated (cache hits excluded)."""

    def __init__(self, args: tuple, kwargs: dict, jobs: int = 1):
        self.local = Evaluator(*args, **kwargs)
        self.count = 0
        self.pool = None
        if jobs > 1:
            # not "fork": the CLI's progress display runs a thread, and a
            # process forked from a threaded one may inherit a held lock
            methods = multiprocessing.get_all_start_methods()
            ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods
                                              else "spawn")
            self.jobs = jobs
            with _stop_signals_deferred():
                all_started = ctx.Barrier(jobs)
                self.pool = ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_init,
                                                initargs=(args, kwargs, all_started))
                try:
                    held = [self.pool.submit(_wait_for_the_others) for _ in range(jobs)]
                    for f in held:
                        f.result()
                except BaseException:
                    self.close()
                    raise

    def evaluate_many(self, texts: list[str], trees=None) -> list:
        """The ``Evaluation`` of every text (with its parsed ``trees``, when
        given, to skip the parser), in order."""
        cache = self.local.cache
        items = dict(zip(texts, trees or [None] * len(texts)))
        todo = [(t, tree) for t, tree in items.items() if t not in cache]
        self.count += len(todo)
        if self.pool is not None and len(todo) > 1:
            chunk = max(1, len(todo) // (4 * self.jobs))
            for (text, _), ev in zip(todo, self.pool.map(_work, todo, chunksize=chunk)):
                cache[text] = ev
        else:
            for text, tree in todo:
                self.local.evaluate(text, tree)
        return [cache[t] for t in texts]

    def close(self) -> None:
        """Stop the worker processes."""
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None
