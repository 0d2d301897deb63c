"""moekit's operations on numpy arrays and torch tensors: route, fused_experts, fused_moe.

Arguments follow vLLM's names and layouts: w1 is w13 [E, 2N, K] (rows [0, N) gate, [N, 2N) up),
w2 is [E, K, N]. Host arrays run on the exact CPU reference; CUDA tensors run on moekit's CUDA
backend on the current stream, with a workspace allocated from torch's caching allocator (so a
call never synchronizes the host and can be captured in a CUDA graph).
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any, Optional, Sequence, Tuple

from . import _C
from . import _tensors as T

SCHEMES = ("bf16", "fp8_per_tensor", "fp8_per_channel", "fp8_block128")
_ACTIVATION_ALIASES = {
    "silu": "silu",
    "swiglu": "silu",
    "gelu": "gelu",
    "swigluoai": "swiglu_oai",  # vLLM's name for gpt-oss's activation
    "swiglu_oai": "swiglu_oai",
    "swiglu-oai": "swiglu_oai",
}


# ---------------------------------------------------------------------------------------------
# Argument normalization (shared by the direct path and the torch ops)

# Per-call values that only depend on their (few, hashable) arguments, made once. Assigning one
# to an args struct copies it, so sharing them is safe. Bounded: cleared when they grow past this.
_CACHE_LIMIT = 4096
_ACTIVATION_CONFIGS: dict = {}  # (activation, alpha, limit) -> ActivationConfig
_SCHEMES: dict = {}  # scheme string -> (canonical name, Scheme)


def _activation_config(activation: str, alpha: float, limit: float) -> "_C.ActivationConfig":
    plain = type(alpha) in (float, int) and type(limit) in (float, int)
    if plain:
        cfg = _ACTIVATION_CONFIGS.get((activation, alpha, limit))
        if cfg is not None:
            return cfg
    if not isinstance(activation, str):
        raise TypeError(f"activation must be a str, got {type(activation).__name__}")
    cfg = _C.ActivationConfig()
    cfg.kind = _C.parse_activation(_ACTIVATION_ALIASES.get(activation.lower(), activation))
    cfg.alpha = float(alpha)
    cfg.limit = float(limit)
    if plain:
        if len(_ACTIVATION_CONFIGS) >= _CACHE_LIMIT:
            _ACTIVATION_CONFIGS.clear()
        _ACTIVATION_CONFIGS[(activation, alpha, limit)] = cfg
    return cfg


def _scheme(scheme: str) -> tuple:
    """(canonical name, Scheme) of a scheme string; ValueError listing the schemes if unknown."""
    got = _SCHEMES.get(scheme) if type(scheme) is str else None
    if got is None:
        enum = _C.parse_scheme(scheme)
        got = (_C.scheme_name(enum), enum)
        if type(scheme) is str and len(_SCHEMES) < _CACHE_LIMIT:
            _SCHEMES[scheme] = got
    return got


def resolve_scheme(
    scheme: Optional[str],
    w1: Any,
    w1_scale: Any = None,
    block_shape: Optional[Sequence[int]] = None,
    use_fp8_w8a8: bool = False,
    per_channel_quant: bool = False,
) -> str:
    """The scheme name of a call: `scheme` when given, else what vLLM's flags or the weights say.

    Without `scheme`, fp8 weights pick fp8_block128 when block_shape is given, else
    fp8_per_channel when per_channel_quant or when w1_scale has one value per row, else
    fp8_per_tensor; other weights are bf16.
    """
    if block_shape is not None:
        bs = [int(b) for b in block_shape]
        if bs != [128, 128]:
            raise NotImplementedError(
                f"block_shape={bs}: moekit's block-quantized scheme (fp8_block128) uses 128x128 weight "
                "blocks and 1x128 activation groups"
            )
    if scheme is not None:
        if not isinstance(scheme, str):
            raise TypeError(f"scheme must be a str, got {type(scheme).__name__}")
        name = _scheme(scheme)[0]  # ValueError listing the schemes
        if block_shape is not None and name != "fp8_block128":
            raise ValueError(f"block_shape={list(block_shape)} is given but scheme is {name} (expected fp8_block128)")
        return name
    is_fp8 = T.dtype_name(w1) == "float8_e4m3fn"
    if not (is_fp8 or use_fp8_w8a8):
        return "bf16"
    if block_shape is not None:
        return "fp8_block128"
    if per_channel_quant:
        return "fp8_per_channel"
    if w1_scale is not None and len(w1.shape) == 3:
        shape = tuple(w1_scale.shape)
        E, two_n = w1.shape[0], w1.shape[1]
        if len(shape) >= 2 and shape[0] == E and shape[1] == two_n and two_n > 1 and math.prod(shape) == E * two_n:
            return "fp8_per_channel"
    return "fp8_per_tensor"


def _weight_scale(name: str, s: Any, scheme: str, E: int, rows: int) -> Any:
    """A weight scale in the layout moekit reads: fp32, [E] / [E, rows] / blocks, contiguous.

    vLLM keeps per-tensor scales as [E] (or [E, 1, 1]) and per-channel ones as [E, rows, 1]: those
    are reshaped (a view when contiguous).
    """
    if s is None:
        return None
    T.check_array(name, s)
    s = T.astype(s, "float32")
    n = math.prod(s.shape)
    if scheme == "fp8_per_tensor" and n == E and len(s.shape) != 1:
        s = T.reshape(s, (E,))
    elif scheme == "fp8_per_channel" and len(s.shape) == 3 and s.shape[2] == 1 and n == E * rows:
        s = T.reshape(s, (E, rows))
    return T.contiguous(s)


def _act_scale(name: str, s: Any) -> Any:
    if s is None:
        return None
    T.check_array(name, s)
    s = T.astype(s, "float32")
    if math.prod(s.shape) == 1 and len(s.shape) != 1:
        s = T.reshape(s, (1,))
    return T.contiguous(s)


def _topk_ids(x: Any) -> Any:
    # moekit reads int32 ids; int64 ones (torch.topk's) are converted, which costs one small copy.
    T.check_array("topk_ids", x)
    return T.astype(x, "int32") if T.dtype_name(x) == "int64" else x


def _expert_map(x: Any) -> Any:
    if x is None:
        return None
    T.check_array("expert_map", x)
    return T.astype(x, "int32") if T.dtype_name(x) == "int64" else x


def _topk_weights(x: Any) -> Any:
    T.check_array("topk_weights", x)
    return T.astype(x, "float32") if T.dtype_name(x) in ("bfloat16", "float16") else x


def _routing_config(top_k, method, renormalize, num_groups, topk_groups, routed_scaling_factor) -> "_C.RoutingConfig":
    r = _C.RoutingConfig()
    r.method = _C.parse_routing_method(method)
    r.top_k = int(top_k)
    r.renormalize = bool(renormalize)
    r.num_groups = int(num_groups)
    r.topk_groups = int(topk_groups)
    r.routed_scaling_factor = float(routed_scaling_factor)
    return r


class _Keep:
    """Holds the arrays whose views a call uses, so none is freed before the call returns, and
    what those views hold besides their pointers (T.view_meta): the key of the workspace-size
    cache (_Launch)."""

    __slots__ = ("items", "meta")

    def __init__(self):
        self.items = []
        self.meta = []

    def view(self, name: str, x: Any):
        if x is None:
            self.meta.append(None)
            return _ABSENT
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(x, torch.Tensor):
            v = T.torch_view(name, x, self.meta)
        else:
            v = T.view(name, x)
            self.meta.append(T.view_meta(x))
        self.items.append(x)
        return v


_ABSENT = _C.TensorView()  # an absent tensor (assigning a view to an args field copies it)


def _expert_args(keep: _Keep, hidden, w1, w2, topk_weights, topk_ids, out, *, activation, apply_router_weight_on_input,
                 expert_map, scheme, w1_scale, w2_scale, a1_scale, a2_scale, w1_bias, w2_bias, swiglu_alpha,
                 swiglu_limit) -> "_C.FusedExpertsArgs":
    for name, x in (("hidden_states", hidden), ("w1", w1), ("w2", w2)):
        T.check_array(name, x)
    E = w1.shape[0] if len(w1.shape) >= 1 else 0
    two_n = w1.shape[1] if len(w1.shape) >= 2 else 0
    K = w2.shape[1] if len(w2.shape) >= 2 else 0
    w = _C.ExpertWeights()
    w.w13 = keep.view("w1", w1)
    w.w2 = keep.view("w2", w2)
    w.w13_scale = keep.view("w1_scale", _weight_scale("w1_scale", w1_scale, scheme, E, two_n))
    w.w2_scale = keep.view("w2_scale", _weight_scale("w2_scale", w2_scale, scheme, E, K))
    w.b13 = keep.view("w1_bias", w1_bias)
    w.b2 = keep.view("w2_bias", w2_bias)
    a = _C.FusedExpertsArgs()
    a.hidden = keep.view("hidden_states", hidden)
    a.weights = w
    a.topk_ids = keep.view("topk_ids", None if topk_ids is None else _topk_ids(topk_ids))
    a.topk_weights = keep.view("topk_weights", None if topk_weights is None else _topk_weights(topk_weights))
    a.out = keep.view("out", out)
    a.scheme = _scheme(scheme)[1]
    a.activation = _activation_config(activation, swiglu_alpha, swiglu_limit)
    a.a13_scale = keep.view("a1_scale", _act_scale("a1_scale", a1_scale))
    a.a2_scale = keep.view("a2_scale", _act_scale("a2_scale", a2_scale))
    a.expert_map = keep.view("expert_map", _expert_map(expert_map))
    a.apply_router_weight_on_input = bool(apply_router_weight_on_input)
    return a


# fused_experts_impl builds torch tensors' views in one C++ call (_expert_args_torch) when True;
# tools/scripts/host_overhead.py --views-ab turns it off and on in one process to time the two.
FAST_TORCH_VIEWS = True


def _expert_args_torch(hidden, w1, w2, topk_weights, topk_ids, out, *, activation, apply_router_weight_on_input,
                       expert_map, scheme, w1_scale, w2_scale, a1_scale, a2_scale, w1_bias, w2_bias, swiglu_alpha,
                       swiglu_limit):
    """fused_experts_impl's fast path for torch tensors: the same conversions as _expert_args
    (ids to int32, weights and scales to fp32, scales reshaped), then every TensorView built in one
    C++ call (_C.expert_args_torch, which reads the attributes torch_view reads). Returns (args,
    the converted tensors to keep alive), or None for anything it does not take (an argument that
    is not a torch tensor of a dtype moekit reads on cpu / cuda, or any error): the Python path then
    runs and raises its errors, in its order. The workspace size is then asked without the
    signature cache (_workspace_need with no key: one C++ call, describe + workspace_size)."""
    try:
        # (Every argument the C++ call reads is a numpy array or a torch tensor, as the Python
        # path requires; the C++ call then takes torch tensors only.)
        for name, x in (("w1", w1), ("w2", w2), ("out", out)):
            T.check_array(name, x)
        for name, x in (("w1_bias", w1_bias), ("w2_bias", w2_bias)):
            if x is not None:
                T.check_array(name, x)
        E = w1.shape[0] if len(w1.shape) >= 1 else 0
        two_n = w1.shape[1] if len(w1.shape) >= 2 else 0
        K = w2.shape[1] if len(w2.shape) >= 2 else 0
        s13 = _weight_scale("w1_scale", w1_scale, scheme, E, two_n)
        s2 = _weight_scale("w2_scale", w2_scale, scheme, E, K)
        ids = None if topk_ids is None else _topk_ids(topk_ids)
        tw = None if topk_weights is None else _topk_weights(topk_weights)
        a13 = _act_scale("a1_scale", a1_scale)
        a2 = _act_scale("a2_scale", a2_scale)
        emap = _expert_map(expert_map)
        args = _C.expert_args_torch(hidden, w1, w2, s13, s2, w1_bias, w2_bias, ids, tw, out, a13, a2, emap,
                                   _scheme(scheme)[1], _activation_config(activation, swiglu_alpha, swiglu_limit),
                                   bool(apply_router_weight_on_input), T.torch_dtype_table())
    except Exception:  # noqa: BLE001 (the Python path raises it again, in its order)
        return None
    if args is None:
        return None
    return args, (s13, s2, ids, tw, a13, a2, emap)


# Device workspace bytes per call signature: what _C.describe + _C.workspace_size said for the
# same tensor metadata (dtype, shape, strides, device of every view; data pointers left out),
# scalar arguments and backend. The size depends on the problem only, which these determine, so a
# hit skips describe's second pass over the validation; the call itself still validates
# everything (pointers included) and raises the same errors.
_WORKSPACE_BYTES: dict = {}


def _workspace_need(args, key) -> int:
    need = None
    if key is not None:
        try:
            need = _WORKSPACE_BYTES.get(key)
        except TypeError:  # an unhashable argument (an array as swiglu_alpha, ...): no cache
            key = None
    if need is None:
        need = _C.workspace_need(args)  # describe + workspace_size, in one C++ call
        if key is not None:
            if len(_WORKSPACE_BYTES) >= _CACHE_LIMIT:
                _WORKSPACE_BYTES.clear()
            _WORKSPACE_BYTES[key] = need
    return need


class _Launch:
    """Where and how a call runs: backend, stream, workspace (kept alive for the call).

    On CUDA the stream is torch's current stream of the tensors' device. device_ctx is a
    torch.cuda.device context only when that device is not the current one (entering it when it
    is changes nothing; the C++ call makes the tensors' device current for its launches either
    way). key: the call's signature for the workspace-size cache (None: no cache)."""

    __slots__ = ("backend", "stream", "workspace_ptr", "workspace_bytes", "workspace", "device_ctx")

    def __init__(self, like: Any, args, backend: str, workspace: Any, needs_workspace: bool, key=None):
        self.backend = backend
        self.workspace_ptr = 0
        self.workspace_bytes = 0
        self.workspace = None
        self.device_ctx = None
        if T.is_numpy(like) or not like.is_cuda:
            self.stream = 0
            return
        index = like.get_device()
        self.stream = T.cuda_stream(like)
        torch = T.torch_module()
        if T.current_cuda_device() != index:
            self.device_ctx = torch.cuda.device(index)
        if not needs_workspace:
            return
        if workspace is not None:
            need = _workspace_need(args, None)
            if not T.is_torch(workspace) or workspace.device != like.device:
                raise ValueError(f"workspace must be a torch tensor on {like.device}")
            have = workspace.numel() * workspace.element_size()
            if have < need:
                raise ValueError(f"workspace holds {have} bytes, this call needs {need} (moekit.workspace_size)")
            self.workspace = workspace
        else:
            need = _workspace_need(args, key)
            if need > 0:
                # The caching allocator returns stream-ordered memory: no host sync, graph-capturable.
                self.workspace = torch.empty(need, dtype=torch.uint8, device=like.device)
        if self.workspace is not None:
            self.workspace_ptr = self.workspace.data_ptr()
            self.workspace_bytes = self.workspace.numel() * self.workspace.element_size()


