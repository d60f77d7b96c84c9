"""The real-time load loop of the validation server: requests arrive on the wall clock by their
scheduled times, wait in a FCFS queue, and are served in static batches of up to `max_batch`
(one `generate` call per batch, run to completion). The model-facing part is a `BatchServer`;
this loop owns arrival, queueing and timestamps."""

from __future__ import annotations

import time
from typing import Callable, Protocol

from costmodel.schemas.batch_request import BatchRequest


class BatchServer(Protocol):
    def serve(self, batch: list[BatchRequest]) -> tuple[list[float], list[float], dict]:
        """Run one batch; return (first-output offsets s, finish offsets s) from the batch start,
        measured on the host after device synchronisation, and per-batch extras (e.g. accepted
        drafts per iteration)."""


def run_load(server: BatchServer, requests: list[BatchRequest], max_batch: int,
             clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep,
             on_batch: Callable[[int], None] | None = None) -> list[dict]:
    """Serve `requests` as they arrive; one row per request with arrival/start/first/finish (s)."""
    pending = sorted(requests, key=lambda r: r.arrival_s)
    queue: list[BatchRequest] = []
    rows: list[dict] = []
    t0 = clock()
    i = 0
    while len(rows) < len(pending):
        now = clock() - t0
        while i < len(pending) and pending[i].arrival_s <= now:
            queue.append(pending[i])
            i += 1
        if not queue:
            sleep(max(0.0, pending[i].arrival_s - (clock() - t0)))
            continue
        batch, queue = queue[:max_batch], queue[max_batch:]
        start = clock() - t0
        first, finish, extras = server.serve(batch)
        for j, r in enumerate(batch):
            rows.append({
                "request_id": r.request_id, "arrival_s": r.arrival_s, "start_s": start, "first_token_s": start + first[j],
                "finish_s": start + finish[j], "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens,
                "status": "ok", "batch_size": len(batch), "steps_per_canvas": list(r.steps_per_canvas),
                "accepted_per_iteration": list(extras.get("accepted_per_iteration", {}).get(r.request_id, [])),
            })
        if on_batch:
            on_batch(len(rows))
    return rows
