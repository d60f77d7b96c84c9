"""A profile priced straight from the roofline at a stated engine efficiency, for any catalog GPU.
Used before fitted profiles exist and for what-if runs (`costmodel profile roofline`)."""

from __future__ import annotations

from costmodel.errors import UserError
from costmodel.hardware import default_hardware, get_hardware
from costmodel.models import AR_SIBLING, ASSISTANT_FOR, get_model
from costmodel.modes import all_modes, profile_parts
from costmodel.modes.diffusion import COMMIT_STATS
from costmodel.modes.mtp import MTP_ACCEPTANCE
from costmodel.prior import published_commit_prior, vllm_synthetic_mtp_acceptance
from costmodel.schemas.profile import ModeProfile, PassCostModel, Profile, Provenance
from costmodel.timestamps import now_iso

# Compiled transformers path on one H200 (shared/examples/README.md): denoise step 33.6 ms vs an
# ~11 ms roofline, AR decode 9.9 ms vs ~1.6 ms: engines run at a fraction of the roofline.
DEFAULT_EFFICIENCY = 0.33


def published_parts() -> dict:
    """Every registered mode's profile part at its published value: a part's prior(), the commit
    statistics and MTP acceptance from costmodel/prior.py (what a profile carries where no run
    measured the modes' behaviour)."""
    return {**{p.key: p.prior() for p in profile_parts()}, COMMIT_STATS.key: published_commit_prior(),
            MTP_ACCEPTANCE.key: vllm_synthetic_mtp_acceptance()}


def roofline_profile(hardware: str | None = None, precision: str = "bf16", efficiency: float = DEFAULT_EFFICIENCY,
                     diffusion_model: str = "diffusiongemma-26b-a4b", hardware_file: str | None = None) -> Profile:
    if not 0 < efficiency <= 1:
        raise UserError(f"efficiency {efficiency} is outside (0, 1]", "give the fraction of the roofline the engine reaches, e.g. 0.33")
    hw = get_hardware(hardware or default_hardware(), hardware_file)  # None: the catalog's default GPU
    ar_model = AR_SIBLING[diffusion_model]
    prov = Provenance("roofline", f"roofline time / efficiency {efficiency:g}", hardware=hw.id, date=now_iso(),
                      notes="not measured: every pass costs its roofline time divided by the stated efficiency")

    def pms(mode):
        return {k: PassCostModel(kind=k, coef={"roofline_ms": 1.0 / efficiency}, provenance=prov) for k in mode.pass_kinds}

    model_of = {get_model(name).family: name for name in (diffusion_model, ar_model)}  # family -> the model serving it

    return Profile(
        profile_id=f"{hw.id}-{precision}-roofline-eff{efficiency:g}",
        hardware=hw,
        precision=precision,
        engine={"name": "roofline", "efficiency": efficiency},
        modes={m.name: ModeProfile(m.name, model_of[m.model_family], assistant=ASSISTANT_FOR[model_of[m.model_family]] if m.assistant else None,
                                   pass_models=pms(m)) for m in all_modes() if m.model_family in model_of},
        parts=published_parts(),
        provenance=prov,
        created_at=now_iso(),
    ).validate()