def _run(fn, args, launch: _Launch, path: Optional[str], num_threads: int, debug_faults: bool = False) -> None:
    # Positional: the binding's order (backend, stream, workspace, workspace_bytes, path,
    # num_threads, debug_faults).
    if launch.device_ctx is not None:
        with launch.device_ctx:
            fn(args, launch.backend, launch.stream, launch.workspace_ptr, launch.workspace_bytes, path, num_threads,
               bool(debug_faults))
    else:
        fn(args, launch.backend, launch.stream, launch.workspace_ptr, launch.workspace_bytes, path, num_threads,
           bool(debug_faults))


# ---------------------------------------------------------------------------------------------
# Direct implementations (the torch ops call these too)

def fused_experts_impl(hidden_states, w1, w2, topk_weights, topk_ids, *, activation="silu",
                       apply_router_weight_on_input=False, expert_map=None, scheme="bf16", w1_scale=None,
                       w2_scale=None, a1_scale=None, a2_scale=None, w1_bias=None, w2_bias=None,
                       swiglu_alpha=1.702, swiglu_limit=7.0, out=None, backend="auto", path=None,
                       num_threads=0, workspace=None, debug_faults=False):
    T.check_array("hidden_states", hidden_states)
    if out is None:
        out = T.empty(hidden_states, hidden_states.shape, "same")
    # (The fast / Python choice stays inline here and in fused_moe_impl: a shared helper taking the
    # 13 keywords once more measured ~3 us a call slower on this machine's CPU, a seventh of impl.)
    fast = None
    if FAST_TORCH_VIEWS and T.is_torch(hidden_states):
        fast = _expert_args_torch(hidden_states, w1, w2, topk_weights, topk_ids, out, activation=activation,
                                  apply_router_weight_on_input=apply_router_weight_on_input, expert_map=expert_map,
                                  scheme=scheme, w1_scale=w1_scale, w2_scale=w2_scale, a1_scale=a1_scale,
                                  a2_scale=a2_scale, w1_bias=w1_bias, w2_bias=w2_bias, swiglu_alpha=swiglu_alpha,
                                  swiglu_limit=swiglu_limit)
    if fast is not None:
        args, keep = fast
        launch = _Launch(hidden_states, args, backend, workspace, needs_workspace=True)
    else:
        keep = _Keep()
        args = _expert_args(keep, hidden_states, w1, w2, topk_weights, topk_ids, out, activation=activation,
                            apply_router_weight_on_input=apply_router_weight_on_input, expert_map=expert_map,
                            scheme=scheme, w1_scale=w1_scale, w2_scale=w2_scale, a1_scale=a1_scale,
                            a2_scale=a2_scale, w1_bias=w1_bias, w2_bias=w2_bias, swiglu_alpha=swiglu_alpha,
                            swiglu_limit=swiglu_limit)
        key = (tuple(keep.meta), scheme, activation, swiglu_alpha, swiglu_limit, apply_router_weight_on_input,
               backend, num_threads)
        launch = _Launch(hidden_states, args, backend, workspace, needs_workspace=True, key=key)
    _run(_C.fused_experts, args, launch, path, num_threads, debug_faults)
    return out


