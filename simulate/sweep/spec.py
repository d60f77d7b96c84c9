"""A declarative sweep: what `costmodel sweep SPEC` reads (YAML or JSON) and the points it expands to.

    kind: simulate            # or plan: the fewest replicas meeting `slo` at every point
    base:                     # every point
      hardware: h200
      duration_s: 60
    grid:                     # the cartesian product, in the order written
      mode: [diffusion, ar, mtp]
      qps: [1, 2, 4, 8]
      max_num_seqs: [64, 256]
      workload.prompt_tokens: [256, 1024]    # a field of the inline workload object
    points:                   # optional: explicit points (each over `base`), after the grid's

Every point's parameters are checked here, before any simulation, so a typo is one line naming it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

from costmodel.engine_settings import USER_SETTINGS
from costmodel.errors import UserError
from costmodel.inputs import fields_of
from costmodel.hardware import default_hardware
from costmodel.jsonfile import NESTING_FIX, DuplicateKey, loads_unique
from simulate.routers import DEFAULT_ROUTER, router_names

KINDS = ("simulate", "plan")
# parameter -> (type check, what it is); engine settings are flat (max_num_seqs, ...)
PARAMS = {
    "hardware": (str, "GPU catalog id of the shipped profile"),
    "profile": (str, "profile JSON path (instead of the shipped one for `hardware`)"),
    "mode": (str, "serving mode"),
    "qps": ((int, float), "offered load, requests/s (all replicas together)"),
    "replicas": (int, "replicas behind the router (kind simulate)"),
    "duration_s": ((int, float), "seconds of arrivals per point"),
    "n_requests": (int, "arrivals per point (instead of duration_s)"),
    "seed": (int, "seed of the workload and every draw"),
    "router": (str, f"one of {', '.join(router_names())} (simulate/routers/)"),
    "warmup_frac": ((int, float), "share of the arrival window left out of percentiles"),
    **USER_SETTINGS,  # engine settings (costmodel/engine_settings.py)
    "workload": ((str, dict), "workload JSON path, or an inline workload object"),
    "slo": (str, "latency bounds, e.g. p95_ttft_ms<=1000 (kind plan: the search target; simulate: judged)"),
    "max_replicas": (int, "kind plan: give up above this many replicas"),
    "price": ((int, float), "on-demand USD per GPU-hour of the point's GPU (its cost columns; reserved and spot discount from it)"),
    "pricing": (str, "pricing model of the cost columns: on-demand, reserved-1y, reserved-3y, spot, onprem"),
}
DEFAULTS = {"hardware": default_hardware(), "duration_s": 60.0, "seed": 0, "replicas": 1, "router": DEFAULT_ROUTER, "warmup_frac": 0.1,
            "max_replicas": 64}
REQUIRED = ("mode", "qps")
SPEC_FIELDS = {i.name: i for i in fields_of("sweep spec")}


@dataclass(frozen=True)
class SweepPoint:
    """One point's parameters (defaults filled in) and its id: a hash of them, stable across runs."""

    point_id: str
    params: dict


# Points per sweep unless --max-points says otherwise: a point is 0.1-1 CPU s and one file in
# OUT/points, so 10,000 is hours on a workstation; a typo in a grid (qps: range(1e6)) is refused at once.
MAX_POINTS = 10_000


@dataclass
class SweepSpec:
    kind: str
    points: list[SweepPoint]
    source: str


