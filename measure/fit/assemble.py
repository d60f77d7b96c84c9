"""Assemble a Profile from run directories: what `costmodel fit` does.

- pass timings: every run's `passes` table, warm-up rows (column `warmup`) dropped, rows without a
  positive time dropped and counted; one model per pass kind present (`prefill` pools AR and MTP
  runs: same target model);
- modes: those of the runs, or `--modes`; a mode's pass kind that no run timed is filled from a
  stated source (its PassKind's `stand_in`: a measured kind of the same body with its coefficients carried; the MTP
  assistant's draft step at the target decode step's measured roofline multiple; or
  `--fill-roofline EFF`) or the mode is omitted - both printed and written into the profile notes;
- commit statistics: runs with the model's own weights, else the published prior (commitfit);
- MTP acceptance: vLLM spec-decode counters, else the stated default (mtpfit);
- endpoint runs (kind endpoint / bench-import): per-load engine-step observations of
  denoise_step / decode_step, commit statistics and MTP acceptance from the server's counters,
  provenance "endpoint" (endpointfit); a pass kind is fitted from GPU runs or endpoint runs, never
  both (`--prefer gpu|endpoint` picks one where both observe it, else it is refused).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from costmodel.errors import UserError
from costmodel.hardware import HardwareSpec, get_hardware
from costmodel.models import AR_SIBLING, ASSISTANT_FOR, MODELS, get_model
from costmodel.modes import ServingMode, all_modes, family_of_pass, mode_names, modes_of_family
from costmodel.modes.diffusion import COMMIT_STATS
from costmodel.modes.mtp import MTP_ACCEPTANCE
from costmodel.precision import get_precision
from costmodel.prior import CITATION, published_commit_prior
from costmodel.roofline import PASS_KINDS, Roofline, Segment, get_pass_kind
from costmodel.schemas.profile import ModeProfile, MtpAcceptance, PassCostModel, Profile, Provenance
from costmodel.schemas.rundir import Run, load_run, read_manifest
from costmodel.timestamps import now_iso
from measure.fit.commits import choose_commit_stats, commits
from measure.fit.endpoint import (endpoint_commit_stats, endpoint_frame, endpoint_mtp_acceptance, is_endpoint, mapping_note,
                                  require_endpoint_commits, resolve_mixing)
from measure.fit.mtp import choose_mtp_acceptance
from measure.fit.fitters import get_fitter
from measure.fit.passes import HeldoutSpec, PassFit, grid_median_x_roofline

TIME_COLUMNS = ("gpu_ms", "wall_ms")
# manifest.engine fields that identify how passes run; runs pooled for one pass kind must agree on
# those they share (other fields, e.g. the models a run built, legitimately differ)
ENGINE_IDENTITY_KEYS = ("name", "engine", "compiled", "cache", "compile_mode", "experts_implementation", "attn_implementation",
                        "transformers", "torch")


@dataclass
class FitOptions:
    hardware: str | None = None
    hardware_file: str | None = None
    precision: str | None = None
    commit_runs: list[str] = field(default_factory=list)
    mtp_metrics: list[str] = field(default_factory=list)
    heldout: str = "auto"
    time_column: str = "gpu_ms"
    repeats: str = "median"
    modes: list[str] | None = None
    models: dict[str, str] = field(default_factory=dict)  # mode -> catalog model name override
    engine: str | None = None
    fill_roofline: float | None = None
    profile_id: str | None = None
    notes: list[str] = field(default_factory=list)  # added to the profile's notes as given
    seed: int = 0
    prefer: str | None = None  # gpu | endpoint: the origin kept for a pass kind both observe (else refused)
    pass_model: str = "linear"  # the model_type timed passes are fitted as: a registered fitter (measure/fit/fitters.py)
    # engine-steps runs of the GPU driver: loads (fnmatch patterns) kept out of the fit, for every run or per run directory (resolved path)
    holdout_loads: tuple[str, ...] | dict = ()
    step_objective: str = "relative"
    behaviour: str = "runs"  # engine-steps fits: the modes' behaviour parts from the runs or their published prior ("prior")  # engine-steps fits: "relative" (WLS 1/ms^2) or "mean" (OLS: unbiased summed time)
    # engine-steps fits of the wall time: model time in the pass models and the engine's host work as its own step
    # term (measure/fit/calibrate.py), instead of the run's mean overhead folded into the passes
    host_overhead: bool = False
    # engine-steps fits: a dict the caller keeps across fits of overlapping runs (leave one settings set out,
    # pipeline/engine_loso.py): each run's read steps and design, built once (measure/fit/steps.py run_design)
    design_cache: dict | None = None


@dataclass
class FitResult:
    profile: Profile
    fits: dict[str, PassFit]  # pass kind -> its fit (measured kinds only)
    filled: list[tuple[str, str, str]]  # (mode, kind, stated source) for kinds no run timed
    messages: list[str]


def resolve_model(name: str, where: str) -> str:
    """A catalog name for a run's `model` (catalog names, hub ids like google/gemma-4-26B-A4B-it)."""
    if name in MODELS:
        return name
    s = name.lower().rstrip("/").split("/")[-1].removesuffix("-it").replace("gemma-4-", "gemma4-")
    if s in MODELS:
        return s
    try:
        return get_model(name).name
    except UserError:
        raise UserError(f"{where}: model {name!r} is not in the catalog", "pass --model MODE=NAME with a catalog name (costmodel models)") from None


