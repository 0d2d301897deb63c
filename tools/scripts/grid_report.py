#!/usr/bin/env python3
"""The BRIEF §4 verdict of every point of a moekit-bench grid, as markdown for docs/perf.md.

    tools/scripts/grid_report.py GRID.json [--previous OLD.json] [--out FILE]

Target per point (BRIEF §4): compute-bound points (TP1, M >= 4096) need >= 75 % of the dense-GEMM
rate measured in the same run, i.e. us <= roof / 0.75 (their roof is FLOPs / dense rate); every
other point is held to the memory-bound target us <= roof / 0.85 + 4 µs. The report gives
us / target per point (<= 1.00 meets it), the regime each miss belongs to (docs/perf.md says
where the time goes in each, measured, and what would close it), and, with --previous, the
speedup over an earlier grid at the same point. It also gives moekit's ratio to the baselines per
scheme, each against its like-for-like baseline (bf16: cuBLAS bf16; fp8: cuBLASLt e4m3; an fp8
row against cuBLAS bf16 only as a labelled extra: bench_rows.py), never one ratio over all
schemes, and the --check summary (rows checked, failed, worst error per scheme).

Rows that carry `us_in_graph` (moekit-bench since session 15: the call timed inside its graph,
[flush, event, call, event], no graph launch in the interval; tools/bench/graph_timing.cuh) get a
second verdict line; --in-graph makes that time the one the verdict, the table, the regimes and
the comparison with --previous use (the previous grid must carry it too); the baseline ratios stay
on the outer time, which is how the baselines are timed.
"""
import argparse
import json
import os
import sys
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_rows  # noqa: E402

PRESETS = ["mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-120b"]

# The regimes of docs/perf.md "Every point that misses", in the order the document lists them.
REGIMES = OrderedDict([
    ("P", "prefill, compute-bound (TP1, M >= 4096): token-major wgmma below 75 % of the dense rate"),
    ("L", "latency floor: roof under 25 µs, the chain of kernels and memory latencies dominates"),
    ("T", "TP8 shard, roof >= 25 µs: small-N GEMMs below the weight-stream or dense rate"),
    ("X", "TP1 transition, M = 256..2048: between the decode and the prefill kernels"),
    ("D", "TP1 decode, M <= 128: the weight stream below 4.08 TB/s plus a fixed chain"),
])


def target_us(row):
    if row["tp"] == 1 and row["tokens"] >= 4096:
        return row["roof_us"] / 0.75
    return row["roof_us"] / 0.85 + 4.0


def regime(row):
    M, tp, roof = row["tokens"], row["tp"], row["roof_us"]
    if tp == 1 and M >= 4096:
        return "P"
    if roof < 25.0:
        return "L"
    if tp != 1:
        return "T"
    if M >= 256:
        return "X"
    return "D"


def key(row):
    return (row["preset"], row["tp"], row["scheme"], row["tokens"])


