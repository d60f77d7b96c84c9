"""What every unit of work needs: the settings, the models, the device, timers, the roofline, the
run directory, and the rows it produced."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from measure.harness.build import LoadedModels
from measure.harness.config import HarnessConfig
from measure.harness.timing import PassTimer, RooflineAnnotator


@dataclass
class UnitRows:
    passes: list[dict] = field(default_factory=list)
    commits: list[dict] = field(default_factory=list)
    generations: list[dict] = field(default_factory=list)
    summary: str = ""  # one line for the log


@dataclass
class RunContext:
    cfg: HarnessConfig
    models: LoadedModels
    device: Any  # torch.device
    timer: PassTimer
    roofline: RooflineAnnotator
    run_dir: Path
    engine_label: dict  # engine columns stamped on every pass row
    set_phase: Callable[[str], None]
    schedule: Any = None  # replay.StepSchedule or None
    causal: Any = None  # causal.CausalEngine (ar/mtp)

    def seed_for(self, *parts) -> int:
        """A seed that depends on the run seed and what is being generated, not on unit order."""
        h = hashlib.sha256(("|".join(str(p) for p in (self.cfg.seed, *parts))).encode()).hexdigest()
        return int(h[:8], 16)

    def pass_rows(self, rows: list[dict], **stamp) -> list[dict]:
        out = []
        for r in rows:
            r = {**r, **self.engine_label, **stamp}
            out.append(self.roofline.annotate(r))
        return out