def is_synthetic(run: Run) -> bool:
    return bool(run.manifest.engine.get("synthetic"))


def campaign_runs(root: str | Path, hardware: str, precision: str | None = None) -> list[Path]:
    """Run directories under `root` (one level) timed on `hardware` (and at `precision`, if given)
    by the GPU harness: kind gpu, a passes table, not synthetic. What scripts/build_profiles.sh fits."""
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"--campaign {root} is not a directory", "pass the directory holding run directories, e.g. data/runs")
    out = []
    for d in sorted(p for p in root.iterdir() if (p / "manifest.json").is_file()):
        m = read_manifest(d)
        run = Run(d, m)
        if m.kind == "gpu" and m.hardware == hardware and precision in (None, m.precision) and run.has("passes") and not is_synthetic(run):
            out.append(d)
    if not out:
        raise UserError(f"no GPU runs on {hardware}{f' at {precision}' if precision else ''} with a passes table under {root}",
                        "run the measurement campaign first, or pass run directories")
    return out


def _engine_match(spec: str, run: Run, row_engine) -> bool:
    if "=" in spec:
        for part in spec.split(","):
            k, v = (x.strip() for x in part.split("=", 1))
            if str(run.manifest.engine.get(k, "")).lower() != v.lower():
                return False
        return True
    value = row_engine if row_engine is not None else run.manifest.engine.get("name")
    return str(value) == spec


def passes_frame(runs: list[Run], opts: FitOptions, msgs: list[str], allow_empty: bool = False) -> pd.DataFrame:
    """Every usable timed pass: pass_kind, seqs, tokens_per_seq, context_tokens, ms, run_id, row_engine.
    Runs timing one pass kind must agree on the ENGINE_IDENTITY_KEYS of manifest.engine they share
    (eager and compiled timings never pool) and on the rows' `engine` column where present."""
    if opts.time_column not in TIME_COLUMNS:
        raise UserError(f"--time {opts.time_column!r} is unknown", f"use one of {', '.join(TIME_COLUMNS)}")
    frames = []
    warm = bad = 0
    for run in runs:
        t = run.table("passes")
        m = run.manifest
        if t.empty:
            continue
        unknown = sorted(set(t.pass_kind) - set(PASS_KINDS))
        if unknown:
            raise UserError(f"run {run.path} times unknown pass kinds {unknown}", f"pass kinds are {', '.join(PASS_KINDS)}")
        wrong = sorted(set(t.pass_kind) - set(m.serving.pass_kinds))
        if wrong:
            raise UserError(f"run {run.path} is a {m.mode} run but times {wrong}", "fix the run's manifest mode or its pass kinds")
        if "warmup" in t.columns:
            w = t["warmup"].fillna(False).astype(bool)
            warm += int(w.sum())
            t = t[~w]
        row_engine = t["engine"].astype(str) if "engine" in t.columns else pd.Series([None] * len(t), index=t.index)
        if opts.engine:
            keep = [_engine_match(opts.engine, run, e) for e in row_engine]
            t, row_engine = t[keep], row_engine[keep]
        ms = pd.to_numeric(t[opts.time_column], errors="coerce")
        ok = ms.notna() & (ms > 0)
        bad += int((~ok).sum())
        frames.append(pd.DataFrame({
            "pass_kind": t.pass_kind[ok].astype(str), "seqs": t.seqs[ok].astype(int), "tokens_per_seq": t.tokens_per_seq[ok].astype(int),
            "context_tokens": t.context_tokens[ok].astype(int), "ms": ms[ok].astype(float), "run_id": m.run_id,
            "row_engine": ["" if e is None else e for e in row_engine[ok]],
        }))
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if df.empty and not allow_empty:
        raise UserError(f"the runs hold no timed passes with a positive {opts.time_column}" + (f" for --engine {opts.engine}" if opts.engine else ""),
                        "pass run directories written by `costmodel measure` on a GPU (or check --time / --engine)")
    if warm:
        msgs.append(f"dropped {warm} warm-up rows")
    if bad:
        msgs.append(f"dropped {bad} rows without a positive {opts.time_column}")
    if df.empty:
        return pd.DataFrame(columns=["pass_kind", "seqs", "tokens_per_seq", "context_tokens", "ms", "run_id", "row_engine"])
    by_id = {r.manifest.run_id: r for r in runs}
    fix = "fit one engine: pass --engine NAME (the rows' engine column or manifest engine.name) or KEY=VALUE on manifest.engine"
    for kind, g in df.groupby("pass_kind"):
        values = sorted(g.row_engine.unique())
        if len(values) > 1:
            raise UserError(f"pass kind {kind} was timed by different engines ({', '.join(values)})", fix)
        ids = sorted(g.run_id.unique())
        for i, a in enumerate(ids):
            for b in ids[i + 1:]:
                ea, eb = by_id[a].manifest.engine, by_id[b].manifest.engine
                diff = sorted(k for k in set(ea) & set(eb) & set(ENGINE_IDENTITY_KEYS) if ea[k] != eb[k])
                if diff:
                    raise UserError(f"pass kind {kind} was timed by different engine setups: runs {a} and {b} differ in engine "
                                    + ", ".join(f"{k} ({ea[k]!r} vs {eb[k]!r})" for k in diff), fix)
    return df


