"""moekit.fused_experts keeps vLLM's contract on real calls: the signature of vLLM v0.10.2's
fused_experts (positional order, defaults), positional calls that mean what they mean in vLLM, and
vLLM's int8 / int4 / mxfp4 flags and zero points refused with NotImplementedError naming them.
numpy arrays on the CPU reference: runs on CI without torch; test_torch.py covers CUDA tensors."""

import inspect

import numpy as np
import pytest

import moekit
from conftest import BF16, make_case

# vLLM v0.10.2, vllm/model_executor/layers/fused_moe/fused_moe.py: def fused_experts(...) -> Tensor.
VLLM_V0_10_2_FUSED_EXPERTS = [
    ("hidden_states", inspect.Parameter.empty), ("w1", inspect.Parameter.empty), ("w2", inspect.Parameter.empty),
    ("topk_weights", inspect.Parameter.empty), ("topk_ids", inspect.Parameter.empty),
    ("inplace", False), ("activation", "silu"), ("apply_router_weight_on_input", False),
    ("use_fp8_w8a8", False), ("use_int8_w8a8", False), ("use_int8_w8a16", False), ("use_int4_w4a16", False),
    ("use_mxfp4_w4a4", False), ("per_channel_quant", False), ("global_num_experts", -1), ("expert_map", None),
    ("w1_scale", None), ("w2_scale", None), ("w1_zp", None), ("w2_zp", None), ("a1_scale", None),
    ("a2_scale", None), ("block_shape", None), ("allow_deep_gemm", False),
    ("allow_cutlass_block_scaled_grouped_gemm", False), ("w1_bias", None), ("w2_bias", None),
]
POSITION = {name: i for i, (name, _) in enumerate(VLLM_V0_10_2_FUSED_EXPERTS)}


def vllm_positional(**given):
    """The positional argument list of a vLLM call: every parameter in order, defaults filled."""
    return [given.get(name, default) for name, default in VLLM_V0_10_2_FUSED_EXPERTS]


@pytest.fixture
def case(rng):
    c = make_case(rng, M=6, E=4, k=2, K=64, N=32)
    c["w13"], c["w2"] = c["w13"].astype(BF16), c["w2"].astype(BF16)
    return c