def route_impl(router_logits, top_k, method="softmax_topk", renormalize=True, num_groups=1, topk_groups=1,
               routed_scaling_factor=1.0, e_score_correction_bias=None, *, backend="auto", num_threads=0,
               topk_weights=None, topk_ids=None):
    T.check_array("router_logits", router_logits)
    M = router_logits.shape[0] if len(router_logits.shape) >= 1 else 0
    k = int(top_k)
    if topk_weights is None:
        topk_weights = T.empty(router_logits, (M, max(k, 0)), "float32")
    if topk_ids is None:
        topk_ids = T.empty(router_logits, (M, max(k, 0)), "int32")
    keep = _Keep()
    a = _C.RouteArgs()
    a.router_logits = keep.view("router_logits", router_logits)
    a.routing = _routing_config(top_k, method, renormalize, num_groups, topk_groups, routed_scaling_factor)
    bias = None if e_score_correction_bias is None else T.contiguous(T.astype(e_score_correction_bias, "float32"))
    a.e_score_correction_bias = keep.view("e_score_correction_bias", bias)
    a.topk_ids = keep.view("topk_ids", topk_ids)
    a.topk_weights = keep.view("topk_weights", topk_weights)
    launch = _Launch(router_logits, a, backend, None, needs_workspace=False)
    if launch.device_ctx is not None:
        with launch.device_ctx:
            _C.route(a, backend, launch.stream, num_threads)
    else:
        _C.route(a, backend, launch.stream, num_threads)
    return topk_weights, topk_ids


