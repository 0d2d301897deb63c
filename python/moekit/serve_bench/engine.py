"""The serving side of moekit-serve-bench: experts implementations, and a closed-loop client of
transformers 5's continuous-batching engine (ContinuousBatchingManager) that records per-token
timestamps.

Closed loop: the engine has no knob that caps requests in flight (max_requests_per_batch caps a
batch, not admissions), so the client does it, as `vllm bench serve --max-concurrency` does: it
submits C requests, and submits the next one each time one finishes, so exactly min(C, left)
requests are in flight. Each request is non-streaming with record_timestamps=True: the engine
stamps every generated token with time.perf_counter() in its generation thread, and the
client's submit time is taken on the same clock just before add_request.
"""

from __future__ import annotations

import gc
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from .metrics import RequestResult
from .workload import Request

# name -> how to run the experts. "grouped_mm" is transformers 5.17's default (what a model gets
# when nothing is asked for and torch has grouped_mm); "eager" is the per-expert Python loop of the
# modeling file; "batched_mm" gathers one weight matrix per (token, expert) pair (decode-only: at
# prefill it copies tokens x k expert matrices). moekit runs through moekit.integrations.transformers.
IMPLEMENTATIONS: Dict[str, Dict[str, Any]] = {
    "grouped_mm": dict(kind="hf", experts="grouped_mm", graph_safe=True,
                       note="transformers' default experts implementation (torch grouped_mm)"),
    "eager": dict(kind="hf", experts="eager", graph_safe=False,
                  note="the modeling file's per-expert loop (nonzero() syncs the host: no CUDA graphs)"),
    "batched_mm": dict(kind="hf", experts="batched_mm", graph_safe=True,
                       note="transformers' batched variant (bmm over gathered per-pair weights)"),
    "moekit": dict(kind="moekit", scheme="bf16", graph_safe=True, note="moekit bf16 experts"),
    "moekit-fp8": dict(kind="moekit", scheme="fp8_per_channel", graph_safe=True,
                       note="moekit fp8 experts (per-channel weight scales, per-token dynamic activations), "
                            "weights quantized once by moekit"),
}
DEFAULT_IMPLS = ("grouped_mm", "moekit", "moekit-fp8")


def impl_spec(name: str) -> Dict[str, Any]:
    """The spec of an implementation name; 'moekit:<scheme>' picks any moekit scheme."""
    if name in IMPLEMENTATIONS:
        return dict(IMPLEMENTATIONS[name], name=name)
    if name.startswith("moekit:"):
        scheme = name.split(":", 1)[1]
        return dict(kind="moekit", scheme=scheme, graph_safe=True, note=f"moekit {scheme} experts", name=name)
    raise ValueError(f"implementation {name!r}: expected one of {sorted(IMPLEMENTATIONS)} or moekit:<scheme>")


def experts_modules(model) -> List[Any]:
    """(name, module) of every experts module (3-D gate_up_proj and down_proj)."""
    out = []
    for name, m in model.named_modules():
        gp, dp = getattr(m, "gate_up_proj", None), getattr(m, "down_proj", None)
        if getattr(gp, "dim", None) and getattr(dp, "dim", None) and gp.dim() == 3 and dp.dim() == 3:
            out.append((name, m))
    return out


def apply_impl(model, name: str) -> Dict[str, Any]:
    """Switch `model`'s experts to implementation `name`; returns what was set (for the JSON)."""
    import torch  # noqa: PLC0415

    spec = impl_spec(name)
    info: Dict[str, Any] = {"implementation": name, "kind": spec["kind"], "note": spec["note"]}
    if model.__dict__.get("_moekit_previous") is not None or any(
            "_moekit_weights" in m.__dict__ for _, m in experts_modules(model)):
        from moekit.integrations import transformers as mk_tf  # noqa: PLC0415

        mk_tf.disable(model)
    if spec["kind"] == "hf":
        model.set_experts_implementation(spec["experts"])
        info["experts_implementation"] = model.config._experts_implementation
        if info["experts_implementation"] != spec["experts"]:
            raise RuntimeError(f"asked transformers for experts implementation {spec['experts']!r}, "
                               f"got {info['experts_implementation']!r}")
    else:
        import moekit  # noqa: PLC0415
        from moekit.integrations import transformers as mk_tf  # noqa: PLC0415

        t0 = time.perf_counter()
        mk_tf.enable(model, scheme=spec["scheme"])
        # Plan and prepare (quantize, for fp8) every module now, outside the engine: the first
        # call would do it otherwise, and it must not happen inside a CUDA-graph capture.
        mods = mk_tf.experts_modules(model)
        for _, m in mods:
            plan = mk_tf.plan_for(m)
            mk_tf.prepared_weights(m, plan, m.__dict__.get("_moekit_scheme", spec["scheme"]))
        torch.cuda.synchronize()
        info.update(experts_implementation=model.config._experts_implementation, scheme=spec["scheme"],
                    moekit_version=moekit.__version__, modules=len(mods),
                    prepare_s=time.perf_counter() - t0)
    return info


