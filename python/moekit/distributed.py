"""Tensor and expert parallelism from Python, over a torch.distributed process group.

    import torch.distributed as dist
    import moekit.distributed as mkd
    dist.init_process_group("nccl")        # or "gloo" with CPU tensors (moekit's CPU reference)
    # tensor parallel: every rank holds every expert, with N / tp of the intermediate size
    s = mkd.shard_tp(w13, w2, tp_size=dist.get_world_size(), tp_rank=dist.get_rank())
    out = mkd.tp_fused_moe(hidden, logits, s.w1, s.w2, top_k, w1_bias=s.w1_bias, w2_bias=s.w2_bias)
    # expert parallel: experts in contiguous ranges, each rank with its own tokens
    s = mkd.shard_ep(w13, w2, ep_size=dist.get_world_size(), ep_rank=dist.get_rank())
    out = mkd.ep_fused_moe(my_hidden, my_logits, s.w1, s.w2, top_k)

The layouts are those of the C++ API (include/moekit/parallel.hpp, docs/parallel.md); the
sharding helpers cut numpy arrays and torch tensors (CPU or CUDA) and equal the C++ helpers
(moekit._C.shard_experts_tp / shard_experts_ep) element for element. The collectives go through
torch.distributed, so any backend works: NCCL for CUDA tensors, gloo for CPU tensors. With NCCL,
torch orders each collective after the work already queued on the current stream and makes the
current stream wait for it, so the ops behave as if they ran on the current stream.

moekit never enables NVLink SHARP / multicast: keep NCCL_NVLS_ENABLE=0 in the environment of
every rank on shared GPU hosts (set it in your launcher, before init_process_group).
"""

from __future__ import annotations

import math
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

import moekit

from . import _C
from . import _ops
from . import _tensors as T

__all__ = [
    "Shard",
    "expert_range",
    "expert_map",
    "expert_owner_table",
    "shard_tp",
    "shard_ep",
    "tp_fused_experts",
    "tp_fused_moe",
    "ep_fused_experts",
    "ep_fused_moe",
]

BLOCK = 128  # fp8_block128: 128x128 weight scale blocks


class Shard(NamedTuple):
    """One rank's expert weights, in the argument names of moekit.fused_experts / fused_moe.

    Absent tensors are None (no scales for bf16; no bias; w2_bias on tensor-parallel ranks > 0).
    first_expert / num_experts: the global ids [first_expert, first_expert + num_experts) the rank
    holds (expert parallel); (0, E) for tensor parallel shards.
    """

    w1: Any
    w2: Any
    w1_scale: Any = None
    w2_scale: Any = None
    w1_bias: Any = None
    w2_bias: Any = None
    scheme: str = "bf16"
    first_expert: int = 0
    num_experts: int = 0

    def kwargs(self) -> dict:
        """The optional tensors as keyword arguments of fused_experts / fused_moe / tp_ / ep_ ops."""
        return dict(scheme=self.scheme, w1_scale=self.w1_scale, w2_scale=self.w2_scale, w1_bias=self.w1_bias,
                    w2_bias=self.w2_bias)


# ---------------------------------------------------------------------------------------------
# Expert layout (mirrors expert_range_for_rank / expert_map_for_rank / expert_owner in C++)

def _check_layout(num_experts: int, ep_size: int, rank: Optional[int] = None) -> None:
    if num_experts < 1:
        raise ValueError(f"num_experts={num_experts} must be >= 1")
    if ep_size < 1:
        raise ValueError(f"ep_size={ep_size} must be >= 1")
    if rank is not None and not 0 <= rank < ep_size:
        raise ValueError(f"rank={rank} is outside [0, ep_size={ep_size})")


def expert_range(num_experts: int, ep_size: int, rank: int) -> Tuple[int, int]:
    """(first, count): the experts rank `rank` of `ep_size` owns. Contiguous ranges, the first
    num_experts % ep_size ranks one expert larger (vLLM's layout); count is 0 when ep_size > E."""
    num_experts, ep_size, rank = int(num_experts), int(ep_size), int(rank)
    _check_layout(num_experts, ep_size, rank)
    base, rem = divmod(num_experts, ep_size)
    return rank * base + min(rank, rem), base + (1 if rank < rem else 0)


def expert_map(num_experts: int, ep_size: int, rank: int, device: Any = None) -> Any:
    """The expert_map of `rank`: int32 [E], global id -> local id for the rank's range, -1 elsewhere.
    A torch tensor on `device` (default CPU)."""
    return _map_tensor(num_experts, ep_size, rank, device)


