#!/usr/bin/env python3
"""The router's retune table from a moekit-bench path sweep (`--path mma,swapab,tokmajor,decode,gemv[,auto]`,
one or more JSON files of the same GPU and commit; run `--path gemv` once more with
MOEKIT_GEMV_KERNEL=mma for the tensor-core GEMV kernel: gemv rows are named by their dispatch,
`gemv` or `gemv(mma)`; rows whose --check failed are left out): per point every forced path's time, the
fastest, and, when the router's own choice was measured (an `auto` row in --auto files, e.g. a
grid of the router to judge, else in the sweep files), what auto ran and how far it is from the fastest.
The summary lists the points where auto is more than --slack slower than the fastest path: the
router's crossovers to look at (docs/router.md says how the last retune read this table).

  tools/scripts/path_report.py SWEEP.json [SWEEP2.json ...] [--auto GRID.json ...] [--slack 0.03]
"""
import argparse
import json
import statistics
import sys

FORCED = ("mma", "swapab", "tokmajor", "fused", "decode", "gemv", "gemv(mma)", "expert_mlp")


def point(row):
    return (row["preset"], row["tp"], row["scheme"], row["tokens"])


def load(paths):
    """{point: {path: (us, dispatch)}}, the fastest row when a point and path repeat."""
    table = {}
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for r in json.load(f)["rows"]:
                if r.get("us") is None or r.get("op", "fused_experts") != "fused_experts":
                    continue
                if r.get("check_ran") and r.get("check_passed") is False:
                    continue
                paths_of = table.setdefault(point(r), {})
                path = r.get("path") or "auto"
                if path == "gemv" and r.get("dispatch", "").startswith("gemv"):
                    path = r["dispatch"]  # which GEMV kernel ran it
                if path not in paths_of or r["us"] < paths_of[path][0]:
                    paths_of[path] = (r["us"], r.get("dispatch", ""))
    return table


def rows(sweep, auto):
    """Per point with at least one forced path: (point, {path: us}, fastest path, auto us or None,
    auto's dispatch, fastest us / auto us)."""
    out = []
    for k in sorted(sweep, key=lambda k: (k[0], k[1], k[2], k[3])):
        forced = {p: v[0] for p, v in sweep[k].items() if p in FORCED}
        if not forced:
            continue
        best = min(forced, key=forced.get)
        a = auto.get(k, {}).get("auto") or sweep[k].get("auto")  # --auto files first
        a_us, a_disp = (a[0], a[1]) if a else (None, "")
        out.append((k, forced, best, a_us, a_disp, forced[best] / a_us if a_us else None))
    return out


def report(table_rows, slack):
    cols = [p for p in FORCED if any(p in r[1] for r in table_rows)]  # the paths the sweep has
    lines = ["| preset | TP | scheme | M | " + " | ".join(cols) + " | fastest | auto | auto ran | fastest / auto |",
             "|---|---|---|---|" + "---|" * len(cols) + "---|---|---|---|"]
    for k, forced, best, a_us, a_disp, ratio in table_rows:
        cells = [f"{forced[p]:.1f}" if p in forced else "-" for p in cols]
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | " + " | ".join(cells) + f" | {best} | "
                     + (f"{a_us:.1f} | {a_disp} | {ratio:.3f} |" if a_us else "- | - | - |"))
    judged = [r for r in table_rows if r[5] is not None]
    lines.append("")
    if not judged:
        lines.append("No auto times: pass --path ...,auto or --auto GRID.json to judge the router.")
        return "\n".join(lines)
    slow = [r for r in judged if r[5] < 1.0 - slack]
    lines.append(f"auto against the fastest forced path at {len(judged)} points: median "
                 f"{statistics.median(r[5] for r in judged):.3f}; {len(slow)} points more than "
                 f"{slack:.0%} slower:")
    for k, forced, best, a_us, a_disp, ratio in sorted(slow, key=lambda r: r[5]):
        lines.append(f"- {k[0]} TP{k[1]} {k[2]} M={k[3]}: auto ran {a_disp} in {a_us:.1f} µs, "
                     f"{best} {forced[best]:.1f} µs ({1 / ratio:.2f}x)")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep", nargs="+", help="moekit-bench JSON files with forced --path rows")
    ap.add_argument("--auto", nargs="*", default=[], help="JSON files with the router's (auto) rows")
    ap.add_argument("--slack", type=float, default=0.03, help="flag auto when slower than the fastest by more")
    args = ap.parse_args(argv)
    table_rows = rows(load(args.sweep), load(args.auto))
    if not table_rows:
        print("no forced-path rows in " + ", ".join(args.sweep), file=sys.stderr)
        return 1
    print(report(table_rows, args.slack))
    return 0


if __name__ == "__main__":
    sys.exit(main())
