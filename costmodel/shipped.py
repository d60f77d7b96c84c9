"""The profiles shipped with the package (costmodel/data/profiles/*.json): the defaults
`simulate` and `plan` use when no --profile is given."""

from __future__ import annotations

from pathlib import Path

from costmodel.errors import UserError
from costmodel.hardware import get_hardware
from costmodel.schemas.profile import Profile


def shipped_dir() -> Path:
    return Path(__file__).with_name("data") / "profiles"  # beside this module (importlib.resources: ~15 ms of start-up for the same path)


def shipped_profiles() -> dict[str, Path]:
    """hardware id -> profile path. A file `<hardware>.json` is that GPU's default."""
    d = shipped_dir()
    return {p.stem: p for p in sorted(d.glob("*.json"))} if d.exists() else {}


def shipped_hardware() -> tuple[str, ...]:
    """The GPUs a profile ships for, in catalog-id order: what `plan` compares when no GPU is named."""
    return tuple(shipped_profiles())


def default_profile(hardware: str) -> Profile:
    """The shipped profile for a catalog GPU, or, where none is shipped, one priced from the
    roofline at the stated default efficiency (its provenance says so)."""
    hw = get_hardware(hardware)  # unknown names fail here with the list of known ones
    path = shipped_profiles().get(hardware)
    if path is not None:
        return Profile.load(path)
    # imported here: the roofline builder pulls in scipy (the commit prior), ~1 s of start-up that
    # every command on a shipped profile would otherwise pay
    from costmodel.baseline_profile import roofline_profile

    return roofline_profile(hardware, "fp8" if "fp8" in hw.tflops else "bf16")  # the shipped profiles' precision where the GPU has it


def resolve_profile(profile: str | None, hardware: str) -> Profile:
    """--profile PATH wins; otherwise the shipped default for --hardware."""
    if profile:
        if not Path(profile).exists():
            raise UserError(f"profile {profile} does not exist", "pass a profile JSON from `costmodel fit` or omit --profile to use the shipped one")
        return Profile.load(profile)
    return default_profile(hardware)
