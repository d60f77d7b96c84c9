"""The pass kinds a harness program records, read from the mode it measures (its prefill, group and
side kinds, and the kinds' `PassKind` fields), so no program spells a kind's name: a new mode served
by an existing program needs no edit here."""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.modes import ServingMode, harness_modes
from costmodel.roofline import get_pass_kind


@dataclass(frozen=True)
class CanvasKinds:
    """The passes of a canvas program (measure/harness/diffusion.py, hook.py)."""

    prefill: str  # the encoder over the prompt
    denoise: str  # one denoising forward over a canvas (writes no KV)
    commit: str  # the encoder over the converged canvas (appends its KV)

    @classmethod
    def of(cls, mode: ServingMode) -> "CanvasKinds":
        writes = {k: get_pass_kind(k).writes_kv for k in mode.group_kinds}
        return cls(mode.prefill_kind, next(k for k, w in writes.items() if not w), next(k for k, w in writes.items() if w))


@dataclass(frozen=True)
class CausalKinds:
    """The passes of the causal program (measure/harness/causal.py, baseline.py)."""

    prefill: str
    decode: str  # the decode-phase pass: one token (plain decoding) or k+1 (verifying an assistant's drafts)
    draft: str | None  # the assistant's draft pass (None: no assistant)

    @classmethod
    def of(cls, mode: ServingMode) -> "CausalKinds":
        return cls(mode.prefill_kind, mode.group_kinds[0], mode.side_kinds[0] if mode.side_kinds else None)


def program_mode(harness: str, assistant: bool = False) -> ServingMode:
    """The first registered mode a harness program measures (with or without an assistant): whose
    kinds a program records when its caller names no mode (tests driving a program directly)."""
    return next(m for m in harness_modes() if m.harness == harness and m.assistant == assistant)
