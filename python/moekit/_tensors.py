"""Zero-copy views of numpy arrays and torch tensors as moekit TensorViews.

A view is (data pointer, dtype, shape, strides in elements, device): nothing is copied, so the
Python object must stay alive while the call that uses the view runs. numpy cannot DLPack the
ml_dtypes types (bfloat16, float8_e4m3fn), hence this explicit route instead of DLPack.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Sequence

import numpy as np

from . import _C

_NUMPY_DTYPES = {
    "bfloat16": _C.DType.kBf16,
    "float16": _C.DType.kFp16,
    "float32": _C.DType.kFp32,
    "float8_e4m3fn": _C.DType.kFp8E4m3,
    "int32": _C.DType.kInt32,
    "int64": _C.DType.kInt64,
}


def torch_module():
    """torch if it is already imported (moekit never imports it just to inspect an argument)."""
    return sys.modules.get("torch")


def is_torch(x: Any) -> bool:
    torch = torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


def is_numpy(x: Any) -> bool:
    return isinstance(x, np.ndarray)


_TORCH_DTYPES: Optional[tuple] = None  # (the torch module, its table): built once, not per tensor


def _torch_dtypes():
    global _TORCH_DTYPES
    torch = torch_module()
    if _TORCH_DTYPES is not None and _TORCH_DTYPES[0] is torch:
        return _TORCH_DTYPES[1]
    table = {
        torch.bfloat16: _C.DType.kBf16,
        torch.float16: _C.DType.kFp16,
        torch.float32: _C.DType.kFp32,
        torch.int32: _C.DType.kInt32,
        torch.int64: _C.DType.kInt64,
    }
    if hasattr(torch, "float8_e4m3fn"):
        table[torch.float8_e4m3fn] = _C.DType.kFp8E4m3
    _TORCH_DTYPES = (torch, table)
    return table


def dtype_of(name: str, x: Any):
    """The moekit DType of x, or ValueError naming the argument."""
    if is_numpy(x):
        d = _NUMPY_DTYPES.get(x.dtype.name)
    else:
        d = _torch_dtypes().get(x.dtype)
    if d is None:
        raise ValueError(
            f"{name} has dtype {x.dtype}, which moekit does not read "
            "(bfloat16, float16, float32, float8_e4m3fn, int32, int64)"
        )
    return d


def check_array(name: str, x: Any) -> None:
    if not (is_numpy(x) or is_torch(x)):
        raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(x).__name__}")


def view(name: str, x: Any) -> "_C.TensorView":
    """A TensorView of x (absent when x is None)."""
    if x is None:
        return _C.TensorView()
    check_array(name, x)
    d = dtype_of(name, x)
    if is_numpy(x):
        item = x.dtype.itemsize
        strides = []
        for s in x.strides:
            if s % item != 0:
                raise ValueError(f"{name} has byte strides {x.strides} that are not multiples of its {item}-byte elements")
            strides.append(s // item)
        ptr = x.__array_interface__["data"][0] if x.size > 0 else 0
        return _C.TensorView(ptr, d, list(x.shape), strides, _C.DeviceType.kCpu, 0)
    dev = x.device
    if dev.type == "cpu":
        dt, di = _C.DeviceType.kCpu, 0
    elif dev.type == "cuda":
        dt, di = _C.DeviceType.kCuda, dev.index if dev.index is not None else 0
    else:
        raise ValueError(f"{name} is on {dev}, moekit runs on cpu and cuda tensors")
    ptr = x.data_ptr() if x.numel() > 0 else 0
    return _C.TensorView(ptr, d, list(x.shape), list(x.stride()), dt, di)


def device_of(x: Any):
    """('cpu', 0) for numpy arrays and CPU tensors, ('cuda', i) for CUDA tensors."""
    if is_numpy(x):
        return ("cpu", 0)
    dev = x.device
    return (dev.type, dev.index if dev.index is not None else 0)


# ---- small array helpers that work on both numpy and torch ----

def empty(like: Any, shape: Sequence[int], dtype: str) -> Any:
    """An uninitialized array of `dtype` ("float32", "int32", "same") on like's device."""
    if is_numpy(like):
        np_dtype = like.dtype if dtype == "same" else np.dtype(dtype)
        return np.empty(tuple(shape), dtype=np_dtype)
    torch = torch_module()
    t_dtype = like.dtype if dtype == "same" else getattr(torch, dtype)
    return torch.empty(tuple(shape), dtype=t_dtype, device=like.device)


def astype(x: Any, dtype: str) -> Any:
    """x as `dtype` ("float32", "int32"), copying only when the dtype differs."""
    if x is None:
        return None
    if is_numpy(x):
        return x if x.dtype == np.dtype(dtype) else x.astype(dtype)
    torch = torch_module()
    t = getattr(torch, dtype)
    return x if x.dtype == t else x.to(t)


def reshape(x: Any, shape: Sequence[int]) -> Any:
    """x with another shape: a view when x is contiguous (a copy otherwise, as reshape does)."""
    return x.reshape(tuple(shape))


def contiguous(x: Any) -> Any:
    if x is None:
        return None
    if is_numpy(x):
        return np.ascontiguousarray(x)
    return x.contiguous()


def copy_into(dst: Any, src: Any) -> None:
    if is_numpy(dst):
        np.copyto(dst, src)
    else:
        dst.copy_(src)


def dtype_name(x: Any) -> str:
    """'bfloat16', 'float8_e4m3fn', ... for numpy and torch alike."""
    if is_numpy(x):
        return x.dtype.name
    return str(x.dtype).replace("torch.", "")


def cuda_stream(x: Any) -> int:
    """The current CUDA stream of x's device (0 for host arrays)."""
    if is_numpy(x) or x.device.type != "cuda":
        return 0
    torch = torch_module()
    return torch.cuda.current_stream(x.device).cuda_stream


def maybe_view(name: str, x: Optional[Any]):
    return view(name, x)
