#!/usr/bin/env python3
"""inv_rope_fp8_quant against the same math written as plain torch operations, in one run (GPU
machine; needs torch and moekit built with its CUDA backend).

For each T and each DeepSeek-V4 TP8 head shape (Flash: 8 heads, 1 group; Pro: 16 heads, 2 groups;
head_dim 512, rope_dim 64): moekit's op (torch.ops.moekit.inv_rope_fp8_quant) and
torch_inv_rope_fp8_quant below, each captured in a CUDA graph and timed by CUDA events around
each replay with L2 flushed before it (median), against the HBM roof (bytes read + written / the
GPU's datasheet rate, which moekit-bench's table gives: `moekit-bench --hbm-datasheet NAME`; 4.8
TB/s, BRIEF §4's H200, when the bench is not found or the GPU is not listed); the first eager call at a never-seen T against the steady eager call; and whether the
two implementations give the same bytes and scales.

    python3 tools/scripts/rope_quant_bench.py --json $OUT/rope_quant_torch.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

HBM_GBPS = 4800.0  # BRIEF §4's H200: the rate when moekit-bench cannot name this GPU's
DEFAULT_BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "cuda-release",
                             "tools", "bench", "moekit-bench")
SHAPES = (("v4-flash-tp8", 8, 1), ("v4-pro-tp8", 16, 2))
HEAD_DIM, ROPE_DIM, MAX_POS = 512, 64, 65536
DEFAULT_T = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def torch_inv_rope_fp8_quant(o, positions, cos_sin_cache, num_groups: int, packed_ue8m0: bool = False):
    """docs/rope_quant.md's math in plain torch operations (the baseline; same layouts as the op).
    The rotation in float64 (both products exact) then fp32, as moekit defines it, so finite
    inputs give the same bytes; NaN handling is not the op's (torch's amax propagates NaN)."""
    import torch

    T, H, D = o.shape
    rope = cos_sin_cache.shape[1]
    nope, half = D - rope, rope // 2
    G, hpg = num_groups, H // num_groups
    x = o.float()
    cs = cos_sin_cache[positions].double()                       # [T, rope]
    c, s = cs[:, None, :half], cs[:, None, half:]
    xr = o[..., nope:].double().view(T, H, half, 2)
    xe, xo = xr[..., 0], xr[..., 1]
    yr = torch.stack(((xe * c + xo * s).float(), (xo * c - xe * s).float()), dim=-1).view(T, H, rope)
    y = torch.cat((x[..., :nope], yr), dim=-1).view(T, H, D // 128, 128)
    amax = y.abs().amax(dim=-1).clamp(min=1e-10).clamp(max=torch.finfo(torch.float32).max)
    bits = (amax * (1.0 / 448.0)).view(torch.int32)
    e = (bits >> 23) + ((bits & 0x7FFFFF) != 0).to(torch.int32)   # biased exponent of the scale
    inv = ((254 - e) << 23).view(torch.float32)
    q = (y * inv[..., None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    q = q.view(T, G, hpg * D).permute(1, 0, 2).contiguous()       # [G, T, hpg*D]
    Tp = (T + 3) // 4 * 4
    if packed_ue8m0:
        e64 = e.to(torch.int64).view(T, H, D // 512, 4)
        word = e64[..., 0] | (e64[..., 1] << 8) | (e64[..., 2] << 16) | (e64[..., 3] << 24)
        word = torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)
        cols = word.view(T, G, hpg * D // 512).permute(1, 2, 0)
        scale = torch.zeros(G, hpg * D // 512, Tp, dtype=torch.int32, device=o.device)
    else:
        cols = (e << 23).view(torch.float32).view(T, G, hpg * D // 128).permute(1, 2, 0)
        scale = torch.zeros(G, hpg * D // 128, Tp, dtype=torch.float32, device=o.device)
    scale[..., :T] = cols
    return q, scale


def make_inputs(T, H, seed=0, device="cuda"):
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed + T)
    o = torch.randn(T, H, HEAD_DIM, generator=g).to(torch.bfloat16).to(device)
    pos = torch.randint(0, MAX_POS, (T,), generator=g, dtype=torch.int64).to(device)
    inv_freq = 10000.0 ** (-torch.arange(0, ROPE_DIM, 2, dtype=torch.float64) / ROPE_DIM)
    ang = torch.arange(MAX_POS, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cache = torch.cat((ang.cos(), ang.sin()), dim=-1).float().to(device)
    return o, pos, cache


def hbm_bytes(T, H, G):
    """Bytes the op must move: o in, e4m3 out, the scales, positions and the cos/sin rows."""
    nb = H * HEAD_DIM // 128
    Tp = (T + 3) // 4 * 4
    return T * H * HEAD_DIM * 2 + T * H * HEAD_DIM + nb * Tp * 4 + T * 8 + T * ROPE_DIM * 4


class Timer:
    def __init__(self, torch):
        self.torch = torch
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.flush = torch.empty(max(2 * l2, 128 << 20), dtype=torch.uint8, device="cuda")

    def graph_us(self, fn, iters):
        """Median of CUDA-event times of graph replays, L2 flushed before each."""
        torch = self.torch
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()  # warm-up outside the capture (allocator, preload)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        times = []
        for _ in range(iters):
            self.flush.fill_(1)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e3)
        return statistics.median(times)

    def eager_wall_us(self, fn):
        """Host wall clock of one eager call to completion, L2 flushed (and waited for) before."""
        torch = self.torch
        self.flush.fill_(1)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e6


def hbm_rate(gpu_name, bench=DEFAULT_BENCH, override=None):
    """(GB/s, source) of the roofline for a GPU named `gpu_name`: `override` when given, else
    moekit-bench's datasheet table (one table for both tools), else BRIEF §4's H200 rate with the
    reason in the source."""
    if override:
        return float(override), "--hbm-gbps"
    try:
        out = subprocess.run([bench, "--hbm-datasheet", gpu_name], capture_output=True, text=True,
                             check=True, timeout=30).stdout.strip()
        # "3350 GB/s (datasheet: NVIDIA H100 80GB HBM3)"
        gbps = float(out.split()[0])
        source = out[out.index("(") + 1:out.rindex(")")]
        return gbps, source
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        print(f"rope_quant_bench: no rate from {bench} ({e}); the roof assumes an H200's {HBM_GBPS:.0f} GB/s "
              "(--hbm-gbps sets this GPU's)", file=sys.stderr)
        return HBM_GBPS, f"BRIEF §4's H200 rate (moekit-bench not run: {e})"


def git_commit():
    if os.environ.get("MOEKIT_COMMIT"):
        return os.environ["MOEKIT_COMMIT"]
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True,
                                       cwd=os.path.dirname(os.path.abspath(__file__))).strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default=",".join(map(str, DEFAULT_T)), help="comma-separated T values")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--packed", action="store_true", help="packed UE8M0 scales")
    ap.add_argument("--json", default="", help="write the rows here")
    ap.add_argument("--hbm-gbps", type=float, default=None, help="the roof's HBM rate (default: the GPU's datasheet)")
    ap.add_argument("--bench", default=DEFAULT_BENCH, help="moekit-bench, for its datasheet table")
    args = ap.parse_args(argv)

    import torch

    import moekit

    ok, why = moekit.cuda_available()
    if not (torch.cuda.is_available() and ok):
        print(f"rope_quant_bench: needs a GPU and moekit's CUDA backend ({why})", file=sys.stderr)
        return 2
    timer = Timer(torch)
    gbps, hbm_source = hbm_rate(torch.cuda.get_device_name(0), args.bench, args.hbm_gbps)
    tokens = [int(t) for t in args.tokens.split(",") if t]
    rows = []
    # Warm the process (kernel preload, torch's lazy init) at a T not in the sweep.
    o, pos, cache = make_inputs(3, 8)
    moekit.inv_rope_fp8_quant(o, pos, cache, 1, packed_ue8m0=args.packed)
    torch_inv_rope_fp8_quant(o, pos, cache, 1, args.packed)
    torch.cuda.synchronize()
    print(f"{'shape':14} {'T':>6} {'moekit us':>10} {'roof us':>8} {'roof/us':>8} {'target':>7} "
          f"{'torch us':>9} {'x torch':>8} {'first/steady':>12} match")
    for name, H, G in SHAPES:
        for T in tokens:
            o, pos, cache = make_inputs(T, H)
            ours = lambda: moekit.inv_rope_fp8_quant(o, pos, cache, G, packed_ue8m0=args.packed)  # noqa: E731
            base = lambda: torch_inv_rope_fp8_quant(o, pos, cache, G, args.packed)  # noqa: E731
            # First call at this never-seen T (eager, the op's whole host path), then steady.
            first = timer.eager_wall_us(ours)
            steady = statistics.median(timer.eager_wall_us(ours) for _ in range(10))
            q1, s1 = ours()
            q2, s2 = base()
            match = bool(torch.equal(q1.view(torch.uint8), q2.view(torch.uint8)) and
                         torch.equal(s1.view(torch.int32), s2.view(torch.int32)))
            us = timer.graph_us(ours, args.iters)
            torch_us = timer.graph_us(base, args.iters)
            nbytes = hbm_bytes(T, H, G)
            roof = nbytes / (gbps * 1e3)
            target = roof / 0.85 + 4.0
            row = dict(shape=name, heads=H, groups=G, head_dim=HEAD_DIM, rope_dim=ROPE_DIM, tokens=T,
                       packed_ue8m0=args.packed, us=us, bytes=nbytes, roof_us=roof, roof_fraction=roof / us,
                       target_us=target, meets_target=us <= target, torch_ops_us=torch_us,
                       speedup_vs_torch_ops=torch_us / us, first_call_us=first, steady_eager_us=steady,
                       first_over_steady=first / steady, match_torch_ops=match, timing="graph, L2 flushed, median")
            rows.append(row)
            print(f"{name:14} {T:6d} {us:10.2f} {roof:8.2f} {roof / us:8.2f} {'ok' if us <= target else 'MISS':>7} "
                  f"{torch_us:9.2f} {torch_us / us:8.1f} {first / steady:12.2f} {match}")
    out = dict(tool="tools/scripts/rope_quant_bench.py", commit=git_commit(),
               date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               gpu=torch.cuda.get_device_name(0), torch=torch.__version__, hbm_gbps=gbps, hbm_source=hbm_source,
               reproduce="python3 tools/scripts/rope_quant_bench.py" + (" --packed" if args.packed else ""),
               rows=rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if all(r["match_torch_ops"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
