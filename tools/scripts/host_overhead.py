#!/usr/bin/env python3
"""The host side of one eager moekit call from Python, at M = 1..64 (issue 13: "the host side of
one call (validation, router, launch) should stay under 10 µs, since Hugging Face transformers
and other eager callers pay it per layer"; docs/perf.md "Host side of an eager call").

For each level of the Python stack, each scheme and each M it reports:
  host_us     the host wall time until the call returns (time.perf_counter_ns around the call,
              nothing synchronized inside: the GPU work is only enqueued). Each call is timed
              alone; the device is synchronized every --sync-every calls, outside the timed
              regions, so the launch queue never backs up (a full queue would block the host
              inside the call and time the GPU instead). Median, p90 and min over --iters calls.
  e2e_us      the eager per-call time with a synchronize after every call (torch.cuda.synchronize
              inside the timed region): what an eager caller waits per layer when it waits.
The levels, from what transformers runs down to the C++ entry point:
  hf_like        the body of moekit.integrations.transformers.moekit_experts_forward: reshape,
                 int64 ids and bf16 weights as transformers' router hands them over (converted
                 inside, as the integration does), moekit.fused_experts, the cast back
  fused_experts  moekit.fused_experts(x, w13, w2, topk_weights, topk_ids) with int32 ids and fp32
                 weights (what vLLM-style callers pass): the torch op below, plus argument checks
  torch_op       torch.ops.moekit.fused_experts(...) directly: torch's custom-op dispatch, then
                 moekit._ops.fused_experts_impl
  impl           moekit._ops.fused_experts_impl(...): TensorViews, describe + workspace_size, the
                 workspace from torch's caching allocator, the device guard, the binding
  binding        moekit._C.fused_experts on arguments and a workspace built once: the nanobind
                 call and the C++ host path only (validation, router, launches)
The shape is a model preset's (default qwen3-30b-a3b at TP8: E=128, k=8, K=2048, N=96).

    python3 tools/scripts/host_overhead.py                                   # bf16, M = 1..64
    python3 tools/scripts/host_overhead.py --scheme bf16,fp8_per_tensor --json host.json
    python3 tools/scripts/host_overhead.py --levels binding,torch_op --tokens 1,8 --profile torch_op

It imports the moekit that `python3 -c "import moekit"` finds (a CUDA build: `MOEKIT_ENABLE_CUDA=ON
bash tests/python/run.sh`, or pip install . on the GPU machine); --pythonpath DIR puts a build's
package first. Exit 2 when torch, CUDA or moekit's CUDA backend is missing (with why).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional

LEVELS = ("hf_like", "fused_experts", "torch_op", "impl", "binding")
# Environment variables moekit reads per call: recorded, since they change the path or the cost.
MOEKIT_ENV = ("MOEKIT_PATH", "MOEKIT_LOG_DISPATCH", "MOEKIT_DEBUG_FAULTS", "MOEKIT_DECODE", "MOEKIT_PDL",
              "MOEKIT_Y_FP32", "MOEKIT_NO_TORCH", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING")


def die(msg: str) -> None:
    print(f"host_overhead.py: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_tokens(s: str) -> List[int]:
    out: List[int] = []
    for item in s.split(","):
        item = item.strip()
        if not item:
            continue
        if ".." in item:
            a, b = (int(x) for x in item.split("..", 1))
            if a < 1 or b < a:
                die(f"bad --tokens range '{item}': expected 1 <= a <= b")
            while a <= b:
                out.append(a)
                a *= 2
        else:
            out.append(int(item))
    if not out or any(m < 1 for m in out):
        die("--tokens needs values >= 1")
    return out


def quantile(v: List[float], q: float) -> float:
    s = sorted(v)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def load(levels: List[str]):
    """torch and moekit, or exit 2 saying what is missing."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        die(f"cannot import torch ({type(e).__name__}: {e}); run this on the GPU machine's Python")
    if not torch.cuda.is_available():
        die("torch sees no CUDA device (torch.cuda.is_available() is False); run it on the GPU machine")
    try:
        import moekit
    except Exception as e:  # noqa: BLE001
        die(f"cannot import moekit ({type(e).__name__}: {e}); install a CUDA build "
            "(MOEKIT_ENABLE_CUDA=ON bash tests/python/run.sh) or pass --pythonpath")
    ok, why = moekit.cuda_available()
    if not ok:
        die(f"moekit has no usable CUDA backend: {why}")
    try:
        from moekit import _torch_ops

        registered = bool(_torch_ops.REGISTERED)
    except Exception:  # noqa: BLE001
        registered = False
    if not registered and any(lv in ("hf_like", "fused_experts", "torch_op") for lv in levels):
        die("torch.ops.moekit is not registered (MOEKIT_NO_TORCH set, or a torch without "
            "torch.library.custom_op): moekit.fused_experts would not take the torch op; use --levels impl,binding")
    return torch, moekit