def profile_engine(runs: list[Run]) -> dict:
    """The engine identity the pass-cost runs share, with any field they do not share listed per run."""
    shared, per_run = {}, {}
    for k in ENGINE_IDENTITY_KEYS:
        vals = {json.dumps(r.manifest.engine[k], sort_keys=True) for r in runs if k in r.manifest.engine}
        if len(vals) == 1:
            shared[k] = json.loads(vals.pop())
    for r in runs:
        diff = {k: r.manifest.engine[k] for k in ENGINE_IDENTITY_KEYS if k in r.manifest.engine and k not in shared}
        if diff:
            per_run[r.manifest.run_id] = diff
    return {**shared, **({"per_run": per_run} if per_run else {}), "runs": [r.manifest.run_id for r in runs]}


def _single(values: set, what: str, option: str):
    vals = {v for v in values if v is not None}
    if len(vals) > 1:
        raise UserError(f"the runs were measured on different {what}s ({', '.join(sorted(map(str, vals)))})", f"fit one {what} at a time")
    if None in values or not vals:
        raise UserError(f"a run does not record its {what}", f"pass {option}")
    return vals.pop()


def _carried(donor: PassFit, kind: str, why: str, hw_id: str, roof: Roofline, now: str) -> PassCostModel:
    src = donor.model
    pm = PassCostModel(
        kind=kind, coef=dict(src.coef),
        support={k: v for k, v in src.support.items() if k in ("seqs", "context_tokens")},
        provenance=Provenance("projected", f"coefficients of the measured {src.kind} fit ({src.provenance.source}), features re-evaluated on {kind} shapes",
                              hardware=hw_id, date=now, notes=f"{kind} was not timed; {why}"),
    )
    pm.median_x_roofline = grid_median_x_roofline(pm, roof)
    return pm


def _commit_stats(runs: list[Run], pass_runs: list[Run], commit_runs: list[Run]) -> tuple[dict, list[str]]:
    """Commit statistics, in order: --commit-runs (GPU runs with the model's weights, or diffusion
    endpoint runs of a served model); else the GPU fit runs with the model's weights, then the
    diffusion endpoint runs' counters for regimes those leave to the prior; else the published prior."""
    gpu_given = [r for r in commit_runs if not is_endpoint(r)]
    ep_given = [r for r in commit_runs if is_endpoint(r)]
    for r in ep_given:
        require_endpoint_commits(r)
    msgs: list[str] = []
    if commit_runs:
        if gpu_given:
            stats, msgs = choose_commit_stats([], gpu_given)
        else:
            stats = published_commit_prior()
        ep_sources = ep_given
    else:
        # commit behaviour does not depend on the engine: runs with the model's weights count even
        # when none of their passes were selected
        gpu = [r for r in runs if not is_endpoint(r)]
        candidates = [r for r in pass_runs if not is_endpoint(r)] + [r for r in gpu if r not in pass_runs and r.manifest.commit_source == "model"]
        stats, msgs = choose_commit_stats(candidates, [])
        ep_sources = []
        for r in runs:
            if is_endpoint(r) and commits(r.manifest.serving):
                if r.manifest.commit_source == "model":
                    ep_sources.append(r)
                else:
                    msgs.append(f"endpoint run {r.manifest.run_id}: commit_source {r.manifest.commit_source!r} (no diffusion counters moved); "
                                "not used for commit statistics")
    if not ep_sources:
        return stats, msgs
    ep_stats = endpoint_commit_stats(ep_sources, msgs)
    fill = [g for g in ep_stats if g not in stats or stats[g].provenance.kind == "published"]
    kept = [g for g in ep_stats if g not in fill]
    if kept:
        msgs.append(f"endpoint commit statistics for {', '.join(kept)} not used: measured from runs with the model's weights")
    if not fill:
        return stats, msgs
    msgs = [m for m in msgs if not (m.startswith("commit statistics") and "published prior" in m)]
    stats = {**stats, **{g: ep_stats[g] for g in fill}}
    msgs.append(f"commit statistics for {', '.join(fill)} from the servers' vllm:diffusion_* counters "
                f"(endpoint runs {', '.join(r.manifest.run_id for r in ep_sources)})")
    prior = [g for g, c in stats.items() if c.provenance.kind == "published"]
    if prior:
        msgs.append(f"commit statistics for {', '.join(prior)}: the published prior ({CITATION}; no run covers them)")
    return stats, msgs


