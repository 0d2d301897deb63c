"""Bad expert ids from Python (moekit/faults.hpp): a topk_ids value outside [0, E_global) or an
expert_map entry outside [0, E) (-1 is valid in both) contributes nothing and is recorded;
moekit.check_faults() raises ValueError naming it, moekit.take_fault() returns it as a dict, and
the debug mode (debug_faults=True or MOEKIT_DEBUG_FAULTS=1) raises from the call. The CPU path runs
everywhere (numpy); the CUDA one needs torch, a GPU and moekit's CUDA backend."""

import numpy as np
import pytest

import moekit
from conftest import BF16, cuda_ready, make_case


@pytest.fixture
def case(rng):
    c = make_case(rng, M=5, E=4, k=2, K=64, N=32)
    c["w13"] = c["w13"].astype(BF16)
    c["w2"] = c["w2"].astype(BF16)
    moekit.take_fault(backend="cpu")  # other tests may have left a fault on purpose
    return c


def run(c, ids=None, **kw):
    ids = c["topk_ids"] if ids is None else ids
    return moekit.fused_experts(c["hidden"], c["w13"], c["w2"], c["topk_weights"], ids, **kw)


def test_api_is_exported():
    for name in ("check_faults", "take_fault"):
        assert name in moekit.__all__ and callable(getattr(moekit, name))
    assert callable(moekit._C.debug_faults_enabled)


def test_good_call_leaves_no_fault(case):
    ids = case["topk_ids"].copy()
    ids[0, 1] = -1  # a masked slot is not a fault
    run(case, ids)
    assert moekit.take_fault(backend="cpu") is None
    moekit.check_faults(backend="cpu")
    moekit.check_faults()  # "auto": the CPU record, then the CUDA one if any call ran there


def test_bad_topk_id_is_recorded_and_contributes_nothing(case):
    ids = case["topk_ids"].copy()
    ids[2, 1] = -1
    masked = run(case, ids).astype(np.float32)
    ids[2, 1] = 99
    got = run(case, ids).astype(np.float32)
    np.testing.assert_array_equal(got, masked)
    f = moekit.take_fault(backend="cpu")
    assert f is not None
    assert (f["tensor"], f["row"], f["slot"], f["value"], f["bound"]) == ("topk_ids", 2, 1, 99, 4)
    assert "topk_ids[2, 1] = 99" in f["message"]
    assert moekit.take_fault(backend="cpu") is None  # read and cleared


def test_check_faults_raises_value_error(case):
    ids = case["topk_ids"].copy()
    ids[3, 0] = -9
    run(case, ids)
    with pytest.raises(ValueError, match=r"topk_ids\[3, 0\] = -9 \(row 3, slot 0\) is outside \[0, E_global=4\)"):
        moekit.check_faults()
    moekit.check_faults()  # cleared by the raise


def test_bad_expert_map_entry(case):
    emap = np.array([0, -1, 1, 7], np.int32)  # E_global = 4 over 2 local experts; entry 3 is bad
    w13, w2 = case["w13"][:2], case["w2"][:2]
    ids = np.array([[0, 1], [2, 3], [1, 0], [2, 0], [1, 2]], np.int32)
    moekit.fused_experts(case["hidden"], w13, w2, case["topk_weights"], ids, expert_map=emap)
    f = moekit.take_fault(backend="cpu")
    assert (f["tensor"], f["row"], f["slot"], f["value"], f["expert"], f["bound"]) == ("expert_map", 1, 1, 7, 3, 2)
    with pytest.raises(ValueError, match=r"expert_map\[3\] = 7"):
        moekit.fused_experts(case["hidden"], w13, w2, case["topk_weights"], ids, expert_map=emap, debug_faults=True)


def test_debug_mode_raises_from_the_call(case, monkeypatch):
    ids = case["topk_ids"].copy()
    ids[4, 1] = 12
    with pytest.raises(ValueError, match=r"topk_ids\[4, 1\] = 12 \(row 4, slot 1\)"):
        run(case, ids, debug_faults=True)
    assert moekit.take_fault(backend="cpu") is None  # raised, not also recorded
    monkeypatch.setenv("MOEKIT_DEBUG_FAULTS", "1")
    assert moekit._C.debug_faults_enabled()
    with pytest.raises(ValueError, match=r"row 4, slot 1"):
        run(case, ids)
    run(case)  # good calls pass in the debug mode
    monkeypatch.setenv("MOEKIT_DEBUG_FAULTS", "0")
    assert not moekit._C.debug_faults_enabled()
    run(case, ids)
    assert moekit.take_fault(backend="cpu")["value"] == 12


def test_fused_moe_bad_expert_map_in_debug_mode(case):
    emap = np.array([0, 1, -1, 5], np.int32)  # id 3's entry is bad
    logits = case["logits"].copy()
    logits[:, 3] = 10.0  # every token routes to id 3 first
    with pytest.raises(ValueError, match=r"expert_map\[3\] = 5 \(for topk_ids\[0, 0\] = 3: row 0, slot 0\)"):
        moekit.fused_moe(case["hidden"], logits, case["w13"][:2], case["w2"][:2], 2, expert_map=emap,
                         debug_faults=True)


# ---- CUDA (torch tensors) ----------------------------------------------------------------------

CUDA_OK, CUDA_WHY = cuda_ready()
gpu = pytest.mark.skipif(not CUDA_OK, reason=f"needs CUDA + moekit's CUDA backend: {CUDA_WHY}")


@gpu
def test_cuda_bad_id_is_recorded_and_debug_mode_raises(case, monkeypatch):
    import torch

    dev = "cuda"
    h = torch.from_numpy(case["hidden"].astype(np.float32)).to(torch.bfloat16).to(dev)
    w13 = torch.from_numpy(case["w13"].astype(np.float32)).to(torch.bfloat16).to(dev)
    w2 = torch.from_numpy(case["w2"].astype(np.float32)).to(torch.bfloat16).to(dev)
    tw = torch.from_numpy(case["topk_weights"]).to(dev)
    ids = torch.from_numpy(case["topk_ids"]).to(dev)
    moekit.fused_experts(h, w13, w2, tw, ids)
    torch.cuda.synchronize()
    moekit.take_fault()  # start clean
    moekit.check_faults()
    bad = ids.clone()
    bad[1, 0] = 1000
    moekit.fused_experts(h, w13, w2, tw, bad)  # the torch op path: nothing raised, nothing waits
    with pytest.raises(ValueError, match=r"topk_ids\[1, 0\] = 1000 \(row 1, slot 0\)"):
        moekit.check_faults(torch.cuda.current_stream())
    assert moekit.take_fault() is None
    with pytest.raises(ValueError, match=r"topk_ids\[1, 0\] = 1000"):
        moekit.fused_experts(h, w13, w2, tw, bad, debug_faults=True)
    monkeypatch.setenv("MOEKIT_DEBUG_FAULTS", "1")
    with pytest.raises(ValueError, match=r"row 1, slot 0"):
        moekit.fused_experts(h, w13, w2, tw, bad)  # through torch.ops.moekit.fused_experts
    moekit.fused_experts(h, w13, w2, tw, ids)


def test_stream_argument_forms():
    # None, an int handle and an object with .cuda_stream all name a stream (CPU record only here).
    moekit.check_faults(None, backend="cpu")
    moekit.check_faults(0, backend="cpu")

    class S:
        cuda_stream = 0

    moekit.check_faults(S(), backend="cpu")