def make_inputs(torch, moekit, preset: str, tp: int, scheme: str, M: int, seed: int):
    p = moekit.preset_problem(preset, M, tp, scheme)
    E, k, K, N = p.num_experts, p.top_k, p.hidden_size, p.intermediate_size
    g = torch.Generator(device="cuda").manual_seed(seed)
    dev = "cuda"
    x = torch.randn(M, K, device=dev, dtype=torch.bfloat16, generator=g)
    w13 = torch.randn(E, 2 * N, K, device=dev, generator=g) * (3.0 / K) ** 0.5
    w2 = torch.randn(E, K, N, device=dev, generator=g) * (3.0 / N) ** 0.5
    kw: Dict[str, object] = {"scheme": scheme}
    if scheme == "bf16":
        w13, w2 = w13.to(torch.bfloat16), w2.to(torch.bfloat16)
    else:
        w13, s13 = moekit.quantize_weights(w13.to(torch.bfloat16), scheme)
        w2, s2 = moekit.quantize_weights(w2.to(torch.bfloat16), scheme)
        kw.update(w1_scale=s13.contiguous(), w2_scale=s2.contiguous())
    logits = torch.randn(M, E, device=dev, generator=g)
    w_top, ids64 = torch.softmax(logits, -1).topk(k, dim=-1)
    w_top = w_top / w_top.sum(-1, keepdim=True)
    torch.cuda.synchronize()
    return dict(problem=p, x=x, w13=w13.contiguous(), w2=w2.contiguous(), kw=kw,
                ids32=ids64.to(torch.int32).contiguous(), w32=w_top.float().contiguous(),
                ids64=ids64.contiguous(), w_bf16=w_top.to(torch.bfloat16).contiguous())


def callables(torch, moekit, inp, path: Optional[str]) -> Dict[str, Callable[[], object]]:
    from moekit import _C, _ops

    x, w13, w2, kw = inp["x"], inp["w13"], inp["w2"], inp["kw"]
    ids32, w32 = inp["ids32"], inp["w32"]
    scheme = kw["scheme"]
    s13, s2 = kw.get("w1_scale"), kw.get("w2_scale")
    K = x.shape[1]
    extra = {"path": path} if path else {}

    def hf_like():
        # moekit_experts_forward's body (python/moekit/integrations/transformers.py), on the
        # tensors transformers' router hands over: int64 ids, router-dtype weights.
        h = x.reshape(-1, K)
        ids = inp["ids64"].reshape(h.shape[0], -1)
        w = inp["w_bf16"].reshape(h.shape[0], -1)
        out = moekit.fused_experts(h.contiguous(), w13, w2, w.float().contiguous(), ids.contiguous(),
                                   activation="silu", scheme=scheme, w1_scale=s13, w2_scale=s2, w1_bias=None,
                                   w2_bias=None, swiglu_alpha=1.702, swiglu_limit=7.0, **extra)
        return out.to(x.dtype).reshape(x.shape)

    def fused_experts():
        return moekit.fused_experts(x, w13, w2, w32, ids32, scheme=scheme, w1_scale=s13, w2_scale=s2, **extra)

    def torch_op():
        return torch.ops.moekit.fused_experts(x, w13, w2, w32, ids32, "silu", False, None, scheme, s13, s2, None,
                                              None, None, None, 1.702, 7.0, path)

    def impl():
        return _ops.fused_experts_impl(x, w13, w2, w32, ids32, scheme=scheme, w1_scale=s13, w2_scale=s2, path=path)

    # binding: the arguments, workspace and stream made once (as impl makes them per call).
    out = torch.empty_like(x)
    keep = _ops._Keep()
    args = _ops._expert_args(keep, x, w13, w2, w32, ids32, out, activation="silu", apply_router_weight_on_input=False,
                             expert_map=None, scheme=scheme, w1_scale=s13, w2_scale=s2, a1_scale=None, a2_scale=None,
                             w1_bias=None, w2_bias=None, swiglu_alpha=1.702, swiglu_limit=7.0)
    launch = _ops._Launch(x, args, "auto", None, needs_workspace=True)
    bkw = dict(backend=launch.backend, stream=launch.stream, workspace=launch.workspace_ptr,
               workspace_bytes=launch.workspace_bytes, path=path, num_threads=0, debug_faults=False)

    def binding():
        _C.fused_experts(args, **bkw)
        return out

    binding.keep = (keep, launch, out, args)  # alive as long as the callable
    return {"hf_like": hf_like, "fused_experts": fused_experts, "torch_op": torch_op, "impl": impl, "binding": binding}