@dataclass
class FitTarget:
    """What a profile is fitted for: the GPU, the precision, each model family's model and roofline."""
    hw: HardwareSpec
    precision: str
    diffusion_model: str
    target_model: str
    assistant: str | None
    roof_diff: Roofline
    roof_target: Roofline

    def roof_for(self, kind: str) -> Roofline:
        return self.roof_diff if family_of_pass(kind) == "diffusion_gemma" else self.roof_target

    def model_for(self, mode: ServingMode) -> str:
        return self.diffusion_model if mode.model_family == self.roof_diff.model.family else self.target_model


@dataclass
class PassObservations:
    """The timed passes a profile is fitted from: GPU rows, endpoint rows, and both tagged by `origin`."""
    gpu: pd.DataFrame
    endpoint: pd.DataFrame
    rows: pd.DataFrame


def _resolve_hardware(runs: list[Run], opts: FitOptions) -> HardwareSpec:
    """--hardware, else the one GPU the runs record (an endpoint run that records none takes the GPU runs')."""
    gpu_runs = [r for r in runs if not is_endpoint(r)]
    ep_runs = [r for r in runs if is_endpoint(r)]
    if opts.hardware:
        hw_id = opts.hardware
    elif ep_runs and not {r.manifest.hardware for r in ep_runs} - {None} and not gpu_runs:
        raise UserError("the endpoint runs do not record the server's GPU", "pass --hardware ID (the GPU the server ran on, e.g. h200)")
    else:
        # an endpoint run that records no GPU takes the GPU runs' (checked below for the others)
        hw_id = _single({r.manifest.hardware for r in runs if not (is_endpoint(r) and r.manifest.hardware is None)}, "GPU", "--hardware ID")
    for r in runs:
        if r.manifest.hardware not in (None, hw_id):
            raise UserError(f"run {r.path} was measured on {r.manifest.hardware}, not {hw_id}",
                            "fit each GPU's runs separately; `costmodel profile project` moves a profile to another GPU")
    return get_hardware(hw_id, opts.hardware_file)


def _resolve_precision(runs: list[Run], opts: FitOptions, msgs: list[str]) -> str:
    """--precision, else the GPU runs' one. Endpoint runs cannot see the served precision (their
    manifest keeps the default), so they are not checked against it."""
    gpu_runs = [r for r in runs if not is_endpoint(r)]
    precision = opts.precision or _single({r.manifest.precision for r in (gpu_runs or runs)}, "precision", "--precision P")
    if any(is_endpoint(r) for r in runs) and not opts.precision:
        msgs.append(f"endpoint runs do not record the served precision: profile at {precision} "
                    + ("(the GPU runs')" if gpu_runs else "(assumed; pass --precision P)"))
    for r in gpu_runs:
        if r.manifest.precision != precision:
            raise UserError(f"run {r.path} was measured at {r.manifest.precision}, not {precision}", "fit one precision at a time; `costmodel profile project` changes precision")
    return precision


def _families() -> tuple[str, str]:
    """(the diffusion model's family, its AR sibling's family): the two families a profile serves."""
    dm = next(m for m in all_modes() if m.is_diffusion)
    return dm.model_family, get_model(AR_SIBLING[dm.default_model]).family


def _override(opts: FitOptions, family: str) -> str | None:
    """--model MODE=NAME for the first mode of `family` (registry order) that names one."""
    return next((opts.models[m.name] for m in modes_of_family(family) if m.name in opts.models), None)


def _target_decode(kind: str) -> bool:
    """A target-model pass that decodes tokens (a decode or verify step): the assistant's reference."""
    k = get_pass_kind(kind)
    return k.role == "target" and k.query_tokens in ("one", "drafts+1")


