"""Commit statistics per regime from runs whose commits are the model's own (commit_source
"model": real weights, not replayed), else the published prior (costmodel.prior).

Only task generations count: the timing grid's generations (regime "grid", prompt_id "random-*":
random-token prompts with EOS off) are not the model's behaviour on a task and are left out.

Definitions (per regime; content positions = canvas positions before `content_length`, the first
EOS/pad, as the harness records it):
- steps_per_canvas: empirical distribution of accept-calls per generated canvas (`generations.steps`);
- content_length: empirical distribution of content tokens per generation (sum over its canvases);
- tokens_per_call: content tokens / accept-calls, summed over the regime's canvases;
- renoise_per_generation: re-maskings of content positions per generation: a position listed in a
  call's `renoised_positions` that an earlier call of the same canvas had accepted;
- commit_entropy_nats: median entropy of content positions at their first acceptance
  (`new_positions`, entropy from `accepted_entropy` aligned with `accepted_positions`).
Without commit rows for a regime's generations, its re-mask count and entropy come from the prior,
and its provenance notes say so.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from costmodel.errors import UserError
from costmodel.modes import ServingMode, all_modes
from costmodel.modes.diffusion import COMMIT_STATS
from costmodel.prior import CITATION, COMMIT_ENTROPY_NATS, REGIMES, RENOISE_PER_GENERATION, published_commit_prior
from costmodel.schemas.profile import CommitStats, Distribution, Provenance
from costmodel.schemas.rundir import Run


def commits(mode: ServingMode) -> bool:
    """Whether a mode's runs record commits: it draws from the commit statistics (its profile parts)."""
    return COMMIT_STATS in mode.parts


def committing_modes() -> list[str]:
    return [m.name for m in all_modes() if COMMIT_STATS in m.parts]


def _ints(x) -> list[int]:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return []
    return [int(v) for v in np.asarray(x).ravel().tolist()]


def _floats(x) -> list[float]:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return []
    return [float(v) for v in np.asarray(x).ravel().tolist()]


def task_generations(g: pd.DataFrame) -> pd.DataFrame:
    """Generations on task prompts: drops the timing grid's (regime "grid", prompt_id "random-*")."""
    grid = (g["regime"].astype(str) == "grid") | g["prompt_id"].astype(str).str.startswith("random-")
    return g[~grid]


def require_model_commits(run: Run) -> None:
    """UserError unless `run` holds the model's own diffusion commit behaviour."""
    m = run.manifest
    if m.commit_source != "model":
        why = {"random-weights": "its commits come from random weights", "replay": "its commits were replayed from another run",
               "none": "it records no commits"}.get(m.commit_source, f"its commit_source is {m.commit_source!r}")
        raise UserError(f"run {run.path} cannot give the model's commit statistics: {why}",
                        "drop it from --commit-runs (the published prior is used when no run with the model's weights is given)")
    if not commits(m.serving):
        raise UserError(f"run {run.path} is a {m.mode} run, so it has no diffusion commits", f"pass {'/'.join(committing_modes())} runs to --commit-runs")
    if not run.has("generations"):
        raise UserError(f"run {run.path} has no generations table", "pass a diffusion run that recorded generations with real weights")
    if task_generations(run.table("generations")).empty:
        raise UserError(f"run {run.path} holds only timing-grid generations (random-token prompts, EOS off)",
                        "pass a run with probe prompts per regime (the harness's probe units) and the model's weights")


def _regime_stats(gens: pd.DataFrame, commits: pd.DataFrame) -> dict:
    steps = gens["steps"].astype(float)
    per_gen = gens.groupby(["run_id", "gen_id"])["content_length"].sum().astype(float)
    out = {
        "steps": steps, "content": per_gen,
        "tokens_per_call": float(gens["content_length"].sum() / steps.sum()) if steps.sum() > 0 else 0.0,
        "n_gens": int(len(per_gen)), "n_canvases": int(len(gens)),
    }
    if commits.empty:
        return out
    content = {(r.run_id, r.gen_id, r.canvas): int(r.content_length) for r in gens.itertuples()}
    remasks, entropies = 0, []
    for (run_id, gen_id, canvas), calls in commits.sort_values("call").groupby(["run_id", "gen_id", "canvas"], sort=False):
        n = content.get((run_id, gen_id, canvas))
        if n is None:
            continue
        accepted_before: set[int] = set()
        for c in calls.itertuples():
            acc = _ints(c.accepted_positions)
            ent = _floats(c.accepted_entropy)
            remasks += sum(1 for p in set(_ints(c.renoised_positions)) & accepted_before if p < n)
            by_pos = dict(zip(acc, ent)) if len(ent) == len(acc) else {}
            entropies += [by_pos[p] for p in _ints(c.new_positions) if p in by_pos and p < n]
            accepted_before |= set(acc)
    out["renoise"] = remasks / max(out["n_gens"], 1)
    out["entropy"] = float(np.median(entropies)) if entropies else None
    return out


