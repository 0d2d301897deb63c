"""Where a decode step's GPU time goes: the torch-profiler pass of moekit-serve-bench (--profile).

It runs the model's own forward outside the serving engine (a DynamicCache, the model's sdpa
attention, no CUDA graphs, so that every kernel is attributed to the Python module that launched
it): C sequences of `context` random tokens are prefilled, then decode steps are profiled with
record_function ranges around each decoder layer's MoE block (router + experts), its experts
module and its attention. For each range, the GPU time of the kernels launched inside it (the
range's device_time_total) is divided by the whole step's; the un-profiled wall time of a step is
measured too. Compared with the serving run's median ITL at the same concurrency, the difference
is the engine's own per-step overhead (scheduling, batch preparation, host syncs).
"""

from __future__ import annotations

import time
from typing import Any, Dict, List

LABELS = {"step": "serve_bench::decode_step", "moe": "serve_bench::moe_block",
          "experts": "serve_bench::experts", "attention": "serve_bench::attention"}


def _wrap(module, label: str, torch) -> None:
    orig = module.forward

    def forward(*args, **kwargs):
        with torch.profiler.record_function(label):
            return orig(*args, **kwargs)

    module.__dict__["forward"] = forward


def _unwrap(modules) -> None:
    for m in modules:
        m.__dict__.pop("forward", None)


def _marked_modules(model) -> Dict[str, List[Any]]:
    from .engine import experts_modules  # noqa: PLC0415

    named = dict(model.named_modules())
    experts = [m for _, m in experts_modules(model)]
    blocks = []
    for name, _ in experts_modules(model):
        parent = name.rsplit(".", 1)[0] if "." in name else ""
        if parent in named and parent != "":
            blocks.append(named[parent])
    attention = [m for n, m in model.named_modules() if n.endswith("self_attn")]
    return {"moe": blocks, "experts": experts, "attention": attention}


def _device_us(event) -> float:
    for attr in ("device_time_total", "cuda_time_total"):
        v = getattr(event, attr, None)
        if v is not None:
            return float(v)
    return 0.0


def _is_cpu(event) -> bool:
    dt = getattr(event, "device_type", None)
    return dt is None or "CPU" in str(dt)


def profile_decode(model, concurrency: int, context: int, steps: int = 5, warmup_steps: int = 3,
                   seed: int = 0, prefill=None) -> Dict[str, Any]:
    """Profile `steps` decode steps of `model` at batch `concurrency` after a `context`-token prefill.

    prefill: optional callable(model) -> context manager that sets the experts implementation used
    for the prefill (batched_mm cannot prefill big batches); the decode runs what `model` has now.
    """
    import contextlib  # noqa: PLC0415

    import torch  # noqa: PLC0415
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    vocab = model.config.vocab_size
    g = torch.Generator(device="cuda").manual_seed(seed)
    ids = torch.randint(16, vocab, (concurrency, context), device="cuda", generator=g)
    ctx = prefill(model) if prefill is not None else contextlib.nullcontext()
    with torch.no_grad():
        with ctx:
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        nxt = out.logits[:, -1:].argmax(-1)
        del out

        def step():
            nonlocal nxt
            o = model(input_ids=nxt, past_key_values=cache, use_cache=True, logits_to_keep=1)
            nxt = o.logits[:, -1:].argmax(-1)

        for _ in range(warmup_steps):
            step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - t0) * 1e3 / steps

        marked = _marked_modules(model)
        for key, mods in marked.items():
            for m in mods:
                _wrap(m, LABELS[key], torch)
        try:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(steps):
                    with torch.profiler.record_function(LABELS["step"]):
                        step()
                torch.cuda.synchronize()
        finally:
            for mods in marked.values():
                _unwrap(mods)

    totals = {key: 0.0 for key in LABELS}
    counts = {key: 0 for key in LABELS}
    by_label = {v: k for k, v in LABELS.items()}
    for ev in prof.events():
        key = by_label.get(ev.name)
        if key is not None and _is_cpu(ev):
            totals[key] += _device_us(ev)
            counts[key] += 1
    step_us = totals["step"] / max(steps, 1)
    res: Dict[str, Any] = {
        "concurrency": concurrency, "context_tokens": context, "steps": steps,
        "method": "torch.profiler, model forward with DynamicCache + sdpa, eager (no CUDA graphs); "
                  "GPU time of kernels launched inside record_function ranges",
        "wall_ms_per_step": wall_ms,
        "gpu_ms_per_step": step_us / 1e3,
        "ranges_seen": counts,
        "moe_layers": len(marked["moe"]),
    }
    for key in ("moe", "experts", "attention"):
        per_step = totals[key] / max(steps, 1) / 1e3
        res[f"{key}_gpu_ms_per_step"] = per_step
        res[f"{key}_share_of_step_gpu"] = (per_step * 1e3 / step_us) if step_us > 0 else None
    res["gpu_busy_share_of_wall"] = (res["gpu_ms_per_step"] / wall_ms) if wall_ms > 0 else None
    return res