def _resolve_models(runs: list[Run], opts: FitOptions) -> tuple[str, str]:
    """(diffusion model, target model): --model overrides, else the runs' one model per family, else the catalog pair."""
    for md in opts.models:
        if md not in mode_names():
            raise UserError(f"--model {md}=...: mode {md!r} is unknown", f"modes are {', '.join(mode_names())}")
    diffusion_fam, target_fam = _families()
    run_models: dict[str, set] = {}  # model family -> the models its runs served
    for r in runs:
        fam = r.manifest.serving.model_family
        run_models.setdefault(fam, set()).add(_override(opts, fam) or resolve_model(r.manifest.model, f"run {r.path}"))
    for fam, names in run_models.items():
        if len(names) > 1:
            raise UserError(f"the {fam} runs are of different models ({', '.join(sorted(names))})", "fit one model per mode")
    diffusion_default = next(m for m in all_modes() if m.is_diffusion).default_model
    diffusion_model = _override(opts, diffusion_fam) or next(iter(run_models.get(diffusion_fam, {diffusion_default})))
    target_default = AR_SIBLING.get(diffusion_model) or modes_of_family(target_fam)[0].default_model
    target_model = _override(opts, target_fam) or next(iter(run_models.get(target_fam, {target_default})))
    for name in (diffusion_model, target_model):
        get_model(name)
    return diffusion_model, target_model


def resolve_target(runs: list[Run], opts: FitOptions, msgs: list[str]) -> FitTarget:
    """The GPU, precision and models of the profile, checked against every run."""
    hw = _resolve_hardware(runs, opts)
    precision = _resolve_precision(runs, opts, msgs)
    prec = get_precision(precision)
    hw.peak_tflops(prec)
    diffusion_model, target_model = _resolve_models(runs, opts)
    assistant = ASSISTANT_FOR.get(target_model)
    return FitTarget(hw, precision, diffusion_model, target_model, assistant,
                     roof_diff=Roofline(get_model(diffusion_model), hw, prec),
                     roof_target=Roofline(get_model(target_model), hw, prec, get_model(assistant) if assistant else None))


def pass_observations(runs: list[Run], opts: FitOptions, msgs: list[str]) -> PassObservations:
    """Every usable timed pass of the GPU runs and engine-step observation of the endpoint runs; a
    pass kind both observe is kept from one origin (`--prefer`) or refused."""
    gpu_runs = [r for r in runs if not is_endpoint(r)]
    ep_runs = [r for r in runs if is_endpoint(r)]
    df_gpu = passes_frame(gpu_runs, opts, msgs, allow_empty=bool(ep_runs)) if gpu_runs else passes_frame([], opts, msgs, allow_empty=True)
    df_ep = endpoint_frame(ep_runs, msgs) if ep_runs else df_gpu.iloc[0:0]
    df_gpu, df_ep = resolve_mixing(df_gpu, df_ep, opts.prefer, msgs)
    frames = [f.assign(origin=o) for f, o in ((df_gpu, "gpu"), (df_ep, "endpoint")) if len(f)]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if df.empty:
        if ep_runs and all(r.manifest.serving.side_kinds for r in ep_runs) and not gpu_runs:
            raise UserError("MTP endpoint runs give no pass observations (an MTP engine step is k draft passes + 1 verify pass; its "
                            "output-event gaps time only their sum)", "add GPU runs timing prefill/draft_step/verify_step; "
                            "pass the endpoint run to --mtp-metrics for its acceptance")
        raise UserError("the runs give no pass observations", "add GPU runs with timed passes, or endpoint runs of diffusion/AR deployments")
    return PassObservations(df_gpu, df_ep, df)


def _pass_runs(runs: list[Run], obs: PassObservations, opts: FitOptions, msgs: list[str]) -> list[Run]:
    """The runs that give pass observations; says why each other GPU run is not used, and which are unfinished."""
    pass_runs = [r for r in runs if r.manifest.run_id in set(obs.rows.run_id)]
    for r in runs:
        if r not in pass_runs and is_endpoint(r):
            continue  # endpoint_frame said why
        if r not in pass_runs:
            msgs.append(f"run {r.manifest.run_id}: no usable timed passes" + (f" of engine {opts.engine}" if opts.engine else "") + "; not used for pass costs")
        elif r.manifest.status != "complete":
            msgs.append(f"run {r.manifest.run_id} is {r.manifest.status} ({len(r.manifest.done_units)} of "
                        f"{len(r.manifest.planned_units) or '?'} units): fitting its finished units")
    return pass_runs


def _endpoint_provenance(kind: str, rows: pd.DataFrame, kruns: list[Run], hw: HardwareSpec) -> Provenance:
    servers = sorted({str(r.manifest.engine.get("endpoint") or r.manifest.settings.get("endpoint") or r.manifest.kind) for r in kruns})
    return Provenance(
        "endpoint", f"endpoint runs {', '.join(r.manifest.run_id for r in kruns)}", hardware=hw.id,
        date=min(r.manifest.started_at for r in kruns),
        notes=(f"{mapping_note(kind)}; one observation per load ({len(rows)}); server {', '.join(servers)}; "
               f"model {', '.join(sorted({r.manifest.model for r in kruns}))}; GPU {hw.id} "
               + ("as the runs record it" if all(r.manifest.hardware for r in kruns) else "as given (the runs do not record it)")),
    )


