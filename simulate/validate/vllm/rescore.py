"""Re-score a recorded vLLM validation on any CPU (`costmodel validate --engine vllm --score-only`):
per mode, replay every scored load in the simulator on the profile refitted from the calibration's engine
steps and score it (the profiles are read from a folder measure wrote just before: measure/validate/vllm_campaign.py
fit_recorded, run by pipeline/validate_vllm.py). Writes OUT/scores.csv (per load), OUT/steps.csv (per step),
OUT/requests.csv (per request), OUT/drift.csv (step-cost drift from the calibration), OUT/schedule.csv (per load: the
simulator's schedule against vLLM's with the engine's own step times, replay.replay_recorded) and OUT/summary.csv (per
mode: the largest error per metric below saturation, the schedule's share and step-count error), atomically.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from costmodel import atomic
from costmodel.errors import UserError
from costmodel.schemas.profile import Profile
from costmodel.schemas.rundir import load_run
from costmodel.schemas.engine_trace import EngineTrace, read_trace
from simulate.validate.vllm.replay import capacity_rps, replay, replay_recorded
from simulate.validate.vllm.score import (SCHEDULE_TARGETS, TARGETS_PCT, frontend_overhead_ms, load_scores, request_summary, request_table,
                                          schedule_row, scores_frame, step_table)

UNSTABLE_FRAC = 1.5  # the overload check: Poisson at this multiple of the fitted capacity must be called unstable


@dataclass
class Rescored:
    drift: pd.DataFrame
    scores: pd.DataFrame
    steps: pd.DataFrame
    requests: pd.DataFrame
    summary: pd.DataFrame
    schedule: pd.DataFrame


def _client(run_dir: Path) -> pd.DataFrame | None:
    run = load_run(run_dir)
    if not run.has("requests"):
        return None
    req = run.table("requests")
    return req[req["status"] == "ok"]


def _profile(mdir: Path, profiles: Path) -> tuple[Profile, EngineTrace]:
    """The profile refitted from the calibration's steps (`profiles`/<mode>/calibration.json) and the calibration's trace."""
    cal = read_trace(mdir / "calibration" / "sched.jsonl.gz", mdir.name)
    return Profile.load(profiles / mdir.name / "calibration.json"), cal


def step_cost_drift(cal, trace, load: str) -> dict:
    """How much slower (+) or faster (-) the engine's steps were in a load than in the calibration at
    the same batch composition (running requests, with or without a prefill): mean over the load's
    steps whose composition the calibration also ran."""
    def key(s):
        return s["running"].astype(str) + "/" + (s["prefill_reqs"] > 0).astype(str)

    cm = cal.steps.groupby(key(cal.steps))["gap_ms"].mean()
    k = key(trace.steps)
    ok = k.isin(cm.index)
    drift = 100.0 * (trace.steps["gap_ms"][ok].sum() / cm[k[ok]].sum() - 1.0) if ok.any() else float("nan")
    return {"mode": trace.mode, "load": load, "step_time_vs_calibration_pct": float(drift), "steps_compared_pct": float(100 * ok.mean())}


def overload_check(profile: Profile, mode: str, cal) -> dict:
    """Poisson arrivals at UNSTABLE_FRAC x the fitted capacity for 120 s, lengths as the
    calibration's: the simulator must call the point unstable (its queue grows without bound)."""
    import numpy as np

    from simulate.sim import simulate_point
    from simulate.workload import Requests
    from simulate.validate.vllm.replay import engine_config

    rq, config = cal.requests, cal.config
    p, o = rq["prompt_tokens"].to_numpy(), rq["output_tokens"].to_numpy()
    cap = capacity_rps(profile, cal.serving, config, p, o)
    rate = UNSTABLE_FRAC * cap
    rng = np.random.default_rng(1)
    arr = np.cumsum(rng.exponential(1.0 / rate, int(rate * 120)))
    i = rng.integers(0, len(p), len(arr))
    reqs = Requests(arr, p[i].astype(np.int64), np.maximum(o[i], 1).astype(np.int64), np.zeros(len(arr), np.int64), ("R1",), float(arr[-1]), rate)
    (summary, _), _ = simulate_point(profile, cal.serving, reqs, replicas=1, cfg=engine_config(config, cal.serving), router="least-outstanding", seed=0,
                                     warmup_frac=0.1, abort_backlog_s=60.0, drain_s=None, workload_desc="overload check")
    return {"capacity_rps": cap, "offered_rps": rate, "stable": bool(summary.stable)}