def fused_moe_impl(hidden_states, router_logits, w1, w2, top_k, *, renormalize=True, routing="softmax_topk",
                   num_groups=1, topk_groups=1, routed_scaling_factor=1.0, e_score_correction_bias=None,
                   activation="silu", apply_router_weight_on_input=False, expert_map=None, scheme="bf16",
                   w1_scale=None, w2_scale=None, a1_scale=None, a2_scale=None, w1_bias=None, w2_bias=None,
                   swiglu_alpha=1.702, swiglu_limit=7.0, out=None, topk_weights=None, topk_ids=None,
                   backend="auto", path=None, num_threads=0, workspace=None, debug_faults=False):
    """Returns (out, topk_weights, topk_ids); the last two are None unless buffers were given."""
    T.check_array("hidden_states", hidden_states)
    T.check_array("router_logits", router_logits)
    if out is None:
        out = T.empty(hidden_states, hidden_states.shape, "same")
    keep = _Keep()
    # The experts' views in one C++ call as fused_experts_impl's (`fast` keeps its converted
    # tensors alive), else one by one in Python; the routing ones below in Python either way.
    fast = None
    if FAST_TORCH_VIEWS and T.is_torch(hidden_states):
        fast = _expert_args_torch(hidden_states, w1, w2, None, None, out, activation=activation,
                                  apply_router_weight_on_input=apply_router_weight_on_input, expert_map=expert_map,
                                  scheme=scheme, w1_scale=w1_scale, w2_scale=w2_scale, a1_scale=a1_scale,
                                  a2_scale=a2_scale, w1_bias=w1_bias, w2_bias=w2_bias, swiglu_alpha=swiglu_alpha,
                                  swiglu_limit=swiglu_limit)
    if fast is not None:
        experts = fast[0]
    else:
        experts = _expert_args(keep, hidden_states, w1, w2, None, None, out, activation=activation,
                               apply_router_weight_on_input=apply_router_weight_on_input, expert_map=expert_map,
                               scheme=scheme, w1_scale=w1_scale, w2_scale=w2_scale, a1_scale=a1_scale,
                               a2_scale=a2_scale, w1_bias=w1_bias, w2_bias=w2_bias, swiglu_alpha=swiglu_alpha,
                               swiglu_limit=swiglu_limit)
    # Routing outputs are optional: moekit keeps them in the workspace unless buffers are given.
    experts.topk_ids = keep.view("topk_ids", topk_ids)
    experts.topk_weights = keep.view("topk_weights", topk_weights)
    a = _C.FusedMoeArgs()
    a.router_logits = keep.view("router_logits", router_logits)
    a.routing = _routing_config(top_k, routing, renormalize, num_groups, topk_groups, routed_scaling_factor)
    bias = None if e_score_correction_bias is None else T.contiguous(T.astype(e_score_correction_bias, "float32"))
    a.e_score_correction_bias = keep.view("e_score_correction_bias", bias)
    a.experts = experts
    # (The workspace-size key needs every view's metadata: with the one-call views, no key, the
    # size is asked in one C++ call instead.)
    key = None if fast is not None else (
        tuple(keep.meta), scheme, activation, swiglu_alpha, swiglu_limit, apply_router_weight_on_input, backend,
        num_threads, top_k, routing, renormalize, num_groups, topk_groups, routed_scaling_factor)
    launch = _Launch(hidden_states, a, backend, workspace, needs_workspace=True, key=key)
    _run(_C.fused_moe, a, launch, path, num_threads, debug_faults)
    return out, topk_weights, topk_ids


