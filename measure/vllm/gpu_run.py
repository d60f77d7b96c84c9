"""Real vLLM on a GPU, in process, every engine step and every request recorded.

`costmodel measure --engine vllm --model MODEL` on a machine with an NVIDIA GPU runs this: the
catalog's full-size model with dummy weights (measure/vllm/model_dirs.py), vLLM's `AsyncLLM` with
the defaults `vllm serve` gets (usage context OPENAI_API_SERVER: on Hopper a token budget of 8,192
and max_num_seqs 1,024 unless the design sets them), the step recorder as its stat logger
(measure/vllm/recorder.py), and the calibration design's loads (measure/vllm/gpu_design.py) sent
by closed-loop or Poisson clients in the same process (token-id prompts, streamed deltas).

Writes, per engine setup S of the mode's design, OUT/S/:
    steps/ + manifest.json   the engine-steps run (one row per engine step)
    requests.parquet         one row per request: load, arrival/first token/finish wall times, tokens
    chunks.parquet           one row per streamed output event (TPOT and burst sizes)
    loads.json               the loads as sent (kind, concurrency or rate, lengths, duration, refusals)
and OUT/engine-S.json: the engine's resolved settings and GPU memory after start-up. A load the
engine refuses (a request error) is recorded as refused with the engine's message; the run goes on.
A deadline (`--deadline-s`) skips loads that would start after it, so a bounded device call still
ends with everything written; `--loads` runs only the named ones (those a deadline cut, say) beside
the warm-up and the setup's anchor (a fitted load every start serves: EngineSetup.anchor), the
others listed as skipped in loads.json.

    python -m measure.vllm.gpu_run --mode diffusion --precision fp8 -o runs/h200-fp8-diffusion [--deadline-s 520]
    python -m measure.vllm.gpu_run --mode mtp -o runs/h200-fp8-mtp-cut --setups k4-a0.8 --loads poisson-r10,closed-c64-short
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import subprocess
import tempfile
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.errors import UserError
from costmodel.models import get_model
from costmodel.modes import ServingMode, get_mode, mode_names
from costmodel.schemas.engine_setup import WARMUP
from measure.vllm.gpu_design import EngineSetup, Load, design_for
from measure.vllm.model_dirs import PROMPT_ID_RANGE, write_model_dirs

SUPPORTED_VLLM = ("0.26.0",)
CUT = ("deadline", "budget")  # why a load was skipped when a run was cut short (EngineSetup.as_recorded refits such a run)
# vLLM picks FlashAttention 4 (CuTe DSL) on Hopper, which needs nvidia-cutlass-dsl (not stageable: it wants
# protobuf < 7); Triton attention is what 0.26 serves every mode with here, recorded in each run's manifest
ATTENTION_BACKEND = "TRITON_ATTN"


def needs_v2_runner(sm) -> bool:
    """The mode runs on vLLM 0.26's Model Runner V2 (ServingMode.vllm_model_runner says why)."""
    return sm.vllm_model_runner == "v2"


def require_gpu_vllm() -> str:
    """vLLM's version, or one line naming the staging kit."""
    try:
        import vllm
    except ImportError as e:
        raise UserError(f"vLLM is not importable here ({e})",
                        "stage GPU vLLM 0.26 with ../shared/gpu-vllm/stage.sh and export PYTHONPATH=$HOME/site (see its README)") from None
    if vllm.__version__ not in SUPPORTED_VLLM:
        print(f"note: vLLM {vllm.__version__} found; this driver was tried with {', '.join(SUPPORTED_VLLM)} (../shared/gpu-vllm)", file=sys.stderr)
    return vllm.__version__


