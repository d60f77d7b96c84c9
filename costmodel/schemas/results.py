"""The simulation-results artefact (`costmodel simulate -o DIR`): per-request rows
(requests_<mode>_qps<q>[_c<clients>]_r<n>.parquet), one PointSummary per (mode, hardware, QPS, replicas) point
(summary.csv flat, summary.json nested), their writer and reader. `plan` and `report` read
simulation results through this module; every field's meaning, unit and source is its metadata.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from costmodel.errors import UserError
from costmodel.jsonfile import read_json
from costmodel.schemas.columns import ColumnDoc, meta

if TYPE_CHECKING:
    import pandas as pd

SIM = "simulator (costmodel/schemas/results.py PointSummary; simulate/metrics.py computes it)"
REQ = "simulator (costmodel/schemas/results.py REQUEST_DOCS; simulate/metrics.py records it)"
PERCENTILES = (50, 90, 95, 99)
# the latency metrics (per request, ms); summaries hold {p50, p90, p95, p99, mean} of each
METRICS = {
    "queue": "queueing delay: arrival -> the engine first schedules any of the request's work",
    "ttft": "time to first token: arrival -> first output token emitted (diffusion: first committed canvas)",
    "e2e": "end-to-end latency: arrival -> last output token emitted",
    "tpot": "time per output token after the first: (e2e - ttft) / (output tokens - 1)",
}
STATS = {"p50": "50th percentile (median)", "p90": "90th percentile", "p95": "95th percentile", "p99": "99th percentile", "mean": "mean"}

REQUEST_DOCS = (
    ColumnDoc("request_id", "request index in arrival order", "-", REQ),
    ColumnDoc("mode", "serving mode", "-", REQ),
    ColumnDoc("regime", "workload regime of the request (commit statistics it draws from)", "-", REQ),
    ColumnDoc("replica", "replica the router sent it to", "-", REQ),
    ColumnDoc("arrival_s", "arrival time on the simulation clock", "s", REQ),
    ColumnDoc("start_s", "time the engine first scheduled its work (first prefill chunk)", "s", REQ),
    ColumnDoc("first_token_s", "time its first output was emitted", "s", REQ),
    ColumnDoc("finish_s", "time its last output token was emitted", "s", REQ),
    ColumnDoc("prompt_tokens", "prompt length", "tokens", REQ),
    ColumnDoc("output_tokens", "output length (emitted in full when finished)", "tokens", REQ),
    ColumnDoc("blocks", "diffusion canvases (ceil(output_tokens / canvas length)); 0 for other modes", "count", REQ),
    ColumnDoc("steps", "engine steps the request took part in (prefill chunks, decode/verify steps, denoising steps and commits)", "count", REQ),
    ColumnDoc("queue_ms", METRICS["queue"], "ms", REQ),
    ColumnDoc("ttft_ms", METRICS["ttft"], "ms", REQ),
    ColumnDoc("e2e_ms", METRICS["e2e"], "ms", REQ),
    ColumnDoc("tpot_ms", METRICS["tpot"] + "; NaN for one-token outputs", "ms", REQ),
    ColumnDoc("preemptions", "times the request was preempted (KV cache exhausted) and recomputed", "count", REQ),
    ColumnDoc("cached_tokens", "prompt tokens found in the prefix cache at its first admission, whole KV blocks (vLLM's num_cached_tokens); "
              "0 with prefix caching off", "tokens", REQ),
    ColumnDoc("finished", "the request finished inside the simulation", "boolean", REQ),
    ColumnDoc("warmup", "arrived in the warm-up span: kept in the records, left out of percentiles and throughput", "boolean", REQ),
)
REQUEST_COLUMNS = tuple(d.column for d in REQUEST_DOCS)


def _f(meaning: str, unit: str = "-", source: str = "", **kw):
    return field(metadata=meta(meaning, unit, source), **kw)


@dataclass
class PointSummary:
    """One simulated point (simulate/metrics.py defines how each number is computed)."""

    mode: str = _f("serving mode (costmodel/modes)")
    hardware: str = _f("GPU type (catalog id)", "-", "costmodel/data/hardware.json")
    profile_id: str = _f("the profile (pass costs, commit statistics) the simulator used")
    qps: float = _f("offered load: request arrivals per second across all replicas (Poisson unless the workload says otherwise); inf: no rate "
                    "limit (a closed loop whose clients send as fast as replies come, see concurrency)", "requests/s", "plan --qps / simulate --qps")
    replicas: int = _f("model replicas serving the load (for a plan: the fewest that meet the SLO)", "count", "costmodel plan / report (costmodel/costing/cheapest.py)")
    requests_arrived: int = _f("requests that arrived during the simulated window", "count")
    requests_finished: int = _f("requests that completed", "count")
    requests_unfinished: int = _f("requests still queued or running when the simulation ended", "count")
    stable: bool = _f("false when the queue grew without bound: latency numbers are then not steady-state", "boolean")
    stability_reason: str = _f("why the simulator judged the point stable or unstable", "text")
    duration_s: float = _f("arrival window of the point: requests arrive during this many simulated seconds", "s")
    throughput_rps: float = _f("requests finished inside the steady window (warm-up end to end of arrivals) per second; on an unstable point the saturated service rate", "requests/s")
    output_tokens_per_s: float = _f("output (generated) tokens of the requests finished in the steady window per second, all replicas", "tokens/s")
    total_tokens_per_s: float = _f("prompt + output tokens of the requests finished in the steady window per second, all replicas", "tokens/s")
    output_tokens: int = _f("output tokens of completed requests", "tokens")
    prompt_tokens: int = _f("prompt tokens of completed requests", "tokens")
    gpu_busy_frac: float = _f("fraction of the arrival window the replicas spent running engine steps (mean over replicas)", "fraction 0-1")
    mean_batch_seqs: float = _f("mean sequences per forward pass", "sequences")
    mean_batch_tokens: float = _f("mean query tokens per forward pass", "tokens")
    ttft_ms: dict = field(default_factory=dict)  # {"p50": .., "p90": .., "p95": .., "p99": .., "mean": ..}: METRICS
    e2e_ms: dict = field(default_factory=dict)
    tpot_ms: dict = field(default_factory=dict)
    queue_ms: dict = field(default_factory=dict)
    batch_composition: dict = field(default_factory=dict)  # mean sequences per step by pass kind
    seed: int = _f("random seed of the simulated workload", default=0)
    provenance: str = _f("provenance kinds of the profile parts this mode used (measured / projected / published / roofline / endpoint)", "text", default="")
    mean_in_system: float = _f("time-average number of requests arrived and not finished over the arrival window (Little's L)", "requests", default=float("nan"))
    backlog_growth: float = _f("fitted growth of requests in the system over the steady window (the stability test: unstable above the largest of 10 requests, 3% of the arrivals in the window and half the mean number in the system)", "requests", default=float("nan"))
    warmup_s: float = _f("initial span of the arrival window left out of percentiles and throughput", "s", default=0.0)
    simulated_s: float = _f("simulated clock at the end of the run (arrivals plus drain, or the abort time)", "s", default=0.0)
    engine_steps: int = _f("engine steps (forward passes) simulated, all replicas", "count", default=0)
    preemptions: int = _f("requests preempted (KV cache exhausted) and recomputed, all replicas", "count", default=0)
    kv_capacity_tokens: int = _f("KV-cache capacity of one replica", "tokens", default=0)
    max_num_seqs: int = _f("engine limit: sequences per step", "sequences", default=0)
    max_num_batched_tokens: int = _f("engine limit: query tokens per step", "tokens", default=0)
    router: str = _f("how requests are routed to replicas", "text", default="")
    workload: str = _f("arrival process and prompt/output length distributions simulated", "text", default="")
    max_running_requests: int = _f("requests one replica can run at once: the fewest of what its KV blocks hold at the workload's contexts, "
                                   "max_num_seqs, and (diffusion) the canvases the sampler buffers fit", "requests",
                                   "costmodel/memory.py (vLLM 0.32's KV layout and engine limits)", default=0)
    running_limit: str = _f("which of those sets max_running_requests: kv blocks, max_num_seqs or sampler buffers", "text",
                            "costmodel/memory.py", default="")
    binding_limit: str = _f("what limits a replica at this point: running_limit when its engine steps run at least 90% of "
                            "max_running_requests on average, else compute (the step time of the batches it runs)", "text", default="")
    engine_settings: str = _f("the engine settings a replica ran with and where each came from: name=value [CLI | recorded run | profile | "
                              "default | ...], in costmodel/engine_settings.py's order of precedence", "text",
                              "costmodel/engine_settings.py (vLLM 0.32 defaults cited there)", default="")
    prefix_caching: bool = _f("vLLM's automatic prefix caching was on (its default; off: --no-prefix-caching)", "boolean",
                              "simulate/kvcache.py (vllm/v1/core/kv_cache_manager.py)", default=False)
    prefix_hit_rate_tokens: float = _f("prefix-cache hit rate in tokens: prompt tokens found cached at first admission / prompt tokens of "
                                       "the requests admitted", "fraction 0-1", "simulate/kvcache.py", default=0.0)
    prefix_hit_rate_blocks: float = _f("prefix-cache hit rate in KV blocks: blocks found cached at first admission / full prompt blocks of "
                                       "the requests admitted", "fraction 0-1", "simulate/kvcache.py", default=0.0)
    prefill_tokens_saved: int = _f("prompt (and, after a preemption, context) tokens the engine did not compute because their KV blocks "
                                   "were cached, every admission counted, all replicas", "tokens", "simulate/kvcache.py", default=0)
    concurrency: int = _f("closed-loop clients: at most this many requests in flight, a request ready while they are waits for one to "
                          "finish and is sent then (vllm bench serve --max-concurrency); latencies run from the send; 0: open loop, "
                          "arrivals never wait", "requests", "simulate --concurrency (simulate/sim.py)", default=0)

    def flat(self) -> dict:
        """One flat row (no nested dicts): `ttft_ms_p95`, `e2e_ms_p99`, `batch_denoise_step_seqs`."""
        out = {}
        for k in _point_fields():  # the fields' values as they are (numbers, text, dicts of numbers): asdict's deep copy was a
            v = getattr(self, k)   # tenth of a plan's replication
            if isinstance(v, dict):
                for kk, vv in v.items():
                    out[f"{k}_{kk}" if k != "batch_composition" else f"batch_{kk}_seqs"] = vv
            else:
                out[k] = v
        return out


@lru_cache(maxsize=1)
def _point_fields() -> tuple[str, ...]:
    return tuple(f.name for f in fields(PointSummary))


# ---- the artefact: writer and reader ----------------------------------------------------------
SUMMARY_CSV, SUMMARY_JSON = "summary.csv", "summary.json"
# columns report needs from a summary
REQUIRED_COLUMNS = ("mode", "hardware", "qps", "replicas", "stable", "throughput_rps", "output_tokens_per_s", "total_tokens_per_s", "gpu_busy_frac")


@dataclass
class SimulationResults:
    """A simulate directory as read back: flat summary rows plus summary.json's other fields."""

    path: Path
    points: "pd.DataFrame"  # PointSummary.flat() rows
    meta: dict  # summary.json minus its points (profile id, hardware, precision, embedded profiles)


