"""moekit's Python layer on numpy arrays (the CPU reference), against the float64 model of
moe_ref.py: routing, fused_experts in every scheme, fused_moe, expert_map, biases, the
vLLM argument conventions and the quantization helpers. Runs on CI without torch."""

import ml_dtypes
import numpy as np
import pytest

import moe_ref
import moekit
from conftest import BF16, make_case

FP16 = np.dtype(np.float16)
# Against the float64 model: fp32 summation flips an occasional bf16 / e4m3 rounding.
TOL = {"bf16": 4e-3, "fp8_per_tensor": 2e-2, "fp8_per_channel": 2e-2, "fp8_block128": 2e-2}


def quantized(case, scheme):
    w13, w2 = case["w13"], case["w2"]
    if scheme == "bf16":
        return w13.astype(BF16), w2.astype(BF16), None, None
    q13, s13 = moekit.quantize_weights(w13, scheme)
    q2, s2 = moekit.quantize_weights(w2, scheme)
    return q13, q2, s13, s2


# ---------------------------------------------------------------------------------- routing

@pytest.mark.parametrize("renormalize", [True, False])
def test_route_softmax_topk(rng, renormalize):
    logits = rng.standard_normal((33, 10)).astype(np.float32)
    w, ids = moekit.route(logits, 3, renormalize=renormalize)
    rw, rids = moe_ref.route(logits, 3, renormalize=renormalize)
    assert ids.dtype == np.int32 and w.dtype == np.float32 and ids.shape == (33, 3)
    np.testing.assert_array_equal(ids, rids)
    np.testing.assert_allclose(w, rw, rtol=1e-5, atol=1e-6)


def test_route_bf16_logits(rng):
    logits = rng.standard_normal((9, 8)).astype(BF16)
    w, ids = moekit.route(logits, 2)
    rw, rids = moe_ref.route(logits.astype(np.float32), 2)
    np.testing.assert_array_equal(ids, rids)
    np.testing.assert_allclose(w, rw, rtol=1e-5, atol=1e-6)


def test_route_ties_pick_lower_expert_id():
    logits = np.zeros((2, 6), np.float32)
    w, ids = moekit.route(logits, 4)
    np.testing.assert_array_equal(ids, [[0, 1, 2, 3], [0, 1, 2, 3]])
    np.testing.assert_allclose(w, 0.25, rtol=1e-6)


def test_route_sigmoid_grouped_topk(rng):
    E = 16
    logits = rng.standard_normal((21, E)).astype(np.float32)
    bias = (rng.standard_normal(E) * 0.1).astype(np.float32)
    w, ids = moekit.route(logits, 4, method="sigmoid_grouped_topk", num_groups=4, topk_groups=2,
                          routed_scaling_factor=2.5, e_score_correction_bias=bias)
    rw, rids = moe_ref.route(logits, 4, "sigmoid_grouped_topk", True, 4, 2, 2.5, bias)
    np.testing.assert_array_equal(ids, rids)
    np.testing.assert_allclose(w, rw, rtol=1e-5, atol=1e-6)


def test_route_topk_softmax(rng):
    logits = rng.standard_normal((12, 7)).astype(np.float32)
    w, ids = moekit.route(logits, 4, method="topk_softmax")
    rw, rids = moe_ref.route(logits, 4, "topk_softmax")
    np.testing.assert_array_equal(ids, rids)
    np.testing.assert_allclose(w, rw, rtol=1e-5, atol=1e-6)


def test_route_empty():
    w, ids = moekit.route(np.zeros((0, 8), np.float32), 2)
    assert w.shape == (0, 2) and ids.shape == (0, 2)


# ---------------------------------------------------------------------------- fused_experts

@pytest.mark.parametrize("M", [0, 1, 7, 33])
@pytest.mark.parametrize("act", ["silu", "gelu", "swiglu_oai"])
def test_fused_experts_bf16(rng, M, act):
    c = make_case(rng, M=M)
    w13, w2, _, _ = quantized(c, "bf16")
    out = moekit.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"], activation=act)
    assert out.dtype == BF16 and out.shape == c["hidden"].shape
    ref = moe_ref.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"], act=act)
    assert moe_ref.rel_err(out, ref) < TOL["bf16"]