# ---------------------------------------------------------------------------------------------
# Public functions

def _torch_ops_ready() -> bool:
    if os.environ.get("MOEKIT_NO_TORCH", "") not in ("", "0"):
        return False
    ops = sys.modules.get("moekit._torch_ops")
    if ops is None:
        from . import _torch_ops as ops  # noqa: PLC0415 (only imported once torch is)
    return ops.REGISTERED


# vLLM's fused_experts contract that fused_experts follows, positional order included: vLLM v0.10.2
# (vllm/model_executor/layers/fused_moe/fused_moe.py), the last release whose fused_experts takes
# the quantization flags; from v0.11 they travel in quant_config (FusedMoEQuantConfig).
VLLM_FUSED_EXPERTS_CONTRACT = "vLLM v0.10.2"
# vLLM's quantization flags and arguments that moekit has no kernels for: accepted (the signature
# is vLLM's), refused when set.
_REFUSED_FLAGS = ("use_int8_w8a8", "use_int8_w8a16", "use_int4_w4a16", "use_mxfp4_w4a4")
_REFUSED_TENSORS = ("w1_zp", "w2_zp")


def _refuse_unsupported(flags: dict, tensors: dict) -> None:
    set_flags = [name for name in _REFUSED_FLAGS if flags.get(name)]
    given = [name for name in _REFUSED_TENSORS if tensors.get(name) is not None]
    if set_flags or given:
        what = ", ".join([f"{n}=True" for n in set_flags] + [f"{n} (zero points)" for n in given])
        raise NotImplementedError(
            f"moekit.fused_experts: {what} is not supported: moekit runs bf16/fp16 and fp8 (e4m3) weights "
            f"({', '.join(SCHEMES)}); int8 / int4 / mxfp4 weights and zero points are not implemented"
        )


