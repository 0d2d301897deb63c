"""moekit: Mixture-of-Experts layers on Hopper GPUs, with an exact CPU reference.

    import moekit
    out = moekit.fused_experts(hidden, w13, w2, topk_weights, topk_ids)        # vLLM's layouts
    topk_weights, topk_ids = moekit.route(router_logits, top_k=8)
    out = moekit.fused_moe(hidden, router_logits, w13, w2, top_k=8)
    o_fp8, o_scale = moekit.inv_rope_fp8_quant(o, positions, cos_sin_cache, num_groups=2)  # DeepSeek-V4
    moekit.preload()                       # load the CUDA kernels now, not at the first call
    q, scale = moekit.quantize_weights(w13, "fp8_per_channel")

Works on numpy arrays (ml_dtypes for bf16 / fp8; run on the CPU reference) and torch tensors
(CPU: the reference; CUDA: the Hopper kernels on the current stream). With torch importable,
the operations are also torch.ops.moekit.{fused_experts, route, fused_moe}. Errors raise
ValueError (bad argument), NotImplementedError (not supported by this build or backend) or
RuntimeError (the rest), carrying moekit's message. Set MOEKIT_NO_TORCH=1 to skip the torch ops.
A bad expert id (topk_ids outside [0, E_global), expert_map outside [0, E); -1 is valid) is
dropped and recorded without a sync: moekit.check_faults() raises it (ValueError) where you
synchronize anyway; MOEKIT_DEBUG_FAULTS=1 (or debug_faults=True) raises it from the call.

Tensor and expert parallelism over a torch.distributed process group (NCCL or gloo):
`import moekit.distributed` (shard_tp, shard_ep, tp_fused_moe, ep_fused_moe; docs/parallel.md).
"""

import importlib.util as _importlib_util
import os as _os

_WITH_TORCH = _os.environ.get("MOEKIT_NO_TORCH", "") in ("", "0") and _importlib_util.find_spec("torch") is not None
if _WITH_TORCH:
    # torch first: the CUDA build of _C needs libcudart.so.13 and (with NCCL) libnccl.so.2, which
    # torch also loads, from its own nvidia-* wheels. Whichever is loaded first serves both, and
    # torch checks for symbols of its own, newer NCCL (`import moekit` then `import torch` failed
    # with "libtorch_cuda.so: undefined symbol: ncclCommResume" when _C pulled in the toolkit's).
    import torch as _torch  # noqa: F401

from . import _C
from ._ops import (
    SCHEMES,
    check_faults,
    cuda_available,
    describe_fused_experts,
    fused_experts,
    fused_moe,
    model_presets,
    preload,
    preset_problem,
    resolve_scheme,
    route,
    take_fault,
    workspace_size,
)
from ._quant import dequantize_weights, quantize_weights
from ._rope_quant import inv_rope_fp8_quant

__version__ = _C.version()
Problem = _C.Problem

__all__ = [
    "SCHEMES",
    "Problem",
    "check_faults",
    "cuda_available",
    "dequantize_weights",
    "describe_fused_experts",
    "fused_experts",
    "fused_moe",
    "inv_rope_fp8_quant",
    "model_presets",
    "preload",
    "preset_problem",
    "quantize_weights",
    "resolve_scheme",
    "route",
    "take_fault",
    "workspace_size",
]

if _WITH_TORCH:
    from . import _torch_ops  # noqa: F401  (registers torch.ops.moekit.*)