def test_signature_is_vllms_in_order_with_its_defaults():
    assert moekit._ops.VLLM_FUSED_EXPERTS_CONTRACT == "vLLM v0.10.2"
    params = list(inspect.signature(moekit.fused_experts).parameters.values())
    positional = [p for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert [(p.name, p.default) for p in positional] == VLLM_V0_10_2_FUSED_EXPERTS
    # moekit's own arguments come after, keyword-only: they can never take a vLLM position.
    extra = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert extra == ["scheme", "swiglu_alpha", "swiglu_limit", "out", "backend", "path", "num_threads", "workspace",
                     "debug_faults"]
    assert "vLLM v0.10.2" in moekit.fused_experts.__doc__


def test_a_positional_vllm_call_means_what_it_means_in_vllm(case):
    c = case
    args = dict(hidden_states=c["hidden"], w1=c["w13"], w2=c["w2"], topk_weights=c["topk_weights"],
                topk_ids=c["topk_ids"])
    ref = moekit.fused_experts(**args)
    out = moekit.fused_experts(*vllm_positional(**args))
    np.testing.assert_array_equal(out.view(np.uint16), ref.view(np.uint16))
    # activation (position 6) and apply_router_weight_on_input (7), positionally.
    gelu = moekit.fused_experts(*vllm_positional(**args, activation="gelu"))
    np.testing.assert_array_equal(gelu.view(np.uint16), moekit.fused_experts(**args, activation="gelu").view(np.uint16))
    assert not np.array_equal(gelu.view(np.uint16), ref.view(np.uint16))
    on_input = moekit.fused_experts(*vllm_positional(**args, apply_router_weight_on_input=True))
    np.testing.assert_array_equal(
        on_input.view(np.uint16), moekit.fused_experts(**args, apply_router_weight_on_input=True).view(np.uint16))
    # The two "allow another backend" switches change nothing.
    allowed = moekit.fused_experts(*vllm_positional(**args, allow_deep_gemm=True,
                                                    allow_cutlass_block_scaled_grouped_gemm=True))
    np.testing.assert_array_equal(allowed.view(np.uint16), ref.view(np.uint16))


def test_inplace_is_the_sixth_argument(case):
    c = case
    ref = moekit.fused_experts(c["hidden"], c["w13"], c["w2"], c["topk_weights"], c["topk_ids"])
    hidden = c["hidden"].copy()
    r = moekit.fused_experts(hidden, c["w13"], c["w2"], c["topk_weights"], c["topk_ids"], True)
    assert r is hidden
    np.testing.assert_array_equal(hidden.view(np.uint16), ref.view(np.uint16))


def test_use_fp8_w8a8_and_scales_take_their_positions(case):
    c = case
    q13, s13 = moekit.quantize_weights(c["w13"].astype(np.float32), "fp8_per_tensor")
    q2, s2 = moekit.quantize_weights(c["w2"].astype(np.float32), "fp8_per_tensor")
    kw = moekit.fused_experts(c["hidden"], q13, q2, c["topk_weights"], c["topk_ids"], use_fp8_w8a8=True,
                              w1_scale=s13, w2_scale=s2)
    pos = moekit.fused_experts(*vllm_positional(hidden_states=c["hidden"], w1=q13, w2=q2,
                                                topk_weights=c["topk_weights"], topk_ids=c["topk_ids"],
                                                use_fp8_w8a8=True, w1_scale=s13, w2_scale=s2))
    np.testing.assert_array_equal(pos.view(np.uint16), kw.view(np.uint16))


@pytest.mark.parametrize("flag", ["use_int8_w8a8", "use_int8_w8a16", "use_int4_w4a16", "use_mxfp4_w4a4"])
def test_unsupported_quantization_flags_are_refused_by_name(case, flag):
    c = case
    base = dict(hidden_states=c["hidden"], w1=c["w13"], w2=c["w2"], topk_weights=c["topk_weights"],
                topk_ids=c["topk_ids"])
    with pytest.raises(NotImplementedError, match=flag):
        moekit.fused_experts(**base, **{flag: True})
    with pytest.raises(NotImplementedError, match=flag):  # positionally, at vLLM's position
        moekit.fused_experts(*vllm_positional(**base, **{flag: True}))
    # Set to False (vLLM's default, what vLLM passes for bf16) the flag is accepted.
    moekit.fused_experts(**base, **{flag: False})


@pytest.mark.parametrize("zp", ["w1_zp", "w2_zp"])
def test_zero_points_are_refused_by_name(case, zp):
    c = case
    base = dict(hidden_states=c["hidden"], w1=c["w13"], w2=c["w2"], topk_weights=c["topk_weights"],
                topk_ids=c["topk_ids"])
    zeros = np.zeros((4, 8), dtype=np.int32)
    with pytest.raises(NotImplementedError, match=zp):
        moekit.fused_experts(**base, **{zp: zeros})
    with pytest.raises(NotImplementedError, match=zp):
        moekit.fused_experts(*vllm_positional(**base, **{zp: zeros}))
    assert POSITION[zp] in (18, 19)


def test_global_num_experts_must_match_expert_map(case):
    c = case
    expert_map = np.arange(4, dtype=np.int32)
    base = dict(hidden_states=c["hidden"], w1=c["w13"], w2=c["w2"], topk_weights=c["topk_weights"],
                topk_ids=c["topk_ids"])
    ok = moekit.fused_experts(**base, global_num_experts=4, expert_map=expert_map)
    np.testing.assert_array_equal(ok.view(np.uint16), moekit.fused_experts(**base).view(np.uint16))
    with pytest.raises(ValueError, match="global_num_experts"):
        moekit.fused_experts(**base, global_num_experts=8, expert_map=expert_map)
