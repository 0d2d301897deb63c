"""moekit.distributed: the sharding helpers against the C++ ones, and tp_fused_moe / ep_fused_moe
across 2 and 4 spawned processes (gloo, CPU tensors: moekit's CPU reference) against the
single-process fused_moe. The `gpu` variant runs the same cases over NCCL on 2 GPUs and skips with
fewer. The rank side lives in dist_workers.py."""

import os
import time

import pytest

from conftest import HAS_TORCH, cuda_ready

pytestmark = pytest.mark.torch
if not HAS_TORCH:
    pytest.skip("torch is not installed", allow_module_level=True)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import moekit  # noqa: E402
import moekit.distributed as mkd  # noqa: E402

import dist_workers  # noqa: E402

# The CPU reference against the numpy model (test_cpu_numpy.py): the sharded ops round their
# partial sums to bf16 once more (TP: each rank's output before the all-reduce; EP: each rank's
# partial before the combine), well inside these.
TOL = {"bf16": 4e-3, "fp8_per_tensor": 2e-2, "fp8_per_channel": 2e-2, "fp8_block128": 2e-2}
# The CUDA kernels against the CPU reference (test_torch.py, tests/common/tolerance.hpp).
TOL_CUDA = {"bf16": 1e-2, "fp8_per_tensor": 3e-2, "fp8_per_channel": 3e-2, "fp8_block128": 3e-2}
JOIN_TIMEOUT_S = 120  # a rank that hangs fails the test instead of the suite


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


# Ranks start from a forkserver that has imported torch and moekit once: a fresh process (no
# threads, no CUDA context) forked per rank, instead of one torch import per rank (seconds each on
# 2 cores). The server stays up for the session, so the 2- and 4-rank runs share it.
START_METHOD = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
PRELOAD = ["torch", "torch.distributed", "moekit", "moekit.distributed", "dist_workers"]


def spawn(world, backend, names, tmp_path):
    """Run dist_workers.worker on `world` new processes; returns each rank's results."""
    init_file = tmp_path / "init"
    if START_METHOD == "forkserver":
        mp.get_context("forkserver").set_forkserver_preload(PRELOAD)
    ctx = mp.start_processes(dist_workers.worker, args=(world, str(init_file), str(tmp_path), backend, names),
                             nprocs=world, join=False, start_method=START_METHOD)
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            pytest.fail(f"{world} ranks ({backend}) did not finish within {JOIN_TIMEOUT_S} s")
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]


@pytest.fixture(scope="module", params=[2, 4], ids=["world2", "world4"])
def gloo_run(request, tmp_path_factory):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    world = request.param
    start = time.monotonic()
    results = spawn(world, "gloo", list(dist_workers.CASES), tmp_path_factory.mktemp(f"gloo{world}"))
    print(f"gloo world={world}: {time.monotonic() - start:.1f} s")
    return world, results


def check(world, results, name, tols=TOL):
    case = dist_workers.CASES[name]
    ref = dist_workers.reference(name, world)
    tol = tols[case["scheme"]]
    if not case.get("ep_only"):
        for r in range(world):
            got = results[r][name]["tp"]
            assert got.dtype == ref.dtype and got.shape == ref.shape
            assert rel(got, ref) < tol, f"{name} tp rank {r}/{world}: {rel(got, ref)}"
            # every rank gets the same all-reduced output
            assert torch.equal(got, results[0][name]["tp"]), f"{name}: tp ranks 0 and {r} differ"
    counts = dist_workers.token_counts(case, world)
    for key in ("ep", "ep_map"):
        got = torch.cat([results[r][name][key] for r in range(world)])
        for r in range(world):
            assert results[r][name][key].shape == (counts[r], case["K"])
        assert rel(got, ref) < tol, f"{name} {key} {world} ranks: {rel(got, ref)}"
    for r in range(world):  # the combine order is fixed: the same bits run to run
        assert torch.equal(results[r][name]["ep"], results[r][name]["ep_again"])


