"""Parsing of list-valued CLI options shared by several commands (one-line errors on bad input)."""

from __future__ import annotations

import math
from urllib.parse import urlsplit

from costmodel.errors import UserError
from costmodel.modes import mode_names

# Dask's comm protocols (distributed.comm.registry); http(s) is the dashboard, not the scheduler
SCHEDULER_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx", "inproc")


def parse_list(value: str | None, what: str, unique: bool = True) -> list[str]:
    """Comma-separated items; an empty list or an empty item (`1,,2`) is refused, not dropped, and
    (`unique`) an item given twice (`h200,h200`) is refused, not merged."""
    items = [v.strip() for v in (value or "").split(",")]
    if not any(items):
        raise UserError(f"--{what} is empty", f"give a comma-separated list, e.g. --{what} a,b")
    if not all(items):
        raise UserError(f"--{what} {value!r} has an empty item", f"separate items by single commas, e.g. --{what} a,b")
    twice = next((v for i, v in enumerate(items) if v in items[:i]), None) if unique else None
    if twice is not None:
        raise UserError(f"--{what} {value!r} lists {twice} twice", f"give each once, e.g. --{what} {','.join(dict.fromkeys(items))}")
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


def parse_profile_modes(value: str | None) -> list[str] | None:
    """--mode of a command that reads profiles (simulate, plan): None when not given, which means the
    modes the profile carries (Profile.mode_names), decided once the profile is read."""
    return None if value is None else parse_modes(value)


def _once(out: list, value: str, what: str) -> list:
    """A list option names each value once: a repeated one is a typo, never silently merged."""
    seen = set()
    for x in out:
        if x in seen:
            raise UserError(f"--{what} {value!r} lists {x:g} twice", f"give each value once, e.g. --{what} {','.join(f'{v:g}' for v in dict.fromkeys(out))}")
        seen.add(x)
    return out


def parse_ints(value: str, what: str, minimum: int = 1) -> list[int]:
    out = []
    for v in parse_list(value, what, unique=False):
        try:
            n = int(v)
        except ValueError:
            raise UserError(f"--{what}: {v!r} is not an integer", f"e.g. --{what} 1,2,4") from None
        if n < minimum:
            raise UserError(f"--{what}: {n} is below {minimum}", f"give integers >= {minimum}")
        out.append(n)
    return _once(out, value, what)


def parse_floats(value: str, what: str, minimum: float = 0.0, strict: bool = True, unique: bool = True) -> list[float]:
    """Comma-separated numbers above `minimum`; `unique`: each once (a grid: `--qps 1,1` is refused, not merged)."""
    out = []
    for v in parse_list(value, what, unique=False):
        try:
            x = float(v)
        except ValueError:
            raise UserError(f"--{what}: {v!r} is not a number", f"e.g. --{what} 1,2.5,10") from None
        if x != x or (x <= minimum if strict else x < minimum):
            raise UserError(f"--{what}: {v} must be {'>' if strict else '>='} {minimum}", f"give positive numbers, e.g. --{what} 1,2,4")
        out.append(x)
    return _once(out, value, what) if unique else out


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
            if x < 0 or x != x or x == math.inf:
                raise UserError(f"--{what} {part!r} is {'negative' if x < 0 else 'not a finite number'}", "give a finite value >= 0")
            key = k.strip()
            if not key:
                raise UserError(f"--{what} {part!r} has no key before '='", f"e.g. --{what} h200=3.50")
            if key in out:  # never silently last-wins: two values for one key is a typo or a conflict
                raise UserError(f"--{what} gives {key} twice ({out[key]:g} and {x:g})", f"give one --{what} {key}=VALUE")
            out[key] = x
    return out


def parse_scheduler(value: str, what: str = "--scheduler") -> str:
    """A Dask scheduler address, PROTOCOL://HOST:PORT (tcp://10.0.0.5:8786), checked before any
    connection: a missing or web scheme, a missing host or port, a port out of range."""
    v = value.strip()
    example = "write it as tcp://HOST:8786"
    if "://" not in v:
        raise UserError(f"{what} {value!r} has no protocol", example)
    try:
        u = urlsplit(v)
        port = u.port
    except ValueError as e:
        raise UserError(f"{what} {value!r} is not an address ({e})", example) from None
    if u.scheme in ("http", "https"):
        raise UserError(f"{what} {value!r} is a web address (the Dask dashboard serves http on :8787)",
                        "give the scheduler's own address, e.g. tcp://HOST:8786")
    if u.scheme not in SCHEDULER_SCHEMES:
        raise UserError(f"{what} {value!r}: protocol {u.scheme!r} is not one Dask speaks", f"use one of {', '.join(SCHEDULER_SCHEMES)}")
    if u.scheme == "inproc":
        return v
    if not u.hostname:
        raise UserError(f"{what} {value!r} has no host", example)
    if port is None or port == 0:
        raise UserError(f"{what} {value!r} has no port", f"add the scheduler's port, e.g. {u.scheme}://{u.hostname}:8786")
    if u.path not in ("", "/") or u.query or u.fragment:
        raise UserError(f"{what} {value!r} has a path or query after the port", example)
    return v


