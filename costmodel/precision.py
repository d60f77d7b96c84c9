"""Numeric formats: bytes per weight / KV element and which tensor rate the matmuls run at."""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.errors import UserError


@dataclass(frozen=True)
class Precision:
    name: str
    weight_bytes: float  # per parameter, scales included
    kv_bytes: float  # per KV-cache element
    act_bytes: float  # per activation element
    compute: str  # key into HardwareSpec.tflops
    note: str


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in [
        Precision("bf16", 2.0, 2.0, 2.0, "bf16", "weights, KV and matmuls in bf16"),
        Precision("fp8", 1.0, 1.0, 2.0, "fp8", "fp8 weights and KV cache, fp8 tensor-core matmuls"),
        Precision(
            "int4", 0.5 + 2 / 128, 2.0, 2.0, "bf16",
            "4-bit weight-only (AWQ/GPTQ style, fp16 scale per group of 128); matmuls at the bf16 rate",
        ),
        Precision(
            "nvfp4", 0.5 + 1 / 16, 1.0, 2.0, "fp4",
            "NVFP4 weights (fp8 scale per 16), fp8 KV cache, fp4 tensor-core matmuls (Blackwell)",
        ),
    ]
}


def get_precision(name: str) -> Precision:
    try:
        return PRECISIONS[name]
    except KeyError:
        raise UserError(f"unknown precision {name!r}", f"use one of {', '.join(PRECISIONS)}") from None
