"""`costmodel fit` after measure's half (measure/cli/fit.py): the simulator's step on what it wrote.

    done = ctx.invoke(measure_fit, **options)          # measure: runs -> the profile file
    finish(con, done)                                   # simulate: front-end latency, or the bench's step term
"""

from __future__ import annotations

from costmodel.schemas.profile import FRONTEND_LATENCY_KEY, Profile
from measure.cli.fit import BenchToCalibrate, LoadsToReplay, save_calibrated
from simulate.calibrate import calibrate_bench
from simulate.validate.engine_loads import with_frontend_latency


def replay_loads(con, due: LoadsToReplay) -> None:
    """Each mode's front-end latency fitted by replaying the recorded loads, written into the profile file."""
    profile = Profile.load(due.out)
    msgs = with_frontend_latency(profile, due.setups, due.as_run)
    for m in msgs:
        con.print(f"- {m}")
    if msgs:
        profile.save(due.out)
        con.print(f"wrote {due.out} (front-end latency of {', '.join(sorted(profile.engine.get(FRONTEND_LATENCY_KEY, {})))})")


def calibrate_on_bench(con, due: BenchToCalibrate) -> None:
    """The constant engine step term that makes the simulator reproduce the bench import's figure."""
    prof, msgs = calibrate_bench(due.base, due.runs, due.apply_to)
    save_calibrated(con, prof, msgs, due.profile_id, due.out)


def finish(con, due: LoadsToReplay | BenchToCalibrate | None) -> None:
    """What measure's fit left for the simulator, if anything."""
    if isinstance(due, LoadsToReplay):
        replay_loads(con, due)
    elif isinstance(due, BenchToCalibrate):
        calibrate_on_bench(con, due)
