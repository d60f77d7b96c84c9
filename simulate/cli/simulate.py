"""`costmodel simulate`: throughput, latency percentiles and utilisation against QPS, per mode."""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from costmodel.cli.pricing_options import cost_table, pricing_options
from costmodel.errors import UserError
from costmodel.hardware import default_hardware
from costmodel.modes import get_mode, mode_names
from costmodel.options import parse_burstiness, parse_concurrency, parse_floats, parse_modes, parse_profile_modes
from costmodel.progress import deferred_progress
from simulate.routers import DEFAULT_ROUTER, router_names

if TYPE_CHECKING:
    from rich.table import Table

    from costmodel.engine_settings import EngineSettings
    from simulate.api import SimulateConfig

# The simulator (numpy, the engine model, the workload drawer), rich's console, table and progress bar are imported where the
# command runs, not where its options are declared: `costmodel simulate --help` starts in under 0.3 s (issue 40); the
# output set's writer (costmodel/outputset.py: locks, hashes) only with -o (issue 51).


@click.command()
@click.option("--qps", default=None, help="Comma-separated arrival rates (requests/s, all replicas together), e.g. 1,2,4,8.")
@click.option("--concurrency", default=None,
              help="Closed-loop clients, comma-separated, e.g. 1,4,16: at most N requests in flight, the next sent when one finishes "
                   "(vllm bench serve --max-concurrency N). Alone: no rate limit; with --qps: both, as vllm bench runs them.")
@click.option("--burstiness", default=None,
              help="Arrival gaps gamma-distributed with this shape, mean 1/QPS (vllm bench serve --burstiness; 1 is Poisson) [default: the workload's arrivals].")
@click.option("--mode", "modes", default=None, show_default="the modes the profile carries", help=f"Comma-separated modes: {', '.join(mode_names())}.")
@click.option("--hardware", default=None, help=f"GPU of the shipped default profile [default: {default_hardware()}].")
@click.option("--profile", "profile_path", default=None, help="Profile JSON (from `costmodel fit`) instead of the shipped one.")
@click.option("--replicas", type=int, default=1, show_default=True, help="Replicas (one GPU each) behind the router.")
@click.option("--duration", type=float, default=None, help="Seconds of arrivals [default: 300 s, at least 1000 requests].")
@click.option("--requests", "n_requests", type=int, default=None, help="Number of arrivals (instead of --duration).")
@click.option("--workload", "workload_path", default=None, help="Workload JSON (arrivals, lengths, regime mix, trace); see docs/simulator.md.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the workload and of every random draw.")
@click.option("--max-num-seqs", type=int, default=None,
              help="Running sequences per replica [default: the profile's engine, else vLLM 0.32's for the GPU and mode as the memory "
                   "model derives it: DiffusionGemma 8 (or fewer where the sampler buffers bind), AR/MTP 1024 on Hopper; `costmodel memory`].")
@click.option("--max-num-batched-tokens", type=int, default=None,
              help="Token budget per engine step [default: the profile's engine, else vLLM 0.32's for the GPU: 8192 on an H100/H200].")
@click.option("--gpu-memory-utilization", type=float, default=None, help="Share of GPU memory for the engine [default: the profile's, else vLLM's 0.92].")
@click.option("--canvas-length", type=int, default=None, help="Diffusion: tokens per canvas [default: the profile's engine, else the model's (256)].")
@click.option("--max-denoising-steps", type=int, default=None,
              help="Diffusion: denoising steps per canvas at most (clips the profile's steps per canvas) [default: the model's 48].")
@click.option("--num-speculative-tokens", type=int, default=None,
              help="MTP: draft tokens k per verify step, at most the positions the profile measured [default: the profile's k].")
@click.option("--async-scheduling/--no-async-scheduling", default=None, help="vLLM's async scheduling [default: on, as vLLM runs GPUs].")
@click.option("--block-size", type=int, default=None, help="KV block size in tokens, the prefix cache's unit [default: vLLM's 16 on GPUs].")
@click.option("--prefix-caching/--no-prefix-caching", "prefix_caching", default=None,
              help="vLLM's automatic prefix caching: hits on shared prompt prefixes (workload system_prompt, sessions, trace hash_ids) [default: on, as in vLLM].")
@click.option("--engine-from", "engine_from", default=None, type=click.Path(),
              help="Engine settings of a recorded server (scheduler record .jsonl.gz, run directory or `vllm bench` JSON) below the "
                   "options above and above the profile's; its mode is the default --mode.")
@click.option("--router", default=DEFAULT_ROUTER, show_default=True, type=click.Choice(router_names()),
              help="Which replica an arrival joins (simulate/routers/: the routers the day's pools use too).")
