"""Per-request records and per-point aggregates: what every metric means.

Per request (all times on the simulation clock, seconds; latencies in ms):
- queue_ms: arrival -> the engine first schedules any of its work (its first prefill chunk).
- ttft_ms: arrival -> its first output is emitted. Diffusion: the end of its first canvas's commit
  pass (prefill + k denoising steps + the commit: the whole first 256-token burst arrives then).
  AR/MTP: the end of the engine step that ran its prompt's last prefill chunk.
- e2e_ms: arrival -> its last output token is emitted.
- Where the profile carries a front-end latency for the mode (engine["frontend_latency_ms"],
  costmodel/schemas/profile.py), the first token and the finish are seen that much later by the
  client (vLLM's input and output processing); it does not hold the engine. The front end's handover
  and the idle engine's pickup (engine["frontend_handover_ms"], ["engine_pickup_ms"]) are simulated as a
  queue ahead of a point's one replica (sim.py: queue_ms includes them); with several replicas, and in a
  fleet, they are added here as a lone request meets them (`client_lag_s`).
- tpot_ms: (e2e_ms - ttft_ms) / (output_tokens - 1): time per output token EXCLUDING the first;
  NaN for one-token outputs. Diffusion emits 256-token bursts, so a one-canvas output has TPOT 0.
- steps: engine steps the request took part in (prefill chunks, decode/verify steps, denoising
  steps and commits; a phase interrupted by preemption counts the steps it ran).
- blocks: diffusion canvases (ceil(output_tokens / 256)); 0 for AR and MTP.
- output_tokens: the request's output length (emitted in full when finished).
- warmup: arrived in the first `warmup_frac` (default 10%) of the arrival window.

Per point (PointSummary):
- Percentiles (p50/p90/p95/p99, numpy 'linear') and means are over finished requests that arrived
  after the warm-up span; warm-up requests stay in the records.
- The steady window is [warm-up end, end of arrivals] (or the abort time). throughput_rps: requests
  that finished inside it / its length; output_tokens_per_s and total_tokens_per_s: output (and
  prompt + output) tokens of those requests / its length. On an unstable point these measure the
  saturated service rate, not the offered load.
- gpu_busy_frac: time the replicas spent running engine steps inside [0, end of arrivals],
  / (replicas x that span).
- mean_batch_seqs / mean_batch_tokens: per engine step (averaged over steps, all replicas),
  sequences in the step and query tokens in its forward pass (MTP: verify tokens; its k draft
  passes run the same sequences). batch_composition: mean sequences per step by pass kind.
- mean_in_system: time-average number of requests arrived and not finished over the arrival
  window (Little's L; L = lambda x mean E2E holds for a stable point).
- requests_arrived = requests_finished + requests_unfinished, always.
- Closed-loop clients (`concurrency`, sim.py): a request's arrival is its send (when a client's
  slot freed), so every latency runs from the send, as vllm bench serve measures it; the arrival
  window ends at the last send.

Stability (stable=False means: the queue grows without bound; its latencies are not steady-state):
1. abort: a replica's waiting queue held more than `abort_backlog_s` seconds of its arrivals; the
   run stops there (arrivals outpace service so badly that simulating on is wasted time);
2. backlog trend: a least-squares line through the time-average number in system of the 20 bins of
   the arrival window after warm-up; growth = slope x span. Unstable when growth exceeds
   max(10, 3% of the arrivals in that span, half the mean number in system over the span). A
   stable queue fluctuates around its level (the last two floors keep that noise, and what is left
   of the ramp-up from an empty system in a short run, from reading as growth); an overloaded one
   grows at the (arrival - service) rate, by the overload fraction of the arrivals and by more than
   its own mean level, so overloads above ~3% of capacity are caught; milder ones show as long
   queues in the percentiles.
3. unfinished: requests still in the system `drain_s` after the last arrival.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from costmodel.modes import ModeDraws, ServingMode
from costmodel.schemas.profile import engine_pickup_ms, frontend_handover_ms, frontend_latency_ms
from costmodel.schemas.results import PERCENTILES, REQUEST_COLUMNS, PointSummary
from costmodel.stepcost import host_overhead
from simulate.percentiles import linear_percentiles

if TYPE_CHECKING:
    import pandas as pd

TREND_BINS = 20
TREND_MIN_GROWTH = 10.0
TREND_FRACTION = 0.03
TREND_LEVEL = 0.5


class Records:
    """Per-request outcome arrays, written by the engine as events happen (index = request id)."""

    def __init__(self, n: int):
        nan = np.full(n, np.nan)
        self.start_s = nan.copy()
        self.first_s = nan.copy()
        self.finish_s = nan.copy()
        self.steps = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.cached_tokens = np.zeros(n, dtype=np.int64)  # prefix-cache hit at first admission
        self.replica = np.full(n, -1, dtype=np.int64)


class Tracker:
    """Requests in the system over time: its integral per bin of the arrival window [0, window_end]."""

    def __init__(self, window_end: float, bins: int = TREND_BINS):
        self.window_end = float(window_end)
        self.nbins = bins
        w = self.window_end / bins if self.window_end > 0 else 0.0
        self.edges = [w * (i + 1) for i in range(bins)]
        if bins:
            self.edges[-1] = self.window_end
        self.area = [0.0] * bins
        self.b = 0
        self.n = 0
        self.t_last = 0.0
        self.arrived = 0
        self.departed = 0

    def _acc(self, t: float) -> None:
        tl = self.t_last
        if tl < self.window_end:
            te = t if t < self.window_end else self.window_end
            b, edges, n = self.b, self.edges, self.n
            last = self.nbins - 1
            while b < last:
                e = edges[b]  # (C doubles when compiled: no float made per comparison)
                if not te > e:
                    break
                if n:
                    a = self.area[b]
                    self.area[b] = a + n * (e - tl)
                tl = e
                b += 1
            if n:
                a = self.area[b]
                self.area[b] = a + n * (te - tl)
            self.b = b
        self.t_last = t

    def arrive(self, t: float) -> None:
        self._acc(t)
        self.n += 1
        self.arrived += 1

    def depart(self, t: float) -> None:
        self._acc(t)
        self.n -= 1
        self.departed += 1

    def close(self, t: float) -> None:
        self._acc(t)

    def bin_means(self) -> np.ndarray:
        widths = np.diff([0.0] + self.edges)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(self.area) / widths


def _stats(x: np.ndarray) -> dict:
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return {f"p{p}": float("nan") for p in PERCENTILES} | {"mean": float("nan")}
    q = linear_percentiles(x, PERCENTILES)  # np.percentile's values, without the import its first call makes
    return {f"p{p}": float(v) for p, v in zip(PERCENTILES, q)} | {"mean": float(x.mean())}


def mser_truncation(y: np.ndarray) -> int:
    """How many leading bins are the ramp-up from an empty system, by the MSER rule (White 1997): the
    truncation d < n/2 that minimises the marginal standard error var(y[d:]) / (n - d). A queue near
    saturation takes several sojourn times to fill, longer than a fixed share of a short window, and a
    ramp-up left in reads as growth. Where the minimum lies at half the window the series found no
    level (a queue that grows): nothing is cut."""
    n = len(y)
    best, best_d = math.inf, 0
    for d in range(n // 2 + 1):
        rest = y[d:]
        se = float(np.var(rest)) / (n - d)
        if se < best - 1e-12:
            best, best_d = se, d
    return 0 if best_d == n // 2 else best_d  # still no level at half the window: growth, or a window too short to tell


def backlog_trend(tracker: Tracker, warmup_s: float, end_s: float) -> tuple[float, float, float]:
    """(growth in requests over the steady span by a least-squares line, span seconds, mean
    requests in system over the span)."""
    means = tracker.bin_means()
    edges = np.asarray([0.0] + tracker.edges)
    centres = (edges[:-1] + edges[1:]) / 2
    keep = (edges[:-1] >= warmup_s - 1e-9) & (edges[1:] <= end_s + 1e-9) & np.isfinite(means)
    if keep.sum() < 3:
        return 0.0, 0.0, float("nan")
    x, y = centres[keep], means[keep]
    d = mser_truncation(y)
    x, y = x[d:], y[d:]
    span = float(edges[1:][keep][d:].max() - edges[:-1][keep][d:].min())
    slope = np.polyfit(x, y, 1)[0]
    return float(slope * span), span, float(y.mean())


@dataclass
class FinishedRun:
    """Everything the event loop (sim.py) hands over when a point's simulation ends."""

    mode: ServingMode
    profile: object  # costmodel.schemas.profile.Profile
    reqs: object  # simulate.workload.Requests
    draws: ModeDraws
    cfg: object  # simulate.engine.EngineConfig, every setting filled in
    limits: object  # simulate.engine.ReplicaLimits
    replicas: list
    rec: Records
    tracker: Tracker
    n_arrived: int
    t_end: float
    warmup_s: float
    abort: str
    drain_s: float
    seed: int
    kv_cap: int
    router: str
    workload_desc: str


