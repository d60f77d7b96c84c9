"""Synthetic run directories timed by a KNOWN cost model, to check that `costmodel fit` recovers
it. Their manifests say so (engine.synthetic = true, commit_source "none"), and a profile fitted
from them is labelled synthetic; they are never the project's measurements."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from costmodel.hardware import default_hardware, get_hardware
from costmodel.models import ASSISTANT_FOR, get_model
from costmodel.precision import get_precision
from costmodel.schemas.profile import features
from costmodel.modes import get_mode
from costmodel.roofline import Roofline, Segment, get_pass_kind
from costmodel.schemas.rundir import RunManifest, RunWriter, new_run_id

BATCHES = (1, 2, 4, 8, 16, 32, 64)
# the timing grid of a pass kind, by its natural query tokens per sequence (PassKind.query_tokens)
GRID_BY_QUERY: dict[str, list[tuple[int, int, int]]] = {
    "prompt": [(s, t, 0) for s in (1, 2, 4, 8) for t in (256, 512, 1024, 2048)],
    "canvas": [(s, 256, c) for s in BATCHES for c in (512, 2048)],
    "one": [(s, 1, c) for s in (*BATCHES, 128, 256) for c in (512, 2048)],
    "drafts+1": [(s, 5, c) for s in (*BATCHES, 128, 256) for c in (512, 2048)],
}


def default_grid(kind: str) -> list[tuple[int, int, int]]:
    """(seqs, tokens per sequence, context) a synthetic run times pass kind `kind` at."""
    return GRID_BY_QUERY[get_pass_kind(kind).query_tokens]


def truth_ms(roof: Roofline, kind: str, shape: tuple[int, int, int], coef: dict[str, float]) -> float:
    """The ground-truth time of one pass: max(roofline, sum coef * feature), as a profile predicts."""
    seg = (Segment(kind, *shape),)
    r = roof.pass_cost(seg)
    f = features(r, seg)
    return max(r.roofline_ms, sum(c * f[k] for k, c in coef.items()))


def write_synthetic_run(path: str | Path, mode: str, coef: dict[str, dict[str, float]], *, hardware: str | None = None,
                        precision: str = "bf16", model: str | None = None, grid: dict[str, list[tuple[int, int, int]]] | None = None,
                        repeats: int = 3, warmup: int = 1, noise_rel: float = 0.02, seed: int = 0, engine: dict | None = None) -> Path:
    """Write a run of `mode` whose passes take coef[kind] . features (times lognormal noise of
    sigma `noise_rel`); each shape also gets `warmup` slow rows marked warmup=True. `engine`: extra
    manifest engine fields; `hardware`: a catalog GPU, by default the catalog's default."""
    hardware = hardware or default_hardware()
    serving = get_mode(mode)  # the name given, resolved once
    model = model or serving.default_model
    shape = get_model(model)
    roof = Roofline(shape, get_hardware(hardware), get_precision(precision),
                    get_model(ASSISTANT_FOR[model]) if serving.assistant else None)
    rng = np.random.default_rng(seed)
    kinds = [k for k in serving.pass_kinds if k in coef]
    units = list(kinds)  # one unit per pass kind
    man = RunManifest(
        run_id=new_run_id(f"synthetic-{mode}"), kind="gpu", mode=mode, model=model, weights="random", commit_source="none",
        hardware=hardware, gpu_name="synthetic (no GPU)", precision=precision,
        engine={"name": "synthetic", "synthetic": True, **(engine or {})},
        settings={"truth_coef": coef, "noise_rel": noise_rel, "repeats": repeats, "warmup": warmup, "seed": seed}, planned_units=units,
        notes=["SYNTHETIC: times come from a known cost model, not from a GPU"],
    )
    with RunWriter(path, man) as w:
        for k in kinds:
            for (s, t, c) in (grid[k] if grid else default_grid(k)):
                ms = truth_ms(roof, k, (s, t, c), coef[k])
                rows = [{"pass_kind": k, "seqs": s, "tokens_per_seq": t, "context_tokens": c,
                         "gpu_ms": 5.0 * ms, "wall_ms": 5.0 * ms + 0.05, "warmup": True} for _ in range(warmup)]
                for _ in range(repeats):
                    g = ms * float(np.exp(rng.normal(0.0, noise_rel)))
                    rows.append({"pass_kind": k, "seqs": s, "tokens_per_seq": t, "context_tokens": c,
                                 "gpu_ms": g, "wall_ms": g + 0.05, "warmup": False})
                w.add("passes", rows)
            w.finish_unit(k)
    return Path(path)
