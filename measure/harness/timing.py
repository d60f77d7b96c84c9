"""Pass timers and the roofline beside every timed pass.

A `Mark` is a CUDA event recorded on the current stream plus the host clock at that moment; two
marks give a pass's GPU time (event elapsed time, read after one synchronize at the end of a
generation, so timing never adds a sync inside the loop) and its host wall time (the host time
between the two marks: launch time when the pass does not block, the full pass when it does). On
CPU the two are the same host interval.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from costmodel.hardware import HardwareSpec
from costmodel.models import ModelShape
from costmodel.precision import get_precision
from costmodel.roofline import PASS_KINDS, Roofline, Segment


@dataclass
class Mark:
    event: object  # torch.cuda.Event or None on CPU
    host_s: float


class PassTimer:
    """Marks on one device; `ms(a, b)` -> (gpu_ms, wall_ms) once the device has synchronized."""

    def __init__(self, device):
        import torch  # optional heavy dependency (the measure extra)

        self.torch = torch
        self.cuda = getattr(device, "type", str(device)).startswith("cuda")

    def mark(self) -> Mark:
        ev = None
        if self.cuda:
            ev = self.torch.cuda.Event(enable_timing=True)
            ev.record()
        return Mark(ev, time.perf_counter())

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def ms(self, a: Mark, b: Mark) -> tuple[float, float]:
        wall = (b.host_s - a.host_s) * 1e3
        if self.cuda:
            return float(a.event.elapsed_time(b.event)), wall
        return wall, wall


class RooflineAnnotator:
    """Adds roofline_ms, memory_ms, compute_ms, bound and x_roofline (= gpu_ms / roofline_ms) to pass
    rows, for the same shape on `hardware` (bf16). Without a hardware spec the columns are NaN."""

    def __init__(self, model: ModelShape, hardware: HardwareSpec | None, assistant: ModelShape | None = None):
        self.hardware = hardware
        self.roof = Roofline(model, hardware, get_precision("bf16"), assistant) if hardware is not None else None
        self.has_assistant = assistant is not None

    def annotate(self, row: dict) -> dict:
        kind = row["pass_kind"]
        if self.roof is None or (PASS_KINDS[kind].role == "assistant" and not self.has_assistant):
            row.update(roofline_ms=math.nan, memory_ms=math.nan, compute_ms=math.nan, bound=None, x_roofline=math.nan)
            return row
        r = self.roof.pass_cost(Segment(kind, int(row["seqs"]), int(row["tokens_per_seq"]), int(row["context_tokens"])))
        row.update(roofline_ms=r.roofline_ms, memory_ms=r.memory_ms, compute_ms=r.compute_ms, bound=r.bound,
                   x_roofline=row["gpu_ms"] / r.roofline_ms if r.roofline_ms > 0 else math.nan)
        return row
