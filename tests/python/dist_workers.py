"""The rank side of tests/python/test_distributed.py: the cases (seeded, so every process builds the
same full weights and tokens), their single-process reference, and the worker that each spawned
rank runs (torch.multiprocessing, gloo on CPU or NCCL on one GPU per rank). Kept out of the test
module so that spawned ranks import only this, torch and moekit."""

import datetime
import os

import torch

import moekit
import moekit.distributed as mkd

# Small Mixtral-like (E=8, top-2) and Qwen3-like (E=16, top-4, N < K) shapes. fp8_per_tensor uses
# static activation scales so that every rank quantizes exactly as the single-process op does;
# fp8_block128's 1x128 groups and fp8_per_channel's per-token scales (EP: whole rows) are the
# same on a rank as unsharded anyway. "cold": the last rank's experts get no token (so that
# rank receives no row in EP); "uneven": the ranks hold different numbers of tokens, one none.
CASES = {
    "mixtral_bf16": dict(E=8, k=2, K=128, N=64, M=24, scheme="bf16"),
    "mixtral_bf16_bias_cold": dict(E=8, k=2, K=128, N=64, M=20, scheme="bf16", bias=True, cold=True),
    "qwen3_bf16": dict(E=16, k=4, K=128, N=32, M=24, scheme="bf16", uneven=True),
    "qwen3_fp8_per_tensor": dict(E=16, k=4, K=128, N=32, M=16, scheme="fp8_per_tensor", static=True),
    "mixtral_fp8_block128": dict(E=8, k=2, K=256, N=128, M=12, scheme="fp8_block128", n_per_rank=128),
    "qwen3_fp8_per_channel_ep": dict(E=16, k=4, K=128, N=32, M=16, scheme="fp8_per_channel", ep_only=True),
}


def case_n(case, world):
    """N of the case at `world` ranks (block128 needs 128 channels per rank)."""
    return case["n_per_rank"] * world if "n_per_rank" in case else case["N"]


def token_counts(case, world):
    M = case["M"]
    if not case.get("uneven"):
        base, rem = divmod(M, world)
        return [base + (r < rem) for r in range(world)]
    # rank 1 holds none, rank 0 the most
    counts = [0] * world
    rest = M
    for r in range(world):
        if r == 1:
            continue
        counts[r] = rest // 2 if r != world - 1 else rest
        rest -= counts[r]
    counts[0] += rest
    return counts


def make_full(name, world, seed=0):
    case = CASES[name]
    E, k, K = case["E"], case["k"], case["K"]
    N = case_n(case, world)
    M = case["M"]
    g = torch.Generator().manual_seed(seed + 1000 * world + sum(map(ord, name)))
    hidden = torch.randn(M, K, generator=g).to(torch.bfloat16)
    w13 = torch.randn(E, 2 * N, K, generator=g) * 0.06
    w2 = torch.randn(E, K, N, generator=g) * 0.06
    logits = torch.randn(M, E, generator=g)
    if case.get("cold"):
        first, count = mkd.expert_range(E, world, world - 1)
        logits[:, first:first + count] = -30.0  # never in any token's top-k
    scheme = case["scheme"]
    d = dict(hidden=hidden, logits=logits, top_k=k, scheme=scheme, a1_scale=None, a2_scale=None)
    if scheme == "bf16":
        d.update(w1=w13.to(torch.bfloat16), w2=w2.to(torch.bfloat16), w1_scale=None, w2_scale=None)
    else:
        q13, s13 = moekit.quantize_weights(w13, scheme)
        q2, s2 = moekit.quantize_weights(w2, scheme)
        d.update(w1=q13, w2=q2, w1_scale=s13, w2_scale=s2)
    if case.get("static"):
        d["a1_scale"] = torch.tensor([4.5 / 448.0])
        d["a2_scale"] = torch.tensor([3.0 / 448.0])
    d["w1_bias"] = (torch.randn(E, 2 * N, generator=g) * 0.1).to(torch.bfloat16) if case.get("bias") else None
    d["w2_bias"] = (torch.randn(E, K, generator=g) * 0.1).to(torch.bfloat16) if case.get("bias") else None
    return d


