"""The endpoint backend of `costmodel measure` (--endpoint URL): `LoadTestOptions` (the options as
given) -> `run_loadtest`, which checks every one of them and runs the loads.

A run is one load per --qps value (each a resumable unit "qps=<rate>"); each load sends
--requests requests and/or arrivals for --duration seconds (whichever ends first), Poisson or
evenly spaced, at most --concurrency in flight. The run directory gets the tables requests,
chunks, server_metrics and load_summary, the raw /metrics texts of each load
(metrics/<unit>.before.prom, .after.prom) and, when the server reports speculative decoding,
mtp_counters.json for `costmodel fit --mtp-metrics`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit, urlunsplit

import httpx
import numpy as np
from rich.table import Table

from costmodel import atomic
from costmodel.console import make_console
from costmodel.errors import UserError
from costmodel.models import MODELS
from costmodel.modes import get_mode
from costmodel.schemas.rundir import RunManifest, RunWriter, load_run, new_run_id, read_manifest, software_versions, spec_decode_counts
from measure.endpoint.client import LoadConfig, PlannedRequest, PromptItem, schedule_s
from measure.endpoint.prometheus import DG_STEPS, SD_DRAFTS, Scraper, value
from measure.endpoint.prompts import load_prompts
from measure.endpoint.runner import chunk_frame, metrics_rows, request_frame, run_unit, summary_row
from measure.engine_mode import engine_mode


@dataclass
class LoadTestOptions:
    """The endpoint options as given (`costmodel measure --endpoint URL ...`); `run_loadtest` checks them."""

    endpoint: str | None
    out: str
    model: str | None = None
    mode: str | None = None
    resume: bool = False
    seed: int | None = 0
    qps: str | None = None
    concurrency: int | None = None
    arrivals: str = "poisson"
    arrival_cv: float = 1.0  # gamma arrivals: coefficient of variation of the gaps
    prompts_file: str | None = None
    regimes: str | None = None
    max_tokens: int = 512
    duration: float | None = None
    n_requests: int | None = None
    metrics_url: str | None = None
    metrics_interval: float = 1.0
    api_key_env: str | None = None
    timeout_s: float = 600.0
    api: str = "chat"
    ignore_eos: bool = False
    continuous_usage: bool = True
    canvas_length: int | None = None

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> LoadTestOptions:
        """The endpoint's options out of every `costmodel measure` option (the GPU harness's are not its)."""
        return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values})


# options both backends of `costmodel measure` take; every other option belongs to one backend
COMMON_PARAMS = frozenset({"model", "mode", "out", "resume", "seed", "endpoint"})
ENDPOINT_PARAMS = frozenset(f.name for f in dataclasses.fields(LoadTestOptions)) - COMMON_PARAMS


def reject_harness_options(given: Mapping[str, str]) -> None:
    """UserError if a GPU-harness option was given explicitly together with --endpoint.
    `given`: the options given on the command line (or by the environment), parameter name -> flag."""
    for name, flag in given.items():
        if name not in ENDPOINT_PARAMS and name not in COMMON_PARAMS:
            raise UserError(f"{flag} is an option of the in-process GPU harness and has no effect with --endpoint", f"drop {flag}, or drop --endpoint")


def reject_endpoint_options(given: Mapping[str, str]) -> None:
    """For the GPU harness: UserError if an endpoint option was given without --endpoint."""
    for name, flag in given.items():
        if name in ENDPOINT_PARAMS:
            raise UserError(f"{flag} is an option of the endpoint load generator and has no effect without --endpoint", f"drop {flag}, or add --endpoint URL")


def split_endpoint(url: str) -> tuple[str, str]:
    """(api_base ending in /v1, server root) of an endpoint URL; UserError if malformed."""
    u = urlsplit(url.strip())
    if u.scheme not in ("http", "https") or not u.hostname:
        raise UserError(f"--endpoint {url!r} is not an http(s) URL", "e.g. --endpoint http://localhost:8000")
    try:
        u.port
    except ValueError:
        raise UserError(f"--endpoint {url!r} has an invalid port", "e.g. --endpoint http://localhost:8000") from None
    path = u.path.rstrip("/")
    for suffix in ("/chat/completions", "/completions"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    root_path = path[: -len("/v1")] if path.endswith("/v1") else path
    api_path = path if path.endswith("/v1") else path + "/v1"
    return urlunsplit((u.scheme, u.netloc, api_path, "", "")), urlunsplit((u.scheme, u.netloc, root_path, "", ""))


def parse_rates(value: str | None, concurrency: int | None) -> list[float]:
    if value is None:
        if concurrency is None:
            raise UserError("the load has no rate", "give --qps RATE (requests per second), or --concurrency N for a closed loop")
        return [math.inf]
    rates = []
    for v in [x.strip() for x in str(value).split(",") if x.strip()]:
        try:
            r = float(v)
        except ValueError:
            raise UserError(f"--qps: {v!r} is not a number", "e.g. --qps 2 or --qps 1,2,4 or --qps inf") from None
        if not r > 0:
            raise UserError(f"--qps: {v} must be > 0", "give a positive request rate")
        rates.append(r)
    if not rates:
        raise UserError("--qps is empty", "e.g. --qps 2")
    return rates


def _validate(opts: LoadTestOptions) -> None:
    def pos(name, flag, integer=False):
        v = getattr(opts, name)
        if v is not None and (v <= 0 or (not integer and not math.isfinite(v))):
            raise UserError(f"{flag} {v} must be > 0", f"give a positive {'integer' if integer else 'number'}")

    pos("concurrency", "--concurrency", True)
    pos("max_tokens", "--max-tokens", True)
    pos("duration", "--duration")
    pos("n_requests", "--requests", True)
    pos("timeout_s", "--timeout")
    pos("metrics_interval", "--metrics-interval")
    pos("canvas_length", "--canvas-length", True)


def api_key_from_env(name: str | None) -> str | None:
    if not name:
        return None
    key = os.environ.get(name)
    if not key:
        raise UserError(f"--api-key-env {name}: the environment variable is not set or empty", f"export {name}=<key> before running")
    return key


def canvas_length_for(model: str, given: int | None) -> int:
    """--canvas-length, else the catalog model's canvas length, else 256."""
    if given:
        return given
    shape = MODELS.get(model)
    return shape.canvas_length if shape is not None and shape.canvas_length else 256


