"""Hugging Face transformers 5.x: run a model's MoE experts through moekit.

    from moekit.integrations import transformers as mk_tf
    mk_tf.enable(model)              # Mixtral, Qwen3-MoE, DeepSeek-V3, gpt-oss, ... (bf16 experts)
    mk_tf.enable(model, scheme="fp8_per_channel")   # quantize the experts once, run fp8
    mk_tf.disable(model)             # back to the implementation the model had

transformers 5 routes every experts module decorated with @use_experts_implementation through
its experts registry (`transformers.integrations.moe.ExpertsInterface`), keyed by
`config._experts_implementation`. enable() registers moekit there under the name "moekit" and
selects it with `model.set_experts_implementation("moekit")`. The registered forward receives the
experts module, the hidden states [tokens, hidden] and the router's top_k_index / top_k_weights,
so the model keeps its own router; moekit runs GEMM1 + activation + GEMM2 + the weighted sum.

Weight layouts, mapped to moekit's w13 [E, 2N, K] (rows [0, N) gate, [N, 2N) up), w2 [E, K, N]:
- Mixtral, Qwen3-MoE, DeepSeek-V3 (and most others): gate_up_proj [E, 2N, K] with the gate rows
  first (`_apply_gate` chunks in two), down_proj [E, K, N]: used as they are, zero copy.
- gpt-oss (`is_transposed=True, has_bias=True`): gate_up_proj [E, K, 2N] with gate and up
  *interleaved* (gate = [..., ::2], up = [..., 1::2]), down_proj [E, N, K], biases [E, 2N] and
  [E, K], activation swiglu_oai (alpha, limit from the module): transposed and de-interleaved
  once into a cached copy (re-made if a parameter is modified in place or replaced).
The activation is not guessed from names: on first use the module's own `_apply_gate` (or
`act_fn`) is probed on random values and compared with each layout moekit can run (silu, gelu,
swiglu_oai; split or interleaved). A module that matches none, whose weights are not plain 3-D
tensors (quantized, offloaded to meta), or that needs gradients, runs its own eager forward.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Optional

import moekit

IMPLEMENTATION = "moekit"
# Calls that ran on moekit / fell back to the module's own forward (tests read these).
stats = {"moekit": 0, "fallback": 0}
_lock = threading.Lock()


@dataclass(frozen=True)
class ExpertsPlan:
    """How one experts module maps onto moekit (decided once per module)."""

    activation: str      # "silu", "gelu", "swiglu_oai"
    interleaved: bool    # gate/up alternate along 2N (gpt-oss) instead of gate block then up block
    transposed: bool     # weights stored [E, K, 2N] / [E, N, K]
    has_bias: bool
    alpha: float
    limit: float
    num_experts: int
    hidden_size: int
    intermediate_size: int


def _torch():
    import torch  # noqa: PLC0415

    return torch


def _original_forward(module: Any):
    """The module's own (eager) forward, beneath transformers' dispatch wrapper."""
    fwd = type(module).forward
    return getattr(fwd, "__wrapped__", fwd)


def _candidates(torch, x, alpha: float, limit: float):
    F = torch.nn.functional
    n = x.shape[-1] // 2

    def split(t):
        return t[..., :n], t[..., n:]

    def inter(t):
        return t[..., 0::2], t[..., 1::2]

    def oai(g, u):
        g = g.clamp(max=limit)
        u = u.clamp(min=-limit, max=limit)
        return g * torch.sigmoid(alpha * g) * (u + 1)

    out = []
    for interleaved, pick in ((False, split), (True, inter)):
        g, u = pick(x)
        out.append(("silu", interleaved, F.silu(g) * u))
        out.append(("gelu", interleaved, F.gelu(g) * u))
        out.append(("swiglu_oai", interleaved, oai(g, u)))
    return out


def plan_for(module: Any) -> Optional[ExpertsPlan]:
    """The moekit plan of an experts module, or None when moekit cannot run it (cached)."""
    cached = module.__dict__.get("_moekit_plan", False)
    if cached is not False:
        return cached
    plan = _make_plan(module)
    module.__dict__["_moekit_plan"] = plan
    return plan


def _make_plan(module: Any) -> Optional[ExpertsPlan]:
    torch = _torch()
    gp = getattr(module, "gate_up_proj", None)
    dp = getattr(module, "down_proj", None)
    if not (isinstance(gp, torch.Tensor) and isinstance(dp, torch.Tensor)) or gp.dim() != 3 or dp.dim() != 3:
        return None
    if gp.is_meta or dp.is_meta or not gp.is_floating_point() or gp.dtype == getattr(torch, "float8_e4m3fn", None):
        return None
    transposed = bool(getattr(module, "is_transposed", False))
    E = gp.shape[0]
    if transposed:
        K, two_n = gp.shape[1], gp.shape[2]
        ok = tuple(dp.shape) == (E, two_n // 2, K)
    else:
        two_n, K = gp.shape[1], gp.shape[2]
        ok = tuple(dp.shape) == (E, K, two_n // 2)
    if not ok or two_n % 2:
        return None
    has_bias = bool(getattr(module, "has_bias", False)) and getattr(module, "gate_up_proj_bias", None) is not None
    alpha = float(getattr(module, "alpha", 1.702))
    limit = float(getattr(module, "limit", getattr(module, "swiglu_limit", 7.0)))

    # Probe the module's own gate function on values that cross the swiglu clamp.
    gen = torch.Generator(device="cpu").manual_seed(1234)
    x = (torch.randn(7, two_n, generator=gen) * 4.0).to(gp.device)
    with torch.no_grad():
        if hasattr(module, "_apply_gate"):
            ref = module._apply_gate(x)
        elif hasattr(module, "act_fn"):
            ref = module.act_fn(x[..., : two_n // 2]) * x[..., two_n // 2:]
        else:
            return None
        ref = ref.float()
        for name, interleaved, got in _candidates(torch, x, alpha, limit):
            if got.shape == ref.shape and torch.allclose(got, ref, rtol=1e-4, atol=1e-5):
                return ExpertsPlan(name, interleaved, transposed, has_bias, alpha, limit, E, K, two_n // 2)
    return None


def _act_dtype(torch, dtype):
    return dtype if dtype in (torch.bfloat16, torch.float16) else torch.bfloat16


def prepared_weights(module: Any, plan: ExpertsPlan, scheme: str):
    """moekit-layout weights of `module` (cached on it; rebuilt when a parameter changes)."""
    torch = _torch()
    gp, dp = module.gate_up_proj, module.down_proj
    b13 = getattr(module, "gate_up_proj_bias", None) if plan.has_bias else None
    b2 = getattr(module, "down_proj_bias", None) if plan.has_bias else None
    key = tuple((t.data_ptr(), t._version, t.dtype, t.device) if t is not None else None
                for t in (gp, dp, b13, b2)) + (scheme,)
    cached = module.__dict__.get("_moekit_weights")
    if cached is not None and cached[0] == key:
        return cached[1]
    act = _act_dtype(torch, gp.dtype)
    with torch.no_grad():
        w13 = gp.detach()
        w2 = dp.detach()
        if plan.transposed:
            w13 = w13.transpose(1, 2)
            w2 = w2.transpose(1, 2)
        if plan.interleaved:
            w13 = torch.cat([w13[:, 0::2], w13[:, 1::2]], dim=1)
        w13 = w13.to(act).contiguous()
        w2 = w2.to(act).contiguous()
        if b13 is not None:
            b13 = b13.detach()
            if plan.interleaved:
                b13 = torch.cat([b13[:, 0::2], b13[:, 1::2]], dim=1)
            b13 = b13.to(act if b13.dtype != torch.float32 else torch.float32).contiguous()
        if b2 is not None:
            b2 = b2.detach().to(act if b2.dtype != torch.float32 else torch.float32).contiguous()
        if b13 is not None and b2 is not None and b13.dtype != b2.dtype:
            b13, b2 = b13.float(), b2.float()
        w13_scale = w2_scale = None
        if scheme != "bf16":
            w13, w13_scale = moekit.quantize_weights(w13, scheme)
            w2, w2_scale = moekit.quantize_weights(w2, scheme)
    prep = {"w13": w13, "w2": w2, "b13": b13, "b2": b2, "w13_scale": w13_scale, "w2_scale": w2_scale,
            "act_dtype": act, "scheme": scheme}
    module.__dict__["_moekit_weights"] = (key, prep)
    return prep


def _count(what: str) -> None:
    with _lock:
        stats[what] += 1


def moekit_experts_forward(self, hidden_states, top_k_index, top_k_weights, *args, **kwargs):
    """The experts forward registered in transformers' ExpertsInterface under "moekit"."""
    torch = _torch()
    plan = plan_for(self)
    needs_grad = torch.is_grad_enabled() and (
        hidden_states.requires_grad or any(p.requires_grad for p in self.parameters()))
    if plan is None or needs_grad or hidden_states.device.type not in ("cuda", "cpu"):
        _count("fallback")
        return _original_forward(self)(self, hidden_states, top_k_index, top_k_weights, *args, **kwargs)
    scheme = self.__dict__.get("_moekit_scheme", "bf16")
    prep = prepared_weights(self, plan, scheme)
    shape = hidden_states.shape
    x = hidden_states.reshape(-1, plan.hidden_size)
    if x.dtype != prep["act_dtype"]:
        x = x.to(prep["act_dtype"])
    ids = top_k_index.reshape(x.shape[0], -1)
    w = top_k_weights.reshape(x.shape[0], -1)
    if w.shape[1] != ids.shape[1]:
        # DeepSeek-V2-style routers hand over dense [tokens, E] weights.
        w = w.gather(1, ids.long())
    out = moekit.fused_experts(
        x.contiguous(), prep["w13"], prep["w2"], w.float().contiguous(), ids.contiguous(),
        activation=plan.activation, scheme=prep["scheme"], w1_scale=prep["w13_scale"],
        w2_scale=prep["w2_scale"], w1_bias=prep["b13"], w2_bias=prep["b2"], swiglu_alpha=plan.alpha,
        swiglu_limit=plan.limit)
    _count("moekit")
    return out.to(hidden_states.dtype).reshape(shape)


