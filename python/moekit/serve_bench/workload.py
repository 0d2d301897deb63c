"""The serving benchmark's workload: seeded random prompts (pure Python, no torch, no numpy).

Request i of a workload depends only on (seed, i, the length ranges, vocab): its own
random.Random is seeded from those, so the first n requests are the same whatever the total, and
every implementation and concurrency level sees the same prompts. Input and output lengths are
drawn uniformly from inclusive [min, max] ranges; token ids uniformly from [first_token_id, vocab).
Generation length is fixed per request (the engine is told to ignore end-of-sequence).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass
from typing import Dict, List, Sequence, Tuple

# Sizes. "default" keeps one model's sweep (3 implementations, concurrency 1..64) near 10 minutes
# on one H200; "full" is the vLLM-style workload of the issue (16 x concurrency prompts, input
# 128-2048, output 128-512: far longer); "quick" is a smoke test.
SIZES: Dict[str, Dict[str, object]] = {
    "quick": dict(input_len=(32, 256), output_len=(16, 32), prompts_per_concurrency=2, concurrency=(1, 4)),
    "default": dict(input_len=(128, 1024), output_len=(32, 128), prompts_per_concurrency=4,
                    concurrency=(1, 2, 4, 8, 16, 32, 64)),
    "full": dict(input_len=(128, 2048), output_len=(128, 512), prompts_per_concurrency=16,
                 concurrency=(1, 2, 4, 8, 16, 32, 64)),
}


@dataclass(frozen=True)
class WorkloadSpec:
    seed: int
    vocab_size: int
    input_len: Tuple[int, int]
    output_len: Tuple[int, int]
    prompts_per_concurrency: int = 16
    max_prompts: int = 0            # 0: no cap
    first_token_id: int = 16        # keep clear of the low ids tokenizers reserve

    def __post_init__(self):
        for name in ("input_len", "output_len"):
            lo, hi = getattr(self, name)
            if not (1 <= lo <= hi):
                raise ValueError(f"{name}={lo}:{hi}: need 1 <= min <= max")
        if not 0 <= self.first_token_id < self.vocab_size:
            raise ValueError(f"vocab_size={self.vocab_size}, first_token_id={self.first_token_id}: need 0 <= first < vocab")
        if self.prompts_per_concurrency < 1 or self.max_prompts < 0:
            raise ValueError(f"prompts_per_concurrency={self.prompts_per_concurrency}, max_prompts={self.max_prompts}")

    def num_prompts(self, concurrency: int) -> int:
        """num_prompts = prompts_per_concurrency x concurrency, capped by max_prompts (at least one)."""
        if concurrency < 1:
            raise ValueError(f"concurrency={concurrency} must be >= 1")
        n = self.prompts_per_concurrency * concurrency
        if self.max_prompts:
            n = min(n, self.max_prompts)
        return max(n, 1)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["input_len"] = list(self.input_len)
        d["output_len"] = list(self.output_len)
        d["input_distribution"] = f"uniform integer [{self.input_len[0]}, {self.input_len[1]}]"
        d["output_distribution"] = f"uniform integer [{self.output_len[0]}, {self.output_len[1]}]"
        d["token_distribution"] = f"uniform integer [{self.first_token_id}, {self.vocab_size})"
        return d


@dataclass(frozen=True)
class Request:
    index: int
    prompt: List[int]
    output_len: int

    @property
    def prompt_len(self) -> int:
        return len(self.prompt)


def _rng(spec: WorkloadSpec, index: int, salt: str = "") -> random.Random:
    key = f"moekit-serve-bench|{spec.seed}|{index}|{spec.input_len}|{spec.output_len}|{spec.vocab_size}|{salt}"
    return random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little"))


def make_request(spec: WorkloadSpec, index: int, salt: str = "") -> Request:
    rng = _rng(spec, index, salt)
    n_in = rng.randint(*spec.input_len)
    n_out = rng.randint(*spec.output_len)
    prompt = [rng.randrange(spec.first_token_id, spec.vocab_size) for _ in range(n_in)]
    return Request(index, prompt, n_out)


def make_requests(spec: WorkloadSpec, n: int, salt: str = "") -> List[Request]:
    """Requests 0..n-1 of the workload (salt gives an independent stream, e.g. for warm-up)."""
    return [make_request(spec, i, salt) for i in range(n)]


def fingerprint(requests: Sequence[Request]) -> str:
    """A short hash of the prompts and output lengths: equal fingerprints, equal work."""
    h = hashlib.sha256()
    for r in requests:
        h.update(f"{r.index}:{r.output_len}:".encode())
        h.update(",".join(map(str, r.prompt)).encode())
        h.update(b";")
    return h.hexdigest()[:16]


def parse_range(text: str) -> Tuple[int, int]:
    """'128:2048' -> (128, 2048); '512' -> (512, 512)."""
    parts = text.replace("-", ":").split(":")
    if len(parts) == 1:
        v = int(parts[0])
        return v, v
    if len(parts) != 2:
        raise ValueError(f"range {text!r}: expected MIN:MAX")
    return int(parts[0]), int(parts[1])


def parse_int_list(text: str) -> List[int]:
    """'1,2,4' -> [1, 2, 4]."""
    out = [int(x) for x in text.split(",") if x.strip()]
    if not out or any(v < 1 for v in out):
        raise ValueError(f"{text!r}: expected a comma-separated list of positive integers")
    return out