def engine_args(sm: ServingMode, precision: str, dirs: dict, setup: EngineSetup, max_model_len: int = 8192, extra: dict | None = None):
    from vllm.engine.arg_utils import AsyncEngineArgs

    s = dict(setup.settings)
    shape = get_model(json.loads((Path(dirs["target"]) / "costmodel_full_size.json").read_text())["shape"])
    kw = dict(model=str(dirs["target"]), load_format="dummy", max_model_len=max_model_len, seed=0, disable_log_stats=False,
              enable_logging_iteration_details=True, cudagraph_metrics=True, attention_backend=ATTENTION_BACKEND, gpu_memory_utilization=float(s.pop("gpu_memory_utilization", 0.9)))
    if precision == "fp8":
        kw["quantization"] = "fp8"
    else:
        kw["dtype"] = "bfloat16"
    kw["max_model_len"] = int(s.pop("max_model_len", max_model_len))
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        if key in s:
            kw[key] = int(s.pop(key))
    if sm.decodes_canvases:
        kw.update(tokenizer=str(dirs["target"]), limit_mm_per_prompt={"image": 0, "video": 0},
                  diffusion_config={"canvas_length": shape.canvas_length, "max_denoising_steps": int(s.pop("max_denoising_steps"))})
    else:
        kw["skip_tokenizer_init"] = True
    if sm.assistant:
        k, a = int(s.pop("num_speculative_tokens")), float(s.pop("acceptance"))
        kw["speculative_config"] = {"model": str(dirs["assistant"]), "num_speculative_tokens": k, "rejection_sample_method": "synthetic",
                                    "synthetic_acceptance_rates": [round(a ** (i + 1), 6) for i in range(k)]}
    if s:
        raise UserError(f"engine setup {setup.label}: settings {sorted(s)} are not engine settings here", "fix measure/vllm/gpu_design.py")
    kw.update(extra or {})
    return AsyncEngineArgs(**kw), kw


def request_specs(load: Load, rng: np.random.Generator) -> list[tuple[list[int], int]]:
    lo, hi = load.prompt_tokens
    plen = np.exp(rng.uniform(np.log(lo), np.log(hi), load.n)).round().astype(int)
    olen = rng.integers(load.output_tokens[0], load.output_tokens[1] + 1, load.n)
    return [(rng.integers(*PROMPT_ID_RANGE, int(p)).tolist(), int(o)) for p, o in zip(plen, olen)]


class Client:
    """Sends loads to one AsyncLLM and keeps every request's and every output event's wall times."""

    def __init__(self, engine, mode: ServingMode):
        self.engine, self.mode = engine, mode
        self.requests: list[dict] = []
        self.chunks: list[tuple] = []
        self.done: list[dict] = []  # each load's summary, or why it was skipped (loads.json)

    def params(self, max_tokens: int):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        extra = {} if self.mode.decodes_canvases else {"temperature": 0.0}  # diffusion requests refuse temperature
        return SamplingParams(max_tokens=max_tokens, ignore_eos=True, detokenize=False, output_kind=RequestOutputKind.DELTA, **extra)

    async def one(self, load: Load, ids: list[int], max_tokens: int) -> None:
        rid = f"{load.name}-{uuid.uuid4().hex[:10]}"
        rec = {"request_id": rid, "load": load.name, "arrival_s": time.time(), "start_s": float("nan"), "first_token_s": float("nan"),
               "finish_s": float("nan"), "prompt_tokens": len(ids), "output_tokens": 0, "max_tokens": max_tokens, "status": "ok", "error": ""}
        i = 0
        try:
            async for out in self.engine.generate({"prompt_token_ids": ids}, self.params(max_tokens), rid):
                t = time.time()
                k = len(out.outputs[0].token_ids) if out.outputs else 0
                if k:
                    if i == 0:
                        rec["first_token_s"] = t
                    self.chunks.append((rid, i, t, k))
                    i += 1
                    rec["output_tokens"] += k
                if out.finished:
                    rec["finish_s"] = t
        except Exception as e:  # the engine refused or failed this request: kept, marked
            rec.update(status="refused", error=f"{type(e).__name__}: {e}"[:300], finish_s=time.time())
        self.requests.append(rec)

    async def run(self, load: Load, seed: int) -> dict:
        specs = request_specs(load, np.random.default_rng(seed))
        t0 = time.time()
        if load.concurrency:
            todo = list(reversed(specs))

            async def worker():
                while todo:
                    ids, o = todo.pop()
                    await self.one(load, ids, o)

            await asyncio.gather(*(worker() for _ in range(min(load.concurrency, len(specs)))))
        else:
            gaps = arrival_gaps_s(load, np.random.default_rng(seed + 1), len(specs))
            tasks, t_next = [], time.monotonic()
            for (ids, o), g in zip(specs, gaps):
                t_next += float(g)
                await asyncio.sleep(max(0.0, t_next - time.monotonic()))
                tasks.append(asyncio.create_task(self.one(load, ids, o)))
            await asyncio.gather(*tasks)
        mine = [r for r in self.requests if r["load"] == load.name]
        return {"name": load.name, "kind": load.kind, "n": load.n, "concurrency": load.concurrency, "rate_rps": load.rate_rps, "arrival_cv": load.arrival_cv,
                "prompt_tokens": list(load.prompt_tokens), "output_tokens": list(load.output_tokens), "seed": seed,
                "start_s": t0, "duration_s": time.time() - t0, "completed": sum(r["status"] == "ok" for r in mine),
                "refused": sum(r["status"] != "ok" for r in mine),
                "refusal": next((r["error"] for r in mine if r["status"] != "ok"), "")}


