"""Weight quantization helpers: expert weights [E, R, C] -> (q, scale) for each scheme.

Host arrays (numpy, torch CPU) go through moekit's C++ quantizer (the one the CPU reference and
the C++ tests use); CUDA tensors through the same formula in torch:
scale = max(absmax / 448, 1 / (448 * 512)) over each expert / row / 128x128 block,
q = e4m3(w * (1 / scale)) rounded to nearest even, saturated to +-448.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import numpy as np

from . import _C
from . import _tensors as T

FP8_MAX = 448.0
MIN_DYNAMIC_SCALE = 1.0 / (448.0 * 512.0)
BLOCK = 128


def _numpy_dtype(d: "_C.DType"):
    if d == _C.DType.kFp32:
        return np.dtype("float32")
    if d == _C.DType.kFp16:
        return np.dtype("float16")
    import ml_dtypes  # noqa: PLC0415 (only needed for bf16 / fp8 results)

    return np.dtype(ml_dtypes.bfloat16 if d == _C.DType.kBf16 else ml_dtypes.float8_e4m3fn)


def _torch_dtype(d: "_C.DType"):
    torch = T.torch_module()
    return {
        _C.DType.kFp32: torch.float32,
        _C.DType.kFp16: torch.float16,
        _C.DType.kBf16: torch.bfloat16,
        _C.DType.kFp8E4m3: getattr(torch, "float8_e4m3fn", None),
    }[d]


def quantize_weights(w: Any, scheme: str, *, dtype: Optional[str] = None) -> Tuple[Any, Optional[Any]]:
    """Quantize expert weights w [E, R, C] (fp32, bf16 or fp16) for `scheme`.

    Returns (q, scale): for fp8 schemes q is float8_e4m3fn [E, R, C] and scale fp32 [E] /
    [E, R] / [E, ceil(R/128), ceil(C/128)] (value = q * scale); for "bf16" q is w rounded to
    `dtype` ("bfloat16" default, or "float16") and scale is None. Same container and device as w.
    """
    T.check_array("w", w)
    scheme_enum = _C.parse_scheme(scheme)
    scheme = _C.scheme_name(scheme_enum)
    if len(w.shape) != 3:
        raise ValueError(f"w has shape {list(w.shape)}, expected [E, R, C]")
    bf16_dtype = _C.DType.kFp16 if dtype in ("float16", "fp16") else _C.DType.kBf16
    if dtype not in (None, "bfloat16", "bf16", "float16", "fp16"):
        raise ValueError(f"dtype is {dtype!r}, expected 'bfloat16' or 'float16'")
    if T.is_torch(w) and w.device.type == "cuda":
        return _quantize_torch(w, scheme, bf16_dtype)
    if T.is_numpy(w) and w.dtype == np.float64:
        w = w.astype(np.float32)
    w = T.contiguous(w)
    dt, shape, data, scale_shape, scale = _C.quantize_weights(T.view("w", w), scheme_enum, bf16_dtype)
    if T.is_numpy(w):
        q = np.frombuffer(bytearray(data), dtype=_numpy_dtype(dt)).reshape(shape)
        s = np.frombuffer(bytearray(scale), dtype=np.float32).reshape(scale_shape) if scheme != "bf16" else None
        return q, s
    torch = T.torch_module()
    q = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(_torch_dtype(dt)).reshape(shape)
    s = (torch.frombuffer(bytearray(scale), dtype=torch.float32).reshape(scale_shape)
         if scheme != "bf16" else None)
    return q, s


def _div_fp32(a: Any, b: Any) -> Any:
    # The correctly rounded fp32 quotient, as the C++ quantizer's a / b: torch's CUDA division by a
    # scalar multiplies by its reciprocal (1 ulp off at times). Dividing in fp64 and rounding once
    # to fp32 is exact (fp64 holds more than 2 * 24 + 2 bits).
    return (a.double() / b).float() if not hasattr(b, "double") else (a.double() / b.double()).float()


def _quantize_torch(w: Any, scheme: str, bf16_dtype) -> Tuple[Any, Optional[Any]]:
    torch = T.torch_module()
    if scheme == "bf16":
        return w.to(_torch_dtype(bf16_dtype)).contiguous(), None
    E, R, C = w.shape
    x = w.float()
    a = torch.nan_to_num(x.abs(), nan=0.0)  # absmax ignores NaN, as fmax does
    if scheme == "fp8_per_tensor":
        amax = a.reshape(E, -1).amax(dim=1) if R * C > 0 else torch.zeros(E, device=w.device)
        scale = torch.clamp(_div_fp32(amax, FP8_MAX), min=MIN_DYNAMIC_SCALE)
        full = scale[:, None, None]
    elif scheme == "fp8_per_channel":
        amax = a.amax(dim=2) if C > 0 else torch.zeros(E, R, device=w.device)
        scale = torch.clamp(_div_fp32(amax, FP8_MAX), min=MIN_DYNAMIC_SCALE)
        full = scale[:, :, None]
    else:
        nr, nc = math.ceil(R / BLOCK), math.ceil(C / BLOCK)
        padded = torch.zeros(E, nr * BLOCK, nc * BLOCK, device=w.device, dtype=torch.float32)
        padded[:, :R, :C] = a
        amax = padded.reshape(E, nr, BLOCK, nc, BLOCK).amax(dim=(2, 4))
        scale = torch.clamp(_div_fp32(amax, FP8_MAX), min=MIN_DYNAMIC_SCALE)
        full = scale.repeat_interleave(BLOCK, dim=1).repeat_interleave(BLOCK, dim=2)[:, :R, :C]
    inv = _div_fp32(torch.ones_like(full), full)  # fp32 reciprocal, then a multiply: the C++ formula
    q = torch.clamp(x * inv, -FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.contiguous(), scale.contiguous()


def dequantize_weights(q: Any, scale: Optional[Any], scheme: str) -> Any:
    """q * scale as fp32 [E, R, C], expanding the scale of `scheme` (inverse of quantize_weights)."""
    scheme = _C.scheme_name(_C.parse_scheme(scheme))
    if T.is_numpy(q):
        x = q.astype(np.float32)
        if scheme == "bf16":
            return x
        s = np.asarray(scale, dtype=np.float32)
        E, R, C = q.shape
        if scheme == "fp8_per_tensor":
            return x * s.reshape(E)[:, None, None]
        if scheme == "fp8_per_channel":
            return x * s.reshape(E, R)[:, :, None]
        full = np.repeat(np.repeat(s, BLOCK, axis=1), BLOCK, axis=2)[:, :R, :C]
        return x * full
    x = q.float()
    if scheme == "bf16":
        return x
    s = scale.float()
    E, R, C = q.shape
    if scheme == "fp8_per_tensor":
        return x * s.reshape(E)[:, None, None]
    if scheme == "fp8_per_channel":
        return x * s.reshape(E, R)[:, :, None]
    full = s.repeat_interleave(BLOCK, dim=1).repeat_interleave(BLOCK, dim=2)[:, :R, :C]
    return x * full
