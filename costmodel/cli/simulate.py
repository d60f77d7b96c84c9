"""`costmodel simulate`: throughput, latency percentiles and utilisation against QPS, per mode."""

from __future__ import annotations

import math
import os
from pathlib import Path

import click

from costmodel.errors import UserError
from costmodel.modes import mode_names

DEFAULT_HARDWARE = "h200"


@click.command()
@click.option("--qps", default=None, help="Comma-separated arrival rates (requests/s, all replicas together), e.g. 1,2,4,8.")
@click.option("--mode", "modes", default=",".join(mode_names()), show_default=True, help=f"Comma-separated modes: {', '.join(mode_names())}.")
@click.option("--hardware", default=None, help=f"GPU of the shipped default profile [default: {DEFAULT_HARDWARE}].")
@click.option("--profile", "profile_path", default=None, help="Profile JSON (from `costmodel fit`) instead of the shipped one.")
@click.option("--replicas", type=int, default=1, show_default=True, help="Replicas (one GPU each) behind the router.")
@click.option("--duration", type=float, default=None, help="Seconds of arrivals [default: 300 s, at least 1000 requests].")
@click.option("--requests", "n_requests", type=int, default=None, help="Number of arrivals (instead of --duration).")
@click.option("--workload", "workload_path", default=None, help="Workload JSON (arrivals, lengths, regime mix, trace); see docs/simulator.md.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the workload and of every random draw.")
@click.option("--max-num-seqs", type=int, default=None, help="Running sequences per replica [default: 256, or the profile's engine].")
@click.option("--max-num-batched-tokens", type=int, default=None, help="Token budget per engine step [default: 8192, or the profile's engine].")
@click.option("--gpu-memory-utilization", type=float, default=None, help="Share of GPU memory for weights + KV [default: 0.9].")
@click.option("--router", default="least-outstanding", show_default=True, type=click.Choice(["least-outstanding", "round-robin"]))
@click.option("--warmup", type=float, default=0.1, show_default=True, help="Share of the arrival window left out of percentiles.")
@click.option("-o", "--out", "out_dir", default=None, help="Write requests_*.parquet per point, summary.csv and summary.json here.")
@click.option("--jobs", type=int, default=None, help="Parallel processes for the points [default: one per core, at most one per point].")
def simulate(qps, modes, hardware, profile_path, replicas, duration, n_requests, workload_path, seed, max_num_seqs,
             max_num_batched_tokens, gpu_memory_utilization, router, warmup, out_dir, jobs):
    """Simulate serving under load on a profile: per (mode, QPS) throughput, TTFT/E2E percentiles,
    GPU busy fraction, and whether the point is stable (an unstable point's queue grows without
    bound: its latencies are not steady-state and are not shown)."""
    from costmodel.console import make_console
    from costmodel.options import parse_floats, parse_modes
    from costmodel.shipped import resolve_profile
    from simulate.api import check_mode, resolve_engine, sweep
    from simulate.workload import load_workload

    mode_list = parse_modes(modes)
    if seed < 0:
        raise UserError(f"--seed {seed} is negative", "give an integer >= 0")
    if replicas < 1:
        raise UserError(f"--replicas {replicas} is below 1", "give an integer >= 1")
    if jobs is not None and jobs < 1:
        raise UserError(f"--jobs {jobs} is below 1", "give an integer >= 1")
    if duration is not None and not (math.isfinite(duration) and duration > 0):
        raise UserError(f"--duration {duration:g} must be a positive number of seconds", "e.g. --duration 600")
    if n_requests is not None and n_requests < 1:
        raise UserError(f"--requests {n_requests} is below 1", "give an integer >= 1")
    if not 0 <= warmup < 1:
        raise UserError(f"--warmup {warmup:g} must be in [0, 1)", "e.g. --warmup 0.1")
    workload = load_workload(workload_path) if workload_path else None
    if qps is None:
        if not (workload is not None and workload.recorded_rate):
            raise UserError("--qps is missing", "give arrival rates, e.g. --qps 1,2,4,8")
        qps_list = [None]
    else:
        qps_list = parse_floats(qps, "qps")
        if len(set(qps_list)) != len(qps_list):
            raise UserError(f"--qps lists a rate twice ({qps})", "give each rate once")
    profile = resolve_profile(profile_path, hardware or DEFAULT_HARDWARE)
    if profile_path and hardware and profile.hardware.get("id") != hardware:
        raise UserError(f"--profile {profile_path} is for {profile.hardware.get('id')}, not --hardware {hardware}",
                        "drop --hardware (the profile fixes the GPU) or pass a profile for that GPU")
    for m in mode_list:
        check_mode(profile, m)
    engine = resolve_engine(profile, {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
                                      "gpu_memory_utilization": gpu_memory_utilization})

    con = make_console()
    err = make_console(stderr=True)
    kw = dict(replicas=replicas, workload=workload, duration_s=duration, n_requests=n_requests, seed=seed, engine=engine,
              router=router, warmup_frac=warmup)
    total = len(mode_list) * len(qps_list)
    show = not os.environ.get("COSTMODEL_NO_PROGRESS")
    if show:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                      TimeElapsedColumn(), console=err, transient=True) as bar:
            task = bar.add_task("", total=total)

            def progress(done, n, res):
                s = res.summary
                bar.update(task, completed=done, description=f"{s.mode} @ {s.qps:g} QPS done")

            results = sweep(profile, mode_list, qps_list, processes=jobs, progress=progress, **kw)
    else:
        results = sweep(profile, mode_list, qps_list, processes=jobs, **kw)

    con.print(render_table(results, profile))
    for r in results:
        s = r.summary
        if not s.stable:
            con.print(f"[yellow]{s.mode} @ {s.qps:g} QPS unstable:[/yellow] {s.stability_reason}")
    if out_dir:
        paths = write_results(out_dir, results, profile)
        con.print(f"wrote {len(paths)} files to {out_dir}")


