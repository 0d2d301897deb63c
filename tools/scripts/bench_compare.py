#!/usr/bin/env python3
"""Same-run A/B of two moekit-bench variants (two builds, or one build with an environment switch
such as MOEKIT_PDL=0 / MOEKIT_Y_FP32=1), from their JSON files: per point the speedup of B over A
(A us / B us; above 1: B faster), and the median, min and max per group (TP, decode M <= 256 /
prefill M >= 512). With repeats (A1 B1 A2 B2 ..., interleaved so drift hits both), each variant's
time is its minimum over the repeats and the spread of the repeats is reported, so that a
difference smaller than the noise is seen as such. The baseline measured next to each point gives
a second, drift-normalized ratio: the like-for-like one of the point's scheme (cuBLAS bf16 for
bf16, cuBLASLt fp8 for fp8 schemes), or cuBLAS bf16 where a file has no fp8 baseline. The summary
has one group per scheme besides TP x M, and B's own ratio to its baselines is printed per scheme
(bench_rows.py), never as one ratio over all schemes. Where the rows carry roof_us, each variant's
standing against BRIEF §4's memory-bound target (us <= roof_us / 0.85 + 4) on the points with
M <= 256 follows, with the points that crossed 1.0x or 1.25x of it between A and B.

  tools/scripts/bench_compare.py --a A1.json [A2.json ...] --b B1.json [B2.json ...] [--points]
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_rows  # noqa: E402


def key(row):
    return (row["preset"], row["tp"], row["scheme"], row["tokens"], row.get("path", "auto"), row.get("op", "fused_experts"))


def load(paths):
    """{point: [row per file]} over the points present in every file."""
    runs = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            runs.append({key(r): r for r in json.load(f)["rows"] if r.get("us") is not None})
    common = set(runs[0])
    for r in runs[1:]:
        common &= set(r)
    return {k: [r[k] for r in runs] for k in common}


def baseline(rows, field="baseline_us"):
    """The median baseline time (`field`) measured next to a point over the repeats, or None."""
    v = [r[field] for r in rows if r.get(field)]
    return statistics.median(v) if v else None


def norm_field(a_rows, b_rows):
    """The baseline that normalizes a point: its scheme's like-for-like one when both variants
    measured it, else cuBLAS bf16."""
    if a_rows[0]["scheme"] != "bf16" and baseline(a_rows, "baseline_fp8_us") and baseline(b_rows, "baseline_fp8_us"):
        return "baseline_fp8_us"
    return "baseline_us"


def compare(a_runs, b_runs):
    """Rows of (point, a_us, b_us, speedup, normalized speedup, repeat spread) for common points."""
    out = []
    for k in sorted(set(a_runs) & set(b_runs)):
        a = [r["us"] for r in a_runs[k]]
        b = [r["us"] for r in b_runs[k]]
        a_us, b_us = min(a), min(b)
        spread = max(max(a) / min(a), max(b) / min(b)) - 1.0
        field = norm_field(a_runs[k], b_runs[k])
        base_a, base_b = baseline(a_runs[k], field), baseline(b_runs[k], field)
        norm = (a_us / base_a) / (b_us / base_b) if base_a and base_b else None
        out.append((k, a_us, b_us, a_us / b_us, norm, spread))
    return out


def group_of(k):
    return f"TP{k[1]} " + ("M<=256" if k[3] <= 256 else "M>=512")


def summary(rows):
    groups = {}
    for row in rows:
        groups.setdefault(group_of(row[0]), []).append(row)
        groups.setdefault(f"scheme {row[0][2]}", []).append(row)
        groups.setdefault("all", []).append(row)
    lines = ["| group | points | B/A speedup median | min | max | normalized median | repeat spread median |",
             "|---|---|---|---|---|---|---|"]
    for g in sorted(groups, key=lambda g: (g == "all", g.startswith("scheme "), g)):
        v = groups[g]
        sp = [r[3] for r in v]
        nm = [r[4] for r in v if r[4] is not None]
        norm = f"{statistics.median(nm):.3f}" if nm else "-"
        spread = 100 * statistics.median(r[5] for r in v)
        lines.append(f"| {g} | {len(v)} | {statistics.median(sp):.3f} | {min(sp):.3f} | {max(sp):.3f} | "
                     f"{norm} | {spread:.1f} % |")
    return "\n".join(lines)


def target_us(row):
    """BRIEF §4's memory-bound target of a point: roof / 0.85 + 4 µs (None without roof_us)."""
    return row["roof_us"] / 0.85 + 4.0 if row.get("roof_us") else None


