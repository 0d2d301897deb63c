"""Errors cross into Python as ValueError (kInvalidArgument), NotImplementedError (kNotSupported)
or RuntimeError, carrying moekit's message that names the argument and the values."""

import numpy as np
import pytest

import moekit
from conftest import BF16, make_case


@pytest.fixture
def case(rng):
    c = make_case(rng, M=4, E=4, k=2, K=64, N=32)
    c["w13"] = c["w13"].astype(BF16)
    c["w2"] = c["w2"].astype(BF16)
    return c


def call(c, **over):
    a = dict(hidden_states=c["hidden"], w1=c["w13"], w2=c["w2"], topk_weights=c["topk_weights"],
             topk_ids=c["topk_ids"])
    a.update(over)
    return moekit.fused_experts(a.pop("hidden_states"), a.pop("w1"), a.pop("w2"), a.pop("topk_weights"),
                                a.pop("topk_ids"), **a)


def test_wrong_weight_shape_names_w13_and_values(case):
    bad = np.zeros((4, 64, 48), BF16)  # K=48, hidden has K=64
    with pytest.raises(ValueError, match=r"w13 has shape \[4, 64, 48\], expected \[E=4, 2N=64, K=64\] \(K from hidden \[4, 64\]\)"):
        call(case, w1=bad)


def test_non_contiguous_is_named(case):
    with pytest.raises(ValueError, match="w2 is non-contiguous"):
        call(case, w2=np.asfortranarray(case["w2"]))


def test_topk_larger_than_experts():
    with pytest.raises(ValueError, match="top_k=9"):
        moekit.route(np.zeros((3, 8), np.float32), 9)


def test_bad_dtypes(case):
    with pytest.raises(ValueError, match="topk_ids has dtype"):
        call(case, topk_ids=case["topk_ids"].astype(np.float32))
    with pytest.raises(ValueError, match="hidden_states has dtype complex64"):
        call(case, hidden_states=case["hidden"].astype(np.complex64))
    with pytest.raises(ValueError, match="w13 has dtype fp32, expected bf16"):
        call(case, w1=case["w13"].astype(np.float32))


def test_not_an_array(case):
    with pytest.raises(TypeError, match="w1 must be a numpy array or a torch tensor"):
        call(case, w1=case["w13"].tolist())


def test_unknown_names_list_the_accepted_ones(case):
    with pytest.raises(ValueError, match="fp8_block128"):
        call(case, scheme="int4")
    with pytest.raises(ValueError, match="silu"):
        call(case, activation="relu2")
    with pytest.raises(ValueError, match="softmax_topk"):
        moekit.route(np.zeros((3, 8), np.float32), 2, method="noaux_tc")


def test_fp8_scheme_needs_scales(case):
    q13, _ = moekit.quantize_weights(case["w13"].astype(np.float32), "fp8_per_tensor")
    q2, s2 = moekit.quantize_weights(case["w2"].astype(np.float32), "fp8_per_tensor")
    with pytest.raises(ValueError, match="w13_scale is required"):
        call(case, w1=q13, w2=q2, scheme="fp8_per_tensor", w2_scale=s2)


def test_static_scale_only_for_per_tensor(case):
    q13, s13 = moekit.quantize_weights(case["w13"].astype(np.float32), "fp8_per_channel")
    q2, s2 = moekit.quantize_weights(case["w2"].astype(np.float32), "fp8_per_channel")
    with pytest.raises(ValueError, match="a13_scale is given but scheme fp8_per_channel"):
        call(case, w1=q13, w2=q2, scheme="fp8_per_channel", w1_scale=s13, w2_scale=s2,
             a1_scale=np.ones(1, np.float32))


def test_block_shape_other_than_128_is_not_supported(case):
    with pytest.raises(NotImplementedError, match=r"block_shape=\[64, 64\]"):
        call(case, block_shape=[64, 64])


def test_cuda_without_backend_is_not_supported():
    ok, why = moekit.cuda_available()
    if "no CUDA backend" not in why:
        pytest.skip("this build has a CUDA backend")
    p = moekit.preset_problem("mixtral-8x7b", 4)
    with pytest.raises(NotImplementedError, match="no CUDA backend"):
        moekit.workspace_size(p, "cuda")


def test_backend_mismatch(case):
    with pytest.raises(ValueError, match="backend cuda needs CUDA tensors"):
        call(case, backend="cuda")


def test_unknown_preset():
    with pytest.raises(ValueError, match="mixtral-8x7b"):
        moekit.preset_problem("llama-moe", 4)


def test_error_message_is_the_cpp_one(case):
    # The message is moekit's, unchanged: it starts with the argument's name.
    with pytest.raises(ValueError) as info:
        call(case, topk_weights=np.ascontiguousarray(case["topk_weights"][:, :1]))
    assert str(info.value).startswith("topk_weights has shape [4, 1]")
