"""`costmodel fit --calibrate RUN`: a profile priced as a user's own vLLM.

The profile's own forward price of every recorded step (its pass models, MTP's draft passes), then
per mode an efficiency (measured model time / priced forward, summed over busy steps; from the wall
time jointly with the host term when no model time was recorded) that scales the mode's pass models,
and the engine's host-overhead step term from the same steps (measure/fit/host_overhead.py). The
run must be of the profile's models and GPU (refused, naming both); an overhead that would be
negative is refused."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd

from costmodel.errors import UserError
from costmodel.hardware import match_nvml_name
from costmodel.modes import ModeDraws, ServingMode
from costmodel.roofline import Segment
from costmodel.schemas.profile import KERNEL_ORIGIN_KEY, Profile
from costmodel.schemas.rundir import Run
from costmodel.stepcost import pass_cost
from costmodel.stepcost.host_overhead import COEFS, HOST_OVERHEAD_KEY, async_on, mode_record, with_terms
from measure.fit.assemble import resolve_model
from measure.fit.host_overhead import BLOCK_STEPS, blocks_of, busy_steps, composition_frame, fit_host, mape, nonneg_ols
from measure.fit.steps import KIND, request_context, step_segments


# ---- --calibrate: a profile priced as a user's own vLLM ----------------------------------------
def forward_ms(profile: Profile, mode: str, df: pd.DataFrame, engine: dict) -> np.ndarray:
    """The profile's price of every recorded step's forward passes (no step terms)."""
    cost = pass_cost(profile, mode)
    serving = cost.serving
    out = np.empty(len(df))
    for i, row in enumerate(df.itertuples()):
        segs, _, k = step_segments(row, serving, engine)
        prefill = segs[0] if segs and segs[0].kind == serving.prefill_kind else None
        ctx = segs[-1].context if segs else 0
        groups = tuple(next((s for s in segs if s.kind == kd), Segment(kd, 0, 1, ctx)) for kd in serving.group_kinds)
        draws = ModeDraws(group_tokens=tuple(g.tokens for g in groups), kv_need_tokens=np.zeros(0), side_passes=k)
        out[i] = serving.step_ms(cost, prefill, groups, draws)
    return out


def run_steps(run: Run) -> pd.DataFrame:
    """The run's busy steps, each with its decode context from the requests' records where the run holds
    them (as the fit prices it, measure/fit/steps.py): KV usage overstates it for a hybrid cache."""
    df = busy_steps(run.table("steps"))
    ctx = request_context(run, df)
    if ctx is not None:
        df["context_tokens"] = ctx
    return df


def check_same_setup(profile: Profile, run: Run, hardware: str | None) -> str:
    """The run's mode, if the run is of the profile's model and GPU; refused naming both otherwise."""
    m = run.manifest
    mode = m.mode
    if mode not in profile.modes:
        raise UserError(f"calibration run {run.path} is a {mode} run; profile {profile.profile_id} has no {mode} mode",
                        f"calibrate a profile with modes {', '.join(profile.modes)}")
    model = resolve_model(m.model, f"calibration run {run.path}")
    if model != profile.modes[mode].model:
        raise UserError(f"calibration run {run.path} served model {model}; profile {profile.profile_id} prices {profile.modes[mode].model}",
                        "calibrate with a run of the profile's model, or a profile of the run's model")
    gpu = hardware or m.hardware or getattr(match_nvml_name(m.gpu_name or ""), "id", None)
    if gpu != profile.hardware.id:
        raise UserError(f"calibration run {run.path} ran on {gpu or m.gpu_name or 'an unknown device'}; profile {profile.profile_id} is "
                        f"for {profile.hardware.id}", "calibrate with a run on the profile's GPU (or --hardware ID naming it)")
    return mode


def scaled(profile: Profile, mode: str, eff: float) -> None:
    """The mode's pass models priced `eff` times (linear coefficients and tables alike), in place."""
    for pm in profile.modes[mode].pass_models.values():
        pm.coef = {k: v * eff for k, v in pm.coef.items()}
        if pm.model_type == "roofline":
            pm.coef["roofline_ms"] = max(1.0, pm.coef["roofline_ms"])
        t = pm.table
        if t is not None:
            t.ms = [[[v * eff for v in c] for c in r] for r in t.ms]
            t.token_ms = [v * eff for v in t.token_ms]
            t.overhead_ms *= eff