def rescore_mode(mdir: Path, profiles: Path) -> tuple[list, list, list, dict, list]:
    mode = mdir.name
    profile, cal = _profile(mdir, profiles)
    cal_client = _client(mdir / "calibration")
    front = frontend_overhead_ms(cal, cal_client) if cal_client is not None else None
    scores, steps, reqs, sched = [], [], [], []
    for ldir in sorted(p.parent for p in mdir.glob("*/load.json")):
        trace = read_trace(ldir / "sched.jsonl.gz", mode)
        steps.append(pd.DataFrame([step_cost_drift(cal, trace, ldir.name)]).assign(kind="drift"))
        rep = replay(profile, trace)
        scores += load_scores(trace, rep, ldir.name, front, _client(ldir))
        # diagnosis: the same replay priced by a fit of this load's own steps (in sample): what is left
        # is the scheduling model's error; the difference to the row above is the step-cost drift
        own = Profile.load(profiles / mode / f"{ldir.name}.json")
        scores += [dataclasses.replace(x, pricing="own steps") for x in load_scores(trace, replay(own, trace), ldir.name)]
        steps.append(step_table(trace, rep, ldir.name).assign(kind="step"))
        row, srt = schedule_row(trace, replay_recorded(profile, trace), ldir.name)
        sched.append(row)
        rt = request_table(trace, rep, ldir.name)
        reqs.append(rt.assign(on_schedule_recorded_steps=srt["on_schedule"].to_numpy()))
    if not scores:
        raise UserError(f"{mdir} holds no scored loads (<load>/load.json)", "run `costmodel validate --engine vllm` first")
    over = overload_check(profile, mode, cal)
    return scores, steps, reqs, over, sched


def summarise(scores: pd.DataFrame, reqs: pd.DataFrame, over: dict[str, dict], sched: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for mode, g in scores[scores["pricing"] == "calibration"].groupby("mode", sort=False):
        row = {"mode": mode}
        for metric in TARGETS_PCT:
            e = g.loc[g["metric"] == metric, "rel_error_pct"].abs()
            row[f"{metric}_max_abs_err_pct"] = float(e.max()) if len(e) else float("nan")
        row["targets_met"] = bool(g["met"].dropna().all())
        own = scores[(scores["pricing"] == "own steps") & (scores["mode"] == mode)]
        for metric in ("throughput_rps", "e2e_ms_p50", "engine_steps"):
            e = own.loc[own["metric"] == metric, "rel_error_pct"].abs()
            row[f"own_steps_{metric}_max_abs_err_pct"] = float(e.max()) if len(e) else float("nan")
        row.update(request_summary(reqs[reqs["mode"] == mode]))
        sm = sched[sched["mode"] == mode]
        row["schedule_on_vllm_pct"] = float(100 * reqs.loc[reqs["mode"] == mode, "on_schedule_recorded_steps"].mean())
        row["schedule_engine_steps_max_abs_err_pct"] = float(sm["engine_steps_err_pct"].abs().max())
        row["schedule_targets_met"] = bool(row["schedule_on_vllm_pct"] >= SCHEDULE_TARGETS["on_schedule_pct"]
                                           and row["schedule_engine_steps_max_abs_err_pct"] <= SCHEDULE_TARGETS["engine_steps_abs_err_pct"])
        row.update({f"overload_{k}": v for k, v in over[mode].items()})
        rows.append(row)
    return pd.DataFrame(rows)


def rescore(out: str | Path, modes: list[str] | None, profiles: Path) -> Rescored:
    """Every recorded mode under `out` re-scored on the profiles refitted from its steps (`profiles`: <mode>/calibration.json,
    <mode>/<load>.json)."""
    out = Path(out)
    mdirs = [d for d in sorted(out.iterdir()) if (d / "calibration").is_dir()] if out.is_dir() else []
    if modes:
        mdirs = [d for d in mdirs if d.name in modes]
    if not mdirs:
        raise UserError(f"{out} holds no recorded vLLM validation (<mode>/calibration/)", "run `costmodel validate --engine vllm -o DIR` first")
    scores, steps, reqs, over, sched = [], [], [], {}, []
    for d in mdirs:
        s, st, rq, ov, sc = rescore_mode(d, Path(profiles))
        scores += s
        steps += st
        reqs += rq
        over[d.name] = ov
        sched += sc
    allsteps = pd.concat(steps, ignore_index=True)
    drift = allsteps[allsteps["kind"] == "drift"][["mode", "load", "step_time_vs_calibration_pct", "steps_compared_pct"]].reset_index(drop=True)
    stf = allsteps[allsteps["kind"] != "drift"].drop(columns=["kind", "step_time_vs_calibration_pct", "steps_compared_pct"]).reset_index(drop=True)
    sf, rqf, schf = scores_frame(scores), pd.concat(reqs, ignore_index=True), pd.DataFrame(sched)
    summ = summarise(sf, rqf, over, schf)
    for name, df in (("scores", sf), ("steps", stf), ("requests", rqf), ("summary", summ), ("drift", drift), ("schedule", schf)):
        atomic.write_csv(out / f"{name}.csv", df)
    atomic.write_text(out / "overload.json", json.dumps(over, indent=1))
    return Rescored(drift, sf, stf, rqf, summ, schf)