async def _list_models(api_base: str, headers: dict) -> list[str]:
    try:
        async with httpx.AsyncClient(timeout=15.0, headers=headers, trust_env=False) as http:
            r = await http.get(api_base + "/models")
            r.raise_for_status()
            return [str(m["id"]) for m in r.json().get("data", [])]
    except Exception as e:  # noqa: BLE001
        raise UserError(f"could not list the models of {api_base} ({type(e).__name__})", "pass --model NAME") from None


async def _probe_mode(metrics_url: str | None, model: str, headers: dict) -> str | None:
    """diffusion / mtp from the server's counters (present only when the engine runs that mode)."""
    if not metrics_url:
        return None
    sc = Scraper(metrics_url, headers)
    try:
        snap = await sc.scrape("before", 0.0)
    finally:
        await sc.aclose()
    if not snap.ok or not snap.samples:
        return None
    if value(snap, DG_STEPS, model) is not None:
        return engine_mode(canvases=True).name
    if value(snap, SD_DRAFTS, model) is not None:
        return engine_mode(speculative=True).name
    return engine_mode().name


def plan_requests(items, n: int | None, duration_s: float | None, qps: float, arrivals: str, seed: int, unit: str, cv: float = 1.0):
    """The PlannedRequests of one load: arrival times and prompts (a seeded shuffle, cycled)."""
    t = schedule_s(qps, arrivals, n, duration_s, seed, cv)
    order = np.random.default_rng(seed + 1).permutation(len(items))
    tag = unit.replace("=", "")
    return [PlannedRequest(f"{tag}-{i:06d}", float(ti), items[order[i % len(items)]]) for i, ti in enumerate(t)]