def _ms(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else (f"{x:,.0f}" if x >= 100 else f"{x:.1f}")


def render_table(results, profile):
    from rich.table import Table

    first = results[0].summary
    t = Table(title=f"costmodel simulate: {profile.profile_id} ({first.hardware}), {first.replicas} replica(s), "
                    f"{first.workload}")
    for c in ["mode", "QPS", "stable", "req/s", "out tok/s", "TTFT p50 ms", "TTFT p95 ms", "E2E p50 ms", "E2E p95 ms", "E2E p99 ms", "busy", "batch"]:
        t.add_column(c, justify="left" if c in ("mode", "stable") else "right")
    for r in results:
        s = r.summary
        lat = [s.ttft_ms["p50"], s.ttft_ms["p95"], s.e2e_ms["p50"], s.e2e_ms["p95"], s.e2e_ms["p99"]]
        shown = [_ms(x) for x in lat] if s.stable else ["-"] * len(lat)
        t.add_row(s.mode, f"{s.qps:g}", "yes" if s.stable else "[red]NO[/red]", f"{s.throughput_rps:.2f}", f"{s.output_tokens_per_s:,.0f}",
                  *shown, f"{s.gpu_busy_frac:.2f}", f"{s.mean_batch_seqs:.1f}")
    t.caption = (f"percentiles over finished requests after the first {100 * first.warmup_s / max(first.duration_s, 1e-9):.0f}% of arrivals; "
                 f"TPOT and per-request rows in -o; provenance: " + " | ".join(sorted({f'{r.summary.mode}: {r.summary.provenance}' for r in results})))
    return t


def point_stem(s) -> str:
    return f"requests_{s.mode}_qps{s.qps:g}_r{s.replicas}"


def write_results(out_dir: str | os.PathLike, results, profile) -> list[Path]:
    """requests_<mode>_qps<q>_r<n>.parquet per point, summary.csv (flat rows), summary.json; atomic."""
    import pandas as pd

    from costmodel import atomic

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"-o {out} exists and is not a directory", "give a directory path")
    paths = []
    for r in results:
        paths.append(atomic.write_parquet(out / f"{point_stem(r.summary)}.parquet", r.requests))
    flat = pd.DataFrame([r.summary.flat() for r in results])
    paths.append(atomic.write_csv(out / "summary.csv", flat))
    paths.append(atomic.write_json(out / "summary.json", {
        "profile_id": profile.profile_id, "hardware": profile.hardware.get("id"), "precision": profile.precision,
        "points": [r.summary for r in results],
    }))
    return paths