@dataclass
class _Stability:
    stable: bool
    reason: str
    growth: float


def _stability(run: FinishedRun, arr: np.ndarray, finished: np.ndarray, window_end: float) -> _Stability:
    """The three instability tests of the module docstring, in order."""
    growth, trend_span, level = backlog_trend(run.tracker, run.warmup_s, window_end)
    arrivals_in_trend = int(((arr >= window_end - trend_span) & (arr <= window_end)).sum()) if trend_span else 0
    threshold = max(TREND_MIN_GROWTH, TREND_FRACTION * arrivals_in_trend, TREND_LEVEL * level if trend_span else 0.0)
    unfinished = int(len(arr) - finished.sum())
    reasons = []
    if run.abort:
        reasons.append(run.abort)
    if trend_span and growth > threshold:
        reasons.append(f"backlog grew by {growth:.0f} requests over the steady {trend_span:.0f} s "
                       f"({100 * growth / max(arrivals_in_trend, 1):.1f}% of its arrivals; limit {threshold:.0f})")
    if unfinished and not run.abort:
        reasons.append(f"{unfinished} requests still unfinished {run.drain_s:.0f} s after the last arrival")
    reason = "; ".join(reasons) if reasons else f"backlog flat ({growth:+.1f} requests over the steady {trend_span:.0f} s; limit {threshold:.0f})"
    return _Stability(not reasons, reason, growth)


