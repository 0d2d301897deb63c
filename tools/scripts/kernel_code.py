#!/usr/bin/env python3
"""How much code each kernel carries, where it sits in the source, and whether two builds' kernels
are the same bytes, without cuobjdump or a GPU.

After the L2 flush a launch fetches its kernel's code from DRAM, and code beside the path a call
takes costs that call (docs/perf.md sessions 79-81: the per-expert MLP kernel's plain kernels, the
same instructions on the path with half the code beside it, ran 1.06-1.13x). Three readings of a
cubin (an sm_90a ELF; tools/scripts/cubin_of.sh compiles one translation unit of the build to one):

    python3 tools/scripts/kernel_code.py sizes A.cubin [--filter expert_mlp]
        every kernel's .text bytes (largest first), demangled
    python3 tools/scripts/kernel_code.py compare A.cubin B.cubin
        kernel by kernel (by mangled name): the same .text bytes or not, and both sizes; a change
        that should leave a kernel's code alone (host code, a new instantiation beside it) shows
        "same" (or "renamed": the same code under a new name, e.g. a defaulted template argument
        added), so the earlier GPU figures of that kernel stand
    python3 tools/scripts/kernel_code.py lines A.cubin --kernel 'Plain)1>' [--top 30]
        the kernel's code bytes per source line and per file, from the cubin's .debug_line
        (compiled with -lineinfo, as the build is; needs pyelftools: pip install pyelftools)

A kernel's code is the section `.text.<mangled name>`; its line table is one sequence of the
`.debug_line` programs, which this matches to its section by length.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fatbin_report  # noqa: E402  (the ELF section reader and the demangler)


def text_sections(elf: bytes) -> Dict[str, bytes]:
    """The `.text.<kernel>` sections of an ELF64 cubin: mangled kernel name -> its code bytes."""
    sections = fatbin_report.elf_sections(elf)
    if not sections:
        raise ValueError("not an ELF64 file (a cubin: nvcc -cubin, or tools/scripts/cubin_of.sh)")
    return {n[len(".text."):]: elf[o:o + z] for n, _, o, z in sections if n.startswith(".text.")}


demangle = fatbin_report.demangle


def sizes(path: Path, filt: str = "") -> List[Tuple[int, str, str]]:
    """(bytes, mangled, demangled) of every kernel whose demangled name holds `filt`, largest first."""
    secs = text_sections(path.read_bytes())
    names = sorted(secs)
    rows = [(len(secs[m]), m, d) for m, d in zip(names, demangle(names)) if filt in d]
    return sorted(rows, key=lambda r: (-r[0], r[2]))


def compare(a: Path, b: Path) -> List[Tuple[str, str, Optional[int], Optional[int]]]:
    """(verdict, demangled, bytes in a, bytes in b) for every kernel of either: "same" (equal .text
    under one name), "differ", "renamed" (a kernel of b with no namesake in a whose .text equals
    that of a kernel of a with no namesake in b: an instantiation that gained a defaulted template
    argument, say; shown under b's name), "only a" or "only b"."""
    sa, sb = text_sections(a.read_bytes()), text_sections(b.read_bytes())
    digest = lambda code: hashlib.sha1(code).hexdigest()  # noqa: E731
    # a's kernels without a namesake in b, by their code, for b's renamed ones.
    orphans: Dict[str, List[str]] = collections.defaultdict(list)
    for m in sorted(set(sa) - set(sb)):
        orphans[digest(sa[m])].append(m)
    renamed_from: Dict[str, str] = {}
    for m in sorted(set(sb) - set(sa)):
        pool = orphans.get(digest(sb[m]))
        if pool:
            renamed_from[m] = pool.pop(0)
    paired = set(renamed_from.values())
    names = sorted((set(sa) | set(sb)) - paired)
    rows = []
    for m, d in zip(names, demangle(names)):
        ka, kb = sa.get(m), sb.get(m)
        if m in renamed_from:
            verdict, ka = "renamed", sa[renamed_from[m]]
        elif ka is None or kb is None:
            verdict = "only a" if kb is None else "only b"
        else:
            verdict = "same" if digest(ka) == digest(kb) else "differ"
        rows.append((verdict, d, None if ka is None else len(ka), None if kb is None else len(kb)))
    return rows


def line_bytes(path: Path, kernel: str) -> Tuple[str, Dict[Tuple[str, int], int]]:
    """The first kernel whose demangled name holds `kernel`, and its code bytes per (file, line)."""
    try:
        from elftools.elf.elffile import ELFFile
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise SystemExit("kernel_code.py lines needs pyelftools (pip install pyelftools)") from e
    data = path.read_bytes()
    secs = text_sections(data)
    names = sorted(secs)
    want = [m for m, d in zip(names, demangle(names)) if kernel in d]
    if not want:
        raise SystemExit(f"no kernel matches {kernel!r}")
    target = want[0]
    with path.open("rb") as f:
        dwarf = ELFFile(f).get_dwarf_info(relocate_dwarf_sections=False)
        if dwarf.debug_line_sec is None:
            raise SystemExit("no .debug_line: compile with -lineinfo")
        sequences = []  # (rows of (address, file index, line), file entries)
        offset = 0
        while offset < dwarf.debug_line_sec.size:
            program = dwarf._parse_line_program_at_offset(offset, dwarf.structs)
            rows: List[Tuple[int, int, int]] = []
            for entry in program.get_entries():
                st = entry.state
                if st is None:
                    continue
                rows.append((st.address, st.file, st.line))
                if st.end_sequence:
                    sequences.append((rows, program["file_entry"]))
                    rows = []
            offset = program.program_end_offset
    size = len(secs[target])
    for rows, files in sequences:
        if rows and rows[-1][0] - rows[0][0] == size:
            counts: Dict[Tuple[str, int], int] = collections.Counter()
            for (addr, fi, ln), (nxt, _, _) in zip(rows, rows[1:]):
                fname = files[fi - 1].name.decode() if 0 < fi <= len(files) else "?"
                counts[(fname, ln)] += nxt - addr
            return demangle([target])[0], counts
    raise SystemExit(f"no line sequence of {size} bytes for {target}")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("sizes", help="every kernel's .text bytes")
    p.add_argument("cubin", type=Path)
    p.add_argument("--filter", default="", help="only kernels whose demangled name holds this")
    p = sub.add_parser("compare", help="kernel by kernel: the same .text bytes or not")
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p = sub.add_parser("lines", help="a kernel's code bytes per source line (.debug_line)")
    p.add_argument("cubin", type=Path)
    p.add_argument("--kernel", required=True, help="the first kernel whose demangled name holds this")
    p.add_argument("--top", type=int, default=30)
    args = ap.parse_args(argv)
    if args.cmd == "sizes":
        for n, _, d in sizes(args.cubin, args.filter):
            print(f"{n / 1024:8.1f} KB  {d}")
    elif args.cmd == "compare":
        rows = compare(args.a, args.b)
        for verdict, d, na, nb in rows:
            ka = "-" if na is None else f"{na / 1024:.1f}"
            kb = "-" if nb is None else f"{nb / 1024:.1f}"
            print(f"{verdict:7s} {ka:>8s} {kb:>8s} KB  {d}")
        counts = collections.Counter(r[0] for r in rows)
        print(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    else:
        name, counts = line_bytes(args.cubin, args.kernel)
        total = sum(counts.values())
        print(f"{total / 1024:.1f} KB  {name}")
        per_file: Dict[str, int] = collections.Counter()
        for (fname, _), n in counts.items():
            per_file[fname] += n
        for fname, n in sorted(per_file.items(), key=lambda x: -x[1])[:10]:
            print(f"  file {n / 1024:7.1f} KB  {fname}")
        for (fname, ln), n in sorted(counts.items(), key=lambda x: -x[1])[:args.top]:
            print(f"  {n / 1024:7.1f} KB  {fname}:{ln}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