def arrival_gaps_s(load: Load, rng: np.random.Generator, n: int) -> np.ndarray:
    """Inter-arrival gaps of an open load: exponential (Poisson), or gamma with the load's coefficient of
    variation (bursty: cv 3 sends runs of requests close together and then pauses) at the same mean rate."""
    if not load.arrival_cv:
        return rng.exponential(1.0 / load.rate_rps, n)
    shape = 1.0 / load.arrival_cv ** 2
    return rng.gamma(shape, 1.0 / (load.rate_rps * shape), n)


def scaled(setup: EngineSetup, n: int, prompt: int, output: int) -> EngineSetup:
    """The setup with every load cut to at most n requests, prompts and outputs capped (a dry run on a small engine)."""
    from dataclasses import replace

    cap = lambda r, m: (min(r[0], m), min(r[1], m))  # noqa: E731
    return replace(setup, loads=tuple(replace(ld, n=min(ld.n, n), concurrency=min(ld.concurrency, n) if ld.concurrency else None,
                                              prompt_tokens=cap(ld.prompt_tokens, prompt), output_tokens=cap(ld.output_tokens, output))
                                      for ld in setup.loads))


def refusal_cause(e: Exception, log: Path | None) -> str:
    """The engine's own reason for failing to start: the last error line of its log (the engine core
    runs in another process, so the exception here only says that it failed), else the exception."""
    lines = log.read_text(errors="replace").splitlines() if log and log.exists() else []
    for ln in reversed(lines):
        if any(w in ln for w in ("Error:", "OutOfMemory", "ValueError", "AttributeError", "KeyError")) and "Engine core initialization failed" not in ln:
            return ln.split("] ", 1)[-1].strip()[-300:]
    return f"{type(e).__name__}: {e}"[-300:]