@click.option("--warmup", type=float, default=0.1, show_default=True, help="Share of the arrival window left out of percentiles.")
@click.option("-o", "--out", "out_dir", default=None, help="Write requests_*.parquet per point, summary.csv and summary.json here.")
@click.option("--jobs", type=int, default=None, help="Parallel processes for the points [default: one per core, at most one per point].")
@pricing_options
def simulate(qps, concurrency, burstiness, modes, hardware, profile_path, replicas, duration, n_requests, workload_path, seed, max_num_seqs,
             max_num_batched_tokens, gpu_memory_utilization, canvas_length, max_denoising_steps, num_speculative_tokens,
             async_scheduling, block_size, prefix_caching, engine_from, router, warmup, out_dir, jobs, pricing_options):
    """Simulate serving under load on a profile: per (mode, QPS) throughput, TTFT/E2E percentiles,
    GPU busy fraction, and whether the point is stable (an unstable point's queue grows without
    bound: its latencies are not steady-state and are not shown). With pricing options, what each point costs.
    --concurrency N runs N closed-loop clients instead of (or, with --qps, as well as) a rate."""
    from costmodel.console import make_console
    from simulate.api import SimulateConfig, run_simulation, write_outcome

    pricing = None
    if pricing_options.given():  # bad pricing fails before any point runs; none given: the price path is not loaded
        from costmodel.costing import pricing_config

        pricing = pricing_config(pricing_options)
    engine = engine_layers({"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
                            "gpu_memory_utilization": gpu_memory_utilization, "canvas_length": canvas_length,
                            "max_denoising_steps": max_denoising_steps, "num_speculative_tokens": num_speculative_tokens,
                            "async_scheduling": async_scheduling, "enable_prefix_caching": prefix_caching, "block_size": block_size}, engine_from, modes)
    if engine_from and modes is None:
        modes = engine[0]
    cfg = SimulateConfig(qps=None if qps is None else parse_floats(qps, "qps"), modes=parse_profile_modes(modes), hardware=hardware,
                         profile_path=profile_path, replicas=replicas, duration_s=duration, n_requests=n_requests,
                         workload_path=workload_path, seed=seed, router=router, warmup_frac=warmup, jobs=jobs,
                         engine=engine[1], concurrency=None if concurrency is None else parse_concurrency(concurrency),
                         burstiness=None if burstiness is None else parse_burstiness(burstiness))
    if out_dir:
        from costmodel import outputset

        outputset.claim(out_dir, "simulate")  # checked and locked before any point runs
    con = make_console()
    with progress_bar(make_console(stderr=True)) as progress:
        outcome = run_simulation(cfg, progress)
    con.print(render_table(outcome.results, outcome.profile))
    for line in engine_notes(outcome.profile, cfg):
        con.print(f"[yellow]{line}[/yellow]")
    if prefix_caching is False:
        from simulate.cli.prefix_note import caching_off_note

        note = caching_off_note(workload_path, "--no-prefix-caching", sum(r.summary.preemptions for r in outcome.results))
        if note:
            con.print(note, soft_wrap=True)
    if pricing is not None:
        con.print(cost_table([r.summary.flat() for r in outcome.results], outcome.profile.hardware_spec(), pricing))
    for r in outcome.results:
        s = r.summary
        if not s.stable:
            con.print(f"[yellow]{s.mode} @ {load_label(s)} unstable:[/yellow] {s.stability_reason}")
    if out_dir:
        paths = write_outcome(outcome, out_dir)
        con.print(f"wrote {len(paths)} files to {out_dir}")


def engine_layers(given: dict, engine_from: str | None, modes: str | None) -> tuple[str | None, EngineSettings]:
    """The CLI's engine settings over a recorded server's (--engine-from): (the recording's mode, the
    settings); the profile's engine section and vLLM's defaults are layered below per mode (simulate/engine.py)."""
    from costmodel.engine_settings import EngineSettings, layered

    if not engine_from:
        return None, EngineSettings.given(given, "CLI")
    # the recording's readers (run directory tables, bench files) load pandas and measure's endpoint client: only with --engine-from
    from simulate.engine_recorded import recorded_settings

    mode, rec = recorded_settings(engine_from)
    if modes is not None and parse_modes(modes) != [mode]:
        raise UserError(f"--engine-from {engine_from} records a {mode} server; its settings do not apply to --mode {modes}",
                        f"give --mode {mode}, or drop --engine-from")
    return mode, layered(EngineSettings.given(given, "CLI"), rec)


def engine_notes(profile, cfg: SimulateConfig) -> list[str]:
    """One line per setting vLLM would rewrite (and the simulator rewrote the same way), per mode."""
    from simulate.engine import mode_settings
    from simulate.point import resolve_engine

    engine = resolve_engine(profile, cfg.engine)
    return [f"{mode}: {note}" for mode in cfg.modes for note in mode_settings(profile, get_mode(mode), engine)[1]]


@contextmanager
def progress_bar(err):
    """A `progress(done, total, result)` callback drawing a bar on stderr once the points have run half a second
    (costmodel/progress.py; none with COSTMODEL_NO_PROGRESS)."""
    with deferred_progress(err, "simulating") as update:
        if update is None:
            yield None
            return

        def progress(done, n, res):
            s = res.summary
            update(done, n, f"{s.mode} @ {load_label(s)} done")

        yield progress


