#!/usr/bin/env python3
"""The one-launch structure's floor at each small grid point, against the point's measured time.

    tools/scripts/skeleton_floor.py points GRID.json [--max-tokens 16 | --tokens 64,256] [--tp 8,1]
    tools/scripts/skeleton_floor.py report FLOOR.json GRID.json [--out FILE]

`points` prints the --skeleton-points list of moekit-launch-floor for the grid's rows up to
--max-tokens tokens (PRESET:TP:SCHEME:M:EXPERTS, EXPERTS = the row's touched_experts, the experts
moekit-bench's routing touched at that point), so that the skeleton streams the bytes the call
streamed:

    build/cuda-release/tools/bench/moekit-launch-floor --json floor.json \\
        --skeleton-points "$(tools/scripts/skeleton_floor.py points grid-tp8.json)"

`report` joins the floor rows back to the grid rows: per point, moekit's time and its ratio to
BRIEF §4's memory-bound target (roof / 0.85 + 4 µs), and each structure's floor and its ratio to
the same target. The skeleton (docs/perf.md "Session 34") is the GEMV path's structure with its
math taken out: every CTA reads the ids, streams its share of GEMM1's bytes, crosses the grid,
reads every CTA's partial and streams its share of GEMM2's bytes. "no barrier" is a lower bound
for any one-launch design whose weight reads wait on the routing read (not a valid call); a point
whose lower bound is above 1.25x its target cannot reach issue 13's bound with such a design; a
point whose best barrier structure (the cooperative grid sync, or a counter barrier with w2 copied
to shared memory before GEMM1 where a CTA's share fits) is above it cannot with a grid-wide barrier
between the GEMMs, the GEMV path's structure. The experts column is the point's (the skeleton's
cap, 256, is every preset's E or more). "two launches" runs GEMM1's half and GEMM2's half as
two kernels in a row: against the grid sync it is what one launch spanning both GEMMs saves, in
the skeleton (docs/tokmajor.md "Next steps").
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grid_report import target_us  # noqa: E402

STRUCTURES = [
    ("no barrier (a lower bound)", "lower bound"),
    ("cooperative launch, grid sync", "grid sync"),
    ("plain launch, counter barrier, w2 to smem before GEMM1", "w2 early"),
    ("two launches, GEMM1's then GEMM2's", "two launches"),
]
SCHEME_SHORT = {"bf16": "bf16", "fp8_per_tensor": "fp8"}
ROW_RE = re.compile(r"^skeleton-point ([^:]+):(\d+):(bf16|fp8):(\d+):(\d+): (.+)$")


def grid_rows(path):
    with open(path) as f:
        doc = json.load(f)
    return doc, [r for r in doc["rows"]
                 if r.get("us") and r.get("roof_us") and r.get("path", "auto") == "auto"
                 and r.get("scheme") in SCHEME_SHORT and r.get("touched_experts")]


def point_of(row):
    return "%s:%d:%s:%d:%d" % (row["preset"], row["tp"], SCHEME_SHORT[row["scheme"]], row["tokens"],
                               min(int(row["touched_experts"]), 256))


def cmd_points(a):
    _, rows = grid_rows(a.grid)
    tps = {int(x) for x in a.tp.split(",")} if a.tp else None
    toks = {int(x) for x in a.tokens.split(",")} if a.tokens else None
    pts = []
    for r in rows:
        if (toks is not None and r["tokens"] not in toks) or (toks is None and r["tokens"] > a.max_tokens):
            continue
        if tps and r["tp"] not in tps:
            continue
        p = point_of(r)
        if p not in pts:
            pts.append(p)
    if not pts:
        print("skeleton_floor.py: no grid row at those tokens", file=sys.stderr)
        return 1
    print(",".join(pts))
    return 0


def floors(path):
    """{point: {structure short name: (us, in_graph_us)}} from moekit-launch-floor's JSON."""
    with open(path) as f:
        doc = json.load(f)
    out = {}
    names = dict(STRUCTURES)
    for r in doc["rows"]:
        m = ROW_RE.match(r["case"])
        if not m or m.group(6) not in names:
            continue
        p = ":".join(m.group(i) for i in range(1, 6))
        out.setdefault(p, {})[names[m.group(6)]] = (r["us"], r.get("in_graph_us"))
    return doc, out