def point_id(params: dict) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _read(path: Path):
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise UserError(f"sweep spec {path} cannot be read ({e.strerror})", "give the path of a YAML or JSON sweep spec") from None
    except UnicodeDecodeError as e:
        raise UserError(f"sweep spec {path} is not UTF-8 text (byte {e.start}: {e.object[e.start:e.start + 1]!r})",
                        "save it as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None
    try:
        return _parse(path, text)
    except RecursionError:
        raise UserError(f"sweep spec {path} nests deeper than a reader follows", NESTING_FIX) from None


def _parse(path: Path, text: str):
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml  # the `sweep` extra; only YAML specs need it

        try:
            return yaml.load(text, Loader=_unique_key_loader(yaml))
        except yaml.YAMLError as e:
            raise UserError(f"sweep spec {path} is not valid YAML ({' '.join(str(e).split())})", "fix the YAML syntax") from None
    try:
        return loads_unique(text)
    except json.JSONDecodeError as e:
        raise UserError(f"sweep spec {path} is not valid JSON (line {e.lineno}: {e.msg})", "fix the JSON, or name the file .yaml") from None
    except DuplicateKey as e:
        raise UserError(f"sweep spec {path} gives the key {e.key!r} twice in one mapping", "keep one (JSON readers silently keep the last)") from None


def _unique_key_loader(yaml):
    """yaml.SafeLoader refusing a mapping that gives one key twice (PyYAML keeps the last, silently)."""

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep)

        def construct_document(self, node):
            size = _expanded_size(node, {}, set())
            if size > YAML_MAX_NODES:  # aliases of aliases (a "billion laughs" spec) expand when the points are built
                raise yaml.constructor.ConstructorError(None, None, f"expands to more than {YAML_MAX_NODES:,} values through its aliases "
                                                        f"({size:,.0f})", node.start_mark)
            return super().construct_document(node)

    return UniqueKeyLoader


YAML_MAX_NODES = 1_000_000  # values a spec expands to, aliases followed: far above any sweep (MAX_POINTS points of a few fields)


def _expanded_size(node, memo: dict, open_: set) -> float:
    """Values `node` stands for once every alias is expanded (memoised per node, so it is computed in
    the size of the document, not of its expansion); a node that contains itself counts as unbounded."""
    key = id(node)
    if key in memo:
        return memo[key]
    if key in open_:
        return float("inf")
    open_.add(key)
    children = node.value if isinstance(node.value, list) else []
    total = 1.0
    for c in children:
        for sub in (c if isinstance(c, tuple) else (c,)):
            total += _expanded_size(sub, memo, open_)
    open_.discard(key)
    memo[key] = total
    return total


def _check_value(where: str, name: str, value) -> None:
    if name.startswith("workload."):
        return  # checked with the whole workload object (parse_workload)
    if name not in PARAMS:
        raise UserError(f"{where}: unknown parameter {name!r}", f"parameters are {', '.join(PARAMS)} and workload.<field>")
    types = PARAMS[name][0]
    if (isinstance(value, bool) and types is not bool) or not isinstance(value, types):
        raise UserError(f"{where}: {name} = {value!r} is not {PARAMS[name][1]}", f"give {name} a {' or '.join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))}")
    decl = SPEC_FIELDS.get(name)
    if decl is not None and decl.field is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        decl.field.check(value, where)  # the table's range, named as the spec names it (costmodel/inputs.py)


def _params(where: str, d) -> dict:
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise UserError(f"{where} must be a mapping of parameter -> value", "e.g. base: {hardware: h200}")
    for k, v in d.items():
        _check_value(f"{where}.{k}", str(k), v)
    return dict(d)


def _grid(where: str, d, max_points: int) -> list[dict]:
    if d is None:
        return []
    if not isinstance(d, dict) or not d:
        raise UserError(f"{where} must be a non-empty mapping of parameter -> list of values", "e.g. grid: {qps: [1, 2, 4]}")
    for k, vs in d.items():
        if not isinstance(vs, list) or not vs:
            raise UserError(f"{where}.{k} must be a non-empty list", f"e.g. {k}: [a, b]")
    size = math.prod(len(vs) for vs in d.values())
    if size > max_points:  # before building (or checking) a single point
        shape = " x ".join(f"{len(vs):,} {k}" for k, vs in d.items())
        raise UserError(f"{where} has {size:,} points ({shape}), above the bound of {max_points:,} points per sweep",
                        "narrow the grid or split it into several specs; or pass --max-points N to run it")
    for k, vs in d.items():
        for i, v in enumerate(vs):
            _check_value(f"{where}.{k}", str(k), v)
            key = json.dumps(v, sort_keys=True, default=str)
            if any(json.dumps(w, sort_keys=True, default=str) == key or (_num(w) is not None and _num(w) == _num(v)) for w in vs[:i]):
                raise UserError(f"{where}.{k} lists {v!r} twice", "give each value once (a sweep never merges points silently)")
    keys = list(d)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(d[k] for k in keys))]