@pytest.mark.parametrize("name", list(dist_workers.CASES))
def test_gloo_matches_single_process(gloo_run, name):
    world, results = gloo_run
    check(world, results, name)


def test_cases_cover_empty_experts_and_ranks():
    # "cold": no token picks the last rank's experts, so in EP that rank receives no row.
    d = dist_workers.make_full("mixtral_bf16_bias_cold", 4)
    tw, ti = moekit.route(d["logits"], d["top_k"])
    first, count = mkd.expert_range(8, 4, 3)
    assert not ((ti >= first) & (ti < first + count)).any()
    # "uneven": rank 1 holds no token.
    assert dist_workers.token_counts(dist_workers.CASES["qwen3_bf16"], 4)[1] == 0


# --------------------------------------------------------------------------- GPU: NCCL, 2 ranks

def _two_gpus():
    ok, why = cuda_ready()
    if not ok:
        return False, why
    if torch.cuda.device_count() < 2:
        return False, f"{torch.cuda.device_count()} CUDA device(s) visible, needs 2"
    if not dist.is_nccl_available():
        return False, "torch.distributed has no NCCL"
    return True, ""


TWO_GPUS, TWO_GPUS_WHY = _two_gpus()


@pytest.mark.gpu
@pytest.mark.skipif(not TWO_GPUS, reason=f"NCCL variant: {TWO_GPUS_WHY}")
def test_nccl_two_gpus_match_single_process(tmp_path):
    assert os.environ.get("NCCL_NVLS_ENABLE", "0") == "0", "keep NVLink multicast off (NCCL_NVLS_ENABLE=0)"
    names = list(dist_workers.CASES)
    results = spawn(2, "nccl", names, tmp_path)
    for name in names:
        check(2, results, name, TOL_CUDA)


# ------------------------------------------------------------------ sharding helpers vs C++

SCHEMES = ["bf16", "fp8_per_tensor", "fp8_per_channel", "fp8_block128"]


def _full(scheme, E=5, K=256, N=256, bias=True, seed=3):
    g = torch.Generator().manual_seed(seed)
    w13 = torch.randn(E, 2 * N, K, generator=g) * 0.05
    w2 = torch.randn(E, K, N, generator=g) * 0.05
    if scheme == "bf16":
        w1, w2q, s1, s2 = w13.to(torch.bfloat16), w2.to(torch.bfloat16), None, None
    else:
        w1, s1 = moekit.quantize_weights(w13, scheme)
        w2q, s2 = moekit.quantize_weights(w2, scheme)
    b1 = torch.randn(E, 2 * N, generator=g).to(torch.bfloat16) if bias else None
    b2 = torch.randn(E, K, generator=g).to(torch.bfloat16) if bias else None
    return dict(w1=w1, w2=w2q, w1_scale=s1, w2_scale=s2, w1_bias=b1, w2_bias=b2, scheme=scheme)


def _same(shard, cpp):
    for key in ("w1", "w2", "w1_scale", "w2_scale", "w1_bias", "w2_bias"):
        a, b = getattr(shard, key), cpp[key]
        assert (a is None) == (b is None), key
        if a is not None:
            assert a.dtype == b.dtype and a.shape == b.shape, (key, a.shape, b.shape)
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), key
            assert a.is_contiguous()


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("tp", [1, 2])
def test_shard_tp_equals_cpp(scheme, tp):
    f = _full(scheme)
    for r in range(tp):
        s = mkd.shard_tp(f["w1"], f["w2"], tp, r, scheme=scheme, w1_scale=f["w1_scale"], w2_scale=f["w2_scale"],
                         w1_bias=f["w1_bias"], w2_bias=f["w2_bias"])
        _same(s, mkd._cpp_shard("tp", f["w1"], f["w2"], tp, r, scheme=scheme, w1_scale=f["w1_scale"],
                                w2_scale=f["w2_scale"], w1_bias=f["w1_bias"], w2_bias=f["w2_bias"]))
        assert (s.w2_bias is None) == (r != 0)