def moekit_counts() -> Dict[str, int]:
    try:
        from moekit.integrations import transformers as mk_tf  # noqa: PLC0415
    except Exception:  # noqa: BLE001
        return {}
    return dict(mk_tf.stats)


def free_memory() -> None:
    import torch  # noqa: PLC0415

    gc.collect()
    torch.cuda.empty_cache()


@dataclass
class EngineSettings:
    block_size: int = 256
    num_blocks: Optional[int] = None          # None: sized from the workload (see size_num_blocks)
    max_batch_tokens: int = 2048
    max_requests_per_batch: int = 64
    use_cuda_graph: Optional[bool] = True     # None: transformers decides
    use_async_batching: Optional[bool] = None
    q_padding_interval_size: int = 0          # 0: transformers' default
    kv_padding_interval_size: int = 0
    max_memory_percent: float = 0.8
    allow_block_sharing: bool = False         # prompts repeat across concurrency levels: no prefix-cache hits
    warmup: bool = True

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)


def size_num_blocks(max_concurrency: int, max_input: int, max_output: int, block_size: int) -> int:
    """KV blocks for max_concurrency requests of the longest length, +25% and one spare block each."""
    per_req = -(-(max_input + max_output) // block_size) + 1
    return int(max_concurrency * per_req * 1.25) + 8


class Engine:
    """One ContinuousBatchingManager (one experts implementation), started and warmed up."""

    def __init__(self, model, settings: EngineSettings, max_new_tokens: int, max_prompt_len: int,
                 num_requests_hint: int, seed: int = 0):
        from transformers import ContinuousBatchingConfig, GenerationConfig  # noqa: PLC0415
        from transformers.generation.continuous_batching.utils import WorkloadHints  # noqa: PLC0415

        s = settings
        cb_kwargs = dict(block_size=s.block_size, num_blocks=s.num_blocks, max_batch_tokens=s.max_batch_tokens,
                         max_requests_per_batch=s.max_requests_per_batch, use_cuda_graph=s.use_cuda_graph,
                         use_async_batching=s.use_async_batching, max_memory_percent=s.max_memory_percent,
                         allow_block_sharing=s.allow_block_sharing, seed=seed)
        if s.q_padding_interval_size:
            cb_kwargs["q_padding_interval_size"] = s.q_padding_interval_size
        if s.kv_padding_interval_size:
            cb_kwargs["kv_padding_interval_size"] = s.kv_padding_interval_size
        self.cb_config = ContinuousBatchingConfig(**cb_kwargs)
        self.gen_config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0,
                                           eos_token_id=None)
        hints = WorkloadHints(max_prompt_length=max_prompt_len, max_generated_length=max_new_tokens,
                              num_requests=num_requests_hint)
        self.model = model
        t0 = time.perf_counter()
        self.manager = model.init_continuous_batching(generation_config=self.gen_config,
                                                      continuous_batching_config=self.cb_config,
                                                      workload_hints=hints)
        self.init_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        if s.warmup:
            self.manager.warmup()
        self.warmup_s = time.perf_counter() - t0
        self.manager.start()
        self._counter = 0

    def resolved_settings(self) -> Dict[str, Any]:
        """What the engine actually runs with (after transformers resolved its defaults)."""
        cfg = self.manager.continuous_batching_config
        out: Dict[str, Any] = {}
        for key in ("block_size", "num_blocks", "max_batch_tokens", "max_requests_per_batch", "max_blocks_per_request",
                    "use_cuda_graph", "use_async_batching", "q_padding_interval_size", "kv_padding_interval_size",
                    "max_memory_percent", "allow_block_sharing", "scheduler_type", "default_compile_level"):
            v = getattr(cfg, key, None)
            out[key] = list(v) if isinstance(v, tuple) else v
        for key in ("varlen_compile_config", "decode_compile_config"):
            v = getattr(cfg, key, None)
            out[key] = None if v is None else str(v)
        out["attn_implementation"] = self.model.config._attn_implementation
        out["experts_implementation"] = self.model.config._experts_implementation
        bp = getattr(self.manager, "batch_processor", None)
        cache = getattr(bp, "cache", None)
        if cache is not None:
            out["cache_num_blocks"] = getattr(cache, "num_blocks", None)
            out["cache_max_batch_tokens"] = getattr(cache, "max_batch_tokens", None)
        out["init_s"] = self.init_s
        out["warmup_s"] = self.warmup_s
        return out

    def run_closed_loop(self, requests: Sequence[Request], concurrency: int, timeout_s: float = 600.0,
                        tag: str = "r", on_done: Optional[Callable[[int], None]] = None):
        """Run `requests` with at most `concurrency` in flight. Returns (results, duration_s, info)."""
        m = self.manager
        pending = deque(requests)
        inflight: Dict[str, tuple] = {}
        results: List[RequestResult] = []
        info: Dict[str, Any] = {"timed_out": False, "engine_died": False, "not_submitted": 0}

        def submit():
            req = pending.popleft()
            self._counter += 1
            rid = f"{tag}{self._counter}"
            start = time.perf_counter()
            got = m.add_request(input_ids=list(req.prompt), request_id=rid, max_new_tokens=req.output_len,
                                record_timestamps=True, eos_token_id=-1)
            if got is None:  # the manager refused it (stopping or dead)
                results.append(RequestResult(req.prompt_len, start, [], False, "refused by the engine",
                                             req.output_len, req.index))
                return
            inflight[rid] = (req, start)

        t_start = time.perf_counter()
        while pending and len(inflight) < concurrency:
            submit()
        deadline = t_start + timeout_s
        while inflight:
            now = time.perf_counter()
            if now > deadline:
                info["timed_out"] = True
                break
            out = m.get_result(timeout=min(1.0, max(0.01, deadline - now)))
            if out is None:
                if not m.is_running():
                    info["engine_died"] = True
                    break
                continue
            if not out.is_finished() or out.request_id not in inflight:
                continue
            req, start = inflight.pop(out.request_id)
            times = list(out.timestamps or [])
            # One stamp per generated token; a token the engine dropped past the limit (its "useless
            # token" warning, async batching) may still have been stamped: keep the first n.
            n_gen = len(getattr(out, "generated_tokens", None) or [])
            if 0 < n_gen < len(times):
                times = times[:n_gen]
            ok = out.error is None and len(times) > 0
            err = out.error if out.error is not None else (None if times else "no token timestamps")
            results.append(RequestResult(req.prompt_len, start, times, ok, err, req.output_len, req.index))
            if on_done is not None:
                on_done(1)
            if pending and not info["timed_out"]:
                submit()
        t_end = time.perf_counter()
        # Whatever is still in flight failed (timeout / dead engine); cancel it so the engine drains.
        for rid, (req, start) in inflight.items():
            try:
                m.cancel_request(rid)
            except Exception:  # noqa: BLE001
                pass
            results.append(RequestResult(req.prompt_len, start, [], False,
                                         "timeout" if info["timed_out"] else "engine stopped", req.output_len,
                                         req.index))
        # (A late output of a cancelled request is ignored by a later run: its id is not in flight there.)
        info["not_submitted"] = len(pending)
        return results, t_end - t_start, info

    def close(self) -> None:
        try:
            self.manager.stop(block=True, timeout=120)
        finally:
            try:
                self.manager.destroy()
            except Exception:  # noqa: BLE001
                pass
            self.manager = None
            free_memory()