def load(path):
    with open(path) as f:
        doc = json.load(f)
    rows = [r for r in doc["rows"] if r.get("us") and r.get("roof_us") and r.get("path", "auto") == "auto"]
    return doc, rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("grid")
    ap.add_argument("--previous", help="an earlier grid JSON: adds the speedup per point")
    ap.add_argument("--out", help="write the markdown here (default: stdout)")
    ap.add_argument("--in-graph", action="store_true",
                    help="judge us_in_graph (the call timed inside its graph) instead of us")
    a = ap.parse_args(argv)

    def in_graph(rows, path):
        have = sum(1 for r in rows if r.get("us_in_graph"))
        if have != len(rows):
            sys.exit("grid_report: --in-graph needs us_in_graph on every row of %s (%d of %d have it)" % (path, have, len(rows)))
        return [dict(r, us=r["us_in_graph"]) for r in rows]

    doc, rows = load(a.grid)
    outer_rows = rows  # the baselines are timed outside the graph: their ratios use this time
    both = [r for r in rows if r.get("us_in_graph")]
    if a.in_graph:
        rows = in_graph(rows, a.grid)
    prev = {}
    if a.previous:
        _, prow = load(a.previous)
        if a.in_graph:
            prow = in_graph(prow, a.previous)
        prev = {key(r): r for r in prow}
    if not rows:
        sys.exit("grid_report: no timed auto-path rows in " + a.grid)

    out = []
    w = out.append
    met = [r for r in rows if r["us"] <= target_us(r)]
    dirty = {True: ", dirty tree", False: ", clean tree", None: ", dirty unknown"}.get(doc.get("dirty"), "") \
        if "dirty" in doc else ", dirty flag not recorded"
    w(f"Grid `{a.grid.split('/')[-1]}` (commit {doc.get('commit', '?')}{dirty}, {doc.get('date', '?')}, "
      f"{doc.get('gpu', '?')}): **{len(met)} of {len(rows)} points meet BRIEF §4**"
      + (" (timed inside the graph: us_in_graph)." if a.in_graph else "."))
    within = sum(1 for r in rows if r["us"] <= 1.25 * target_us(r))
    w(f"Within 1.25x of the target: {within} of {len(rows)}.")
    if both and not a.in_graph:
        gm = sum(1 for r in both if r["us_in_graph"] <= target_us(r))
        gw = sum(1 for r in both if r["us_in_graph"] <= 1.25 * target_us(r))
        d = sorted(r["us"] - r["us_in_graph"] for r in both)
        w(f"Timed inside the graph (us_in_graph, {len(both)} rows): {gm} meet, {gw} within 1.25x; "
          f"us - us_in_graph median {d[len(d) // 2]:.2f} µs ({d[0]:.2f} to {d[-1]:.2f}).")
    if prev:
        common = [r for r in rows if key(r) in prev]
        pmet = sum(1 for r in common if prev[key(r)]["us"] <= target_us(prev[key(r)]))
        sp = sorted(prev[key(r)]["us"] / r["us"] for r in common)
        if sp:
            w(f"Against `{a.previous.split('/')[-1]}` at the same {len(common)} points: {pmet} met there; "
              f"speedup median {sp[len(sp) // 2]:.2f}x, min {sp[0]:.2f}x, max {sp[-1]:.2f}x.")
    w("")
    w("Cells: `us / target` (<= 1.00 meets the target; `*` marks a met point); the letter is the regime of a miss.")
    w("")
    toks = sorted({r["tokens"] for r in rows})
    by = {key(r): r for r in rows}
    w("| preset | TP | scheme | " + " | ".join(f"M={m}" for m in toks) + " |")
    w("|---|---|---|" + "---|" * len(toks))
    presets = [p for p in PRESETS if any(r["preset"] == p for r in rows)]
    presets += sorted({r["preset"] for r in rows} - set(presets))
    for p in presets:
        for tp in sorted({r["tp"] for r in rows if r["preset"] == p}):
            for s in sorted({r["scheme"] for r in rows if r["preset"] == p and r["tp"] == tp}):
                cells = []
                for m in toks:
                    r = by.get((p, tp, s, m))
                    if r is None:
                        cells.append("-")
                        continue
                    q = r["us"] / target_us(r)
                    cells.append(f"{q:.2f}*" if q <= 1.0 else f"{q:.2f} {regime(r)}")
                w(f"| {p} | {tp} | {s} | " + " | ".join(cells) + " |")
    w("")
    w("Same-run baselines, per scheme (x baseline = baseline µs / moekit µs; above 1: moekit faster"
      + ("; both timed outside the graph" if a.in_graph else "") + "):")
    w("")
    w(bench_rows.ratio_table(outer_rows))
    w("")
    w(bench_rows.check_summary(rows))
    w("")
    w("| regime | misses | us / target: median (worst) |")
    w("|---|---|---|")
    for g, text in REGIMES.items():
        miss = sorted(r["us"] / target_us(r) for r in rows if regime(r) == g and r["us"] > target_us(r))
        if miss:
            w(f"| {g}: {text} | {len(miss)} | {miss[len(miss) // 2]:.2f} ({miss[-1]:.2f}) |")
    text = "\n".join(out) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
