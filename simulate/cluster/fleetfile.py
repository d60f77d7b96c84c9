"""A fleet described in JSON (`costmodel plan --load-curve ... --fleet FILE`): pools that may mix
modes and GPUs, each with its autoscaler, router, price and the requests it takes.

    {"pools": [
      {"name": "short", "hardware": "h100-sxm", "mode": "diffusion", "takes": {"max_output_tokens": 512},
       "autoscaler": "request-rate:target=7", "min": 1, "max": 8},
      {"name": "long", "hardware": "rtx-5090", "mode": "mtp", "autoscaler": "queue-depth:target=16",
       "router": "least-tokens", "price_usd_per_gpu_hour": 0.9, "max_waiting": 256, "queue_timeout_s": 30}
    ]}

Fields per pool: name, hardware and mode (required); autoscaler (simulate/cluster/autoscalers
syntax, default static), min, max, initial (replicas), router, price_usd_per_gpu_hour (default the
catalog's), takes ({max_prompt_tokens, max_output_tokens, regimes}; a request goes to the first pool
that takes it, a pool without `takes` takes any), max_waiting, queue_timeout_s. Unknown fields are
errors (a typo must not be ignored).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from costmodel.errors import UserError
from costmodel.fields import MAX_REPLICAS, PRICE_USD_PER_GPU_HOUR
from costmodel.jsonfile import read_json
from simulate.cluster.autoscalers import parse_autoscaler
from simulate.cluster.classes import RequestClass
from simulate.cluster.pool import PoolSpec
from simulate.cluster.scaling import Scaling
from simulate.routers import DEFAULT_ROUTER

POOL_FIELDS = ("name", "hardware", "mode", "autoscaler", "min", "max", "initial", "router", "price_usd_per_gpu_hour", "takes",
               "max_waiting", "queue_timeout_s")
TAKES_FIELDS = ("max_prompt_tokens", "max_output_tokens", "regimes")


def _takes(d, where: str) -> RequestClass | None:
    if d is None:
        return None
    if not isinstance(d, dict) or set(d) - set(TAKES_FIELDS):
        raise UserError(f"{where}: takes must be an object with {', '.join(TAKES_FIELDS)}", 'e.g. "takes": {"max_output_tokens": 512}')
    for k in ("max_prompt_tokens", "max_output_tokens"):
        v = d.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise UserError(f"{where}: takes.{k} {v!r} must be an integer >= 1", "e.g. 512")
    regimes = d.get("regimes", [])
    if not isinstance(regimes, list):
        raise UserError(f"{where}: takes.regimes must be a list of regime names", 'e.g. ["R1", "R2"]')
    return RequestClass(d.get("max_prompt_tokens"), d.get("max_output_tokens"), tuple(str(r) for r in regimes))


def _count(d: dict, key: str, where: str, default):
    v = d.get(key, default)
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
        raise UserError(f"{where}: {key} {v!r} must be an integer >= 1", f'e.g. "{key}": 2')
    return v if v is None else MAX_REPLICAS.named(key).check(v, where)


def parse_pool(d, k: int, profile_of: Callable[[str], object], base: Scaling, where: str) -> PoolSpec:
    w = f"{where} pool {k + 1}"
    if not isinstance(d, dict):
        raise UserError(f"{w} is not an object", 'e.g. {"name": "a", "hardware": "h100-sxm", "mode": "mtp"}')
    bad = set(d) - set(POOL_FIELDS)
    if bad:
        raise UserError(f"{w} has unknown field(s) {', '.join(sorted(bad))}", f"fields are {', '.join(POOL_FIELDS)}")
    for key in ("hardware", "mode"):
        if not isinstance(d.get(key), str):
            raise UserError(f"{w} needs \"{key}\"", 'e.g. {"hardware": "h100-sxm", "mode": "mtp"}')
    name = str(d.get("name", f"{d['hardware']}/{d['mode']}"))
    lo, hi = _count(d, "min", w, base.min_replicas), _count(d, "max", w, base.max_replicas)
    scaling = replace(base, min_replicas=lo, max_replicas=hi, initial_replicas=_count(d, "initial", w, None))
    auto = parse_autoscaler(d["autoscaler"]) if d.get("autoscaler") is not None else None
    profile = profile_of(d["hardware"])
    profile.mode(d["mode"])
    price = d.get("price_usd_per_gpu_hour")
    if price is not None:  # NaN or Infinity (JSON readers take both) is refused here, not billed as a missing price
        if isinstance(price, bool) or not isinstance(price, (int, float)):
            raise UserError(f"{w}: price_usd_per_gpu_hour {price!r} is not a number", "e.g. 2.95")
        price = PRICE_USD_PER_GPU_HOUR.named("price_usd_per_gpu_hour").check(price, w)
    return PoolSpec(name, profile, d["mode"], autoscaler=auto, scaling=scaling, router=str(d.get("router", DEFAULT_ROUTER)),
                    price_usd_per_gpu_hour=price, takes=_takes(d.get("takes"), w), max_waiting=d.get("max_waiting"),
                    queue_timeout_s=d.get("queue_timeout_s")).check()


def load_fleet(path: str | Path, profile_of: Callable[[str], object], base: Scaling | None = None) -> list[PoolSpec]:
    """The pools of a fleet file (module docstring), each checked (one-line errors)."""
    where = f"fleet {path}"
    doc = read_json(Path(path), "fleet")
    if not isinstance(doc, dict) or set(doc) - {"pools", "description"} or not isinstance(doc.get("pools"), list) or not doc["pools"]:
        raise UserError(f"{where} must be an object with a non-empty \"pools\" list", 'e.g. {"pools": [{"hardware": "h100-sxm", "mode": "mtp"}]}')
    pools = [parse_pool(d, k, profile_of, base or Scaling(), where) for k, d in enumerate(doc["pools"])]
    names = [p.name for p in pools]
    if len(set(names)) != len(names):
        raise UserError(f"{where}: pool names repeat ({', '.join(names)})", "give each pool its own \"name\"")
    return pools