def _gpu_provenance(kruns: list[Run], hw: HardwareSpec, opts: FitOptions, synthetic: bool) -> Provenance:
    gpus = sorted({r.manifest.gpu_name or "?" for r in kruns})
    engine = kruns[0].manifest.engine
    weights = sorted({r.manifest.weights for r in kruns})
    return Provenance(
        "measured", ("SYNTHETIC " if synthetic else "") + f"runs {', '.join(r.manifest.run_id for r in kruns)}", hardware=hw.id,
        date=min(r.manifest.started_at for r in kruns),
        notes=(f"GPU {', '.join(gpus)}; engine {json.dumps(engine, sort_keys=True)}; weights {', '.join(weights)}; "
               f"{opts.time_column}, {'median per shape' if opts.repeats == 'median' else 'every repeat'}; warm-up rows dropped"),
    )


def _warn_below_roofline(kind: str, rows: pd.DataFrame, target: FitTarget, msgs: list[str]) -> None:
    """Say when endpoint loads ran faster than the roofline of their shape (a wrong GPU or model, most likely)."""
    roofs = [target.roof_for(kind).pass_cost((Segment(kind, int(r.seqs), int(r.tokens_per_seq), int(r.context_tokens)),)).roofline_ms
             for r in rows.itertuples()]
    fast = [(ms, rf) for ms, rf in zip(rows.ms, roofs) if ms < rf]
    if fast:
        msgs.append(f"{kind}: {len(fast)} of {len(rows)} endpoint loads ran faster than the {target.hw.id} roofline of their shape "
                    f"(e.g. {fast[0][0]:.3g} ms vs {fast[0][1]:.3g} ms), so the profile predicts the roofline there: "
                    "check --hardware and the mode's model (--model MODE=NAME)")


def fit_passes(obs: PassObservations, runs: list[Run], pass_runs: list[Run], target: FitTarget, opts: FitOptions,
               msgs: list[str]) -> dict[str, PassFit]:
    """One cost model per pass kind observed, from GPU rows or from endpoint rows (never both)."""
    heldout = HeldoutSpec.parse(opts.heldout)
    fitter = get_fitter(opts.pass_model)
    df = obs.rows
    by_id = {r.manifest.run_id: r for r in runs}
    synthetic = any(is_synthetic(r) for r in pass_runs if not is_endpoint(r))
    fits: dict[str, PassFit] = {}
    for kind in [k for k in PASS_KINDS if k in set(df.pass_kind)]:
        if get_pass_kind(kind).role == "assistant" and target.assistant is None:
            raise UserError(f"{target.target_model} has no MTP assistant in the catalog, so {kind} cannot be fitted",
                            f"time {kind} for {', '.join(ASSISTANT_FOR)}")
        rows = df[df.pass_kind == kind]
        kruns = [by_id[i] for i in sorted(rows.run_id.unique())]
        if set(rows.origin) == {"endpoint"}:
            fits[kind] = fitter.fit(rows, kind, target.roof_for(kind), _endpoint_provenance(kind, rows, kruns, target.hw), repeats=opts.repeats,
                                    heldout=heldout, seed=opts.seed, time_column="endpoint engine-step ms")
            _warn_below_roofline(kind, rows, target, msgs)
            continue
        fits[kind] = fitter.fit(rows, kind, target.roof_for(kind), _gpu_provenance(kruns, target.hw, opts, synthetic), repeats=opts.repeats,
                                heldout=heldout, seed=opts.seed, time_column=opts.time_column)
    return fits


def _fill_kind(kind: str, fits: dict[str, PassFit], target: FitTarget, opts: FitOptions, now: str) -> tuple[PassCostModel, str] | None:
    """A cost model for a pass kind no run timed, with its stated source, or None: a donor's carried
    coefficients (its PassKind's `stand_in`), the assistant's draft step at the target decode step's roofline multiple,
    or --fill-roofline EFF."""
    hw_id = target.hw.id
    pk = get_pass_kind(kind)
    if pk.stand_in and pk.stand_in in fits:
        return (_carried(fits[pk.stand_in], kind, pk.stand_in_why, hw_id, target.roof_for(kind), now),
                f"carried from the measured {pk.stand_in} fit: {pk.stand_in_why}")
    ref = next((fits[k] for k in PASS_KINDS if k in fits and _target_decode(k)), None)
    if pk.role == "assistant" and ref is not None:
        x = ref.model.median_x_roofline
        pm = PassCostModel(kind=kind, coef={"roofline_ms": x}, provenance=Provenance(
            "roofline", f"assistant roofline x {x:.2f} (median measured/roofline of the target's {ref.model.kind})", hardware=hw_id, date=now,
            notes="draft_step was not timed; the assistant is small, so per-pass overhead weighs more than in the target and this may underestimate it"))
        return pm, f"assistant roofline x {x:.2f}, the target {ref.model.kind}'s measured multiple"
    if opts.fill_roofline:
        eff = opts.fill_roofline
        pm = PassCostModel(kind=kind, coef={"roofline_ms": 1.0 / eff}, provenance=Provenance(
            "roofline", f"roofline time / efficiency {eff:g} (--fill-roofline)", hardware=hw_id, date=now, notes=f"{kind} was not timed"))
        return pm, f"roofline / efficiency {eff:g} (--fill-roofline)"
    return None


