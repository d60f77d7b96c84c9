"""One mode's loads of a GPU validation (`costmodel validate`, the transformers engine), as the
simulator drew them (simulate/validate/loads.py `ValidationWorkload.mode_loads`) and the load run
serves them (measure/validate/gpu.py): the hand-over between the two stages (pipeline/validate.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from costmodel.schemas.batch_request import BatchRequest


@dataclass(frozen=True)
class ModeLoads:
    """Untimed warm-up requests, then each rate's seeded Poisson requests, served in static batches."""

    mode: str
    max_batch: int  # requests per static batch (the mode's own, e.g. MTP's 1, else --max-batch)
    draft_tokens: int  # MTP: k drafts per verify
    warmup: list[BatchRequest]
    rates: list[tuple[float, list[BatchRequest]]]  # (requests/s, its requests)
    workload: dict = field(default_factory=dict)  # what each run's manifest records of the workload (prompt range, profile, seed)
