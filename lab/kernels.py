"""The fill-kernel forms only the lab's experiments build, registered into
``l2sched.runtime`` by ``register()`` (the product never builds them):

- ``line``: one ``prefetch.global.L2`` per 128-byte line (the load/store
  unit's prefetch; the PTX ISA allows only ``L2::evict_last`` or no hint);
- ``touch``: one 4-byte ordinary load per ``chunk`` bytes with no
  prefetch-size hint: with a chunk of 64 KiB it caches the rows' address
  translations and lands 0.05% of their bytes (lab/experiments/
  bench_run_touch.py);
- the cache policy ``none``: the plain ``bulk``/``copy`` instructions with no
  ``cache_hint`` and no ``createpolicy`` (``load``/``touch`` keep an
  ``evict_normal`` hint).
"""

from __future__ import annotations

from l2sched.runtime.fill_kernels import IssueForm, load_form, register_form
from l2sched.runtime.kernel import register_cache_policy


def _line(chunk: int, ptx_policy) -> IssueForm:
    asm = ("prefetch.global.L2::evict_last [$0];" if ptx_policy == "L2::evict_last"
           else "prefetch.global.L2 [$0];")
    return IssueForm(asm, chunk=128)


def _touch(chunk: int, ptx_policy) -> IssueForm:
    return load_form(chunk, ptx_policy, size_hint=False)


def _plain_bulk(chunk: int, ptx_policy) -> IssueForm:
    return IssueForm("cp.async.bulk.prefetch.L2.global [$0], $1;")


def _plain_copy(chunk: int, ptx_policy) -> IssueForm:
    return IssueForm("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [$0], [$1], $2, [$3];", "r,l,r,r,l,~{memory}")


def register() -> None:
    """Register the lab's forms and the ``none`` cache policy (idempotent)."""
    for hinted in (True, False):
        register_form("line", hinted, _line)
        register_form("touch", hinted, _touch)
    register_form("load", False, load_form)
    register_form("bulk", False, _plain_bulk)
    register_form("copy", False, _plain_copy)
    register_cache_policy("none", None)
