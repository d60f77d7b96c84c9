"""Predicted vs measured for loads a real engine served: what `costmodel compare-bench` prints for a
`vllm bench serve --save-result` file, and what a benchmark over recorded loads calls.

    from simulate.compare import MeasuredLoad, compare_loads
    load = MeasuredLoad("closed", prompt_tokens=[1024] * 100, output_tokens=[1024] * 100, concurrency=16,
                        tok_s=1450.0, ttft_p50_ms=420.0, ttft_p95_ms=610.0, tpot_p50_ms=9.8)
    for row in compare_loads(profile, mode, [load], EngineSettings(max_num_seqs=16)):
        row.error("tok_s"), row.rows()       # predicted / measured - 1; (metric, predicted, measured, error)

A load is requests of given prompt and output lengths (in send order), sent as vllm bench serve
sends them: `closed`, N clients (--max-concurrency N: at most N in flight, a request sent when one
finishes; with a rate as well, both: sim.py); `poisson`, open-loop arrivals at a rate (gamma gaps of
shape `burstiness`, 1 = Poisson, scaled so the last request is sent at n / rate, as vllm bench's
get_request does) or at given times (`arrival_s`), optionally capped by `concurrency` too. Each load
is simulated once on the profile (one replica, nothing left out as warm-up) and its figures are
computed as vllm bench computes them (vllm/benchmarks/serve.py calculate_metrics), over every
finished request:

- output tok/s: output tokens of the finished requests / the benchmark's duration, from its start
  (the simulation clock's 0) to the last finish;
- TTFT p50 / p95: percentiles (numpy's linear, as vllm bench) of send -> first output token;
- TPOT p50: the median, over requests of more than one output token, of (e2e - ttft) / (output - 1).

A figure the measurement lacks (vllm bench saves percentiles other than the median only for
--metric-percentiles, p99 by default) is NaN: its error is NaN and the comparison says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.engine_settings import EngineSettings, layered
from costmodel.errors import UserError
from costmodel.schemas.profile import Profile
from costmodel.shipped import resolve_profile
from costmodel.schemas.bench_result import read_results, settled_mode, unsettled_modes
from simulate.batch import DEFAULT_HARDWARE, check_requests_fit
from simulate.engine import mode_settings
from simulate.engine_recorded import bench_settings
from simulate.point import check_mode, resolve_engine
from simulate.sim import simulate_point
from simulate.workload import Trace, Workload, given_requests

KINDS = ("closed", "poisson")
# metric -> how it is shown; each is a field of MeasuredLoad (measured) and LoadComparison (predicted)
METRICS = {"tok_s": "output tok/s", "ttft_p50_ms": "TTFT p50 ms", "ttft_p95_ms": "TTFT p95 ms", "tpot_p50_ms": "TPOT p50 ms"}
NAN = float("nan")


@dataclass(frozen=True)
class MeasuredLoad:
    """One load an engine served and what was measured (NaN: not measured). Lengths per request, in
    send order. `closed`: `concurrency` clients (and, with `rate`, a rate limit as well); `poisson`:
    `arrival_s` (send times, s) or `rate` (requests/s, gamma gaps of shape `burstiness`), with an
    optional `concurrency` cap."""

    kind: str
    prompt_tokens: tuple
    output_tokens: tuple
    tok_s: float = NAN  # output tokens / the benchmark's duration (vllm bench output_throughput)
    ttft_p50_ms: float = NAN
    ttft_p95_ms: float = NAN
    tpot_p50_ms: float = NAN  # vllm bench median_tpot_ms: (e2e - ttft) / (output tokens - 1), median over requests
    concurrency: int = 0
    rate: float | None = None
    burstiness: float = 1.0
    arrival_s: tuple | None = None
    label: str = ""
    notes: tuple = ()  # what the measurement's reader noted (e.g. mean lengths standing for per-request ones)

    def __post_init__(self):
        for k in ("prompt_tokens", "output_tokens", "arrival_s", "notes"):
            v = getattr(self, k)
            if v is not None and not isinstance(v, tuple):
                object.__setattr__(self, k, tuple(v) if not isinstance(v, str) else (v,))

    @property
    def where(self) -> str:
        return f"load {self.label!r}" if self.label else "the load"

    def check(self) -> None:
        if self.kind not in KINDS:
            raise UserError(f"{self.where}: kind {self.kind!r} is unknown", f"use one of {', '.join(KINDS)}")
        if self.kind == "closed" and not self.concurrency:
            raise UserError(f"{self.where} is closed-loop but gives no concurrency", "give concurrency=N, the number of clients")
        if self.kind == "poisson" and self.rate is None and self.arrival_s is None:
            raise UserError(f"{self.where} is open-loop (poisson) but gives neither a rate nor arrival_s", "give rate=requests/s or the arrival times")
        if self.kind == "closed" and self.arrival_s is not None:
            raise UserError(f"{self.where} is closed-loop: its send times follow from the finishes, so arrival_s is not taken",
                            "drop arrival_s, or make it kind 'poisson' with a concurrency cap")

    def describe(self) -> str:
        lens = _lengths_text(self.prompt_tokens, self.output_tokens)
        if self.kind == "closed":
            load = (f"closed loop, {self.concurrency} client{'s' if self.concurrency != 1 else ''}"
                    + (f", rate {self.rate:g} req/s" if self.rate is not None else ", no rate limit"))
        else:
            load = ("given arrival times" if self.arrival_s is not None else
                    f"{self.rate:g} req/s, " + ("Poisson" if self.burstiness == 1 else f"gamma gaps of shape (burstiness) {self.burstiness:g}"))
            load += f", at most {self.concurrency} in flight" if self.concurrency else ""
        return f"{load}; {len(self.prompt_tokens)} requests, {lens}"


@dataclass(frozen=True)
class LoadComparison:
    """One load: predicted (these fields) vs measured (`load`'s), as vllm bench computes each figure."""

    load: MeasuredLoad
    mode: str
    tok_s: float
    ttft_p50_ms: float
    ttft_p95_ms: float
    tpot_p50_ms: float
    finished: int  # simulated requests that finished (all, unless the notes say otherwise)
    duration_s: float  # the simulated benchmark's duration: clock 0 to the last finish
    engine_settings: str = ""  # the settings simulated, each with its source (EngineSettings.tagged)
    notes: tuple = field(default=())
    ttft_ms: tuple = field(default=())  # each simulated request's time to first token, in send order (NaN: unfinished)
    e2e_ms: tuple = field(default=())  # each simulated request's end-to-end latency, in send order (NaN: unfinished)

    def measured(self, metric: str) -> float:
        return float(getattr(self.load, metric))

    def predicted(self, metric: str) -> float:
        return float(getattr(self, metric))

    def error(self, metric: str) -> float:
        """predicted / measured - 1 (NaN where either is missing)."""
        m, p = self.measured(metric), self.predicted(metric)
        return p / m - 1 if math.isfinite(m) and math.isfinite(p) and m != 0 else NAN

    def rows(self) -> list[tuple[str, float, float, float]]:
        """(metric label, predicted, measured, relative error) per metric."""
        return [(label, self.predicted(k), self.measured(k), self.error(k)) for k, label in METRICS.items()]

    def flat(self) -> dict:
        """One row: the load and, per metric, <metric>_predicted, _measured, _error."""
        ld = self.load
        out = {"label": ld.label, "mode": self.mode, "kind": ld.kind, "concurrency": ld.concurrency, "rate": ld.rate, "burstiness": ld.burstiness,
               "requests": len(ld.prompt_tokens), "finished": self.finished, "duration_s": self.duration_s}
        for k in METRICS:
            out.update({f"{k}_predicted": self.predicted(k), f"{k}_measured": self.measured(k), f"{k}_error": self.error(k)})
        out["engine_settings"] = self.engine_settings
        out["notes"] = "; ".join(self.notes + ld.notes)
        return out


def compare_loads(profile: Profile, mode: str, loads: list[MeasuredLoad], engine_settings: EngineSettings | dict | None = None, *,
                  seed: int = 0) -> list[LoadComparison]:
    """Each load simulated on `profile` in `mode` with `engine_settings` (over the profile's engine
    and vLLM's defaults: simulate/engine.py), against what was measured. Deterministic per seed."""
    serving = check_mode(profile, mode)
    cfg = resolve_engine(profile, engine_settings)
    rewrites = tuple(mode_settings(profile, serving, cfg)[1])
    out = []
    for i, ld in enumerate(loads):
        if not isinstance(ld, MeasuredLoad):
            raise UserError(f"load {i} is a {type(ld).__name__}, not a MeasuredLoad", "build each load with simulate.compare.MeasuredLoad(...)")
        ld.check()
        reqs = given_requests(profile, ld.prompt_tokens, ld.output_tokens, arrival_s=ld.arrival_s, qps=ld.rate, burstiness=ld.burstiness,
                              concurrency=ld.concurrency, seed=seed, where=ld.where)
        trace = Trace(ld.where, tuple(reqs.arrival_s.tolist()), tuple(reqs.prompt_tokens.tolist()), tuple(reqs.output_tokens.tolist()), None)
        check_requests_fit(profile, [serving], Workload(trace=trace, source=ld.where), cfg)  # as vLLM refuses a request past max_model_len
        (summary, df), _ = simulate_point(profile, serving, reqs, replicas=1, cfg=cfg, router="least-outstanding", seed=seed, warmup_frac=0.0,
                                          abort_backlog_s=None, drain_s=None, workload_desc=ld.describe())
        fig = bench_figures(df)
        notes = rewrites + ((f"{len(df) - fig['finished']} of {len(df)} simulated requests had not finished {summary.simulated_s:.0f} s "
                             "into the run; the figures are over the finished ones",) if fig["finished"] < len(df) else ())
        out.append(LoadComparison(ld, mode, fig["tok_s"], fig["ttft_p50_ms"], fig["ttft_p95_ms"], fig["tpot_p50_ms"], fig["finished"],
                                  fig["duration_s"], summary.engine_settings, notes,
                                  tuple(float(x) for x in df["ttft_ms"].where(df["finished"].astype(bool))),
                                  tuple(float(x) for x in df["e2e_ms"].where(df["finished"].astype(bool)))))
    return out


def bench_figures(requests: pd.DataFrame) -> dict:
    """vllm bench serve's figures from simulated per-request rows (costmodel.schemas.results.REQUEST_COLUMNS)."""
    done = requests[requests["finished"].astype(bool)]
    if done.empty:
        return {"tok_s": NAN, "ttft_p50_ms": NAN, "ttft_p95_ms": NAN, "tpot_p50_ms": NAN, "finished": 0, "duration_s": NAN}
    duration = float(done["finish_s"].max())
    ttft = done["ttft_ms"].to_numpy(float)
    out = done["output_tokens"].to_numpy()
    multi = out > 1
    tpot = ((done["e2e_ms"].to_numpy(float) - ttft)[multi] / (out[multi] - 1)) if multi.any() else np.zeros(1)
    p50, p95 = np.percentile(ttft, [50, 95])
    return {"tok_s": float(out.sum() / duration) if duration > 0 else NAN, "ttft_p50_ms": float(p50), "ttft_p95_ms": float(p95),
            "tpot_p50_ms": float(np.median(tpot)), "finished": int(len(done)), "duration_s": duration}


# ---- a `vllm bench serve --save-result` file -------------------------------------------------------

@dataclass
class CompareBenchConfig:
    files: list[str]
    hardware: str | None = None  # the shipped profile's GPU (default: the catalog's), or --profile's
    profile_path: str | None = None
    mode: str | None = None  # default: the files' (diffusion_* counters, spec_decode_*, the model name)
    engine: EngineSettings | None = None  # the CLI layer, over each file's recorded settings
    seed: int = 0


@dataclass
class FileComparison:
    path: str
    mode_source: str
    comparisons: list[LoadComparison]


@dataclass
class CompareBenchOutcome:
    profile: Profile
    mode: str
    files: list[FileComparison]


def bench_loads(path: str | Path) -> tuple[list[MeasuredLoad], list[dict]]:
    """The loads of one `vllm bench serve --save-result` file (one per result; JSON lines hold
    several), and the results themselves (costmodel/schemas/bench_result.py reads and checks them)."""
    p = Path(path)
    results = read_results(p)
    loads = [_bench_load(r, p.name + (f"#{i}" if len(results) > 1 else "")) for i, r in enumerate(results)]
    return loads, results


def _bench_load(r: dict, name: str) -> MeasuredLoad:
    where = f"bench result {name}"
    done = int(r["completed"])
    if done < 1:
        raise UserError(f"{where} has no completed request", "compare a run in which requests completed")
    notes = []
    ok = [not e for e in r["errors"]] if isinstance(r.get("errors"), list) else None
    if isinstance(r.get("input_lens"), list) and isinstance(r.get("output_lens"), list):
        ok = ok or [True] * len(r["input_lens"])
        prompt = [x for x, good in zip(r["input_lens"], ok) if good]
        output = [x for x, good in zip(r["output_lens"], ok) if good]
    else:
        missing = [k for k in ("total_input_tokens", "total_output_tokens") if not r.get(k)]
        if missing:
            raise UserError(f"{where} lacks {' and '.join(missing)}, so its requests' lengths are unknown",
                            "compare a file vllm bench serve --save-result wrote whole (--save-detailed adds per-request lengths)")
        prompt, output = [round(r["total_input_tokens"] / done)] * done, [round(r["total_output_tokens"] / done)] * done
        notes.append("each request at the file's mean prompt and output lengths (no per-request lengths: --save-detailed saves them)")
    if r.get("failed"):
        notes.append(f"{int(r['failed'])} request(s) failed in the benchmark and are not simulated")
    rate = r.get("request_rate")
    rate = None if rate in (None, "inf") or (isinstance(rate, float) and math.isinf(rate)) else float(rate)
    n = r.get("max_concurrency") or 0
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise UserError(f"{where}: max_concurrency is {n!r}, not a number of clients", "regenerate the file with `vllm bench serve --save-result`")
    if rate is None and not n:  # vllm bench sends every request at once
        n = len(prompt)
        notes.append(f"no rate and no --max-concurrency: all {n} requests sent at once (a closed loop of {n} clients)")
    burst = r.get("burstiness")
    burst = 1.0 if burst is None or rate is None else float(burst)

    def fig(*keys: str) -> float:
        v = next((r[k] for k in keys if isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool)), None)
        return float(v) if v is not None else NAN

    tok_s = fig("output_throughput")
    if not math.isfinite(tok_s):
        raise UserError(f"{where} lacks output_throughput", "compare a file vllm bench serve --save-result wrote whole")
    return MeasuredLoad("closed" if n else "poisson", tuple(prompt), tuple(output), tok_s=tok_s, ttft_p50_ms=fig("median_ttft_ms", "p50_ttft_ms"),
                        ttft_p95_ms=fig("p95_ttft_ms"), tpot_p50_ms=fig("median_tpot_ms", "p50_tpot_ms"), concurrency=n, rate=rate,
                        burstiness=burst, label=str(r.get("label") or name), notes=tuple(notes))