def point_stem(s: PointSummary) -> str:
    loop = f"_c{s.concurrency}" if getattr(s, "concurrency", 0) else ""
    return f"requests_{s.mode}_qps{s.qps:g}{loop}_r{s.replicas}"


def bench_stem(s: PointSummary) -> str:
    return "bench" + point_stem(s).removeprefix("requests")


def write_simulation(out_dir: str | Path, points: list[tuple[PointSummary, "pd.DataFrame"]], profile) -> list[Path]:
    """requests_<mode>_qps<q>_r<n>.parquet and bench_<mode>_qps<q>_r<n>.json (vllm bench's form) per
    point, summary.csv (flat rows), summary.json, and outputs.manifest.json: one output set,
    published whole (costmodel/outputset.py)."""
    import pandas as pd  # the table library, where the tables are written (issue 40: a command imports what it runs)

    from costmodel import atomic, outputset  # the writers, where a set is written: a printed simulation loads neither
    from costmodel.schemas.bench_result import as_bench_result

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"-o {out} exists and is not a directory", "give a directory path")
    with outputset.publishing(out, "simulate") as stage:
        paths = [atomic.write_parquet(stage / f"{point_stem(s)}.parquet", requests) for s, requests in points]
        # each point also as a `vllm bench serve --save-result` file, which `costmodel compare-bench` reads back
        paths += [atomic.write_json(stage / f"{bench_stem(s)}.json", as_bench_result(s, requests)) for s, requests in points]
        paths.append(atomic.write_csv(stage / SUMMARY_CSV, pd.DataFrame([s.flat() for s, _ in points])))
        paths.append(atomic.write_json(stage / SUMMARY_JSON, {
            "profile_id": profile.profile_id, "hardware": profile.hardware.id, "precision": profile.precision,
            "points": [s for s, _ in points],
            # the profile itself, so a report states where every input came from, whatever profile was simulated
            **({"profiles": [profile.to_dict()]} if hasattr(profile, "to_dict") else {}),
        }))
    return outputset.published(paths, stage, out) + [out / outputset.MANIFEST]


