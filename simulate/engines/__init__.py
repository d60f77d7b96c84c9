"""The registry of engines: how each serving mode advances on a replica. One module per engine (a
subclass of scheduler.Replica implementing `schedule`, `complete`, `enter_decode`, `drop_decoder`
and optionally `coast`), one registration line per engine below, under its mode's name
(costmodel/modes holds the rest of a mode: draws, pass kinds, step price)."""

from __future__ import annotations

from costmodel.errors import UserError
from simulate.scheduler import Replica

_REGISTRY: dict[str, type[Replica]] = {}


def register(mode: str, engine: type[Replica]) -> type[Replica]:
    """The engine of mode `mode` (its registered name); one engine per mode."""
    if mode in _REGISTRY:
        raise ValueError(f"an engine for mode {mode!r} is registered twice")
    _REGISTRY[mode] = engine
    return engine


def unregister(mode: str) -> None:
    """Remove a mode's engine (tests that register a toy mode clean up with this)."""
    _REGISTRY.pop(mode, None)


def engine_for(mode: str) -> type[Replica]:
    """The replica class that runs mode `mode`."""
    try:
        return _REGISTRY[mode]
    except KeyError:
        raise UserError(f"mode {mode!r} has no simulator engine", "register one in simulate/engines (simulate.engines.register)") from None


# ---- the registered engines: one line each ----------------------------------------------------
from costmodel.modes.ar import ArMode  # noqa: E402
from costmodel.modes.diffusion import DiffusionMode  # noqa: E402
from costmodel.modes.mtp import MtpMode  # noqa: E402
from simulate.engines.ar import ArReplica  # noqa: E402
from simulate.engines.diffusion import DiffusionReplica  # noqa: E402
from simulate.engines.mtp import MtpReplica  # noqa: E402

register(DiffusionMode.name, DiffusionReplica)
register(ArMode.name, ArReplica)
register(MtpMode.name, MtpReplica)

__all__ = ["engine_for", "register", "unregister"]
