"""`costmodel fit`, measure's half: run directories -> a versioned profile (pass cost models, commit
statistics, MTP acceptance) written to -o, with a statsmodels-backed summary and a held-out check per
pass kind. Where the simulator is needed on what it wrote, the command returns what is left for it
(`LoadsToReplay`, `BenchToCalibrate`), and `costmodel fit` (pipeline/cli/fit.py, which takes these
options) runs simulate's step on those files next."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click
from rich.table import Table

from costmodel.console import make_console
from costmodel.errors import UserError
from costmodel.schemas.bench_result import BENCH_KIND
from costmodel.schemas.profile import Profile, prices
from costmodel.schemas.engine_setup import RecordedSetup
from costmodel.schemas.rundir import Run, load_run
from costmodel.shipped import resolve_profile
from measure.fit.calibrate import calibrate_steps, check_same_setup
from measure.fit.from_runs import FitRequest, fit_profile
from measure.fit.ops_runs import compare_tables
from measure.fit.passes import HELDOUT_TARGET_PCT
from measure.validate.engine_campaign import recorded_setup


@dataclass(frozen=True)
class LoadsToReplay:
    """The profile written to `out` was fitted on engine runs that recorded their loads: each mode's
    front-end latency is what the simulator, replaying those loads, leaves between the engine's clock
    and the client's (simulate/validate/engine_loads.py), fitted next on `as_run` (the runs' own
    behaviour; None: the profile's) and written into `out`."""

    out: Path
    setups: list[RecordedSetup]
    as_run: Profile | None


@dataclass(frozen=True)
class BenchToCalibrate:
    """--calibrate on a concurrency-1 bench import, checked to be of `base`'s model and GPU: the
    constant step term that makes the simulator reproduce its figure is simulate/calibrate.py's to
    fit, then the profile is written to `out` (`save_calibrated`)."""

    base: Profile
    runs: list[Run]
    hardware: str | None
    apply_to: str | None
    profile_id: str | None
    out: str


def print_fit_summary(con, result, show_summaries: bool = False) -> None:
    """The rich table `costmodel fit` prints: one row per pass kind (measured, then filled)."""
    def pct(x):
        return "-" if x is None else f"{x:.2f}%"

    p = result.profile
    t = Table(title=f"Pass cost fits: {p.profile_id} ({p.hardware.name}, {p.precision})")
    for c in ["pass kind", "rows", "shapes", "features", "R2", "MAPE", "k-fold MAPE", "held-out MAPE", "held out", "median x roofline"]:
        t.add_column(c, justify="left" if c in ("pass kind", "features", "held out") else "right")
    over = []
    for kind, f in result.fits.items():
        d = f.model.diagnostics
        ho = d.heldout_mape_pct
        if ho is not None and ho > HELDOUT_TARGET_PCT:
            over.append(f"{kind} {ho:.1f}%")
        t.add_row(kind, str(f.n_rows), str(f.n_shapes), " + ".join(f"{c:.4g}*{n}" if n != "const" else f"{c:.4g}" for n, c in f.model.coef.items()),
                  "-" if d.r2 is None else f"{d.r2:.4f}", pct(d.mape_pct), pct(d.cv_mape_pct), pct(ho), f.heldout_desc,
                  f"{f.model.median_x_roofline:.2f}")
    for mode, kind, src in result.filled:
        t.add_row(f"{kind} [{mode}]", "0", "0", "not timed", "-", "-", "-", "-", src[:60], "-")
    con.print(t)
    if over:
        con.print(f"[yellow]held-out MAPE above the {HELDOUT_TARGET_PCT:g}% target: {', '.join(over)}[/yellow]")
    else:
        con.print(f"held-out MAPE within the {HELDOUT_TARGET_PCT:g}% target for every pass kind with a held-out check")
    for m in result.messages:
        con.print(f"- {m}")
    if show_summaries:
        for kind, f in result.fits.items():
            con.print(f"\n[bold]{kind}[/bold]\n{f.model.diagnostics.summary}", markup=True, highlight=False)


@click.command()
@click.argument("runs", nargs=-1, type=click.Path())
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False), required=True, help="Profile JSON to write.")
@click.option("--campaign", type=click.Path(file_okay=False), default=None,
              help="Also fit every GPU run directory under this folder timed on --hardware (and --precision if given; kind gpu, a passes table, "
                   "not synthetic). Endpoint runs record no GPU, so they are not picked up: pass them as RUN arguments.")