def test_fused_experts_fp16(rng):
    c = make_case(rng, M=9, dtype=FP16)
    w13, w2 = c["w13"].astype(FP16), c["w2"].astype(FP16)
    out = moekit.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"])
    assert out.dtype == FP16
    ref = moe_ref.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"])
    assert moe_ref.rel_err(out, ref) < TOL["bf16"]


@pytest.mark.parametrize("scheme", ["fp8_per_tensor", "fp8_per_channel", "fp8_block128"])
@pytest.mark.parametrize("M", [1, 19])
def test_fused_experts_fp8(rng, scheme, M):
    # K and N past one 128-block, not multiples of it.
    c = make_case(rng, M=M, E=4, k=2, K=200, N=136)
    w13, w2, s13, s2 = quantized(c, scheme)
    assert w13.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    out = moekit.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"], scheme=scheme,
                               w1_scale=s13, w2_scale=s2)
    ref = moe_ref.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"], scheme=scheme,
                                w13_scale=s13, w2_scale=s2)
    assert moe_ref.rel_err(out, ref) < TOL[scheme]
    # The scheme is inferred from fp8 weights and the scale's shape (block needs block_shape).
    block = [128, 128] if scheme == "fp8_block128" else None
    again = moekit.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"], w1_scale=s13,
                                 w2_scale=s2, block_shape=block)
    np.testing.assert_array_equal(out.astype(np.float32), again.astype(np.float32))


def test_fused_experts_fp8_static_scales(rng):
    c = make_case(rng, M=11)
    w13, w2, s13, s2 = quantized(c, "fp8_per_tensor")
    a1, a2 = np.array([0.01], np.float32), np.array(0.002, np.float32)  # [1] and a 0-dim scalar
    out = moekit.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"], scheme="fp8_per_tensor",
                               w1_scale=s13, w2_scale=s2, a1_scale=a1, a2_scale=a2)
    ref = moe_ref.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"], scheme="fp8_per_tensor",
                                w13_scale=s13, w2_scale=s2, a13_scale=0.01, a2_scale=0.002)
    assert moe_ref.rel_err(out, ref) < TOL["fp8_per_tensor"]


def test_vllm_scale_layouts_and_flags(rng):
    """vLLM's [E, 2N, 1] per-channel and [E, 1, 1] per-tensor scales, use_fp8_w8a8 flags."""
    c = make_case(rng, M=6)
    w13, w2, s13, s2 = quantized(c, "fp8_per_channel")
    base = moekit.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"], scheme="fp8_per_channel",
                                w1_scale=s13, w2_scale=s2)
    vl = moekit.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"], use_fp8_w8a8=True,
                              per_channel_quant=True, w1_scale=s13[:, :, None], w2_scale=s2[:, :, None])
    np.testing.assert_array_equal(base.astype(np.float32), vl.astype(np.float32))
    t13, t2, ts13, ts2 = quantized(c, "fp8_per_tensor")
    base = moekit.fused_experts(c["hidden"], t13, t2, c["topk_weights"], c["topk_ids"], scheme="fp8_per_tensor",
                                w1_scale=ts13, w2_scale=ts2)
    vl = moekit.fused_experts(c["hidden"], t13, t2, c["topk_weights"], c["topk_ids"], use_fp8_w8a8=True,
                              w1_scale=ts13.reshape(-1, 1, 1), w2_scale=ts2.reshape(-1, 1, 1))
    np.testing.assert_array_equal(base.astype(np.float32), vl.astype(np.float32))


