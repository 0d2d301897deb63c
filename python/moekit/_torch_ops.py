"""torch.ops.moekit.{fused_experts, route, fused_moe, inv_rope_fp8_quant}: moekit as PyTorch custom ops.

Registered straight on a torch.library.Library: the schema (what torch.library.custom_op would
infer from the annotations below, with the pt2_compliant tag it adds), one kernel at
CompositeExplicitAutograd (every backend: the CPU reference and the CUDA kernels) and a fake
(meta) implementation, so the ops trace under torch.compile (one opaque node each) and run inside
CUDA-graph capture (no host sync, the workspace comes from the caching allocator on the current
stream). Not through custom_op's Python wrapper: that one adds, per eager call, a Python autograd
kernel (a pytree walk over the arguments to find one that requires grad), a redispatch and an
output-aliasing check, tens of microseconds that eager callers (Hugging Face transformers, per
layer) pay (issue 13, docs/perf.md "Host side of an eager call"); vLLM registers its ops the same
way for the same reason. Without an autograd kernel, autograd takes torch's fallback: a call runs
as before (its output requires grad when an input does); a backward through it gets no gradient
from moekit (torch warns), where custom_op's raised. moekit has no backward either way.
Imported by moekit when torch is importable; REGISTERED says whether registration succeeded.
"""

from typing import Optional, Tuple

import torch

from . import _ops, _rope_quant

REGISTERED = False
Tensor = torch.Tensor
_LIB = None  # the torch.library.Library holding the registrations (they live as long as it does)

# The schemas, as torch.library.custom_op inferred them from the kernels' annotations (int ->
# SymInt); the argument order is the positional order callers use.
SCHEMAS = {
    "fused_experts": (
        "(Tensor hidden_states, Tensor w1, Tensor w2, Tensor topk_weights, Tensor topk_ids, str activation, "
        "bool apply_router_weight_on_input, Tensor? expert_map, str scheme, Tensor? w1_scale, Tensor? w2_scale, "
        "Tensor? a1_scale, Tensor? a2_scale, Tensor? w1_bias, Tensor? w2_bias, float swiglu_alpha, "
        "float swiglu_limit, str? path) -> Tensor"),
    "route": (
        "(Tensor router_logits, SymInt top_k, str method, bool renormalize, SymInt num_groups, SymInt topk_groups, "
        "float routed_scaling_factor, Tensor? e_score_correction_bias) -> (Tensor, Tensor)"),
    "fused_moe": (
        "(Tensor hidden_states, Tensor router_logits, Tensor w1, Tensor w2, SymInt top_k, bool renormalize, "
        "str routing, SymInt num_groups, SymInt topk_groups, float routed_scaling_factor, "
        "Tensor? e_score_correction_bias, str activation, bool apply_router_weight_on_input, Tensor? expert_map, "
        "str scheme, Tensor? w1_scale, Tensor? w2_scale, Tensor? a1_scale, Tensor? a2_scale, Tensor? w1_bias, "
        "Tensor? w2_bias, float swiglu_alpha, float swiglu_limit, str? path) -> (Tensor, Tensor, Tensor)"),
    "inv_rope_fp8_quant": (
        "(Tensor o, Tensor positions, Tensor cos_sin_cache, SymInt num_groups, bool packed_ue8m0) -> (Tensor, Tensor)"),
}


def _define(lib, name: str, kernel, fake) -> None:
    lib.define(name + SCHEMAS[name], tags=(torch.Tag.pt2_compliant_tag,))
    lib.impl(name, kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"moekit::{name}", fake, lib=lib)