@click.option("--hardware", default=None, help="GPU catalog id (default: the runs' manifest.hardware; required with --campaign).")
@click.option("--hardware-file", type=click.Path(), default=None, help="JSON file describing GPUs the catalog lacks.")
@click.option("--precision", default=None, help="Precision the runs used (default: the runs' manifest.precision).")
@click.option("--commit-runs", "commit_runs", multiple=True,
              help="Diffusion runs with the model's own weights for commit statistics (repeat or comma list): GPU runs, or endpoint runs "
                   "of a served diffusion model (its vllm:diffusion_* counters).")
@click.option("--prefer", type=click.Choice(["gpu", "endpoint"]), default=None,
              help="Where GPU runs and endpoint runs both observe a pass kind, fit it from this origin only (the other's rows for that "
                   "kind are dropped). Without it such a kind is refused: the two are never pooled into one model.")
@click.option("--mtp-metrics", "mtp_metrics", multiple=True,
              help="MTP acceptance from vLLM counters: /metrics scrape(s) (before and after a load run), a JSON counters file, or an endpoint run dir with mtp_counters.json.")
@click.option("--heldout", default="auto", show_default=True,
              help="Shapes left out for the held-out check: auto, largest-batch, largest-prompt, largest-context, each-shape, none, or FIELD=VALUE.")
@click.option("--time", "time_column", type=click.Choice(["gpu_ms", "wall_ms", "gap_ms", "elapsed_ms"]), default="gpu_ms", show_default=True,
              help="Which pass time to fit: CUDA-event GPU time, or host wall time. Recorded engine steps (measure/fit/steps.py): gap_ms "
                   "(wall step time, the default for them) or elapsed_ms (model time).")
@click.option("--repeats", type=click.Choice(["median", "all"]), default="median", show_default=True,
              help="Fit the median per shape, or every repeat.")
@click.option("--pass-model", "pass_model", default="linear", show_default=True,
              help="The pass-model type timed passes are fitted as: a registered fitter (measure/fit/fitters.py) whose predictor prices it.")
@click.option("--modes", default=None, help="Modes to include (comma list of diffusion, ar, mtp; default: the runs' modes). "
                                            "Pass kinds no run timed are filled from a stated source or refused.")
@click.option("--model", "model_overrides", multiple=True, help="MODE=NAME: catalog model of a mode when a run's model id is not a catalog name.")
@click.option("--engine", default=None, help="Fit only rows of this engine: a value of the passes' engine column / manifest engine.name, or KEY=VALUE on manifest.engine.")
@click.option("--fill-roofline", type=float, default=None, help="Fill pass kinds no run timed at roofline / EFF (0 < EFF <= 1), labelled roofline.")
@click.option("--id", "profile_id", default=None, help="Profile id (default: <hardware>-<precision>[-<engine>]-measured-<date of the first run>).")
@click.option("--note", "notes", multiple=True, help="A note to write into the profile (repeatable), e.g. what the engine stands for.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the k-fold split.")
@click.option("--show-summaries", is_flag=True, help="Also print each pass kind's statsmodels coefficient table.")
@click.option("--compare", "compare", type=click.Path(dir_okay=False), default=None,
              help="Ops runs: print the fitted pass costs against this profile's (e.g. the shipped one) at every grid shape of its tables.")
@click.option("--compare-csv", type=click.Path(dir_okay=False), default=None, help="With --compare: every shape's two costs and error to this CSV.")
@click.option("--host-overhead/--no-host-overhead", default=True, show_default=True,
              help="Recorded engine steps, --time gap_ms: model time in the pass models and the engine's host work per step as its own "
                   "step term (hidden behind the forward under async scheduling); off: the run's mean overhead folded into the passes.")
@click.option("--behaviour", type=click.Choice(["runs", "prior"]), default="runs", show_default=True,
              help="Recorded engine steps: where the modes' behaviour (DiffusionGemma's commit statistics, MTP acceptance) comes from - "
                   "the runs, or the published prior and stated defaults (runs with dummy weights time the engine, not the model's behaviour).")
@click.option("--calibrate", "calibrate_runs", multiple=True, type=click.Path(),
              help="Calibrate --profile to your own vLLM: recorded engine-steps run(s) of the profile's model on its GPU "
                   "(costmodel measure --engine vllm, or a server run with COSTMODEL_STEP_RECORD); fits a per-pass efficiency and the host overhead.")
