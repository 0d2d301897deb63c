"""Serving metrics with the names and definitions of `vllm bench serve` (pure Python: no torch,
no numpy, so CI unit-tests it on synthetic timestamps).

Per request (successful ones only, as vLLM does):
  ttft   = first token time - request start
  e2el   = last token time - request start                       ("latency" in vLLM)
  tpot   = (e2el - ttft) / (output_len - 1), only when output_len > 1
  itl    = the gaps between consecutive token times of the request, pooled over requests
Over the run (duration = first submission to last completion):
  completed, failed, total_input_tokens, total_output_tokens,
  request_throughput = completed / duration, output_throughput = output tokens / duration,
  total_token_throughput = (input + output tokens of completed requests) / duration,
  mean_/median_/std_/p90_/p95_/p99_/p99.9_ {ttft,tpot,itl,e2el}_ms.
Percentiles interpolate linearly between order statistics (numpy.percentile's default, which
vLLM uses). One deviation: vLLM reports 0 for a metric with no samples (np.mean([] or 0)); this
module reports None, so an all-failed run cannot pass for a 0 ms one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence

PERCENTILES = (90.0, 95.0, 99.0, 99.9)
METRICS = ("ttft", "tpot", "itl", "e2el")


@dataclass
class RequestResult:
    """One request as the benchmark saw it. Times are seconds on one monotonic clock."""

    prompt_len: int
    start: float                       # when the request was submitted
    token_times: List[float] = field(default_factory=list)   # one per generated token, in order
    success: bool = True
    error: Optional[str] = None
    expected_output_len: Optional[int] = None
    index: Optional[int] = None        # the request's index in the workload (same prompt in every run)

    @property
    def output_len(self) -> int:
        return len(self.token_times)

    @property
    def ttft(self) -> Optional[float]:
        return self.token_times[0] - self.start if self.token_times else None

    @property
    def e2el(self) -> Optional[float]:
        return self.token_times[-1] - self.start if self.token_times else None

    @property
    def tpot(self) -> Optional[float]:
        n = self.output_len
        if n <= 1:
            return None
        return (self.e2el - self.ttft) / (n - 1)

    @property
    def itls(self) -> List[float]:
        t = self.token_times
        return [t[i] - t[i - 1] for i in range(1, len(t))]


def percentile(values: Sequence[float], p: float) -> Optional[float]:
    """numpy.percentile(values, p) with the default linear method; None for no values."""
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile p={p} outside [0, 100]")
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return None
    pos = (n - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return xs[lo] + (xs[hi] - xs[lo]) * frac


def _mean(xs: Sequence[float]) -> Optional[float]:
    return sum(xs) / len(xs) if xs else None


def _std(xs: Sequence[float]) -> Optional[float]:
    # Population standard deviation, as numpy.std (vLLM's std_*_ms).
    if not xs:
        return None
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


def percentile_key(p: float) -> str:
    """vLLM's spelling: 99 -> 'p99', 99.9 -> 'p99.9'."""
    return f"p{int(p)}" if float(p).is_integer() else f"p{p}"


def summarize(values_s: Sequence[float], name: str, percentiles: Iterable[float] = PERCENTILES) -> Dict[str, Optional[float]]:
    """mean/median/std/pXX of `values_s` (seconds) as `<stat>_<name>_ms` keys (milliseconds)."""
    ms = [v * 1000.0 for v in values_s]
    out: Dict[str, Optional[float]] = {
        f"mean_{name}_ms": _mean(ms),
        f"median_{name}_ms": percentile(ms, 50.0),
        f"std_{name}_ms": _std(ms),
    }
    for p in percentiles:
        out[f"{percentile_key(p)}_{name}_ms"] = percentile(ms, p)
    return out


def compute_metrics(results: Sequence[RequestResult], duration_s: float,
                    percentiles: Iterable[float] = PERCENTILES) -> Dict[str, object]:
    """The `vllm bench serve` result fields for one run of `results` that took `duration_s`."""
    if duration_s < 0 or (duration_s == 0 and results):
        raise ValueError(f"duration_s={duration_s}: must be > 0 for a run with requests")
    percentiles = tuple(percentiles)
    ttfts: List[float] = []
    tpots: List[float] = []
    itls: List[float] = []
    e2els: List[float] = []
    completed = failed = 0
    total_input = total_output = 0
    for r in results:
        # A request that reported success but produced no token has no TTFT: count it as failed.
        if not r.success or not r.token_times:
            failed += 1
            continue
        completed += 1
        total_input += r.prompt_len
        total_output += r.output_len
        ttfts.append(r.ttft)
        e2els.append(r.e2el)
        if r.tpot is not None:
            tpots.append(r.tpot)
        itls.extend(r.itls)
    rate = (lambda x: x / duration_s) if duration_s > 0 else (lambda x: None)
    out: Dict[str, object] = {
        "duration": duration_s,
        "completed": completed,
        "failed": failed,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": rate(completed),
        "output_throughput": rate(total_output),
        "total_token_throughput": rate(total_input + total_output),
    }
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        out.update(summarize(values, name, percentiles))
    out["num_itl_samples"] = len(itls)
    out["num_tpot_samples"] = len(tpots)
    return out


def per_request(results: Sequence[RequestResult]) -> List[dict]:
    """One record per request, by workload index: the same index is the same prompt in every
    implementation's run, so two runs compare request by request (a median can hide a few slow
    ones, e.g. a prefill that paid a CUDA-graph capture). Times in ms, None where undefined."""
    def ms(x: Optional[float]) -> Optional[float]:
        return None if x is None else round(x * 1e3, 3)

    out = []
    for r in sorted(results, key=lambda r: (r.index is None, r.index if r.index is not None else 0)):
        itls = r.itls
        out.append({"index": r.index, "prompt_len": r.prompt_len, "output_len": r.output_len,
                    "success": r.success, "ttft_ms": ms(r.ttft), "tpot_ms": ms(r.tpot), "e2el_ms": ms(r.e2el),
                    "max_itl_ms": ms(max(itls)) if itls else None})
    return out