def test_int64_ids_bf16_weights_and_inplace(rng):
    c = make_case(rng, M=8)
    w13, w2, _, _ = quantized(c, "bf16")
    tw_bf16 = c["topk_weights"].astype(BF16)
    base = moekit.fused_experts(c["hidden"], w13, w2, tw_bf16.astype(np.float32), c["topk_ids"])
    conv = moekit.fused_experts(c["hidden"], w13, w2, tw_bf16, c["topk_ids"].astype(np.int64))
    np.testing.assert_array_equal(base.astype(np.float32), conv.astype(np.float32))
    base = moekit.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"])
    h = c["hidden"].copy()
    r = moekit.fused_experts(h, w13, w2, c["topk_weights"], c["topk_ids"], inplace=True)
    assert r is h
    np.testing.assert_array_equal(h.astype(np.float32), base.astype(np.float32))


def test_out_argument(rng):
    c = make_case(rng, M=5)
    w13, w2, _, _ = quantized(c, "bf16")
    out = np.full(c["hidden"].shape, np.nan, dtype=BF16)  # poisoned: every element must be written
    r = moekit.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"], out=out)
    assert r is out and np.isfinite(out.astype(np.float32)).all()


def test_expert_map(rng):
    E_global, E_local = 6, 3
    c = make_case(rng, M=13, E=E_global, k=3)
    emap = np.array([-1, 0, -1, 1, 2, -1], np.int32)  # this rank holds global 1, 3, 4
    w13 = c["w13"][[1, 3, 4]].astype(BF16)
    w2 = c["w2"][[1, 3, 4]].astype(BF16)
    assert w13.shape[0] == E_local
    out = moekit.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"], expert_map=emap)
    ref = moe_ref.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"], expert_map=emap)
    assert moe_ref.rel_err(out, ref) < TOL["bf16"]
    # int64 maps are converted; tokens with no local slot come out zero.
    out64 = moekit.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"], expert_map=emap.astype(np.int64))
    np.testing.assert_array_equal(out.astype(np.float32), out64.astype(np.float32))
    none_local = ~np.isin(c["topk_ids"], [1, 3, 4]).any(axis=1)
    assert (out[none_local].astype(np.float32) == 0).all()


@pytest.mark.parametrize("bias_dtype", [np.float32, BF16])
def test_biases_swiglu_oai(rng, bias_dtype):
    c = make_case(rng, M=10, E=4, k=2, K=64, N=32)
    w13, w2, _, _ = quantized(c, "bf16")
    b13 = (rng.standard_normal((4, 64)) * 0.5).astype(bias_dtype)
    b2 = (rng.standard_normal((4, 64)) * 0.5).astype(bias_dtype)
    out = moekit.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"], activation="swigluoai",
                               w1_bias=b13, w2_bias=b2, swiglu_alpha=1.5, swiglu_limit=3.0)
    ref = moe_ref.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"], act="swiglu_oai",
                                alpha=1.5, limit=3.0, b13=b13, b2=b2)
    assert moe_ref.rel_err(out, ref) < TOL["bf16"]


def test_apply_router_weight_on_input(rng):
    c = make_case(rng, M=9, k=1)
    w13, w2, _, _ = quantized(c, "bf16")
    out = moekit.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"],
                               apply_router_weight_on_input=True)
    ref = moe_ref.fused_experts(c["hidden"], w13, w2, c["topk_weights"], c["topk_ids"], on_input=True)
    assert moe_ref.rel_err(out, ref) < TOL["bf16"]


def test_nan_stays_in_its_row(rng):
    c = make_case(rng, M=6)
    w13, w2, _, _ = quantized(c, "bf16")
    h = c["hidden"].copy()
    h[2, 5] = np.nan
    out = moekit.fused_experts(h, w13, w2, c["topk_weights"], c["topk_ids"]).astype(np.float32)
    assert np.isnan(out[2]).any()
    assert np.isfinite(np.delete(out, 2, axis=0)).all()


# ------------------------------------------------------------------------------- fused_moe