def commit_stats_from_runs(runs: list[Run]) -> dict[str, CommitStats]:
    """Measured CommitStats per regime from runs that passed `require_model_commits`."""
    gens, commits = [], []
    for run in runs:
        require_model_commits(run)
        g = task_generations(run.table("generations")).assign(run_id=run.manifest.run_id)
        gens.append(g)
        if run.has("commits"):
            commits.append(run.table("commits").assign(run_id=run.manifest.run_id))
    g = pd.concat(gens, ignore_index=True)
    if g.empty:
        raise UserError(f"runs {', '.join(str(r.path) for r in runs)} recorded no generations", "pass runs that generated with the model's weights")
    c = pd.concat(commits, ignore_index=True) if commits else pd.DataFrame()
    if (g["steps"] < 1).any():
        raise UserError("a commit run lists a canvas with fewer than 1 accept-call", "re-measure; every canvas takes >= 1 denoising step")
    ids = ", ".join(r.manifest.run_id for r in runs)
    hw = {r.manifest.hardware for r in runs}
    date = min(r.manifest.started_at for r in runs)
    out = {}
    for regime, gr in g.groupby("regime", sort=True):
        cr = c[c.set_index(["run_id", "gen_id"]).index.isin(gr.set_index(["run_id", "gen_id"]).index)] if not c.empty else c
        s = _regime_stats(gr, cr)
        notes = [f"{s['n_gens']} generations, {s['n_canvases']} canvases"]
        renoise, entropy = s.get("renoise"), s.get("entropy")
        if renoise is None:
            renoise, entropy = RENOISE_PER_GENERATION, COMMIT_ENTROPY_NATS
            notes.append(f"no commit rows for these generations: re-noise count and commit entropy from the published prior ({CITATION})")
        out[str(regime)] = CommitStats(
            regime=str(regime),
            steps_per_canvas=Distribution.from_samples(s["steps"]),
            tokens_per_call=s["tokens_per_call"],
            content_length=Distribution.from_samples(s["content"]),
            renoise_per_generation=float(renoise),
            commit_entropy_nats=entropy,
            provenance=Provenance("measured", f"runs {ids}", hardware=",".join(sorted(h for h in hw if h)) or None, date=date,
                                  notes="; ".join(notes)),
            description=REGIMES[regime][0] if regime in REGIMES else "",
        )
    return out


def choose_commit_stats(fit_runs: list[Run], commit_runs: list[Run]) -> tuple[dict[str, CommitStats], list[str]]:
    """Measured stats from `commit_runs` (each must be the model's own), else from the fit runs that
    are; regimes no run covers, or everything when none is usable, come from the published prior."""
    msgs = []
    if commit_runs:
        for r in commit_runs:
            require_model_commits(r)
        sources = commit_runs
    else:
        sources = []
        for r in fit_runs:
            if not commits(r.manifest.serving):
                continue
            if r.manifest.commit_source == "model" and r.has("generations") and not task_generations(r.table("generations")).empty:
                sources.append(r)
            elif r.manifest.commit_source == "model":
                msgs.append(f"run {r.manifest.run_id}: the model's weights but no task generations (timing grid only); not used for commit statistics")
            else:
                msgs.append(f"run {r.manifest.run_id}: commit_source {r.manifest.commit_source!r}, so its commits are not the model's; not used for commit statistics")
    prior = published_commit_prior()
    if not sources:
        msgs.append(f"commit statistics: the published prior ({CITATION}), since no run with the model's own weights was given")
        return prior, msgs
    measured = commit_stats_from_runs(sources)
    msgs.append(f"commit statistics measured for {', '.join(measured)} from {', '.join(r.manifest.run_id for r in sources)}")
    missing = [r for r in prior if r not in measured]
    if missing:
        msgs.append(f"commit statistics for {', '.join(missing)}: the published prior (not covered by the measured runs)")
    return {**measured, **{r: prior[r] for r in missing}}, msgs