def fused_experts(hidden_states, w1, w2, topk_weights, topk_ids, inplace: bool = False, activation: str = "silu",
                  apply_router_weight_on_input: bool = False, use_fp8_w8a8: bool = False,
                  use_int8_w8a8: bool = False, use_int8_w8a16: bool = False, use_int4_w4a16: bool = False,
                  use_mxfp4_w4a4: bool = False, per_channel_quant: bool = False, global_num_experts: int = -1,
                  expert_map=None, w1_scale=None, w2_scale=None, w1_zp=None, w2_zp=None, a1_scale=None,
                  a2_scale=None, block_shape: Optional[Sequence[int]] = None, allow_deep_gemm: bool = False,
                  allow_cutlass_block_scaled_grouped_gemm: bool = False, w1_bias=None, w2_bias=None, *,
                  scheme: Optional[str] = None, swiglu_alpha: float = 1.702, swiglu_limit: float = 7.0, out=None,
                  backend: str = "auto", path: Optional[str] = None, num_threads: int = 0, workspace=None,
                  debug_faults: bool = False):
    """The MoE layer with routing given: vLLM's fused_experts, with the signature of vLLM v0.10.2.

    The positional order and the defaults are those of vLLM v0.10.2's
    vllm.model_executor.layers.fused_moe.fused_experts (the last release whose fused_experts takes
    the quantization flags; vLLM 0.11 moved them into a quant_config object), so a call written for
    it runs here unchanged. Not supported, and refused with NotImplementedError naming them:
    use_int8_w8a8, use_int8_w8a16, use_int4_w4a16, use_mxfp4_w4a4 and the zero points w1_zp / w2_zp.
    allow_deep_gemm and allow_cutlass_block_scaled_grouped_gemm only permit other vLLM backends and
    are ignored; global_num_experts, when given with expert_map, must equal its length.

    hidden_states [M, K] bf16/fp16; w1 = w13 [E, 2N, K] (gate rows, then up rows); w2 [E, K, N];
    topk_weights [M, k] (fp32; bf16/fp16 are converted); topk_ids [M, k] int32 (int64 is converted,
    one small copy). inplace writes the result into hidden_states (through a temporary: moekit's
    output never aliases its input) and returns it. activation: "silu", "gelu", "swigluoai"
    (gpt-oss, with swiglu_alpha/limit). The scheme follows use_fp8_w8a8 / per_channel_quant /
    block_shape ([128, 128] only) or the weights' dtype, unless the keyword-only `scheme` ("bf16",
    "fp8_per_tensor", "fp8_per_channel", "fp8_block128") says it. Scales are fp32 dequantization
    multipliers: w1_scale [E] / [E, 2N] (or [E, 2N, 1]) / [E, ceil(2N/128), ceil(K/128)]; a1_scale,
    a2_scale static per-tensor activation scales. w1_bias [E, 2N], w2_bias [E, K]. expert_map
    [E_global] maps global ids to local ones (-1 = not here). Keyword-only, moekit's own: scheme,
    swiglu_alpha, swiglu_limit, out, backend, path, num_threads, workspace, debug_faults. Returns
    out [M, K] in the dtype of hidden_states.
    A topk_ids value outside [0, E_global) or an expert_map entry outside [0, E) (-1 is valid in
    both) contributes nothing and is recorded: moekit.check_faults() raises it later (ValueError);
    debug_faults=True (or MOEKIT_DEBUG_FAULTS=1) raises it from this call (synchronizes on CUDA).
    """
    if use_int8_w8a8 or use_int8_w8a16 or use_int4_w4a16 or use_mxfp4_w4a4 or w1_zp is not None or w2_zp is not None:
        _refuse_unsupported(
            dict(use_int8_w8a8=use_int8_w8a8, use_int8_w8a16=use_int8_w8a16, use_int4_w4a16=use_int4_w4a16,
                 use_mxfp4_w4a4=use_mxfp4_w4a4),
            dict(w1_zp=w1_zp, w2_zp=w2_zp))
    del allow_deep_gemm, allow_cutlass_block_scaled_grouped_gemm  # other vLLM backends: nothing to do here
    if global_num_experts not in (-1, None) and expert_map is not None and len(expert_map.shape) == 1 \
            and int(global_num_experts) != int(expert_map.shape[0]):
        raise ValueError(f"global_num_experts is {global_num_experts} but expert_map has {expert_map.shape[0]} "
                         "entries (one per global expert)")
    for name, x in (("hidden_states", hidden_states), ("w1", w1), ("w2", w2)):
        T.check_array(name, x)
    scheme = resolve_scheme(scheme, w1, w1_scale, block_shape, use_fp8_w8a8, per_channel_quant)
    direct = out is not None or workspace is not None or backend != "auto" or num_threads != 0 or debug_faults
    if T.is_torch(hidden_states) and not direct and _torch_ops_ready():
        torch = T.torch_module()
        result = torch.ops.moekit.fused_experts(
            hidden_states, w1, w2, topk_weights, topk_ids, activation, bool(apply_router_weight_on_input),
            expert_map, scheme, w1_scale, w2_scale, a1_scale, a2_scale, w1_bias, w2_bias,
            float(swiglu_alpha), float(swiglu_limit), path)
    else:
        result = fused_experts_impl(
            hidden_states, w1, w2, topk_weights, topk_ids, activation=activation,
            apply_router_weight_on_input=apply_router_weight_on_input, expert_map=expert_map, scheme=scheme,
            w1_scale=w1_scale, w2_scale=w2_scale, a1_scale=a1_scale, a2_scale=a2_scale, w1_bias=w1_bias,
            w2_bias=w2_bias, swiglu_alpha=swiglu_alpha, swiglu_limit=swiglu_limit, out=out, backend=backend,
            path=path, num_threads=num_threads, workspace=workspace, debug_faults=debug_faults)
    if inplace:
        T.copy_into(hidden_states, result)
        return hidden_states
    return result


