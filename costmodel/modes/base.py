"""What a serving mode is: the contract every member of the mode registry fulfils.

A mode (diffusion, ar, mtp, ...) is one module that subclasses `ServingMode` and declares
- identity and display: `name`, `label`, `order` (tables and charts), `line_style` (charts);
- which model serves it: `model_family` (a catalog family) and whether an `assistant` drafts for it;
- its pass kinds (costmodel.roofline.PASS_KINDS) and their roles in an engine step:
  `prefill_kind` (prompt chunks), `group_kinds` (decode-phase groups, each a set of sequences that
  run one pass kind with the same query tokens per sequence in a step) and `side_kinds` (passes
  run over group 0's sequences before the joint forward, e.g. MTP's k draft passes);
- its random draws and KV accounting per request: `draw(profile, reqs, seed) -> ModeDraws`;
- how one engine step is priced: `step_ms(cost, prefill, groups, draws)` over any number of
  groups, with `cost.pass_ms(segments)` pricing one forward (costmodel/stepcost.ModeCost; default:
  one forward pass, one weight read, over the prefill chunks and every group);
Its per-step progression on a replica is the simulator's: an engine registered under the mode's
name in simulate/engines (a `Replica` subclass), so this registry sits below every stage.

Registering a new mode is one module plus one line in costmodel/modes/__init__.py (and its engine,
one module plus one line in simulate/engines/__init__.py); every mode list, CLI choice, chart
style, table order and CSV row is derived from the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from costmodel.roofline import Segment


class RequestArrays(Protocol):
    """The workload's requests as arrays (simulate.workload.Requests satisfies it)."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    regime_idx: np.ndarray
    regimes: tuple


@dataclass
class ModeDraws:
    """A mode's per-run draws and shapes: what its engine and its step price need.

    group_tokens: query tokens per sequence per step of each decode-phase group (`group_kinds`
    order); kv_need_tokens: KV tokens each request holds at its end (it must fit the cache alone);
    blocks: per-request canvases (diffusion) or None; price_key: what, besides the profile, makes
    two runs' step prices differ (the step-price cache key)."""

    group_tokens: tuple[int, ...]
    kv_need_tokens: np.ndarray
    blocks: np.ndarray | None = None
    price_key: tuple = ()
    side_passes: int = 0  # side passes (`side_kinds`) per step, e.g. MTP's k drafts


class ServingMode:
    """Base of every serving mode; subclasses set the class attributes."""

    name: ClassVar[str]
    label: ClassVar[str]  # display name in tables and charts
    description: ClassVar[str] = ""  # one line for data dictionaries, e.g. "Gemma-4-26B-A4B autoregressive"
    order: ClassVar[int]  # position in tables and charts (ascending)
    line_style: ClassVar[tuple[str, str]] = ("-.", "d")  # matplotlib (linestyle, marker)
    model_family: ClassVar[str]  # costmodel.models family of the served model
    default_model: ClassVar[str]  # the catalog model served when none is named
    canvas_sampler: ClassVar[bool] = False  # holds fp32 [canvas, vocab] sampler buffers per running canvas (costmodel/memory.py)
    assistant: ClassVar[bool] = False  # an assistant model drafts for the target
    is_diffusion: ClassVar[bool] = False  # the subject of the crossover (where diffusion stops paying off)
    pass_kinds: ClassVar[tuple[str, ...]]  # every pass kind the mode runs (profile order)
    prefill_kind: ClassVar[str]
    group_kinds: ClassVar[tuple[str, ...]]
    side_kinds: ClassVar[tuple[str, ...]] = ()
    profile_parts: ClassVar[tuple[str, ...]] = ()  # profile parts its draws use (PROFILE_PARTS)
    sim_cost_rank: ClassVar[int] = 9  # simulation cost per request, rank (0 = slowest): plan runs slow chains first

    # ---- engine memory (costmodel/memory.py) ---------------------------------------------------
    def kv_step_slots(self, k: int, canvas: int) -> int:
        """One new token's slot per step."""
        return 1

    def decode_query_tokens(self, k: int, canvas: int) -> int:
        """Query tokens a decoding request adds to a step's batch (AR: 1)."""
        return 1

    # ---- draws and KV --------------------------------------------------------------------------
    def draw(self, profile, reqs: RequestArrays, seed: int) -> ModeDraws:
        """Default: one query token per sequence per group, KV = prompt + output."""
        return ModeDraws(group_tokens=(1,) * len(self.group_kinds), kv_need_tokens=reqs.prompt_tokens + reqs.output_tokens)

    # ---- step price ----------------------------------------------------------------------------
    def step_ms(self, cost, prefill: Segment | None, groups: tuple[Segment, ...], draws: ModeDraws) -> float:
        """Milliseconds of one engine step's passes: one forward (one weight read) over the prefill
        chunks and every non-empty group, priced by `cost` (the mode's costmodel.stepcost.ModeCost)."""
        segs = ((prefill,) if prefill is not None else ()) + tuple(g for g in groups if g.seqs)
        return cost.pass_ms(segs)

    def batch_composition(self, prefill_seqs: float, group_seqs: tuple[float, ...]) -> dict[str, float]:
        """Mean sequences per engine step by pass kind (prefill, groups, then side passes, which
        run over group 0's sequences)."""
        comp = {self.prefill_kind: prefill_seqs}
        comp.update(zip(self.group_kinds, group_seqs))
        for kind in self.side_kinds:
            comp[kind] = group_seqs[0]
        return comp

    # ---- provenance ----------------------------------------------------------------------------
    def behaviour_provenance(self, profile) -> list[str]:
        """Where the profile parts the mode draws from come from, e.g. ["commit: published"]."""
        out = []
        for part in self.profile_parts:
            kinds = part_provenance_kinds(profile, part)
            if kinds:
                out.append(f"{PROFILE_PARTS[part]}: {'+'.join(kinds)}")
        return out


# profile parts a mode can draw its behaviour from -> the short label provenance texts use
PROFILE_PARTS = {"commit_stats": "commit", "mtp_acceptance": "acceptance"}


def part_provenance_kinds(profile, part: str) -> list[str]:
    """Sorted provenance kinds of one profile part ([] when the profile lacks it)."""
    if part == "commit_stats":
        return sorted({c.provenance.kind for c in profile.commit_stats.values()})
    if part == "mtp_acceptance":
        return [profile.mtp_acceptance.provenance.kind] if profile.mtp_acceptance else []
    raise KeyError(part)