def time_host(torch, fn, iters: int, warmup: int, sync_every: int) -> List[float]:
    t: List[float] = []
    for i in range(warmup + iters):
        if i % sync_every == 0:
            torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        t1 = time.perf_counter_ns()
        if i >= warmup:
            t.append((t1 - t0) / 1e3)
    torch.cuda.synchronize()
    return t


def views_ab(torch, moekit, args, levels, schemes, tokens) -> List[dict]:
    """--views-ab: per level, host_us with the Python-built views (FAST_TORCH_VIEWS off) and the
    one-C++-call views (on), alternated args.views_ab times in this process (off, on, off, on, ...)
    so drift hits both alike; the median of each round's median, and the smallest. The binding
    level builds no views and is left out. Also checks that the fast path takes these tensors."""
    from moekit import _ops

    rows = []
    print(f"{'level':<14} {'scheme':<15} {'M':>4} {'python us':>10} {'one call us':>12} {'saved us':>9}  (median of "
          f"{args.views_ab} round medians)", flush=True)
    for scheme in schemes:
        for M in tokens:
            inp = make_inputs(torch, moekit, args.preset, args.tp, scheme, M, args.seed)
            fns = callables(torch, moekit, inp, args.path)
            kw = inp["kw"]
            taken = _ops._expert_args_torch(
                inp["x"], inp["w13"], inp["w2"], inp["w32"], inp["ids32"], torch.empty_like(inp["x"]),
                activation="silu", apply_router_weight_on_input=False, expert_map=None, scheme=scheme,
                w1_scale=kw.get("w1_scale"), w2_scale=kw.get("w2_scale"), a1_scale=None, a2_scale=None, w1_bias=None,
                w2_bias=None, swiglu_alpha=1.702, swiglu_limit=7.0) is not None
            for lv in levels:
                if lv == "binding":
                    continue
                med = {False: [], True: []}
                low = {False: [], True: []}
                before = _ops.FAST_TORCH_VIEWS
                try:
                    for _ in range(args.views_ab):
                        for fast in (False, True):
                            _ops.FAST_TORCH_VIEWS = fast
                            t = time_host(torch, fns[lv], args.iters, args.warmup, args.sync_every)
                            med[fast].append(statistics.median(t))
                            low[fast].append(min(t))
                finally:
                    _ops.FAST_TORCH_VIEWS = before
                row = {"level": lv, "scheme": scheme, "tokens": M, "fast_path_taken": taken,
                       "python_views_us": statistics.median(med[False]), "one_call_views_us": statistics.median(med[True]),
                       "python_views_min_us": min(low[False]), "one_call_views_min_us": min(low[True]),
                       "round_medians": {"python_views": med[False], "one_call_views": med[True]}}
                rows.append(row)
                print(f"{lv:<14} {scheme:<15} {M:>4} {row['python_views_us']:>10.2f} {row['one_call_views_us']:>12.2f} "
                      f"{row['python_views_us'] - row['one_call_views_us']:>9.2f}" + ("" if taken else "  [fast path NOT taken]"),
                      flush=True)
            del fns, inp
    return rows


