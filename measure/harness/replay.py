"""Commit-schedule replay: with random weights the entropy-bound sampler accepts about one position
per call and the stop test (stable argmax and mean entropy < 0.005 nats) never passes, so every
canvas would run the whole step budget. Replay decides when each canvas stops: its k_b (denoising
steps) is drawn per canvas from a schedule, and the harness marks that row finished after k_b
steps, exactly as transformers' own stop test marks it (the row's argmax canvas is frozen and the
batch loop ends when every row has stopped). Pass costs do not depend on which positions the sampler
accepts (every step computes all canvas positions), so the timings of a replayed run are those of
canvases that converge after realistic step counts. The accept decisions themselves stay the
sampler's: the commits table of a replayed run is random-weights behaviour and the manifest says
commit_source "replay".

Schedules: `prior` (the published per-regime prior, costmodel.prior) or a measured run directory
whose commits are the model's own (its generations' `steps` per regime).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.errors import UserError
from costmodel.modes import harness_modes, mode_names
from costmodel.prior import CITATION, published_commit_prior
from costmodel.schemas.profile import Distribution
from costmodel.schemas.rundir import load_run


@dataclass
class StepSchedule:
    source: str  # "prior (...)" or "run <path>"
    steps: dict[str, Distribution]  # regime -> k_b distribution
    regimes: list[str]  # regimes drawn from, cycled over the rows of a batch

    def draw(self, rng: np.random.Generator, regime: str, canvases: int, max_steps: int) -> list[int]:
        ks = self.steps[regime].sample(rng, canvases)
        return [int(min(max(1, round(float(k))), max_steps)) for k in np.atleast_1d(ks)]

    def regime_for(self, row: int, call: int) -> str:
        return self.regimes[(row + call) % len(self.regimes)]

    def describe(self) -> dict:
        return {"source": self.source, "regimes": self.regimes,
                "mean_steps": {r: round(self.steps[r].mean, 3) for r in self.regimes}}


def load_schedule(replay: str, regimes: list[str]) -> StepSchedule:
    """`replay` is "prior" or a run directory (see module doc)."""
    if replay == "prior":
        prior = published_commit_prior()
        return StepSchedule(f"prior ({CITATION}; per-regime steps_per_canvas, see costmodel.prior)",
                            {r: prior[r].steps_per_canvas for r in regimes}, list(regimes))
    run = load_run(replay)
    m = run.manifest
    if m.mode not in mode_names() or m.serving.harness != "canvas":
        canvas = [x.name for x in harness_modes() if x.harness == "canvas"]
        raise UserError(f"--replay {replay}: a {m.mode} run has no canvases to replay", f"pass a {' or '.join(canvas)} run")
    if m.commit_source not in ("model", "replay"):
        raise UserError(f"--replay {replay}: its commit_source is {m.commit_source!r}, so its step counts are not the model's",
                        "replay a run measured with real weights, or use --replay prior")
    gens = run.table("generations")
    present = sorted(set(gens["regime"].astype(str)) & set(regimes))
    if not present:
        raise UserError(f"--replay {replay} has no generations of regimes {', '.join(regimes)}",
                        f"its regimes are {', '.join(sorted(set(gens['regime'].astype(str)))) or 'none'}; pass --replay-regimes accordingly")
    steps = {r: Distribution.from_samples(gens.loc[gens["regime"].astype(str) == r, "steps"].astype(float)) for r in present}
    return StepSchedule(f"run {replay} ({m.run_id}, commit_source {m.commit_source})", steps, present)