def host_cpu() -> dict:
    """The host's CPU beside the GPU: eager steps (past the CUDA graphs) are bound by the host's kernel launches,
    and two engine starts on one GPU kind differed by up to 38% there (measure/validate/engine_repeats.py)."""
    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name")),
                 None) if Path("/proc/cpuinfo").exists() else None
    return {"cpu_model": model, "cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def gpu_memory() -> dict:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        m = pynvml.nvmlDeviceGetMemoryInfo(h)
        return {"gpu": pynvml.nvmlDeviceGetName(h), "used_gib": m.used / 2**30, "total_gib": m.total / 2**30}
    except Exception as e:  # no NVML: said, not fatal
        return {"error": str(e)}


def resolved_settings(engine) -> dict:
    """What the engine resolved (defaults included), for the manifest and the memory model's check."""
    vc = engine.vllm_config
    mc, sc, cc, comp = vc.model_config, vc.scheduler_config, vc.cache_config, vc.compilation_config
    att = getattr(getattr(vc, "attention_config", None), "backend", None)
    return {"max_num_seqs": sc.max_num_seqs, "max_num_batched_tokens": sc.max_num_batched_tokens, "max_model_len": mc.max_model_len,
            "async_scheduling": bool(getattr(sc, "async_scheduling", False)), "quantization": mc.quantization, "dtype": str(mc.dtype),
            "kv_cache_dtype": str(cc.cache_dtype), "block_size": cc.block_size, "num_gpu_blocks": cc.num_gpu_blocks,
            "gpu_memory_utilization": cc.gpu_memory_utilization, "attention_backend": str(att) if att is not None else "auto",
            "cudagraph_mode": str(getattr(comp, "cudagraph_mode", "")), "max_cudagraph_capture_size": getattr(comp, "max_cudagraph_capture_size", None),
            "cudagraph_capture_sizes": list(getattr(comp, "cudagraph_capture_sizes", None) or []),
            "compilation_mode": str(getattr(comp, "mode", "")), "enforce_eager": bool(mc.enforce_eager),
            "diffusion_config": _plain(getattr(vc, "diffusion_config", None)), "speculative_config": _plain(vc.speculative_config)}


def _plain(obj) -> dict | None:
    if obj is None:
        return None
    keep = ("canvas_length", "max_denoising_steps", "method", "num_speculative_tokens", "rejection_sample_method", "synthetic_acceptance_rates")
    return {k: (v if isinstance(v, (int, float, str, list, type(None))) else str(v)) for k in keep if (v := getattr(obj, k, None)) is not None}


@dataclass
class Budget:
    """When loads stop: a wall-clock `deadline` (time.monotonic(): a device call's end, start-ups included) and
    `measure_s`, the seconds of loads a user asked for, engine start-ups NOT counted (a cold start takes
    150-330 s on a fresh machine and would otherwise swallow the measurement). `measured_s` accumulates."""

    deadline: float = math.inf
    measure_s: float = math.inf
    measured_s: float = 0.0

    def spent(self) -> str | None:
        """Why no further load may start ('deadline', 'budget'), or None."""
        if time.monotonic() > self.deadline:
            return "deadline"
        return "budget" if self.measured_s >= self.measure_s else None


async def run_loads(client: "Client", setup: EngineSetup, budget: Budget, seed: int, say, only: frozenset) -> list[dict]:
    """The setup's loads in order into `client.done`; a load not run is listed as skipped, with why, and keeps its
    place (its seed: seed + 17 x its index)."""
    mode, done = client.mode.name, client.done
    for i, load in enumerate(setup.loads):
        if only and load.name not in only | {WARMUP.name, setup.anchor}:
            done.append({"name": load.name, "kind": load.kind, "skipped": "not selected (--loads)"})
            continue
        why = budget.spent()
        if why:
            if not any(d.get("skipped") in CUT for d in done):  # said once, for the rest
                say(f"{mode} {setup.label}: {'deadline' if why == 'deadline' else f'measurement budget ({budget.measure_s:g} s of loads)'} "
                    f"reached, the {'selected ' if only else ''}loads from {load.name} on not run")
            done.append({"name": load.name, "kind": load.kind, "skipped": why})
            continue
        summary = await client.run(load, seed + 17 * i)
        budget.measured_s += summary["duration_s"]
        done.append(summary)
        say(f"{mode} {setup.label}: {load.name}: {summary['completed']} requests in {summary['duration_s']:.1f} s"
            + (f", {summary['refused']} refused ({summary['refusal']})" if summary["refused"] else ""))
    return done


async def run_setup(sm: ServingMode, precision: str, dirs: dict, setup: EngineSetup, out: Path, budget: Budget, seed: int, say,
                    extra: dict | None = None, log: Path | None = None, only: frozenset = frozenset()) -> None:
    """One engine start and its loads; `only`: the load names to run (empty: all), the warm-up and the setup's anchor always.
    A load not run is listed in loads.json as skipped, with why, and keeps its place (its seed)."""
    mode = sm.name
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM

    from measure.vllm.recorder import StepRecorder

    args, kw = engine_args(sm, precision, dirs, setup, extra=extra)
    sdir = out / setup.label
    sdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        engine = AsyncLLM.from_engine_args(args, usage_context=UsageContext.OPENAI_API_SERVER,
                                           stat_loggers=[StepRecorder.factory(sdir, flush_every=512)])
    except Exception as e:  # the engine refused the setting (out of memory at a max_num_seqs, a budget below a canvas, a config field)
        cause = refusal_cause(e, log)
        (out / f"engine-{setup.label}.json").write_text(json.dumps(
            {"mode": mode, "precision": precision, "setup": setup.label, "refused": cause, "start_up_s": round(time.monotonic() - t0, 1),
             "engine_args": {k: (v if isinstance(v, (int, float, str, dict, list, bool)) else str(v)) for k, v in kw.items()},
             "memory_after_start": gpu_memory()}, indent=1, default=str))
        say(f"{mode} {setup.label}: the engine refused to start: {cause} (recorded in engine-{setup.label}.json; the next setup goes on)")
        return
    start_s = time.monotonic() - t0
    info = {"mode": mode, "precision": precision, "setup": setup.label, "engine_args": {k: (v if isinstance(v, (int, float, str, dict, list, bool)) else str(v))
                                                                                        for k, v in kw.items()},
            "resolved": resolved_settings(engine), "start_up_s": round(start_s, 1), "memory_after_start": gpu_memory(),
            "env": {k: os.environ[k] for k in ("VLLM_USE_V2_MODEL_RUNNER",) if k in os.environ}, "host": host_cpu()}
    (out / f"engine-{setup.label}.json").write_text(json.dumps(info, indent=1, default=str))
    say(f"{mode} {setup.label}: engine up in {start_s:.0f} s; {info['resolved']['num_gpu_blocks']} KV blocks; "
        f"budget {info['resolved']['max_num_batched_tokens']}, max_num_seqs {info['resolved']['max_num_seqs']}")
    client = Client(engine, sm)
    try:
        done = await run_loads(client, setup, budget, seed, say, only)
    finally:
        pd.DataFrame(client.requests).to_parquet(sdir / "requests.parquet", compression="zstd")
        pd.DataFrame(client.chunks, columns=["request_id", "chunk_index", "t_s", "tokens"]).to_parquet(sdir / "chunks.parquet", compression="zstd")
        (sdir / "loads.json").write_text(json.dumps(client.done, indent=1))
        engine.shutdown()
        StepRecorder.close_at(sdir)  # its manifest final before amend_manifest adds the driver's record
    if (sdir / "manifest.json").exists():
        amend_manifest(sdir, out / f"engine-{setup.label}.json", log)


def amend_manifest(setup_dir: Path, engine_json: Path, log: Path | None) -> dict:
    """What only the driver knows, written into the recorder's manifest once the engine has stopped:
    the catalog GPU, the model's catalog name, dummy weights, the precision, the engine's resolved
    graph capture and backends (its JSON record) and the MoE backend vLLM chose (its log). Each
    changed field is named in a manifest note. Idempotent."""
    import re

    from costmodel.hardware import match_nvml_name
    from costmodel.schemas.rundir import load_run
    from measure.vllm import run_precision

    run = load_run(setup_dir)
    m = run.manifest
    info = json.loads(engine_json.read_text())
    res = info["resolved"]
    spec = match_nvml_name(m.gpu_name or "")
    shape = Path(info["engine_args"]["model"]).name
    text = log.read_text(errors="replace") if log and log.exists() else ""
    moe = sorted(set(re.findall(r"Using (\w+) (?:Fp8 |unquantized )?MoE backend", text)))
    eng = {**m.engine, "quantization": res.get("quantization"), "max_cudagraph_capture_size": res.get("max_cudagraph_capture_size"),
           "cudagraph_mode": res.get("cudagraph_mode"), "attention_backend": res.get("attention_backend"),
           "moe_backend": ",".join(moe) or m.engine.get("moe_backend", "unknown"), "gpu_memory_utilization": res.get("gpu_memory_utilization"),
           "max_denoising_steps": (res.get("diffusion_config") or {}).get("max_denoising_steps"),
           "speculative": res.get("speculative_config"), "setup": info["setup"], "start_up_s": info.get("start_up_s")}
    new = {"hardware": spec.id if spec else m.hardware, "model": shape, "weights": "random", "precision": run_precision(eng), "engine": eng}
    if m.serving.decodes_canvases:
        new["commit_source"] = "random-weights"
    changed = [k for k, v in new.items() if getattr(m, k) != v]
    if changed:
        note = (f"{', '.join(changed)} set from the GPU driver's record of the same engine ({engine_json.name}"
                + (f", {log.name}" if log else "") + ") by measure/vllm/gpu_run.amend_manifest")
        _write_manifest(setup_dir, m, new, note)
    return new


def _write_manifest(setup_dir: Path, m, new: dict, note: str) -> None:
    from dataclasses import replace

    from costmodel import atomic

    m2 = replace(m, **new, notes=[*m.notes, note])
    atomic.write_json(setup_dir / "manifest.json", m2.to_dict())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=mode_names())
    ap.add_argument("--log", type=Path, default=None, help="the engine's log (this process's output, as the caller saves it): its MoE backend line")
    ap.add_argument("--amend", type=Path, default=None, metavar="SETUP_DIR",
                    help="only amend a recorded setup's manifest from its engine JSON beside it (OUT/engine-<setup>.json) and --log")
    ap.add_argument("--precision", default="fp8", choices=["fp8", "bf16"])
    ap.add_argument("-o", "--out", type=Path, default=None)
    ap.add_argument("--setups", default=None, help="comma list of the design's engine setups [default: all]")
    ap.add_argument("--loads", default=None, help="comma list of the setups' loads to run, the warm-up and each setup's anchor load always (e.g. those a deadline cut) [default: all]")
    ap.add_argument("--deadline-s", type=float, default=math.inf, help="wall clock: start no load after this many seconds, start-ups included (a device call's end)")
    ap.add_argument("--budget-s", type=float, default=math.inf, help="seconds of loads in all (the measurement), engine start-ups not counted")
    ap.add_argument("--gpus", default=None, help="comma list of GPU indices: the setups are spread over them, one engine per GPU, in parallel")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default=None, help="catalog model to serve [default: the mode's 26B-A4B model]")
    ap.add_argument("--engine-args", default="{}", help="JSON of further AsyncEngineArgs (e.g. a CPU dry run: enforce_eager, kv_cache_memory_bytes)")
    ap.add_argument("--scale-loads", default=None, help="N,P,O: cap every load at N requests, prompts at P tokens, outputs at O (a dry run)")
    a = ap.parse_args(argv)
    t_start = time.monotonic()
    if a.amend:
        d = a.amend.resolve()
        try:
            print(json.dumps(amend_manifest(d, d.parent / f"engine-{d.name}.json", a.log), indent=1, default=str))
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    if not a.mode or not a.out:
        ap.error("--mode and -o are required")

    def say(s: str) -> None:
        print(f"[{time.monotonic() - t_start:6.1f} s] {s}", flush=True)

    try:
        budget = Budget(t_start + a.deadline_s, a.budget_s)
        kw = dict(model=a.model, setups=a.setups, seed=a.seed, say=say, engine_args=json.loads(a.engine_args), scale_loads=a.scale_loads,
                  log=a.log, t_start=t_start, loads=a.loads)
        gpus = parse_gpus(a.gpus)
        if len(gpus) > 1:
            record_parallel(get_mode(a.mode), a.precision, a.out, budget, gpus, **kw)
        else:
            record(get_mode(a.mode), a.precision, a.out, budget, **kw)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def parse_gpus(text: str | None) -> list[str]:
    """GPU indices as CUDA_VISIBLE_DEVICES takes them; each once."""
    gpus = [g.strip() for g in (text or "").split(",") if g.strip()]
    if any(not g.isdigit() for g in gpus) or len(set(gpus)) != len(gpus):
        raise UserError(f"--gpus {text!r} is not a list of distinct GPU indices", "e.g. --gpus 0,1 (nvidia-smi -L lists them)")
    return gpus