def time_e2e(torch, fn, iters: int, warmup: int) -> List[float]:
    t: List[float] = []
    for i in range(warmup + iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        torch.cuda.synchronize()
        t1 = time.perf_counter_ns()
        if i >= warmup:
            t.append((t1 - t0) / 1e3)
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="qwen3-30b-a3b")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--scheme", default="bf16", help="comma-separated: bf16, fp8_per_tensor, fp8_per_channel, fp8_block128")
    ap.add_argument("--tokens", default="1..64", help='M values; "a..b" = powers of two from a to b (default 1..64)')
    ap.add_argument("--levels", default=",".join(LEVELS), help=f"comma-separated subset of {','.join(LEVELS)}")
    ap.add_argument("--iters", type=int, default=500, help="timed calls per point for host_us (default 500)")
    ap.add_argument("--e2e-iters", type=int, default=100, help="timed calls per point for e2e_us (default 100)")
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--sync-every", type=int, default=8, help="synchronize every N calls, outside the timing")
    ap.add_argument("--path", default=None, help="force a kernel path (Options::path), e.g. decode, swapab")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", default=None, metavar="LEVEL",
                    help="also print cProfile's top functions of --iters calls of LEVEL at the first M")
    ap.add_argument("--pythonpath", default=None, help="put this directory first on sys.path (a build's moekit)")
    ap.add_argument("--views-ab", type=int, default=0, metavar="R",
                    help="instead of the table: each level's host_us with moekit._ops.FAST_TORCH_VIEWS off and on, "
                         "alternated R times in this process (the Python views built per tensor vs in one C++ call)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    if args.pythonpath:
        sys.path.insert(0, args.pythonpath)
    levels = [lv for lv in args.levels.split(",") if lv]
    for lv in levels + ([args.profile] if args.profile else []):
        if lv not in LEVELS:
            die(f"unknown level '{lv}' (expected {', '.join(LEVELS)})")
    if args.iters < 1 or args.e2e_iters < 1 or args.sync_every < 1 or args.warmup < 0:
        die("--iters, --e2e-iters and --sync-every must be >= 1, --warmup >= 0")
    tokens = parse_tokens(args.tokens)
    schemes = [s for s in args.scheme.split(",") if s]

    torch, moekit = load(levels)
    moekit.preload()
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "moekit": moekit.__version__,
        "moekit_file": getattr(moekit._C, "__file__", ""),
        "build_info": dict(moekit._C.build_info()) if hasattr(moekit._C, "build_info") else None,
        "env": {k: os.environ[k] for k in MOEKIT_ENV if k in os.environ},
        "environ_size": len(os.environ),  # getenv scans the environment: its size is part of the cost
        "preset": args.preset, "tp": args.tp, "iters": args.iters, "e2e_iters": args.e2e_iters,
        "warmup": args.warmup, "sync_every": args.sync_every, "path": args.path,
    }

    if args.views_ab > 0:
        rows = views_ab(torch, moekit, args, levels, schemes, tokens)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"meta": meta, "rows": rows}, f, indent=1)
                f.write("\n")
            print(f"wrote {args.json}")
        return

    rows = []
    print(f"{'level':<14} {'scheme':<15} {'M':>4} {'host_us':>9} {'p90':>8} {'min':>8} {'e2e_us':>9}", flush=True)
    profiled = False
    for scheme in schemes:
        for M in tokens:
            inp = make_inputs(torch, moekit, args.preset, args.tp, scheme, M, args.seed)
            fns = callables(torch, moekit, inp, args.path)
            ref = None
            for lv in levels:
                row = {"level": lv, "scheme": scheme, "tokens": M, "preset": args.preset, "tp": args.tp,
                       "problem": str(inp["problem"])}
                try:
                    got = fns[lv]()
                    torch.cuda.synchronize()
                    # The levels on the same fp32 weights and int32 ids must agree bitwise (hf_like
                    # rounds the weights to bf16 first, as transformers' router dtype does).
                    if lv != "hf_like":
                        if ref is None:
                            ref = got.float()
                        elif not torch.equal(got.float(), ref):
                            row["note"] = "output differs from the first level's (same inputs)"
                    host = time_host(torch, fns[lv], args.iters, args.warmup, args.sync_every)
                    e2e = time_e2e(torch, fns[lv], args.e2e_iters, min(args.warmup, 10))
                    row.update(host_us=statistics.median(host), host_p90_us=quantile(host, 0.9), host_min_us=min(host),
                               e2e_us=statistics.median(e2e), e2e_min_us=min(e2e))
                    print(f"{lv:<14} {scheme:<15} {M:>4} {row['host_us']:>9.2f} {row['host_p90_us']:>8.2f} "
                          f"{row['host_min_us']:>8.2f} {row['e2e_us']:>9.2f}" + (f"  [{row['note']}]" if "note" in row else ""),
                          flush=True)
                except Exception as e:  # noqa: BLE001
                    torch.cuda.synchronize()
                    row["error"] = f"{type(e).__name__}: {e}"
                    print(f"{lv:<14} {scheme:<15} {M:>4}  error: {row['error']}", flush=True)
                rows.append(row)
            if args.profile and not profiled:
                import cProfile
                import io
                import pstats

                fn = fns[args.profile]
                prof = cProfile.Profile()
                prof.enable()
                for i in range(args.iters):
                    if i % args.sync_every == 0:
                        torch.cuda.synchronize()
                    fn()
                prof.disable()
                torch.cuda.synchronize()
                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
                print(f"\n== cProfile of {args.iters} calls of {args.profile} ({scheme}, M={M}), by own time:\n{s.getvalue()}")
                meta["profile"] = {"level": args.profile, "scheme": scheme, "tokens": M, "text": s.getvalue()}
                profiled = True
            del fns, inp
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
            f.write("\n")
        print(f"wrote {args.json}")
    if any("error" in r for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
