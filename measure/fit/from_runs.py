"""`costmodel fit`'s API: `FitRequest` (the options as given) -> `fit_profile`, which checks them,
adds a campaign's runs, and fits from recorded engine steps (measure/fit/steps.py) when any run holds
them, from an operator run's composed passes (measure/fit/ops_runs.py), else from timed passes and
endpoint loads (measure/fit/assemble.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from costmodel.errors import UserError
from costmodel.schemas.rundir import load_run
from measure.fit.assemble import FitOptions, FitResult, build_profile, campaign_runs
from measure.fit.calibrate import wall_check
from measure.fit.fitters import LinearFitter
from measure.fit.ops_runs import build_ops_profile, is_ops_run
from measure.fit.steps import build_step_profile, is_step_run


def split_list(values) -> list[str]:
    """Repeated and comma-separated values as one list."""
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


@dataclass
class FitRequest:
    runs: list[str] = field(default_factory=list)
    campaign: str | None = None  # also every GPU run under this folder timed on `hardware`
    hardware: str | None = None
    hardware_file: str | None = None
    precision: str | None = None
    commit_runs: list[str] = field(default_factory=list)  # each may be a comma list
    mtp_metrics: list[str] = field(default_factory=list)  # each may be a comma list
    prefer: str | None = None
    heldout: str = "auto"
    time_column: str = "gpu_ms"
    repeats: str = "median"
    modes: str | None = None  # comma list
    model_overrides: list[str] = field(default_factory=list)  # MODE=NAME
    engine: str | None = None
    fill_roofline: float | None = None
    profile_id: str | None = None
    notes: list[str] = field(default_factory=list)
    seed: int = 0
    host_overhead: bool = True  # engine-steps runs: the host work as its own step term (measure/fit/host_overhead.py)
    behaviour: str = "runs"  # engine-steps runs: the modes' behaviour parts from the runs, or the published prior ("prior")
    pass_model: str = "linear"  # timed passes: the model_type they are fitted as (measure/fit/fitters.py)


def _model_overrides(items: list[str]) -> dict[str, str]:
    models = {}
    for item in items:
        if "=" not in item:
            raise UserError(f"--model {item!r} is not MODE=NAME", "e.g. --model diffusion=diffusiongemma-26b-a4b")
        k, v = item.split("=", 1)
        models[k.strip()] = v.strip()
    return models


def run_paths(req: FitRequest) -> list[str]:
    """The RUN directories given, then the campaign's (each once)."""
    paths = list(req.runs)
    if req.campaign:
        if not req.hardware:
            raise UserError("--campaign needs --hardware", "e.g. --campaign data/runs --hardware h200")
        paths += [str(p) for p in campaign_runs(req.campaign, req.hardware, req.precision) if str(p) not in paths]
    if not paths:
        raise UserError("no run directories given", "pass RUN directories or --campaign DIR --hardware ID")
    return paths


def fit_options(req: FitRequest) -> FitOptions:
    if req.fill_roofline is not None and not 0 < req.fill_roofline <= 1:
        raise UserError(f"--fill-roofline {req.fill_roofline} is outside (0, 1]", "give the fraction of the roofline the engine reaches, e.g. 0.33")
    return FitOptions(hardware=req.hardware, hardware_file=req.hardware_file, precision=req.precision, commit_runs=split_list(req.commit_runs),
                      mtp_metrics=split_list(req.mtp_metrics), heldout=req.heldout, time_column=req.time_column, repeats=req.repeats,
                      modes=split_list((req.modes,)) if req.modes else None, models=_model_overrides(req.model_overrides), engine=req.engine,
                      fill_roofline=req.fill_roofline, profile_id=req.profile_id, notes=list(req.notes), seed=req.seed, prefer=req.prefer,
                      host_overhead=req.host_overhead, behaviour=req.behaviour, pass_model=req.pass_model)


def fit_profile(req: FitRequest) -> FitResult:
    """The profile `costmodel fit` writes, with its fits, filled kinds and messages."""
    paths = run_paths(req)
    opts = fit_options(req)
    if opts.pass_model != LinearFitter.name and any(is_ops_run(p) or is_step_run(p) for p in paths):
        raise UserError(f"--pass-model {opts.pass_model} fits timed passes; operator runs and recorded engine steps have their own models",
                        "drop --pass-model, or fit only runs of timed passes")
    if any(is_ops_run(p) for p in paths):
        return build_ops_profile(paths, opts)
    if any(is_step_run(p) for p in paths):
        result = build_step_profile(paths, opts)
        result.messages.extend(wall_check(result.profile, [load_run(p) for p in paths]))
        return result
    return build_profile(paths, opts)
