"""`costmodel measure --engine vllm`: a real vLLM engine on this machine, every engine step recorded.

One server of the mode (random weights: the tiny models on a CPU, `--load-format dummy` with a
model directory's config on a GPU) with the step recorder writing the run directory OUT (kind
engine-steps, measure/vllm/recorder.py: per step the wall gap, the engine's model time from
--enable-logging-iteration-details, the batch by kind), driven by the calibration design the vLLM
validation uses (a low-rate Poisson load for small batches, then closed loops holding c requests
in flight for every batch size a plan reaches; the loads come from the caller as `EngineLoad`s),
each load sent by the project's endpoint load generator. `costmodel fit OUT` then fits the
engine's pass costs on model time and its host overhead per step as its own step term.

A server that cannot start the model ends the command in one line; a run directory it had begun
stays, its manifest marked incomplete by the recorder (and the server log beside it)."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from costmodel.errors import UserError
from costmodel.modes import ServingMode
from measure.endpoint.loadtest import LoadTestOptions, run_loadtest
from measure.vllm.server import ServerSpec, VllmServer


@dataclass(frozen=True)
class EngineLoad:
    """One load of the calibration design: `qps` ('inf' with `concurrency`: a closed loop), `n` requests of `prompts`."""

    name: str
    qps: str
    n: int
    prompts: Path
    concurrency: int | None = None


@dataclass
class EngineMeasureOptions:
    mode: ServingMode
    out: Path
    spec: ServerSpec
    loads: list[EngineLoad]
    seed: int = 0
    server_timeout_s: float = 600.0
    request_timeout_s: float = 600.0
    say: object = print  # progress lines, as they happen
    notes: list[str] = field(default_factory=list)


def check_out(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} already exists and is not empty", "choose another -o (an engine run is recorded in one go)")


def run_engine_measure(opts: EngineMeasureOptions) -> Path:
    """Start the server with the recorder on OUT, send every load, stop the server (the recorder
    then writes its last steps and marks the run complete)."""
    check_out(opts.out)
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    log = opts.out.parent / f".{opts.out.name}.server.log"
    work = Path(tempfile.mkdtemp(prefix="costmodel-engine-loads-"))
    t0 = time.monotonic()
    try:
        with VllmServer(opts.spec, record_dir=opts.out, timeout_s=opts.server_timeout_s, log_path=log) as srv:
            opts.say(f"{opts.mode.name}: vLLM server up in {time.monotonic() - t0:.0f} s (log {log}); recording engine steps into {opts.out}")
            for i, load in enumerate(opts.loads):
                t = time.monotonic()
                _send(opts, srv.url, load, work / f"{i:02d}-{load.name}")
                opts.say(f"{opts.mode.name}: load {i + 1}/{len(opts.loads)} {load.name}: {load.n} requests "
                         + (f"{load.concurrency} in flight" if load.concurrency else f"at {load.qps} req/s") + f" in {time.monotonic() - t:.0f} s")
                if not srv.alive():
                    raise UserError(f"the vLLM server ({opts.mode.name}) died during load {load.name}: {srv.cause()}",
                                    f"see {log}; the steps recorded so far stay in {opts.out} (marked incomplete)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not (opts.out / "manifest.json").exists():
        raise UserError(f"the vLLM server recorded no engine steps into {opts.out}",
                        "check that costmodel is installed in the vLLM environment (its stat-logger plugin) and see the server log")
    opts.say(f"{opts.mode.name}: recorded in {time.monotonic() - t0:.0f} s -> {opts.out}; next: costmodel fit {opts.out} --hardware ID -o profile.json")
    return opts.out


def _send(opts: EngineMeasureOptions, url: str, load: EngineLoad, out: Path) -> None:
    lt = LoadTestOptions(endpoint=url, out=str(out), model=opts.spec.name, mode=opts.mode.name, seed=opts.seed, qps=load.qps,
                         concurrency=load.concurrency, prompts_file=str(load.prompts), max_tokens=64, n_requests=load.n, metrics_url="none",
                         timeout_s=opts.request_timeout_s, api="completions", ignore_eos=True,
                         canvas_length=opts.spec.canvas_length if opts.spec.canvas_length else None)
    code = run_loadtest(lt)
    if code:
        raise UserError(f"the load generator exited {code} on load {load.name}", "see its output above")
