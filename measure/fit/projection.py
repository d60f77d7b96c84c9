"""Projection of a profile to another GPU and/or precision.

Method: every pass model keeps its fitted coefficients - the engine's measured efficiency relative
to the roofline - and the simulator re-evaluates the roofline features (`memory_ms`, `compute_ms`,
`roofline_ms`) on the target GPU and precision, so each pass scales by the roofline ratio of the
two points. The `const` term (per-pass overhead: kernel launches, host work) is carried as is.
Shape terms (`seqs`, `tokens`, `context_ktokens`, in ms per unit) capture traffic the roofline does
not count, so they are scaled by the memory-bandwidth ratio (source / target). Commit statistics
and MTP acceptance are properties of the model, carried unchanged. The result is labelled
projected, with its source profile named in every part.

Table pass models (composed per operator, measure/ops) are projected point by point the same way:
every grid value's time less the per-step overhead is scaled by the roofline ratio of that shape
(target / source roofline ms of the same single-kind pass), the overhead carried as is, and the
token-proportional part by the ratio of a one-sequence pass of that many tokens. Each shape keeps
the efficiency its operators reached on the source GPU, as the linear models do with their
coefficients; the linear coefficients a table model keeps would carry a fit's intercept and slope
off the shapes they were fitted to (an encoder_commit fit of -584 + 41 x memory_ms predicts below
zero on a faster GPU), so the projected table, tagged with the target GPU and precision, prices the
pass. Its linear fallback becomes the source model's median ratio to the roofline times the
target's roofline, which stays above the roofline everywhere (it prices only off the table's own GPU).

Memory: the weights of each mode's model(s) must take at most `MAX_WEIGHT_FRACTION` of the GPU's
memory, leaving room for the KV cache, activations (a 256-token canvas's fp32 logits alone are
0.27 GB) and the CUDA context; otherwise projecting is a UserError that names a precision that fits.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

from costmodel.errors import UserError
from costmodel.hardware import HardwareSpec, get_hardware
from costmodel.models import get_model
from costmodel.modes import all_modes
from costmodel.precision import PRECISIONS, get_precision
from costmodel.schemas.profile import ModeProfile, PassTable, Profile, Provenance
from costmodel.roofline import Roofline, Segment
from costmodel.timestamps import now_iso
from measure.fit.passes import grid_median_x_roofline

MAX_WEIGHT_FRACTION = 0.75
SHAPE_TERMS = ("seqs", "tokens", "context_ktokens")
METHOD_NOTE = ("projection: fitted coefficients (engine efficiency vs the roofline) carried and roofline features re-evaluated on "
               "the target; const (per-pass overhead) carried as is; seqs/tokens/context terms scaled by the memory-bandwidth ratio; "
               "table pass models: each grid point's time x its shape's roofline ratio, the per-step overhead carried")


def mode_weights_gb(profile_modes: dict[str, ModeProfile], precision: str) -> dict[str, float]:
    """GB of weights one replica of each mode holds (MTP: target + assistant)."""
    wb = get_precision(precision).weight_bytes
    out = {}
    for name, m in profile_modes.items():
        params = get_model(m.model).total_params + (get_model(m.assistant).total_params if m.assistant else 0)
        out[name] = params * wb / 1e9
    return out


def check_weights_fit(hw: HardwareSpec, precision: str, modes: dict[str, ModeProfile]) -> list[str]:
    """UserError when a mode's weights do not fit `hw` at `precision`; notes on what was assumed."""
    prec = get_precision(precision)
    hw.peak_tflops(prec)  # a format the GPU lacks fails here, naming the formats it has
    cap = MAX_WEIGHT_FRACTION * hw.memory_gb
    gb = mode_weights_gb(modes, precision)
    worst = max(gb, key=gb.get)
    if gb[worst] > cap:
        fits = [p for p in PRECISIONS if max(mode_weights_gb(modes, p).values()) <= cap and PRECISIONS[p].compute in hw.tflops]
        fix = (f"project with --precision {' or '.join(fits)} ({', '.join(f'{max(mode_weights_gb(modes, p).values()):.1f} GB' for p in fits)})"
               if fits else "choose a GPU with more memory")
        raise UserError(f"{precision} weights of {modes[worst].model} ({worst} mode) take {gb[worst]:.1f} GB, more than "
                        f"{MAX_WEIGHT_FRACTION:.0%} of the {hw.name}'s {hw.memory_gb:g} GB (the rest holds KV cache, activations and the CUDA context)", fix)
    notes = [f"weights per replica at {precision}: " + ", ".join(f"{m} {g:.1f} GB" for m, g in gb.items()) + f" of {hw.memory_gb:g} GB"]
    bf16 = mode_weights_gb(modes, "bf16")
    if max(bf16.values()) > cap and prec.weight_bytes < 1.0:
        body_gb = max(get_model(m.model).total_params for m in modes.values()) * get_precision("bf16").weight_bytes / 1e9
        notes.append(f"{hw.name} ({hw.memory_gb:g} GB) cannot hold the 25.2B-parameter model in bf16 ({body_gb:.1f} GB of weights): "
                     f"this profile assumes a 4-bit weight format, {precision} ({prec.note})")
    return notes


