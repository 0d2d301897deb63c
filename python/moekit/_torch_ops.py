"""torch.ops.moekit.{fused_experts, route, fused_moe, inv_rope_fp8_quant}: moekit as PyTorch custom ops.

Registered through torch.library.custom_op with fake (meta) implementations, so the ops trace
under torch.compile (one opaque node each) and run inside CUDA-graph capture (no host sync, the
workspace comes from the caching allocator on the current stream). Imported by moekit when torch
is importable; REGISTERED says whether registration succeeded. (No `from __future__ import
annotations` here: custom_op reads the annotations as types.)
"""

from typing import Optional, Tuple

import torch

from . import _ops, _rope_quant

REGISTERED = False
Tensor = torch.Tensor


def _register() -> None:
    global REGISTERED
    lib = torch.library

    @lib.custom_op("moekit::fused_experts", mutates_args=())
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

    @fused_experts.register_fake
    def _(hidden_states, w1, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input, expert_map,
          scheme, w1_scale, w2_scale, a1_scale, a2_scale, w1_bias, w2_bias, swiglu_alpha, swiglu_limit, path):
        return torch.empty_like(hidden_states, memory_format=torch.contiguous_format)

    @lib.custom_op("moekit::route", mutates_args=())
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

    @route.register_fake
    def _(router_logits, top_k, method, renormalize, num_groups, topk_groups, routed_scaling_factor,
          e_score_correction_bias):
        M = router_logits.shape[0]
        return (router_logits.new_empty((M, top_k), dtype=torch.float32),
                router_logits.new_empty((M, top_k), dtype=torch.int32))

    @lib.custom_op("moekit::fused_moe", mutates_args=())
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

    @fused_moe.register_fake
    def _(hidden_states, router_logits, w1, w2, top_k, renormalize, routing, num_groups, topk_groups,
          routed_scaling_factor, e_score_correction_bias, activation, apply_router_weight_on_input, expert_map,
          scheme, w1_scale, w2_scale, a1_scale, a2_scale, w1_bias, w2_bias, swiglu_alpha, swiglu_limit, path):
        M = hidden_states.shape[0]
        return (torch.empty_like(hidden_states, memory_format=torch.contiguous_format),
                hidden_states.new_empty((M, top_k), dtype=torch.float32),
                hidden_states.new_empty((M, top_k), dtype=torch.int32))

    @lib.custom_op("moekit::inv_rope_fp8_quant", mutates_args=())
    def inv_rope_fp8_quant(
        o: Tensor,
        positions: Tensor,
        cos_sin_cache: Tensor,
        num_groups: int,
        packed_ue8m0: bool,
    ) -> Tuple[Tensor, Tensor]:
        return _rope_quant.inv_rope_fp8_quant_impl(o, positions, cos_sin_cache, num_groups, packed_ue8m0=packed_ue8m0)

    @inv_rope_fp8_quant.register_fake
    def _(o, positions, cos_sin_cache, num_groups, packed_ue8m0):
        q_shape, s_shape = _rope_quant.output_shapes(o.shape, num_groups, packed_ue8m0)
        return (o.new_empty(q_shape, dtype=torch.float8_e4m3fn),
                o.new_empty(s_shape, dtype=torch.int32 if packed_ue8m0 else torch.float32))

    REGISTERED = True


if hasattr(torch, "library") and hasattr(torch.library, "custom_op"):
    _register()