@pytest.mark.parametrize("scheme", ["bf16", "fp8_per_tensor", "fp8_per_channel"])
def test_shard_tp4_equals_cpp_and_numpy(scheme):
    f = _full(scheme, N=64, bias=False)
    for r in range(4):
        s = mkd.shard_tp(f["w1"], f["w2"], 4, r, scheme=scheme, w1_scale=f["w1_scale"], w2_scale=f["w2_scale"])
        _same(s, mkd._cpp_shard("tp", f["w1"], f["w2"], 4, r, scheme=scheme, w1_scale=f["w1_scale"],
                                w2_scale=f["w2_scale"]))
        if scheme == "bf16":  # numpy arrays take the same path
            import ml_dtypes
            import numpy as np

            w1n = f["w1"].float().numpy().astype(ml_dtypes.bfloat16)
            w2n = f["w2"].float().numpy().astype(ml_dtypes.bfloat16)
            sn = mkd.shard_tp(w1n, w2n, 4, r)
            np.testing.assert_array_equal(sn.w1.astype(np.float32), s.w1.float().numpy())
            np.testing.assert_array_equal(sn.w2.astype(np.float32), s.w2.float().numpy())


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("ep", [2, 3])
def test_shard_ep_equals_cpp(scheme, ep):
    f = _full(scheme)
    for r in range(ep):
        s = mkd.shard_ep(f["w1"], f["w2"], ep, r, scheme=scheme, w1_scale=f["w1_scale"], w2_scale=f["w2_scale"],
                         w1_bias=f["w1_bias"], w2_bias=f["w2_bias"])
        _same(s, mkd._cpp_shard("ep", f["w1"], f["w2"], ep, r, scheme=scheme, w1_scale=f["w1_scale"],
                                w2_scale=f["w2_scale"], w1_bias=f["w1_bias"], w2_bias=f["w2_bias"]))
        assert (s.first_expert, s.num_experts) == mkd.expert_range(5, ep, r)


def test_expert_layout_equals_cpp():
    for E in (1, 5, 8, 16, 129):
        for ep in (1, 2, 3, 4, 8):
            owner = mkd.expert_owner_table(E, ep)
            for r in range(ep):
                assert mkd.expert_range(E, ep, r) == tuple(moekit._C.expert_range_for_rank(E, ep, r))
                assert mkd.expert_map(E, ep, r).tolist() == list(moekit._C.expert_map_for_rank(E, ep, r))
            assert owner.tolist() == [moekit._C.expert_owner(E, ep, e) for e in range(E)]


def test_shard_errors():
    f = _full("fp8_block128", N=256, bias=False)
    with pytest.raises(NotImplementedError, match="multiple of 128"):
        mkd.shard_tp(f["w1"], f["w2"], 4, 0, w1_scale=f["w1_scale"], w2_scale=f["w2_scale"], scheme="fp8_block128")
    with pytest.raises(ValueError, match="not divisible"):
        mkd.shard_tp(f["w1"], f["w2"], 3, 0, w1_scale=f["w1_scale"], w2_scale=f["w2_scale"], scheme="fp8_block128")
    with pytest.raises(ValueError, match="tp_rank=2"):
        mkd.shard_tp(f["w1"], f["w2"], 2, 2, w1_scale=f["w1_scale"], w2_scale=f["w2_scale"], scheme="fp8_block128")
    with pytest.raises(ValueError, match="owns no expert"):
        mkd.shard_ep(f["w1"], f["w2"], 8, 6, w1_scale=f["w1_scale"], w2_scale=f["w2_scale"], scheme="fp8_block128")
    with pytest.raises(ValueError, match="w2 has shape"):
        mkd.shard_tp(f["w1"], f["w2"][:, :, :8], 2, 0, w1_scale=f["w1_scale"], w2_scale=f["w2_scale"],
                     scheme="fp8_block128")


