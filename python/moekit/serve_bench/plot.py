"""Plots of moekit-serve-bench results (matplotlib, PNG), one line per implementation:
output throughput against p95 TTFT, and median TPOT against concurrency, per model.

    python -m moekit.serve_bench.plot RESULT.json|DIR [...] --out DIR
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from collections import defaultdict
from typing import Dict, Iterable, List


def load_points(paths: Iterable[str]) -> List[dict]:
    """Points from summary JSONs ({'points': [...]}), point JSONs, or folders of them."""
    files: List[str] = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(glob.glob(os.path.join(p, "**", "*.json"), recursive=True))
        else:
            files.append(p)
    points, seen = [], set()
    for f in files:
        try:
            with open(f) as fh:
                obj = json.load(fh)
        except (OSError, ValueError):
            continue
        items = obj.get("points", []) if isinstance(obj, dict) and "points" in obj else [obj]
        for pt in items:
            if not isinstance(pt, dict) or "metrics" not in pt:
                continue
            key = (pt.get("model", {}).get("preset"), pt.get("implementation"), pt.get("concurrency"),
                   pt.get("date"))
            if key not in seen:
                seen.add(key)
                points.append(pt)
    return points


def _model_label(pt: dict) -> str:
    m = pt.get("model", {})
    return f"{m.get('preset')}-{m.get('num_hidden_layers')}L"


def plot(points: List[dict], out_dir: str) -> List[str]:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    os.makedirs(out_dir, exist_ok=True)
    by_model: Dict[str, Dict[str, List[dict]]] = defaultdict(lambda: defaultdict(list))
    for pt in points:
        by_model[_model_label(pt)][pt["implementation"]].append(pt)
    written = []
    for model, impls in sorted(by_model.items()):
        gpu = next(iter(impls.values()))[0].get("environment", {}).get("gpu", "GPU")
        figs = {
            "throughput_vs_p95_ttft": ("p95 TTFT (ms)", "output throughput (tok/s)",
                                       lambda m: m.get("p95_ttft_ms"), lambda m: m.get("output_throughput"), False),
            "tpot_vs_concurrency": ("concurrency (requests in flight)", "median TPOT (ms)",
                                    None, lambda m: m.get("median_tpot_ms"), True),
            "p99_itl_vs_concurrency": ("concurrency (requests in flight)", "p99 ITL (ms)",
                                       None, lambda m: m.get("p99_itl_ms"), True),
        }
        for fname, (xl, yl, fx, fy, by_c) in figs.items():
            fig, ax = plt.subplots(figsize=(6.4, 4.4))
            for impl, pts in sorted(impls.items()):
                pts = sorted(pts, key=lambda p: p["concurrency"])
                xs, ys, cs = [], [], []
                for p in pts:
                    m = p["metrics"]
                    x = p["concurrency"] if by_c else fx(m)
                    y = fy(m)
                    if x is None or y is None:
                        continue
                    xs.append(x)
                    ys.append(y)
                    cs.append(p["concurrency"])
                if not xs:
                    continue
                ax.plot(xs, ys, marker="o", label=impl)
                if not by_c:
                    for x, y, c in zip(xs, ys, cs):
                        ax.annotate(str(c), (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7)
            if by_c:
                ax.set_xscale("log", base=2)
            ax.set_xlabel(xl)
            ax.set_ylabel(yl)
            ax.set_title(f"{model} on {gpu}" + ("" if by_c else " (labels: concurrency)"), fontsize=9)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
            fig.tight_layout()
            path = os.path.join(out_dir, f"{model}_{fname}.png")
            fig.savefig(path, dpi=120)
            plt.close(fig)
            written.append(path)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m moekit.serve_bench.plot", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="summary JSON(s), point JSON(s) or folders of them")
    ap.add_argument("--out", required=True, help="folder for the PNGs")
    a = ap.parse_args(argv)
    points = load_points(a.inputs)
    if not points:
        print("plot: no result points found in " + ", ".join(a.inputs), file=sys.stderr)
        return 1
    for p in plot(points, a.out):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
