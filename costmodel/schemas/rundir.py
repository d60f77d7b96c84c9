"""Run directories: the artefact of `costmodel measure` (and of endpoint runs, bench imports and
validation runs). Torch-free so analysis and fitting can read runs anywhere.

Layout:
    RUN/manifest.json           RunManifest (status complete|incomplete, done units, provenance)
    RUN/<table>/part-NNNNN.parquet   rows appended per finished unit of work, each part atomic

Resumability: a campaign is a list of named *units* (a grid cell, a prompt x seed generation).
`RunWriter.finish_unit(unit)` flushes that unit's rows as new parts and then records the unit as
done in the manifest, both atomically; an interrupted run keeps every finished unit, is marked
`incomplete`, and `RunWriter(..., resume=True)` skips the units already done.

Tables and their required columns (writers may add more; units in the names):
- passes:       pass_kind, seqs, tokens_per_seq, context_tokens, gpu_ms, wall_ms
- commits:      gen_id, canvas, call, cur_step, accepted_positions, accepted_entropy,
                new_positions, renoised_positions            (one row per accept_canvas call)
- generations:  gen_id, regime, prompt_id, seed, split, canvas, steps, content_length,
                final_tokens, eos_positions                   (one row per generated canvas)
- telemetry:    t_s, phase, power_w, sm_clock_mhz, mem_used_gb, gpu_util_pct, energy_j
- requests:     request_id, arrival_s, start_s, first_token_s, finish_s, prompt_tokens,
                output_tokens, status                         (load runs: endpoint, validate)
- chunks:       request_id, chunk_index, t_s, tokens          (endpoint runs: one row per output event)
- server_metrics: t_s, phase, metric, labels, value           (endpoint runs: Prometheus samples)
- load_summary: source, duration_s, completed, failed         (endpoint runs, bench imports: one row per load)
- steps:        STEP_COLUMNS below                            (engine-steps runs: one row per engine step of a
                                                               served engine, written by measure/vllm/recorder.py)
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import getpass
import importlib.metadata as md
import json
import math
import os
import platform
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from costmodel import atomic, outputset
from costmodel.errors import UserError
from costmodel.jsonfile import read_json
from costmodel.modes import ServingMode, get_mode, mode_names
from costmodel.timestamps import now_iso

SCHEMA_VERSION = 1

TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "passes": ("pass_kind", "seqs", "tokens_per_seq", "context_tokens", "gpu_ms", "wall_ms"),
    "commits": ("gen_id", "canvas", "call", "cur_step", "accepted_positions", "accepted_entropy", "new_positions", "renoised_positions"),
    "generations": ("gen_id", "regime", "prompt_id", "seed", "split", "canvas", "steps", "content_length", "final_tokens", "eos_positions"),
    "telemetry": ("t_s", "phase", "power_w", "sm_clock_mhz", "mem_used_gb", "gpu_util_pct", "energy_j"),
    "requests": ("request_id", "arrival_s", "start_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens", "status"),
    "chunks": ("request_id", "chunk_index", "t_s", "tokens"),
    "server_metrics": ("t_s", "phase", "metric", "labels", "value"),
    "load_summary": ("source", "duration_s", "completed", "failed"),
}
# One engine step of a served engine (vLLM's stat-logger interface; measure/vllm/recorder.py):
# step: index in the run; t_s: when the engine's step stats reached the recorder (monotonic, s from
# the recorder's start); gap_ms: since the previous step's stats (the step's wall time while the engine
# is busy); elapsed_ms: the engine's own model-execution time (vLLM iteration details; NaN without);
# batch composition by kind: prefill (prompt chunks), decode (AR), denoise and commit (diffusion
# canvases), verify (MTP: target tokens over k+1 per sequence), drafts proposed / accepted (MTP);
# running / waiting requests; kv_usage (fraction of KV blocks in use) and kv_tokens (usage x capacity).
STEP_COLUMNS = ("step", "t_s", "gap_ms", "elapsed_ms", "prefill_reqs", "prefill_tokens", "decode_reqs", "decode_tokens", "denoise_reqs",
                "denoise_tokens", "commit_reqs", "commit_tokens", "verify_reqs", "verify_tokens", "drafts_proposed", "drafts_accepted",
                "running", "waiting", "kv_usage", "kv_tokens")
TABLE_COLUMNS["steps"] = STEP_COLUMNS

# Checked in every part before parts are joined (Run.table): integer columns (integral floats are
# accepted: a parquet writer may widen them), list columns whose every element is an integer
# position or token, and the key no two rows of a table may share.
INTEGER_COLUMNS: dict[str, tuple[str, ...]] = {
    "passes": ("seqs", "tokens_per_seq", "context_tokens"),
    "commits": ("canvas", "call", "cur_step"),
    "generations": ("seed", "canvas", "steps", "content_length"),
    "chunks": ("chunk_index",),  # tokens per event may be unknown (NaN: a bench import) or a mean
    "steps": ("step",),
}
INTEGER_LIST_COLUMNS: dict[str, tuple[str, ...]] = {
    "commits": ("accepted_positions", "new_positions", "renoised_positions"),
    "generations": ("final_tokens", "eos_positions"),
}
UNIQUE_KEYS: dict[str, tuple[str, ...]] = {
    "commits": ("gen_id", "canvas", "call"),
    "generations": ("gen_id", "canvas"),
}

RUN_KINDS = ("gpu", "endpoint", "bench-import", "validate", "engine-steps")
WEIGHTS_KINDS = ("random", "checkpoint", "served")
# Where the commit behaviour in a run comes from. Only "model" is the model's own behaviour.
COMMIT_SOURCES = ("model", "random-weights", "replay", "none")


def git_commit(cwd: str | Path | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=cwd or Path(__file__).parent, capture_output=True, text=True, timeout=5)
        sha = out.stdout.strip()
        # a copy of the tree without git objects prints "HEAD" or nothing: record None, not a fake hash
        return sha if out.returncode == 0 and len(sha) == 40 else None
    except Exception:
        return None


@dataclass
class RunManifest:
    run_id: str
    kind: str  # one of RUN_KINDS
    mode: str  # diffusion | ar | mtp
    model: str  # catalog name or checkpoint id
    weights: str  # one of WEIGHTS_KINDS
    commit_source: str  # one of COMMIT_SOURCES
    hardware: str | None = None  # catalog id (h200, ...) or None when unknown
    gpu_name: str | None = None  # as NVML reports it
    precision: str = "bf16"
    engine: dict = field(default_factory=dict)  # e.g. {"name": "transformers", "compiled": true, "experts_implementation": "grouped_mm"}
    settings: dict = field(default_factory=dict)  # the command's options, the grid
    software: dict = field(default_factory=dict)  # torch, transformers, cuda, driver, python versions
    git_commit: str | None = None
    started_at: str = field(default_factory=now_iso)
    finished_at: str | None = None
    status: str = "incomplete"  # complete | incomplete
    done_units: list[str] = field(default_factory=list)
    planned_units: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    host: str = field(default_factory=platform.node)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str) -> "RunManifest":
        if not isinstance(d, dict):
            raise UserError(f"run manifest {where} is not a JSON object", "re-run `costmodel measure` to regenerate it")
        if d.get("schema_version") != SCHEMA_VERSION:
            raise UserError(f"run manifest {where} has schema_version {d.get('schema_version')!r}, this costmodel reads {SCHEMA_VERSION}", "re-run the measurement with this version")
        names = {f.name for f in dataclasses.fields(cls)}
        missing = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in d]
        if missing:
            raise UserError(f"run manifest {where} lacks {', '.join(missing)}", "re-run the measurement or fix the manifest")
        m = cls(**{k: v for k, v in d.items() if k in names})
        if m.kind not in RUN_KINDS or m.weights not in WEIGHTS_KINDS or m.commit_source not in COMMIT_SOURCES or m.mode not in mode_names():
            raise UserError(f"run manifest {where} has an unknown kind/mode/weights/commit_source", f"kind in {RUN_KINDS}, mode in {mode_names()}, weights in {WEIGHTS_KINDS}, commit_source in {COMMIT_SOURCES}")
        return m

    @property
    def serving(self) -> ServingMode:
        """The run's mode, its registry entry: the manifest's name resolved where the run is read
        (from_dict refuses a name the registry lacks); everything below takes this object."""
        return get_mode(self.mode)

    @property
    def commit_stats_are_models(self) -> bool:
        """True only when commit statistics reflect the model itself (real weights, not replayed)."""
        return self.commit_source == "model"


def new_run_id(prefix: str) -> str:
    return f"{prefix}-{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:6]}"


class RunWriter:
    """Writes a run directory unit by unit. Use as a context manager: on an exception (or Ctrl-C)
    the manifest stays `incomplete` with every finished unit kept; on success it is `complete`."""

    def __init__(self, path: str | Path, manifest: RunManifest, resume: bool = False):
        self.path = Path(path)
        self._buffers: dict[str, list[dict]] = {}
        # one writer per run directory (a second `--resume` of it at once is refused): released on leaving the block
        self._unlock = outputset.hold(self.path, "measure")
        try:
            self._open(manifest, resume)
        except BaseException:
            self._unlock()
            raise

    def _open(self, manifest: RunManifest, resume: bool) -> None:
        mpath = self.path / "manifest.json"
        if resume and not mpath.exists():
            raise UserError(f"--resume: {self.path} holds no run to resume", "drop --resume to start a new run")
        if mpath.exists():
            if not resume:
                raise UserError(f"run directory {self.path} already holds a run", "pass --resume to continue it, or choose another -o")
            old = read_manifest(self.path)
            if (old.mode, old.model, old.weights) != (manifest.mode, manifest.model, manifest.weights):
                raise UserError(f"run directory {self.path} holds a {old.mode}/{old.model}/{old.weights} run", "resume with the same --mode/--model/weights, or choose another -o")
            manifest.run_id = old.run_id
            manifest.started_at = old.started_at
            manifest.done_units = list(old.done_units)
            manifest.notes = list(old.notes) + [f"resumed at {now_iso()} with {len(old.done_units)} units done"]
            self._discard_orphan_parts(set(old.done_units))
        self.manifest = manifest
        self.manifest.status = "incomplete"
        self.manifest.git_commit = self.manifest.git_commit or git_commit()
        self.path.mkdir(parents=True, exist_ok=True)
        self._write_manifest()

    # -- rows ------------------------------------------------------------------------------------
    def is_done(self, unit: str) -> bool:
        return unit in self.manifest.done_units

    def add(self, table: str, rows: dict | Iterable[dict]) -> None:
        if table not in TABLE_COLUMNS:
            raise ValueError(f"unknown run table {table!r}")
        if isinstance(rows, dict):
            rows = [rows]
        self._buffers.setdefault(table, []).extend(rows)

    def finish_unit(self, unit: str) -> None:
        """Flush the buffered rows of this unit (one part per table) and mark the unit done."""
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in unit)
        for table, rows in self._buffers.items():
            if not rows:
                continue
            df = pd.DataFrame(rows)
            missing = [c for c in TABLE_COLUMNS[table] if c not in df.columns]
            if missing:
                raise ValueError(f"rows for {table} lack required columns {missing}")
            df.insert(0, "unit", unit)
            n = len(list((self.path / table).glob("part-*.parquet"))) if (self.path / table).exists() else 0
            atomic.write_parquet(self.path / table / f"part-{n:05d}-{safe[:80]}.parquet", df)
        self._buffers.clear()
        if unit not in self.manifest.done_units:
            self.manifest.done_units.append(unit)
        self._write_manifest()

    def note(self, text: str) -> None:
        self.manifest.notes.append(text)
        self._write_manifest()

    def update(self, **fields: Any) -> None:
        for k, v in fields.items():
            setattr(self.manifest, k, v)
        self._write_manifest()

    def complete(self) -> None:
        self.manifest.finished_at = now_iso()
        missing = [u for u in self.manifest.planned_units if u not in self.manifest.done_units]
        self.manifest.status = "incomplete" if missing else "complete"
        self._write_manifest()

    def __enter__(self) -> "RunWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self._finish(exc_type, exc)
        finally:
            self._unlock()

    def _finish(self, exc_type, exc) -> None:
        if exc_type is None:
            self.complete()
        else:
            self._buffers.clear()  # rows of an unfinished unit are dropped, finished units stay
            self.manifest.finished_at = now_iso()
            self.manifest.status = "incomplete"
            self.manifest.notes.append(f"interrupted: {exc_type.__name__}: {str(exc)[:200]}")
            self._write_manifest()

    # -- internals -------------------------------------------------------------------------------
    def _write_manifest(self) -> None:
        atomic.write_json(self.path / "manifest.json", self.manifest.to_dict())

    def _discard_orphan_parts(self, done: set[str]) -> None:
        """Parts of a unit that never reached the manifest (crash between part and manifest)."""
        for part in self.path.glob("*/part-*.parquet"):
            try:
                units = set(pd.read_parquet(part, columns=["unit"])["unit"].unique())
            except Exception:
                units = set()
            if not units or not units <= done:
                part.unlink()


def read_manifest(path: str | Path) -> RunManifest:
    p = Path(path)
    if not p.exists():
        raise UserError(f"run directory {p} does not exist", "pass the -o directory of a `costmodel measure` run")
    if not (p / "manifest.json").exists():
        raise UserError(f"{p} is not a run directory (no manifest.json)", "pass the -o directory of a `costmodel measure` run")
    return RunManifest.from_dict(read_json(p / "manifest.json", "run manifest"), str(p / "manifest.json"))


@dataclass
class Run:
    path: Path
    manifest: RunManifest

    def table(self, name: str) -> pd.DataFrame:
        """All parts of one table concatenated (an empty frame with the required columns if none)."""
        if name not in TABLE_COLUMNS:
            raise ValueError(f"unknown run table {name!r}")
        parts = sorted((self.path / name).glob("part-*.parquet")) if (self.path / name).exists() else []
        if not parts:
            return pd.DataFrame(columns=["unit", *TABLE_COLUMNS[name]])
        frames = []
        for p in parts:
            try:
                frames.append(pd.read_parquet(p))
            except Exception as e:
                raise UserError(f"run {self.path}: part {p.relative_to(self.path)} is unreadable ({e.__class__.__name__})",
                                "delete the broken part file and resume the run") from None
        for p, df in zip(parts, frames):
            check_part(name, p, df, frames[0].columns, parts[0])
        df = pd.concat(frames, ignore_index=True)
        check_unique(name, df, [p for p, f in zip(parts, frames) for _ in range(len(f))])
        return df

    def has(self, name: str) -> bool:
        return (self.path / name).exists() and any((self.path / name).glob("part-*.parquet"))


def check_part(table: str, path: Path, df: pd.DataFrame, first_columns, first: Path) -> None:
    """One part against the table's schema and the run's first part, before any join: every
    required column, the same columns as the first part (a join would fill the gap with NaN),
    integer columns and integer positions (a join or a cast would truncate 2.5)."""
    where = f"run part {path}"
    fix = "the part disagrees with its run: delete it and resume the run (`costmodel measure --resume`), or re-measure"
    missing = [c for c in TABLE_COLUMNS[table] if c not in df.columns]
    if missing:
        raise UserError(f"{where} lacks column(s) {', '.join(missing)} of table {table}", fix)
    differ = sorted(set(first_columns) ^ set(df.columns))
    if differ:
        raise UserError(f"{where} and {first.name} differ in column(s) {', '.join(differ[:5])}", fix)
    for c in INTEGER_COLUMNS.get(table, ()):
        bad = _non_integer(df[c])
        if bad is not None:
            raise UserError(f"{where}: {c} in row {bad + 1} is {_cell(df[c].iloc[bad])}, not an integer", fix)
    for c in INTEGER_LIST_COLUMNS.get(table, ()):
        for i, v in enumerate(df[c]):
            if not _integer_list(v):
                raise UserError(f"{where}: {c} in row {i + 1} is {_cell(v)}, not a list of integers", fix)


def _non_integer(col: pd.Series) -> int | None:
    """The first row whose value is not an integer (an integral float passes), or None."""
    if pd.api.types.is_integer_dtype(col):
        return None
    x = pd.to_numeric(col, errors="coerce").to_numpy(float)
    bad = ~np.isfinite(x) | (x != np.round(x))
    return int(np.argmax(bad)) if bad.any() else None


def _integer_list(v) -> bool:
    if v is None:
        return True
    try:
        a = np.asarray(v, dtype=float).ravel()
    except (TypeError, ValueError):
        return False
    return bool(np.all(np.isfinite(a) & (a == np.round(a))))


def _cell(v) -> str:
    v = v.item() if isinstance(v, np.generic) else v
    text = repr(v.tolist() if isinstance(v, np.ndarray) else v)
    return text if len(text) <= 60 else text[:57] + "..."


def check_unique(table: str, df: pd.DataFrame, part_of_row: list[Path]) -> None:
    """No two rows of `table` for one key (two commit calls for one (gen_id, canvas, call) would
    both count, in an order no sort can make stable)."""
    key = list(UNIQUE_KEYS.get(table, ()))
    if not key or df.empty:
        return
    dup = df.duplicated(subset=key, keep=False).to_numpy()
    if not dup.any():
        return
    rows = np.flatnonzero(dup)
    first = df.iloc[rows[0]][key]
    same = [i for i in rows if all(df.iloc[i][k] == first[k] for k in key)][:2]
    parts = " and ".join(dict.fromkeys(str(part_of_row[i]) for i in same))
    ident = ", ".join(f"{k} {_cell(first[k])}" for k in key)
    raise UserError(f"run table {table} has {len(same)} rows for ({ident}) in {parts}",
                    "a unit was recorded twice: delete the later part and resume the run, or re-measure")


def load_run(path: str | Path) -> Run:
    return Run(Path(path), read_manifest(path))


def software_versions() -> dict:
    """Versions of what a measurement ran on (never imports torch if it is absent)."""
    out = {"python": platform.python_version(), "platform": platform.platform(), "user": getpass.getuser() if hasattr(os, "getuid") else None}
    for pkg in ("torch", "transformers", "numpy", "pandas", "nvidia-ml-py", "costmodel"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def spec_decode_counts(run: Run) -> tuple[float, list[float]] | None:
    """(num_drafts, [accepted at position i]) summed over an endpoint run's loads (vLLM counter
    semantics: per-position acceptance rates x drafts), or None without spec-decode counters."""
    if not run.has("load_summary"):
        return None
    s = run.table("load_summary")
    if "sd_num_drafts" not in s:
        return None
    drafts_total, per_pos_total = 0.0, []
    for _, row in s.iterrows():
        try:
            d = float(row.get("sd_num_drafts"))
        except (TypeError, ValueError):
            continue
        if math.isnan(d) or d <= 0:
            continue
        try:
            rates = json.loads(row.get("sd_per_position_rates") or "[]")
        except (TypeError, ValueError):
            rates = []
        drafts_total += d
        for i, rate in enumerate(rates):
            if i >= len(per_pos_total):
                per_pos_total.append(0.0)
            per_pos_total[i] += round(float(rate) * d, 6)
    if drafts_total <= 0 or not per_pos_total:
        return None
    return drafts_total, per_pos_total