def _resolve(where: str, base: dict, over: dict, kind: str) -> dict:
    """Defaults <- base <- the point; workload.<field> keys fold into one inline workload object."""
    given = {**base, **over}
    if "n_requests" in given and "duration_s" in given:
        raise UserError(f"{where}: both n_requests and duration_s are set", "give one length per point")
    p = {k: v for k, v in DEFAULTS.items() if not (k == "duration_s" and "n_requests" in given)}
    p.update(given)
    fields = {k[len("workload."):]: p.pop(k) for k in list(p) if k.startswith("workload.")}
    if fields:
        if isinstance(p.get("workload"), str):
            raise UserError(f"{where}: workload.<field> parameters need an inline workload, not the file {p['workload']!r}",
                            "write the workload object inline in base.workload")
        p["workload"] = {**(p.get("workload") or {}), **fields}
    for k in REQUIRED:
        if k not in p:
            raise UserError(f"{where}: no {k!r} (in base, grid or the point)", f"add {k} to base or grid")
    if kind == "plan":
        p.pop("replicas", None)
        p.setdefault("slo", "p95_ttft_ms<=1000,p95_e2e_ms<=5000")
    else:
        p.pop("max_replicas", None)
    p["qps"] = float(p["qps"])
    return p


def parse_spec(d, source: str = "sweep spec", max_points: int = MAX_POINTS) -> SweepSpec:
    """A spec mapping -> SweepSpec (every point resolved; two points with the same parameters refused)."""
    if not isinstance(d, dict):
        raise UserError(f"{source} is not a mapping", "write kind/base/grid/points at the top level")
    extra = set(d) - {"kind", "base", "grid", "points", "description"}
    if extra:
        raise UserError(f"{source}: unknown field(s) {', '.join(sorted(map(str, extra)))}", "fields are kind, base, grid, points, description")
    kind = d.get("kind", "simulate")
    if kind not in KINDS:
        raise UserError(f"{source}: kind {kind!r} is unknown", f"use one of {', '.join(KINDS)}")
    base = _params(f"{source}: base", d.get("base"))
    pts = d.get("points")
    if pts is not None and not isinstance(pts, list):
        raise UserError(f"{source}: points must be a list of mappings", "e.g. points: [{mode: ar, qps: 2}]")
    if len(pts or []) > max_points:
        raise UserError(f"{source} lists {len(pts):,} points, above the bound of {max_points:,} points per sweep",
                        "split it into several specs, or pass --max-points N to run it")
    overs = _grid(f"{source}: grid", d.get("grid"), max_points - len(pts or []))
    overs += [_params(f"{source}: points[{i}]", p) for i, p in enumerate(pts or [])]
    if not overs:
        overs = [{}]
    out: dict[str, SweepPoint] = {}
    first: dict[str, int] = {}
    for i, o in enumerate(overs):
        p = _resolve(f"{source}: point {i + 1}", base, o, kind)
        pid = point_id(p)
        if pid in out:
            raise UserError(f"{source}: point {i + 1} ({_label(o)}) is point {first[pid] + 1} again: the same parameters",
                            "drop one (a sweep never merges points silently)")
        out[pid], first[pid] = SweepPoint(pid, p), i
    return SweepSpec(kind, list(out.values()), source)


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _label(over: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in over.items()) or "base only"


def load_spec(path: str | Path, max_points: int = MAX_POINTS) -> SweepSpec:
    p = Path(path)
    return parse_spec(_read(p), source=f"sweep spec {p}", max_points=max_points)