def route(router_logits, top_k: int, method: str = "softmax_topk", renormalize: bool = True, num_groups: int = 1,
          topk_groups: int = 1, routed_scaling_factor: float = 1.0, e_score_correction_bias=None, *,
          backend: str = "auto", num_threads: int = 0) -> Tuple[Any, Any]:
    """Router logits [M, E] (fp32 or bf16) -> (topk_weights [M, k] fp32, topk_ids [M, k] int32).

    method: "softmax_topk" (Mixtral, Qwen3-MoE), "sigmoid_grouped_topk" (DeepSeek-V3: num_groups,
    topk_groups, routed_scaling_factor, e_score_correction_bias), "topk_softmax" (gpt-oss). Ties
    pick the lower expert id; the k are in descending score order.
    """
    if T.is_torch(router_logits) and backend == "auto" and num_threads == 0 and _torch_ops_ready():
        torch = T.torch_module()
        return torch.ops.moekit.route(router_logits, int(top_k), method, bool(renormalize), int(num_groups),
                                      int(topk_groups), float(routed_scaling_factor), e_score_correction_bias)
    return route_impl(router_logits, top_k, method, renormalize, num_groups, topk_groups, routed_scaling_factor,
                      e_score_correction_bias, backend=backend, num_threads=num_threads)


def fused_moe(hidden_states, router_logits, w1, w2, top_k: int, *, renormalize: bool = True,
              routing: str = "softmax_topk", num_groups: int = 1, topk_groups: int = 1,
              routed_scaling_factor: float = 1.0, e_score_correction_bias=None, activation: str = "silu",
              apply_router_weight_on_input: bool = False, expert_map=None, scheme: Optional[str] = None,
              w1_scale=None, w2_scale=None, a1_scale=None, a2_scale=None,
              block_shape: Optional[Sequence[int]] = None, w1_bias=None, w2_bias=None, inplace: bool = False,
              use_fp8_w8a8: bool = False, per_channel_quant: bool = False, swiglu_alpha: float = 1.702,
              swiglu_limit: float = 7.0, return_routing: bool = False, out=None, backend: str = "auto",
              path: Optional[str] = None, num_threads: int = 0, workspace=None, debug_faults: bool = False):
    """Route then run the experts in one call: route(router_logits, ...) + fused_experts(...).

    Arguments as in route() (routing = the method) and fused_experts(). With return_routing=True
    returns (out, topk_weights, topk_ids), else out.
    """
    for name, x in (("hidden_states", hidden_states), ("router_logits", router_logits), ("w1", w1), ("w2", w2)):
        T.check_array(name, x)
    scheme = resolve_scheme(scheme, w1, w1_scale, block_shape, use_fp8_w8a8, per_channel_quant)
    direct = out is not None or workspace is not None or backend != "auto" or num_threads != 0 or debug_faults
    if T.is_torch(hidden_states) and not direct and _torch_ops_ready():
        torch = T.torch_module()
        result, tw, ti = torch.ops.moekit.fused_moe(
            hidden_states, router_logits, w1, w2, int(top_k), bool(renormalize), routing, int(num_groups),
            int(topk_groups), float(routed_scaling_factor), e_score_correction_bias, activation,
            bool(apply_router_weight_on_input), expert_map, scheme, w1_scale, w2_scale, a1_scale, a2_scale,
            w1_bias, w2_bias, float(swiglu_alpha), float(swiglu_limit), path)
    else:
        M = hidden_states.shape[0] if len(hidden_states.shape) >= 1 else 0
        k = max(int(top_k), 0)
        tw = T.empty(hidden_states, (M, k), "float32") if return_routing else None
        ti = T.empty(hidden_states, (M, k), "int32") if return_routing else None
        result, tw, ti = fused_moe_impl(
            hidden_states, router_logits, w1, w2, top_k, renormalize=renormalize, routing=routing,
            num_groups=num_groups, topk_groups=topk_groups, routed_scaling_factor=routed_scaling_factor,
            e_score_correction_bias=e_score_correction_bias, activation=activation,
            apply_router_weight_on_input=apply_router_weight_on_input, expert_map=expert_map, scheme=scheme,
            w1_scale=w1_scale, w2_scale=w2_scale, a1_scale=a1_scale, a2_scale=a2_scale, w1_bias=w1_bias,
            w2_bias=w2_bias, swiglu_alpha=swiglu_alpha, swiglu_limit=swiglu_limit, out=out, topk_weights=tw,
            topk_ids=ti, backend=backend, path=path, num_threads=num_threads, workspace=workspace,
            debug_faults=debug_faults)
    if inplace:
        T.copy_into(hidden_states, result)
        result = hidden_states
    return (result, tw, ti) if return_routing else result