@dataclass
class LoadTest:
    """A checked endpoint run: where to send, at which rates, which prompts, and the served model and mode."""

    opts: LoadTestOptions
    api_base: str
    rates: list[float]
    api_key: str | None
    metrics_url: str | None
    items: list[PromptItem]
    model: str
    mode: str
    mode_note: str  # where the mode came from
    canvas: int
    seed: int

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @property
    def units(self) -> list[str]:
        return [f"qps={r:g}" for r in self.rates]


def _metrics_url(given: str | None, root: str) -> str | None:
    """--metrics-url (checked), 'none' -> None, default: the server root's /metrics."""
    if given is None:
        return root + "/metrics"
    if given.strip().lower() == "none":
        return None
    u = urlsplit(given)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise UserError(f"--metrics-url {given!r} is not an http(s) URL", "e.g. --metrics-url http://localhost:8000/metrics, or none")
    return given


def _served_mode(opts: LoadTestOptions, model: str, murl: str | None, headers: dict) -> tuple[str, str]:
    """(mode, where it came from): --mode, the run being resumed, the model name, or the server's counters."""
    if opts.mode:
        return opts.mode, "given with --mode"
    if opts.resume and (Path(opts.out) / "manifest.json").exists():
        prev = read_manifest(opts.out)
        if prev.mode:
            return prev.mode, prev.settings.get("mode_source", "from the run being resumed")
    canvas = engine_mode(canvases=True).name
    if canvas in model.lower():  # a model named after the canvas mode (DiffusionGemma)
        return canvas, "from the model name"
    mode = asyncio.run(_probe_mode(murl, model, headers))
    return (mode, "from the server's counters") if mode else (engine_mode().name, "assumed (no --mode, and /metrics did not tell)")


def check_loadtest(opts: LoadTestOptions) -> LoadTest:
    """Every endpoint option checked (UserError naming the bad input and the fix); asks the server
    for its model (and mode) when they are not given."""
    _validate(opts)
    api_base, root = split_endpoint(opts.endpoint)
    rates = parse_rates(opts.qps, opts.concurrency)
    if opts.n_requests is None and opts.duration is None:
        raise UserError("the load has no end", "give --requests N or --duration SECONDS")
    if opts.n_requests is None and any(math.isinf(r) for r in rates):
        raise UserError("--qps inf with only --duration would send unboundedly many requests", "give --requests N (with --concurrency) or a finite --qps")
    key = api_key_from_env(opts.api_key_env)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    murl = _metrics_url(opts.metrics_url, root)
    items = load_prompts(opts.prompts_file, [r.strip() for r in opts.regimes.split(",") if r.strip()] if opts.regimes else None)
    model = opts.model
    if not model:
        names = asyncio.run(_list_models(api_base, headers))
        if not names:
            raise UserError(f"{api_base} serves no models", "pass --model NAME")
        model = names[0]
    mode, mode_note = _served_mode(opts, model, murl, headers)
    return LoadTest(opts, api_base, rates, key, murl, items, model, mode, mode_note, canvas=canvas_length_for(model, opts.canvas_length),
                    seed=int(opts.seed or 0))


