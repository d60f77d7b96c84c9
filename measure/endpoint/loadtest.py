"""The endpoint backend of `costmodel measure` (--endpoint URL): its options and `run(opts)`.

A run is one load per --qps value (each a resumable unit "qps=<rate>"); each load sends
--requests requests and/or arrivals for --duration seconds (whichever ends first), Poisson or
evenly spaced, at most --concurrency in flight. The run directory gets the tables requests,
chunks, server_metrics and load_summary, the raw /metrics texts of each load
(metrics/<unit>.before.prom, .after.prom) and, when the server reports speculative decoding,
mtp_counters.json for `costmodel fit --mtp-metrics`.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import click
import numpy as np

from costmodel import atomic
from costmodel.errors import UserError
from costmodel.schemas.rundir import load_run, spec_decode_counts

OPTIONS = [
    click.option("--qps", default=None, help="Endpoint: offered load in requests/s; a comma list runs one load per rate; 'inf' sends all at once (use with --concurrency)."),
    click.option("--concurrency", type=int, default=None, help="Endpoint: most requests in flight (default: unbounded, a pure open loop)."),
    click.option("--arrivals", type=click.Choice(["poisson", "constant"]), default="poisson", show_default=True, help="Endpoint: arrival process."),
    click.option("--prompts", "prompts_file", type=click.Path(), default=None, help="Endpoint: JSONL ({prompt|messages, prompt_id, regime, max_tokens}) or text file, one prompt per line (default: the probe suite)."),
    click.option("--regimes", default=None, help="Endpoint: keep prompts of these regimes (comma list)."),
    click.option("--max-tokens", type=int, default=512, show_default=True, help="Endpoint: max_tokens per request (a prompt's own max_tokens wins)."),
    click.option("--duration", type=float, default=None, help="Endpoint: seconds of arrivals per load."),
    click.option("--requests", "n_requests", type=int, default=None, help="Endpoint: requests per load."),
    click.option("--metrics-url", default=None, help="Endpoint: Prometheus URL (default: ENDPOINT root + /metrics; 'none' to skip)."),
    click.option("--metrics-interval", type=float, default=1.0, show_default=True, help="Endpoint: seconds between /metrics scrapes during a load."),
    click.option("--api-key-env", default=None, help="Endpoint: name of the environment variable holding the API key (the key is never written)."),
    click.option("--timeout", "timeout_s", type=float, default=600.0, show_default=True, help="Endpoint: seconds a request may take end to end before it counts as failed."),
    click.option("--api", type=click.Choice(["chat", "completions"]), default="chat", show_default=True, help="Endpoint: /v1/chat/completions or /v1/completions."),
    click.option("--ignore-eos", is_flag=True, help="Endpoint: ask the server to generate max_tokens regardless of EOS (vLLM's ignore_eos)."),
    click.option("--continuous-usage/--no-continuous-usage", default=True, show_default=True,
                 help="Endpoint: ask for usage on every chunk (vLLM stream_options.continuous_usage_stats) to count tokens per event."),
    click.option("--canvas-length", type=int, default=None, help="Endpoint, diffusion: canvas length (default: the catalog model's, else 256)."),
]

COMMON_PARAMS = frozenset({"model", "mode", "out", "resume", "seed", "endpoint"})


def _param_names(options) -> frozenset[str]:
    def f():
        pass

    for o in options:
        f = o(f)
    return frozenset(p.name for p in getattr(f, "__click_params__", []))


ENDPOINT_PARAMS = _param_names(OPTIONS)


def reject_foreign_options(opts: dict) -> None:
    """UserError if a GPU-harness option was given explicitly together with --endpoint."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    from click.core import ParameterSource

    for p in ctx.command.params:
        if p.name in ENDPOINT_PARAMS or p.name in COMMON_PARAMS:
            continue
        if ctx.get_parameter_source(p.name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
            flag = p.opts[0] if getattr(p, "opts", None) else p.name
            raise UserError(f"{flag} is an option of the in-process GPU harness and has no effect with --endpoint", f"drop {flag}, or drop --endpoint")


def reject_endpoint_options() -> None:
    """For the GPU harness's `run`: UserError if an endpoint option was given without --endpoint."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    from click.core import ParameterSource

    for p in ctx.command.params:
        if p.name in ENDPOINT_PARAMS and ctx.get_parameter_source(p.name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
            flag = p.opts[0] if p.opts else p.name
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


def _validate(opts: dict) -> None:
    def pos(name, flag, integer=False):
        v = opts.get(name)
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


def _canvas_length(model: str, given: int | None) -> int:
    if given:
        return given
    from costmodel.models import MODELS

    shape = MODELS.get(model)
    return shape.canvas_length if shape is not None and shape.canvas_length else 256


async def _list_models(api_base: str, headers: dict) -> list[str]:
    import httpx

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
    from measure.endpoint.prometheus import DG_STEPS, SD_DRAFTS, Scraper, value

    sc = Scraper(metrics_url, headers)
    try:
        snap = await sc.scrape("before", 0.0)
    finally:
        await sc.aclose()
    if not snap.ok or not snap.samples:
        return None
    if value(snap, DG_STEPS, model) is not None:
        return "diffusion"
    if value(snap, SD_DRAFTS, model) is not None:
        return "mtp"
    return "ar"


def plan_requests(items, n: int | None, duration_s: float | None, qps: float, arrivals: str, seed: int, unit: str):
    """The PlannedRequests of one load: arrival times and prompts (a seeded shuffle, cycled)."""
    from measure.endpoint.client import PlannedRequest, schedule_s

    t = schedule_s(qps, arrivals, n, duration_s, seed)
    order = np.random.default_rng(seed + 1).permutation(len(items))
    tag = unit.replace("=", "")
    return [PlannedRequest(f"{tag}-{i:06d}", float(ti), items[order[i % len(items)]]) for i, ti in enumerate(t)]


def run(opts: dict) -> int:
    """`costmodel measure --endpoint URL ...`: load-test a live OpenAI-compatible server."""
    from costmodel import atomic
    from costmodel.console import make_console
    from measure.endpoint.client import LoadConfig
    from measure.endpoint.prompts import load_prompts
    from measure.endpoint.runner import chunk_frame, metrics_rows, request_frame, run_unit, summary_row
    from costmodel.schemas.rundir import RunManifest, RunWriter, new_run_id, software_versions

    reject_foreign_options(opts)
    _validate(opts)
    api_base, root = split_endpoint(opts["endpoint"])
    rates = parse_rates(opts.get("qps"), opts.get("concurrency"))
    if opts.get("n_requests") is None and opts.get("duration") is None:
        raise UserError("the load has no end", "give --requests N or --duration SECONDS")
    if opts.get("n_requests") is None and any(math.isinf(r) for r in rates):
        raise UserError("--qps inf with only --duration would send unboundedly many requests", "give --requests N (with --concurrency) or a finite --qps")
    key = api_key_from_env(opts.get("api_key_env"))
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    murl = opts.get("metrics_url")
    if murl is None:
        murl = root + "/metrics"
    elif murl.strip().lower() == "none":
        murl = None
    else:
        u = urlsplit(murl)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise UserError(f"--metrics-url {murl!r} is not an http(s) URL", "e.g. --metrics-url http://localhost:8000/metrics, or none")
    items = load_prompts(opts.get("prompts_file"), [r.strip() for r in opts["regimes"].split(",") if r.strip()] if opts.get("regimes") else None)
    model = opts.get("model")
    if not model:
        names = asyncio.run(_list_models(api_base, headers))
        if not names:
            raise UserError(f"{api_base} serves no models", "pass --model NAME")
        model = names[0]
    mode, mode_note = opts.get("mode"), "given with --mode"
    if not mode and opts.get("resume") and (Path(opts["out"]) / "manifest.json").exists():
        from costmodel.schemas.rundir import read_manifest

        prev = read_manifest(opts["out"])
        mode, mode_note = prev.mode, prev.settings.get("mode_source", "from the run being resumed")
    if not mode:
        if "diffusion" in model.lower():
            mode, mode_note = "diffusion", "from the model name"
        else:
            mode = asyncio.run(_probe_mode(murl, model, headers))
            mode_note = "from the server's counters" if mode else "assumed (no --mode, and /metrics did not tell)"
            mode = mode or "ar"
    canvas = _canvas_length(model, opts.get("canvas_length"))
    seed = int(opts.get("seed") or 0)

    con = make_console()
    settings = {
        "endpoint": api_base, "metrics_url": murl, "api": opts["api"], "qps": [r if math.isfinite(r) else "inf" for r in rates], "arrivals": opts["arrivals"],
        "concurrency": opts.get("concurrency"), "requests": opts.get("n_requests"), "duration_s": opts.get("duration"),
        "max_tokens": opts["max_tokens"], "timeout_s": opts["timeout_s"], "prompts": opts.get("prompts_file") or "probe suite",
        "regimes": opts.get("regimes"), "n_prompts": len(items), "seed": seed, "ignore_eos": bool(opts.get("ignore_eos")),
        "continuous_usage": bool(opts.get("continuous_usage")), "metrics_interval_s": opts["metrics_interval"],
        "canvas_length": canvas, "api_key_env": opts.get("api_key_env"), "mode_source": mode_note,
    }
    units = [f"qps={r:g}" for r in rates]
    manifest = RunManifest(
        run_id=new_run_id("endpoint"), kind="endpoint", mode=mode, model=model, weights="served", commit_source="none",
        engine={"name": "openai-compatible endpoint", "endpoint": api_base}, settings=settings, software=software_versions(),
        planned_units=units,
        notes=["times in seconds from each load's t0 (t0_unix in load_summary); failure reasons: measure/endpoint/failures.py REASONS"],
    )
    out = opts["out"]
    cfg = LoadConfig(api_base=api_base, model=model, api=opts["api"], max_tokens=opts["max_tokens"], timeout_s=opts["timeout_s"],
                     concurrency=opts.get("concurrency"), continuous_usage=bool(opts.get("continuous_usage")),
                     ignore_eos=bool(opts.get("ignore_eos")), api_key=key)
    with RunWriter(out, manifest, resume=bool(opts.get("resume"))) as w:
        for rate, unit in zip(rates, units):
            if w.is_done(unit):
                con.print(f"{unit}: already done, skipped")
                continue
            planned = plan_requests(items, opts.get("n_requests"), opts.get("duration"), rate, opts["arrivals"], seed, unit)
            con.print(f"{unit}: {len(planned)} requests to {cfg.url} ({mode}, model {model})")
            res = asyncio.run(run_unit(unit, cfg, planned, murl, opts["metrics_interval"], canvas, headers))
            unit_settings = {"qps_offered": rate, "arrivals": opts["arrivals"], "concurrency": opts.get("concurrency") or 0,
                             "max_tokens": opts["max_tokens"], "planned_requests": len(planned), "mode": mode}
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
            if hint is not None and hint != mode and not opts.get("mode"):
                w.note(f"{unit}: mode {mode} ({mode_note}) corrected to {hint}: the server's {hint} counters moved")
                mode, mode_note = hint, "from the server's counters during the load"
                w.update(mode=mode)
                w.manifest.settings["mode_source"] = mode_note
            if hint == "diffusion" and mode == "diffusion":
                w.update(commit_source="model")
            w.finish_unit(unit)
            print_unit(con, unit, res)
        write_mtp_counters(w.path, model)
    con.print(f"wrote {out}")
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
    from rich.table import Table

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
