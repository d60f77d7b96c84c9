"""One unit of an endpoint run: scrape /metrics, run the load while polling /metrics, scrape
again; then the rows of the run tables (requests, chunks, server_metrics, load_summary)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
from dataclasses import dataclass

import pandas as pd

from measure.endpoint.client import LoadClient, LoadConfig, LoadResult, PlannedRequest
from measure.endpoint.prometheus import DURING_METRICS, Scraper, ServerStats, Snapshot, derive, snapshot_rows
from measure.endpoint.load_summary import summarize


@dataclass
class UnitResult:
    unit: str
    load: LoadResult
    before: Snapshot | None
    after: Snapshot | None
    during: list[Snapshot]
    server: ServerStats | None
    summary: dict


async def run_unit(unit: str, cfg: LoadConfig, planned: list[PlannedRequest], metrics_url: str | None, interval_s: float,
                   canvas_length: int, metrics_headers: dict[str, str] | None = None) -> UnitResult:
    """Run one load; /metrics is scraped before, every `interval_s` during, and after it."""
    loop = asyncio.get_running_loop()
    scraper = Scraper(metrics_url, metrics_headers, secrets=tuple(s for s in (cfg.api_key,) if s)) if metrics_url else None
    poll_task: asyncio.Task | None = None
    before = after = None
    start_ref = loop.time()
    t_before = start_ref
    try:
        if scraper is not None:
            before = await scraper.scrape("before", 0.0)
            t_before = loop.time()

        async def on_start(t0: float) -> None:
            nonlocal poll_task, start_ref
            start_ref = t0
            if before is not None:
                before.t_s = t_before - t0  # relative to t0 (negative)
            if scraper is not None:
                poll_task = asyncio.create_task(scraper.poll(t0, interval_s))

        load = await LoadClient(cfg).run(planned, on_start)
        if poll_task is not None:
            poll_task.cancel()
            await asyncio.gather(poll_task, return_exceptions=True)
        if scraper is not None:
            after = await scraper.scrape("after", loop.time() - start_ref)
    finally:
        if poll_task is not None and not poll_task.done():
            poll_task.cancel()
        if scraper is not None:
            await scraper.aclose()
    during = list(scraper.during) if scraper is not None else []
    server = derive(before, after, during, cfg.model, canvas_length) if before is not None and after is not None else None
    req_df, chunk_df = request_frame(load), chunk_frame(load)
    return UnitResult(unit, load, before, after, during, server, summarize(req_df, chunk_df))


def request_frame(load: LoadResult) -> pd.DataFrame:
    return pd.DataFrame([dataclasses.asdict(r) for r in load.requests])


def chunk_frame(load: LoadResult) -> pd.DataFrame:
    rows = [{"request_id": rid, "chunk_index": i, "t_s": t, "tokens": n} for rid, cs in load.chunks.items() for i, (t, n) in enumerate(cs)]
    return pd.DataFrame(rows, columns=["request_id", "chunk_index", "t_s", "tokens"])


def server_columns(s: ServerStats | None) -> dict:
    """Flat load_summary columns from the server statistics (NaN where unknown)."""
    nan = math.nan
    out: dict = {
        "metrics_scrapes_ok": s.scrapes_ok if s else 0, "metrics_scrapes_failed": s.scrapes_failed if s else 0,
        "metrics_error": s.first_error if s else None,
        "running_mean": nan, "running_max": nan, "waiting_mean": nan, "waiting_max": nan,
        "kv_cache_usage_mean": nan, "kv_cache_usage_max": nan,
        "server_prompt_tokens": nan, "server_generation_tokens": nan, "server_preemptions": nan,
        "dg_denoising_steps": nan, "dg_canvas_positions": nan, "dg_committed_tokens": nan, "dg_canvases": nan, "dg_canvas_length": nan,
        "dg_steps_per_canvas": nan, "dg_denoise_steps_per_canvas": nan, "dg_committed_tokens_per_step": nan,
        "dg_committed_tokens_per_canvas": nan,
        "sd_num_drafts": nan, "sd_num_draft_tokens": nan, "sd_num_accepted_tokens": nan, "sd_acceptance_rate": nan,
        "sd_mean_acceptance_length": nan, "sd_draft_tokens_per_step": nan, "sd_per_position_rates": "[]",
        "counter_resets": "[]",
    }
    if s is None:
        return out
    for name, g in (("running", s.running), ("waiting", s.waiting), ("kv_cache_usage", s.kv_cache_usage)):
        if g is not None:
            out[f"{name}_mean"], out[f"{name}_max"] = g.mean, g.max
    out["server_prompt_tokens"] = _n(s.prompt_tokens)
    out["server_generation_tokens"] = _n(s.generation_tokens)
    out["server_preemptions"] = _n(s.preemptions)
    out["counter_resets"] = json.dumps(s.counter_resets)
    if s.diffusion is not None:
        d = s.diffusion
        out.update(dg_denoising_steps=d.denoising_steps, dg_canvas_positions=d.canvas_positions, dg_committed_tokens=d.committed_tokens,
                   dg_canvases=_n(d.canvases), dg_canvas_length=d.canvas_length, dg_steps_per_canvas=_n(d.steps_per_canvas),
                   dg_denoise_steps_per_canvas=_n(d.denoise_steps_per_canvas), dg_committed_tokens_per_step=_n(d.committed_tokens_per_step),
                   dg_committed_tokens_per_canvas=_n(d.committed_tokens_per_canvas))
    if s.spec_decode is not None:
        p = s.spec_decode
        out.update(sd_num_drafts=p.num_drafts, sd_num_draft_tokens=p.num_draft_tokens, sd_num_accepted_tokens=p.num_accepted_tokens,
                   sd_acceptance_rate=_n(p.acceptance_rate), sd_mean_acceptance_length=_n(p.mean_acceptance_length),
                   sd_draft_tokens_per_step=_n(p.draft_tokens_per_step), sd_per_position_rates=json.dumps([_n(x) for x in p.per_position_rates]))
    return out


def _n(x) -> float:
    return math.nan if x is None else float(x)


def summary_row(res: UnitResult, settings: dict) -> dict:
    """The unit's load_summary row: load settings, client summary, server statistics."""
    s = dict(res.summary)
    reasons = s.pop("failure_reasons")
    return {"source": "endpoint", **settings, **s, "failure_reasons": json.dumps(reasons, sort_keys=True),
            "t0_unix": res.load.t0_unix, **server_columns(res.server)}


def metrics_rows(res: UnitResult) -> list[dict]:
    rows: list[dict] = []
    if res.before is not None:
        rows += snapshot_rows(res.before)
    for snap in res.during:
        rows += snapshot_rows(snap, keep=DURING_METRICS)
    if res.after is not None:
        rows += snapshot_rows(res.after)
    return rows
