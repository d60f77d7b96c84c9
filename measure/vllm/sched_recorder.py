"""A recording subclass of vLLM's own scheduler: every engine step's per-request schedule, for
validating the simulator's continuous-batching model step by step (simulate/validate/vllm).

    COSTMODEL_SCHED_RECORD=run/sched.jsonl vllm serve MODEL \
        --scheduler-cls measure.vllm.sched_recorder.RecordingScheduler           # AR, MTP
        --scheduler-cls measure.vllm.sched_recorder.RecordingDiffusionScheduler  # DiffusionGemma

The classes only wrap the public scheduler methods the engine core calls (`add_request`,
`schedule`, `update_from_output`, vllm/v1/engine/core.py `EngineCore.step`) and change nothing in
the policy: vLLM 0.32's `Scheduler` and `DiffusionScheduler` (vllm/v1/core/sched/) decide. Naming a
scheduler class turns vLLM's automatic choice off (vllm/config/vllm.py picks DiffusionScheduler
for a diffusion config only when none is named), so the diffusion recorder subclasses it.

One JSON line per event, flushed per step (a killed server loses at most the step in flight):
- {"ev": "add", "req", "t", "arr", "prompt", "max_tokens", "hashes"}  when the scheduler receives a request
  (`t`: the engine loop took it in, at a step boundary; `arr`: vLLM's own arrival time, when the API
  server's input processor made the request; `hashes`: with prefix caching on, the first 8 bytes (hex)
  of each full prompt block's hash, vllm/v1/request.py `Request.block_hashes`, so a replay looks up
  the same blocks vLLM did);
- {"ev": "step", "i", "t0", "t_sched", "t1", "tokens": {req: scheduled tokens}, "spec": {req: draft
  or canvas tokens}, "new": [...], "resumed": [...], "preempted": [...], "cached": {req: tokens
  computed before this step, for new and resumed requests: vLLM's prefix-cache hit}, "emitted": {req: tokens
  emitted}, "done": [finished]}; t0 = schedule() entered, t_sched = it returned, t1 =
  update_from_output returned (time.time(), the client's clock on the same host).
The step's wall time in the synchronous engine is t0 of the next step minus t0 while it is busy.
"""

from __future__ import annotations

import json
import os
import time

from measure.vllm import require_vllm

require_vllm()
from vllm.v1.core.sched.diffusion_scheduler import DiffusionScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402

SCHED_RECORD_ENV = "COSTMODEL_SCHED_RECORD"


class _Recorder:
    """The JSON-lines sink (None when the variable is unset: nothing is recorded)."""

    def __init__(self) -> None:
        path = os.environ.get(SCHED_RECORD_ENV)
        self.fh = None
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self.fh = open(path, "a", buffering=1 << 16)
        self.i = 0

    def write(self, rec: dict, flush: bool = False) -> None:
        if self.fh is None:
            return
        self.fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
        if flush:
            self.fh.flush()


def _cached_ids(out) -> list[str]:
    ids = getattr(out.scheduled_cached_reqs, "req_ids", None) or []
    resumed = getattr(out.scheduled_cached_reqs, "resumed_req_ids", None)
    return [r for r in ids if resumed and r in resumed]


def _hit_tokens(out) -> dict:
    """Tokens already computed when a new or resumed request is scheduled: its prefix-cache hit
    (vllm/v1/core/sched/output.py NewRequestData / CachedRequestData.num_computed_tokens, set by
    Scheduler.schedule from KVCacheManager.get_computed_blocks before this step's tokens)."""
    hit = {r.req_id: int(r.num_computed_tokens) for r in out.scheduled_new_reqs}
    cached = out.scheduled_cached_reqs
    resumed = getattr(cached, "resumed_req_ids", None) or ()
    for rid, n in zip(getattr(cached, "req_ids", None) or [], getattr(cached, "num_computed_tokens", None) or []):
        if rid in resumed:
            hit[rid] = int(n)
    return hit


