"""The simulating half of a validation (the recording is measure/validate/gpu.py's): for each mode and
rate, the static-batch simulation of a recorded load run (a run directory of kind "validate") with the
given profile, and the score; and the rates a load run is sent at (`auto_rates`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from costmodel import atomic
from costmodel.errors import UserError
from costmodel.modes import ServingMode
from costmodel.schemas.profile import Profile
from costmodel.schemas.rundir import load_run
from simulate.validate.score import RateScore, is_saturated, score_rate, score_table, summary_mape
from simulate.static_batch import BatchRequest, batch_timeline, simulate_static_batches


@dataclass
class ValidationResult:
    table: pd.DataFrame  # one row per (mode, rate, metric)
    summary: pd.DataFrame  # MAPE per (mode, metric) below saturation


def auto_rates(profile: Profile, mode: ServingMode, requests: list[BatchRequest], max_batch: int, fractions=(0.25, 0.55, 0.85)) -> list[float]:
    """Low, middle and near-saturation rates from the profile's predicted capacity: a full batch
    of typical requests served back to back (max_batch / predicted batch time)."""
    typical = sorted(requests, key=lambda r: r.output_tokens)[len(requests) // 2]
    n = mode.static_batch_requests or max_batch
    _, _, dur = batch_timeline(profile, mode, [typical] * n)
    capacity = n / dur
    return [round(f * capacity, 3 if capacity < 10 else 2) for f in fractions]


def score_recorded(out: Path, profile: Profile, modes: list[str] | None = None) -> ValidationResult:
    """Re-simulate every recorded load run under `out` with `profile` and score it (CPU only)."""
    scores: list[RateScore] = []
    dirs = sorted(p.parent for p in Path(out).glob("*-rate*/manifest.json"))
    if not dirs:
        raise UserError(f"{out} holds no validation load runs (<mode>-rate<r>/manifest.json)", "run `costmodel validate` on a GPU first")
    for d in dirs:
        run = load_run(d)
        if run.manifest.kind != "validate":
            continue
        mode = run.manifest.mode
        if modes and mode not in modes:
            continue
        req = run.table("requests")
        settings = run.manifest.settings
        batch = [BatchRequest(r.request_id, float(r.arrival_s), int(r.prompt_tokens), int(r.output_tokens),
                              steps_per_canvas=[int(x) for x in r.steps_per_canvas],
                              accepted_per_iteration=[int(x) for x in r.accepted_per_iteration],
                              draft_tokens=int(settings.get("draft_tokens", 4))) for r in req.itertuples()]
        sim = simulate_static_batches(profile, run.manifest.serving, batch, int(settings["max_batch"]))
        measured = req[["request_id", "arrival_s", "start_s", "first_token_s", "finish_s"]]
        scores += score_rate(mode, float(settings["rate_rps"]), measured, sim, saturated=is_saturated(measured))
    if not scores:
        raise UserError(f"{out} holds no validation runs for modes {modes}", "check --mode")
    table = score_table(scores)
    summary = summary_mape(table)
    atomic.write_csv(Path(out) / "validation.csv", table)
    atomic.write_csv(Path(out) / "validation_summary.csv", summary)
    return ValidationResult(table, summary)