@click.option("--profile", "base_profile", default=None, help="With --calibrate: the profile JSON to calibrate (e.g. a shipped one, costmodel/data/profiles/...).")
@click.option("--apply-to", "apply_to", default=None,
              help="With --calibrate on a bench import: the modes (comma-separated, or 'all') that get the constant step term fitted on the "
                   "run's mode - one engine's step work, whose other modes' figures then stay a held-out check (default: the run's mode).")
def fit(runs, out, campaign, hardware, hardware_file, precision, commit_runs, prefer, mtp_metrics, heldout, time_column, repeats, pass_model, modes,
        model_overrides, engine, fill_roofline, profile_id, notes, seed, show_summaries, compare, compare_csv, host_overhead, behaviour,
        calibrate_runs, base_profile, apply_to):
    """Fit a profile from run directories: one pass cost model per pass kind (statsmodels WLS on
    roofline features), commit statistics (runs with the model's weights, else the published prior),
    MTP acceptance (vLLM counters, else the stated default).

    RUNS may be GPU runs (`costmodel measure`) and endpoint runs (`costmodel measure --endpoint`,
    `costmodel import-bench`; provenance "endpoint"). An endpoint run gives one observation per
    load: diffusion -> denoise_step (canvas gaps / server steps per canvas, at seqs = mean running
    requests, the canvas length, the mean context of the timed canvases; the commit step is priced
    as a denoise step); AR -> decode_step (event gaps / steps spanned, 1 token, mean position). An
    MTP endpoint run gives no pass costs (draft and verify passes cannot be split from its gaps),
    only MTP acceptance (used when --mtp-metrics is not given). Diffusion endpoint runs give commit
    statistics for regimes that no run with the model's weights covers. Endpoint runs record no
    GPU: give --hardware unless GPU runs are fitted with them. A pass kind observed by both GPU and
    endpoint runs is refused unless --prefer picks one origin.

    \b
    Example: costmodel fit data/runs/h200-dg-compiled data/runs/h200-ar-compiled -o h200.json
             costmodel fit --campaign data/runs --hardware h200 --engine compiled --modes diffusion,ar,mtp -o h200.json
             costmodel fit data/runs/h200-dg-compiled runs/live --hardware h200 --prefer endpoint -o h200.json
             (runs/live: your `costmodel measure --endpoint URL ... -o runs/live`)
             costmodel fit --calibrate runs/prod-steps --profile h100-sxm-fp8.json -o h100-as-my-vllm.json
             costmodel fit --calibrate runs/bench-c1 --profile h100-sxm-fp8.json --hardware h100-sxm --apply-to all -o mine.json
             (runs/bench-c1: `costmodel import-bench` of a `vllm bench serve --max-concurrency 1 --save-result` file)
    """
    con = make_console()
    if calibrate_runs or base_profile:
        return run_calibration(con, list(runs), list(calibrate_runs), base_profile, hardware, profile_id, out, apply_to)
    if apply_to:
        raise UserError("--apply-to goes with --calibrate (a bench import)", "e.g. costmodel fit --calibrate RUN --profile P --apply-to all -o OUT")
    result = fit_profile(FitRequest(
        runs=list(runs), campaign=campaign, hardware=hardware, hardware_file=hardware_file, precision=precision, commit_runs=list(commit_runs),
        mtp_metrics=list(mtp_metrics), prefer=prefer, heldout=heldout, time_column=time_column, repeats=repeats, modes=modes,
        model_overrides=list(model_overrides), engine=engine, fill_roofline=fill_roofline, profile_id=profile_id, notes=list(notes), seed=seed,
        host_overhead=host_overhead, behaviour=behaviour, pass_model=pass_model))
    print_fit_summary(con, result, show_summaries)
    result.profile.save(out)
    con.print(f"wrote {out} ({result.profile.profile_id}: modes {', '.join(result.profile.modes)})")
    if compare:
        print_comparison(con, result.profile, compare, compare_csv)
    # engine runs that recorded their loads (GPU vLLM): the front-end latency is the simulator's to fit on them
    loaded = [(Path(r), load_run(r).manifest.mode) for r in runs if (Path(r) / "loads.json").exists()]
    setups = [recorded_setup(p, mode) for p, mode in loaded if mode in result.profile.modes]
    if not setups:
        return None
    as_run = None
    if behaviour != "runs":  # the recorded loads are simulated as they ran: the runs' own behaviour
        as_run = fit_profile(FitRequest(runs=list(runs), hardware=hardware, hardware_file=hardware_file, precision=precision, seed=seed,
                                        host_overhead=host_overhead, model_overrides=list(model_overrides))).profile
    return LoadsToReplay(Path(out), setups, as_run)


