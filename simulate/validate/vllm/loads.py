"""The loads of a vLLM validation: what each sends (arrival process, rate as a fraction of the
fitted capacity, prompts and output lengths), and the server settings they run under.

Scored loads (`SCORED`): Poisson at 25%, 55% and 85% of the capacity the calibration's fitted
profile predicts, one bursty load (gamma gaps, cv 3, at 55%) and one long-prompt load (prompts
longer than the token budget, so vLLM splits them into chunks: chunked prefill beside decoding
sequences). The calibration load is separate and never scored: a low Poisson rate (small batches), then closed
loops holding 2-8 (diffusion) or 4-16 (AR, MTP) requests in flight (steady batches of every size
the scored loads reach), over short and long prompts, so the step fit covers their shapes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

# every server of a validation: a token budget small enough that long prompts are chunked beside
# decoding sequences (diffusion: 8 canvases of 32 = 256 tokens leave 256 for prefill chunks)
MAX_NUM_BATCHED_TOKENS = 512
AR_MAX_NUM_SEQS = 16  # AR/MTP: the API server and the load generator share the second core; see README
CANVAS = 32
MTP_K = 2


def cpu_placement() -> dict:
    """The engine's worker on the last CPU, the API server and the load generator on the others
    (on a 2-core machine one each), so front-end work does not stretch engine steps; {} on one CPU."""
    import os

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return {}
    return {"engine_cpus": str(cpus[-1]), "frontend_cpus": tuple(cpus[:-1])}


@dataclass(frozen=True)
class LoadSpec:
    """One load: `rate_frac` of the fitted capacity (calibration: `calib_qps`, requests/s per unit)."""

    name: str
    arrivals: str  # poisson | gamma
    cv: float
    rate_frac: float | None
    n_requests: int
    prompts: str  # short | long | mixed
    calib_qps: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return asdict(self)


SCORED = (
    LoadSpec("poisson25", "poisson", 1.0, 0.25, 40, "short"),
    LoadSpec("poisson55", "poisson", 1.0, 0.55, 50, "short"),
    LoadSpec("poisson85", "poisson", 1.0, 0.85, 60, "short"),
    LoadSpec("bursty", "gamma", 3.0, 0.55, 50, "short"),
    LoadSpec("longprompt", "poisson", 1.0, 0.55, 40, "long"),
)
# low rate per mode (requests/s, well below capacity on the 2-core machine), then all at once
CALIB_LOW_QPS = {"diffusion": 0.5, "ar": 2.0, "mtp": 1.5}
CALIB_REQUESTS = {"diffusion": 24, "ar": 48, "mtp": 48}
# output lengths (max_tokens, ignore_eos): diffusion 2-3 canvases of 32; AR/MTP 24-96 tokens
OUTPUT_TOKENS = {"diffusion": (48, 64, 96), "ar": (24, 48, 64, 96), "mtp": (24, 48, 64, 96)}
# diffusion steps run Triton's interpreter on a CPU (100-250 ms each): its loads are cut to this many requests
DIFFUSION_MAX_REQUESTS = 30


def n_requests(spec: "LoadSpec", mode: str) -> int:
    return min(spec.n_requests, DIFFUSION_MAX_REQUESTS) if mode == "diffusion" else spec.n_requests


# then closed loops of c requests in flight (concurrency c, n requests): steady batches of every size
CALIB_CONCURRENCY = {"diffusion": ((2, 10), (4, 16), (8, 24)), "ar": ((4, 24), (8, 32), (16, 48)), "mtp": ((4, 24), (8, 32), (16, 48))}


def calibration(mode: str) -> LoadSpec:
    return LoadSpec("calibration", "poisson", 1.0, None, CALIB_REQUESTS[mode], "mixed", (f"{CALIB_LOW_QPS[mode]:g}",))


def _words(n: int, corpus: list[str], start: int) -> str:
    words = " ".join(corpus).split()
    return " ".join(words[(start + i) % len(words)] for i in range(n))


def write_prompts(path: Path, kind: str, mode: str, corpus: list[str], n: int = 24, tag: str = "") -> Path:
    """A JSONL prompts file of `n` distinct prompts (one per request: no two share a prefix):
    short prompts of 6-60 words, long ones of 180-450 words (about 500-1350 tokens of the tiny
    tokenizer), each with its max_tokens from OUTPUT_TOKENS."""
    outs = OUTPUT_TOKENS[mode]
    rows = []
    for i in range(n):
        long = kind == "long" or (kind == "mixed" and i % 4 == 3)
        words = 180 + (i * 53) % 270 if long else 6 + (i * 11) % 55
        rows.append({"prompt": f"[{kind}{tag} {i}] " + _words(words, corpus, i * 37 + len(tag) * 1009), "prompt_id": f"{kind[0]}{i:02d}", "regime": "R1",
                     "max_tokens": outs[i % len(outs)]})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