def _manifest(lt: LoadTest) -> RunManifest:
    o = lt.opts
    settings = {
        "endpoint": lt.api_base, "metrics_url": lt.metrics_url, "api": o.api, "qps": [r if math.isfinite(r) else "inf" for r in lt.rates],
        "arrivals": o.arrivals, "arrival_cv": o.arrival_cv, "concurrency": o.concurrency, "requests": o.n_requests, "duration_s": o.duration,
        "max_tokens": o.max_tokens, "timeout_s": o.timeout_s, "prompts": o.prompts_file or "probe suite",
        "regimes": o.regimes, "n_prompts": len(lt.items), "seed": lt.seed, "ignore_eos": bool(o.ignore_eos),
        "continuous_usage": bool(o.continuous_usage), "metrics_interval_s": o.metrics_interval,
        "canvas_length": lt.canvas, "api_key_env": o.api_key_env, "mode_source": lt.mode_note,
    }
    return RunManifest(
        run_id=new_run_id("endpoint"), kind="endpoint", mode=lt.mode, model=lt.model, weights="served", commit_source="none",
        engine={"name": "openai-compatible endpoint", "endpoint": lt.api_base}, settings=settings, software=software_versions(),
        planned_units=lt.units,
        notes=["times in seconds from each load's t0 (t0_unix in load_summary); failure reasons: measure/endpoint/failures.py REASONS"],
    )


def _record_load(w: RunWriter, lt: LoadTest, unit: str, rate: float, planned: list, res) -> None:
    """One load's tables and raw /metrics texts; the run's mode corrected when the server's counters tell otherwise."""
    o = lt.opts
    unit_settings = {"qps_offered": rate, "arrivals": o.arrivals, "concurrency": o.concurrency or 0,
                     "max_tokens": o.max_tokens, "planned_requests": len(planned), "mode": lt.mode}
    w.add("requests", request_frame(res.load).to_dict("records"))
    chunks = chunk_frame(res.load)
    if len(chunks):
        w.add("chunks", chunks.to_dict("records"))
    mrows = metrics_rows(res)
    if mrows:
        w.add("server_metrics", mrows)
    w.add("load_summary", summary_row(res, unit_settings))
    safe = unit.replace("=", "")
    for snap, tag in ((res.before, "before"), (res.after, "after")):
        if snap is not None and snap.ok and snap.text is not None:
            atomic.write_text(w.path / "metrics" / f"{safe}.{tag}.prom", snap.text)
    hint = res.server.mode_hint if res.server is not None else None
    if hint is not None and hint != lt.mode and not o.mode:
        w.note(f"{unit}: mode {lt.mode} ({lt.mode_note}) corrected to {hint}: the server's {hint} counters moved")
        lt.mode, lt.mode_note = hint, "from the server's counters during the load"
        w.update(mode=lt.mode)
        w.manifest.settings["mode_source"] = lt.mode_note
    if hint is not None and hint == lt.mode and get_mode(hint).decodes_canvases:
        w.update(commit_source="model")


def run_loadtest(opts: LoadTestOptions) -> int:
    """`costmodel measure --endpoint URL ...`: load-test a live OpenAI-compatible server."""
    lt = check_loadtest(opts)
    con = make_console()
    cfg = LoadConfig(api_base=lt.api_base, model=lt.model, api=opts.api, max_tokens=opts.max_tokens, timeout_s=opts.timeout_s,
                     concurrency=opts.concurrency, continuous_usage=bool(opts.continuous_usage),
                     ignore_eos=bool(opts.ignore_eos), api_key=lt.api_key)
    completed, failures = 0, {}
    with RunWriter(opts.out, _manifest(lt), resume=bool(opts.resume)) as w:
        for rate, unit in zip(lt.rates, lt.units):
            if w.is_done(unit):
                con.print(f"{unit}: already done, skipped")
                completed += 1  # a finished unit of an earlier run
                continue
            planned = plan_requests(lt.items, opts.n_requests, opts.duration, rate, opts.arrivals, lt.seed, unit, opts.arrival_cv)
            con.print(f"{unit}: {len(planned)} requests to {cfg.url} ({lt.mode}, model {lt.model})")
            res = asyncio.run(run_unit(unit, cfg, planned, lt.metrics_url, opts.metrics_interval, lt.canvas, lt.headers))
            _record_load(w, lt, unit, rate, planned, res)
            w.finish_unit(unit)
            print_unit(con, unit, res)
            completed += res.summary["completed"]
            for k, v in res.summary["failure_reasons"].items():
                failures[k] = failures.get(k, 0) + v
        write_mtp_counters(w.path, lt.model)
    con.print(f"wrote {opts.out}")
    if not completed:  # the run directory is written (its failures recorded); the command still fails
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(failures.items())) or "no response"
        raise UserError(f"no request succeeded against {cfg.url} ({reasons}); the failures are recorded in {opts.out}",
                        "check --endpoint, --model and --api-key-env")
    return 0


