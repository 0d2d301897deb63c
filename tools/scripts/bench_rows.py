"""How moekit-bench's JSON rows are read by the other scripts: which baseline is like for like for
a row's scheme, the per-scheme baseline ratios, and the --check summary.

Baselines (tools/bench/cuda_runner.cu): `baseline` / `baseline_us` is cuBLAS bf16 (grouped, or per
expert), measured for every scheme; `baseline_fp8` / `baseline_fp8_us` is cuBLASLt e4m3 with
per-tensor scales, one matmul per expert, measured for fp8 schemes from commit-stamped builds on
(grids recorded before it have none). Like for like: a bf16 row against the first, an fp8 row
against the second. An fp8 row against cuBLAS bf16 is not like for like (it credits moekit with
fp8's halved weight bytes) and is always labelled so.
"""
import statistics

FP8_BF16_LABEL = "fp8 vs bf16 cuBLAS (not like for like)"


def like_for_like(row):
    """(baseline name, baseline µs) of the row's own precision, or (None, None) if not measured."""
    if row.get("scheme") == "bf16":
        return row.get("baseline"), row.get("baseline_us")
    return row.get("baseline_fp8"), row.get("baseline_fp8_us")


def ratio_groups(rows):
    """{(scheme, path, kind): [(baseline_us / us, baseline name)]} over timed rows. kind is "like"
    (the row's own precision) or "bf16" (an fp8 row against cuBLAS bf16)."""
    groups = {}
    for r in rows:
        us = r.get("us")
        if not us:
            continue
        name, base = like_for_like(r)
        path = r.get("path", "auto")
        groups.setdefault((r["scheme"], path, "like"), [])
        if base:
            groups[(r["scheme"], path, "like")].append((base / us, name))
        if r.get("scheme") != "bf16" and r.get("baseline_us"):
            groups.setdefault((r["scheme"], path, "bf16"), []).append((r["baseline_us"] / us, r.get("baseline")))
    return groups


def scheme_order(scheme):
    order = ["bf16", "fp8_per_tensor", "fp8_per_channel", "fp8_block128"]
    return (order.index(scheme) if scheme in order else len(order), scheme)


def ratio_table(rows):
    """Markdown: per scheme, moekit's speedup over its like-for-like baseline (above 1: moekit
    faster); fp8 rows also against cuBLAS bf16, labelled as not like for like. Never one ratio over
    all schemes."""
    groups = ratio_groups(rows)
    out = ["| scheme | path | baseline | points | x baseline: median | min | max | moekit faster at |",
           "|---|---|---|---|---|---|---|---|"]
    for s, path in sorted({(s, p) for s, p, _ in groups}, key=lambda sp: (scheme_order(sp[0]), sp[1] != "auto", sp[1])):
        for kind in ("like", "bf16"):
            if s == "bf16" and kind == "bf16":
                continue
            v = groups.get((s, path, kind))
            if not v:
                if kind == "like":
                    what = "cuBLAS bf16" if s == "bf16" else "cuBLASLt fp8"
                    out.append(f"| {s} | {path} | {what}: not measured in this run | 0 | - | - | - | - |")
                continue
            ratios = sorted(x for x, _ in v)
            names = "/".join(sorted({n or "?" for _, n in v}))
            label = names if kind == "like" else f"{names}: {FP8_BF16_LABEL}"
            faster = sum(1 for x in ratios if x > 1.0)
            out.append(f"| {s} | {path} | {label} | {len(ratios)} | {statistics.median(ratios):.2f}x | {ratios[0]:.2f}x | "
                       f"{ratios[-1]:.2f}x | {faster} of {len(ratios)} |")
    return "\n".join(out)


def check_summary(rows):
    """One line: how many rows --check compared (all tokens or a sample), failed, the worst error per scheme."""
    ran = [r for r in rows if r.get("check_ran")]
    if not ran:
        return "--check: did not run on any row (a grid recorded before it, or --no-check)."
    failed = [r for r in ran if r.get("check_passed") is False]
    sampled = sum(1 for r in ran if r.get("check_tokens", 0) < r.get("tokens", 0))
    worst = {}
    for r in ran:
        e = r.get("max_rel_err")
        e = float(e) if e is not None else float("nan")
        s = r["scheme"]
        if s not in worst or not (e <= worst[s]):
            worst[s] = e
    per = ", ".join(f"{s} {worst[s]:.2g}" for s in sorted(worst, key=scheme_order))
    text = (f"--check: {len(ran)} of {len(rows)} rows checked against the CPU reference ({sampled} on a token "
            f"sample), {len(failed)} failed; worst per-token max_rel_err per scheme: {per}.")
    if failed:
        text += " Failed: " + "; ".join(
            f"{r['preset']} TP{r['tp']} {r['scheme']} M={r['tokens']} ({r.get('max_rel_err')} > {r.get('check_tol')})"
            for r in failed[:10])
    return text