def project_table(t: PassTable, kind: str, src_roof: Roofline, dst_roof: Roofline, hardware_id: str, precision: str, src_id: str) -> PassTable:
    """A table pass model moved to another GPU / precision (module docstring): each grid value's
    operator time scaled by its shape's roofline ratio, the per-step overhead carried as is."""
    def ratio(seqs: float, tokens: float, context: float) -> float:
        seg = Segment(kind, max(1, round(seqs)), max(1, round(tokens)), max(0, round(context)))
        return dst_roof.segment_roofline_ms(seg) / src_roof.segment_roofline_ms(seg)

    oh = t.overhead_ms
    ms = [[[max((v - oh) * ratio(s, tok, c), 1e-9) + oh for c, v in zip(t.context_tokens, row)] for tok, row in zip(t.tokens_per_seq, plane)]
          for s, plane in zip(t.seqs, t.ms)]
    token_ms = [v * ratio(1, m, 0) for m, v in zip(t.token_m, t.token_ms)]
    return dataclasses.replace(t, hardware=hardware_id, precision=precision, ms=ms, token_ms=token_ms,
                               source=f"projected from {src_id} ({t.hardware}/{t.precision}): each grid point's operator time x the roofline "
                                      f"ratio of its shape, the per-step overhead carried; made from: {t.source}")