def write_mtp_counters(path, model: str) -> None:
    """mtp_counters.json (costmodel fit --mtp-metrics format) from all units' counter deltas."""
    run = load_run(path)
    if not run.has("load_summary"):
        return
    s = run.table("load_summary")
    if "sd_num_drafts" not in s or not s["sd_num_drafts"].fillna(0).gt(0).any():
        return
    counts = spec_decode_counts(run)
    if counts is None:
        return
    drafts, per_pos = counts
    atomic.write_json(path / "mtp_counters.json", {
        "num_drafts": drafts, "num_accepted_tokens_per_pos": per_pos,
        "source": f"{run.manifest.kind} run {run.manifest.run_id} ({model}): vLLM spec_decode counter deltas over {len(s)} load(s)",
    })


def print_unit(con, unit: str, res) -> None:
    s = res.summary
    t = Table(title=f"{unit}: {s['completed']} ok, {s['failed']} failed in {s['duration_s']:.1f} s", show_header=True)
    for c in ("metric", "p50", "p99", "mean"):
        t.add_column(c, justify="left" if c == "metric" else "right")

    def f(x):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1f}"

    for name, label in (("ttft", "TTFT ms"), ("tpot", "TPOT ms"), ("itl", "ITL ms (pooled over events)"), ("e2el", "E2E ms")):
        t.add_row(label, f(s[f"p50_{name}_ms"]), f(s[f"p99_{name}_ms"]), f(s[f"mean_{name}_ms"]))
    t.add_row("client lateness ms", f(s["lateness_p50_ms"]), f(s["lateness_p99_ms"]), "-")
    con.print(t)
    con.print(f"throughput {f(s['request_throughput_rps'])} req/s, {f(s['output_throughput_tok_s'])} output tok/s")
    if s["failure_reasons"]:
        con.print("failures: " + ", ".join(f"{k} {v}" for k, v in sorted(s["failure_reasons"].items())))
    if s["completed"] == 0:
        con.print("[yellow]warning: no request succeeded; check --endpoint, --model and --api-key-env[/yellow]")
    sv = res.server
    if sv is None:
        con.print("server metrics: not scraped")
        return
    if sv.scrapes_failed:
        con.print(f"server metrics: {sv.scrapes_failed} scrape(s) failed ({sv.first_error})")
    if sv.diffusion is not None and sv.diffusion.steps_per_canvas is not None:
        d = sv.diffusion
        seen = s.get("client_event_tokens_median", math.nan)
        if not math.isnan(seen) and round(seen) != d.canvas_length:
            con.print(f"[yellow]warning: the stream's bursts carry {seen:.0f} tokens but the canvas length used is {d.canvas_length}; "
                      f"pass --canvas-length {seen:.0f} if that is the served canvas[/yellow]")
        con.print(f"diffusion: {d.steps_per_canvas:.2f} engine steps per canvas (commit step included), "
                  f"{d.committed_tokens_per_step:.2f} committed tokens per step, {d.canvases:.0f} canvases")
    if sv.spec_decode is not None and sv.spec_decode.acceptance_rate is not None:
        p = sv.spec_decode
        con.print(f"MTP: acceptance rate {p.acceptance_rate:.3f}, mean acceptance length {p.mean_acceptance_length:.2f}, "
                  f"per position {json.dumps([round(x, 3) for x in p.per_position_rates])}")
    for name, g in (("running", sv.running), ("waiting (queue)", sv.waiting), ("KV-cache usage", sv.kv_cache_usage)):
        if g is not None:
            con.print(f"{name}: mean {g.mean:.2f}, max {g.max:.2f}")
