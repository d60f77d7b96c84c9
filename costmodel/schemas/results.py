"""Records the simulator writes: per-request rows and one summary per (mode, hardware, QPS,
replicas) point. `plan` and `report` read these; units are in the names.

Metric definitions (also in the README):
- queue_ms: arrival -> the engine first schedules any of the request's work (prefill chunk).
- ttft_ms: arrival -> the first output token is emitted (diffusion: the first committed canvas,
  i.e. after prefill plus the first block's k denoising steps and its commit; AR/MTP: after prefill).
- e2e_ms: arrival -> the last output token is emitted.
- tpot_ms: (e2e_ms - ttft_ms) / (output_tokens - 1): time per output token EXCLUDING the first;
  NaN for one-token outputs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

REQUEST_COLUMNS = (
    "request_id", "mode", "regime", "replica", "arrival_s", "start_s", "first_token_s", "finish_s",
    "prompt_tokens", "output_tokens", "blocks", "steps", "queue_ms", "ttft_ms", "e2e_ms", "tpot_ms", "preemptions", "finished",
    "warmup",  # arrived in the warm-up span: kept in the records, left out of percentiles and throughput
)
PERCENTILES = (50, 90, 95, 99)


@dataclass
class PointSummary:
    mode: str
    hardware: str
    profile_id: str
    qps: float
    replicas: int
    requests_arrived: int
    requests_finished: int
    requests_unfinished: int
    stable: bool  # False: the queue grew without bound; the latency numbers are not steady-state
    stability_reason: str
    duration_s: float
    throughput_rps: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    output_tokens: int
    prompt_tokens: int
    gpu_busy_frac: float
    mean_batch_seqs: float
    mean_batch_tokens: float
    ttft_ms: dict = field(default_factory=dict)  # {"p50": .., "p90": .., "p95": .., "p99": .., "mean": ..}
    e2e_ms: dict = field(default_factory=dict)
    tpot_ms: dict = field(default_factory=dict)
    queue_ms: dict = field(default_factory=dict)
    batch_composition: dict = field(default_factory=dict)  # mean sequences per step by pass kind
    seed: int = 0
    provenance: str = ""  # the profile's provenance kinds for this mode (measured/projected/...)
    # added by the simulator (simulate/metrics.py defines each)
    mean_in_system: float = float("nan")  # time-average requests in the system over the arrival window (Little's L)
    backlog_growth: float = float("nan")  # fitted growth of requests in system over the steady window (stability test)
    warmup_s: float = 0.0
    simulated_s: float = 0.0
    engine_steps: int = 0
    preemptions: int = 0
    kv_capacity_tokens: int = 0
    max_num_seqs: int = 0
    max_num_batched_tokens: int = 0
    router: str = ""
    workload: str = ""

    def flat(self) -> dict:
        """One flat row (no nested dicts): `ttft_ms_p95`, `e2e_ms_p99`, `batch_denoise_step_seqs`."""
        d = asdict(self)
        out = {}
        for k, v in d.items():
            if isinstance(v, dict):
                for kk, vv in v.items():
                    out[f"{k}_{kk}" if k != "batch_composition" else f"batch_{kk}_seqs"] = vv
            else:
                out[k] = v
        return out