def _batch_stats(run: FinishedRun) -> dict:
    """Engine steps, mean sequences and query tokens per step, and the composition by pass kind."""
    reps = run.replicas
    steps = sum(r.n_steps for r in reps)
    acc_pre = sum(r.acc_prefill_seqs for r in reps)
    acc_pre_tok = sum(r.acc_prefill_tokens for r in reps)
    acc_groups = [sum(r.acc_groups[i] for r in reps) for i in range(len(run.mode.group_kinds))]
    per = (lambda x: x / steps) if steps else (lambda x: float("nan"))
    tokens = acc_pre_tok + sum(a * g for a, g in zip(acc_groups, run.draws.group_tokens))
    return dict(engine_steps=int(steps), mean_batch_seqs=per(acc_pre + sum(acc_groups)), mean_batch_tokens=per(tokens),
                batch_composition=run.mode.batch_composition(per(acc_pre), tuple(per(a) for a in acc_groups)))


@dataclass(frozen=True)
class RequestRecords:
    """One point's per-request records, column by column (REQUEST_COLUMNS: arrays, `mode` one
    value): a table only where one is written or read (`frame`), so a command that prints the
    summary alone never imports the table library."""

    columns: dict

    def frame(self) -> "pd.DataFrame":
        import pandas as pd  # the table library, where the table is built: `costmodel simulate` without -o never loads it

        return pd.DataFrame(self.columns, columns=list(REQUEST_COLUMNS))


