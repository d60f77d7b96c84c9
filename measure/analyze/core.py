"""The commit-order lens: per-canvas measures, per-regime aggregates with prompt-clustered CIs, the
bin sweep, and confidence-vs-correctness AUROC.

Definitions (stated once, repeated in the summary):
- per canvas, tau_b = Kendall tau_b between each content position's first-acceptance call index and
  the position (tie-aware); a regime's tau_b is the **mean over canvases** of per-canvas tau_b
  (canvases where it is undefined, e.g. all positions in one call, are left out and counted); one
  canvas per generation in the study, so this is the mean over generations;
- 95% CI: percentile interval of that mean over prompt resamples (a prompt's seeds stay together);
  seed SD: the SD (ddof 1) across seeds of the per-seed mean tau_b;
- bin sweep: tau_b between first-acceptance call and position // bin (ties within a bin), same
  aggregation; bin 1 is the token-level tau_b;
- block-sequential control: tau_b of call = position // 16 against position over the canvas's
  content length (tied within a block), same aggregation;
- tokens per accept-call: content positions first accepted / accept_canvas calls, per canvas;
- same-call pair fraction: fraction of pairs of accepted content positions first accepted in the
  same call, per canvas;
- accept-calls per generation: accept_canvas calls summed over a generation's canvases; committing
  calls: those calls that first-accept at least one content position;
- commit entropy: entropy (nats) recorded at a content position's first acceptance; a generation's
  commit confidence = -(mean commit entropy over its content positions);
- re-noise: records in `renoised_positions`; a canvas is monotone when none of its content
  positions was re-noised;
- AUROC: P(confidence of a correct generation > that of an incorrect one), within a regime; the
  pooled figure is reported only beside the per-regime ones, flagged for Simpson's paradox.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from costmodel.errors import UserError
from measure.analyze.order import COMMIT_COLUMNS, GENERATION_COLUMNS, CanvasTrace, HookChecks, build_traces, require_columns
from measure.analyze.rank_stats import ClusterBootstrap, auroc, same_call_pair_fraction, tau_b, weighted_auroc_ci

BIN_SIZES = (1, 4, 8, 16, 32, 64)  # positions per bin; 1 = token level
CONTROL_BLOCK = 16  # the block-sequential control's block size (positions)
SPLITS = ("exploratory", "confirmatory", "all")
POOLED = "pooled (all regimes)"


@dataclass
class Analysis:
    """Every table the lens produces, plus what the summary needs to say about them."""

    canvases: pd.DataFrame  # one row per canvas
    generations: pd.DataFrame  # one row per generation (confidence, correctness)
    regimes: pd.DataFrame  # one row per regime
    bin_sweep: pd.DataFrame  # one row per (regime, bin size)
    auroc: pd.DataFrame  # one row per regime with scored generations, plus the pooled row
    checks: HookChecks
    split: str
    bootstrap_resamples: int
    seed: int
    notes: list[str] = field(default_factory=list)


def canvas_row(t: CanvasTrace) -> dict:
    """Per-canvas measures on content positions (plus the raw-canvas tau_b beside them)."""
    m = t.content_mask
    pos, call, ent = t.positions[m], t.first_call[m], t.commit_entropy_nats[m]
    L = t.content_positions
    control_pos = np.arange(L)
    row = {
        "regime": t.regime, "prompt_id": t.prompt_id, "seed": t.seed, "split": t.split, "gen_id": t.gen_id, "canvas": t.canvas,
        "canvas_positions": t.canvas_positions, "content_positions": L,
        "content_positions_accepted": int(pos.size),
        "content_coverage_frac": pos.size / L if L else math.nan,
        "accept_calls": t.accept_calls,
        "committing_calls": int(np.unique(call).size),
        "tau_b_content": tau_b(call, pos),
        "tau_b_raw_canvas": tau_b(t.first_call, t.positions),
        "tau_b_block_seq_control": tau_b(control_pos // CONTROL_BLOCK, control_pos),
        "tokens_per_accept_call": pos.size / t.accept_calls if t.accept_calls else math.nan,
        "same_call_pair_frac": same_call_pair_fraction(call),
        "commit_entropy_mean_nats": float(np.nanmean(ent)) if np.isfinite(ent).any() else math.nan,
        "commit_entropy_sum_nats": float(np.nansum(ent)),
        "commit_entropy_count": int(np.isfinite(ent).sum()),
        "renoise_events_content": t.renoise_events_content,
        "renoise_events_all": t.renoise_events_all,
        "monotone": t.renoise_events_content == 0,
        "correct": t.correct,
    }
    for b in BIN_SIZES[1:]:
        row[f"tau_b_bin{b}"] = tau_b(call, pos // b)
    return row


def per_generation(canvases: pd.DataFrame) -> pd.DataFrame:
    """Canvases summed per generation: accept-calls, commit confidence, correctness."""
    g = canvases.groupby("gen_id", sort=False).agg(
        regime=("regime", "first"), prompt_id=("prompt_id", "first"), seed=("seed", "first"), split=("split", "first"),
        canvases=("canvas", "size"), content_positions=("content_positions", "sum"),
        content_positions_accepted=("content_positions_accepted", "sum"),
        accept_calls=("accept_calls", "sum"), committing_calls=("committing_calls", "sum"),
        renoise_events_content=("renoise_events_content", "sum"), monotone=("monotone", "all"),
        entropy_sum=("commit_entropy_sum_nats", "sum"), entropy_n=("commit_entropy_count", "sum"),
        correct=("correct", "first"),
    ).reset_index()
    g["commit_entropy_mean_nats"] = g["entropy_sum"] / g["entropy_n"].where(g["entropy_n"] > 0)
    g["commit_confidence"] = -g["commit_entropy_mean_nats"]
    return g.drop(columns=["entropy_sum", "entropy_n"])


def check_settings(split: str, bootstrap: int) -> None:
    """UserError for a split that is not one of SPLITS or fewer than one bootstrap resample."""
    if split not in SPLITS:
        raise UserError(f"--split {split!r}: unknown split", f"use one of {', '.join(SPLITS)}")
    if bootstrap < 1:
        raise UserError(f"--bootstrap {bootstrap} is below 1", "give the number of prompt resamples, e.g. --bootstrap 2000")


def analyze_tables(commits: pd.DataFrame, generations: pd.DataFrame, split: str = "all", bootstrap: int = 2000, seed: int = 0) -> Analysis:
    """The whole lens on a commits + generations pair (run-directory schema)."""
    check_settings(split, bootstrap)
    if commits.empty:
        raise UserError("the commits table is empty", "analyze a diffusion run recorded with the accept_canvas hook")
    require_columns(commits, COMMIT_COLUMNS, "the commits table")
    require_columns(generations, GENERATION_COLUMNS, "the generations table")
    if split != "all":
        present = sorted(map(str, generations["split"].dropna().unique()))
        generations = generations[generations["split"] == split]
        if generations.empty:
            raise UserError(f"no {split} generations in this run (splits present: {', '.join(present) or 'none'})", "pick another --split, or --split all")
        commits = commits[commits["gen_id"].isin(generations["gen_id"])]  # the other split's commits are not orphans
    traces = build_traces(commits, generations)
    if not traces.canvases:
        raise UserError("no generation canvas has commit rows", "the commits and generations tables do not share gen_id/canvas keys")
    canv = pd.DataFrame([canvas_row(t) for t in traces.canvases])
    gens = per_generation(canv)
    rng = np.random.default_rng(seed)
    regime_rows, sweep_rows, auroc_rows, notes = [], [], [], []
    pooled_boot: list[tuple[ClusterBootstrap, pd.DataFrame]] = []
    for regime in sorted(canv["regime"].unique()):
        c = canv[canv["regime"] == regime]
        g = gens[gens["regime"] == regime]
        prompts = {p: i for i, p in enumerate(sorted(g["prompt_id"].unique()))}
        boot = ClusterBootstrap.draw(len(prompts), bootstrap, rng)
        c_cluster = c["prompt_id"].map(prompts).to_numpy()
        g_cluster = g["prompt_id"].map(prompts).to_numpy()
        row = _regime_row(regime, c, g, boot, c_cluster, len(prompts))
        regime_rows.append(row)
        for b in BIN_SIZES:
            col = "tau_b_content" if b == 1 else f"tau_b_bin{b}"
            lo, hi = boot.mean_ci(c[col].to_numpy(), c_cluster)
            sweep_rows.append({"regime": regime, "bin_positions": b, "tau_b_mean": _nanmean(c[col]), "tau_b_ci_lo": lo, "tau_b_ci_hi": hi,
                               "canvases_defined": int(c[col].notna().sum())})
        scored_mask = (g["correct"].notna() & g["commit_confidence"].notna()).to_numpy()
        if scored_mask.any():
            scored = g[scored_mask].assign(_cluster=g_cluster[scored_mask])
            auroc_rows.append(_auroc_row(regime, scored, boot))
            pooled_boot.append((boot, scored))
        undefined = int(c["tau_b_content"].isna().sum())
        if undefined:
            notes.append(f"{regime}: {undefined} of {len(c)} canvases have no defined content tau_b (fewer than two accepted content positions, or all first accepted in one call); left out of the means")
        short = int(c["tau_b_block_seq_control"].isna().sum())
        if short:
            notes.append(f"{regime}: {short} of {len(c)} canvases have at most {CONTROL_BLOCK} content positions, where the block-sequential control is one tied block (tau_b undefined); left out of the control's mean")
    if len(pooled_boot) >= 2:
        auroc_rows.append(_pooled_auroc_row(pooled_boot))
    regimes = pd.DataFrame(regime_rows)
    auroc_df = pd.DataFrame(auroc_rows, columns=["regime", "scope", "generations_scored", "correct", "incorrect", "auroc", "auroc_ci_lo", "auroc_ci_hi", "bootstrap_resamples_used"])
    if not auroc_df.empty:
        regimes = regimes.merge(auroc_df[auroc_df["scope"] == "regime"].drop(columns=["scope"]).rename(columns={"generations_scored": "auroc_generations", "correct": "auroc_correct", "incorrect": "auroc_incorrect", "bootstrap_resamples_used": "auroc_bootstrap_resamples_used"}), on="regime", how="left")
    return Analysis(canvases=canv, generations=gens, regimes=regimes, bin_sweep=pd.DataFrame(sweep_rows), auroc=auroc_df,
                    checks=traces.checks, split=split, bootstrap_resamples=bootstrap, seed=seed, notes=notes)


def _nanmean(s: pd.Series) -> float:
    v = s.to_numpy(dtype=float)
    return float(np.nanmean(v)) if np.isfinite(v).any() else math.nan


def _regime_row(regime: str, c: pd.DataFrame, g: pd.DataFrame, boot: ClusterBootstrap, cluster: np.ndarray, n_prompts: int) -> dict:
    tau = c["tau_b_content"].to_numpy(dtype=float)
    lo, hi = boot.mean_ci(tau, cluster)
    raw_lo, raw_hi = boot.mean_ci(c["tau_b_raw_canvas"].to_numpy(dtype=float), cluster)
    per_seed = c.groupby("seed")["tau_b_content"].mean().dropna()
    mono = c["monotone"].to_numpy(dtype=bool)
    mono_lo, mono_hi = boot.mean_ci(np.where(mono, tau, np.nan), cluster)
    ent = c["commit_entropy_mean_nats"].to_numpy(dtype=float)
    return {
        "regime": regime,
        "generations": int(len(g)), "canvases": int(len(c)), "prompts": n_prompts, "seeds": int(c["seed"].nunique()),
        "tau_b_content_mean": _nanmean(c["tau_b_content"]), "tau_b_content_ci_lo": lo, "tau_b_content_ci_hi": hi,
        "tau_b_content_seed_sd": float(per_seed.std(ddof=1)) if len(per_seed) >= 2 else math.nan,
        "tau_b_content_canvases_defined": int(np.isfinite(tau).sum()),
        "tau_b_raw_canvas_mean": _nanmean(c["tau_b_raw_canvas"]), "tau_b_raw_canvas_ci_lo": raw_lo, "tau_b_raw_canvas_ci_hi": raw_hi,
        "tau_b_block_seq_control_mean": _nanmean(c["tau_b_block_seq_control"]),
        "content_positions_mean": float(c["content_positions"].mean()),
        "content_coverage_frac_mean": _nanmean(c["content_coverage_frac"]),
        "tokens_per_accept_call_mean": _nanmean(c["tokens_per_accept_call"]),
        "same_call_pair_frac_mean": _nanmean(c["same_call_pair_frac"]),
        "accept_calls_per_generation_mean": float(g["accept_calls"].mean()),
        "accept_calls_per_generation_min": int(g["accept_calls"].min()),
        "accept_calls_per_generation_max": int(g["accept_calls"].max()),
        "committing_calls_per_generation_mean": float(g["committing_calls"].mean()),
        "commit_entropy_mean_nats": float(np.nanmean(ent)) if np.isfinite(ent).any() else math.nan,
        "commit_entropy_canvas_min_nats": float(np.nanmin(ent)) if np.isfinite(ent).any() else math.nan,
        "commit_entropy_canvas_max_nats": float(np.nanmax(ent)) if np.isfinite(ent).any() else math.nan,
        "renoise_events_content_total": int(c["renoise_events_content"].sum()),
        "renoise_events_all_total": int(c["renoise_events_all"].sum()),
        "renoise_events_content_per_generation": float(c["renoise_events_content"].sum() / len(g)),
        "monotone_canvases": int(mono.sum()),
        "tau_b_monotone_mean": float(np.nanmean(tau[mono])) if np.isfinite(tau[mono]).any() else math.nan,
        "tau_b_monotone_ci_lo": mono_lo, "tau_b_monotone_ci_hi": mono_hi,
    }


def _auroc_row(regime: str, scored: pd.DataFrame, boot: ClusterBootstrap) -> dict:
    conf = scored["commit_confidence"].to_numpy(dtype=float)
    y = scored["correct"].to_numpy(dtype=float) > 0.5
    lo, hi, used = boot.auroc_ci(conf, y, scored["_cluster"].to_numpy())
    return {"regime": regime, "scope": "regime", "generations_scored": int(len(scored)), "correct": int(y.sum()), "incorrect": int((~y).sum()),
            "auroc": auroc(conf, y), "auroc_ci_lo": lo, "auroc_ci_hi": hi, "bootstrap_resamples_used": used}


def _pooled_auroc_row(parts: list[tuple[ClusterBootstrap, pd.DataFrame]]) -> dict:
    """Pooled across regimes, resampling prompts within each regime (the regime mix held fixed)."""
    conf = np.concatenate([d["commit_confidence"].to_numpy(dtype=float) for _, d in parts])
    y = np.concatenate([d["correct"].to_numpy(dtype=float) > 0.5 for _, d in parts])
    w = np.concatenate([b.for_observations(d["_cluster"].to_numpy()) for b, d in parts], axis=1)
    lo, hi, used = weighted_auroc_ci(conf, y, w)
    return {"regime": POOLED, "scope": "pooled", "generations_scored": int(y.size), "correct": int(y.sum()), "incorrect": int((~y).sum()),
            "auroc": auroc(conf, y), "auroc_ci_lo": lo, "auroc_ci_hi": hi, "bootstrap_resamples_used": used}
