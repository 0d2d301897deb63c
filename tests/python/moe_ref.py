"""An independent numpy (float64) model of moekit's numerics (docs/design.md), for the Python tests.

It follows the documented formulas, not the C++ code: activations and intermediates are quantized
exactly as documented (fp32 scales, e4m3 through ml_dtypes, bf16/fp16 rounding), and everything
else is float64, so the only differences from the CPU reference are fp32 summation and the rare
rounding flips they cause.
"""

import ml_dtypes
import numpy as np

FP8_MAX = np.float32(448.0)
MIN_SCALE = np.float32(1.0 / (448.0 * 512.0))
BF16 = np.dtype(ml_dtypes.bfloat16)
FP8 = np.dtype(ml_dtypes.float8_e4m3fn)


def round_act(x, act_dtype):
    return np.asarray(x, np.float32).astype(act_dtype).astype(np.float64)


def dyn_scale(amax):
    return np.maximum(np.float32(amax) / FP8_MAX, MIN_SCALE).astype(np.float32)


def quant(x, s):
    """e4m3(x * (1/s)) as float64 (s fp32, broadcastable)."""
    inv = (np.float32(1.0) / np.asarray(s, np.float32)).astype(np.float32)
    y = (np.asarray(x, np.float32) * inv).astype(np.float32)
    y = np.clip(y, -FP8_MAX, FP8_MAX)
    return y.astype(FP8).astype(np.float64)


def nan_absmax(x, axis=None):
    a = np.abs(np.asarray(x, np.float64))
    a = np.where(np.isnan(a), 0.0, a)
    if a.size == 0:
        return np.float64(0.0) if axis is None else np.zeros(np.delete(a.shape, axis))
    return a.max(axis=axis)


def quant_act(x, scheme, static_scale=None):
    """Quantize-dequantize activations x [rows, C] (float64) per scheme (bf16: identity)."""
    if scheme == "bf16":
        return x
    if scheme == "fp8_per_tensor":
        s = np.float32(static_scale) if static_scale is not None else dyn_scale(nan_absmax(x))
        return quant(x, s) * np.float64(s)
    if scheme == "fp8_per_channel":
        s = dyn_scale(nan_absmax(x, axis=1))[:, None] if x.shape[0] else np.zeros((0, 1), np.float32)
        return quant(x, s) * s.astype(np.float64)
    out = np.empty_like(x)
    C = x.shape[1]
    for g in range(0, C, 128):
        blk = x[:, g:g + 128]
        s = dyn_scale(nan_absmax(blk, axis=1))[:, None] if x.shape[0] else np.zeros((0, 1), np.float32)
        out[:, g:g + 128] = quant(blk, s) * s.astype(np.float64)
    return out


def dequant_weights(q, scale, scheme):
    x = np.asarray(q).astype(np.float64)
    if scheme == "bf16":
        return x
    s = np.asarray(scale, np.float64)
    E, R, C = x.shape
    if scheme == "fp8_per_tensor":
        return x * s.reshape(E)[:, None, None]
    if scheme == "fp8_per_channel":
        return x * s.reshape(E, R)[:, :, None]
    full = np.repeat(np.repeat(s, 128, axis=1), 128, axis=2)[:, :R, :C]
    return x * full


def activation(g, u, kind, alpha=1.702, limit=7.0):
    if kind == "silu":
        return g / (1.0 + np.exp(-g)) * u
    if kind == "gelu":
        from math import erf, sqrt

        verf = np.vectorize(erf)
        return 0.5 * g * (1.0 + verf(g / sqrt(2.0))) * u
    g = np.minimum(g, limit)
    u = np.clip(u, -limit, limit)
    return g / (1.0 + np.exp(-alpha * g)) * (u + 1.0)


def fused_experts(hidden, w13, w2, topk_weights, topk_ids, *, scheme="bf16", w13_scale=None, w2_scale=None,
                  b13=None, b2=None, act="silu", alpha=1.702, limit=7.0, expert_map=None, on_input=False,
                  a13_scale=None, a2_scale=None):
    act_dtype = np.asarray(hidden).dtype
    x = np.asarray(hidden).astype(np.float64)
    M, K = x.shape
    W13 = dequant_weights(w13, w13_scale, scheme)
    W2 = dequant_weights(w2, w2_scale, scheme)
    E, two_n, _ = W13.shape
    N = two_n // 2
    ids = np.asarray(topk_ids).astype(np.int64)
    tw = np.asarray(topk_weights).astype(np.float64)
    k = ids.shape[1] if ids.ndim == 2 else 0
    a = quant_act(x, scheme, a13_scale)
    # Local slots: (m, j, e).
    slots = []
    for m in range(M):
        for j in range(k):
            e = int(ids[m, j])
            if expert_map is not None:
                e = int(expert_map[e])
            if e >= 0:
                slots.append((m, j, e))
    hs = np.zeros((len(slots), N))
    for i, (m, j, e) in enumerate(slots):
        acc = W13[e] @ a[m]
        if on_input:
            acc = acc * np.float32(tw[m, j])
        if b13 is not None:
            acc = acc + np.asarray(b13, np.float64)[e]
        hs[i] = activation(acc[:N], acc[N:], act, alpha, limit)
    if scheme == "bf16":
        a2 = round_act(hs, act_dtype)
    else:
        a2 = quant_act(hs, scheme, a2_scale)
    out = np.zeros((M, K))
    for i, (m, j, e) in enumerate(slots):
        y = W2[e] @ a2[i]
        if b2 is not None:
            y = y + np.asarray(b2, np.float64)[e]
        if not on_input:
            y = y * np.float32(tw[m, j])
        out[m] += y
    return round_act(out, act_dtype)


def _topk(scores, k):
    """Indices of the k largest (descending, ties -> lower index)."""
    order = np.lexsort((np.arange(scores.shape[0]), -scores))
    return order[:k]


def route(logits, k, method="softmax_topk", renormalize=True, num_groups=1, topk_groups=1, scale=1.0, bias=None):
    x = np.asarray(logits).astype(np.float64)
    M, E = x.shape
    ids = np.zeros((M, k), np.int32)
    w = np.zeros((M, k))
    for m in range(M):
        row = x[m]
        if method == "softmax_topk":
            p = np.exp(row - row.max())
            p /= p.sum()
            sel = _topk(p, k)
            ww = p[sel]
            if renormalize:
                ww = ww / ww.sum()
        elif method == "topk_softmax":
            sel = _topk(row, k)
            v = row[sel]
            ww = np.exp(v - v.max())
            ww /= ww.sum()
        else:
            s = 1.0 / (1.0 + np.exp(-row))
            b = s + (np.asarray(bias, np.float64) if bias is not None else 0.0)
            per = E // num_groups
            gscore = np.array([np.sort(b[g * per:(g + 1) * per])[::-1][:2].sum() for g in range(num_groups)])
            keep = _topk(gscore, topk_groups)
            masked = np.full(E, -np.inf)
            for g in keep:
                masked[g * per:(g + 1) * per] = b[g * per:(g + 1) * per]
            sel = _topk(masked, k)
            ww = s[sel]
            if renormalize:
                ww = ww / ww.sum()
            ww = ww * scale
        ids[m] = sel
        w[m] = ww
    return w, ids


def rel_err(got, ref):
    got = np.asarray(got).astype(np.float64)
    ref = np.asarray(ref).astype(np.float64)
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(got - ref) / (denom if denom > 0 else 1.0))
