"""Reading the scheduler recorder's JSON lines (measure/vllm/sched_recorder.py) into tables: the
engine's own account of one load, request by request and step by step. No vLLM import: scoring
runs on any CPU from the committed tables.

`read_trace(path, mode)` -> EngineTrace:
- `config`: the settings vLLM's scheduler enforced (max_num_seqs, max_num_batched_tokens, k or
  canvas, KV blocks, async scheduling);
- `steps`: one row per engine step (STEP_COLUMNS of costmodel/schemas/rundir.py, so measure/fit/steps.py
  fits from it, plus t0_s / t1_s): the batch by kind from each request's own schedule. A step's
  time `gap_ms` is the wall time from its schedule() to the next step's (the synchronous engine
  core's loop: schedule, execute, update, hand off outputs), or to its own update's end before an
  idle gap (one after which the scheduler held no unfinished request: none scheduled in it left,
  none waiting or running unscheduled; EngineCore blocks on its input queue only then);
- `requests`: one row per request: arrival (vLLM's `Request.arrival_time`, set when the API server
  made the request; `engine_in_t`: when the engine loop took it in, at the next step boundary), prompt and output tokens, the steps at which it
  was admitted, first emitted and finished (and their end times), preemptions, and what the
  simulator replays: `steps_per_canvas` (diffusion: denoising steps of each canvas, commit
  excluded) or `tokens_per_step` (MTP: tokens each verify step emitted); with prefix caching on,
  `block_hashes` (vLLM's hash of each full prompt block, 8 bytes hex) and `cached_tokens` (the
  tokens vLLM found cached when it first scheduled the request: its num_cached_tokens; -1 when the
  record has no hit field).

Request ids: the client sends X-Request-Id; vLLM's completions API makes it `cmpl-<id>-<n>-<hex>`,
so `client_id` strips that back (`client_id("cmpl-qps2-000001-0-9f05bcff") == "qps2-000001"`).
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.errors import UserError
from costmodel.modes import ServingMode, get_mode
from costmodel.schemas.rundir import STEP_COLUMNS

_ID = re.compile(r"^(?:cmpl|chatcmpl)-(.+?)(?:-\d+)?(?:-[0-9a-f]{8})?$")
REQUEST_COLUMNS = ("req_id", "client_id", "arrival_t", "engine_in_t", "prompt_tokens", "max_tokens", "output_tokens", "admit_step", "first_step",
                   "finish_step", "first_t", "finish_t", "n_steps", "preemptions", "steps_per_canvas", "tokens_per_step", "block_hashes",
                   "cached_tokens")


def client_id(engine_id: str) -> str:
    m = _ID.match(engine_id)
    return m.group(1) if m else engine_id


@dataclass
class EngineTrace:
    mode: str
    config: dict
    steps: pd.DataFrame
    requests: pd.DataFrame

    @property
    def serving(self) -> ServingMode:
        """The recorded mode's registry entry (its engine phases, replayed column)."""
        return get_mode(self.mode)


def read_records(path: str | Path) -> tuple[dict, list[dict], list[dict]]:
    """(config, adds, steps) of a JSON-lines file; a torn last line (a killed server) is skipped."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"scheduler record {p} does not exist", "record the load with the scheduler recorder (validate --engine vllm)")
    config, adds, steps = {}, [], []
    raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
    lines = raw.decode().splitlines()
    for n, line in enumerate(lines):
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines) - 1:
                break
            raise UserError(f"scheduler record {p}: line {n + 1} is not JSON", "re-record the load") from None
        ev = r.get("ev")
        if ev == "config":
            config = r
        elif ev == "add":
            adds.append(r)
        elif ev == "step":
            steps.append(r)
    return config, adds, steps


class _Walk:
    """Per-request state while walking the steps in order."""

    def __init__(self, adds: list[dict]):
        self.req = {a["req"]: {"req_id": a["req"], "client_id": client_id(a["req"]), "arrival_t": float(a.get("arr") or a["t"]),
                               "engine_in_t": float(a["t"]),
                               "prompt_tokens": int(a["prompt"]), "max_tokens": a.get("max_tokens"), "output_tokens": 0,
                               "admit_step": -1, "first_step": -1, "finish_step": -1, "first_t": np.nan, "finish_t": np.nan,
                               "n_steps": 0, "preemptions": 0, "prefilling": True, "canvas_steps": 0, "steps_per_canvas": [],
                               "tokens_per_step": [], "block_hashes": list(a.get("hashes") or []), "cached_tokens": -1} for a in adds}
        self.added = sorted(float(a.get("arr") or a["t"]) for a in adds)
        self.n_admitted = 0  # requests scheduled at least once so far (the walk is in step order)


def _classify(mode: ServingMode, q: dict, spec: int, emitted: int) -> str:
    """The phase (ServingMode.engine_phases) a request ran in a step: a canvas mode's by its canvas
    (a canvas step that emits is the commit, the last phase); a causal mode's by phase (prefill chunks
    until the step that emits the first token, or the first after a preemption's recompute)."""
    phases = mode.engine_phases
    if mode.decodes_canvases:
        if spec > 0:
            return phases[-1] if emitted > 0 else phases[1]
        return phases[0]
    if q["prefilling"]:
        return phases[0]
    return phases[1]


