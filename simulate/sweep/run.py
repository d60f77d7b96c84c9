"""Run a sweep (simulate/sweep/spec.py) on the cluster simulate.parallel.run_tasks gives, resumably.

Each finished point is written at once, atomically, as OUT/points/<point_id>.json (its flat result
row); a re-run skips every point whose file exists, so an interrupted sweep (Ctrl-C, a lost
cluster) loses nothing that finished. At the end the rows of every point of the spec, in spec
order, become one table: OUT/results.parquet and the flat OUT/results.csv with its data dictionary.

kind simulate: one job per point (run_point), its PointSummary as the row (SLO judged when given).
kind plan: points that differ only in QPS form one job, a replica-search chain over their QPS
(simulate.plan.planner.search_chain, the same warm starts as `costmodel plan`); each point's row is its
fewest SLO-meeting replica count and that probe's summary.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import pandas as pd

from costmodel import atomic, outputset
from costmodel.engine_settings import USER_SETTINGS, EngineSettings
from costmodel.errors import UserError
from costmodel.jsonfile import jsonable
from costmodel.schemas.dictionary import write_table
from costmodel.shipped import resolve_profile
from costmodel.slo import parse_slo
from simulate.plan.planner import ChainStart, miss_bounds, search_chain, simulator_point
from simulate.api import check_mode, resolve_engine, run_point
from simulate.batch import check_requests_fit
from simulate.parallel import Workers, run_tasks
from simulate.routers import DEFAULT_ROUTER
from simulate.workload import Workload, check_run_size, expected_requests, load_workload, parse_workload
from simulate.sweep.pricing import by_simulation, fan_out, with_costs
from simulate.sweep.spec import SweepPoint, SweepSpec

BATCH_MAX = 16
ENGINE_KEYS = tuple(USER_SETTINGS)  # costmodel/engine_settings.py
# (done, total) as points finish
Progress = Callable[[int, int], None]


@dataclass
class SweepOutcome:
    table: pd.DataFrame  # one row per point of the spec, in spec order
    ran: int  # points simulated by this call
    skipped: int  # points already done in OUT/points
    written: list[Path]


@lru_cache(maxsize=32)
def _profile(path: str | None, hardware: str):
    """One profile object per (path, GPU) in a worker process: its step prices stay cached across points."""
    return resolve_profile(path, hardware)


def _workload(spec) -> Workload | None:
    if spec is None:
        return None
    if isinstance(spec, dict):
        return parse_workload(spec, where="sweep workload")
    return load_workload(spec)


def check_point(p: dict) -> None:
    """Everything a point's job would reject, checked in the client before any job runs."""
    prof = _profile(p.get("profile"), p["hardware"])
    mode = check_mode(prof, p["mode"])
    EngineSettings.given({k: p.get(k) for k in ENGINE_KEYS}, "sweep spec")  # a bad setting refused in the spec's terms
    engine = resolve_engine(prof, {k: p.get(k) for k in ENGINE_KEYS})
    wl = _workload(p.get("workload"))
    check_requests_fit(prof, [mode], wl, engine)  # no request above what a replica serves
    if p.get("qps") is not None:  # its size within the memory budget, as plain simulate checks it (a plan point sizes itself)
        check_run_size(expected_requests(wl, p["qps"], p.get("n_requests"), p.get("duration_s")), p.get("replicas") or 1, "this point",
                       knobs="a smaller n_requests or duration_s, or a lower qps, in the spec")
    if "slo" in p:
        parse_slo(p["slo"])


def _describe(params: dict) -> str:
    return ", ".join(f"{k} {params[k]}" for k in ("hardware", "mode", "qps") if k in params)


def _row(point: SweepPoint, flat: dict) -> dict:
    params = {f"param_{k}": (json.dumps(v, sort_keys=True) if isinstance(v, dict) else v) for k, v in point.params.items()}
    return {"point_id": point.point_id, **params, **flat}


def simulate_job(points: list[SweepPoint]) -> list[dict]:
    """Points of kind simulate -> their rows (a batch: one job carries several short points)."""
    return [_simulate_row(p) for p in points]


def _simulate_row(point: SweepPoint) -> dict:
    p = point.params
    prof = _profile(p.get("profile"), p["hardware"])
    res = run_point(prof, p["mode"], p["qps"], replicas=p["replicas"], workload=_workload(p.get("workload")), duration_s=p.get("duration_s"),
                    n_requests=p.get("n_requests"), seed=p["seed"], engine={k: p.get(k) for k in ENGINE_KEYS}, router=p["router"],
                    warmup_frac=p["warmup_frac"])
    flat = res.summary.flat()
    if "slo" in p:
        fails = parse_slo(p["slo"]).failures(flat)
        flat.update(meets_slo=not fails, slo_failures="; ".join(fails))
    return _row(point, flat)


