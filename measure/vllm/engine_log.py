"""What a vLLM engine says about its memory at start-up, read from its log (vLLM 0.26's lines), to
check the memory model (costmodel/memory.py) against the engine it prices.

    startup_memory(log_text) -> {"device_gib", "budget_gib", "weights_gib", "activations_gib",
                                 "non_torch_gib", "graphs_gib", "kv_gib", "kv_tokens"}   (NaN where a line is missing)
"""

from __future__ import annotations

import math
import re

_PATTERNS = {
    "device_gib": r"Free memory on device \([\d.]+/([\d.]+) GiB\)",
    "budget_gib": r"Desired GPU memory utilization is \([\d.]+, ([\d.]+) GiB\)",
    "weights_gib": r"Actual usage is ([\d.]+) GiB for weight",
    "activations_gib": r"([\d.]+) GiB for peak activation",
    "non_torch_gib": r"([\d.]+) GiB for non-torch memory",
    "graphs_gib": r"([\d.]+) GiB for CUDAGraph memory",
    "kv_gib": r"Available KV cache memory: ([\d.]+) GiB",
    "kv_tokens": r"GPU KV cache size: ([\d,]+) tokens",
}


def startup_memory(text: str) -> dict[str, float]:
    """The first occurrence of each start-up memory figure in an engine log."""
    out = {}
    for key, pat in _PATTERNS.items():
        m = re.search(pat, text)
        out[key] = float(m.group(1).replace(",", "")) if m else math.nan
    return out
