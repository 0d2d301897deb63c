#!/usr/bin/env python3
"""BRIEF §4's memory-bound target per point of moekit-bench JSON files: time <= roof / 0.85 + 4 µs.
Per point (preset, TP, scheme, M) every path's time with its ratio to the target, and the
correctness check; the summary counts, per scheme, the points whose fastest path meets the target
and those within 1.25x of it (issue 13's landing bar).

  tools/scripts/target_report.py RUN.json [RUN2.json ...] [--max-tokens 256]
"""
import argparse
import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grid_report import target_us  # noqa: E402  (BRIEF §4's target of a row, stated once)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--max-tokens", type=int, default=256)
    args = ap.parse_args()
    table = defaultdict(dict)  # point -> {path: row}
    for path in args.files:
        with open(path, encoding="utf-8") as f:
            for r in json.load(f)["rows"]:
                if r.get("us") is None or r.get("roof_us") is None or r["tokens"] > args.max_tokens:
                    continue
                key = (r["preset"], r["tp"], r["scheme"], r["tokens"])
                name = r.get("path") or "auto"
                if name == "auto" and r.get("dispatch"):
                    name = "auto(" + r["dispatch"].split()[0] + ")"
                old = table[key].get(name)
                if old is None or r["us"] < old["us"]:
                    table[key][name] = r
    met = defaultdict(lambda: [0, 0, 0])  # scheme -> [points, met, within 1.25x]
    print(f"{'preset':<16} {'tp':>2} {'scheme':<15} {'M':>4} {'target':>7}  paths (us, x target, check)")
    for key in sorted(table):
        preset, tp, scheme, m = key
        rows = table[key]
        tgt = target_us(next(iter(rows.values())))
        cells = []
        for name, r in sorted(rows.items(), key=lambda kv: kv[1]["us"]):
            ok = {True: "ok", False: "FAIL", None: "-"}[r.get("check_passed")]
            cells.append(f"{name} {r['us']:.1f} ({r['us'] / tgt:.2f}x, {ok})")
        best = min(r["us"] for r in rows.values())
        m_ = met[scheme]
        m_[0] += 1
        m_[1] += best <= tgt
        m_[2] += best <= 1.25 * tgt
        print(f"{preset:<16} {tp:>2} {scheme:<15} {m:>4} {tgt:>7.1f}  " + "; ".join(cells))
    for scheme, (n, ok, near) in sorted(met.items()):
        print(f"{scheme}: {ok}/{n} points meet the target with their fastest path, {near}/{n} within 1.25x")


if __name__ == "__main__":
    main()
