"""moekit as the experts backend of Hugging Face transformers 5.x (moekit.integrations.transformers).

For each family (Mixtral, Qwen3-MoE, DeepSeek-V3, gpt-oss) a tiny random-weight model built from
its transformers config must give, with moekit, (1) experts-module outputs equal to the module's
own eager forward run in fp32, (2) the same logits within tolerance, (3) the same greedy
generation. The model-level tests need CUDA (GPU machine); the module-level ones also run on
the CPU reference when torch and transformers are installed.
"""

import copy

import pytest

from conftest import HAS_TORCH, HAS_TRANSFORMERS, cuda_ready

pytestmark = pytest.mark.transformers
if not (HAS_TORCH and HAS_TRANSFORMERS):
    pytest.skip("needs torch and transformers", allow_module_level=True)

import torch  # noqa: E402
import transformers  # noqa: E402

from moekit.integrations import transformers as mk_tf  # noqa: E402

CUDA_OK, CUDA_WHY = cuda_ready()
gpu = pytest.mark.skipif(not CUDA_OK, reason=f"needs CUDA + moekit's CUDA backend: {CUDA_WHY}")

COMMON = dict(vocab_size=64, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=256, initializer_range=0.1, tie_word_embeddings=False)


def _config(family):
    if family == "mixtral":
        return transformers.MixtralConfig(**COMMON, intermediate_size=96, num_local_experts=8,
                                          num_experts_per_tok=2, head_dim=32)
    if family == "qwen3_moe":
        return transformers.Qwen3MoeConfig(**COMMON, intermediate_size=192, moe_intermediate_size=96, num_experts=8,
                                           num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                                           mlp_only_layers=[], head_dim=32)
    if family == "deepseek_v3":
        cfg = dict(COMMON, num_key_value_heads=4)
        return transformers.DeepseekV3Config(**cfg, intermediate_size=192, moe_intermediate_size=64,
                                             n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=4,
                                             n_group=4, topk_group=2, routed_scaling_factor=2.5,
                                             norm_topk_prob=True, first_k_dense_replace=1, q_lora_rank=64,
                                             kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16,
                                             v_head_dim=32)
    if family == "gpt_oss":
        return transformers.GptOssConfig(**COMMON, intermediate_size=96, num_local_experts=8, num_experts_per_tok=2,
                                         head_dim=32, sliding_window=16,
                                         layer_types=["sliding_attention", "full_attention"])
    raise ValueError(family)


FAMILIES = ["mixtral", "qwen3_moe", "deepseek_v3", "gpt_oss"]
MODEL_CLASSES = {"mixtral": "MixtralForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
                 "deepseek_v3": "DeepseekV3ForCausalLM", "gpt_oss": "GptOssForCausalLM"}


def build(family, device, dtype=torch.bfloat16, seed=0):
    torch.manual_seed(seed)
    cfg = _config(family)
    model = getattr(transformers, MODEL_CLASSES[family])(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # Non-zero biases and correction terms, so every input of the experts path matters.
            if name.endswith("_bias") or name.endswith("e_score_correction_bias") or name.endswith("router.bias"):
                p.normal_(0.0, 0.1)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.normal_(0.0, 0.05)
    model = model.to(device=device, dtype=dtype).eval()
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = None
    return model


def set_eager(model):
    model.set_experts_implementation("eager")


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _module_case(m, M=37, seed=1):
    g = torch.Generator().manual_seed(seed)
    plan = mk_tf.plan_for(m)
    assert plan is not None, f"moekit cannot run {type(m).__name__}"
    dev = m.gate_up_proj.device
    h = torch.randn(M, plan.hidden_size, generator=g).to(dev, torch.bfloat16)
    logits = torch.randn(M, plan.num_experts, generator=g)
    k = 2
    w, ids = torch.topk(torch.softmax(logits, -1), k, dim=-1)
    return plan, h, ids.to(dev), w.to(dev)


def check_modules(model, family, tol):
    mods = mk_tf.experts_modules(model)
    assert mods, f"{family}: no experts module found"
    for name, m in mods:
        plan, h, ids, w = _module_case(m)
        if family == "gpt_oss":
            assert (plan.activation, plan.interleaved, plan.transposed, plan.has_bias) == ("swiglu_oai", True, True, True)
        else:
            assert (plan.activation, plan.interleaved, plan.transposed) == ("silu", False, False)
        m32 = copy.deepcopy(m).float()
        with torch.no_grad():
            ref = mk_tf._original_forward(m32)(m32, h.float(), ids, w)
            got = mk_tf.moekit_experts_forward(m, h, ids, w)
        assert got.dtype == h.dtype and got.shape == h.shape
        err = rel(got.float().cpu(), ref.cpu())
        assert err < tol, f"{family} {name}: rel err {err}"


@pytest.mark.parametrize("family", FAMILIES)
def test_experts_modules_match_eager_fp32_cpu(family):
    model = build(family, "cpu")
    check_modules(model, family, tol=1e-2)


@gpu
@pytest.mark.parametrize("family", FAMILIES)
def test_experts_modules_match_eager_fp32_cuda(family):
    model = build(family, "cuda")
    check_modules(model, family, tol=1e-2)


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def _greedy(model, ids, n):
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False)


