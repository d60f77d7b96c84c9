"""The fitting half of the engine check (issue 37; the simulating half is simulate/validate/engine_loads.py):
a campaign folder of recorded GPU engine runs (measure/vllm/gpu_run.py:
data/runs/engine/<gpu>-<precision>-<mode>/<setup>/) read as `RecordedSetup`s (each setup's loads'
roles from the calibration design, measure/vllm/gpu_design.py, and their first-use stalls,
measure/fit/stalls.py), and one profile fitted on every mode's steps less the check loads' and the
warm-up's.

    setups = recorded_setups(Path("data/runs/engine"), "h200", "fp8")
    prof, notes = fit_campaign(setups)
"""

from __future__ import annotations

from pathlib import Path

from costmodel.schemas.engine_setup import RecordedSetup, setup_dirs
from costmodel.schemas.profile import Profile
from costmodel.schemas.rundir import load_run
from measure.fit.assemble import FitOptions
from measure.fit.stalls import load_stalls
from measure.fit.steps import build_step_profile
from measure.vllm.gpu_design import design_setup


def recorded_setup(sdir: Path, mode: str | None = None) -> RecordedSetup:
    """One recorded setup directory with its loads' roles and first-use stalls."""
    sdir = Path(sdir)
    return RecordedSetup(mode or load_run(sdir).manifest.mode, sdir, design_setup(sdir), load_stalls(sdir))


def recorded_setups(root: Path, gpu: str, precision: str) -> list[RecordedSetup]:
    """Every recorded setup of one GPU and precision under a campaign folder."""
    return [recorded_setup(s, mode) for mode, s in setup_dirs(root, gpu, precision)]


def fit_campaign(setups: list[RecordedSetup], seed: int = 0) -> tuple[Profile, list[str]]:
    """One profile of every recorded mode, fitted without the check and warm-up loads' steps (the
    front-end latency is fitted on it after, by simulating: simulate.validate.engine_loads.with_frontend_latency)."""
    pats = {str(s.path.resolve()): s.setup.holdout for s in setups}
    res = build_step_profile([s.path for s in setups], FitOptions(holdout_loads=pats, seed=seed))
    return res.profile, list(res.messages)
