"""`costmodel validate` on a GPU (the transformers engine): the simulator draws each mode's loads
(simulate/validate/loads.py), measure serves and records them (measure/validate/gpu.py: a run
directory per load under OUT), and the simulator scores what was recorded (simulate/validate/runner.py).

    validate_gpu(profile, ["diffusion", "ar"], GpuLoads(ValidationWorkload(profile), None, 40, 8, 0, 64, harness), Path("runs/v"))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from costmodel.console import make_console
from costmodel.modes import get_mode
from costmodel.schemas.profile import Profile
from measure.validate.gpu import run_validation_loads
from simulate.cli.validate import print_validation
from simulate.validate.loads import ValidationWorkload
from simulate.validate.runner import score_recorded


@dataclass(frozen=True)
class GpuLoads:
    """What a GPU recording serves: the workload, its rates (None: from the profile's capacity), requests
    per rate, the static batch, the seed, the untimed warm-up and the harness's model options."""

    workload: ValidationWorkload
    rates: list[float] | None
    n_requests: int
    max_batch: int
    seed: int
    warmup_requests: int
    harness: dict  # model, random_weights, checkpoint, ar_checkpoint, assistant_checkpoint, experts, device


def validate_gpu(profile: Profile, modes: list[str], loads: GpuLoads | None, out: Path) -> None:
    """Record (unless `loads` is None: --score-only) then score every load run under `out`."""
    con = make_console()
    if loads is not None:
        w = loads.workload
        drawn = [w.mode_loads(get_mode(m), loads.rates, loads.n_requests, loads.max_batch, loads.seed, loads.warmup_requests) for m in modes]
        run_validation_loads(drawn, out=out, con=con, **loads.harness)
    res = score_recorded(out, profile, modes)
    print_validation(con, res, profile.profile_id, out)