def front_queued(profile, mode: str, replicas: int) -> bool:
    """Whether a point simulates the front end's handover queue and the idle engine's pickup (sim.py): on one
    replica, where the profile carries either."""
    return replicas == 1 and (frontend_handover_ms(profile, mode) > 0 or engine_pickup_ms(profile, mode) > 0)


def client_lag_s(profile, mode: str, queued: bool) -> float:
    """How much later than the engine emits them the client sees a first token and a finish (s): the front end's
    constant latency, plus, where the handover and the pickup were not simulated (`queued` False: several
    replicas, a fleet), each once, as a lone request meets them (a burst's queue behind them is then not priced)."""
    lag = frontend_latency_ms(profile, mode)
    if not queued:
        lag += frontend_handover_ms(profile, mode) + engine_pickup_ms(profile, mode)
    return lag / 1e3


def summarise(run: FinishedRun) -> tuple[PointSummary, RequestRecords]:
    """The point's summary (PointSummary: metric meanings in the module docstring) and its
    per-request records."""
    reqs, rec, n = run.reqs, run.rec, run.n_arrived
    arr, prompt, out = reqs.arrival_s[:n], reqs.prompt_tokens[:n], reqs.output_tokens[:n]
    fe = client_lag_s(run.profile, run.mode.name, len(run.replicas) == 1)  # the client sees its first token and finish this much later
    start, first, fin = rec.start_s[:n], rec.first_s[:n] + fe, rec.finish_s[:n] + fe
    finished = np.isfinite(fin)
    warm = arr < run.warmup_s
    queue_ms, ttft_ms, e2e_ms = (start - arr) * 1e3, (first - arr) * 1e3, (fin - arr) * 1e3
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot_ms = np.where(out > 1, (e2e_ms - ttft_ms) / (out - 1), np.nan)
    window_end = min(reqs.window_s, run.t_end) if run.abort else reqs.window_s
    span = max(window_end - run.warmup_s, 1e-12)
    in_win = finished & (fin >= run.warmup_s) & (fin <= window_end)
    steady = finished & ~warm
    stab = _stability(run, arr, finished, window_end)
    busy = sum(r.busy_window_s for r in run.replicas)
    busy_span = window_end if window_end > 0 else run.t_end
    summary = PointSummary(
        mode=run.mode.name, hardware=run.profile.hardware.id, profile_id=run.profile.profile_id, qps=float(reqs.qps),
        replicas=len(run.replicas), requests_arrived=n, requests_finished=int(finished.sum()), requests_unfinished=int(n - finished.sum()),
        stable=stab.stable, stability_reason=stab.reason, duration_s=float(reqs.window_s),
        throughput_rps=float(in_win.sum() / span), output_tokens_per_s=float(out[in_win].sum() / span),
        total_tokens_per_s=float((out[in_win] + prompt[in_win]).sum() / span),
        output_tokens=int(out[finished].sum()), prompt_tokens=int(prompt[finished].sum()),
        gpu_busy_frac=float(busy / (len(run.replicas) * busy_span)) if busy_span > 0 else float("nan"),
        ttft_ms=_stats(ttft_ms[steady]), e2e_ms=_stats(e2e_ms[steady]), tpot_ms=_stats(tpot_ms[steady]),
        queue_ms=_stats(queue_ms[steady]), seed=int(run.seed), provenance=provenance_text(run.profile, run.mode),
        mean_in_system=float(sum(run.tracker.area) / run.tracker.window_end) if run.tracker.window_end > 0 else float("nan"),
        backlog_growth=float(stab.growth), warmup_s=float(run.warmup_s), simulated_s=float(run.t_end),
        preemptions=int(sum(r.preemptions for r in run.replicas)), kv_capacity_tokens=int(run.kv_cap), max_num_seqs=int(run.cfg.max_num_seqs),
        max_num_batched_tokens=int(run.cfg.max_num_batched_tokens), router=run.router, workload=run.workload_desc, **_batch_stats(run),
    )
    summary.max_running_requests = int(run.limits.max_running)
    summary.running_limit = run.limits.running_binding
    summary.binding_limit = binding_limit(summary.mean_batch_seqs, run.limits.max_running, run.limits.running_binding)
    summary.engine_settings = run.cfg.tagged() if hasattr(run.cfg, "tagged") else ""
    summary.concurrency = int(getattr(reqs, "concurrency", 0) or 0)
    _prefix_stats(summary, run, np.isfinite(start))
    return summary, _request_records(run, queue_ms, ttft_ms, e2e_ms, tpot_ms, finished, warm, fe)