def target_table(rows, a_runs, b_runs):
    """Markdown: for A and B (best repeat), the M <= 256 points that meet the target and that are
    within 1.25x of it, per TP and scheme, and the points whose standing changed; "" without roof_us."""
    pts = []
    for k, a_us, b_us, *_ in rows:
        t = target_us(b_runs[k][0]) or target_us(a_runs[k][0])
        if t is not None and k[3] <= 256:
            pts.append((k, a_us / t, b_us / t))
    if not pts:
        return ""
    groups = {}
    for p in pts:
        groups.setdefault(f"TP{p[0][1]} {p[0][2]}", []).append(p)
        groups.setdefault("all", []).append(p)
    out = ["| M <= 256 | points | A meet | B meet | A within 1.25x | B within 1.25x | A us/target median | B median |",
           "|---|---|---|---|---|---|---|---|"]
    for g in sorted(groups, key=lambda g: (g == "all", g)):
        v = groups[g]
        out.append(f"| {g} | {len(v)} | {sum(a <= 1.0 for _, a, _ in v)} | {sum(b <= 1.0 for _, _, b in v)} | "
                   f"{sum(a <= 1.25 for _, a, _ in v)} | {sum(b <= 1.25 for _, _, b in v)} | "
                   f"{statistics.median(a for _, a, _ in v):.2f} | {statistics.median(b for _, _, b in v):.2f} |")
    moved = [(k, a, b) for k, a, b in pts if (a <= 1.0) != (b <= 1.0) or (a <= 1.25) != (b <= 1.25)]
    for k, a, b in sorted(moved):
        out.append(f"\n- {k[0]} TP{k[1]} {k[2]} M = {k[3]}: {a:.3f} -> {b:.3f} of the target")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", nargs="+", required=True, help="variant A's JSON files (repeats)")
    ap.add_argument("--b", nargs="+", required=True, help="variant B's JSON files (repeats)")
    ap.add_argument("--points", action="store_true", help="also list every point")
    a = ap.parse_args(argv)
    rows = compare(load(a.a), load(a.b))
    if not rows:
        sys.exit("bench_compare.py: no point common to every file")
    print(summary(rows))
    b_runs = load(a.b)
    best_b = []
    for k, runs in b_runs.items():
        r = dict(runs[0])
        r["us"] = min(x["us"] for x in runs)
        r["baseline_us"] = baseline(runs)
        r["baseline_fp8_us"] = baseline(runs, "baseline_fp8_us")
        best_b.append(r)
    print("\nB against its same-run baselines, per scheme (baseline µs / B µs, best repeat):\n")
    print(bench_rows.ratio_table(best_b))
    targets = target_table(rows, load(a.a), b_runs)
    if targets:
        print("\nAgainst BRIEF §4's memory-bound target (roof / 0.85 + 4 µs; best repeat):\n")
        print(targets)
    if a.points:
        print("\n| preset | TP | scheme | M | path | A us | B us | B/A | normalized | spread |\n|---|---|---|---|---|---|---|---|---|---|")
        for k, a_us, b_us, sp, nm, spread in rows:
            print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {k[4]} | {a_us:.1f} | {b_us:.1f} | {sp:.3f} | "
                  f"{'-' if nm is None else f'{nm:.3f}'} | {100 * spread:.1f} % |")


if __name__ == "__main__":
    main()
