"""Model presets of the serving benchmark: real architectures at their published sizes, built
with seeded random weights directly on the GPU (nothing is downloaded).

The config values are those of the models' published config.json files on the Hugging Face Hub
(docs/serving.md lists them with their source). `layers` cuts the depth (every layer keeps its
real width); the tiny presets are for smoke tests.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Dict, Optional

# config.json of Qwen/Qwen3-30B-A3B (transformers' Qwen3MoeConfig; head_dim is not a field of
# the dataclass but the model reads it with getattr, so it is passed as an extra attribute).
QWEN3_30B_A3B = dict(
    vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=48,
    num_attention_heads=32, num_key_value_heads=4, head_dim=128, hidden_act="silu",
    max_position_embeddings=40960, initializer_range=0.02, rms_norm_eps=1e-6, tie_word_embeddings=False,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, attention_bias=False,
    use_sliding_window=False, sliding_window=None, decoder_sparse_step=1, moe_intermediate_size=768,
    num_experts_per_tok=8, num_experts=128, norm_topk_prob=True, mlp_only_layers=[],
    bos_token_id=151643, eos_token_id=151645,
)

# config.json of mistralai/Mixtral-8x7B-v0.1 (transformers' MixtralConfig).
MIXTRAL_8X7B = dict(
    vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=8, hidden_act="silu", max_position_embeddings=32768,
    initializer_range=0.02, rms_norm_eps=1e-5, tie_word_embeddings=False,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, sliding_window=None,
    num_experts_per_tok=2, num_local_experts=8, bos_token_id=1, eos_token_id=2,
)

PRESETS: Dict[str, Dict[str, Any]] = {
    "qwen3-30b-a3b": dict(
        config_class="Qwen3MoeConfig", model_class="Qwen3MoeForCausalLM", config=QWEN3_30B_A3B,
        default_layers=48, source="https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json"),
    # 16 of 32 layers by default: the full model is 93 GB in bf16, and moekit's fp8 run keeps an
    # fp8 copy of the experts beside the bf16 weights (+45 GB at 32 layers), which leaves no room
    # for the KV cache on a 141 GB H200. --layers 32 runs the whole depth (bf16 implementations).
    "mixtral-8x7b": dict(
        config_class="MixtralConfig", model_class="MixtralForCausalLM", config=MIXTRAL_8X7B,
        default_layers=16, source="https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json"),
    # Smoke-test models: the real routing (Qwen3-MoE: 8 of 16 experts, Mixtral: 2 of 8) at toy widths.
    "tiny-qwen3-moe": dict(
        config_class="Qwen3MoeConfig", model_class="Qwen3MoeForCausalLM",
        config=dict(QWEN3_30B_A3B, vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=64, moe_intermediate_size=128,
                    num_experts=16, num_experts_per_tok=8, max_position_embeddings=8192,
                    bos_token_id=1, eos_token_id=2),
        default_layers=2, source="tiny: Qwen3-30B-A3B's structure at toy sizes"),
    "tiny-mixtral": dict(
        config_class="MixtralConfig", model_class="MixtralForCausalLM",
        config=dict(MIXTRAL_8X7B, vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192),
        default_layers=2, source="tiny: Mixtral-8x7B's structure at toy sizes"),
}


def preset_config_values(name: str, layers: Optional[int] = None) -> Dict[str, Any]:
    """The config values (a copy) of preset `name`, with num_hidden_layers = layers (or the preset's default)."""
    if name not in PRESETS:
        raise ValueError(f"model {name!r}: expected one of {sorted(PRESETS)}")
    p = PRESETS[name]
    values = copy.deepcopy(p["config"])
    n = p["default_layers"] if layers is None else int(layers)
    if n < 1:
        raise ValueError(f"layers={n} must be >= 1")
    values["num_hidden_layers"] = n
    return values


def param_count(values: Dict[str, Any]) -> int:
    """Parameters of a preset's model (embeddings, attention, router, experts, norms, lm head)."""
    h, v, L = values["hidden_size"], values["vocab_size"], values["num_hidden_layers"]
    nh, nkv = values["num_attention_heads"], values["num_key_value_heads"]
    hd = values.get("head_dim") or h // nh
    E = values.get("num_experts", values.get("num_local_experts"))
    inter = values.get("moe_intermediate_size") if "num_experts" in values else values["intermediate_size"]
    attn = h * nh * hd * 2 + h * nkv * hd * 2 + (2 * hd if "num_experts" in values else 0)
    moe = h * E + E * 3 * h * inter
    return 2 * v * h + L * (attn + moe + 2 * h) + h


def build_model(name: str, layers: Optional[int] = None, seed: int = 0, device: str = "cuda",
                dtype: str = "bfloat16", attn_implementation: str = "sdpa"):
    """Build preset `name` with seeded random weights on `device`, in `dtype`, for inference.

    The modules are constructed under torch.device(device) and the dtype, so every weight is
    allocated and initialized (transformers' own _init_weights: normal(0, initializer_range),
    norms at one) on the GPU in bf16: a 30B model takes seconds, not the minutes of a CPU init.
    """
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    values = preset_config_values(name, layers)
    p = PRESETS[name]
    cfg = getattr(transformers, p["config_class"])(**values)
    for key in ("head_dim",):
        if key in values and getattr(cfg, key, None) != values[key]:
            setattr(cfg, key, values[key])
    torch_dtype = getattr(torch, dtype)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    t0 = time.perf_counter()
    model_cls = getattr(transformers, p["model_class"])
    with torch.device(device):
        model = model_cls._from_config(cfg, dtype=torch_dtype, attn_implementation=attn_implementation)
    model = model.eval()
    model.requires_grad_(False)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    build_s = time.perf_counter() - t0
    gc = model.generation_config
    gc.pad_token_id = 0
    gc.eos_token_id = None
    gc.do_sample = False
    info = {
        "preset": name,
        "model_class": p["model_class"],
        "config_source": p["source"],
        "config": {k: v for k, v in values.items()},
        "num_hidden_layers": values["num_hidden_layers"],
        "full_num_hidden_layers": p["config"]["num_hidden_layers"],
        "params": sum(t.numel() for t in model.parameters()),
        "params_expected": param_count(values),
        "dtype": dtype,
        "seed": seed,
        "init": f"transformers _init_weights on {device}: normal(0, {values['initializer_range']}), norms 1",
        "build_s": build_s,
    }
    return model, info