def run_calibration(con, runs: list[str], calibrate_runs: list[str], base_profile: str | None, hardware: str | None, profile_id: str | None,
                    out: str, apply_to: str | None = None) -> BenchToCalibrate | None:
    """`--calibrate RUN --profile P`: P priced as the recorded vLLM (measure/fit/calibrate.py), or, for a
    concurrency-1 bench import, the run checked and handed on (`BenchToCalibrate`: the constant step
    term is the simulator's to fit)."""
    if not calibrate_runs or not base_profile:
        raise UserError("--calibrate and --profile go together", "e.g. costmodel fit --calibrate runs/prod-steps --profile h100-sxm.json -o mine.json")
    if runs:
        raise UserError(f"--calibrate takes its runs as --calibrate values, not as RUN arguments ({', '.join(runs)})", "move them to --calibrate")
    loaded = [load_run(r) for r in calibrate_runs]
    base = resolve_profile(base_profile, hardware or "")
    benches = [r for r in loaded if r.manifest.kind == BENCH_KIND]
    if benches and len(benches) != len(loaded):
        raise UserError("--calibrate got bench imports and recorded engine steps together", "calibrate on one kind of run at a time")
    if benches:
        for run in benches:
            check_same_setup(base, run, hardware)  # a run of another model or GPU is refused before anything is fitted
        return BenchToCalibrate(base, benches, hardware, apply_to, profile_id, out)
    if apply_to:
        raise UserError("--apply-to takes a bench import's step term to other modes; recorded engine steps calibrate each mode they hold",
                        "leave --apply-to out, or calibrate on a `costmodel import-bench` run")
    prof, msgs = calibrate_steps(base, loaded, hardware)
    save_calibrated(con, prof, msgs, profile_id, out)
    return None


def save_calibrated(con, prof: Profile, msgs: list[str], profile_id: str | None, out: str) -> None:
    """A calibrated profile written to `out` (under --id if given), with what the calibration found."""
    if profile_id:
        prof.profile_id = profile_id
    for m in msgs:
        con.print(f"- {m}")
    prof.save(out)
    con.print(f"wrote {out} ({prof.profile_id}: {prices(prof)})")


def print_comparison(con, profile, other_path: str, csv_path: str | None) -> None:
    """Per pass kind: grid shapes, median and max |error| against the other profile, the worst shape."""
    import statistics

    diffs = compare_tables(profile, Profile.load(other_path))
    t = Table(title=f"{profile.profile_id} vs {other_path}: pass costs at every grid shape of its tables")
    for c in ("mode", "pass kind", "shapes", "median |err|", "max |err|", "within 5%", "worst shape (seqs x tokens, context): ms vs ms"):
        t.add_column(c)
    kinds = sorted({(d.mode, d.kind) for d in diffs}, key=lambda k: [x.kind for x in diffs].index(k[1]))
    for mode, kind in kinds:
        ds = [d for d in diffs if d.mode == mode and d.kind == kind]
        errs = [abs(d.err_pct) for d in ds]
        w = max(ds, key=lambda d: abs(d.err_pct))
        t.add_row(mode, kind, str(len(ds)), f"{statistics.median(errs):.2f}%", f"{max(errs):.2f}%", f"{sum(e <= 5 for e in errs) / len(errs):.1%}",
                  f"{w.seqs:g} x {w.tokens:g}, {w.context:g}: {w.ms:.3f} vs {w.other_ms:.3f} ({w.err_pct:+.1f}%)")
    con.print(t)
    errs = [abs(d.err_pct) for d in diffs]
    con.print(f"all {len(diffs)} shapes: median |err| {statistics.median(errs):.2f}%, max {max(errs):.2f}%, within 5%: {sum(e <= 5 for e in errs)}")
    if csv_path:
        import pandas as pd

        pd.DataFrame([{**vars(d), "err_pct": d.err_pct} for d in diffs]).to_csv(csv_path, index=False)
        con.print(f"wrote {csv_path}")