def check_model(family, device):
    """moekit vs the model's own eager experts, both bf16, judged against the fp32 eager model:
    moekit's logits must be as close to fp32 as eager bf16's are, and greedy generation must be
    the same, or part only at a step where the fp32 logits of the two tokens differ by less than
    the bf16 model's own noise (a near-tie that the reference could have taken either way)."""
    model = build(family, device)
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(1, 64, (2, 12), generator=g).to(device)
    set_eager(model)
    ref_logits = _logits(model, prompt)
    ref_gen = _greedy(model, prompt, 10)
    model32 = copy.deepcopy(model).float()
    set_eager(model32)
    logits32 = _logits(model32, prompt)

    before = mk_tf.stats["moekit"]
    mk_tf.enable(model)
    got_logits = _logits(model, prompt)
    assert mk_tf.stats["moekit"] > before, "moekit's experts forward was not called"
    calls = mk_tf.stats["moekit"]
    got_gen = _greedy(model, prompt, 10)
    assert mk_tf.stats["moekit"] > calls

    err_eager = rel(ref_logits, logits32)
    err_moekit = rel(got_logits, logits32)
    assert err_moekit <= 1.5 * err_eager + 5e-3, (
        f"{family}: logits rel err vs fp32: moekit {err_moekit:.4g}, eager bf16 {err_eager:.4g}")
    if not torch.equal(got_gen, ref_gen):
        row, col = [int(i) for i in (got_gen != ref_gen).nonzero()[0]]
        prefix = ref_gen[row:row + 1, :col]
        step32 = _logits(model32, prefix)[0, -1]
        mk_tf.disable(model)
        step_bf16 = _logits(model, prefix)[0, -1]
        noise = float((step_bf16 - step32).abs().max())
        a, b = int(ref_gen[row, col]), int(got_gen[row, col])
        gap = abs(float(step32[a] - step32[b]))
        assert gap <= 2 * noise, (
            f"{family}: greedy generation differs at row {row} position {col} (eager {a}, moekit {b}): "
            f"fp32 logit gap {gap:.4g} exceeds twice the bf16 model's noise {noise:.4g}")
        mk_tf.enable(model)
    mk_tf.disable(model)
    torch.testing.assert_close(_logits(model, prompt), ref_logits, rtol=0, atol=0)
    return torch.equal(got_gen, ref_gen)


@pytest.mark.parametrize("family", FAMILIES)
def test_model_logits_and_greedy_generation_cpu(family):
    check_model(family, "cpu")


@gpu
@pytest.mark.parametrize("family", FAMILIES)
def test_model_logits_and_greedy_generation_cuda(family):
    check_model(family, "cuda")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=gpu)])
@pytest.mark.parametrize("scheme", ["fp8_per_tensor", "fp8_per_channel", "fp8_block128"])
def test_fp8_scheme_logits_close(scheme, device):
    model = build("qwen3_moe", device)
    prompt = torch.randint(1, 64, (1, 16), generator=torch.Generator().manual_seed(3)).to(device)
    set_eager(model)
    ref = _logits(model, prompt)
    mk_tf.enable(model, scheme=scheme)
    got = _logits(model, prompt)
    mk_tf.disable(model)
    # fp8 experts: compared at the model's output, so a looser bound than the kernel tolerance.
    err = rel(got, ref)
    assert err < 0.12, f"{scheme}: logits rel err {err}"  # ~0.05-0.06 on the CPU reference
    assert mk_tf.stats["moekit"] > 0


def test_enable_rejects_models_without_experts():
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2)
    model = transformers.LlamaForCausalLM(cfg)
    with pytest.raises(ValueError, match="no experts module"):
        mk_tf.enable(model)