def from_recorded(load) -> MeasuredLoad:
    """A load a recorded engine served (costmodel.schemas.engine_loads.RecordedLoad) as a MeasuredLoad:
    closed loops at their concurrency, Poisson loads at their recorded send times."""
    figs = dict(tok_s=load.tok_s, ttft_p50_ms=load.ttft_p50_ms, ttft_p95_ms=load.ttft_p95_ms, tpot_p50_ms=load.tpot_p50_ms, label=load.name)
    if load.kind == "closed":
        return MeasuredLoad("closed", load.prompt_tokens, load.output_tokens, concurrency=int(load.concurrency), **figs)
    return MeasuredLoad("poisson", load.prompt_tokens, load.output_tokens, arrival_s=load.send_s, **figs)


def run_loads(path: str | Path) -> tuple[list[MeasuredLoad], str, EngineSettings]:
    """The loads of a recorded engine run (a setup directory of measure/vllm/gpu_run.py: its
    requests, loads.json and manifest), less the warm-up; its mode and engine settings."""
    from costmodel.engine_settings import from_run_engine
    from costmodel.schemas.rundir import load_run
    from costmodel.schemas.engine_setup import WARMUP
    from costmodel.schemas.engine_loads import recorded_loads

    run = load_run(path)
    loads = [from_recorded(ld) for ld in recorded_loads(Path(path)) if ld.name != WARMUP.name]
    if not loads:
        raise UserError(f"{path} records no load", "pass a setup directory written by costmodel measure --engine vllm on a GPU")
    return loads, run.manifest.mode, from_run_engine(run.manifest.engine, run.manifest.serving, f"run {path}")


