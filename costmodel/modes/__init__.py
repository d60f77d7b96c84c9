"""The registry of serving modes: one module per mode (base.py says what a mode declares), one
registration line per mode below. Everything that lists modes (CLI choices, profile validation,
the simulator's engines, plan order, chart styles, CSV rows) asks this registry."""

from __future__ import annotations

from costmodel.errors import UserError
from costmodel.modes.base import ModeDraws, ProfilePart, ServingMode

_REGISTRY: dict[str, ServingMode] = {}
_PARTS: dict[str, ProfilePart] = {}  # the profile parts of the registered modes, in registration order


def register(mode: ServingMode) -> ServingMode:
    """Add a mode (an instance of a ServingMode subclass) and its profile parts; its name must be new."""
    if mode.name in _REGISTRY:
        raise ValueError(f"mode {mode.name!r} is registered twice")
    for part in mode.parts:
        if _PARTS.get(part.key, part) is not part:
            raise ValueError(f"profile part {part.key!r} is registered twice, by different objects")
    _REGISTRY[mode.name] = mode
    for part in mode.parts:
        _PARTS.setdefault(part.key, part)
    return mode


def unregister(name: str) -> None:
    """Remove a mode, and its profile parts no other mode uses (tests that register a toy mode
    clean up with this)."""
    mode = _REGISTRY.pop(name, None)
    used = {p.key for m in _REGISTRY.values() for p in m.parts}
    for part in mode.parts if mode is not None else ():
        if part.key not in used:
            _PARTS.pop(part.key, None)


def profile_parts() -> tuple[ProfilePart, ...]:
    """Every registered mode's profile parts (the profile's part keys, in JSON order)."""
    return tuple(_PARTS.values())


def find_part(key: str) -> ProfilePart | None:
    return _PARTS.get(key)


def mode_names() -> tuple[str, ...]:
    """Registered mode names in display order."""
    return tuple(m.name for m in sorted(_REGISTRY.values(), key=lambda m: m.order))


def all_modes() -> tuple[ServingMode, ...]:
    return tuple(_REGISTRY[n] for n in mode_names())


def get_mode(name: str) -> ServingMode:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UserError(f"unknown mode {name!r}", f"use one of {', '.join(mode_names())}") from None


def modes_of_family(family: str) -> tuple[ServingMode, ...]:
    """The modes a model family serves (a catalog model's `family`)."""
    return tuple(m for m in all_modes() if m.model_family == family)


def family_of_pass(kind: str) -> str:
    """The model family that runs a pass kind (the family of every mode that runs it)."""
    fams = {m.model_family for m in all_modes() if kind in m.pass_kinds}
    if len(fams) != 1:
        raise UserError(f"pass kind {kind!r} is run by {len(fams)} model families", "every pass kind belongs to one model family")
    return fams.pop()


def harness_modes() -> tuple[ServingMode, ...]:
    """The modes the in-process harness measures (`ServingMode.harness` set)."""
    return tuple(m for m in all_modes() if m.harness)


def recorded_mode(sign) -> ServingMode:
    """The first mode (display order) for which `sign(mode)` holds of a recording, else the mode of
    recordings that show no other's signs (`recorded_default`)."""
    return next((m for m in all_modes() if sign(m)), None) or next(m for m in all_modes() if m.recorded_default)


def mode_order(name: str) -> int:
    """Sort key of a mode name in tables (unknown names last)."""
    m = _REGISTRY.get(name)
    return m.order if m is not None else 1_000


# ---- the registered modes: one line each ------------------------------------------------------
from costmodel.modes.ar import ArMode  # noqa: E402
from costmodel.modes.diffusion import DiffusionMode  # noqa: E402
from costmodel.modes.mtp import MtpMode  # noqa: E402

register(DiffusionMode())
register(ArMode())
register(MtpMode())

__all__ = ["ModeDraws", "ProfilePart", "ServingMode", "all_modes", "find_part", "get_mode", "family_of_pass", "harness_modes", "mode_names", "mode_order", "recorded_mode",
           "modes_of_family", "profile_parts", "register", "unregister"]