def calibrate_steps(profile: Profile, runs: list[Run], hardware: str | None = None) -> tuple[Profile, list[str]]:
    """A copy of `profile` calibrated on recorded engine-steps runs: per mode an efficiency on its
    pass models and the host term (module docstring); and what was fitted, one line each."""
    out = copy.deepcopy(profile)
    out.__dict__.pop("_resolved", None)
    msgs: list[str] = []
    by_mode: dict[str, list[Run]] = {}
    for r in runs:
        if r.manifest.kind != KIND:
            raise UserError(f"calibration run {r.path} is a {r.manifest.kind} run", "pass recorded engine steps (costmodel measure --engine vllm, "
                            "or a vLLM served with COSTMODEL_STEP_RECORD)")
        by_mode.setdefault(check_same_setup(profile, r, hardware), []).append(r)
    eng = dict(out.engine)
    host = dict(eng.get(HOST_OVERHEAD_KEY) or {})
    for mode, rs in by_mode.items():
        df = pd.concat([run_steps(r) for r in rs], ignore_index=True)
        engine = rs[0].manifest.engine
        fwd = forward_ms(profile, mode, df, engine)
        el = pd.to_numeric(df["elapsed_ms"], errors="coerce").to_numpy(float)
        has_el = np.isfinite(el).mean() > 0.9
        serving = rs[0].manifest.serving
        eff = float(np.nansum(el) / fwd[np.isfinite(el)].sum()) if has_el else _joint_eff(df, fwd, serving)
        if not eff > 0:
            raise UserError(f"calibration of {mode}: the efficiency fit is {eff:.3g}", "record a run with load (busy steps)")
        scaled(out, mode, eff)
        src = (f"calibrated on vLLM {engine.get('version')} runs {', '.join(r.manifest.run_id for r in rs)} ({rs[0].manifest.gpu_name}): "
               f"pass models x {eff:.4g}")
        fit = fit_host(df, serving, f"calibration run {rs[0].path}", None if has_el else fwd * eff, bool(engine.get("async_scheduling")), src)
        host[mode] = fit.record()
        msgs.append(f"{mode}: priced forward x {eff:.4g} (measured model time / the profile's forward price over {len(df)} busy steps"
                    + ("" if has_el else "; no model time recorded: fitted jointly with the host term from wall time") + ")")
        msgs.append(fit.describe())
    eng[HOST_OVERHEAD_KEY] = host
    eng[KERNEL_ORIGIN_KEY] = "vllm"
    eng["calibrated_from"] = sorted(r.manifest.run_id for r in runs)
    out.engine = eng
    out.profile_id = f"{profile.profile_id}-calibrated"
    out.notes = list(out.notes) + [f"calibrate: {m}" for m in msgs]
    return out.validate("calibrated profile"), msgs


def _joint_eff(df: pd.DataFrame, fwd: np.ndarray, mode: ServingMode) -> float:
    """Efficiency from wall time alone: block sums of gap on [priced forward, composition] (>= 0)."""
    blocks = blocks_of(len(df))
    comp = composition_frame(df, mode)
    X = pd.concat([pd.Series(fwd, index=df.index, name="fwd"), comp], axis=1).groupby(blocks).sum()
    y = df["gap_ms"].astype(float).groupby(blocks).sum().to_numpy()
    return nonneg_ols(X.to_numpy(), y, list(X.columns))["fwd"]


def wall_check(profile: Profile, runs: list[Run]) -> list[str]:
    """Per mode of engine-steps `runs`: the profile's whole step price (passes + step terms, as the
    simulator prices a step) against the recorded wall time, as MAPE of block sums and of the total."""
    msgs = []
    for mode in sorted({r.manifest.mode for r in runs} & set(profile.modes)):
        rs = [r for r in runs if r.manifest.mode == mode]
        df = pd.concat([run_steps(r) for r in rs], ignore_index=True)
        fwd = forward_ms(profile, mode, df, rs[0].manifest.engine)
        host = host_term_ms(profile, rs[0].manifest.serving, df, fwd)
        b = blocks_of(len(df))
        pred = pd.Series(fwd + host).groupby(b).sum().to_numpy()
        wall = df["gap_ms"].astype(float).groupby(b).sum().to_numpy()
        msgs.append(f"{mode}: the profile's step price (forward {fwd.sum() / 1e3:.2f} s + host term {host.sum() / 1e3:.2f} s) vs the recorded wall "
                    f"time {wall.sum() / 1e3:.2f} s of {len(df)} busy steps: total {100 * (pred.sum() / wall.sum() - 1):+.1f}%, MAPE of "
                    f"{len(wall)} blocks of {BLOCK_STEPS} steps {mape(pred, wall):.2f}% (in-sample; held-out figures above)")
    return msgs


def host_term_ms(profile: Profile, serving: ServingMode, df: pd.DataFrame, fwd: np.ndarray) -> np.ndarray:
    """The host-overhead step term of every recorded step on `profile` (0 where it has none)."""
    rec = mode_record(profile.engine, serving.name)
    if rec is None:
        return np.zeros(len(df))
    comp = composition_frame(df, serving)
    host = comp[list(COEFS)].to_numpy() @ np.array([rec["coef"].get(c, 0.0) for c in COEFS])
    return np.maximum(0.0, host - fwd) if async_on(profile.engine, rec) else host


def with_carried_term(source: Profile, target: Profile) -> Profile:
    """`target` with `source`'s engine step terms for the modes both price, labelled as carried: the
    engine's step work measured or calibrated on one GPU and precision, assumed the same on another
    (host work is the CPU's; what else the term holds is not re-measured there)."""
    terms = source.engine.get(HOST_OVERHEAD_KEY) or {}
    modes = [m for m in terms if m in target.modes]
    if not modes:
        raise UserError(f"profile {source.profile_id} has no engine step term for a mode of {target.profile_id}",
                        "carry from a calibrated profile (costmodel fit --calibrate ...)")
    where = f"{source.profile_id} ({source.hardware.id}, {source.precision})"
    carried = {m: {**copy.deepcopy(terms[m]), "source": f"carried from {where}, not measured on {target.hardware.id} "
                                                         f"{target.precision}: {terms[m].get('source', '')}"} for m in modes}
    out = with_terms(target, carried, source.engine.get("calibrated_from") or (), "profile with a carried step term")
    out.notes = list(out.notes) + [f"engine step term for {', '.join(modes)} carried from {where} (costmodel profile carry-term)"]
    return out
