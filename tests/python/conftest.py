"""Shared fixtures of moekit's Python suite: random MoE cases and the availability of torch,
CUDA and transformers (tests that need them are marked and skipped without them)."""

import importlib.util

import ml_dtypes
import numpy as np
import pytest

BF16 = np.dtype(ml_dtypes.bfloat16)

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None


def cuda_ready():
    """(ok, why): torch with a CUDA device and a moekit build whose CUDA backend can run on it."""
    if not HAS_TORCH:
        return False, "torch is not installed"
    import torch

    import moekit

    if not torch.cuda.is_available():
        return False, "no CUDA device"
    ok, why = moekit.cuda_available()
    return ok, why


def make_case(rng, M=7, E=5, k=2, K=96, N=48, dtype=BF16, wscale=0.08):
    hidden = rng.standard_normal((M, K)).astype(dtype)
    w13 = (rng.standard_normal((E, 2 * N, K)) * wscale).astype(np.float32)
    w2 = (rng.standard_normal((E, K, N)) * wscale).astype(np.float32)
    logits = rng.standard_normal((M, E)).astype(np.float32)
    # Distinct experts per token, random weights.
    ids = np.array([rng.permutation(E)[:k] for _ in range(M)], dtype=np.int32).reshape(M, k)
    w = rng.random((M, k)).astype(np.float32) + 0.1
    return dict(hidden=hidden, w13=w13, w2=w2, logits=logits, topk_ids=ids, topk_weights=w)


@pytest.fixture
def rng():
    return np.random.default_rng(20261129)
