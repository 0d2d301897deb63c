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


_MODULES = sys.modules  # looked up inline on the hot path (torch may be imported after moekit)


def is_torch(x: Any) -> bool:
    torch = _MODULES.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def is_numpy(x: Any) -> bool:
    return isinstance(x, np.ndarray)


_TORCH_DTYPES: Optional[tuple] = None  # (the torch module, its table): built once, not per tensor


def _torch_dtypes():
    global _TORCH_DTYPES
    torch = _MODULES.get("torch")
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


def torch_dtype_table() -> dict:
    """{torch dtype: moekit DType} of the torch module in use (moekit._ops' fast path hands it to
    _C.expert_args_torch)."""
    return _torch_dtypes()


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
    if isinstance(x, np.ndarray):
        return
    torch = _MODULES.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(x).__name__}")


def view(name: str, x: Any) -> "_C.TensorView":
    """A TensorView of x (absent when x is None)."""
    if x is None:
        return _C.TensorView()
    torch = torch_module()
    if torch is not None and isinstance(x, torch.Tensor):
        return torch_view(name, x)
    check_array(name, x)
    d = dtype_of(name, x)
    item = x.dtype.itemsize
    strides = []
    for s in x.strides:
        if s % item != 0:
            raise ValueError(f"{name} has byte strides {x.strides} that are not multiples of its {item}-byte elements")
        strides.append(s // item)
    ptr = x.__array_interface__["data"][0] if x.size > 0 else 0
    return _C.TensorView(ptr, d, list(x.shape), strides, _C.DeviceType.kCpu, 0)


_KCPU = _C.DeviceType.kCpu
_KCUDA = _C.DeviceType.kCuda


def torch_view(name: str, x: Any, meta: Optional[list] = None) -> "_C.TensorView":
    """view() of a torch tensor, on the per-call hot path: one dict lookup for the dtype, the
    device from is_cuda / get_device() (no torch.device object), shape and strides handed to the
    binding as the tuples torch returns. Same errors, in the same order, as view(). With `meta`,
    appends view_meta(x) to it."""
    dtype = x.dtype
    d = _torch_dtypes().get(dtype)
    if d is None:
        dtype_of(name, x)  # raises the ValueError naming the argument
    if x.is_cuda:
        dt, di = _KCUDA, x.get_device()
    elif x.device.type == "cpu":
        dt, di = _KCPU, 0
    else:
        raise ValueError(f"{name} is on {x.device}, moekit runs on cpu and cuda tensors")
    shape, strides = x.shape, x.stride()
    if meta is not None:
        meta.append((dtype, shape, strides, di if dt is _KCUDA else -1))
    ptr = x.data_ptr() if x.numel() > 0 else 0
    return _C.TensorView(ptr, d, shape, strides, dt, di)


def view_meta(x: Any):
    """What a TensorView of x holds besides its data pointer (dtype, shape, strides, device), as
    a hashable tuple: the key of moekit._ops' cache of workspace sizes. None for None."""
    if x is None:
        return None
    torch = torch_module()
    if torch is not None and isinstance(x, torch.Tensor):
        return (x.dtype, x.shape, x.stride(), x.get_device())
    return (x.dtype, x.shape, x.strides, -1)


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


_TORCH_DTYPE_NAMES: dict = {}  # torch.dtype -> its name without "torch." (filled as dtypes are seen)


def dtype_name(x: Any) -> str:
    """'bfloat16', 'float8_e4m3fn', ... for numpy and torch alike."""
    if is_numpy(x):
        return x.dtype.name
    d = x.dtype
    name = _TORCH_DTYPE_NAMES.get(d)
    if name is None:
        name = _TORCH_DTYPE_NAMES[d] = str(d).replace("torch.", "")
    return name


_CUDA_FNS: Optional[tuple] = None  # (the torch module, current-device getter, raw-stream getter)


def _cuda_fns():
    """torch's current-device and current-raw-stream getters, looked up once per torch module:
    torch._C's own (one C call each: what torch.cuda.current_device() and
    torch.cuda.current_stream(i).cuda_stream end in) when present, else the public ones."""
    global _CUDA_FNS
    torch = torch_module()
    if _CUDA_FNS is not None and _CUDA_FNS[0] is torch:
        return _CUDA_FNS
    get_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:
        def raw(index):
            return torch.cuda.current_stream(index).cuda_stream
    _CUDA_FNS = (torch, get_device, raw)
    return _CUDA_FNS


def cuda_stream(x: Any) -> int:
    """The current CUDA stream of x's device (0 for host arrays)."""
    if is_numpy(x) or not x.is_cuda:
        return 0
    return _cuda_fns()[2](x.get_device())


def current_cuda_device() -> int:
    """torch's current CUDA device (CUDA is initialized: the caller holds a CUDA tensor)."""
    return _cuda_fns()[1]()


def maybe_view(name: str, x: Optional[Any]):
    return view(name, x)
