#!/usr/bin/env python3
"""The decode path's cluster A/B as a table (tools/scripts/decode_cluster_ab.sh): per point, the
time with the model's cluster choice and with each forced size (cluster-model.json,
cluster-1.json, ... : moekit-bench --path decode, MOEKIT_DECODE_CLUSTER), the fastest size, and
how much the model's choice loses against it. A row whose check failed is marked.

  tools/scripts/decode_cluster_table.py OUT/cluster-*.json
"""
import json
import os
import re
import sys
from collections import defaultdict


def main():
    files = sys.argv[1:]
    if not files:
        sys.exit(__doc__)
    table = defaultdict(dict)  # point -> {variant: row}
    variants = []
    for path in files:
        m = re.search(r"cluster-([^./]+)\.json$", os.path.basename(path))
        if not m:
            sys.exit(f"{path}: expected a name cluster-<model|1|2|4|8>.json")
        v = m.group(1)
        variants.append(v)
        with open(path, encoding="utf-8") as f:
            for r in json.load(f)["rows"]:
                if r.get("us") is None:
                    continue
                table[(r["preset"], r["tp"], r["scheme"], r["tokens"])][v] = r
    forced = sorted((v for v in variants if v != "model"), key=int)
    print("| preset | TP | scheme | M | model µs | " + " | ".join(f"c{v} µs" for v in forced) +
          " | fastest | model / fastest |")
    print("|---" * (6 + len(forced) + 1) + "|")
    losses = []
    for key in sorted(table):
        rows = table[key]
        cells, best_v, best_us = [], None, None
        for v in ["model"] + forced:
            r = rows.get(v)
            if r is None:
                cells.append("-")
                continue
            bad = r.get("check_ran") and not r.get("check_passed")
            cells.append(f"{r['us']:.1f}" + (" CHECK FAILED" if bad else ""))
            if not bad and v != "model" and (best_us is None or r["us"] < best_us):
                best_v, best_us = v, r["us"]
        model = rows.get("model")
        ratio = model["us"] / best_us if model and best_us else None
        if ratio is not None:
            losses.append(ratio)
        tail = f" | c{best_v} | {ratio:.3f} |" if ratio is not None else " | - | - |"
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | " + " | ".join(cells) + tail)
    if losses:
        losses.sort()
        print(f"\nmodel / fastest forced size over {len(losses)} points: median {losses[len(losses) // 2]:.3f}, "
              f"max {losses[-1]:.3f}; {sum(1 for x in losses if x > 1.03)} points lose more than 3 %")


if __name__ == "__main__":
    main()
