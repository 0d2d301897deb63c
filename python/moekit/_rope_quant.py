"""moekit.inv_rope_fp8_quant: DeepSeek-V4's attention-output epilogue (inverse RoPE on the last
rope_dim channels of each head, then e4m3 with power-of-two scales per 128 channels), on numpy
arrays (the CPU reference) and torch tensors (CPU reference or the Hopper kernel on the current
stream; no allocation besides the outputs, no host sync). docs/rope_quant.md has the math.
"""

from __future__ import annotations

from typing import Any, Tuple

from . import _C
from . import _tensors as T
from ._ops import _Keep, _Launch, _torch_ops_ready


def output_shapes(o_shape, num_groups: int, packed_ue8m0: bool):
    """((G, T, hpg*D), (G, nb or nb/4, Tp)) for o of shape [T, H, D]."""
    if len(o_shape) != 3:
        raise ValueError(f"inv_rope_fp8_quant: o has shape {list(o_shape)}, expected [T, H, D]")
    t, h, d = o_shape  # SymInts under torch.compile's fake tensors: no int() here
    g = int(num_groups)
    if g < 1 or h % g != 0:
        raise ValueError(f"inv_rope_fp8_quant: num_groups is {g}, expected a divisor of the H={h} heads of o {list(o_shape)}")
    hpg = h // g
    cols = hpg * d // 128
    if packed_ue8m0:
        cols //= 4
    return (g, t, hpg * d), (g, cols, (t + 3) // 4 * 4)


def _empty(like: Any, shape, kind: str) -> Any:
    if T.is_numpy(like):
        import numpy as np  # noqa: PLC0415

        if kind == "fp8":
            import ml_dtypes  # noqa: PLC0415

            return np.empty(shape, dtype=ml_dtypes.float8_e4m3fn)
        return np.empty(shape, dtype=np.float32 if kind == "float32" else np.int32)
    torch = T.torch_module()
    dt = {"fp8": torch.float8_e4m3fn, "float32": torch.float32, "int32": torch.int32}[kind]
    return torch.empty(shape, dtype=dt, device=like.device)


def inv_rope_fp8_quant_impl(o, positions, cos_sin_cache, num_groups: int = 1, *, packed_ue8m0: bool = False,
                            backend: str = "auto", num_threads: int = 0, o_fp8=None, o_scale=None):
    T.check_array("o", o)
    q_shape, s_shape = output_shapes(o.shape, num_groups, packed_ue8m0)
    if o_fp8 is None:
        o_fp8 = _empty(o, q_shape, "fp8")
    if o_scale is None:
        o_scale = _empty(o, s_shape, "int32" if packed_ue8m0 else "float32")
    keep = _Keep()
    a = _C.InvRopeFp8QuantArgs()
    a.o = keep.view("o", o)
    a.positions = keep.view("positions", positions)
    a.cos_sin_cache = keep.view("cos_sin_cache", cos_sin_cache)
    a.num_groups = int(num_groups)
    a.o_fp8 = keep.view("o_fp8", o_fp8)
    a.o_scale = keep.view("o_scale", o_scale)
    a.packed_ue8m0 = bool(packed_ue8m0)
    launch = _Launch(o, a, backend, None, needs_workspace=False)
    if launch.device_ctx is not None:
        with launch.device_ctx:
            _C.inv_rope_fp8_quant(a, backend=backend, stream=launch.stream, num_threads=num_threads)
    else:
        _C.inv_rope_fp8_quant(a, backend=backend, stream=launch.stream, num_threads=num_threads)
    return o_fp8, o_scale


def inv_rope_fp8_quant(o, positions, cos_sin_cache, num_groups: int = 1, *, packed_ue8m0: bool = False,
                       backend: str = "auto", num_threads: int = 0) -> Tuple[Any, Any]:
    """Inverse RoPE + e4m3 quantization of the attention output o [T, H, D] (bf16).

    positions [T] int64 picks rows of cos_sin_cache [max_pos, rope_dim] fp32 (cos then sin); the
    last rope_dim channels of each head are rotated back (GPT-J interleaved pairs). Returns
    (o_fp8, o_scale): o_fp8 [G, T, hpg*D] float8_e4m3fn, group-major (G = num_groups,
    hpg = H / G); o_scale [G, hpg*D/128, Tp] float32, token-fastest, Tp = T rounded up to 4,
    padded tokens 0 -- or with packed_ue8m0 [G, hpg*D/512, Tp] int32 holding four UE8M0
    exponents (biased 127) per word, block 4w+i in byte i. Torch tensors with backend "auto" go
    through torch.ops.moekit.inv_rope_fp8_quant (torch.compile and CUDA graphs see one op).
    """
    if T.is_torch(o) and backend == "auto" and num_threads == 0 and _torch_ops_ready():
        torch = T.torch_module()
        return torch.ops.moekit.inv_rope_fp8_quant(o, positions, cos_sin_cache, int(num_groups), bool(packed_ue8m0))
    return inv_rope_fp8_quant_impl(o, positions, cos_sin_cache, num_groups, packed_ue8m0=packed_ue8m0,
                                   backend=backend, num_threads=num_threads)
