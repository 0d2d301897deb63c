#!/usr/bin/env python3
"""Where a kernel's warps spend their time, from Nsight Compute's per-instruction warp-stall
sampling: the table that found the token-major epilogues' cost (docs/perf.md, "How each step
was found").

Input: the CSV of
  ncu --section SourceCounters --page source --print-source sass --csv -k regex:KERNEL \\
      --launch-skip S --launch-count 1 APP ARGS > kernel.csv
(tools/scripts/stall_sampling.sh runs it against moekit-bench). Lines before the header row
(ncu's own messages, the application's output) are skipped.

Output (markdown): the total samples; where the table has ncu's per-reason columns (stall_long_sb,
stall_barrier, ...: the SourceCounters section's), the samples per stall reason over the kernel;
the instructions with the most samples, each with its executed count, its main stall reasons
("why": long_sb is a wait on a global / local load's result, wait a fixed-latency dependency,
barrier a CTA barrier) and, for a branch, the instruction before it (a branch that spins right after a
SYNCS.PHASECHK.TRANS64.TRYWAIT is an mbarrier wait); the samples per block of --bin
instructions where a block holds at least --min-share of them; and, for --range A:B, the samples
and executed counts per opcode inside instructions [A, B) (e.g. an epilogue's instruction mix).

  tools/scripts/stall_report.py kernel.csv [--top 15] [--bin 100] [--min-share 0.01] [--range A:B]
"""
import argparse
import collections
import csv
import io
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def load(text):
    """Rows of (index, sass, samples, executed, reasons) from the ncu source-page CSV; reasons maps
    each stall reason with samples at the instruction ("long_sb", ...) to its samples (empty when
    the table has no per-reason columns)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), None)
    if start is None:
        raise ValueError("no source-page table (a header row starting with \"Address\") in the input")
    reader = csv.reader(io.StringIO("\n".join(lines[start:])))
    header = next(reader)
    for name in ("Source", SAMPLES, EXECUTED):
        if name not in header:
            raise ValueError(f"column {name!r} missing: run ncu with --section SourceCounters --page source")
    src, smp, exe = header.index("Source"), header.index(SAMPLES), header.index(EXECUTED)
    # All samples per reason ("stall_long_sb"); the "(Not Issued)" columns are a subset of them.
    why = [(i, name[len("stall_"):]) for i, name in enumerate(header)
           if name.startswith("stall_") and not name.endswith("(Not Issued)")]
    rows = []
    for row in reader:
        if len(row) <= max(src, smp, exe):
            continue
        reasons = {}
        for i, name in why:
            if i < len(row) and row[i].strip() not in ("", "0"):
                reasons[name] = int(row[i])
        rows.append((len(rows), row[src].strip(), int(row[smp] or 0), int(row[exe] or 0), reasons))
    return rows


def main_reasons(reasons, samples, n=2):
    """'long_sb 92 %, wait 8 %': the instruction's n largest stall reasons, '-' without any; the
    samples no exported column names (ncu's CSV leaves some reasons out, e.g. at a QGMMA) as
    'unnamed' when they are at least 5 %."""
    if not reasons or samples <= 0:
        return "-"
    top = sorted(reasons.items(), key=lambda kv: -kv[1])[:n]
    cells = [f"{name} {100.0 * v / samples:.0f} %" for name, v in top]
    rest = samples - sum(reasons.values())
    if rest >= 0.05 * samples:
        cells.append(f"unnamed {100.0 * rest / samples:.0f} %")
    return ", ".join(cells)


def opcode(sass):
    """'@!P0 BRA 0x..' -> 'BRA'; 'HGMMA.64x256x16.F32.BF16 R24, ...' -> 'HGMMA'."""
    tokens = sass.split()
    if not tokens:
        return ""
    op = tokens[1] if tokens[0].startswith("@") and len(tokens) > 1 else tokens[0]
    return op.split(".")[0]


def report(rows, top=15, bin_size=100, min_share=0.01, span=None):
    total = sum(r[2] for r in rows)
    out = [f"{len(rows)} instructions, {total} samples"]
    if total == 0:
        return "\n".join(out + ["(no samples: was SourceCounters collected?)"])
    per_reason = collections.Counter()
    for r in rows:
        per_reason.update(r[4])
    if per_reason:
        out += ["", "| stall reason | samples | share |", "|---|---|---|"]
        for name, v in per_reason.most_common(top):
            out.append(f"| {name} | {v} | {100.0 * v / total:.1f} % |")
    out += ["", f"| # | samples | share | executed | instruction | why |", "|---|---|---|---|---|---|"]
    for idx, sass, samples, executed, reasons in sorted(rows, key=lambda r: -r[2])[:top]:
        note = ""
        if opcode(sass) == "BRA" and idx > 0:
            note = f" (after: {rows[idx - 1][1][:60]})"
        out.append(f"| {idx} | {samples} | {100.0 * samples / total:.1f} % | {executed} | {sass[:70]}{note} | "
                   f"{main_reasons(reasons, samples)} |")
    out += ["", f"| instructions | samples | share |", "|---|---|---|"]
    bins = collections.Counter()
    for idx, _, samples, _, _ in rows:
        bins[idx // bin_size] += samples
    for b in sorted(bins):
        if bins[b] >= min_share * total:
            out.append(f"| {b * bin_size}-{b * bin_size + bin_size - 1} | {bins[b]} | {100.0 * bins[b] / total:.1f} % |")
    if span is not None:
        lo, hi = span
        sel = [r for r in rows if lo <= r[0] < hi]
        s_tot = sum(r[2] for r in sel)
        out += ["", f"instructions [{lo}, {hi}): {s_tot} samples ({100.0 * s_tot / total:.1f} %), "
                f"{sum(r[3] for r in sel)} executed", "", "| opcode | samples | executed |", "|---|---|---|"]
        per_s, per_e = collections.Counter(), collections.Counter()
        for _, sass, samples, executed, _ in sel:
            per_s[opcode(sass)] += samples
            per_e[opcode(sass)] += executed
        for op, executed in per_e.most_common(top):
            out.append(f"| {op} | {per_s[op]} | {executed} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--bin", type=int, default=100)
    ap.add_argument("--min-share", type=float, default=0.01)
    ap.add_argument("--range", help="A:B, instruction indices for the per-opcode table")
    a = ap.parse_args(argv)
    span = None
    if a.range:
        try:
            lo, hi = (int(x) for x in a.range.split(":"))
        except ValueError:
            ap.error(f"--range wants A:B (two integers), got {a.range!r}")
        span = (lo, hi)
    with open(a.csv, encoding="utf-8", errors="replace") as f:
        try:
            rows = load(f.read())
        except ValueError as e:
            sys.exit(f"stall_report.py: {a.csv}: {e}")
    print(report(rows, a.top, a.bin, a.min_share, span))


if __name__ == "__main__":
    main()