def register(name: str = IMPLEMENTATION) -> None:
    """Register moekit in transformers' experts registry under `name` (idempotent)."""
    from transformers.integrations import moe as tf_moe  # noqa: PLC0415

    tf_moe.ExpertsInterface.register(name, moekit_experts_forward)
    try:
        tf_moe.ALL_EXPERTS_FUNCTIONS[name] = moekit_experts_forward
    except Exception:  # noqa: BLE001 (older registries without item assignment)
        pass


def experts_modules(model: Any):
    """(name, module) of every experts module transformers dispatches through its registry."""
    out = []
    for name, m in model.named_modules():
        fwd = getattr(type(m), "forward", None)
        if hasattr(m, "gate_up_proj") and hasattr(m, "down_proj") and getattr(fwd, "__wrapped__", None) is not None:
            out.append((name, m))
    return out


def _set_config_impl(config: Any, name: str) -> None:
    if hasattr(type(config), "_experts_implementation") and hasattr(config, "_experts_implementation_internal"):
        config._experts_implementation_internal = name
    else:
        config._experts_implementation = name


def _current_impl(model: Any):
    if hasattr(model, "get_experts_implementation"):
        return model.get_experts_implementation()
    return getattr(model.config, "_experts_implementation", None)


def enable(model: Any, *, scheme: str = "bf16", name: str = IMPLEMENTATION, strict: bool = True) -> Any:
    """Run `model`'s experts through moekit. Returns the model.

    scheme: "bf16" runs the experts in the model's dtype (bf16/fp16; fp32 models run bf16 experts);
    an fp8 scheme quantizes each expert's weights once (cached) and runs moekit's fp8 path.
    strict: raise NotImplementedError when an experts module has a layout or activation moekit
    cannot run (else such modules keep running their own forward).
    """
    scheme = moekit._C.scheme_name(moekit._C.parse_scheme(scheme))  # ValueError naming the schemes
    mods = experts_modules(model)
    if not mods:
        raise ValueError(
            f"{type(model).__name__} has no experts module dispatched through transformers' experts "
            "registry (@use_experts_implementation): nothing for moekit to run")
    for mod_name, m in mods:
        plan = plan_for(m)
        if plan is None and strict:
            raise NotImplementedError(
                f"{mod_name} ({type(m).__name__}): moekit cannot run this experts module (weights "
                f"gate_up_proj {tuple(m.gate_up_proj.shape)} {m.gate_up_proj.dtype}, down_proj "
                f"{tuple(m.down_proj.shape)}; activations tried: silu, gelu, swiglu_oai); pass strict=False "
                "to keep its own forward")
        m.__dict__["_moekit_scheme"] = scheme
    register(name)
    if "_moekit_previous" not in model.__dict__:
        model.__dict__["_moekit_previous"] = _current_impl(model)
    try:
        model.set_experts_implementation(name)
    except (ValueError, KeyError, AttributeError):
        pass  # an older transformers that validates names against a fixed list: set it directly
    for _, m in mods:
        if getattr(m.config, "_experts_implementation", None) != name:
            _set_config_impl(m.config, name)
    return model


def disable(model: Any) -> Any:
    """Restore the experts implementation the model had before enable()."""
    previous = model.__dict__.pop("_moekit_previous", None)
    if previous is None:
        previous = "eager"
    try:
        model.set_experts_implementation(previous)
    except (ValueError, KeyError, AttributeError):
        pass
    prev_main = previous.get("", "eager") if isinstance(previous, dict) else previous
    for _, m in experts_modules(model):
        if getattr(m.config, "_experts_implementation", None) == IMPLEMENTATION:
            _set_config_impl(m.config, prev_main)
        m.__dict__.pop("_moekit_weights", None)
    return model
