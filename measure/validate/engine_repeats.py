"""The engine against itself (issue 37): a load recorded in more than one engine start of one setup (a repeat,
or the warm-up every start of a setup sends with the same requests), each start's measured figures and its
step times within and past vLLM's largest CUDA graph. How far two starts of one engine on one GPU kind
differ is what no step model fitted across them can beat; on the H200 in fp8 the steps CUDA graphs replay
agree within a few percent between starts, and the eager steps past them (DiffusionGemma at three canvases or
more, MTP's prefills) do not.

    for rep in load_repeats(recorded_setups(Path("data/runs/engine"), "h200", "fp8")):
        rep.mode, rep.setup, rep.load, [s.run for s in rep.starts], rep.spread_pct("eager_step_ms")
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.schemas.engine_loads import figures, loads_json, read_load_windows, requests_key
from costmodel.schemas.engine_setup import RecordedSetup
from costmodel.schemas.rundir import load_run

STEP_TOKEN_COLUMNS = ("prefill_tokens", "decode_tokens", "denoise_tokens", "commit_tokens", "verify_tokens")


@dataclass(frozen=True)
class StartFigures:
    """One engine start's run of a load: vllm bench's figures and the median front-end gap of its steps
    within (graphed) and past (eager) the engine's largest captured CUDA graph."""

    run: str  # <campaign folder>/<setup> of the start (data/runs/engine/...)
    started_at: str
    tok_s: float
    ttft_p50_ms: float
    tpot_p50_ms: float
    graphed_step_ms: float
    graphed_steps: int
    eager_step_ms: float
    eager_steps: int
    stall_s: float = 0.0  # first-use compilations in its steps, above their like (measure/fit/stalls.py)
    duration_s: float = math.nan
    ttft_p95_ms: float = math.nan
    e2e_p95_ms: float = math.nan


@dataclass(frozen=True)
class Repeat:
    mode: str
    setup: str
    load: str
    starts: tuple[StartFigures, ...]

    def spread_pct(self, field: str) -> float:
        """Largest over smallest start, less 1 (%); NaN where a start lacks the figure."""
        v = np.array([getattr(s, field) for s in self.starts], float)
        return float(100 * (v.max() / v.min() - 1)) if np.isfinite(v).all() and (v > 0).all() else math.nan


def load_repeats(setups: list[RecordedSetup]) -> list[Repeat]:
    """Every load that more than one engine start of the same engine settings served as the same requests
    (its name, sizes, lengths and seed alike: the warm-up included, a steady setup's beside its fitted twin's)."""
    seen: dict[tuple, tuple[str, str, list[StartFigures]]] = {}
    for rec in setups:
        sent = {ld["name"]: ld for ld in loads_json(rec.path) if not ld.get("skipped")}
        for name, start in start_figures(rec.path, rec.stalls).items():
            key = (rec.mode, json.dumps(rec.setup.settings, sort_keys=True), name, requests_key(sent.get(name, {"name": name})))
            seen.setdefault(key, (rec.mode, rec.setup.label.removesuffix("-steady"), []))[2].append(start)
    return [Repeat(mode, label, key[2], tuple(sorted(v, key=lambda s: s.started_at))) for key, (mode, label, v) in seen.items() if len(v) > 1]


def start_figures(setup_dir: Path, stalls: dict | None = None) -> dict[str, StartFigures]:
    """Per recorded load of one setup directory (one engine start), its StartFigures; `stalls`: per load
    (count, excess s, duration s), as RecordedSetup.stalls."""
    run = load_run(setup_dir)
    graph_max = int(run.manifest.engine.get("max_cudagraph_capture_size") or 0)
    steps = run.table("steps")
    tokens = sum(steps[c] for c in STEP_TOKEN_COLUMNS if c in steps)
    req = pd.read_parquet(Path(setup_dir) / "requests.parquet")
    out = {}
    for w in read_load_windows(setup_dir):
        inside = (steps["wall_time"] >= w.start_s) & (steps["wall_time"] <= w.end_s) & (tokens > 0)
        graphed, eager = steps.loc[inside & (tokens <= graph_max), "gap_ms"], steps.loc[inside & (tokens > graph_max), "gap_ms"]
        f = figures(req[req["load"] == w.name])
        _, stall_s, _ = (stalls or {}).get(w.name, (0, 0.0, math.nan))
        out[w.name] = StartFigures(f"{setup_dir.parent.name}/{setup_dir.name}", str(run.manifest.started_at), f["tok_s"], f["ttft_p50_ms"],
                                   f["tpot_p50_ms"], _median(graphed), len(graphed), _median(eager), len(eager), stall_s, w.end_s - w.start_s,
                                   f["ttft_p95_ms"], e2e_p95_ms(req[req["load"] == w.name]))
    return out


def e2e_p95_ms(req: pd.DataFrame) -> float:
    """p95 over a load's finished requests of their end-to-end latency (send to last token), ms."""
    ok = req[req["status"] == "ok"]
    return float(np.percentile((ok["finish_s"] - ok["arrival_s"]) * 1e3, 95)) if len(ok) else math.nan


def _median(s: pd.Series) -> float:
    s = s.dropna()
    return float(s.median()) if len(s) else math.nan
