"""The records of a GPU engine run's calibration design (measure/vllm/gpu_design.py holds the design
itself; measure/vllm/gpu_run.py runs it): a `Load` (what was sent), an `EngineSetup` (one engine start:
its settings, its loads and which of them check a profile instead of fitting it: `role`), the warm-up
load every setup starts with, and a `RecordedSetup`: a setup directory as the check of a profile
reads it (its mode, its design setup as recorded, the first-use stalls in each load).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from costmodel.errors import UserError
from costmodel.schemas.rundir import load_run


@dataclass(frozen=True)
class Load:
    """`n` requests, either `concurrency` in flight (a closed loop) or arriving at `rate_rps`: Poisson, or
    bursty when `arrival_cv` is set (gamma inter-arrival gaps of that coefficient of variation; 1 is
    Poisson). Prompt lengths log-uniform in `prompt_tokens` (a fixed length when both ends are equal),
    output lengths uniform in `output_tokens`."""

    name: str
    n: int
    concurrency: int | None = None
    rate_rps: float | None = None
    prompt_tokens: tuple[int, int] = (128, 4096)
    output_tokens: tuple[int, int] = (128, 1024)
    arrival_cv: float | None = None

    @property
    def kind(self) -> str:
        return "closed" if self.concurrency else "gamma" if self.arrival_cv else "poisson"


@dataclass(frozen=True)
class EngineSetup:
    """One engine start: its label, the engine settings beside the mode's defaults, its loads, and
    which of them check a profile instead of fitting it (`holdout`: load names; the warm-up is in
    neither, its first-use compilations are no steady state)."""

    label: str
    loads: tuple[Load, ...]
    settings: dict = field(default_factory=dict)
    holdout: tuple[str, ...] = ()
    # a fitted load every start of the setup serves, even one recording only chosen loads (gpu_run --loads): two
    # starts of one engine run eager steps up to 38% apart, and a load both served tells a start's speed from
    # its loads' composition (measure/fit/steps.py anchored_starts)
    anchor: str = ""

    def role(self, load_name: str) -> str:
        """'warmup', 'check' or 'fit'."""
        return "warmup" if load_name == WARMUP.name else "check" if load_name in self.holdout else "fit"

    def as_recorded(self, ran: set[str], cut: set[str] = frozenset()) -> "EngineSetup":
        """The setup a run cut short is scored as (`cut`: the loads a call's deadline skipped): the
        closed loop with the most clients that ran is fitted, whatever the design held it out for, so
        that the fit still reaches the saturation it is asked to predict rather than extrapolating to it
        from a fraction. A run of chosen loads (`gpu_run --loads`) that no deadline cut keeps the
        design's roles: its missing loads ran in another run. A setup of checks only stays so."""
        if not cut or not any(self.role(ld.name) == "fit" for ld in self.loads):
            return self
        closed = [ld for ld in self.loads if ld.kind == "closed" and ld.name in ran and ld.name != WARMUP.name]
        fitted = [ld for ld in closed if ld.name not in self.holdout]
        if not closed or (fitted and max(ld.concurrency for ld in fitted) == max(ld.concurrency for ld in closed)):
            return self
        top = max(closed, key=lambda ld: ld.concurrency).name
        return replace(self, holdout=tuple(n for n in self.holdout if n != top))


# the warm-up meets the prompt lengths the loads will (first-use compilations per shape: measure/fit/stalls.py);
# the 2026-11-27 runs warmed up on 4 short prompts and paid 6-14 stalls of 0.2-9 s inside their loads
WARMUP = Load("warmup", n=24, concurrency=4, prompt_tokens=(128, 4096), output_tokens=(16, 32))


@dataclass(frozen=True)
class RecordedSetup:
    """A recorded setup directory (data/runs/engine/<gpu>-<precision>-<mode>/<setup>/) with what its
    check needs beside its files: its mode, the design's setup as it ran (`EngineSetup.as_recorded`:
    the loads' roles) and, per load, (first-use stalls among its busy steps, their summed excess in s,
    the load's duration in s) (measure/fit/stalls.py)."""

    mode: str
    path: Path
    setup: EngineSetup
    stalls: dict = field(default_factory=dict)


def setup_dirs(root: Path, gpu: str, precision: str) -> list[tuple[str, Path]]:
    """(mode, setup directory) of every recorded setup of one GPU and precision under a campaign folder
    (data/runs/engine/<gpu>-<precision>-<mode>/<setup>/)."""
    out = []
    for d in sorted(Path(root).glob(f"{gpu}-{precision}-*")):
        for s in sorted(p for p in d.iterdir() if (p / "manifest.json").exists()):
            out.append((load_run(s).manifest.mode, s))
    if not out:
        raise UserError(f"no recorded engine setups for {gpu} {precision} under {root}", "record them with scripts/gpu_engine.sh")
    return out