def _ms(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else (f"{x:,.0f}" if x >= 100 else f"{x:.1f}")


def _no_rate(s) -> bool:
    """Requests finished, none inside the arrival window: one request, or all arriving at one
    instant, leave no span to measure a rate over (0.00 req/s would contradict the latencies)."""
    return s.requests_finished > 0 and s.throughput_rps == 0


def load_label(s) -> str:
    """A point's load in words: '4 QPS', '16 clients', '2 QPS, 16 clients'."""
    parts = [f"{s.qps:g} QPS"] if math.isfinite(s.qps) else []
    if s.concurrency:
        parts.append(f"{s.concurrency} clients")
    return ", ".join(parts) or f"{s.qps:g} QPS"


def samples_for(q: float) -> int:
    """Requests a q-th percentile needs: at least one beyond it (p99: 100, p95: 20, p50: 2)."""
    return math.ceil(100 / (100 - q) - 1e-9)


def render_table(results, profile) -> Table:
    from rich.table import Table

    first = results[0].summary
    closed = any(r.summary.concurrency for r in results)
    t = Table(title=f"costmodel simulate: {profile.profile_id} ({first.hardware}), {first.replicas} replica(s), "
                    f"{first.workload}")
    for c in ["mode", "QPS", *(["clients"] if closed else []), "stable", "req/s", "out tok/s", "TTFT p50 ms", "TTFT p95 ms", "TPOT p50 ms",
              "E2E p50 ms", "E2E p95 ms", "E2E p99 ms", "busy", "batch"]:
        t.add_column(c, justify="left" if c in ("mode", "stable") else "right")
    for r in results:
        s = r.summary
        lat = [s.ttft_ms["p50"], s.ttft_ms["p95"], s.tpot_ms.get("p50", math.nan), s.e2e_ms["p50"], s.e2e_ms["p95"], s.e2e_ms["p99"]]
        shown = [_ms(x) if s.requests_finished >= samples_for(q) else "-" for x, q in zip(lat, (50, 95, 50, 50, 95, 99))] if s.stable else ["-"] * len(lat)
        rate = ["n/a", "n/a"] if _no_rate(s) else [f"{s.throughput_rps:.2f}", f"{s.output_tokens_per_s:,.0f}"]
        load = [f"{s.qps:g}", *([str(s.concurrency) if s.concurrency else "-"] if closed else [])]
        t.add_row(s.mode, *load, "yes" if s.stable else "[red]NO[/red]", *rate, *shown, f"{s.gpu_busy_frac:.2f}", f"{s.mean_batch_seqs:.1f}")
    notes = [_warmup_caption([r.summary for r in results])]
    few = min(r.summary.requests_finished for r in results)
    if few < samples_for(99):  # a percentile is printed only where the sample reaches past it
        notes.append(f"a pXX is shown where at least 100 / (100 - XX) requests finished (p95: {samples_for(95)}, p99: {samples_for(99)}); "
                     f"'-' where fewer did (here {few}): give more --requests")
    if closed:
        notes.append("closed loop: at most `clients` requests in flight, each further request sent when one finishes (vllm bench serve "
                     "--max-concurrency)" + ("; QPS inf: no rate limit" if any(math.isinf(r.summary.qps) for r in results) else "")
                     + "; latencies from each request's send")
    if any(_no_rate(r.summary) for r in results):
        notes.append("req/s n/a: no request finished inside the arrival window (a single request, or all arriving at one instant), "
                     "so there is no span to measure a rate over; give more requests or spread arrivals")
    notes.append("TPOT: (E2E - TTFT) / (output tokens - 1), requests of more than one token; per-request rows and each point as a "
                 "`vllm bench serve` result file (compare-bench reads it) in -o; provenance: " + " | ".join(sorted({f'{r.summary.mode}: {r.summary.provenance}' for r in results})))
    hits = [r.summary for r in results if r.summary.prefill_tokens_saved]
    if hits:  # shared prefixes in the workload: what the prefix cache saved
        notes.append("prefix cache hit rate " + ", ".join(f"{s.mode} {load_label(s)} {100 * s.prefix_hit_rate_tokens:.0f}%" for s in hits)
                     + " of prompt tokens (prefix_hit_rate_tokens, prefill_tokens_saved in -o)")
    t.caption = "; ".join(notes)
    return t


def _warmup_caption(summaries) -> str:
    """The warm-up share of each point; a point that aborted early warms up over the span it ran,
    so one share for every row would misstate it."""
    pct = [round(100 * s.warmup_s / max(s.duration_s, 1e-9)) for s in summaries]
    aborted = [s.stability_reason.startswith("aborted") for s in summaries]
    base = next((p for p, a in zip(pct, aborted) if not a), pct[0])  # the share of every point that ran its whole window
    parts = ", ".join(f"{s.mode} @ {load_label(s)} {p:.0f}%" for s, p, a in zip(summaries, pct, aborted) if a and p != base)
    if not parts:
        return f"percentiles over finished requests after the first {base:.0f}% of arrivals"
    return (f"percentiles over finished requests after each point's warm-up: the first {base:.0f}% of the arrival "
            f"window, except {parts} (aborted early: the warm-up share of the span it ran)")