def compare_bench(cfg: CompareBenchConfig) -> CompareBenchOutcome:
    """Every load of every file simulated on the profile (--profile, else the shipped default for the
    GPU) under the file's recorded engine settings (its counters; a transcribed figure's server)
    below cfg.engine, against what the file measured."""
    if not cfg.files:
        raise UserError("no bench file given", "pass one or more `vllm bench serve --save-result` JSON files (or recorded engine runs)")
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or cfg.seed < 0:
        raise UserError(f"--seed {cfg.seed!r} must be an integer >= 0", "e.g. --seed 1")
    runs = {f: run_loads(f) for f in cfg.files if Path(f).is_dir()}  # recorded engine runs: loads, mode, settings
    read = [(f, runs[f][0], None) if f in runs else (f, *bench_loads(f)) for f in cfg.files]
    modes = {}
    for f, _, results in read:
        if f in runs:
            modes[f] = (cfg.mode or runs[f][1], "--mode" if cfg.mode else "the run's manifest")
            continue
        model = next((r["model_id"] for r in results if isinstance(r.get("model_id"), str)), "")
        settled = cfg.mode or settled_mode(results, model)
        if settled is None:
            raise UserError(f"{f}: its counters do not say which mode the server ran (no spec_decode_* or diffusion_* keys, model "
                            f"{model or 'unnamed'}: one of {', '.join(unsettled_modes())})",
                            "pass --mode " + " or --mode ".join(unsettled_modes()))
        modes[f] = (cfg.mode, "--mode") if cfg.mode else (settled, "from the file")
    if len({m for m, _ in modes.values()}) > 1:
        raise UserError("the bench files are of different modes (" + ", ".join(f"{Path(f).name}: {m}" for f, (m, _) in modes.items()) + ")",
                        "compare each mode's files on their own, or give --mode")
    mode = next(iter(modes.values()))[0]
    profile = resolve_profile(cfg.profile_path, cfg.hardware or DEFAULT_HARDWARE)
    if cfg.profile_path and cfg.hardware and profile.hardware.id != cfg.hardware:
        raise UserError(f"--profile {cfg.profile_path} is for {profile.hardware.id}, not --hardware {cfg.hardware}",
                        "drop --hardware (the profile fixes the GPU) or pass a profile for that GPU")
    serving = check_mode(profile, mode)
    out = []
    for f, loads, results in read:
        engine = layered(cfg.engine, runs[f][2] if f in runs else bench_settings(results, serving, Path(f).name))
        out.append(FileComparison(str(f), modes[f][1], compare_loads(profile, mode, loads, engine, seed=cfg.seed)))
    return CompareBenchOutcome(profile, mode, out)


def _lengths_text(prompt: tuple, output: tuple) -> str:
    def one(x: tuple, what: str) -> str:
        lo, hi = min(x), max(x)
        return f"{what} {lo}" if lo == hi else f"{what} {lo}-{hi} (mean {sum(x) / len(x):.0f})"
    return f"{one(prompt, 'prompt')}, {one(output, 'output')} tokens"


__all__ = ["KINDS", "METRICS", "CompareBenchConfig", "CompareBenchOutcome", "FileComparison", "LoadComparison", "MeasuredLoad",
           "bench_figures", "bench_loads", "compare_bench", "compare_loads"]