def _map_tensor(num_experts: int, ep_size: int, rank: int, device: Any) -> Any:
    # (ep_fused_experts has an argument named expert_map.)
    torch = _torch()
    first, count = expert_range(num_experts, ep_size, rank)
    m = torch.full((int(num_experts),), -1, dtype=torch.int32)
    m[first:first + count] = torch.arange(count, dtype=torch.int32)
    return m if device is None else m.to(device)


def expert_owner_table(num_experts: int, ep_size: int, device: Any = None) -> Any:
    """int64 [E]: the rank owning each expert under expert_range (the contiguous layout)."""
    torch = _torch()
    _check_layout(int(num_experts), int(ep_size))
    owner = torch.empty(int(num_experts), dtype=torch.int64)
    for r in range(int(ep_size)):
        first, count = expert_range(num_experts, ep_size, r)
        owner[first:first + count] = r
    return owner if device is None else owner.to(device)


# ---------------------------------------------------------------------------------------------
# Sharding helpers (numpy arrays or torch tensors; mirror shard_experts_tp / shard_experts_ep)

def _torch():
    import torch  # noqa: PLC0415

    return torch


def _cat_ranges(x: Any, dim: int, ranges: Sequence[Tuple[int, int]]) -> Any:
    """Rows [a, a + n) for each (a, n) of `ranges`, in order, along `dim`; a new contiguous array."""
    if T.is_numpy(x):
        parts = [x[(slice(None),) * dim + (slice(a, a + n),)] for a, n in ranges]
        return np.ascontiguousarray(np.concatenate(parts, axis=dim))
    torch = _torch()
    return torch.cat([x.narrow(dim, a, n) for a, n in ranges], dim=dim).contiguous()


def _copy(x: Any) -> Any:
    if x is None:
        return None
    return np.array(x, copy=True) if T.is_numpy(x) else x.clone()


def _shape(x: Any) -> List[int]:
    return [int(d) for d in x.shape]


def _check_weights(w1: Any, w2: Any, w1_scale, w2_scale, w1_bias, w2_bias, scheme, block_shape):
    for name, x in (("w1", w1), ("w2", w2)):
        T.check_array(name, x)
    for name, x in (("w1_scale", w1_scale), ("w2_scale", w2_scale), ("w1_bias", w1_bias), ("w2_bias", w2_bias)):
        if x is not None:
            T.check_array(name, x)
    if len(w1.shape) != 3:
        raise ValueError(f"w1 has shape {_shape(w1)}, expected [E, 2N, K]")
    E, two_n, K = _shape(w1)
    if two_n % 2:
        raise ValueError(f"w1 has shape {_shape(w1)}: 2N={two_n} is odd")
    N = two_n // 2
    if _shape(w2) != [E, K, N]:
        raise ValueError(f"w2 has shape {_shape(w2)}, expected [E={E}, K={K}, N={N}] (from w1 {_shape(w1)})")
    scheme = _ops.resolve_scheme(scheme, w1, w1_scale, block_shape)
    if scheme != "bf16" and (w1_scale is None or w2_scale is None):
        raise ValueError(f"scheme {scheme} needs w1_scale and w2_scale")
    if w1_bias is not None and _shape(w1_bias) != [E, two_n]:
        raise ValueError(f"w1_bias has shape {_shape(w1_bias)}, expected [E={E}, 2N={two_n}]")
    if w2_bias is not None and _shape(w2_bias) != [E, K]:
        raise ValueError(f"w2_bias has shape {_shape(w2_bias)}, expected [E={E}, K={K}]")
    return scheme, E, N, K