def test_tp_shard_sum_in_one_process():
    # Without any process group: the ranks' fused_experts outputs sum to the unsharded op.
    f = _full("bf16", E=4, K=128, N=64)
    g = torch.Generator().manual_seed(7)
    hidden = torch.randn(9, 128, generator=g).to(torch.bfloat16)
    tw, ti = moekit.route(torch.randn(9, 4, generator=g), 2)
    ref = moekit.fused_experts(hidden, f["w1"], f["w2"], tw, ti, w1_bias=f["w1_bias"], w2_bias=f["w2_bias"])
    acc = torch.zeros(9, 128)
    for r in range(4):
        s = mkd.shard_tp(f["w1"], f["w2"], 4, r, w1_bias=f["w1_bias"], w2_bias=f["w2_bias"])
        acc += moekit.fused_experts(hidden, s.w1, s.w2, tw, ti, **s.kwargs()).float()
    assert rel(acc.to(torch.bfloat16), ref) < TOL["bf16"]


# ------------------------------------------------------- one rank, in this process (API, errors)

@pytest.fixture
def one_rank_group(tmp_path):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    if dist.is_initialized():
        pytest.skip("a default process group already exists in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init1'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_one_rank_equals_fused_moe_bitwise(one_rank_group):
    # With one rank nothing is cut or summed: both ops are fused_moe, bit for bit.
    d = dist_workers.make_full("mixtral_bf16_bias_cold", 1)
    kw = dict(w1_bias=d["w1_bias"], w2_bias=d["w2_bias"])
    ref, tw, ti = moekit.fused_moe(d["hidden"], d["logits"], d["w1"], d["w2"], 2, return_routing=True, **kw)
    tp, tw1, ti1 = mkd.tp_fused_moe(d["hidden"], d["logits"], d["w1"], d["w2"], 2, return_routing=True, **kw)
    ep, tw2, ti2 = mkd.ep_fused_moe(d["hidden"], d["logits"], d["w1"], d["w2"], 2, return_routing=True, **kw)
    assert torch.equal(tp, ref) and torch.equal(ep, ref)
    assert torch.equal(ti1, ti) and torch.equal(ti2, ti) and torch.equal(tw2, tw)
    out = torch.empty_like(ref)
    got = mkd.ep_fused_experts(d["hidden"], d["w1"], d["w2"], tw, ti, num_experts=8, out=out, **kw)
    assert got is out and torch.equal(out, ref)
    h = d["hidden"].clone()
    assert mkd.tp_fused_experts(h, d["w1"], d["w2"], tw, ti, inplace=True, **kw) is h and torch.equal(h, ref)


def test_ep_argument_errors(one_rank_group):
    d = dist_workers.make_full("mixtral_bf16", 1)
    tw, ti = moekit.route(d["logits"], 2)
    with pytest.raises(ValueError, match="num_experts"):
        mkd.ep_fused_experts(d["hidden"], d["w1"], d["w2"], tw, ti)
    with pytest.raises(ValueError, match="owns the 8 experts"):
        mkd.ep_fused_experts(d["hidden"], d["w1"][:4], d["w2"][:4], tw, ti, num_experts=8)
    with pytest.raises(ValueError, match="expert_map has 8 entries"):
        mkd.ep_fused_experts(d["hidden"], d["w1"], d["w2"], tw, ti, num_experts=9, expert_map=mkd.expert_map(8, 1, 0))
    with pytest.raises(ValueError, match=r"\[M=24, k\]"):
        mkd.ep_fused_experts(d["hidden"], d["w1"], d["w2"], tw[:3], ti[:3], num_experts=8)
    with pytest.raises(TypeError, match="torch tensor"):
        mkd.ep_fused_experts(d["hidden"].float().numpy(), d["w1"], d["w2"], tw, ti, num_experts=8)