def chosen_setups(sm, setups: str | None = None, loads: str | None = None) -> list[EngineSetup]:
    """The design's setups of mode `sm` that --setups names (all by default) and that hold a load
    --loads names (any, by default); a name that is neither is a one-line error."""
    names = [n.strip() for n in (setups or "").split(",") if n.strip()]
    labels = [s.label for s in design_for(sm)]
    unknown_setups = [n for n in names if n not in labels]
    if unknown_setups:
        raise UserError(f"--setups {', '.join(unknown_setups)}: not an engine setup of {sm.name}", f"use {', '.join(labels)}")
    chosen = [s for s in design_for(sm) if not names or s.label in names]
    only = {n.strip() for n in (loads or "").split(",") if n.strip()}
    unknown = only - {ld.name for s in chosen for ld in s.loads}
    if unknown:
        raise UserError(f"--loads {', '.join(sorted(unknown))}: not a load of {', '.join(s.label for s in chosen)}",
                        f"use load names of measure/vllm/gpu_design.py, e.g. {', '.join(ld.name for ld in chosen[0].loads[1:4])}")
    return [s for s in chosen if not only or only & {ld.name for ld in s.loads}]


def record(sm, precision: str, out: Path, budget: Budget, *, model: str | None = None, setups: str | None = None, seed: int = 0,
           say=print, engine_args: dict | None = None, scale_loads: str | None = None, log: Path | None = None,
           t_start: float | None = None, loads: str | None = None) -> Path:
    """Every engine setup of mode `sm`'s calibration design, recorded into `out` (the layout in the
    module docstring); a setup that would start within 90 s of the wall deadline, or once the measurement
    budget is spent, is skipped, said. The model directories (configs for dummy weights) live in a
    temporary folder, so that `out` holds setups only (`costmodel fit out/*/` takes each). A run that
    recorded no load is an error (exit 2), never a success with nothing in it."""
    if out.exists() and any(p for p in out.iterdir() if p.name != "models"):
        raise UserError(f"{out} already exists and is not empty", "choose another -o (an engine run is recorded in one go)")
    chosen = chosen_setups(sm, setups, loads)
    version = require_gpu_vllm()
    if needs_v2_runner(sm):
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    shape = get_model(model or sm.default_model)
    only = frozenset(n.strip() for n in (loads or "").split(",") if n.strip())
    if scale_loads:
        chosen = [scaled(s, *(int(x) for x in scale_loads.split(","))) for s in chosen]
    say(f"vLLM {version}; {sm.name} {precision}; setups {[s.label for s in chosen]}"
        + (f"; {budget.measure_s:g} s of loads (engine start-ups not counted: 30-330 s each)" if math.isfinite(budget.measure_s) else ""))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="costmodel-models-") as models:
        dirs = write_model_dirs(Path(models), shape)
        for s in chosen:
            if time.monotonic() > budget.deadline - 90 or budget.spent():  # an engine start (~35-60 s warm) and a load or two would not fit
                say(f"{sm.name} {s.label}: not started ({budget.spent() or 'deadline'})")
                continue
            asyncio.run(run_setup(sm, precision, dirs, s, out, budget, seed, say, engine_args, log, only))
    refused = [json.loads(p.read_text()).get("refused") for p in sorted(out.glob("engine-*.json"))]
    if refused and all(refused):
        raise UserError(f"the engine refused every setup of {sm.name}: {refused[0]}",
                        f"see {out}/engine-*.json and the engine's log; lower max_num_seqs or raise gpu_memory_utilization where memory ran out")
    require_loads(out)
    return out


