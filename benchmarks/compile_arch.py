"""Compile every fill form for another GPU architecture, compile only
(issue 45: every fill mode for ``sm_121a`` within GB10's shared memory).

    python benchmarks/compile_arch.py --arch sm_121a --device gb10 \\
        --arch sm_120a --device sm120-rtx-pro-6000-maxq -o OUT.json

For each (arch, device profile) pair a child process sets ``CUTE_DSL_ARCH``
(CuTe DSL reads it at import) and, for every fill mode
(``units.FILL_MODES``) and cache policy (``units.CACHE_POLICIES``) the
runtime builds, fits the shape to the profile's shared-memory limit per
block (``device.kernel_spec.fit_spec``: the copy mode's default 4 x 32 KiB
stages need more than 99 KiB) and compiles it through each launch path
(TVM-FFI, generic) with ``runtime.fill_kernels.compile_fill``. Nothing is
launched: the host's GPU may be another architecture. Prints a table and
writes JSON + Markdown (``OUT.json``, ``OUT.md``)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _child(arch: str, device: str) -> list[dict]:
    """Rows ``{mode, policy, requested, fitted, smem, ffi, ok, seconds,
    error}`` for one architecture (``CUTE_DSL_ARCH`` already set)."""
    from l2sched.device import load_device
    from l2sched.device.kernel_spec import PTX_POLICY, KernelSpec, fit_spec
    from l2sched.runtime.fill_kernels import compile_fill
    from l2sched.units import CACHE_POLICIES, FILL_MODES

    limits = load_device(device).limits
    rows = []
    for mode in FILL_MODES:
        for policy in CACHE_POLICIES:
            want = KernelSpec(mode=mode, policy=policy,
                              stages=4 if mode == "copy" else 1, chunk=32768)
            try:
                want.check()
            except ValueError as e:  # a (mode, policy) pair with no form
                rows.append({"mode": mode, "policy": policy, "ok": None,
                             "error": str(e)})
                continue
            spec = fit_spec(want, limits)
            for ffi in (True, False):
                row = {"mode": mode, "policy": policy, "requested": repr(want),
                       "fitted": repr(spec), "ffi": ffi,
                       "smem": None if spec is None else spec.smem_bytes,
                       "smem_limit": limits.smem_per_block_optin_bytes}
                t0 = time.perf_counter()
                try:
                    if spec is None:
                        raise ValueError("no shape fits the shared-memory limit")
                    compile_fill(spec, PTX_POLICY[policy], ffi)
                    row.update(ok=True, error="")
                except Exception as e:  # reported per form, never hidden
                    row.update(ok=False, error=f"{type(e).__name__}: {e}"[:400])
                row["seconds"] = round(time.perf_counter() - t0, 3)
                rows.append(row)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", action="append", required=True,
                   help="CUTE_DSL_ARCH value (e.g. sm_121a); repeat, one per --device")
    p.add_argument("--device", action="append", required=True,
                   help="device profile whose shared-memory limit the shapes fit")
    p.add_argument("-o", "--output", required=True, help="result JSON (and .md beside it)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if len(a.arch) != len(a.device):
        p.error("give one --device per --arch")
    if a.child:
        print(json.dumps(_child(a.arch[0], a.device[0])))
        return 0
    results = {}
    for arch, device in zip(a.arch, a.device):
        env = {**os.environ, "CUTE_DSL_ARCH": arch, "PYTHONPATH": str(ROOT) + os.pathsep
               + os.environ.get("PYTHONPATH", "")}
        r = subprocess.run([sys.executable, __file__, "--child", "--arch", arch,
                            "--device", device, "-o", a.output],
                           capture_output=True, text=True, env=env)
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("[")]
        results[arch] = {"device": device, "rc": r.returncode,
                         "rows": json.loads(lines[-1]) if lines else [],
                         "stderr_tail": r.stderr[-2000:]}
    md = ["| arch | device | mode | policy | launch | fitted shape | smem / limit (B) | compiled | s |",
          "|---|---|---|---|---|---|---|---|---|"]
    for arch, res in results.items():
        if not res["rows"]:
            md.append(f"| {arch} | {res['device']} | - | - | - | - | - | child rc {res['rc']}: "
                      f"{res['stderr_tail'][-200:]!r} | - |")
        for row in res["rows"]:
            md.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                arch, res["device"], row["mode"], row["policy"],
                "" if row.get("ffi") is None else ("tvm-ffi" if row["ffi"] else "generic"),
                row.get("fitted", ""), f"{row.get('smem')} / {row.get('smem_limit')}",
                {True: "yes", False: "NO: " + row["error"], None: "no form"}[row["ok"]],
                row.get("seconds", "")))
    out = Path(a.output)
    out.write_text(json.dumps(results, indent=1))
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    ok = all(row["ok"] is not False for res in results.values() for row in res["rows"])
    return 0 if ok and all(res["rows"] for res in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