def _register() -> None:
    global REGISTERED, _LIB
    lib = torch.library.Library("moekit", "FRAGMENT")  # noqa: TOR901

    def fused_experts(
        hidden_states: Tensor,
        w1: Tensor,
        w2: Tensor,
        topk_weights: Tensor,
        topk_ids: Tensor,
        activation: str,
        apply_router_weight_on_input: bool,
        expert_map: Optional[Tensor],
        scheme: str,
        w1_scale: Optional[Tensor],
        w2_scale: Optional[Tensor],
        a1_scale: Optional[Tensor],
        a2_scale: Optional[Tensor],
        w1_bias: Optional[Tensor],
        w2_bias: Optional[Tensor],
        swiglu_alpha: float,
        swiglu_limit: float,
        path: Optional[str],
    ) -> Tensor:
        return _ops.fused_experts_impl(
            hidden_states, w1, w2, topk_weights, topk_ids, activation=activation,
            apply_router_weight_on_input=apply_router_weight_on_input, expert_map=expert_map, scheme=scheme,
            w1_scale=w1_scale, w2_scale=w2_scale, a1_scale=a1_scale, a2_scale=a2_scale, w1_bias=w1_bias,
            w2_bias=w2_bias, swiglu_alpha=swiglu_alpha, swiglu_limit=swiglu_limit, path=path)

    def fused_experts_fake(hidden_states, w1, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input,
                           expert_map, scheme, w1_scale, w2_scale, a1_scale, a2_scale, w1_bias, w2_bias, swiglu_alpha,
                           swiglu_limit, path):
        return torch.empty_like(hidden_states, memory_format=torch.contiguous_format)

    _define(lib, "fused_experts", fused_experts, fused_experts_fake)

    def route(
        router_logits: Tensor,
        top_k: int,
        method: str,
        renormalize: bool,
        num_groups: int,
        topk_groups: int,
        routed_scaling_factor: float,
        e_score_correction_bias: Optional[Tensor],
    ) -> Tuple[Tensor, Tensor]:
        return _ops.route_impl(router_logits, top_k, method, renormalize, num_groups, topk_groups,
                               routed_scaling_factor, e_score_correction_bias)

    def route_fake(router_logits, top_k, method, renormalize, num_groups, topk_groups, routed_scaling_factor,
                   e_score_correction_bias):
        M = router_logits.shape[0]
        return (router_logits.new_empty((M, top_k), dtype=torch.float32),
                router_logits.new_empty((M, top_k), dtype=torch.int32))

    _define(lib, "route", route, route_fake)

    def fused_moe(
        hidden_states: Tensor,
        router_logits: Tensor,
        w1: Tensor,
        w2: Tensor,
        top_k: int,
        renormalize: bool,
        routing: str,
        num_groups: int,
        topk_groups: int,
        routed_scaling_factor: float,
        e_score_correction_bias: Optional[Tensor],
        activation: str,
        apply_router_weight_on_input: bool,
        expert_map: Optional[Tensor],
        scheme: str,
        w1_scale: Optional[Tensor],
        w2_scale: Optional[Tensor],
        a1_scale: Optional[Tensor],
        a2_scale: Optional[Tensor],
        w1_bias: Optional[Tensor],
        w2_bias: Optional[Tensor],
        swiglu_alpha: float,
        swiglu_limit: float,
        path: Optional[str],
    ) -> Tuple[Tensor, Tensor, Tensor]:
        M = hidden_states.shape[0]
        tw = torch.empty((M, top_k), dtype=torch.float32, device=hidden_states.device)
        ti = torch.empty((M, top_k), dtype=torch.int32, device=hidden_states.device)
        out, tw, ti = _ops.fused_moe_impl(
            hidden_states, router_logits, w1, w2, top_k, renormalize=renormalize, routing=routing,
            num_groups=num_groups, topk_groups=topk_groups, routed_scaling_factor=routed_scaling_factor,
            e_score_correction_bias=e_score_correction_bias, activation=activation,
            apply_router_weight_on_input=apply_router_weight_on_input, expert_map=expert_map, scheme=scheme,
            w1_scale=w1_scale, w2_scale=w2_scale, a1_scale=a1_scale, a2_scale=a2_scale, w1_bias=w1_bias,
            w2_bias=w2_bias, swiglu_alpha=swiglu_alpha, swiglu_limit=swiglu_limit, topk_weights=tw,
            topk_ids=ti, path=path)
        return out, tw, ti

    def fused_moe_fake(hidden_states, router_logits, w1, w2, top_k, renormalize, routing, num_groups, topk_groups,
                       routed_scaling_factor, e_score_correction_bias, activation, apply_router_weight_on_input,
                       expert_map, scheme, w1_scale, w2_scale, a1_scale, a2_scale, w1_bias, w2_bias, swiglu_alpha,
                       swiglu_limit, path):
        M = hidden_states.shape[0]
        return (torch.empty_like(hidden_states, memory_format=torch.contiguous_format),
                hidden_states.new_empty((M, top_k), dtype=torch.float32),
                hidden_states.new_empty((M, top_k), dtype=torch.int32))

    _define(lib, "fused_moe", fused_moe, fused_moe_fake)

    def inv_rope_fp8_quant(
        o: Tensor,
        positions: Tensor,
        cos_sin_cache: Tensor,
        num_groups: int,
        packed_ue8m0: bool,
    ) -> Tuple[Tensor, Tensor]:
        return _rope_quant.inv_rope_fp8_quant_impl(o, positions, cos_sin_cache, num_groups, packed_ue8m0=packed_ue8m0)

    def inv_rope_fp8_quant_fake(o, positions, cos_sin_cache, num_groups, packed_ue8m0):
        q_shape, s_shape = _rope_quant.output_shapes(o.shape, num_groups, packed_ue8m0)
        return (o.new_empty(q_shape, dtype=torch.float8_e4m3fn),
                o.new_empty(s_shape, dtype=torch.int32 if packed_ue8m0 else torch.float32))

    _define(lib, "inv_rope_fp8_quant", inv_rope_fp8_quant, inv_rope_fp8_quant_fake)
    _LIB = lib
    REGISTERED = True


# torch >= 2.4 (torch.library.custom_op's release, whose register_fake this uses): older ones
# leave the ops out and moekit calls its implementations directly.
if hasattr(torch, "library") and hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_fake"):
    _register()