def require_loads(out: Path) -> None:
    """One line, exit 2, when no setup under `out` recorded a load beyond its warm-up."""
    from costmodel.schemas.engine_loads import loads_json

    ran = [ld for d in out.iterdir() if d.is_dir() for ld in loads_json(d) if not ld.get("skipped") and ld["name"] != WARMUP.name]
    if not ran:
        raise UserError(f"{out}: no load was recorded (engine start-up and warm-up only)",
                        "raise --budget-s or the call's deadline (a cold engine start takes 150-330 s on a fresh machine, ~35 s warm)")


def split_setups(chosen: list[EngineSetup], n: int) -> list[list[EngineSetup]]:
    """Setups spread over n GPUs, largest first onto the least loaded (requests as the size), so that the
    slowest GPU finishes as early as it can."""
    lanes: list[list[EngineSetup]] = [[] for _ in range(n)]
    size = lambda s: sum(ld.n for ld in s.loads)  # noqa: E731
    for s in sorted(chosen, key=size, reverse=True):
        min(lanes, key=lambda lane: sum(map(size, lane))).append(s)
    return [lane for lane in lanes if lane]


def record_parallel(sm, precision: str, out: Path, budget: Budget, gpus: list[str], *, setups: str | None = None,
                    loads: str | None = None, say=print, log: Path | None = None, t_start: float | None = None, **kw) -> Path:
    """The chosen setups spread over several GPUs: one engine per GPU (CUDA_VISIBLE_DEVICES), each GPU's setups
    recorded by its own `gpu_run` process into OUT/.gpu<i>, then moved into OUT as if one GPU had run them all.
    Each GPU gets its own compile cache (VLLM_CACHE_ROOT/gpu<i>): two engines compiling into one cache race.
    A user with an 8-GPU node gets the design in the time of its largest setup."""
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} already exists and is not empty", "choose another -o (an engine run is recorded in one go)")
    lanes = split_setups(chosen_setups(sm, setups, loads), len(gpus))
    out.mkdir(parents=True, exist_ok=True)
    left = budget.deadline - time.monotonic()
    procs = []
    for gpu, lane in zip(gpus, lanes):
        labels = ",".join(s.label for s in lane)
        say(f"GPU {gpu}: {sm.name} {labels}")
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu, "PYTHONUNBUFFERED": "1",
               "VLLM_CACHE_ROOT": str(Path(os.environ.get("VLLM_CACHE_ROOT", Path.home() / ".cache" / "vllm")) / f"gpu{gpu}")}
        cmd = [sys.executable, "-m", "measure.vllm.gpu_run", "--mode", sm.name, "--precision", precision, "-o", str(out / f".gpu{gpu}"),
               "--setups", labels, "--seed", str(kw.get("seed") or 0)]
        cmd += ["--deadline-s", f"{left:.0f}"] if math.isfinite(left) else []
        cmd += ["--budget-s", f"{budget.measure_s:g}"] if math.isfinite(budget.measure_s) else []
        cmd += ["--loads", loads] if loads else []
        cmd += ["--model", kw["model"]] if kw.get("model") else []
        cmd += ["--scale-loads", kw["scale_loads"]] if kw.get("scale_loads") else []
        cmd += ["--engine-args", json.dumps(kw["engine_args"])] if kw.get("engine_args") else []
        glog = out / f"gpu{gpu}.log"
        cmd += ["--log", str(glog)]
        procs.append((gpu, glog, subprocess.Popen(cmd, env=env, stdout=glog.open("w"), stderr=subprocess.STDOUT)))
    for gpu, glog, proc in procs:
        rc = proc.wait()
        tail = [ln for ln in glog.read_text(errors="replace").splitlines() if ln.startswith("[") or ln.startswith("error")]
        for ln in tail:
            say(f"GPU {gpu}: {ln}")
        part = out / f".gpu{gpu}"
        for item in sorted(part.iterdir()) if part.exists() else []:
            shutil.move(str(item), str(out / item.name))
        shutil.rmtree(part, ignore_errors=True)
        if rc not in (0, 2):
            say(f"GPU {gpu}: its recorder exited {rc} (its log: {glog})")
    require_loads(out)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