def _requested_modes(pass_runs: list[Run], opts: FitOptions) -> list[ServingMode]:
    """--modes (checked), else the pass runs' modes, in registry order."""
    run_modes = {r.manifest.mode for r in pass_runs}
    if opts.modes:
        bad = [m for m in opts.modes if m not in mode_names()]
        if bad:
            raise UserError(f"--modes {','.join(bad)} unknown", f"modes are {', '.join(mode_names())}")
    return [m for m in all_modes() if m.name in (opts.modes or run_modes)]


def assemble_modes(fits: dict[str, PassFit], pass_runs: list[Run], target: FitTarget, opts: FitOptions, now: str,
                   msgs: list[str]) -> tuple[dict[str, ModeProfile], list[tuple[str, str, str]]]:
    """A ModeProfile per requested mode, filling pass kinds no run timed from stated sources; a mode
    missing a kind is refused (--modes) or omitted. Returns the modes and the (mode, kind, source) filled."""
    modes: dict[str, ModeProfile] = {}
    filled: list[tuple[str, str, str]] = []
    for serving in _requested_modes(pass_runs, opts):
        mode = serving.name
        pms: dict[str, PassCostModel] = {}
        missing: list[str] = []
        mode_filled: list[tuple[str, str, str]] = []
        for kind in serving.pass_kinds:
            if kind in fits:
                pms[kind] = copy.deepcopy(fits[kind].model)
            elif (fill := _fill_kind(kind, fits, target, opts, now)) is not None:
                pms[kind] = fill[0]
                mode_filled.append((mode, kind, fill[1]))
            else:
                missing.append(kind)
        if missing:
            if opts.modes:
                raise UserError(f"mode {mode} needs pass kinds no run timed ({', '.join(missing)})",
                                "add runs that time them, drop the mode from --modes, or pass --fill-roofline EFF")
            msgs.append(f"mode {mode} omitted: no run timed {', '.join(missing)} (add such runs, or --modes with --fill-roofline EFF)")
            continue
        filled += mode_filled
        note = "; ".join(f"{k}: {src}" for _, k, src in mode_filled)
        modes[mode] = ModeProfile(mode, target.model_for(serving), assistant=target.assistant if serving.assistant else None, pass_models=pms,
                                  notes=(f"filled, not timed: {note}" if note else ""))
    if not modes:
        raise UserError("no mode has every pass kind timed", "add runs, or pass --modes with --fill-roofline EFF to fill from the roofline")
    for md, kind, src in filled:
        msgs.append(f"{md}/{kind} not timed: {src}")
    if opts.fill_roofline and not any("--fill-roofline" in src for _, _, src in filled):
        msgs.append(f"--fill-roofline {opts.fill_roofline:g} not needed: every pass kind was timed or carried from a timed one")
    return modes, filled


def _mtp_acceptance(modes: dict[str, ModeProfile], runs: list[Run], opts: FitOptions, msgs: list[str]) -> MtpAcceptance | None:
    """MTP acceptance when the profile has an mtp mode: --mtp-metrics, else the MTP endpoint runs' counters, else the stated default."""
    if any(MTP_ACCEPTANCE in m.serving.parts for m in modes.values()):
        ep_mtp = None if opts.mtp_metrics else endpoint_mtp_acceptance([r for r in runs if is_endpoint(r)])
        mtp, mmsg = ep_mtp or choose_mtp_acceptance(opts.mtp_metrics)
        msgs.append(mmsg)
        return mtp
    if opts.mtp_metrics:
        raise UserError("--mtp-metrics was given but the profile has no mtp mode", "add MTP runs or --modes ...,mtp, or drop --mtp-metrics")
    return None


def _prior_parts(modes: dict[str, ModeProfile], msgs: list[str]) -> dict:
    """The fitted modes' other profile parts (all but the commit statistics and MTP acceptance, which
    runs measure above) at their published prior: a new mode's part needs no fitter of its own here."""
    measured = {COMMIT_STATS.key, MTP_ACCEPTANCE.key}
    parts = {p.key: p for m in modes.values() for p in m.serving.parts if p.key not in measured}
    if parts:
        msgs.append(f"{', '.join(p.label for p in parts.values())}: the published prior (no run measures it)")
    return {k: p.prior() for k, p in parts.items()}