def verdict(lb, barrier, x=1.25):
    """lb: the lower bound's ratio to the target; barrier: the best barrier structure's."""
    if lb is not None and lb > x:
        return "out of reach of any one-launch design with a routing read (lower bound > %.2fx)" % x
    if barrier is not None and barrier > x:
        return ("out of reach with a grid-wide barrier between the GEMMs (> %.2fx); only a design without "
                "it may reach it" % x)
    return "the structure leaves room (floor <= %.2fx): the kernel's own cost is the miss" % x


def cmd_report(a):
    fdoc, fl = floors(a.floor)
    gdoc, rows = grid_rows(a.grid)
    lines = [
        "Skeleton floors `%s` (commit %s%s, %s, %s) against grid `%s` (commit %s, %s): moekit-launch-floor "
        "--skeleton-points, graph replay, L2 flushed by reading, median; target = roof / 0.85 + 4 µs (BRIEF §4)."
        % (os.path.basename(a.floor), str(fdoc.get("commit", "?"))[:7], ", dirty tree" if fdoc.get("dirty") else "",
           fdoc.get("date", "?"), fdoc.get("gpu", "?"), os.path.basename(a.grid), str(gdoc.get("commit", "?"))[:7],
           gdoc.get("date", "?")),
        "",
        "| point | experts | moekit µs | / target | lower bound µs | / target | grid sync µs | / target | w2 early µs "
        "| / target | two launches µs | / target | the structure |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    counts = {"lb": 0, "gs": 0, "room": 0}
    n = 0
    boundary = []  # two launches - grid sync, µs: what one launch spanning both GEMMs saves in the skeleton
    for r in sorted(rows, key=lambda r: (r["tp"], r["preset"], r["scheme"], r["tokens"])):
        p = point_of(r)
        if p not in fl:
            continue
        n += 1
        tgt = target_us(r)
        f = fl[p]
        cells = []
        ratios = {}
        for _, short in STRUCTURES:
            if short in f:
                us = f[short][0]
                ratios[short] = us / tgt
                cells += ["%.1f" % us, "%.2f" % (us / tgt)]
            else:
                cells += ["-", "-"]
        if "two launches" in f and "grid sync" in f:
            boundary.append(f["two launches"][0] - f["grid sync"][0])
        barriers = [ratios[k] for k in ("grid sync", "w2 early") if k in ratios]
        v = verdict(ratios.get("lower bound"), min(barriers) if barriers else None)
        counts["lb" if v.startswith("out of reach of any") else "gs" if v.startswith("out of reach") else "room"] += 1
        lines.append("| %s TP%d %s M=%d | %s | %.1f | %.2f | %s | %s |" % (
            r["preset"], r["tp"], r["scheme"], r["tokens"], p.rsplit(":", 1)[1], r["us"], r["us"] / tgt,
            " | ".join(cells), v))
    if n == 0:
        print("skeleton_floor.py: no floor row matches a grid row (run `points` on this grid)", file=sys.stderr)
        return 1
    lines += ["", "%d points: %d beyond 1.25x for any one-launch design with a routing read, %d beyond it with a "
              "grid-wide barrier only, %d with room under it." % (n, counts["lb"], counts["gs"], counts["room"])]
    if boundary:
        boundary.sort()
        lines.append("Two launches against one with a grid sync (the skeleton's launch boundary): median %+.2f µs "
                     "(%+.2f to %+.2f) over %d points." % (boundary[len(boundary) // 2], boundary[0], boundary[-1],
                                                            len(boundary)))
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    sys.stdout.write(text)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("points", help="the --skeleton-points list of a grid's small points")
    p.add_argument("grid")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--tokens", help="only these token counts (e.g. 64,256: the T points), instead of --max-tokens")
    p.add_argument("--tp", help="only these TP degrees, e.g. 8 or 8,1")
    r = sub.add_parser("report", help="the floors against the grid's times, as markdown")
    r.add_argument("floor")
    r.add_argument("grid")
    r.add_argument("--out")
    a = ap.parse_args(argv)
    return cmd_points(a) if a.cmd == "points" else cmd_report(a)


if __name__ == "__main__":
    sys.exit(main())
