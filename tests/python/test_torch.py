"""moekit on torch tensors: the torch.ops.moekit.* registrations (opcheck, torch.compile, CUDA
graphs) and the CUDA backend against the CPU reference. Skipped without torch; the `gpu` tests
need a CUDA device and a moekit build with its CUDA backend (the GPU machine)."""

import numpy as np
import pytest

from conftest import HAS_TORCH, cuda_ready

pytestmark = pytest.mark.torch
if not HAS_TORCH:
    pytest.skip("torch is not installed", allow_module_level=True)

import torch  # noqa: E402

import moekit  # noqa: E402

CUDA_OK, CUDA_WHY = cuda_ready()
gpu = pytest.mark.skipif(not CUDA_OK, reason=f"needs CUDA + moekit's CUDA backend: {CUDA_WHY}")
# The CUDA kernels against the CPU reference (tests/common/tolerance.hpp).
TOL = {"bf16": 1e-2, "fp8_per_tensor": 3e-2, "fp8_per_channel": 3e-2, "fp8_block128": 3e-2}


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def make(M=16, E=8, k=2, K=256, N=128, scheme="bf16", device="cpu", bias=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(M, K, generator=g).to(torch.bfloat16)
    w13 = torch.randn(E, 2 * N, K, generator=g) * 0.06
    w2 = torch.randn(E, K, N, generator=g) * 0.06
    logits = torch.randn(M, E, generator=g)
    tw, ti = torch.topk(torch.softmax(logits, -1), k, dim=-1)  # int64 ids, as torch.topk gives
    tw = tw / tw.sum(-1, keepdim=True)
    d = dict(hidden=hidden, logits=logits, topk_weights=tw, topk_ids=ti, scheme=scheme)
    if scheme == "bf16":
        d.update(w1=w13.to(torch.bfloat16), w2=w2.to(torch.bfloat16), w1_scale=None, w2_scale=None)
    else:
        q13, s13 = moekit.quantize_weights(w13, scheme)
        q2, s2 = moekit.quantize_weights(w2, scheme)
        d.update(w1=q13, w2=q2, w1_scale=s13, w2_scale=s2)
    d["w1_bias"] = (torch.randn(E, 2 * N, generator=g) * 0.1) if bias else None
    d["w2_bias"] = (torch.randn(E, K, generator=g) * 0.1) if bias else None
    return {key: (v.to(device) if isinstance(v, torch.Tensor) else v) for key, v in d.items()}


def run_fe(d, **kw):
    return moekit.fused_experts(d["hidden"], d["w1"], d["w2"], d["topk_weights"], d["topk_ids"], scheme=d["scheme"],
                                w1_scale=d["w1_scale"], w2_scale=d["w2_scale"], w1_bias=d["w1_bias"],
                                w2_bias=d["w2_bias"], **kw)


def fe_args(d):
    # The op's positional schema (moekit/_torch_ops.py).
    return (d["hidden"], d["w1"], d["w2"], d["topk_weights"].float(), d["topk_ids"], "silu", False, None, d["scheme"],
            d["w1_scale"], d["w2_scale"], None, None, d["w1_bias"], d["w2_bias"], 1.702, 7.0, None)


def test_ops_are_registered():
    assert hasattr(torch.ops.moekit, "fused_experts")
    assert hasattr(torch.ops.moekit, "route")
    assert hasattr(torch.ops.moekit, "fused_moe")


# ------------------------------------------------------------------------ CPU torch tensors

@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
def test_vllm_positional_call_on_torch_tensors(device):
    """A call written for vLLM v0.10.2's fused_experts, positionally, through the torch op; its int
    flags refused by name (tests/python/test_vllm_signature.py has the full contract on numpy)."""
    d = make(M=9, K=64, N=32, device=device)
    ref = moekit.fused_experts(d["hidden"], d["w1"], d["w2"], d["topk_weights"], d["topk_ids"])
    h = d["hidden"].clone()
    # hidden, w1, w2, topk_weights, topk_ids, inplace, activation, apply_router_weight_on_input,
    # use_fp8_w8a8, use_int8_w8a8, use_int8_w8a16, use_int4_w4a16, use_mxfp4_w4a4, per_channel_quant,
    # global_num_experts, expert_map
    out = moekit.fused_experts(h, d["w1"], d["w2"], d["topk_weights"], d["topk_ids"], True, "silu", False, False,
                               False, False, False, False, False, -1, None)
    assert out is h
    torch.testing.assert_close(h, ref, rtol=0, atol=0)
    with pytest.raises(NotImplementedError, match="use_int4_w4a16"):
        moekit.fused_experts(h, d["w1"], d["w2"], d["topk_weights"], d["topk_ids"], False, "silu", False, False,
                             False, False, True)
    with pytest.raises(NotImplementedError, match="w1_zp"):
        moekit.fused_experts(h, d["w1"], d["w2"], d["topk_weights"], d["topk_ids"], w1_zp=torch.zeros(1))


def _on_both_view_paths(call):
    """call() with the one-call views (checking that it took them), then with the per-tensor Python
    views (moekit._ops.FAST_TORCH_VIEWS off): (fast result, Python result)."""
    from moekit import _ops

    taken = []
    fast_fn = _ops._expert_args_torch

    def counting(*args_, **kw_):
        got = fast_fn(*args_, **kw_)
        taken.append(got is not None)
        return got

    _ops._expert_args_torch = counting
    try:
        fast = call()
    finally:
        _ops._expert_args_torch = fast_fn
    assert taken == [True]
    _ops.FAST_TORCH_VIEWS = False
    try:
        python = call()
    finally:
        _ops.FAST_TORCH_VIEWS = True
    return fast, python


def _view_fields(v):
    return (v.present, v.ndim, v.shape, v.strides, v.dtype, repr(v), v.data)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
@pytest.mark.parametrize("scheme", ["bf16", "fp8_per_tensor", "fp8_per_channel", "fp8_block128"])
def test_fast_torch_views_equal_python_views(scheme, device):
    """fused_experts_impl's fast path (_C.expert_args_torch builds every TensorView in C++) gives the
    views the Python path builds, field by field: int64 ids and bf16 router weights (converted),
    biases, an expert map, per-tensor scales given as [E, 1, 1] (reshaped)."""
    from moekit import _ops

    d = make(M=5, E=8, k=2, K=256, N=128, scheme=scheme, bias=True, device=device)
    s13, s2 = d["w1_scale"], d["w2_scale"]
    if scheme == "fp8_per_tensor":
        s13, s2 = s13.reshape(-1, 1, 1), s2.reshape(-1, 1, 1)
    out = torch.empty_like(d["hidden"])
    kw = dict(activation="silu", apply_router_weight_on_input=False,
              expert_map=torch.arange(8, dtype=torch.int64, device=device),
              scheme=scheme, w1_scale=s13, w2_scale=s2, a1_scale=None, a2_scale=None, w1_bias=d["w1_bias"],
              w2_bias=d["w2_bias"], swiglu_alpha=1.702, swiglu_limit=7.0)
    tw = d["topk_weights"].to(torch.bfloat16)
    fast = _ops._expert_args_torch(d["hidden"], d["w1"], d["w2"], tw, d["topk_ids"], out, **kw)
    assert fast is not None
    a, _ = fast
    b = _ops._expert_args(_ops._Keep(), d["hidden"], d["w1"], d["w2"], tw, d["topk_ids"], out, **kw)
    for field in ("hidden", "topk_ids", "topk_weights", "out", "a13_scale", "a2_scale", "expert_map"):
        fa, fb = _view_fields(getattr(a, field)), _view_fields(getattr(b, field))
        # The converted tensors (ids, router weights, expert map) are new per call: same view but the pointer.
        if field in ("topk_ids", "topk_weights", "expert_map"):
            fa, fb = fa[:-1], fb[:-1]
        assert fa == fb, field
    for field in ("w13", "w2", "w13_scale", "w2_scale", "b13", "b2"):
        assert _view_fields(getattr(a.weights, field)) == _view_fields(getattr(b.weights, field)), field
    assert (a.scheme, a.apply_router_weight_on_input) == (b.scheme, b.apply_router_weight_on_input)
    assert (a.activation.kind, a.activation.alpha, a.activation.limit) == (
        b.activation.kind, b.activation.alpha, b.activation.limit)
    assert str(moekit._C.describe(a)) == str(moekit._C.describe(b))
    # Strided, expanded and offset tensors: the same strides and pointers on both paths (the
    # views alone; validation refuses non-contiguous ones later, on either path).
    odd = {"hidden": d["hidden"].t().contiguous().t(), "out": torch.empty(5, 512, dtype=torch.bfloat16,
                                                                          device=device)[:, 1::2],
           "w1_bias": d["w1_bias"][:, :1].expand(-1, d["w1_bias"].shape[1])}
    kw_odd = dict(kw, w1_bias=odd["w1_bias"])
    a = _ops._expert_args_torch(odd["hidden"], d["w1"], d["w2"], tw, d["topk_ids"], odd["out"], **kw_odd)[0]
    b = _ops._expert_args(_ops._Keep(), odd["hidden"], d["w1"], d["w2"], tw, d["topk_ids"], odd["out"], **kw_odd)
    for va, vb in ((a.hidden, b.hidden), (a.out, b.out), (a.weights.b13, b.weights.b13)):
        assert _view_fields(va) == _view_fields(vb)
    assert a.hidden.strides == [1, 5] and a.out.strides == [512, 2] and a.weights.b13.strides == [256, 0]
    # The same call on either path: the same bytes; the call took the one-call views.
    fast_out, python_out = _on_both_view_paths(lambda: run_fe(d))
    assert torch.equal(fast_out, python_out)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
def test_fused_moe_fast_views_same_bytes(device):
    """fused_moe_impl takes the experts' views in one C++ call too: the same output, routing
    outputs and bytes as the per-tensor Python path, and the call took the one-call views."""
    from moekit import _ops

    d = make(M=7, E=8, k=2, K=128, N=64, bias=True, device=device)
    ids = torch.empty(7, 2, dtype=torch.int32, device=device)
    wts = torch.empty(7, 2, dtype=torch.float32, device=device)

    def call():
        out = _ops.fused_moe_impl(d["hidden"], d["logits"], d["w1"], d["w2"], 2, w1_bias=d["w1_bias"],
                                  w2_bias=d["w2_bias"], topk_ids=ids, topk_weights=wts)[0]
        return out.clone(), ids.clone(), wts.clone()

    fast, python = _on_both_view_paths(call)
    assert all(torch.equal(f, p) for f, p in zip(fast, python))


def test_fast_path_declines_what_python_raises():
    """A tensor the fast path does not take (a dtype moekit does not read) falls back to the Python
    path, which raises its error naming the argument."""
    from moekit import _ops

    d = make(M=3, K=64, N=32)
    h64 = d["hidden"].double()
    kw = dict(activation="silu", apply_router_weight_on_input=False, expert_map=None, scheme="bf16", w1_scale=None,
              w2_scale=None, a1_scale=None, a2_scale=None, w1_bias=None, w2_bias=None, swiglu_alpha=1.702,
              swiglu_limit=7.0)
    assert _ops._expert_args_torch(h64, d["w1"], d["w2"], d["topk_weights"], d["topk_ids"],
                                   torch.empty(3, 64, dtype=torch.bfloat16), **kw) is None
    with pytest.raises(ValueError, match="hidden_states has dtype torch.float64"):
        _ops.fused_experts_impl(h64, d["w1"], d["w2"], d["topk_weights"], d["topk_ids"])


def test_cpu_tensors_match_numpy_path():
    import ml_dtypes

    d = make(M=9, K=64, N=32)
    out = run_fe(d)
    assert out.dtype == torch.bfloat16 and out.device.type == "cpu"
    bf = ml_dtypes.bfloat16
    np_out = moekit.fused_experts(d["hidden"].float().numpy().astype(bf), d["w1"].float().numpy().astype(bf),
                                  d["w2"].float().numpy().astype(bf), d["topk_weights"].numpy(),
                                  d["topk_ids"].numpy())
    np.testing.assert_array_equal(out.float().numpy(), np_out.astype(np.float32))


def test_cpu_route_and_fused_moe():
    d = make(M=11, K=64, N=32)
    tw, ti = moekit.route(d["logits"], 2)
    assert tw.dtype == torch.float32 and ti.dtype == torch.int32
    torch.testing.assert_close(ti.long(), d["topk_ids"])
    out, tw2, ti2 = moekit.fused_moe(d["hidden"], d["logits"], d["w1"], d["w2"], 2, return_routing=True)
    torch.testing.assert_close(ti2, ti)
    ref = moekit.fused_experts(d["hidden"], d["w1"], d["w2"], tw, ti)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
def test_opcheck(device):
    d = make(M=5, K=128, N=64, device=device)
    torch.library.opcheck(torch.ops.moekit.fused_experts.default, fe_args(d))
    torch.library.opcheck(torch.ops.moekit.route.default, (d["logits"], 2, "softmax_topk", True, 1, 1, 1.0, None))
    torch.library.opcheck(
        torch.ops.moekit.fused_moe.default,
        (d["hidden"], d["logits"], d["w1"], d["w2"], 2, True, "softmax_topk", 1, 1, 1.0, None, "silu", False, None,
         "bf16", None, None, None, None, None, None, 1.702, 7.0, None))


@pytest.mark.parametrize("scheme", ["fp8_per_tensor", "fp8_per_channel", "fp8_block128"])
def test_opcheck_fp8_cpu(scheme):
    d = make(M=3, K=256, N=128, scheme=scheme)
    # test_schema compares inputs with float8 arithmetic that torch's CPU kernels lack.
    torch.library.opcheck(torch.ops.moekit.fused_experts.default, fe_args(d),
                          test_utils=("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic"))


def test_compile_cpu():
    d = make(M=6, K=64, N=32)

    def f(h, w1, w2, tw, ti):
        return moekit.fused_experts(h * 1.0, w1, w2, tw, ti) + 1.0

    ref = f(d["hidden"], d["w1"], d["w2"], d["topk_weights"], d["topk_ids"])
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(d["hidden"], d["w1"], d["w2"],
                                                                d["topk_weights"], d["topk_ids"])
    torch.testing.assert_close(got, ref, rtol=0, atol=0)


# ------------------------------------------------------------------------------ CUDA backend

@gpu
@pytest.mark.parametrize("scheme", ["bf16", "fp8_per_tensor", "fp8_per_channel", "fp8_block128"])
@pytest.mark.parametrize("M", [1, 3, 64, 129])
def test_cuda_matches_cpu_reference(scheme, M):
    d = make(M=M, E=8, k=2, K=384, N=256, scheme=scheme)
    ref = run_fe(d)
    dc = {key: (v.cuda() if isinstance(v, torch.Tensor) else v) for key, v in d.items()}
    out = run_fe(dc)
    assert out.device.type == "cuda"
    assert rel(out, ref) < TOL[scheme], f"{scheme} M={M}: {rel(out, ref)}"


@gpu
def test_cuda_biases_swiglu_expert_map():
    d = make(M=33, E=8, k=4, K=256, N=128, bias=True)
    emap = torch.tensor([0, -1, 1, 2, -1, 3, 4, 5], dtype=torch.int32)
    local = [0, 2, 3, 5, 6, 7]
    w1, w2 = d["w1"][local].contiguous(), d["w2"][local].contiguous()
    b1, b2 = d["w1_bias"][local].contiguous(), d["w2_bias"][local].contiguous()
    kw = dict(activation="swigluoai", expert_map=emap, w1_bias=b1, w2_bias=b2)
    ref = moekit.fused_experts(d["hidden"], w1, w2, d["topk_weights"], d["topk_ids"], **kw)
    cu = lambda t: t.cuda()  # noqa: E731
    kw_cuda = dict(activation="swigluoai", expert_map=cu(emap), w1_bias=cu(b1), w2_bias=cu(b2))
    out = moekit.fused_experts(cu(d["hidden"]), cu(w1), cu(w2), cu(d["topk_weights"]), cu(d["topk_ids"]), **kw_cuda)
    assert rel(out, ref) < TOL["bf16"]


@gpu
@pytest.mark.parametrize("method,kw", [
    ("softmax_topk", {}), ("topk_softmax", {}),
    ("sigmoid_grouped_topk", {"num_groups": 4, "topk_groups": 2, "routed_scaling_factor": 2.5}),
])
def test_cuda_route_and_fused_moe(method, kw):
    d = make(M=77, E=16, k=4, K=256, N=128)
    logits = d["logits"] if d["logits"].shape[1] == 16 else torch.randn(77, 16)
    tw, ti = moekit.route(logits, 4, method=method, **kw)
    twc, tic = moekit.route(logits.cuda(), 4, method=method, **kw)
    torch.testing.assert_close(tic.cpu(), ti)
    torch.testing.assert_close(twc.cpu(), tw, rtol=1e-5, atol=1e-6)
    ref = moekit.fused_moe(d["hidden"], logits, d["w1"], d["w2"], 4, routing=method, **kw)
    out = moekit.fused_moe(d["hidden"].cuda(), logits.cuda(), d["w1"].cuda(), d["w2"].cuda(), 4, routing=method, **kw)
    assert rel(out, ref) < TOL["bf16"]


@gpu
def test_cuda_no_host_sync_inplace_and_int64_ids():
    d = make(M=32, device="cuda")
    ref = run_fe(d)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        h = d["hidden"].clone()
        r = moekit.fused_experts(h, d["w1"], d["w2"], d["topk_weights"], d["topk_ids"], inplace=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert r is h
    torch.testing.assert_close(h, ref, rtol=0, atol=0)


@gpu
def test_cuda_graph_capture_equals_eager():
    d = make(M=24, device="cuda")
    eager = run_fe(d)
    static_h = d["hidden"].clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run_fe(dict(d, hidden=static_h))  # warm up outside capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = run_fe(dict(d, hidden=static_h))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(static_out, eager, rtol=0, atol=0)
    static_h.copy_(d["hidden"] * 0.5)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(static_out, run_fe(dict(d, hidden=d["hidden"] * 0.5)), rtol=0, atol=0)


@gpu
def test_cuda_torch_compile_fullgraph():
    d = make(M=40, device="cuda")

    def f(h, w1, w2, tw, ti):
        return moekit.fused_experts(torch.nn.functional.silu(h), w1, w2, tw, ti) * 2

    ref = f(d["hidden"], d["w1"], d["w2"], d["topk_weights"], d["topk_ids"])
    cf = torch.compile(f, fullgraph=True, dynamic=True)
    for M in (40, 17):
        args = (d["hidden"][:M], d["w1"], d["w2"], d["topk_weights"][:M], d["topk_ids"][:M])
        torch.testing.assert_close(cf(*args), f(*args), rtol=0, atol=0)
    torch.testing.assert_close(cf(d["hidden"], d["w1"], d["w2"], d["topk_weights"], d["topk_ids"]), ref,
                               rtol=0, atol=0)


@gpu
@pytest.mark.parametrize("scheme", ["fp8_per_tensor", "fp8_per_channel", "fp8_block128"])
def test_cuda_quantize_weights_equals_host(scheme):
    w = torch.randn(3, 200, 300)
    q, s = moekit.quantize_weights(w, scheme)
    qc, sc = moekit.quantize_weights(w.cuda(), scheme)
    torch.testing.assert_close(sc.cpu(), s, rtol=0, atol=0)
    assert torch.equal(qc.cpu().view(torch.uint8), q.view(torch.uint8))


@gpu
def test_cuda_errors_are_value_errors():
    d = make(M=4, device="cuda")
    with pytest.raises(ValueError, match="w13 has shape"):
        moekit.fused_experts(d["hidden"], d["w1"][:, :, :128].contiguous(), d["w2"], d["topk_weights"],
                             d["topk_ids"])
    with pytest.raises(ValueError, match="is on cpu"):
        moekit.fused_experts(d["hidden"], d["w1"].cpu(), d["w2"], d["topk_weights"], d["topk_ids"])
