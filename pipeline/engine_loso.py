"""Leave one settings set out (issue 49): the engine model on settings its fit never saw. A chain of two
stages (measure fits, simulate checks: pipeline/__init__.py), so it lives above them.

A mode's recorded setups (data/runs/engine/<gpu>-<precision>-<mode>/<setup>/) group into settings sets: the
setups whose engine settings (measure/vllm/gpu_design.py EngineSetup.settings: token budget, max_num_seqs,
denoising steps, MTP k and acceptance, ...) are the same, however many engine starts recorded them (a
`-steady` setup is its twin's settings with other loads). For each set in turn, one profile is fitted on every
other set of the mode (all their loads, bar the warm-up) and each load of the held-out set is simulated in its
own terms (its requests, its clients or send times, its engine's settings) and set beside what the engine
measured. The held-out set's behaviour (denoising steps per canvas, MTP acceptance) and its largest CUDA graph
are its own: they are settings or the model's, not what the engine model is asked to predict.

    result = leave_one_setting_out(recorded_setups(Path("data/runs/engine"), "h200", "fp8"))
    result.rows        # HeldOutLoad per held-out load: errors per figure, the engine-against-itself spread
    result.summary()   # per mode and figure: loads scored, median and worst error, within target
    result.heldout_error("...")   # the profile field `heldout_error` (costmodel/schemas/profile.py)
    explain_misses(result)        # each miss with its in-sample error and why (pipeline/loso_misses.py): one more fit per mode

    python -m pipeline.engine_loso [--gpu h200] [--precision fp8] [--modes diffusion] [--write-into P.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.errors import UserError
from costmodel.schemas.engine_loads import read_load_windows
from costmodel.schemas.engine_setup import WARMUP, RecordedSetup
from costmodel.schemas.profile import Profile
from costmodel.schemas.rundir import load_run
from costmodel.stepcost.resolved import CUDA_GRAPHS_KEY
from measure.fit.assemble import FitOptions
from measure.fit.steps import PARTS_FROM_STEPS, build_step_profile, graph_max_tokens
from measure.validate.engine_repeats import Repeat, e2e_p95_ms, load_repeats
from pipeline.loso_misses import Miss, misses
from simulate.validate.engine_loads import check_loads, with_frontend_latency

# figure -> (profile field name, target %: issue 49, None: reported without one)
FIGURES = {"tok_s": ("output_tok_s", 10.0), "ttft_p50_ms": ("p50_ttft_ms", 15.0), "ttft_p95_ms": ("p95_ttft_ms", 20.0),
           "tpot_p50_ms": ("p50_tpot_ms", 10.0), "e2e_p95_ms": ("p95_e2e_ms", None)}
SATURATED_FIGURES = ("tok_s",)  # at saturation only throughput is scored: latencies there are the queue's
ROOT = Path(__file__).resolve().parents[1] / "data" / "runs" / "engine"


@dataclass(frozen=True)
class SettingsSet:
    """The setups of one mode recorded with the same engine settings (one or more engine starts)."""

    mode: str
    label: str  # the design's setup label (without "-steady")
    settings: str  # canonical JSON of EngineSetup.settings
    setups: tuple[RecordedSetup, ...]


@dataclass(frozen=True)
class HeldOutLoad:
    mode: str
    held: str  # the held-out settings set's label
    run: str  # <campaign folder>/<setup> of the engine start that served it
    load: str
    kind: str
    status: str  # steady | cold | refused (simulate/validate/engine_loads.py LoadCheck.status)
    saturated: bool  # requests queued in the engine: only throughput is scored
    measured: dict = field(default_factory=dict)  # figure -> value
    predicted: dict = field(default_factory=dict)
    spread_pct: dict = field(default_factory=dict)  # figure -> the engine against itself (largest / smallest start - 1), where repeated
    context: dict = field(default_factory=dict)  # what says why a miss misses (load_context): clients, requests, occupancy, budget

    def error_pct(self, fig: str) -> float:
        m, p = self.measured.get(fig, math.nan), self.predicted.get(fig, math.nan)
        return 100 * (p / m - 1) if math.isfinite(m) and math.isfinite(p) and m > 0 else math.nan

    def scored(self, fig: str) -> bool:
        """Whether the figure of this load counts: a warm load, below saturation unless the figure is throughput."""
        return self.status == "steady" and (not self.saturated or fig in SATURATED_FIGURES) and math.isfinite(self.error_pct(fig))


@dataclass
class LosoResult:
    rows: list[HeldOutLoad]
    held_out: dict[str, list[str]]  # mode -> the settings sets held out in turn
    single: dict[str, str]  # mode -> its only settings set (no leave-one-out possible)
    notes: list[str]
    setups: list[RecordedSetup] = field(default_factory=list)  # what was fitted and scored (for `explain_misses`)
    design_cache: dict = field(default_factory=dict, repr=False)  # the folds' FitOptions.design_cache, reused by `in_sample`

    def summary(self) -> dict[str, dict[str, dict]]:
        """mode -> figure -> {n_loads, median_pct (signed), median_abs_pct, worst_pct, within (count), target}."""
        out: dict[str, dict[str, dict]] = {}
        for mode in sorted({r.mode for r in self.rows}):
            out[mode] = {f: _figure_stats([r for r in self.rows if r.mode == mode], f) for f in FIGURES}
        return out

    def heldout_error(self, basis: str) -> dict | None:
        """The profile field `heldout_error`: signed predicted / measured - 1 (%) over every mode's held-out warm
        loads (below saturation, but for throughput), and per mode; None where no settings set could be held out."""
        if not self.rows:
            return None
        def figs(rows):  # the plan reads median_pct, worst_pct and n_loads; the rest is the benchmark's summary line
            return {name: {k: st[k] for k in ("median_pct", "worst_pct", "n_loads", "median_abs_pct", "within", "target", "misses",
                                              "misses_within_spread")} for f, (name, _) in FIGURES.items()
                    if (st := _figure_stats(rows, f))["n_loads"]}
        return {"basis": basis, "figures": figs(self.rows),
                "modes": {m: figs([r for r in self.rows if r.mode == m]) for m in sorted({r.mode for r in self.rows})}}


def _figure_stats(rows: list[HeldOutLoad], fig: str) -> dict:
    """Signed median and worst error, loads within target, and of the misses those the engine's own spread
    reaches (|error| no larger than how far its starts differed on that load: its noise floor, not the model's)."""
    scored = [r for r in rows if r.scored(fig)]
    err = np.array([r.error_pct(fig) for r in scored], float)
    target = FIGURES[fig][1]
    if not len(err):
        return {"n_loads": 0, "median_pct": math.nan, "median_abs_pct": math.nan, "worst_pct": math.nan, "within": 0, "target": target,
                "misses": 0, "misses_within_spread": 0}
    miss = np.abs(err) > target if target is not None else np.zeros(len(err), bool)
    spread = np.array([r.spread_pct.get(fig, math.nan) for r in scored], float)
    return {"n_loads": int(len(err)), "median_pct": round(float(np.median(err)), 2), "median_abs_pct": round(float(np.median(np.abs(err))), 2),
            "worst_pct": round(float(err[np.argmax(np.abs(err))]), 2), "within": int((~miss).sum()), "target": target,
            "misses": int(miss.sum()), "misses_within_spread": int((miss & (np.abs(err) <= np.nan_to_num(spread, nan=-1.0))).sum())}


def settings_sets(setups: list[RecordedSetup]) -> dict[str, list[SettingsSet]]:
    """mode -> its settings sets, in the order first recorded."""
    groups: dict[tuple[str, str], list[RecordedSetup]] = {}
    for rec in setups:
        groups.setdefault((rec.mode, json.dumps(rec.setup.settings, sort_keys=True)), []).append(rec)
    out: dict[str, list[SettingsSet]] = {}
    for (mode, key), recs in groups.items():
        label = min((r.setup.label.removesuffix("-steady") for r in recs), key=len)
        out.setdefault(mode, []).append(SettingsSet(mode, label, key, tuple(recs)))
    return out


def leave_one_setting_out(setups: list[RecordedSetup], modes: tuple[str, ...] = (), seed: int = 0) -> LosoResult:
    """Each settings set of each mode (with two or more) held out in turn: fitted on the others, scored on it."""
    sets = settings_sets([s for s in setups if (s.path / "loads.json").exists()])
    unknown = sorted(set(modes) - set(sets))
    if unknown:
        raise UserError(f"no recorded setups of mode(s) {', '.join(unknown)}", f"recorded modes: {', '.join(sorted(sets))}")
    repeats = {(r.mode, r.setup, r.load): r for r in load_repeats(setups)}
    rows: list[HeldOutLoad] = []
    held_out, single, notes = {}, {}, []
    cache: dict = {}  # each run's steps and design, read once for every fit it takes part in
    for mode, msets in sets.items():
        if modes and mode not in modes:
            continue
        if len(msets) < 2:
            single[mode] = msets[0].label
            continue
        held_out[mode] = [s.label for s in msets]
        for held in msets:
            train = [s for s in msets if s is not held]
            prof, msgs = fit_without(train, seed, cache)
            notes += [f"{mode} without {held.label}: {m}" for m in msgs if "front-end latency" in m]
            rows += score_held_out(prof, mode, held, repeats, seed)
    return LosoResult(rows, held_out, single, notes, list(setups), cache)


def in_sample(result: LosoResult, keys: set[tuple[str, str, str]], seed: int = 0) -> tuple[dict, dict]:
    """The given (mode, run, load) scored on the profile fitted on every settings set of the mode, the load's own
    included (one extra fit per mode): (key -> figure -> error %, key -> that profile's price of the load's recorded
    steps / their time - 1, %: the step price alone, on the engine's own schedule)."""
    from measure.validate.engine_campaign import recorded_steps_priced

    sets = settings_sets([s for s in result.setups if (s.path / "loads.json").exists()])
    errors, priced = {}, {}
    for mode in sorted({k[0] for k in keys}):
        prof, _ = fit_without(sets[mode], seed, result.design_cache)
        keep = {(run, load) for m, run, load in keys if m == mode}
        for st in sets[mode]:
            for r in score_held_out(prof, mode, st, {}, seed, keep=keep):
                errors[(mode, r.run, r.load)] = {f: r.error_pct(f) for f in FIGURES}
            runs = {run for run, _ in keep}
            recs = [r for r in st.setups if f"{r.path.parent.name}/{r.path.name}" in runs]
            if recs:
                for (path, load), v in recorded_steps_priced(as_held_out(prof, mode, st), recs).items():
                    if (key := (mode, f"{path.parent.name}/{path.name}", load)) in keys:
                        priced[key] = 100 * v
    return errors, priced


def explain_misses(result: LosoResult, seed: int = 0) -> list[Miss]:
    """Every held-out miss (pipeline/loso_misses.py) with its in-sample error and reason class."""
    targets = {f: t for f, (_, t) in FIGURES.items()}
    keys = {(m.mode, m.run, m.load) for m in misses(result.rows, {}, targets)}
    errors, priced = in_sample(result, keys, seed) if keys else ({}, {})
    rows = [replace(r, context=r.context | {"steps_priced_pct": priced.get((r.mode, r.run, r.load), math.nan)}) for r in result.rows]
    return misses(rows, errors, targets)


def fit_without(train: list[SettingsSet], seed: int = 0, cache: dict | None = None) -> tuple[Profile, list[str]]:
    """A profile fitted on every load (bar the warm-up) of the given settings sets, with its front-end latency
    (`cache`: FitOptions.design_cache, kept across the fits of one leave-one-out)."""
    recs = [replace(r, setup=replace(r.setup, holdout=())) for s in train for r in s.setups]
    res = build_step_profile([r.path for r in recs], FitOptions(holdout_loads=(), seed=seed, design_cache=cache))
    msgs = list(res.messages) + list(with_frontend_latency(res.profile, recs))
    return res.profile, msgs


def as_held_out(prof: Profile, mode: str, held: SettingsSet) -> Profile:
    """The fitted profile with the held-out set's own behaviour (its runs' denoising steps per canvas or MTP
    acceptance: the model's or a setting, not the engine model's) and its own largest CUDA graph (vLLM sizes it
    from max_num_seqs: an engine setting)."""
    out = copy.deepcopy(prof)
    out.__dict__.pop("_resolved", None)
    runs = [load_run(r.path) for r in held.setups]
    df = pd.concat([r.table("steps") for r in runs], ignore_index=True)
    for part in out.mode(mode).serving.parts:
        if part.key in PARTS_FROM_STEPS:
            out.parts[part.key] = PARTS_FROM_STEPS[part.key](df, runs)[0]
    graphs = dict(out.engine.get(CUDA_GRAPHS_KEY) or {})
    if graphs.get(mode):
        graphs[mode] = graph_max_tokens(runs[0].manifest.engine) or graphs[mode]
        out.engine[CUDA_GRAPHS_KEY] = graphs
    return out


def score_held_out(prof: Profile, mode: str, held: SettingsSet, repeats: dict[tuple, Repeat], seed: int = 0,
                   keep: set[tuple[str, str]] | None = None) -> list[HeldOutLoad]:
    """Every load (bar the warm-up) of the held-out set's engine starts, simulated on `prof` and set beside what was
    measured (`keep`: only these (run, load), run as HeldOutLoad.run)."""
    checked = as_held_out(prof, mode, held)
    def wanted(r, name):
        return name != WARMUP.name and (keep is None or (f"{r.path.parent.name}/{r.path.name}", name) in keep)
    recs = [replace(r, setup=replace(r.setup, holdout=tuple(ld.name for ld in r.setup.loads if wanted(r, ld.name)))) for r in held.setups]
    recs = [r for r in recs if r.setup.holdout]
    out = []
    for chk in check_loads(checked, recs, seed=seed):
        rec = next(r for r in recs if r.path == chk.path)
        req = pd.read_parquet(rec.path / "requests.parquet")
        req = req[req["load"] == chk.load.name]
        c = chk.comparison
        measured = {f: c.measured(f) for f in FIGURES if f != "e2e_p95_ms"} | {"e2e_p95_ms": e2e_p95_ms(req)}
        e2e = np.asarray(c.e2e_ms, float)
        predicted = {f: c.predicted(f) for f in FIGURES if f != "e2e_p95_ms"} | {
            "e2e_p95_ms": float(np.percentile(e2e[np.isfinite(e2e)], 95)) if np.isfinite(e2e).any() else math.nan}
        rep = repeats.get((mode, rec.setup.label.removesuffix("-steady"), chk.load.name))
        spread = {f: rep.spread_pct(f) for f in FIGURES} if rep is not None else {}
        out.append(HeldOutLoad(mode, held.label, f"{rec.path.parent.name}/{rec.path.name}", chk.load.name, chk.load.kind, chk.status,
                               saturated(rec, chk.load), measured, predicted, spread, load_context(rec, chk, req)))
    return out


def load_context(rec: RecordedSetup, chk, req: pd.DataFrame) -> dict:
    """What the load's own data says about a miss (pipeline/loso_misses.py structure_hint): its kind, clients and
    requests; the engine's mean running requests beside the clients' in flight; for a closed loop, whether the
    requests at or above the measured TTFT p95 are its opening burst's, and how the engine admitted that burst
    (`opening_burst`). `req`: the load's rows of requests.parquet."""
    ld = chk.load
    run = load_run(rec.path)
    clients = int(ld.concurrency or 0)
    ctx = {"kind": ld.kind, "clients": clients, "requests": len(ld.prompt_tokens), "engine_running": chk.engine_running,
           "client_in_flight": chk.client_in_flight, "budget_tokens": int(run.manifest.engine.get("max_num_batched_tokens") or 0)}
    ttft = np.asarray(ld.ttft_ms, float)
    if ld.kind == "closed" and clients and (ok := np.isfinite(ttft)).any():
        top = np.flatnonzero(ok & (ttft >= np.percentile(ttft[ok], 95)))
        ctx["p95_in_opening_burst"] = bool(len(top) and (top < clients).all())
        ctx |= opening_burst(run.table("steps"), req, clients)
    return ctx


def opening_burst(steps: pd.DataFrame, req: pd.DataFrame, clients: int) -> dict:
    """How the engine took in a closed loop's opening burst (its first `clients` requests, sent at once): the prefill
    steps from its first send to its last first token (`burst_steps`), and the first of them: its requests, its prompt
    tokens and when its record reached the front end, ms after the first send."""
    burst = req.sort_values("arrival_s").head(clients)
    t0, t1 = float(burst["arrival_s"].min()), float(burst["first_token_s"].max())
    if not math.isfinite(t1):
        return {}
    pre = steps[(steps["wall_time"] >= t0) & (steps["wall_time"] <= t1 + 1e-3) & (steps["prefill_tokens"] > 0)]
    if not len(pre):
        return {}
    return {"burst_steps": int(len(pre)), "first_step_reqs": int(pre["prefill_reqs"].iloc[0]),
            "first_step_tokens": int(pre["prefill_tokens"].iloc[0]), "first_step_ms": 1e3 * (float(pre["wall_time"].iloc[0]) - t0)}


def saturated(rec: RecordedSetup, load) -> bool:
    """Requests queued in the engine: a closed loop of at least max_num_seqs clients, or a load whose steps
    had requests waiting on most of them."""
    run = load_run(rec.path)
    cap = int(run.manifest.engine.get("max_num_seqs") or 0)
    if load.kind == "closed" and cap and (load.concurrency or 0) >= cap:
        return True
    st = run.table("steps")
    w = next((w for w in read_load_windows(rec.path) if w.name == load.name), None)
    if w is None or "waiting" not in st:
        return False
    inside = st[(st["wall_time"] >= w.start_s) & (st["wall_time"] <= w.end_s)]
    return bool(len(inside) and (inside["waiting"] > 0).mean() > 0.5)


# ---- printing ---------------------------------------------------------------------------------------------
def _fmt(v: float, nd: int = 1) -> str:
    return "-" if not math.isfinite(v) else f"{v:+.{nd}f}%"


def print_table(result: LosoResult, file=sys.stdout) -> None:
    """Per held-out load: each figure's error and, beside it, how far the engine's own starts spread there."""
    print("leave one settings set out: each settings set of a mode held out in turn, the profile fitted on the mode's "
          "other sets; error = predicted / measured - 1; 'self' = the engine against itself (largest / smallest of its "
          "starts - 1) where several starts served the load", file=file)
    head = f"{'mode':9} {'held out':14} {'run':34} {'load':20} {'status':9} |"
    for f in FIGURES:
        head += f" {f:>12} {'self':>6} |"
    print(head, file=file)
    for r in result.rows:
        status = r.status + ("/sat" if r.saturated else "")
        line = f"{r.mode:9} {r.held:14} {r.run[:34]:34} {r.load[:20]:20} {status:9} |"
        for f in FIGURES:
            line += f" {_fmt(r.error_pct(f)):>12} {_fmt(r.spread_pct.get(f, math.nan), 0):>6} |"
        print(line, file=file)
    print_summary(result, file)


def print_summary(result: LosoResult, file=sys.stdout) -> None:
    print("\nper mode, over the held-out warm loads below saturation (throughput: all warm loads); "
          "within: |error| <= the issue's target; a miss within the engine's own spread: |error| no larger than its starts "
          "differed on that load", file=file)
    for mode, figs in result.summary().items():
        parts = []
        for f, st in figs.items():
            tgt = (f"{st['within']}/{st['n_loads']} within {st['target']:g}%"
                   + (f" ({st['misses_within_spread']} of {st['misses']} misses within the engine's own spread)" if st["misses"] else "")
                   if st["target"] is not None else f"{st['n_loads']} loads")
            parts.append(f"{f} median {_fmt(st['median_pct'])} (|.| {st['median_abs_pct']:.1f}%), worst {_fmt(st['worst_pct'])}, {tgt}")
        print(f"{mode} (held out in turn: {', '.join(result.held_out[mode])}): " + "; ".join(parts), file=file)
    for mode, label in result.single.items():
        print(f"{mode}: one settings set recorded ({label}): nothing to hold out (its held-out loads: benchmarks/bench_engine.py --loads)", file=file)


def write_into(profile_path: Path, result: LosoResult, basis: str) -> str:
    """Write `heldout_error` into a profile JSON (the profile validated before it is saved)."""
    err = result.heldout_error(basis)
    if err is None:
        return f"{profile_path}: no settings set could be held out; heldout_error not written"
    prof = Profile.load(profile_path)
    prof.heldout_error = err
    prof.save(profile_path)
    return f"wrote heldout_error into {profile_path} ({', '.join(f'{m}: {len(v)} figures' for m, v in err['modes'].items())})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--precision", default="fp8")
    ap.add_argument("--modes", default="", help="comma-separated modes (default: every recorded mode)")
    ap.add_argument("--write-into", type=Path, default=None, help="a profile JSON to write the held-out errors into (field heldout_error)")
    ap.add_argument("--csv", type=Path, default=None)
    a = ap.parse_args(argv)
    from measure.validate.engine_campaign import recorded_setups

    try:
        if a.write_into is not None and not a.write_into.is_file():
            raise UserError(f"--write-into {a.write_into}: no such profile file", "give a profile JSON written by costmodel fit")
        result = leave_one_setting_out(recorded_setups(a.root, a.gpu, a.precision), tuple(m for m in a.modes.split(",") if m))
        print_table(result)
        if a.csv:
            pd.DataFrame([{"mode": r.mode, "held": r.held, "run": r.run, "load": r.load, "kind": r.kind, "status": r.status, "saturated": r.saturated,
                           **{f"{f}_{k}": d.get(f, math.nan) for f in FIGURES for k, d in (("measured", r.measured), ("predicted", r.predicted),
                                                                                            ("spread_pct", r.spread_pct))}}
                          for r in result.rows]).to_csv(a.csv, index=False)
        if a.write_into is not None:
            held = "; ".join(f"{m}: {', '.join(v)} in turn" for m, v in result.held_out.items())
            basis = (f"python -m pipeline.engine_loso --gpu {a.gpu} --precision {a.precision}: leave one settings set out of "
                     f"{a.root.name}/{a.gpu}-{a.precision}-* ({held})")
            print(write_into(a.write_into, result, basis))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