def _diffusion_config(vllm_config) -> dict:
    """DiffusionGemma's served canvas and denoising budget (vllm/config/diffusion.py DiffusionConfig;
    None: the model's generation_config.json decides), for the simulator's engine settings."""
    dc = getattr(vllm_config, "diffusion_config", None)
    if dc is None:
        return {}
    return {"canvas_length": getattr(dc, "canvas_length", None), "max_denoising_steps": getattr(dc, "max_denoising_steps", None)}


class RecordingMixin:
    """Wraps add_request / schedule / update_from_output; the policy is the base class's."""

    def _rec(self) -> _Recorder:
        r = getattr(self, "_costmodel_rec", None)
        if r is None:
            r = self._costmodel_rec = _Recorder()
            r.write({"ev": "config", **self._costmodel_config()}, flush=True)
        return r

    def _costmodel_config(self) -> dict:
        """The settings the simulator must run with (what this scheduler instance enforces)."""
        import vllm

        sc, kv = self.scheduler_config, getattr(self, "kv_cache_config", None)
        return {"vllm": vllm.__version__, "scheduler": type(self).__mro__[2].__name__, "max_num_seqs": self.max_num_running_reqs,
                "max_num_batched_tokens": self.max_num_scheduled_tokens, "num_spec_tokens": int(getattr(self, "num_spec_tokens", 0) or 0),
                "block_size": int(getattr(self, "block_size", 0) or 0), "num_blocks": int(getattr(kv, "num_blocks", 0) or 0),
                "chunked_prefill": bool(getattr(sc, "enable_chunked_prefill", True)),
                "long_prefill_token_threshold": int(getattr(sc, "long_prefill_token_threshold", 0) or 0),
                "async_scheduling": bool(getattr(sc, "async_scheduling", False)), "policy": str(getattr(sc, "policy", "fcfs")),
                "enable_prefix_caching": bool(getattr(getattr(self, "cache_config", None), "enable_prefix_caching", False)),
                "hash_block_size": int(getattr(self, "hash_block_size", 0) or 0),  # tokens per `hashes` entry
                **_diffusion_config(getattr(self, "vllm_config", None))}

    def add_request(self, request) -> None:
        super().add_request(request)
        sp = request.sampling_params
        self._rec().write({"ev": "add", "req": request.request_id, "t": time.time(), "arr": getattr(request, "arrival_time", None),
                           "prompt": request.num_prompt_tokens, "max_tokens": getattr(sp, "max_tokens", None),
                           "hashes": [bytes(h)[:8].hex() for h in (getattr(request, "block_hashes", None) or [])]})

    def schedule(self, *a, **kw):
        t0 = time.time()
        out = super().schedule(*a, **kw)
        self._costmodel_step = {"ev": "step", "i": self._rec().i, "t0": t0, "t_sched": time.time(),
                                "tokens": dict(out.num_scheduled_tokens),
                                "spec": {k: len(v) for k, v in (out.scheduled_spec_decode_tokens or {}).items()},
                                "new": [r.req_id for r in out.scheduled_new_reqs], "resumed": _cached_ids(out),
                                "preempted": sorted(out.preempted_req_ids or ()), "cached": _hit_tokens(out)}
        return out

    def update_from_output(self, scheduler_output, model_runner_output):
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        rec = self._rec()
        step = getattr(self, "_costmodel_step", None)
        if step is not None and scheduler_output.total_num_scheduled_tokens > 0:
            emitted, done = {}, []
            for eco in outputs.values():
                for o in eco.outputs:
                    if o.new_token_ids:
                        emitted[o.request_id] = emitted.get(o.request_id, 0) + len(o.new_token_ids)
                    if o.finish_reason is not None:
                        done.append(o.request_id)
            step.update(t1=time.time(), emitted=emitted, done=done)
            rec.write(step, flush=True)
            rec.i += 1
        self._costmodel_step = None
        return outputs


class RecordingScheduler(RecordingMixin, Scheduler):
    """vLLM's Scheduler (AR, MTP), recorded."""


class RecordingDiffusionScheduler(RecordingMixin, DiffusionScheduler):
    """vLLM's DiffusionScheduler (DiffusionGemma, synchronous), recorded."""
