#!/usr/bin/env python3
"""The Python share of an eager moekit call's host time, on a machine without torch or a GPU.

A stand-in `torch` module (a tensor class with the attributes moekit reads: dtype, shape,
stride(), is_cuda, get_device(), device, data_ptr(), numel(), to(); torch.empty; the CUDA
current-device / current-stream getters; torch.cuda.device) is put in sys.modules, the CUDA
entry points of moekit._C are replaced by no-ops (_C.fused_experts does nothing,
_C.workspace_size and _C.workspace_need return 1 MiB; _C.describe is the real one: validation
runs), and the calls of
tools/scripts/host_overhead.py's `fused_experts` and `impl` levels are timed on "CUDA" tensors of
the qwen3-30b-a3b TP8 shape. What it measures is moekit's Python between the public call and the
binding: argument checks, the TensorViews, describe, the workspace, the stream and device lookups.
The stand-in's methods are Python functions where torch's are C, torch.empty costs nothing here,
and no torch dispatcher runs (MOEKIT_NO_TORCH=1): indicative only, for comparing two versions of
moekit's Python on one machine. The H200 numbers come from tools/scripts/host_overhead.py.

    python3 tools/scripts/host_overhead_stub.py --pythonpath /tmp/stage_old    # a staged moekit
    python3 tools/scripts/host_overhead_stub.py --pythonpath /tmp/stage_new --json stub.json

--pythonpath DIR: a directory holding a moekit package (its .py files and a built _C).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import types


def make_torch():
    torch = types.ModuleType("torch")

    class dtype:
        __slots__ = ("name", "itemsize")

        def __init__(self, name, itemsize):
            self.name, self.itemsize = name, itemsize

        def __repr__(self):
            return "torch." + self.name

    for name, size in (("bfloat16", 2), ("float16", 2), ("float32", 4), ("int32", 4), ("int64", 8),
                       ("uint8", 1), ("float8_e4m3fn", 1)):
        setattr(torch, name, dtype(name, size))
    torch.float = torch.float32

    class device:
        __slots__ = ("type", "index")

        def __init__(self, type_, index=None):
            self.type, self.index = type_, index

        def __eq__(self, other):
            return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

        def __hash__(self):
            return hash((self.type, self.index))

        def __str__(self):
            return self.type if self.index is None else f"{self.type}:{self.index}"

    class Size(tuple):
        pass

    next_ptr = [1 << 32]

    class Tensor:
        __slots__ = ("dtype", "shape", "_stride", "is_cuda", "_index", "_ptr", "_numel", "requires_grad")

        def __init__(self, shape, dt, index=0):
            self.dtype = dt
            self.shape = Size(shape)
            st, acc = [], 1
            for s in reversed(shape):
                st.append(acc)
                acc *= s
            self._stride = tuple(reversed(st))
            self._numel = acc
            self.is_cuda = index >= 0
            self._index = index
            self._ptr = next_ptr[0]
            next_ptr[0] += (acc * dt.itemsize + 511) // 256 * 256
            self.requires_grad = False

        @property
        def device(self):
            return device("cuda", self._index) if self.is_cuda else device("cpu")

        def stride(self):
            return self._stride

        def get_device(self):
            return self._index if self.is_cuda else -1

        def data_ptr(self):
            return self._ptr

        def numel(self):
            return self._numel

        def element_size(self):
            return self.dtype.itemsize

        def dim(self):
            return len(self.shape)

        def contiguous(self):
            return self

        def to(self, dt):
            return self if dt is self.dtype else Tensor(tuple(self.shape), dt, self._index)

        def float(self):
            return self.to(torch.float32)

        def reshape(self, *shape):
            return self

    torch.Tensor, torch.device, torch.Size = Tensor, device, Size

    def empty(shape, dtype=None, device=None):
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        index = -1 if device is None or device.type == "cpu" else (device.index or 0)
        return Tensor(shape, dtype, index)

    torch.empty = empty
    current = [0]

    class _CudaDevice:
        def __init__(self, d):
            self.idx = d if isinstance(d, int) else d.index

        def __enter__(self):
            self.prev, current[0] = current[0], self.idx

        def __exit__(self, *exc):
            current[0] = self.prev
            return False

    class _Stream:
        __slots__ = ("cuda_stream",)

        def __init__(self, handle):
            self.cuda_stream = handle

    cuda = types.ModuleType("torch.cuda")
    cuda.device = _CudaDevice
    cuda.current_device = lambda: current[0]
    cuda.current_stream = lambda d=None: _Stream(0)
    cuda.is_available = lambda: True
    cuda.is_initialized = lambda: True
    torch.cuda = cuda
    torch._C = types.ModuleType("torch._C")
    torch._C._cuda_getDevice = lambda: current[0]
    torch._C._cuda_getCurrentRawStream = lambda index: 0
    return torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pythonpath", default=None, help="put this directory first on sys.path (a staged moekit)")
    ap.add_argument("--tokens", default="1,8,64")
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds; the median per-call time of each is kept, the best reported")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.pythonpath:
        sys.path.insert(0, args.pythonpath)
    os.environ["MOEKIT_NO_TORCH"] = "1"  # no torch dispatcher here: moekit.fused_experts calls the impl
    torch = make_torch()
    sys.modules["torch"] = torch
    import moekit
    from moekit import _C, _ops

    _C.fused_experts = lambda *a, **k: None
    _C.workspace_size = lambda problem, backend="cuda": 1 << 20
    # describe + a fixed size, as the C++ call does describe + workspace_size (a moekit without it
    # asks _C.workspace_size(_C.describe(args)) instead).
    _C.workspace_need = lambda args: (_C.describe(args), 1 << 20)[1]
    E, k, K, N = 128, 8, 2048, 96  # qwen3-30b-a3b at TP8
    rows = []
    print(f"moekit from {os.path.dirname(moekit.__file__)}")
    print(f"{'level':<22} {'M':>4} {'us/call':>9}")
    for M in (int(t) for t in args.tokens.split(",")):
        x = torch.Tensor((M, K), torch.bfloat16)
        w13 = torch.Tensor((E, 2 * N, K), torch.bfloat16)
        w2 = torch.Tensor((E, K, N), torch.bfloat16)
        tw = torch.Tensor((M, k), torch.float32)
        ids = torch.Tensor((M, k), torch.int32)
        ids64 = torch.Tensor((M, k), torch.int64)
        levels = {
            "fused_experts": lambda: moekit.fused_experts(x, w13, w2, tw, ids, scheme="bf16"),
            "fused_experts_int64": lambda: moekit.fused_experts(x, w13, w2, tw, ids64),
            "impl": lambda: _ops.fused_experts_impl(x, w13, w2, tw, ids, scheme="bf16"),
        }
        for name, fn in levels.items():
            fn()
            best = None
            for _ in range(args.repeats):
                t0 = time.perf_counter_ns()
                for _ in range(args.iters):
                    fn()
                us = (time.perf_counter_ns() - t0) / 1e3 / args.iters
                best = us if best is None else min(best, us)
            rows.append({"level": name, "tokens": M, "us_per_call": best})
            print(f"{name:<22} {M:>4} {best:>9.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"moekit": os.path.dirname(moekit.__file__), "python": sys.version.split()[0],
                       "note": "stand-in torch, stubbed CUDA entry points: indicative only", "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