def describe_fused_experts(hidden_states, w1, w2, topk_weights, topk_ids, *, activation="silu",
                           apply_router_weight_on_input=False, expert_map=None, scheme=None, w1_scale=None,
                           w2_scale=None, a1_scale=None, a2_scale=None, block_shape=None, w1_bias=None,
                           w2_bias=None, swiglu_alpha=1.702, swiglu_limit=7.0) -> "_C.Problem":
    """Validate a fused_experts call without running it and describe it (moekit.Problem)."""
    for name, x in (("hidden_states", hidden_states), ("w1", w1), ("w2", w2)):
        T.check_array(name, x)
    scheme = resolve_scheme(scheme, w1, w1_scale, block_shape)
    keep = _Keep()
    out = T.empty(hidden_states, hidden_states.shape, "same")
    args = _expert_args(keep, hidden_states, w1, w2, topk_weights, topk_ids, out, activation=activation,
                        apply_router_weight_on_input=apply_router_weight_on_input, expert_map=expert_map,
                        scheme=scheme, w1_scale=w1_scale, w2_scale=w2_scale, a1_scale=a1_scale, a2_scale=a2_scale,
                        w1_bias=w1_bias, w2_bias=w2_bias, swiglu_alpha=swiglu_alpha, swiglu_limit=swiglu_limit)
    return _C.describe(args)


def workspace_size(problem: "_C.Problem", backend: str = "cuda") -> int:
    """Device workspace bytes a call of `problem` needs (0 on the CPU). It depends on the sizes only:
    size it once for the largest M (moekit.preset_problem(name, M, tp, scheme))."""
    return _C.workspace_size(problem, backend)


def preset_problem(name: str, num_tokens: int, tp: int = 1, scheme: str = "bf16") -> "_C.Problem":
    """The problem of one layer call of a model preset (mixtral-8x7b, qwen3-30b-a3b, ...)."""
    return _C.preset_problem(name, int(num_tokens), int(tp), scheme)


def model_presets():
    return list(_C.model_presets())


def preload(device=None) -> dict:
    """Load every moekit CUDA kernel on `device` now, and say what that cost.

    The first CUDA call on a device does this anyway (CUDA loads modules lazily; moekit loads all
    of its kernels at once so that no later call, at any batch size, pays a load): call it at model
    load to keep it off the first request. device: an int, a torch.device / "cuda:1", or None for
    the current device. Once per process and device; later calls return the numbers of that load:
    {"device", "loaded_now", "kernels", "context_ms", "load_ms", "slowest": [(kernel, ms), ...]}.
    Raises NotImplementedError without the CUDA backend or a Hopper GPU.
    """
    if device is None:
        index = -1
        torch = T.torch_module()
        if torch is not None and torch.cuda.is_initialized():
            index = torch.cuda.current_device()
    elif isinstance(device, int):
        index = device
    else:
        dev = str(device)
        if not dev.startswith("cuda"):
            raise ValueError(f"device must be a CUDA device, got {device!r}")
        index = int(dev.split(":", 1)[1]) if ":" in dev else -1
    return _C.preload(int(index))


def _stream_handle(stream: Any) -> int:
    """A cudaStream_t as an int: None -> torch's current stream when torch has initialized CUDA
    (else 0, the legacy default stream); a torch.cuda.Stream; or an int handle."""
    if stream is None:
        torch = T.torch_module()
        if torch is not None:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                return torch.cuda.current_stream().cuda_stream
        return 0
    if hasattr(stream, "cuda_stream"):
        return int(stream.cuda_stream)
    return int(stream)


def take_fault(stream: Any = None, backend: str = "auto") -> Optional[dict]:
    """Read and clear the record of bad expert ids: None, or a dict with tensor ("topk_ids" /
    "expert_map"), row, slot, value, expert (the id whose expert_map entry is bad), bound and
    message. One record per process for the CPU reference and one per CUDA device (shared by
    every call there, sticky until read; reading it synchronizes `stream`, which must not be
    capturing a CUDA graph). backend: "cpu", "cuda" or "auto" (both)."""
    return _C.take_fault(backend, _stream_handle(stream))


def check_faults(stream: Any = None, backend: str = "auto") -> None:
    """take_fault, raising ValueError naming the tensor, row, slot and value when a bad expert id
    was recorded since the last check. Cheap: call it where you synchronize anyway."""
    _C.check_faults(backend, _stream_handle(stream))


def cuda_available() -> Tuple[bool, str]:
    """(True, "") when this build has the CUDA backend and a Hopper GPU is visible, else (False, why)."""
    return tuple(_C.cuda_available())