def shard_tp(w1: Any, w2: Any, tp_size: int, tp_rank: int, *, scheme: Optional[str] = None, w1_scale=None,
             w2_scale=None, w1_bias=None, w2_bias=None, block_shape: Optional[Sequence[int]] = None) -> Shard:
    """Cut full expert weights for rank `tp_rank` of `tp_size` along the intermediate size N.

    With n = N / tp_size: w1 (w13 [E, 2N, K]) keeps gate rows [r*n, (r+1)*n) then up rows
    [N + r*n, N + (r+1)*n); w2 [E, K, N] columns [r*n, (r+1)*n); w1_bias [E, 2N] the same rows as
    w1; w2_bias [E, K] rank 0 only (None elsewhere: the sum over ranks adds it once). Scales:
    fp8_per_tensor copied; fp8_per_channel w1_scale ([E, 2N] or [E, 2N, 1]) sliced like w1's rows
    and w2_scale copied; fp8_block128 block rows of w1_scale, block columns of w2_scale (needs
    n % 128 == 0, else NotImplementedError). Copies (new contiguous arrays), same container and
    device as the inputs. Equals moekit's C++ shard_experts_tp.
    """
    scheme, E, N, K = _check_weights(w1, w2, w1_scale, w2_scale, w1_bias, w2_bias, scheme, block_shape)
    tp_size, tp_rank = int(tp_size), int(tp_rank)
    if tp_size < 1:
        raise ValueError(f"tp_size={tp_size} must be >= 1")
    if not 0 <= tp_rank < tp_size:
        raise ValueError(f"tp_rank={tp_rank} is outside [0, tp_size={tp_size})")
    if N % tp_size:
        raise ValueError(f"w1 has shape {_shape(w1)}: N={N} is not divisible by tp_size={tp_size}")
    n = N // tp_size
    r0 = tp_rank * n
    if scheme == "fp8_block128" and n % BLOCK:
        raise NotImplementedError(
            f"fp8_block128 tensor parallelism needs N/tp_size to be a multiple of 128 (whole 128x128 scale "
            f"blocks per rank), but N={N} / tp_size={tp_size} = {n}")
    rows = [(r0, n), (N + r0, n)]
    s1 = s2 = None
    if scheme == "fp8_per_tensor":
        s1, s2 = _copy(w1_scale), _copy(w2_scale)
    elif scheme == "fp8_per_channel":
        s1, s2 = _cat_ranges(w1_scale, 1, rows), _copy(w2_scale)  # w2: one scale per output row of K
    elif scheme == "fp8_block128":
        s1 = _cat_ranges(w1_scale, 1, [(r0 // BLOCK, n // BLOCK), ((N + r0) // BLOCK, n // BLOCK)])
        s2 = _cat_ranges(w2_scale, 2, [(r0 // BLOCK, n // BLOCK)])
    return Shard(
        w1=_cat_ranges(w1, 1, rows),
        w2=_cat_ranges(w2, 2, [(r0, n)]),
        w1_scale=s1,
        w2_scale=s2,
        w1_bias=None if w1_bias is None else _cat_ranges(w1_bias, 1, rows),
        # b2 is added after GEMM2, once per output: on rank 0 only, so the all-reduce adds it once.
        w2_bias=_copy(w2_bias) if tp_rank == 0 else None,
        scheme=scheme,
        first_expert=0,
        num_experts=E,
    )


def shard_ep(w1: Any, w2: Any, ep_size: int, ep_rank: int, *, scheme: Optional[str] = None, w1_scale=None,
             w2_scale=None, w1_bias=None, w2_bias=None, block_shape: Optional[Sequence[int]] = None) -> Shard:
    """The experts expert_range(E, ep_size, ep_rank) of full weights: every tensor (scales and both
    biases included) sliced along E. ValueError when the rank owns no expert (E < ep_size).
    Equals moekit's C++ shard_experts_ep."""
    scheme, E, N, K = _check_weights(w1, w2, w1_scale, w2_scale, w1_bias, w2_bias, scheme, block_shape)
    first, count = expert_range(E, ep_size, ep_rank)
    if count == 0:
        raise ValueError(f"ep_rank={ep_rank} of ep_size={ep_size} owns no expert (E={E} < ep_size)")

    def cut(x):
        if x is None:
            return None
        return _cat_ranges(x, 0, [(first, count)])

    return Shard(w1=cut(w1), w2=cut(w2), w1_scale=cut(w1_scale), w2_scale=cut(w2_scale), w1_bias=cut(w1_bias),
                 w2_bias=cut(w2_bias), scheme=scheme, first_expert=first, num_experts=count)


def _cpp_shard(kind: str, w1: Any, w2: Any, size: int, rank: int, *, scheme: Optional[str] = None, w1_scale=None,
               w2_scale=None, w1_bias=None, w2_bias=None) -> dict:
    """The C++ helper's result (shard_experts_tp / shard_experts_ep on host memory) as
    {"w1", "w2", "w1_scale", "w2_scale", "w1_bias", "w2_bias": torch CPU tensor or None}: the
    oracle the tests compare shard_tp / shard_ep with."""
    torch = _torch()
    from ._quant import _torch_dtype  # noqa: PLC0415

    scheme, E, _, _ = _check_weights(w1, w2, w1_scale, w2_scale, w1_bias, w2_bias, scheme, None)
    host = lambda x: None if x is None else T.contiguous(x.cpu() if T.is_torch(x) else x)  # noqa: E731
    keep = _ops._Keep()
    w = _C.ExpertWeights()
    w.w13 = keep.view("w1", host(w1))
    w.w2 = keep.view("w2", host(w2))
    w.w13_scale = keep.view("w1_scale", host(_ops._weight_scale("w1_scale", w1_scale, scheme, E, int(w1.shape[1]))))
    w.w2_scale = keep.view("w2_scale", host(_ops._weight_scale("w2_scale", w2_scale, scheme, E, int(w2.shape[1]))))
    w.b13 = keep.view("w1_bias", host(w1_bias))
    w.b2 = keep.view("w2_bias", host(w2_bias))
    fn = _C.shard_experts_tp if kind == "tp" else _C.shard_experts_ep
    got = fn(w, _C.parse_scheme(scheme), int(size), int(rank))
    names = {"w13": "w1", "w2": "w2", "w13_scale": "w1_scale", "w2_scale": "w2_scale", "b13": "w1_bias",
             "b2": "w2_bias"}
    out = {v: None for v in names.values()}
    for key, (dt, shape, data) in got.items():
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8) if len(data) else torch.empty(0, dtype=torch.uint8)
        out[names[key]] = t.view(_torch_dtype(dt)).reshape(shape)
    return out


# ---------------------------------------------------------------------------------------------
# Collectives

def _dist():
    import torch.distributed as dist  # noqa: PLC0415

    return dist


def _pop_inplace(kwargs: dict, hidden_states: Any):
    inplace = bool(kwargs.pop("inplace", False))
    out = kwargs.pop("out", None)
    return inplace, out


def _finish(result: Any, hidden_states: Any, inplace: bool, out: Any) -> Any:
    if out is not None:
        out.copy_(result)
        result = out
    if inplace:
        hidden_states.copy_(result)
        result = hidden_states
    return result


def tp_fused_experts(hidden_states, w1, w2, topk_weights, topk_ids, *, group=None, **kwargs):
    """Tensor parallel fused_experts: this rank's shard (shard_tp) of the op, then an in-place
    torch.distributed.all_reduce(SUM) of the output over `group`. Every rank passes the same
    hidden_states and routing and gets the full output [M, K]. Other arguments as
    moekit.fused_experts (pass this rank's w1_scale / w2_scale / w1_bias / w2_bias from shard_tp).

    The all-reduce sums in the output dtype (bf16 partials, as the C++ tp_fused_experts does).
    """
    inplace, out = _pop_inplace(kwargs, hidden_states)
    result = moekit.fused_experts(hidden_states, w1, w2, topk_weights, topk_ids, **kwargs)
    _dist().all_reduce(result, op=_dist().ReduceOp.SUM, group=group)
    return _finish(result, hidden_states, inplace, out)


def tp_fused_moe(hidden_states, router_logits, w1, w2, top_k: int, *, group=None, return_routing: bool = False,
                 **kwargs):
    """Tensor parallel fused_moe: route + this rank's shard of the experts, then an in-place
    all_reduce(SUM) of the output over `group` (see tp_fused_experts). Every rank passes the same
    hidden_states and router_logits; with return_routing=True returns (out, topk_weights, topk_ids)."""
    inplace, out = _pop_inplace(kwargs, hidden_states)
    result = moekit.fused_moe(hidden_states, router_logits, w1, w2, top_k, return_routing=return_routing, **kwargs)
    y = result[0] if return_routing else result
    _dist().all_reduce(y, op=_dist().ReduceOp.SUM, group=group)
    y = _finish(y, hidden_states, inplace, out)
    return (y, result[1], result[2]) if return_routing else y


def _owner_from_maps(local_map: Any, group) -> Any:
    """int64 [E]: the group rank owning each expert, from every rank's expert_map (all_gather);
    -1 for an expert no rank owns. ValueError when two ranks claim the same expert."""
    torch = _torch()
    dist = _dist()
    ep = dist.get_world_size(group)
    maps = [torch.empty_like(local_map) for _ in range(ep)]
    dist.all_gather(maps, local_map.contiguous(), group=group)
    owned = torch.stack(maps) >= 0  # [ep, E]
    claims = owned.sum(0)
    if bool((claims > 1).any()):
        e = int(torch.nonzero(claims > 1)[0, 0])
        raise ValueError(f"expert {e} is in the expert_map of {int(claims[e])} ranks, expected at most one")
    owner = torch.where(claims > 0, owned.to(torch.int64).argmax(0), torch.full_like(claims, -1, dtype=torch.int64))
    return owner


def _bytes(x: Any) -> Any:
    """[rows, C] -> its bytes as uint8 [rows, C * element size]: the exchanges move bits, in a dtype
    every backend carries (gloo has no int16, some builds no bf16), with the same row splits."""
    torch = _torch()
    return x.contiguous().view(torch.uint8)


def ep_fused_experts(hidden_states, w1, w2, topk_weights, topk_ids, *, num_experts: Optional[int] = None,
                     group=None, expert_map=None, expert_owner=None, **kwargs):
    """Expert parallel fused_experts over `group` (ep_size = its size): each rank passes its own
    tokens (hidden_states [M, K], topk_weights / topk_ids [M, k] with global expert ids; M may
    differ between ranks and may be 0) and its local experts (w1 [E_local, 2N, K], ...).

    Which rank owns which expert:
    - default: the contiguous layout of expert_range(num_experts, ep_size, rank) (shard_ep's);
      num_experts (E_global) is then required;
    - expert_map ([E_global] int, global id -> local id, -1 for remote experts): any partition;
      the owners are found with one all_gather of the maps per call, unless expert_owner ([E_global]
      int, the group rank owning each id: e.g. computed once from the maps) is given too.

    Protocol (torch.distributed.all_to_all_single, any backend): every token goes once to each rank
    owning at least one of its experts, with its k ids and weights; the receiving rank runs
    moekit.fused_experts on the rows it received with its expert_map (so it adds exactly its own
    experts' slots, in slot order) and sends the partial outputs back; the source sums the partials
    in fp32 in ascending rank order and rounds once to the activation dtype: identical run to run.
    Messages: the counts (one int64 per peer), then the rows, their ids + weights (one int32
    message) and the partial outputs back, with the real sizes: one host sync on the counts (so
    not CUDA-graph capturable). Other arguments as moekit.fused_experts; weights, scales and biases
    are the local experts' (shard_ep).
    """
    torch = _torch()
    dist = _dist()
    inplace, out = _pop_inplace(kwargs, hidden_states)
    for name, x in (("hidden_states", hidden_states), ("topk_weights", topk_weights), ("topk_ids", topk_ids)):
        if not T.is_torch(x):
            raise TypeError(f"{name} must be a torch tensor (ep_fused_experts exchanges it with torch.distributed)")
    ep = dist.get_world_size(group)
    rank = dist.get_rank(group)
    dev = hidden_states.device
    if len(hidden_states.shape) != 2:
        raise ValueError(f"hidden_states has shape {_shape(hidden_states)}, expected [M, K]")
    M, K = _shape(hidden_states)
    if len(topk_ids.shape) != 2 or int(topk_ids.shape[0]) != M or _shape(topk_weights) != _shape(topk_ids):
        raise ValueError(f"topk_ids {_shape(topk_ids)} and topk_weights {_shape(topk_weights)} must both be "
                         f"[M={M}, k]")
    k = int(topk_ids.shape[1])

    # Ownership.
    if expert_map is not None:
        local_map = expert_map.to(device=dev, dtype=torch.int32)
        E = int(local_map.shape[0])
        if num_experts is not None and int(num_experts) != E:
            raise ValueError(f"num_experts={num_experts} but expert_map has {E} entries")
        owner = (expert_owner.to(device=dev, dtype=torch.int64) if expert_owner is not None
                 else _owner_from_maps(local_map, group))
    else:
        if num_experts is None:
            raise ValueError("ep_fused_experts needs num_experts (E_global) or an expert_map")
        E = int(num_experts)
        first, count = expert_range(E, ep, rank)
        if int(w1.shape[0]) != count:
            raise ValueError(f"w1 has shape {_shape(w1)}, but rank {rank} of {ep} owns the {count} experts "
                             f"[{first}, {first + count}) of E={E} (moekit.distributed.shard_ep)")
        local_map = _map_tensor(E, ep, rank, dev)
        owner = (expert_owner.to(device=dev, dtype=torch.int64) if expert_owner is not None
                 else expert_owner_table(E, ep, dev))
    if int(owner.shape[0]) != E:
        raise ValueError(f"expert_owner has {int(owner.shape[0])} entries, expected E={E}")

    # Dispatch plan: token m goes to rank d when one of its slots' experts is d's. (d, m) pairs in
    # ascending d, then m: that is the send order, and the order the partials come back in.
    ids = topk_ids.to(device=dev, dtype=torch.int64)
    valid = (ids >= 0) & (ids < E)
    dest = torch.where(valid, owner[ids.clamp(0, max(E - 1, 0))], torch.full_like(ids, -1))  # [M, k]
    peers = torch.arange(ep, device=dev, dtype=torch.int64)
    to_peer = (dest.unsqueeze(0) == peers.view(ep, 1, 1)).any(dim=2)  # [ep, M]
    send_counts = to_peer.sum(dim=1)  # [ep] int64
    _, send_rows = torch.nonzero(to_peer, as_tuple=True)  # row-major: grouped by d, m ascending

    # 1. counts
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts, group=group)
    send_split = send_counts.tolist()  # the one host sync
    recv_split = recv_counts.tolist()
    R = sum(recv_split)

    # 2. rows, and their ids + fp32 weights as one int32 message [rows, 2k]
    send_hidden = hidden_states.index_select(0, send_rows).contiguous()
    tw = topk_weights.to(device=dev, dtype=torch.float32)
    meta = torch.cat([ids.to(torch.int32), tw.contiguous().view(torch.int32)], dim=1)
    send_meta = meta.index_select(0, send_rows).contiguous()
    recv_hidden = hidden_states.new_empty((R, K))
    recv_meta = meta.new_empty((R, 2 * k))
    dist.all_to_all_single(_bytes(recv_hidden), _bytes(send_hidden), recv_split, send_split, group=group)
    dist.all_to_all_single(recv_meta, send_meta, recv_split, send_split, group=group)

    # 3. the local experts over the received rows (slots of other ranks map to -1: not added)
    if R > 0:
        partial = moekit.fused_experts(recv_hidden, w1, w2, recv_meta[:, k:].contiguous().view(torch.float32),
                                       recv_meta[:, :k].contiguous(), expert_map=local_map, **kwargs)
    else:
        partial = hidden_states.new_empty((0, K))

    # 4. partials back
    returned = hidden_states.new_empty((int(send_rows.shape[0]), K))
    dist.all_to_all_single(_bytes(returned), _bytes(partial.contiguous()), send_split, recv_split, group=group)

    # 5. combine: fp32, ascending rank; within one rank's block every token appears once, so each
    # step is a plain gather-add (no atomics, no order left to chance).
    acc = torch.zeros((M, K), dtype=torch.float32, device=dev)
    off = 0
    for n in send_split:
        if n:
            rows = send_rows[off:off + n]
            acc.index_copy_(0, rows, acc.index_select(0, rows) + returned[off:off + n].float())
        off += n
    result = acc.to(hidden_states.dtype)
    return _finish(result, hidden_states, inplace, out)


def ep_fused_moe(hidden_states, router_logits, w1, w2, top_k: int, *, group=None, expert_map=None,
                 expert_owner=None, renormalize: bool = True, routing: str = "softmax_topk", num_groups: int = 1,
                 topk_groups: int = 1, routed_scaling_factor: float = 1.0, e_score_correction_bias=None,
                 return_routing: bool = False, **kwargs):
    """Expert parallel fused_moe: route this rank's tokens (moekit.route over router_logits
    [M, E_global]), then ep_fused_experts. Arguments as moekit.fused_moe plus group / expert_map /
    expert_owner (see ep_fused_experts); with return_routing=True returns (out, topk_weights,
    topk_ids) of this rank's tokens."""
    tw, ti = moekit.route(router_logits, top_k, method=routing, renormalize=renormalize, num_groups=num_groups,
                          topk_groups=topk_groups, routed_scaling_factor=routed_scaling_factor,
                          e_score_correction_bias=e_score_correction_bias)
    y = ep_fused_experts(hidden_states, w1, w2, tw, ti, num_experts=int(router_logits.shape[1]), group=group,
                         expert_map=expert_map, expert_owner=expert_owner, **kwargs)
    return (y, tw, ti) if return_routing else y
