"""The fitting half of the engine check (issue 37; the simulating half is simulate/validate/engine_loads.py):
a campaign folder of recorded GPU engine runs (measure/vllm/gpu_run.py:
data/runs/engine/<gpu>-<precision>-<mode>/<setup>/) read as `RecordedSetup`s (each setup's loads'
roles from the calibration design, measure/vllm/gpu_design.py, and their first-use stalls,
measure/fit/stalls.py), and one profile fitted on every mode's steps less the check loads' and the
warm-up's.

    setups = recorded_setups(Path("data/runs/engine"), "h200", "fp8")
    prof, notes = fit_campaign(setups)
    priced = recorded_steps_priced(prof, setups)   # {(setup dir, load): the profile's price of its recorded steps / their time - 1}
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


def recorded_steps_priced(profile: Profile, setups: list[RecordedSetup]) -> dict[tuple[Path, str], float]:
    """Per (setup directory, load): the profile's summed price of the load's recorded engine steps, each
    at its recorded composition, over their summed recorded time, less 1. It tells a simulated figure's
    miss that comes from the step price (this) from one that comes from the schedule the simulator
    chose (the rest): under async scheduling a step's time shows in the gaps after it, so only sums
    over many steps compare."""
    import pandas as pd

    from costmodel.schemas.engine_loads import read_load_windows
    from measure.fit.calibrate import forward_ms, host_term_ms, run_steps

    out: dict[tuple[Path, str], float] = {}
    for rec in setups:
        if rec.mode not in profile.modes or not (rec.path / "loads.json").exists():
            continue
        run = load_run(rec.path)
        df = run_steps(run)
        fwd = forward_ms(profile, rec.mode, df, run.manifest.engine)
        price = pd.Series(fwd + host_term_ms(profile, run.manifest.serving, df, fwd), index=df.index)
        for w in read_load_windows(rec.path):
            inside = (df["wall_time"] >= w.start_s) & (df["wall_time"] <= w.end_s)
            wall = float(df.loc[inside, "gap_ms"].sum())
            if wall > 0:
                out[(rec.path, w.name)] = float(price[inside].sum()) / wall - 1
    return out