def _profile_id(opts: FitOptions, target: FitTarget, kind_word: str, date: str) -> str:
    engine_word = "".join(c if c.isalnum() else "-" for c in opts.engine) + "-" if opts.engine else ""
    return opts.profile_id or f"{target.hw.id}-{target.precision}-{engine_word}{kind_word}-{date[:10].replace('-', '')}"


def _profile_notes(obs: PassObservations, opts: FitOptions, synthetic: bool, msgs: list[str]) -> list[str]:
    """How the profile was fitted, then --note texts, then the fit's messages (but the dropped-rows counts)."""
    timed = " and ".join(([opts.time_column] if not obs.gpu.empty else []) + (["endpoint engine-step ms"] if not obs.endpoint.empty else []))
    notes = [f"fit: statsmodels WLS (weights 1/ms^2) of {timed} on roofline features per pass kind, "
             f"{'median per shape' if opts.repeats == 'median' else 'every repeat'}, warm-up rows dropped; held-out: {opts.heldout}"]
    if synthetic:
        notes.insert(0, "SYNTHETIC: fitted from runs timed by a known cost model, not by a GPU")
    if not obs.endpoint.empty:
        notes.append("endpoint runs: one observation per load, the mean vLLM engine step at the load's mean running requests "
                     "(measure/fit/endpoint.py); a pass kind is fitted from GPU runs or endpoint runs, never both")
    return notes + list(opts.notes) + [m for m in msgs if not m.startswith("dropped")]


def build_profile(run_paths: list[str | Path], opts: FitOptions | None = None) -> FitResult:
    """Fit a Profile from run directories (see the module docstring for every source and rule)."""
    opts = opts or FitOptions()
    if not run_paths:
        raise UserError("no run directories given", "pass one or more run directories written by `costmodel measure`")
    if isinstance(opts.seed, bool) or not isinstance(opts.seed, int) or opts.seed < 0:
        raise UserError(f"--seed {opts.seed!r} is not an integer >= 0", "e.g. --seed 0 (it seeds the held-out split)")
    runs = [load_run(p) for p in run_paths]
    commit_runs = [load_run(p) for p in opts.commit_runs]
    msgs: list[str] = []
    target = resolve_target(runs, opts, msgs)
    obs = pass_observations(runs, opts, msgs)
    pass_runs = _pass_runs(runs, obs, opts, msgs)
    fits = fit_passes(obs, runs, pass_runs, target, opts, msgs)
    now = now_iso()
    modes, filled = assemble_modes(fits, pass_runs, target, opts, now, msgs)
    commit_stats = {}
    if any(COMMIT_STATS in m.serving.parts for m in modes.values()):
        commit_stats, cmsgs = _commit_stats(runs, pass_runs, commit_runs)
        msgs.extend(cmsgs)
    elif commit_runs:
        raise UserError("--commit-runs was given but the profile has no diffusion mode", "add diffusion runs or drop --commit-runs")
    else:  # no mode commits, but the default workload draws its answer lengths per regime: a profile of AR or MTP alone plans too
        commit_stats = published_commit_prior()
        msgs.append(f"commit statistics: the published prior ({CITATION}), for the default workload's answer lengths per regime "
                    "(no diffusion mode in these runs)")
    mtp = _mtp_acceptance(modes, runs, opts, msgs)
    parts = _prior_parts(modes, msgs)

    engine = profile_engine(pass_runs)
    if opts.engine:
        engine["selected"] = opts.engine
    date = min(r.manifest.started_at for r in pass_runs)
    synthetic = any(is_synthetic(r) for r in pass_runs if not is_endpoint(r))
    all_endpoint = all(is_endpoint(r) for r in pass_runs)
    kind_word = "synthetic" if synthetic else "endpoint" if all_endpoint else "measured"
    hw = target.hw
    profile = Profile(
        profile_id=_profile_id(opts, target, kind_word, date), hardware=hw, precision=target.precision, engine=engine, modes=modes,
        commit_stats=commit_stats, mtp_acceptance=mtp, parts=parts,
        provenance=Provenance("endpoint" if all_endpoint else "measured", ("SYNTHETIC " if synthetic else "") + f"costmodel fit of runs {', '.join(r.manifest.run_id for r in pass_runs)}",
                              hardware=hw.id, date=date, notes=f"GPU {', '.join(sorted({r.manifest.gpu_name or '?' for r in pass_runs}))}; "
                              f"run directories {', '.join(r.path.name for r in pass_runs)}"),
        created_at=now, notes=_profile_notes(obs, opts, synthetic, msgs),
    ).validate("fitted profile")
    return FitResult(profile, fits, filled, msgs)
