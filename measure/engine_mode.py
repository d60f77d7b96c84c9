"""Which registered mode a serving engine runs, from what the engine itself reports (its config, its
Prometheus counters, its recorded stats), asked of the modes instead of spelling their names: the
vLLM step recorder (measure/vllm/recorder.py) and the endpoint load generator (measure/endpoint)
both read it."""

from __future__ import annotations

from costmodel.modes import ServingMode, all_modes


def engine_mode(canvases: bool = False, speculative: str | bool | None = None) -> ServingMode:
    """The registered mode a vLLM engine serves, from what it runs (its config, counters or
    recorded stats): a model that decodes canvases (ServingMode.decodes_canvases); else the mode
    whose speculative method (ServingMode.vllm_speculative_method) the engine runs (`speculative`:
    the method, or True for any); else the plain one."""
    served = [m for m in all_modes() if m.vllm_served and m.decodes_canvases == canvases]
    spec = [m for m in served if m.vllm_speculative_method and (speculative is True or m.vllm_speculative_method == speculative)]
    return (spec or [m for m in served if not m.vllm_speculative_method])[0]
