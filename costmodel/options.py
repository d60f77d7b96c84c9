"""Parsing of list-valued CLI options shared by several commands (one-line errors on bad input)."""

from __future__ import annotations

from costmodel.errors import UserError
from costmodel.modes import mode_names


def parse_list(value: str | None, what: str) -> list[str]:
    """Comma-separated items; an empty list or an empty item (`1,,2`) is refused, not dropped."""
    items = [v.strip() for v in (value or "").split(",")]
    if not any(items):
        raise UserError(f"--{what} is empty", f"give a comma-separated list, e.g. --{what} a,b")
    if not all(items):
        raise UserError(f"--{what} {value!r} has an empty item", f"separate items by single commas, e.g. --{what} a,b")
    return items


def parse_modes(value: str | None, allowed: tuple[str, ...] | None = None) -> list[str]:
    """Registered serving modes (costmodel.modes), each once; `allowed` narrows them (e.g. the modes
    a backend can run). None: every registered mode, as the registry holds them now (a CLI default
    read at import time would miss modes registered later)."""
    allowed = mode_names() if allowed is None else allowed
    modes = list(mode_names()) if value is None else parse_list(value, "mode")
    for m in modes:
        if m not in allowed:
            raise UserError(f"--mode: unknown mode {m!r}", f"use one or more of {', '.join(allowed)}")
    if len(set(modes)) != len(modes):
        raise UserError(f"--mode lists a mode twice ({value})", "give each mode once")
    return modes


def parse_ints(value: str, what: str, minimum: int = 1) -> list[int]:
    out = []
    for v in parse_list(value, what):
        try:
            n = int(v)
        except ValueError:
            raise UserError(f"--{what}: {v!r} is not an integer", f"e.g. --{what} 1,2,4") from None
        if n < minimum:
            raise UserError(f"--{what}: {n} is below {minimum}", f"give integers >= {minimum}")
        out.append(n)
    return out


def parse_floats(value: str, what: str, minimum: float = 0.0, strict: bool = True) -> list[float]:
    out = []
    for v in parse_list(value, what):
        try:
            x = float(v)
        except ValueError:
            raise UserError(f"--{what}: {v!r} is not a number", f"e.g. --{what} 1,2.5,10") from None
        if x != x or (x <= minimum if strict else x < minimum):
            raise UserError(f"--{what}: {v} must be {'>' if strict else '>='} {minimum}", f"give positive numbers, e.g. --{what} 1,2,4")
        out.append(x)
    return out


def parse_key_values(values: tuple[str, ...] | list[str], what: str) -> dict[str, float]:
    """`--price h200=3.5 --price h100-sxm=2.9` -> {"h200": 3.5, ...}"""
    out: dict[str, float] = {}
    for item in values:
        for part in item.split(","):
            if not part.strip():
                continue
            if "=" not in part:
                raise UserError(f"--{what} {part!r} is not KEY=VALUE", f"e.g. --{what} h200=3.50")
            k, v = part.split("=", 1)
            try:
                x = float(v)
            except ValueError:
                raise UserError(f"--{what} {part!r}: {v!r} is not a number", f"e.g. --{what} h200=3.50") from None
            if x < 0 or x != x:
                raise UserError(f"--{what} {part!r} is negative", "give a value >= 0")
            out[k.strip()] = x
    return out
