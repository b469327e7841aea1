"""Drop the device code an sm_90 GPU can never load from a CUDA shared library.

    python benchmarks/vllm_gpu/prune_fatbin.py IN.so OUT.so [--arch 90]

A CUDA extension's ``.nv_fatbin`` section holds one fat binary per
compilation unit; each holds ELF (cubin) entries for several SM versions and
maybe PTX. On an sm_90 device the driver can only use an sm_90 cubin (cubins
run only within their major version: sm_80/86/89 cubins do not run on
sm_90, sm_100/120 neither) or JIT a PTX entry of compute capability <= 9.0.
So this keeps, per fat binary, the ELF entries of exactly ``--arch`` and the
PTX entries of arch <= ``--arch``, byte for byte and in their order, moves
them to the front of the same fat binary (its start address, which the
``.nvFatBinSegment`` wrappers point at, is unchanged), rewrites its size
field and zero-fills the rest of its old extent (zeros compress to nothing).
Fat binaries that would keep no entry are left untouched. Section sizes and
every other byte of the file stay the same.

Layout read (as ``cuobjdump`` reads it): fat binary header ``<IHHQ`` =
magic 0xBA55ED50, version, header size, size of the entries that follow;
entry header ``<HHIQ`` = kind (1 PTX, 2 ELF), version, header size, payload
size; the SM version is the u32 at entry offset 28. Entries are
``header size + payload size`` bytes long.

Prints one line per library: entries and bytes kept. ``--check`` re-reads
OUT and fails unless every fat binary parses and only the kept kinds
remain. Compare ``cuobjdump --list-elf`` of IN and OUT for the sm_90 lines.
"""

from __future__ import annotations

import argparse
import struct
import subprocess
import sys

MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2


def section(path: str, name: str = ".nv_fatbin") -> tuple[int, int]:
    """``(file offset, size)`` of section ``name`` (``readelf -SW``)."""
    out = subprocess.check_output(["readelf", "-SW", path], text=True)
    for line in out.splitlines():
        cols = line.split("]", 1)[-1].split()
        if cols and cols[0] == name:
            return int(cols[3], 16), int(cols[4], 16)
    raise SystemExit(f"prune_fatbin: {path}: no {name} section")


def fatbins(data: bytes):
    """Yield ``(start, header_size, entries_size, [(offset, kind, arch,
    length), ...])`` for each fat binary in a ``.nv_fatbin`` section."""
    pos = 0
    while pos + 16 <= len(data):
        magic, _ver, hsz, fsz = struct.unpack_from("<IHHQ", data, pos)
        if magic != MAGIC:
            pos += 8  # alignment padding between fat binaries
            continue
        entries, e, end = [], pos + hsz, pos + hsz + fsz
        while e < end:
            kind, _v, ehs, size = struct.unpack_from("<HHIQ", data, e)
            arch = struct.unpack_from("<I", data, e + 28)[0]
            if ehs == 0 or e + ehs + size > end:
                raise SystemExit(f"prune_fatbin: malformed entry at +{e:#x}")
            entries.append((e, kind, arch, ehs + size))
            e += ehs + size
        yield pos, hsz, fsz, entries
        pos = end


def _keep(kind: int, entry_arch: int, arch: int) -> bool:
    return (kind == KIND_ELF and entry_arch == arch) or (
        kind == KIND_PTX and entry_arch <= arch)


def prune(data: bytearray, arch: int) -> tuple[int, int, int, int]:
    """Prune the section bytes in place; ``(fat binaries, pruned, entries
    kept, bytes kept)``."""
    n = pruned = kept_n = kept_b = 0
    for start, hsz, fsz, entries in list(fatbins(bytes(data))):
        n += 1
        keep = [(o, ln) for o, kind, a, ln in entries if _keep(kind, a, arch)]
        if not keep:
            continue
        body = b"".join(bytes(data[o:o + ln]) for o, ln in keep)
        first = start + hsz
        data[first:first + fsz] = body + bytes(fsz - len(body))
        struct.pack_into("<Q", data, start + 8, len(body))
        pruned += 1
        kept_n += len(keep)
        kept_b += len(body)
    return n, pruned, kept_n, kept_b


def check(data: bytes, arch: int) -> None:
    """Every fat binary parses; pruned ones hold only kept kinds."""
    for start, _h, _f, entries in fatbins(data):
        kinds = {_keep(k, a, arch) for _o, k, a, _l in entries}
        if kinds == {True, False}:
            raise SystemExit(f"prune_fatbin: fat binary at +{start:#x} mixes kept "
                             "and dropped entries")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--arch", type=int, default=90)
    p.add_argument("--check", action="store_true")
    a = p.parse_args(argv)
    off, size = section(a.src)
    with open(a.src, "rb") as f:
        blob = bytearray(f.read())
    sec = bytearray(blob[off:off + size])
    n, pruned, kept_n, kept_b = prune(sec, a.arch)
    blob[off:off + size] = sec
    with open(a.dst, "wb") as f:
        f.write(blob)
    if a.check:
        check(bytes(sec), a.arch)
    print(f"prune_fatbin: {a.src}: {pruned}/{n} fat binaries pruned to sm_{a.arch} "
          f"ELF + PTX<=sm_{a.arch}: {kept_n} entries, {kept_b / 1e6:.1f} of "
          f"{size / 1e6:.1f} MB kept")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