def plan_job(points: list[SweepPoint]) -> list[dict]:
    """Points differing only in QPS -> one replica-search chain -> one row per point."""
    p = points[0].params
    if p.get("n_requests") is not None or any(p.get(k) is not None for k in ENGINE_KEYS) or p.get("router") != DEFAULT_ROUTER:
        raise UserError("kind plan searches with the simulator's defaults for n_requests, router and engine settings",
                        "drop n_requests, router and engine parameters from a plan sweep (or use kind simulate)")
    prof = _profile(p.get("profile"), p["hardware"])
    wl = p.get("workload")
    slo = parse_slo(p["slo"])
    point_fn = simulator_point(prof, p["duration_s"], p["seed"], None if wl is None else _workload(wl), miss_bounds(slo))  # certain misses stop early
    cells = search_chain(point_fn, p["hardware"], p["mode"], [q.params["qps"] for q in points], slo, p["max_replicas"], ChainStart())
    by_qps = {c.qps: c for c in cells}
    rows = []
    for q in points:
        c = by_qps[q.params["qps"]]
        best = next((r for r in c.points if r["replicas"] == c.replicas), {}) if c.replicas is not None else {}
        rows.append(_row(q, {**best, "replicas": c.replicas if c.replicas is not None else math.nan, "meets_slo": c.replicas is not None,
                             "evaluations": len(c.probes), "note": c.note}))
    return rows


def _jobs(spec: SweepSpec, todo: list[SweepPoint]) -> tuple[Callable, list[tuple]]:
    if spec.kind == "simulate":
        # batches of up to BATCH_MAX points, at least ~64 jobs: Dask's ~ms per job stays small beside the points
        size = max(1, min(BATCH_MAX, len(todo) // 64))
        return simulate_job, [(todo[i:i + size],) for i in range(0, len(todo), size)]
    chains: dict[str, list[SweepPoint]] = {}
    for p in todo:
        key = json.dumps({k: v for k, v in p.params.items() if k != "qps"}, sort_keys=True, default=str)
        chains.setdefault(key, []).append(p)
    return plan_job, [(sorted(c, key=lambda p: p.params["qps"]),) for c in chains.values()]


def _point_path(out: Path, pid: str) -> Path:
    return out / "points" / f"{pid}.json"


POINT_SUM = "point_sha256"  # each point file carries the checksum of its row: a hand-edited point is refused, not reused


def _row_sum(row: dict) -> str:
    return hashlib.sha256(json.dumps(row, sort_keys=True, default=str).encode()).hexdigest()


def _write_point(out: Path, row: dict) -> None:
    clean = jsonable(row)  # as JSON holds it (NaN -> null), so the checksum is of what is read back
    atomic.write_json(_point_path(out, row["point_id"]), {**clean, POINT_SUM: _row_sum(clean)})


def _load_done(out: Path, spec: SweepSpec) -> dict[str, dict]:
    """Finished points to reuse: each file's row must match its checksum (an edited one is refused);
    an unreadable file, another point's row or one written without a checksum is run again."""
    done = {}
    for p in spec.points:
        f = _point_path(out, p.point_id)
        if f.exists():
            try:
                row = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError):
                continue  # unreadable: run the point again
            if not (isinstance(row, dict) and row.get("point_id") == p.point_id and POINT_SUM in row):
                continue  # another point's row, damaged, or from before checksums: run it again
            want = row.pop(POINT_SUM)
            if want != _row_sum(row):
                raise UserError(f"{f} does not match its checksum: it changed since the sweep wrote it (point {_describe(p.params)})",
                                f"delete {f} to run the point again (a finished point is never silently replaced or reused)")
            done[p.point_id] = row
    return done


def run_sweep(spec: SweepSpec, out_dir: str | Path, cluster: Workers = Workers(), progress: Progress | None = None) -> SweepOutcome:
    """Every point of `spec` not already in OUT/points, then the results table. OUT is locked for the
    whole run (a second sweep into it is refused); the table is one output set (costmodel/outputset.py)."""
    out = atomic.check_output(out_dir, directory=True)
    cluster.check()  # --jobs, --scheduler and DASK_SCHEDULER_ADDRESS, before any point
    outputset.refuse_foreign(out, "sweep")  # another command's set, or outputs without their manifest: refused before any point
    with outputset.locked(out, "sweep"):
        if out.is_dir():
            outputset.verify(out, f"delete {out}/results.* and re-run the sweep (finished points in {out}/points are kept)")
        return _run_locked(spec, out, cluster, progress)


def _run_locked(spec: SweepSpec, out: Path, cluster: Workers, progress: Progress | None) -> SweepOutcome:
    done = _load_done(out, spec)
    todo = [p for p in spec.points if p.point_id not in done]
    for i, p in enumerate(todo):
        try:
            check_point(p.params)
        except UserError as e:  # name the spec file and the point, whatever part of the point failed
            raise UserError(f"{spec.source}: point {p.point_id} ({_describe(p.params)}): {e.what}", e.fix) from None
    total, skipped = len(spec.points), len(done)
    if progress:
        progress(skipped, total)

    def finished(i, rows):
        for r in fan_out(rows, siblings):  # points differing only in price take the same result
            _write_point(out, r)
            done[r["point_id"]] = r
        if progress:
            progress(len(done), total)

    sims, siblings = by_simulation(todo)
    fn, args = _jobs(spec, sims)
    run_tasks(fn, args, cluster=cluster, on_done=finished)
    table = with_costs(pd.DataFrame([done[p.point_id] for p in spec.points]), spec.points)  # cost columns (simulate/sweep/pricing.py)
    with outputset.publishing(out, "sweep", keep=("points",)) as stage:
        written = [atomic.write_parquet(stage / "results.parquet", table)] + write_table(table, stage / "results.csv")
    return SweepOutcome(table, len(todo), skipped, outputset.published(written, stage, out) + [out / outputset.MANIFEST])
