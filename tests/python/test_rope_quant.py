"""moekit.inv_rope_fp8_quant: the numpy path (CPU reference) against hand-computed bytes and an
independent numpy implementation, the argument errors, and with torch the op's fake
implementation (torch.compile) and, on the GPU machine, the CUDA kernel against the reference
and against the plain-torch version of tools/scripts/rope_quant_bench.py, bit for bit."""

import importlib.util
import pathlib

import ml_dtypes
import numpy as np
import pytest

from conftest import HAS_TORCH, cuda_ready

import moekit

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
ROOT = pathlib.Path(__file__).resolve().parents[2]


def numpy_reference(o, positions, cache, num_groups, packed=False):
    """docs/rope_quant.md in numpy, written apart from the C++ reference (finite inputs)."""
    T, H, D = o.shape
    rope = cache.shape[1]
    nope, half = D - rope, rope // 2
    G, hpg = num_groups, H // num_groups
    y = o.astype(np.float32)
    cs = cache[positions].astype(np.float64)
    c, s = cs[:, None, :half], cs[:, None, half:]
    xe = o[..., nope::2].astype(np.float64)
    xo = o[..., nope + 1::2].astype(np.float64)
    y[..., nope::2] = (xe * c + xo * s).astype(np.float32)
    y[..., nope + 1::2] = (xo * c - xe * s).astype(np.float32)
    yb = y.reshape(T, H, D // 128, 128)
    amax = np.maximum(np.abs(yb).max(axis=-1), np.float32(1e-10)).astype(np.float64)
    k = np.ceil(np.log2(amax / 448.0))
    # log2 of a double may be off by an ulp at exact powers of two: settle k by comparison.
    k = np.where(448.0 * 2.0 ** (k - 1) >= amax, k - 1, k)
    k = np.where(448.0 * 2.0 ** k < amax, k + 1, k).astype(np.int64)
    q = (yb.astype(np.float64) / 2.0 ** k[..., None]).astype(np.float32).astype(E4M3)
    q = q.reshape(T, G, hpg * D).transpose(1, 0, 2).copy()
    Tp = (T + 3) // 4 * 4
    if packed:
        e = (k + 127).reshape(T, H, D // 512, 4).astype(np.uint32)
        word = (e[..., 0] | (e[..., 1] << 8) | (e[..., 2] << 16) | (e[..., 3] << 24)).view(np.int32)
        scale = np.zeros((G, hpg * D // 512, Tp), np.int32)
        scale[..., :T] = word.reshape(T, G, hpg * D // 512).transpose(1, 2, 0)
    else:
        scale = np.zeros((G, hpg * D // 128, Tp), np.float32)
        scale[..., :T] = np.ldexp(1.0, k).astype(np.float32).reshape(T, G, hpg * D // 128).transpose(1, 2, 0)
    return q, scale


def make(T, H, rope=64, max_pos=64, seed=0):
    rng = np.random.default_rng(seed)
    o = (rng.standard_normal((T, H, 512)) * np.exp2(rng.integers(-12, 12, (T, H, 1)))).astype(BF16)
    ang = np.arange(max_pos)[:, None] * 10000.0 ** (-np.arange(0, rope, 2) / rope)[None, :]
    cache = np.concatenate((np.cos(ang), np.sin(ang)), axis=1).astype(np.float32)
    pos = rng.integers(0, max_pos, T).astype(np.int64)
    if T:
        pos[0] = 0
        pos[-1] = max_pos - 1
    return o, pos, cache


def test_worked_example_by_hand():
    o = np.zeros((1, 1, 512), BF16)
    o[0, 0, 0], o[0, 0, 1], o[0, 0, 300], o[0, 0, 384] = 1.0, -3.0, 448.0, 0.5
    o[0, 0, 448], o[0, 0, 449], o[0, 0, 510] = 2.0, 1.0, 1.0
    cache = np.full((2, 64), 9.0, np.float32)  # row 0: garbage, position 1 picks row 1
    cache[1] = 0.0
    cache[1, 0], cache[1, 32], cache[1, 31], cache[1, 63] = 0.5, 0.25, 0.0, 1.0
    q, s = moekit.inv_rope_fp8_quant(o, np.array([1], np.int64), cache)
    b = q.view(np.uint8)[0, 0]
    assert (b[0], b[1], b[300], b[384], b[448], b[449], b[511]) == (0x70, 0xFC, 0x7E, 0x70, 0x7A, 0x00, 0xF8)
    assert np.count_nonzero(b) == 6
    assert s.shape == (1, 4, 4)
    assert list(s[0, :, 0]) == [2.0**-7, 2.0**-42, 1.0, 2.0**-8]
    assert not s[0, :, 1:].any()
    _, w = moekit.inv_rope_fp8_quant(o, np.array([1], np.int64), cache, packed_ue8m0=True)
    assert w.dtype == np.int32 and w.shape == (1, 1, 4)
    assert int(w[0, 0, 0]) & 0xFFFFFFFF == 120 | (85 << 8) | (127 << 16) | (119 << 24)


@pytest.mark.parametrize("T,H,G,packed", [(0, 8, 1, False), (1, 8, 1, False), (5, 16, 2, False), (17, 16, 2, True),
                                          (6, 4, 4, True)])
def test_matches_numpy_implementation(T, H, G, packed):
    o, pos, cache = make(T, H, seed=T + H)
    q, s = moekit.inv_rope_fp8_quant(o, pos, cache, G, packed_ue8m0=packed)
    rq, rs = numpy_reference(o, pos, cache, G, packed)
    assert q.dtype == E4M3 and q.shape == rq.shape
    np.testing.assert_array_equal(q.view(np.uint8), rq.view(np.uint8))
    np.testing.assert_array_equal(s.view(np.uint32), rs.view(np.uint32))


def test_strided_input():
    o, pos, cache = make(7, 8, seed=3)
    wide = np.zeros((7, 8, 640), BF16)
    wide[..., 64:576] = o
    q1, s1 = moekit.inv_rope_fp8_quant(o, pos, cache, 2)
    q2, s2 = moekit.inv_rope_fp8_quant(wide[..., 64:576], pos, cache, 2)
    np.testing.assert_array_equal(q1.view(np.uint8), q2.view(np.uint8))
    np.testing.assert_array_equal(s1, s2)


def test_errors_are_value_errors():
    o, pos, cache = make(3, 8)
    with pytest.raises(ValueError, match="num_groups is 3"):
        moekit.inv_rope_fp8_quant(o, pos, cache, 3)
    with pytest.raises(ValueError, match="positions\\[1\\] is 64, outside the 64 rows"):
        moekit.inv_rope_fp8_quant(o, np.array([0, 64, 1], np.int64), cache)
    with pytest.raises(ValueError, match="o has dtype fp32, expected bf16"):
        moekit.inv_rope_fp8_quant(o.astype(np.float32), pos, cache)
    with pytest.raises(ValueError, match="positions has dtype int32, expected int64"):
        moekit.inv_rope_fp8_quant(o, pos.astype(np.int32), cache)


# ---- torch ----

torch_only = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
CUDA_OK, CUDA_WHY = cuda_ready() if HAS_TORCH else (False, "torch is not installed")
gpu = pytest.mark.skipif(not CUDA_OK, reason=f"needs CUDA + moekit's CUDA backend: {CUDA_WHY}")


def load_bench_script():
    spec = importlib.util.spec_from_file_location("rope_quant_bench", ROOT / "tools" / "scripts" / "rope_quant_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torch_inputs(T, H, device, seed=0):
    import torch

    o, pos, cache = make(T, H, seed=seed)
    return (torch.from_numpy(o.view(np.uint16).astype(np.int16)).view(torch.bfloat16).to(device),
            torch.from_numpy(pos).to(device), torch.from_numpy(cache).to(device))


@torch_only
def test_torch_cpu_op_and_fake_shapes():
    import torch

    o, pos, cache = torch_inputs(5, 16, "cpu")
    q, s = torch.ops.moekit.inv_rope_fp8_quant(o, pos, cache, 2, False)
    assert q.dtype == torch.float8_e4m3fn and tuple(q.shape) == (2, 5, 4096)
    assert s.dtype == torch.float32 and tuple(s.shape) == (2, 32, 8)
    rq, rs = numpy_reference(o.view(torch.int16).numpy().view(BF16), pos.numpy(), cache.numpy(), 2)
    np.testing.assert_array_equal(q.view(torch.uint8).numpy(), rq.view(np.uint8))
    np.testing.assert_array_equal(s.numpy(), rs)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fo, fp, fc = mode.from_tensor(o), mode.from_tensor(pos), mode.from_tensor(cache)
        fq, fs = torch.ops.moekit.inv_rope_fp8_quant(fo, fp, fc, 2, True)
        assert tuple(fq.shape) == (2, 5, 4096) and fq.dtype == torch.float8_e4m3fn
        assert tuple(fs.shape) == (2, 8, 8) and fs.dtype == torch.int32


@torch_only
def test_torch_bench_baseline_matches_reference_on_cpu():
    import torch

    bench = load_bench_script()
    o, pos, cache = torch_inputs(9, 16, "cpu", seed=4)
    for packed in (False, True):
        q1, s1 = torch.ops.moekit.inv_rope_fp8_quant(o, pos, cache, 2, packed)
        q2, s2 = bench.torch_inv_rope_fp8_quant(o, pos, cache, 2, packed)
        assert torch.equal(q1.view(torch.uint8), q2.view(torch.uint8))
        assert torch.equal(s1.view(torch.int32), s2.view(torch.int32))


@gpu
@pytest.mark.parametrize("T,H,G", [(1, 8, 1), (17, 16, 2), (4097, 16, 2)])
def test_cuda_matches_cpu_bit_for_bit(T, H, G):
    import torch

    o, pos, cache = torch_inputs(T, H, "cuda", seed=T)
    for packed in (False, True):
        q, s = moekit.inv_rope_fp8_quant(o, pos, cache, G, packed_ue8m0=packed)
        rq, rs = moekit.inv_rope_fp8_quant(o.cpu(), pos.cpu(), cache.cpu(), G, packed_ue8m0=packed)
        assert torch.equal(q.view(torch.uint8).cpu(), rq.view(torch.uint8))
        assert torch.equal(s.view(torch.int32).cpu(), rs.view(torch.int32))


@gpu
def test_cuda_compile_and_graph():
    import torch

    o, pos, cache = torch_inputs(33, 16, "cuda", seed=2)
    eager = torch.ops.moekit.inv_rope_fp8_quant(o, pos, cache, 2, False)
    compiled = torch.compile(lambda a, b, c: torch.ops.moekit.inv_rope_fp8_quant(a, b, c, 2, False), fullgraph=True)
    got = compiled(o, pos, cache)
    assert torch.equal(got[0].view(torch.uint8), eager[0].view(torch.uint8)) and torch.equal(got[1], eager[1])
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        cap = torch.ops.moekit.inv_rope_fp8_quant(o, pos, cache, 2, False)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(cap[0].view(torch.uint8), eager[0].view(torch.uint8)) and torch.equal(cap[1], eager[1])