def _prefix_stats(summary: PointSummary, run: FinishedRun, admitted: np.ndarray) -> None:
    """Hit rates over the requests admitted (first admissions: vLLM's num_cached_tokens) and the
    prefill tokens every admission skipped (simulate/kvcache.py)."""
    caches = [r.pc for r in run.replicas if r.pc is not None]
    summary.prefix_caching = bool(caches)
    if not caches:
        return
    n, bs = run.n_arrived, caches[0].bs
    hit = run.rec.cached_tokens[:n][admitted]
    prompt = run.reqs.prompt_tokens[:n][admitted]
    summary.prefix_hit_rate_tokens = float(hit.sum() / prompt.sum()) if prompt.sum() else 0.0
    summary.prefix_hit_rate_blocks = float((hit // bs).sum() / (prompt // bs).sum()) if (prompt // bs).sum() else 0.0
    summary.prefill_tokens_saved = int(sum(c.hit_tokens for c in caches))


def _request_records(run: FinishedRun, queue_ms, ttft_ms, e2e_ms, tpot_ms, finished, warm, fe: float = 0.0) -> RequestRecords:
    reqs, rec, n = run.reqs, run.rec, run.n_arrived
    names = np.asarray(reqs.regimes, dtype=object)
    blocks = run.draws.blocks
    return RequestRecords({
        "request_id": np.arange(n, dtype=np.int64), "mode": run.mode.name, "regime": names[reqs.regime_idx[:n]],
        "replica": rec.replica[:n], "arrival_s": reqs.arrival_s[:n], "start_s": rec.start_s[:n], "first_token_s": rec.first_s[:n] + fe,
        "finish_s": rec.finish_s[:n] + fe, "prompt_tokens": reqs.prompt_tokens[:n], "output_tokens": reqs.output_tokens[:n],
        "blocks": blocks[:n] if blocks is not None else np.zeros(n, dtype=np.int64),
        "steps": rec.steps[:n], "queue_ms": queue_ms, "ttft_ms": ttft_ms, "e2e_ms": e2e_ms, "tpot_ms": tpot_ms,
        "preemptions": rec.preemptions[:n], "cached_tokens": rec.cached_tokens[:n], "finished": finished, "warmup": warm,
    })


BINDING_FILL = 0.9  # steps this full of the running cap mean the cap, not step time, limits service


def binding_limit(mean_batch_seqs: float, max_running: int, running_binding: str) -> str:
    """What limits a replica at this point: its running cap (KV blocks, max_num_seqs or sampler
    buffers) when engine steps run at least BINDING_FILL of it on average; otherwise compute (the
    step time of the batches it does run)."""
    return running_binding if mean_batch_seqs >= BINDING_FILL * max_running else "compute"


def provenance_text(profile, mode: ServingMode) -> str:
    """E.g. "pass: measured; commit: published" - where this point's numbers come from."""
    m = profile.mode(mode.name)
    parts = [f"pass: {'+'.join(sorted({pm.provenance.kind for pm in m.pass_models.values()}))}"]
    term = host_overhead.mode_record(profile.engine, mode.name)
    step = [f"engine step: {host_overhead.basis(term)}"] if isinstance(term, dict) else []
    return "; ".join(parts + mode.behaviour_provenance(profile) + step)