def reference(name, world):
    """The single-process fused_moe over every token with the full weights."""
    d = make_full(name, world)
    return moekit.fused_moe(d["hidden"], d["logits"], d["w1"], d["w2"], d["top_k"], scheme=d["scheme"],
                            w1_scale=d["w1_scale"], w2_scale=d["w2_scale"], a1_scale=d["a1_scale"],
                            a2_scale=d["a2_scale"], w1_bias=d["w1_bias"], w2_bias=d["w2_bias"])


def _to(d, device):
    return {key: (v.to(device) if isinstance(v, torch.Tensor) else v) for key, v in d.items()}


def round_robin(E, world, rank):
    """A non-contiguous partition (expert e on rank e % world) as (global ids, expert_map)."""
    ids = [e for e in range(E) if e % world == rank]
    emap = torch.full((E,), -1, dtype=torch.int32)
    emap[ids] = torch.arange(len(ids), dtype=torch.int32)
    return ids, emap


def run_case(name, world, rank, device, group=None):
    """This rank's outputs for case `name`: {"tp": [M, K] (all tokens), "ep": [M_r, K] (its tokens),
    "ep_again": the same call again, "ep_map": round-robin experts through an expert_map}."""
    case = CASES[name]
    d = _to(make_full(name, world), device)
    full = dict(scheme=d["scheme"], w1_scale=d["w1_scale"], w2_scale=d["w2_scale"], w1_bias=d["w1_bias"],
                w2_bias=d["w2_bias"])
    act = dict(a1_scale=d["a1_scale"], a2_scale=d["a2_scale"])
    res = {}
    if not case.get("ep_only"):
        s = mkd.shard_tp(d["w1"], d["w2"], world, rank, **full)
        res["tp"] = mkd.tp_fused_moe(d["hidden"], d["logits"], s.w1, s.w2, d["top_k"], group=group, **s.kwargs(),
                                     **act)
    counts = token_counts(case, world)
    lo = sum(counts[:rank])
    hidden, logits = d["hidden"][lo:lo + counts[rank]], d["logits"][lo:lo + counts[rank]]
    s = mkd.shard_ep(d["w1"], d["w2"], world, rank, **full)
    res["ep"] = mkd.ep_fused_moe(hidden, logits, s.w1, s.w2, d["top_k"], group=group, **s.kwargs(), **act)
    res["ep_again"] = mkd.ep_fused_moe(hidden, logits, s.w1, s.w2, d["top_k"], group=group, **s.kwargs(), **act)
    ids, emap = round_robin(case["E"], world, rank)
    pick = lambda x: None if x is None else x[ids].contiguous()  # noqa: E731
    res["ep_map"] = mkd.ep_fused_moe(hidden, logits, pick(d["w1"]), pick(d["w2"]), d["top_k"], group=group,
                                     expert_map=emap.to(device), scheme=d["scheme"], w1_scale=pick(d["w1_scale"]),
                                     w2_scale=pick(d["w2_scale"]), w1_bias=pick(d["w1_bias"]),
                                     w2_bias=pick(d["w2_bias"]), **act)
    return {key: v.cpu() for key, v in res.items()}


def worker(rank, world, init_file, out_dir, backend, names):
    # NVLink multicast stays off on shared GPU hosts (docs/parallel.md).
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    # moekit's functions without the torch.ops layer, whose first call imports torch._dynamo (3 s
    # and more per rank on 2 cores); the ops run the same C++ calls.
    os.environ["MOEKIT_NO_TORCH"] = "1"
    torch.set_num_threads(1)
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    import torch.distributed as dist

    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        results = {name: run_case(name, world, rank, device) for name in names}
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()
