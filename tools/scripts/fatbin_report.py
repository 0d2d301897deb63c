#!/usr/bin/env python3
"""What device code a moekit binary carries: every fatbin entry (SASS cubin or PTX, its arch,
size, compression) and the kernels of each uncompressed cubin, without cuobjdump.

A kernel that has PTX but no SASS for the GPU is JIT-compiled by the driver when its module loads
(seconds for a wgmma kernel); moekit ships sm_90a SASS only (BRIEF §2.3: nothing compiles at run
time). This script reads the `.nv_fatbin` data of object files, static archives, shared objects
(the Python extension moekit/_C*.so) and executables, and with --check fails (exit 1) when any
entry is PTX or a cubin is not for the expected arch:

    python3 tools/scripts/fatbin_report.py build/cuda-release/libmoekit_cuda.a
    python3 tools/scripts/fatbin_report.py --check --arch 90 --json out.json $(python3 -c \
        'import moekit._C as c; print(c.__file__)')

The fatbin layout (as the CUDA toolkit writes it; cuobjdump --list-elf --list-ptx prints the same):
a 16-byte header (magic 0xBA55ED50, version, header size, payload size) and entries, each with
a header {kind (1 PTX, 2 ELF), header size, payload size, arch (90 = sm_90/sm_90a), flags
(0x2000: compressed)} followed by its payload.
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

FATBIN_MAGIC = 0xBA55ED50
KIND_NAMES = {1: "ptx", 2: "elf"}
FLAG_COMPRESSED = 0x2000  # LZ4 (and, in newer toolkits, 0x8000: zstd)
FLAG_COMPRESSED_ZSTD = 0x8000
# EF_CUDA_* bits of a cubin's e_flags (newer ABI: the SM in bits 8..15, "a" / accelerated
# features at 0x8 or the old EF_CUDA_SM90A-style flag); only used to label the arch.
ELF_MAGIC = b"\x7fELF"


def elf_sections(elf: bytes) -> List[Tuple[str, int, int, int]]:
    """(name, type, offset, size) of every section of a 64-bit ELF (a cubin); [] for anything else."""
    if len(elf) < 64 or elf[:4] != ELF_MAGIC or elf[4] != 2:  # 64-bit only
        return []
    e_shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    if e_shoff == 0 or e_shoff + e_shnum * e_shentsize > len(elf):
        return []
    sections = []
    for i in range(e_shnum):
        off = e_shoff + i * e_shentsize
        name, stype, _flags, _addr, s_off, s_size = struct.unpack_from("<IIQQQQ", elf, off)
        sections.append((name, stype, s_off, s_size))
    _, _, str_off, str_size = sections[e_shstrndx]
    strtab = elf[str_off:str_off + str_size]

    def sname(idx: int) -> str:
        end = strtab.find(b"\0", idx)
        return strtab[idx:end].decode("utf-8", "replace")

    return [(sname(n), t, o, z) for n, t, o, z in sections]


def _elf_kernels(elf: bytes) -> Dict[str, object]:
    """Kernel (entry) names and the text bytes of a cubin, from its section table."""
    out: Dict[str, object] = {"kernels": [], "text_bytes": 0, "e_flags": None}
    if len(elf) < 64 or elf[:4] != ELF_MAGIC or elf[4] != 2:  # 64-bit only
        return out
    out["e_flags"] = struct.unpack_from("<I", elf, 0x30)[0]
    sections = elf_sections(elf)
    info = {n[len(".nv.info."):] for n, _, _, _ in sections if n.startswith(".nv.info.")}
    kernels = []
    text = 0
    for n, _, _, size in sections:
        if n.startswith(".text."):
            text += size
            fn = n[len(".text."):]
            if fn in info:  # an entry point has its own .nv.info.<name> (parameters, attributes)
                kernels.append(fn)
    out["kernels"] = sorted(kernels)
    out["text_bytes"] = text
    return out


def parse_fatbins(data: bytes) -> List[dict]:
    """Every fatbin found in `data`, with its entries. The scan checks the header, not the
    alignment: a fatbin is 8-byte aligned in its object file, not inside an `ar` archive."""
    found = []
    pos = 0
    magic = struct.pack("<I", FATBIN_MAGIC)
    while True:
        pos = data.find(magic, pos)
        if pos < 0:
            break
        if pos + 16 > len(data):
            break
        _, version, hsize, fat_size = struct.unpack_from("<IHHQ", data, pos)
        if version != 1 or hsize != 16 or pos + hsize + fat_size > len(data):
            pos += 1
            continue
        entries = []
        e = pos + hsize
        end = e + fat_size
        while e + 0x40 <= end:
            kind, _unk, ehsize, size = struct.unpack_from("<HHIQ", data, e)
            if kind not in KIND_NAMES or ehsize < 0x40 or e + ehsize + size > end:
                break
            _csize, _unk2, minor, major, arch = struct.unpack_from("<IIHHI", data, e + 0x10)
            name_off, name_len = struct.unpack_from("<II", data, e + 0x20)
            flags = struct.unpack_from("<Q", data, e + 0x28)[0]
            name = b""
            if name_off and name_len and name_off + name_len <= ehsize:
                name = data[e + name_off:e + name_off + name_len].split(b"\0")[0]
            payload = data[e + ehsize:e + ehsize + size]
            compressed = bool(flags & (FLAG_COMPRESSED | FLAG_COMPRESSED_ZSTD))
            entry = {
                "kind": KIND_NAMES[kind],
                "arch": arch,
                "bytes": size,
                "compressed": compressed,
                "flags": hex(flags),
                "source": name.decode("utf-8", "replace"),
            }
            if kind == 2 and not compressed:
                entry.update(_elf_kernels(payload))
            elif kind == 1 and not compressed:
                head = payload[:4096].decode("utf-8", "replace")
                for line in head.splitlines():
                    if line.startswith(".target"):
                        entry["ptx_target"] = line.split()[1]
                        break
            entries.append(entry)
            e += ehsize + size
        found.append({"offset": pos, "bytes": fat_size, "entries": entries})
        pos = max(end, pos + 16)
    return found


def demangle(names: List[str]) -> List[str]:
    tool = shutil.which("c++filt")
    if not tool or not names:
        return names
    try:
        res = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True)
        out = res.stdout.splitlines()
        return out if len(out) == len(names) else names
    except (OSError, subprocess.CalledProcessError):
        return names


def report(path: Path) -> dict:
    data = path.read_bytes()
    fatbins = parse_fatbins(data)
    entries = [e for f in fatbins for e in f["entries"]]
    kernels = sorted({k for e in entries if e["kind"] == "elf" for k in e.get("kernels", [])})
    return {
        "file": str(path),
        "file_bytes": len(data),
        "fatbins": len(fatbins),
        "sass_entries": sum(1 for e in entries if e["kind"] == "elf"),
        "ptx_entries": sum(1 for e in entries if e["kind"] == "ptx"),
        "archs": sorted({f"{e['kind']}:{e['arch']}" for e in entries}),
        "compressed_entries": sum(1 for e in entries if e["compressed"]),
        "device_bytes": sum(e["bytes"] for e in entries),
        "kernels": len(kernels),
        "kernel_names": kernels,
        "entries": entries,
    }


def check(rep: dict, arch: int) -> List[str]:
    """Problems that make the driver compile or refuse code at load time."""
    problems = []
    if rep["fatbins"] == 0:
        problems.append(f"{rep['file']}: no fatbin found (not a CUDA binary?)")
    for e in rep["entries"]:
        where = e["source"] or rep["file"]
        if e["kind"] == "ptx":
            problems.append(f"{where}: PTX for compute_{e['arch']} ({e['bytes']} bytes): the driver JIT-compiles it at load")
        elif e["arch"] != arch:
            problems.append(f"{where}: SASS for sm_{e['arch']}, expected sm_{arch}(a) only")
    return problems


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path, help=".o / .a / .so / executable")
    ap.add_argument("--arch", type=int, default=90, help="the SM every cubin must target (default 90)")
    ap.add_argument("--check", action="store_true", help="exit 1 on PTX or a cubin for another arch")
    ap.add_argument("--kernels", action="store_true", help="list the (demangled) kernel names")
    ap.add_argument("--json", type=Path, help="write the report here")
    args = ap.parse_args(argv)

    reports, problems = [], []
    for f in args.files:
        if not f.exists():
            print(f"fatbin_report: {f}: no such file", file=sys.stderr)
            return 2
        rep = report(f)
        reports.append(rep)
        problems += check(rep, args.arch)
        print(f"{f}: {rep['fatbins']} fatbin(s), {rep['sass_entries']} SASS + {rep['ptx_entries']} PTX entries "
              f"({', '.join(rep['archs']) or '-'}), {rep['compressed_entries']} compressed, "
              f"{rep['device_bytes'] / 1e6:.1f} MB device code, {rep['kernels']} kernels in uncompressed cubins")
        if args.kernels:
            for k in demangle(rep["kernel_names"]):
                print(f"    {k}")
    if args.json:
        args.json.write_text(json.dumps({"arch": args.arch, "problems": problems, "files": reports}, indent=1) + "\n")
    for p in problems:
        print(f"PROBLEM: {p}", file=sys.stderr)
    if args.check and problems:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
