"""Request-by-request comparison of two moekit-serve-bench points (same model, concurrency and
workload, two implementations): the `requests` records carry the workload index, and the same
index is the same prompt in every run, so a median that moved can be told apart from a few
requests that paid something once (a CUDA-graph capture in the timed run, a prefill that met a
decode step).

    python -m moekit.serve_bench.pairs A_POINT.json B_POINT.json [--metric ttft_ms]
    python python/moekit/serve_bench/pairs.py A_POINT.json B_POINT.json   (no moekit build needed)

Pure Python (no torch): runs where the results are.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Dict, List, Optional

try:
    from .metrics import percentile
except ImportError:  # run as a file (python path/to/pairs.py): moekit itself need not import
    import os

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from metrics import percentile  # noqa: E402


def pair_requests(a: dict, b: dict, metric: str = "ttft_ms") -> List[dict]:
    """Rows (index, prompt_len, a, b, b / a) for the requests both points completed, by index.
    Raises ValueError when the points do not carry per-request records or ran other prompts."""
    for name, pt in (("A", a), ("B", b)):
        if not pt.get("requests"):
            raise ValueError(f"point {name} has no per-request records (recorded before they existed?)")
    fa = (a.get("workload") or {}).get("fingerprint")
    fb = (b.get("workload") or {}).get("fingerprint")
    if fa is not None and fb is not None and fa != fb:
        raise ValueError(f"the points ran different prompts (workload fingerprints {fa} and {fb})")
    by_b: Dict[int, dict] = {r["index"]: r for r in b["requests"] if r.get("index") is not None}
    rows = []
    for ra in a["requests"]:
        rb = by_b.get(ra.get("index"))
        if rb is None or not ra.get("success") or not rb.get("success"):
            continue
        va, vb = ra.get(metric), rb.get(metric)
        if va is None or vb is None:
            continue
        rows.append({"index": ra["index"], "prompt_len": ra["prompt_len"], "a": va, "b": vb,
                     "ratio": vb / va if va > 0 else None})
    return rows


def summarize(rows: List[dict]) -> dict:
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    return {"pairs": len(rows), "b_lower": sum(1 for r in rows if r["b"] < r["a"]),
            "median_ratio": percentile(ratios, 50), "min_ratio": min(ratios) if ratios else None,
            "max_ratio": max(ratios) if ratios else None}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--metric", default="ttft_ms", help="ttft_ms, tpot_ms, e2el_ms or max_itl_ms")
    args = ap.parse_args(argv)
    with open(args.a) as f:
        a = json.load(f)
    with open(args.b) as f:
        b = json.load(f)
    try:
        rows = pair_requests(a, b, args.metric)
    except ValueError as e:
        print(f"pairs: {e}", file=sys.stderr)
        return 2
    print(f"A = {a.get('implementation')}, B = {b.get('implementation')}, {args.metric}, C = {a.get('concurrency')}")
    print(f"{'index':>6} {'prompt':>7} {'A':>10} {'B':>10} {'B/A':>7}")
    for r in rows:
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        print(f"{r['index']:>6} {r['prompt_len']:>7} {r['a']:>10.2f} {r['b']:>10.2f} {ratio:>7}")
    s = summarize(rows)
    med = f"{s['median_ratio']:.3f}" if s["median_ratio"] is not None else "-"
    print(f"{s['pairs']} pairs, B lower in {s['b_lower']}, median B/A {med}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