def _request_step(mode: ServingMode, row: dict, w: _Walk, q: dict, step: int, n: int, spec: int, emitted: int) -> None:
    kind = _classify(mode, q, spec, emitted)
    row[f"{kind}_reqs"] += 1
    row[f"{kind}_tokens"] += n
    row["kv_tokens"] += q["prompt_tokens"] + q["output_tokens"]
    if q["admit_step"] < 0:
        q["admit_step"] = step
        w.n_admitted += 1
    q["n_steps"] += 1
    if kind == mode.engine_phases[0]:
        if emitted > 0:
            q["prefilling"] = False
    elif mode.assistant:  # the verify step: drafts proposed and accepted
        row["drafts_proposed"] += spec
        row["drafts_accepted"] += max(0, emitted - 1)
        row["sd_drafts"] += 1
        row["_per_pos"][:max(0, emitted - 1)] += 1
        q["tokens_per_step"].append(emitted)
    elif mode.decodes_canvases:
        q["canvas_steps"] += 1
        if kind == mode.engine_phases[-1]:
            q["steps_per_canvas"].append(q["canvas_steps"] - 1)
            q["canvas_steps"] = 0


def _step_row(mode: ServingMode, st: dict, w: _Walk, nxt_t0: float | None) -> dict:
    row = {c: 0 for c in STEP_COLUMNS}
    step = int(st["i"])
    row.update(step=step, t_s=float(st["t1"]), elapsed_ms=(st["t1"] - st["t0"]) * 1e3, t0_s=float(st["t0"]), t1_s=float(st["t1"]))
    row["gap_ms"] = ((nxt_t0 if nxt_t0 is not None else st["t1"]) - st["t0"]) * 1e3
    emitted, spec = st.get("emitted", {}), st.get("spec", {})
    row["sd_drafts"], row["_per_pos"] = 0, np.zeros(max([0, *spec.values()]), np.int64)
    for rid in st.get("preempted", []):
        q = w.req.get(rid)
        if q:
            q["preemptions"] += 1
            q["prefilling"] = True
            q["canvas_steps"] = 0
    for rid, n in (st.get("cached") or {}).items():
        q = w.req.get(rid)
        if q is not None and q["cached_tokens"] < 0:  # the first admission's hit (vLLM's num_cached_tokens)
            q["cached_tokens"] = int(n)
    for rid, n in st["tokens"].items():
        q = w.req.get(rid)
        if q is not None:
            _request_step(mode, row, w, q, step, int(n), int(spec.get(rid, 0)), int(emitted.get(rid, 0)))
    for rid, n in emitted.items():
        q = w.req.get(rid)
        if q is None:
            continue
        q["output_tokens"] += int(n)
        if q["first_step"] < 0:
            q["first_step"], q["first_t"] = step, float(st["t1"])
    for rid in st.get("done", []):
        q = w.req.get(rid)
        if q is not None:
            q["finish_step"], q["finish_t"] = step, float(st["t1"])
    row["sd_per_pos"] = json.dumps(row.pop("_per_pos").tolist()) if mode.assistant else ""
    row["running"] = len(st["tokens"])
    arrived = int(np.searchsorted(w.added, float(st["t0"]), side="right"))
    row["waiting"] = max(0, arrived - w.n_admitted)
    return row


def read_trace(path: str | Path, mode: str) -> EngineTrace:
    """The engine's account of one load (see the module docstring)."""
    config, adds, steps = read_records(path)
    if not steps:
        raise UserError(f"scheduler record {path} holds no engine steps", "the load sent no request, or the server died before its first step")
    serving = get_mode(mode)
    w = _Walk(adds)
    rows = []
    held = _held_after(adds, steps)
    for i, st in enumerate(steps):
        nxt = steps[i + 1]["t0"] if i + 1 < len(steps) and _busy_after(st, steps[i + 1], int(held[i])) else None
        rows.append(_step_row(serving, st, w, nxt))
    sdf = pd.DataFrame(rows)
    reqs = pd.DataFrame([{k: q[k] for k in REQUEST_COLUMNS} for q in w.req.values()], columns=list(REQUEST_COLUMNS))
    reqs = reqs.sort_values("arrival_t").reset_index(drop=True)
    return EngineTrace(mode, config, sdf, reqs)


def _held_after(adds: list[dict], steps: list[dict]) -> np.ndarray:
    """Per step (in order), the requests the scheduler holds unfinished once it is done: added
    before it ended (vLLM's engine core takes requests in between steps) and finishing in a later
    step, scheduled in this one or not (waiting in the queue, or running without budget: a diffusion
    request waiting for a canvas slot). A request whose finish is not recorded (aborted, cut off)
    counts until the last step that scheduled it."""
    pos = {a["req"]: n for n, a in enumerate(adds)}
    add_t = np.array([float(a["t"]) for a in adds], float)
    end = np.full(len(adds), -1, np.int64)
    done = np.zeros(len(adds), bool)
    for i, st in enumerate(steps):
        for rid in st["tokens"]:
            n = pos.get(rid)
            if n is not None and not done[n]:
                end[n] = i
        for rid in st.get("done", []):
            n = pos.get(rid)
            if n is not None:
                end[n], done[n] = i, True
    return np.array([int(np.count_nonzero((add_t <= st["t1"]) & (end > i))) for i, st in enumerate(steps)], np.int64)


def _busy_after(st: dict, nxt: dict, held: int = 0) -> bool:
    """True when the engine went straight on to the next step: requests were left after this one
    (`held`: unfinished requests the scheduler holds, scheduled in this step or not; EngineCore's
    loop blocks on its input queue only when it holds none). The next step's start then ends this one."""
    left = set(st["tokens"]) - set(st.get("done", []))
    return bool(left) or held > 0 or nxt["t0"] - st["t1"] < 1e-3