# Arrival rates: the floor keeps every gap (up to ~40 mean gaps for a Poisson tail) a finite number
# of seconds a float can add to, and a run's window measurable in ms; the ceiling keeps a point's
# request count bounded by the run-size check instead of overflowing it.
QPS_MIN = 1e-6
QPS_MAX = 1e9


def check_rate(qps: float, what: str = "--qps") -> float:
    """An arrival rate within [QPS_MIN, QPS_MAX] requests/s (finite gaps, bounded runs)."""
    if isinstance(qps, bool) or not isinstance(qps, (int, float)) or not math.isfinite(qps) or qps <= 0:
        raise UserError(f"{what} {qps!r} must be a positive, finite number of requests/s",
                        f"e.g. {what} 4" if what.startswith("--") else f"give a rate in [{QPS_MIN:g}, {QPS_MAX:g}] requests/s, e.g. 4")
    if qps < QPS_MIN:
        gap = 1 / qps
        apart = f"{gap:.3g} s" if math.isfinite(gap) else "more seconds than a float holds"
        raise UserError(f"{what} {qps:g} is below {QPS_MIN:g} requests/s: arrivals {apart} apart", f"give rates >= {QPS_MIN:g}")
    if qps > QPS_MAX:
        raise UserError(f"{what} {qps:g} is above {QPS_MAX:g} requests/s", f"give rates <= {QPS_MAX:g}")
    return float(qps)


# Closed-loop clients (`--concurrency N`, vllm bench serve --max-concurrency): each has one request in
# flight. The ceiling is far above any engine's running cap (vLLM's max_num_seqs is 1024 on Hopper):
# a larger N is a typo, and would only queue the extra clients' requests at the server.
CONCURRENCY_MAX = 100_000
# vllm bench serve --burstiness B: gamma inter-arrival gaps of shape B (B = 1: Poisson); the range keeps
# the gaps' coefficient of variation (1 / sqrt(B)) within [0.03, 32]
BURSTINESS_MIN, BURSTINESS_MAX = 1e-3, 1e3


def check_concurrency(n, what: str = "--concurrency") -> int:
    """A number of closed-loop clients: a whole number in [1, CONCURRENCY_MAX]."""
    ok = not isinstance(n, bool) and isinstance(n, (int, float)) and math.isfinite(n) and float(n).is_integer()
    if not ok:
        raise UserError(f"{what} {n!r} is not a whole number of clients", f"e.g. {what} 16")
    if n < 1:
        raise UserError(f"{what} {int(n)} is below 1: a closed loop needs at least one client", f"e.g. {what} 16")
    if n > CONCURRENCY_MAX:
        raise UserError(f"{what} {int(n):,} is above {CONCURRENCY_MAX:,} clients", f"give at most {CONCURRENCY_MAX:,} (more than any engine runs at once)")
    return int(n)


def parse_concurrency(value: str, what: str = "--concurrency") -> list[int]:
    """Comma-separated numbers of closed-loop clients, each once: `--concurrency 1,4,16`."""
    out = []
    for v in parse_list(value, what.lstrip("-")):
        try:
            x = float(v)
        except ValueError:
            raise UserError(f"{what}: {v!r} is not a whole number of clients", f"e.g. {what} 1,4,16") from None
        out.append(check_concurrency(x, what))
    if len(set(out)) != len(out):
        raise UserError(f"{what} lists a number twice ({value})", "give each once")
    return out


def check_burstiness(b, what: str = "--burstiness") -> float:
    """vllm bench serve's burstiness: the shape of gamma inter-arrival gaps (1: Poisson)."""
    if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) or b <= 0:
        raise UserError(f"{what} {b!r} must be a positive number (the gamma shape of the gaps; 1 is Poisson)", f"e.g. {what} 0.5")
    if not BURSTINESS_MIN <= b <= BURSTINESS_MAX:
        raise UserError(f"{what} {b:g} is outside [{BURSTINESS_MIN:g}, {BURSTINESS_MAX:g}]", f"give a shape in that range, e.g. {what} 0.5")
    return float(b)


def parse_burstiness(value: str, what: str = "--burstiness") -> float:
    """`--burstiness 0.5` (a string, so that a typo is this module's one line, not click's usage text)."""
    try:
        b = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{what} {value!r} is not a number (the gamma shape of the arrival gaps; 1 is Poisson)", f"e.g. {what} 0.5") from None
    return check_burstiness(b, what)