def is_simulation_dir(p: Path) -> bool:
    return (p / SUMMARY_CSV).exists() or (p / SUMMARY_JSON).exists()


def read_simulation(d: str | Path) -> SimulationResults:
    """A `costmodel simulate -o` directory: summary.csv (else summary.json's points), every file of
    one version of its output set (costmodel/outputset.py read_set: manifest checked, no mix)."""
    from costmodel import outputset

    d = Path(d)
    res = outputset.read_set(d, _read_simulation, "re-run `costmodel simulate`")
    res.path = d
    return res


def _read_simulation(d: Path) -> SimulationResults:
    import pandas as pd  # the table library, where the tables are read (issue 40: a command imports what it runs)

    doc = read_json(d / SUMMARY_JSON, "simulate summary") if (d / SUMMARY_JSON).exists() else {}
    if (d / SUMMARY_CSV).exists():
        try:
            points = pd.read_csv(d / SUMMARY_CSV)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            raise UserError(f"{d / SUMMARY_CSV} is not a readable CSV ({e.__class__.__name__})", "re-run `costmodel simulate`") from None
    else:
        rows = _points_in(doc)
        if rows is None:
            raise UserError(f"{d / SUMMARY_JSON} lists no points", "re-run `costmodel simulate`")
        points = pd.DataFrame(rows)
    missing = [c for c in REQUIRED_COLUMNS if c not in points.columns]
    if points.empty or missing:
        raise UserError(f"{d} summary has no points or lacks columns {missing}", "re-run `costmodel simulate` with this costmodel version")
    meta_doc = doc if isinstance(doc, dict) else {}
    return SimulationResults(d, points, {k: v for k, v in meta_doc.items() if k != "points"})


def _points_in(doc) -> list | None:
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict):
        for k in ("points", "summaries", "summary"):
            if isinstance(doc.get(k), list):
                return doc[k]
    return None