def project_profile(src: Profile, hardware: str, precision: str, hardware_file: str | None = None, profile_id: str | None = None) -> Profile:
    """`src` moved to another GPU/precision (see the module docstring for the method)."""
    hw = get_hardware(hardware, hardware_file)
    prec = get_precision(precision)
    weight_notes = check_weights_fit(hw, precision, src.modes)
    src_hw = src.hardware_spec()
    bw_ratio = src_hw.memory_bandwidth_tbps / hw.memory_bandwidth_tbps
    now = now_iso()

    where = f"{src_hw.id}/{src.precision}"
    modes = {}
    for name, m in src.modes.items():
        asst = get_model(m.assistant) if m.assistant else None
        roof = Roofline(get_model(m.model), hw, prec, asst)
        src_roof = Roofline(get_model(m.model), src_hw, get_precision(src.precision), asst)
        pms = {}
        for kind, pm in m.pass_models.items():
            new = copy.deepcopy(pm)
            table = pm.table_for(src_hw.id, src.precision)
            how = (f"table of composed operator times on {where} scaled per grid point by the roofline ratio to {hw.id}/{precision}"
                   if table is not None else f"coefficients fitted on {where} carried to {hw.id}/{precision}" + (
                       f"; shape terms x{bw_ratio:.3f} (bandwidth ratio)" if any(f in SHAPE_TERMS for f in pm.coef) else ""))
            new.provenance = Provenance("projected", f"projected from {src.profile_id} ({pm.provenance.kind}: {pm.provenance.source})",
                                        hardware=hw.id, date=now, notes=how)
            if new.diagnostics is not None:
                new.diagnostics = dataclasses.replace(new.diagnostics, summary=f"diagnostics of the source fit on {where}\n{new.diagnostics.summary}")
            if table is not None:  # the ratio to the roofline is the source's at every grid point (median_x_roofline kept)
                new.table = project_table(table, kind, src_roof, roof, hw.id, precision, src.profile_id)
                new.coef = {"roofline_ms": max(1.0, pm.median_x_roofline or 1.0)}
            else:
                new.coef = {f: (c * bw_ratio if f in SHAPE_TERMS else c) for f, c in pm.coef.items()}
                new.median_x_roofline = grid_median_x_roofline(new, roof)
            pms[kind] = new
        modes[name] = ModeProfile(name, m.model, m.assistant, pms, notes=m.notes)
    notes = list(src.notes) + [f"projected from {src.profile_id} ({where}) to {hw.id}/{precision}", METHOD_NOTE] + weight_notes
    if precision != src.precision:
        notes.append(f"precision changed {src.precision} -> {precision}: the engine efficiency measured at {src.precision} is assumed to hold; "
                     "kernels for other formats (e.g. weight-only 4-bit dequantisation) can reach a different fraction of the roofline")
    return Profile(
        profile_id=profile_id or f"{hw.id}-{precision}-projected-from-{src.profile_id}",
        hardware=hw,
        precision=precision,
        engine={**src.engine, "projected_from": src.profile_id},
        modes=modes,
        commit_stats=copy.deepcopy(src.commit_stats),
        mtp_acceptance=copy.deepcopy(src.mtp_acceptance),
        provenance=Provenance("projected", f"projected from {src.profile_id}", hardware=hw.id, date=now, notes=METHOD_NOTE),
        created_at=now,
        notes=notes,
    ).validate(f"projection of {src.profile_id}")


# shapes a projection is compared at (`costmodel profile project --compare`): each mode's own
# (ServingMode.projection_compare: the issue-17 target shapes and a few batches around them), as (mode, kind, seqs, tokens, context)
COMPARE_SHAPES = tuple((m.name, *shape) for m in all_modes() for shape in m.projection_compare)


@dataclass(frozen=True)
class PassDiff:
    """One pass priced by a projected profile and by another profile of the same GPU and precision."""

    mode: str
    kind: str
    seqs: int
    tokens: int
    context: int
    projected_ms: float
    compared_ms: float

    @property
    def err_pct(self) -> float:
        return 100.0 * (self.projected_ms / self.compared_ms - 1.0)


def compare_passes(projected: Profile, other: Profile) -> list[PassDiff]:
    """`projected` against `other` (e.g. a profile measured on the projection's target GPU) at
    COMPARE_SHAPES, the modes and kinds both have: the projection's own error where a measurement
    exists. Refuses profiles of different GPUs or precisions (the error would be theirs, not the
    projection's)."""
    a, b = (projected.hardware.id, projected.precision), (other.hardware.id, other.precision)
    if a != b:
        raise UserError(f"--compare profile {other.profile_id} is for {b[0]}/{b[1]}, the projection for {a[0]}/{a[1]}",
                        "compare with a profile of the target GPU and precision")
    def has(p: Profile, mode: str, kind: str) -> bool:
        return mode in p.modes and kind in p.modes[mode].pass_models

    return [PassDiff(mode, kind, seqs, tokens, context, projected.pass_ms(mode, seg), other.pass_ms(mode, seg))
            for mode, kind, seqs, tokens, context in COMPARE_SHAPES if has(projected, mode, kind) and has(other, mode, kind)
            for seg in [(Segment(kind, seqs, tokens, context),)]]