@pytest.mark.parametrize("routing,kw", [
    ("softmax_topk", {}),
    ("softmax_topk", {"renormalize": False}),
    ("topk_softmax", {}),
    ("sigmoid_grouped_topk", {"num_groups": 2, "topk_groups": 1, "routed_scaling_factor": 2.5}),
])
def test_fused_moe_is_route_then_experts(rng, routing, kw):
    c = make_case(rng, M=17, E=6, k=2)
    w13, w2, _, _ = quantized(c, "bf16")
    out, tw, ti = moekit.fused_moe(c["hidden"], c["logits"], w13, w2, 2, routing=routing, return_routing=True, **kw)
    rkw = dict(kw)
    rw, rids = moekit.route(c["logits"], 2, method=routing, **rkw)
    np.testing.assert_array_equal(ti, rids)
    np.testing.assert_array_equal(tw, rw)
    ref = moekit.fused_experts(c["hidden"], w13, w2, rw, rids)
    np.testing.assert_array_equal(out.astype(np.float32), ref.astype(np.float32))
    plain = moekit.fused_moe(c["hidden"], c["logits"], w13, w2, 2, routing=routing, **kw)
    np.testing.assert_array_equal(plain.astype(np.float32), out.astype(np.float32))


def test_fused_moe_fp8_block(rng):
    c = make_case(rng, M=5, E=4, k=2, K=256, N=128)
    w13, w2, s13, s2 = quantized(c, "fp8_block128")
    out = moekit.fused_moe(c["hidden"], c["logits"], w13, w2, 2, w1_scale=s13, w2_scale=s2, block_shape=[128, 128])
    rw, rids = moe_ref.route(c["logits"], 2)
    ref = moe_ref.fused_experts(c["hidden"], w13, w2, rw, rids, scheme="fp8_block128", w13_scale=s13, w2_scale=s2)
    assert moe_ref.rel_err(out, ref) < TOL["fp8_block128"]


# ------------------------------------------------------------------------------ quantization

@pytest.mark.parametrize("scheme,scale_shape", [
    ("fp8_per_tensor", (3,)), ("fp8_per_channel", (3, 200)), ("fp8_block128", (3, 2, 3)),
])
def test_quantize_weights_roundtrip(rng, scheme, scale_shape):
    w = rng.standard_normal((3, 200, 300)).astype(np.float32)
    q, s = moekit.quantize_weights(w, scheme)
    assert q.shape == w.shape and q.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    assert s.shape == scale_shape and s.dtype == np.float32
    back = moekit.dequantize_weights(q, s, scheme)
    np.testing.assert_allclose(back, moe_ref.dequant_weights(q, s, scheme), rtol=1e-6)
    assert moe_ref.rel_err(back, w) < 0.05  # e4m3 keeps 3 mantissa bits
    # scale = absmax / 448 per group: the largest |q| of each expert is 448.
    assert np.allclose(np.abs(q.astype(np.float32)).reshape(3, -1).max(axis=1), 448.0)


def test_quantize_weights_bf16_and_fp16(rng):
    w = rng.standard_normal((2, 8, 16)).astype(np.float32)
    q, s = moekit.quantize_weights(w, "bf16")
    assert s is None and q.dtype == BF16
    np.testing.assert_array_equal(q.astype(np.float32), w.astype(BF16).astype(np.float32))
    q16, _ = moekit.quantize_weights(w, "bf16", dtype="float16")
    assert q16.dtype == np.float16


# ---------------------------------------------------------------------------- descriptions

def test_describe_and_presets(rng):
    c = make_case(rng, M=4, E=5, k=2, K=96, N=48)
    p = moekit.describe_fused_experts(c["hidden"], c["w13"].astype(BF16), c["w2"].astype(BF16), c["topk_weights"],
                                      c["topk_ids"])
    assert (p.num_tokens, p.num_experts, p.top_k, p.hidden_size, p.intermediate_size) == (4, 5, 2, 96, 48)
    assert "M=4" in str(p)
    assert p.flops() == 2 * 4 * 2 * (96 * 96 + 48 * 96)
    assert "qwen3-30b-a3b" in moekit.model_presets()
    pp = moekit.preset_problem("qwen3-30b-a3b", 16, tp=2)
    assert (pp.num_experts, pp.top_k, pp.intermediate_size) == (128, 8, 384)
    assert moekit.workspace_size(pp, "cpu") == 0
