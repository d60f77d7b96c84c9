"""One request of a validation workload (`costmodel validate`, the transformers engine): what the GPU
load run serves (measure/validate/gpu.py, recorded as a run directory of kind "validate") and the
static-batch simulation prices (simulate/static_batch.py), drawn by simulate/validate/loads.py."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BatchRequest:
    """One request of a validation workload: what arrives and how its generation runs."""

    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    steps_per_canvas: list[int] = field(default_factory=list)  # diffusion: k per block
    accepted_per_iteration: list[int] = field(default_factory=list)  # mtp: accepted drafts per verify
    draft_tokens: int = 4  # mtp: k
