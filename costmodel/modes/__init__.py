"""The registry of serving modes: one module per mode (base.py says what a mode declares), one
registration line per mode below. Everything that lists modes (CLI choices, profile validation,
the simulator's engines, plan order, chart styles, CSV rows) asks this registry."""

from __future__ import annotations

from costmodel.errors import UserError
from costmodel.modes.base import ModeDraws, ServingMode

_REGISTRY: dict[str, ServingMode] = {}


def register(mode: ServingMode) -> ServingMode:
    """Add a mode (an instance of a ServingMode subclass); its name must be new."""
    if mode.name in _REGISTRY:
        raise ValueError(f"mode {mode.name!r} is registered twice")
    _REGISTRY[mode.name] = mode
    return mode


def unregister(name: str) -> None:
    """Remove a mode (tests that register a toy mode clean up with this)."""
    _REGISTRY.pop(name, None)


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


def mode_order(name: str) -> int:
    """Sort key of a mode name in tables (unknown names last)."""
    m = _REGISTRY.get(name)
    return m.order if m is not None else 1_000


# ---- the registered modes: one line each ------------------------------------------------------
from costmodel.modes.diffusion import DiffusionMode  # noqa: E402
from costmodel.modes.ar import ArMode  # noqa: E402
from costmodel.modes.mtp import MtpMode  # noqa: E402

register(DiffusionMode())
register(ArMode())
register(MtpMode())

__all__ = ["ModeDraws", "ServingMode", "all_modes", "get_mode", "mode_names", "mode_order", "register", "unregister"]
