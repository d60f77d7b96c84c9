"""The profile: the one document the simulator reads. Pass cost models (fitted with statsmodels
on roofline features), commit statistics per regime, MTP acceptance, the hardware it is for, and
provenance for every part (measured / projected / published / roofline / endpoint).

Pass cost models are data here; what prices them is costmodel/stepcost (one predictor per
`PassCostModel.model_type`: linear, table, roofline; the profile's resolution and every price cache).
A table model keeps linear coefficients too: they price the pass off the table's GPU and precision
(a projected profile carries a table projected point by point to its own GPU, and as its fallback
the source's median ratio to the roofline: measure/fit/projection.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from costmodel.errors import UserError
from costmodel.hardware import HardwareSpec, catalog, validate_spec
from costmodel.jsonfile import read_json
from costmodel.models import ModelShape, get_model
from costmodel.modes import ServingMode, find_part, get_mode, mode_names, mode_order, profile_parts
from costmodel.modes.diffusion import CommitStats
from costmodel.modes.mtp import MtpAcceptance
from costmodel.precision import PRECISIONS, Precision, get_precision
from costmodel.roofline import Roofline, Segment, default_tokens
from costmodel.records import PROVENANCE_KINDS, Distribution, Provenance
from costmodel.stepcost import get_predictor, predictor_names, resolve
from costmodel.stepcost import host_overhead
from costmodel.stepcost.linear import FEATURES, features, linear_ms
from costmodel.stepcost.resolved import ResolvedProfile
from costmodel.stepcost.table import CONTEXT_OFFSET, table_model

SCHEMA_VERSION = 1
# re-exported for the modules that read them with the schema: FEATURES, features (the linear model's),
# CONTEXT_OFFSET (the table model's) and ResolvedProfile from costmodel/stepcost; the shared records
# (costmodel/records.py); the modes' profile parts' records (costmodel/modes)
__all__ = ["CONTEXT_OFFSET", "FEATURES", "PROVENANCE_KINDS", "CommitStats", "Distribution", "MtpAcceptance", "Provenance", "ResolvedProfile",
           "features"]


@dataclass
class FitDiagnostics:
    n_obs: int
    r2: float | None = None
    mape_pct: float | None = None  # in-sample
    cv_mape_pct: float | None = None  # k-fold held-out
    heldout_mape_pct: float | None = None  # shapes left out of the fit entirely
    summary: str = ""  # statsmodels summary text (trimmed)


@dataclass
class PassTable:
    """Pass times of one kind on a full grid: ms[i][j][k] at seqs[i], tokens_per_seq[j],
    context_tokens[k] (see the module docstring for the interpolation), plus the token-proportional
    part of a pass (token_ms at token_m total tokens) and the per-step overhead inside every value,
    both used to price a pass that mixes kinds."""

    hardware: str  # catalog id of the GPU the table was composed for
    precision: str
    seqs: list[float]
    tokens_per_seq: list[float]
    context_tokens: list[float]
    ms: list[list[list[float]]]
    token_m: list[float]
    token_ms: list[float]
    overhead_ms: float = 0.0
    source: str = ""  # how the values were made (op tables, command)

    def validate(self, where: str) -> None:
        axes = {"seqs": (self.seqs, 1.0), "tokens_per_seq": (self.tokens_per_seq, 1.0), "context_tokens": (self.context_tokens, 0.0),
                "token_m": (self.token_m, 1.0)}
        for name, (xs, lo) in axes.items():
            if not isinstance(xs, list) or not xs or not all(_finite(x) and x >= lo for x in xs) or any(b <= a for a, b in zip(xs, xs[1:])):
                raise UserError(f"{where}: table axis {name} must be a non-empty, strictly increasing list of finite numbers >= {lo:g}",
                                "rebuild the profile (costmodel fit of its op table, measure/ops/passtable.py)")
        dims = (len(self.seqs), len(self.tokens_per_seq), len(self.context_tokens))
        ok = isinstance(self.ms, list) and len(self.ms) == dims[0] and all(
            isinstance(r, list) and len(r) == dims[1] and all(isinstance(c, list) and len(c) == dims[2] and all(_finite(v) and v > 0 for v in c)
                                                             for c in r) for r in self.ms)
        if not ok:
            raise UserError(f"{where}: table ms must be {dims[0]} x {dims[1]} x {dims[2]} (seqs x tokens_per_seq x context_tokens) "
                            "finite times > 0", "rebuild the profile (costmodel fit of its op table, measure/ops/passtable.py)")
        if not isinstance(self.token_ms, list) or len(self.token_ms) != len(self.token_m) or not all(_finite(v) and v > 0 for v in self.token_ms):
            raise UserError(f"{where}: table token_ms must hold one finite time > 0 per token_m value", "rebuild the profile (costmodel fit of its op table, measure/ops/passtable.py)")
        if not (_finite(self.overhead_ms) and self.overhead_ms >= 0):
            raise UserError(f"{where}: table overhead_ms must be a finite time >= 0", "rebuild the profile (costmodel fit of its op table, measure/ops/passtable.py)")

    def pass_ms(self, seqs: float, tokens: float, context: float) -> float:
        """Interpolated time of one pass of this kind (a single segment): costmodel/stepcost/table.py."""
        return table_model(self).pass_ms(seqs, tokens, context)

    def tokens_ms(self, m: float) -> float:
        """The token-proportional part of a pass over m tokens."""
        return table_model(self).tokens_ms(m)

    def __getstate__(self):
        return _data_only(self)


@dataclass
class PassCostModel:
    kind: str
    coef: dict[str, float]
    support: dict[str, list[float]] = field(default_factory=dict)  # feature/shape name -> [min, max] seen in the fit
    diagnostics: FitDiagnostics | None = None
    provenance: Provenance = field(default_factory=lambda: Provenance("roofline", "unfitted"))
    median_x_roofline: float | None = None  # measured / roofline time, median over the fit data
    model_type: str = "linear"  # a registered pass predictor (costmodel/stepcost): linear, table, roofline, engine-step
    table: PassTable | None = None  # model_type "table": the pass-time grid (coef stays the fallback off its GPU/precision)

    def table_for(self, hardware_id: str, precision: str) -> PassTable | None:
        """The table that prices this kind on that GPU and precision, else None (linear model)."""
        t = self.table
        if self.model_type == "table" and t is not None and t.hardware == hardware_id and t.precision == precision:
            return t
        return None

    def linear_ms(self, feats: dict[str, float]) -> float:
        return linear_ms(self.coef, feats)

    def extrapolated(self, shape: dict[str, float]) -> bool:
        """True when a shape lies outside the range the fit saw (by seqs, tokens, context)."""
        for k, (lo, hi) in self.support.items():
            if k in shape and not (lo <= shape[k] <= hi):
                return True
        return False


@dataclass
class ModeProfile:
    mode: str
    model: str  # ModelShape catalog name (target)
    assistant: str | None = None  # MTP drafter catalog name
    pass_models: dict[str, PassCostModel] = field(default_factory=dict)
    notes: str = ""

    @property
    def serving(self) -> ServingMode:
        """The mode's registry entry: the profile's mode key resolved where the profile is read
        (validate refuses a key the registry lacks); code below takes this object, not the name."""
        return get_mode(self.mode)


@dataclass(init=False)
class Profile:
    """The profile. Besides the fields below it carries every registered mode's profile parts
    (costmodel.modes.ProfilePart: `commit_stats` for diffusion, `mtp_acceptance` for MTP, ...), held
    in `parts`, read and set as attributes of their key, and written as top-level keys of the JSON
    after `modes`."""

    profile_id: str
    hardware: HardwareSpec  # the GPU it prices, resolved once where the profile is read: the simulator reads nothing else about it
    precision: str
    engine: dict
    modes: dict[str, ModeProfile]
    provenance: Provenance
    created_at: str
    notes: list[str]
    schema_version: int
    parts: dict[str, Any]  # part key -> its records

    def __init__(self, profile_id: str, hardware: HardwareSpec | dict, precision: str, engine: dict, modes: dict[str, ModeProfile],
                 provenance: Provenance | None = None, created_at: str = "", notes: list[str] | None = None,
                 schema_version: int = SCHEMA_VERSION, parts: dict[str, Any] | None = None, **named_parts: Any):
        unknown = [k for k in named_parts if find_part(k) is None]
        if unknown:
            raise TypeError(f"Profile() got unknown profile parts {unknown} (registered: {[p.key for p in profile_parts()]})")
        if not isinstance(hardware, HardwareSpec):  # a profile document's hardware section, checked as a hardware file's entry
            hardware = _hardware_of(hardware, "profile")
        self.profile_id, self.hardware, self.precision, self.engine, self.modes = profile_id, hardware, precision, engine, modes
        self.provenance = provenance if provenance is not None else Provenance("roofline", "")
        self.created_at, self.notes, self.schema_version = created_at, list(notes or []), schema_version
        given = {**(parts or {}), **named_parts}
        self.parts = {p.key: given[p.key] if p.key in given else p.empty() for p in profile_parts()}
        self.parts.update((k, v) for k, v in given.items() if k not in self.parts)

    def __getattr__(self, name: str):
        parts = self.__dict__.get("parts")
        part = find_part(name) if parts is not None and not name.startswith("_") else None
        if part is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return parts.setdefault(name, part.empty())  # a part registered after the profile was made

    def __setattr__(self, name: str, value) -> None:
        if "parts" in self.__dict__ and find_part(name) is not None:
            self.parts[name] = value
        else:
            object.__setattr__(self, name, value)

    # ---- I/O -----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        parts = d.pop("parts")
        d["hardware"] = self.hardware.to_dict()
        out = {}
        for k, v in d.items():
            out[k] = v
            if k == "modes":
                out.update(parts)
        if isinstance(self.__dict__.get("heldout_error"), dict):  # optional: the engine model's held-out error (pipeline/engine_loso.py)
            out["heldout_error"] = self.__dict__["heldout_error"]
        return out

    def save(self, path: str | Path) -> Path:
        from costmodel import atomic  # the writer, where a profile is written (fit): the simulator reads profiles only

        self.validate()
        return atomic.write_json(path, self.to_dict())

    @classmethod
    def from_dict(cls, d: Any, where: str = "profile") -> "Profile":
        try:
            if not isinstance(d, dict):
                raise TypeError("not a JSON object")
            if d.get("schema_version") != SCHEMA_VERSION:
                raise UserError(f"{where} has schema_version {d.get('schema_version')!r}; this costmodel reads {SCHEMA_VERSION}",
                                "regenerate it with `costmodel fit` or use a shipped profile")
            modes = {}
            for name, m in d["modes"].items():
                pms = {k: _pass_model(v) for k, v in m.get("pass_models", {}).items()}
                modes[name] = ModeProfile(mode=m["mode"], model=m["model"], assistant=m.get("assistant"), pass_models=pms, notes=m.get("notes", ""))
            prof = cls(
                profile_id=d["profile_id"], hardware=_hardware_of(d["hardware"], where), precision=d["precision"], engine=d.get("engine", {}),
                modes=modes, parts={p.key: p.load(d.get(p.key)) for p in profile_parts()},
                provenance=Provenance(**d["provenance"]), created_at=d.get("created_at", ""), notes=list(d.get("notes", [])),
            )
        except UserError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise UserError(f"{where} is not a valid costmodel profile ({e.__class__.__name__}: {e})", "regenerate it with `costmodel fit` or `costmodel profile validate` it") from None
        if isinstance(d.get("heldout_error"), dict):
            prof.__dict__["heldout_error"] = d["heldout_error"]
        prof.validate(where)
        return prof

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        return cls.from_dict(read_json(path, "profile"), f"profile {path}")

    def validate(self, where: str = "profile") -> "Profile":
        check_physical(self, where)
        self.provenance.validate(where)
        if not self.modes:
            raise UserError(f"{where} has no modes", f"a profile needs at least one of {', '.join(mode_names())}")
        for name in self.modes:
            _check_mode(self, name, where)
        _check_engine(self, where)
        for part in profile_parts():
            part.validate(getattr(self, part.key), where)
        return self

    # ---- pricing: costmodel/stepcost resolves the profile and owns its caches -----------------
    def resolved(self) -> ResolvedProfile:
        """The catalog objects the profile names, resolved once per profile object."""
        return resolve(self)

    def hardware_spec(self) -> HardwareSpec:
        return self.hardware

    def roofline(self, mode: str) -> Roofline:
        return resolve(self).roofline(mode)

    def pass_ms(self, mode: str, segments) -> float:
        """Predicted milliseconds of ONE forward pass over `segments` (tuple of roofline.Segment)."""
        return resolve(self).cost(mode).pass_ms(segments)

    def __getstate__(self):
        return _data_only(self)

    @property
    def regimes(self) -> dict:
        """The workload regimes the profile carries: regime -> its records (`content_length`: output
        tokens per generation), held by the registered profile part that defines them
        (ProfilePart.defines_regimes: diffusion's commit statistics); {} when none does."""
        part = next((p for p in profile_parts() if p.defines_regimes), None)
        return getattr(self, part.key) if part is not None else {}

    def mode_names(self) -> list[str]:
        """The modes this profile carries, in the registry's display order: what simulate and plan run
        when no --mode is given (a mode registered since the profile was written is not asked of it)."""
        return sorted(self.modes, key=mode_order)

    def mode(self, mode: str) -> ModeProfile:
        try:
            return self.modes[mode]
        except KeyError:
            raise UserError(f"profile {self.profile_id} has no mode {mode!r}", f"it has {', '.join(self.modes)}") from None


# ---- physical plausibility: a profile is an input like any other ----------------------------------
# A profile's hardware section describes the GPU its prices are for. One naming a catalog GPU must
# be that GPU (a hardware file may not redefine a catalog GPU either: costmodel/hardware.py), every
# step price must be a finite time a fit could have made, and the commit statistics must describe
# canvases a request can fill.
PHYSICAL = ("memory_gb", "memory_bandwidth_tbps", "tflops")
COEF_MAX = 1e6  # ms per feature unit (a feature is ms, tokens or sequences): above it a pass of one token takes 17 minutes
WEIGHT_SHARE = 0.75  # a precision suggested leaves a quarter of the memory to KV cache, activations and the CUDA context
INTERCEPT_MIN_MS = -1e3  # a fit's intercept under a steeper slope is a few ms below zero, never a second


def _hardware_of(d, where: str) -> HardwareSpec:
    if not isinstance(d, dict):
        raise UserError(f"{where}: hardware is not an object", "give the catalog entry's fields (costmodel hardware --template)")
    return validate_spec(str(d.get("id", "?")), d, f"{where} (hardware)")


def check_physical(p: "Profile", where: str) -> None:
    """The GPU, precision, weights and the parts' numbers of a profile, as a physical machine allows."""
    hw = p.hardware
    known = catalog().get(hw.id)
    if known is not None:
        diff = [f for f in PHYSICAL if getattr(hw, f) != getattr(known, f)]
        if diff:
            shown = ", ".join(f"{f} {getattr(hw, f)!r} (catalog {getattr(known, f)!r})" for f in diff)
            raise UserError(f"{where}: its hardware section redefines the catalog GPU {hw.id!r}: {shown}",
                            f"price a GPU of another memory or speed under an id of its own (e.g. {hw.id}-custom), or restore the catalog's numbers")
    prec = get_precision(p.precision)
    hw.peak_tflops(prec)  # a format the GPU lacks: one line naming the formats it has
    for name, m in p.modes.items():
        params = get_model(m.model).total_params + (get_model(m.assistant).total_params if m.assistant else 0)
        weights_gb = params * prec.weight_bytes / 1e9
        if weights_gb > hw.memory_gb:
            fits = [q.name for q in PRECISIONS.values() if q.compute in hw.tflops and params * q.weight_bytes / 1e9 <= WEIGHT_SHARE * hw.memory_gb]
            raise UserError(f"{where}: mode {name}'s {p.precision} weights take {weights_gb:.1f} GB, more than {hw.id}'s {hw.memory_gb:g} GB",
                            "a replica must hold its weights: " + (f"use --precision {' or '.join(fits)}, or " if fits else "") + "a GPU with more memory")
        for kind, pm in m.pass_models.items():
            floored = pm.provenance.kind != "endpoint" and get_predictor(pm.model_type).linear_above_roofline if pm.model_type in predictor_names() else True
            if not floored and pm.coef.get("const", 0.0) < 0:
                raise UserError(f"{where}: pass model {name}/{kind} has a negative intercept const={pm.coef['const']!r} ms, and its predictor "
                                f"({pm.model_type}) is not held above the roofline: the simulator would floor every step at the roofline",
                                "refit it (`costmodel fit`) or give const >= 0")
            for f, c in pm.coef.items():
                if isinstance(c, (int, float)) and math.isfinite(c) and (abs(c) > COEF_MAX or (f == "const" and c < INTERCEPT_MIN_MS)):
                    bound = f"below {INTERCEPT_MIN_MS:g} ms" if f == "const" and c < INTERCEPT_MIN_MS else f"beyond +-{COEF_MAX:g}"
                    raise UserError(f"{where}: pass model {name}/{kind} coefficient {f}={c!r} is {bound}",
                                    "refit it (`costmodel fit`): no fitted step price is that large")
    eng = p.engine if isinstance(p.engine, dict) else {}
    canvases = [int(eng.get("canvas_length") or get_model(m.model).canvas_length or 0) for name, m in p.modes.items()
                if name in mode_names() and get_mode(name).canvas_sampler]
    canvas = min([c for c in canvases if c > 0], default=None)
    for r, c in (p.regimes or {}).items():
        at = f"{where}: commit_stats.{r}"
        if canvas is not None and isinstance(c.tokens_per_call, (int, float)) and c.tokens_per_call > canvas:
            raise UserError(f"{at}.tokens_per_call {c.tokens_per_call:g} is more than the {canvas}-token canvas holds: no canvas produces it",
                            "regenerate the profile (commit statistics recorded at its canvas length)")
        if not (isinstance(c.tokens_per_call, (int, float)) and math.isfinite(c.tokens_per_call) and c.tokens_per_call > 0):
            raise UserError(f"{at}.tokens_per_call {c.tokens_per_call!r} is not a positive number of tokens", "a commit call commits at least one token: regenerate the profile")
        bad = [v for v in c.content_length.values if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0)]
        if bad:
            raise UserError(f"{at}.content_length holds {bad[0]!r}, not a number of tokens >= 0", "regenerate the profile")
        steps = [v for v in c.steps_per_canvas.values if not (isinstance(v, (int, float)) and math.isfinite(v) and v <= 1e5)]
        if steps:
            raise UserError(f"{at}.steps_per_canvas holds {steps[0]!r}, not a finite number of steps", "regenerate the profile")


# ---- the engine section: which engine and kernel origin the profile prices ---------------------
# engine["kernel_origin"]: whose kernels its pass costs are of. Today's shipped ops profiles time the
# fastest serving-grade kernel per op (the committed op tables, data/runs/ops, composed by measure/ops)
# with no engine around them: a labelled what-if. A profile fitted from recorded engine steps prices
# that engine's own kernels.
KERNEL_ORIGIN_KEY = "kernel_origin"
KERNEL_ORIGINS = {
    "ops-fastest": "the fastest kernels this project times per op (its op tables, data/runs/ops); alone, with no engine step term, a what-if engine",
    "vllm": "vLLM's own kernels, as its engine dispatched them (recorded engine steps or a calibration run)",
    "transformers": "transformers' own model modules (eager or torch.compile), no serving engine",
}
KERNEL_ORIGIN_OF_ENGINE = {"ops": "ops-fastest", "vllm": "vllm", "transformers": "transformers"}  # implied by an engine section without one


def kernel_origin(p: "Profile") -> str:
    """Whose kernels the profile's pass costs price (its engine section's, else implied by its engine name; '' unknown)."""
    eng = p.engine if isinstance(p.engine, dict) else {}
    return str(eng.get(KERNEL_ORIGIN_KEY) or KERNEL_ORIGIN_OF_ENGINE.get(str(eng.get("name", "")), ""))


# engine["frontend_latency_ms"][mode]: what the engine's front-end adds to every request's first
# token and finish as its client sees them (input processing before the engine schedules it, output
# processing after): fitted by simulation on a recorded engine's low-load loads (simulate/calibrate.py)
FRONTEND_LATENCY_KEY = "frontend_latency_ms"


def frontend_latency_ms(p: "Profile", mode: str) -> float:
    """The front-end latency the profile carries for `mode` (0 where it carries none)."""
    eng = p.engine if isinstance(p.engine, dict) else {}
    v = (eng.get(FRONTEND_LATENCY_KEY) or {}).get(mode, 0.0)
    return float(v.get("ms", 0.0) if isinstance(v, dict) else v)


# engine["frontend_handover_ms"][mode]: the front end hands requests to the engine core one at a time (vLLM's
# AsyncLLM processes each request's input serially), this long each: a single-server queue ahead of the engine,
# which spreads a burst sent at once over the engine's first steps (simulate/sim.py). Fitted on the recorded
# opening bursts of closed loops (simulate/calibrate.py frontend_handover_fit); absent: 0, no queue.
FRONTEND_HANDOVER_KEY = "frontend_handover_ms"


def frontend_handover_ms(p: "Profile", mode: str) -> float:
    """The front end's per-request handover the profile carries for `mode` (0 where it carries none)."""
    eng = p.engine if isinstance(p.engine, dict) else {}
    v = (eng.get(FRONTEND_HANDOVER_KEY) or {}).get(mode, 0.0)
    return float(v.get("ms", 0.0) if isinstance(v, dict) else v)


# engine["engine_pickup_ms"][mode]: an idle engine core, woken by a request, starts its first step this long after
# it, on every request handed over by then (vLLM's EngineCore takes the request in, drains its input queue, then
# schedules). Read off the recorded opening bursts (simulate/calibrate.py engine_pickup_fit); absent: 0, at once.
ENGINE_PICKUP_KEY = "engine_pickup_ms"


def engine_pickup_ms(p: "Profile", mode: str) -> float:
    """The idle engine core's pickup the profile carries for `mode` (0 where it carries none)."""
    eng = p.engine if isinstance(p.engine, dict) else {}
    v = (eng.get(ENGINE_PICKUP_KEY) or {}).get(mode, 0.0)
    return float(v.get("ms", 0.0) if isinstance(v, dict) else v)


def prices(p: "Profile") -> str:
    """One line: which engine and kernel origin the profile prices, and whether engine host work is in it."""
    eng = p.engine if isinstance(p.engine, dict) else {}
    ko = kernel_origin(p)
    host = eng.get(host_overhead.HOST_OVERHEAD_KEY) or {}
    head = f"engine {eng.get('name', '?')}{' ' + str(eng['version']) if eng.get('version') else ''}, kernels {ko or 'unknown'}"
    head += f" ({KERNEL_ORIGINS[ko]})" if ko in KERNEL_ORIGINS else ""
    if not host:
        return head + "; no engine host overhead term"
    net = sorted(m for m, r in host.items() if isinstance(r, dict) and r.get("net_of_overlap"))
    own = sorted(m for m in host if m not in net)
    parts = ([f"engine step term calibrated to end-to-end vLLM figures for {', '.join(net)}"] if net else []) + \
        ([f"engine host overhead for {', '.join(own)}"] if own else [])
    return head + "; " + "; ".join(parts)


def _check_engine(p: "Profile", where: str) -> None:
    eng = p.engine if isinstance(p.engine, dict) else {}
    ko = eng.get(KERNEL_ORIGIN_KEY)
    if ko is not None and ko not in KERNEL_ORIGINS:
        raise UserError(f"{where}: engine.{KERNEL_ORIGIN_KEY} {ko!r} is unknown", f"kernel origins are {', '.join(KERNEL_ORIGINS)}")
    host_overhead.check(eng, p.modes, where)


def _check_mode(p: Profile, name: str, where: str) -> None:
    """A registered mode, its models, the profile parts it draws from and a valid pass model per kind."""
    m = p.modes[name]
    if name not in mode_names() or m.mode != name:
        raise UserError(f"{where}: mode {name!r} is unknown or mislabelled", f"modes are {', '.join(mode_names())}")
    serving = get_mode(name)
    get_model(m.model)
    if serving.assistant:
        if not m.assistant:
            raise UserError(f"{where}: mode {name} lacks its assistant model", f"set modes.{name}.assistant")
        get_model(m.assistant)
    for part in serving.parts:
        if not getattr(p, part.key):
            raise UserError(f"{where}: mode {name} needs {part.key}", part.fix)
    for kind in serving.pass_kinds:
        if kind not in m.pass_models:
            raise UserError(f"{where}: mode {name} lacks a cost model for pass kind {kind}", "refit or regenerate the profile")
    for kind, pm in m.pass_models.items():
        _check_model_type(pm, f"{where}: pass model {name}/{kind}")
        names = getattr(get_predictor(pm.model_type), "coefficients", None) or FEATURES  # its predictor's own names, else the roofline features
        bad = [f for f in pm.coef if f not in names]
        if bad:
            raise UserError(f"{where}: pass model {name}/{kind} uses unknown features {bad}", f"features are {', '.join(names)}")
        _check_coefficients(pm, f"{where}: pass model {name}/{kind}")
        pm.provenance.validate(f"{where}: {name}/{kind}")
    _check_above_roofline(p, name, f"{where}: pass model {name}")


# Features a fit may weight below zero: an intercept under a steeper slope, and kv_ms, the KV share
# of memory_ms, which re-prices KV bytes (kv_ms + memory_ms >= 0 keeps every byte priced >= 0).
# Both are still held above the roofline on the model's support (_check_above_roofline).
SIGNED_FEATURES = ("const", "kv_ms")
# A regime's change of slope per token (costmodel/stepcost/linear.py): past the largest CUDA graph an
# engine's eager steps sit on the host's launch floor, so their time grows more slowly with the step
# than the graphs' did, until the GPU's work crosses that floor (a knee). Each regime's slope stays >= 0.
SIGNED_SLOPES = ("graph_off_tokens",)


def slope_floor_ok(coef: dict[str, float]) -> bool:
    """Every regime's slope per token >= 0: tokens plus any combination of the signed changes."""
    base = coef.get("tokens", 0.0)
    return base + sum(min(0.0, coef.get(f, 0.0)) for f in SIGNED_SLOPES) >= -1e-12


def _check_coefficients(pm: PassCostModel, where: str) -> None:
    """Coefficients finite and >= 0 (bar SIGNED_FEATURES, and SIGNED_SLOPES while every regime's slope
    stays >= 0): the features are times and sizes, so a negative weight makes a bigger pass cheaper (a
    negative denoise_step term halved diffusion's simulated p50)."""
    bad = {f: c for f, c in pm.coef.items() if not (isinstance(c, (int, float)) and math.isfinite(c)
                                                     and (c >= 0 or f in SIGNED_FEATURES or f in SIGNED_SLOPES))}
    if pm.coef.get("kv_ms", 0.0) < 0 and pm.coef.get("kv_ms", 0.0) + pm.coef.get("memory_ms", 0.0) < 0:
        bad["kv_ms"] = pm.coef["kv_ms"]
    if not bad and not slope_floor_ok(pm.coef):
        bad.update({f: pm.coef[f] for f in SIGNED_SLOPES if pm.coef.get(f, 0.0) < 0})
    if bad:
        shown = ", ".join(f"{f}={c!r}" for f, c in bad.items())
        raise UserError(f"{where} has negative, NaN or infinite coefficient(s) {shown}", "refit it (`costmodel fit`) or fix the coefficients")


def support_corners(pm: PassCostModel, model: ModelShape) -> list[tuple[int, int, int]]:
    """(seqs, tokens per sequence, context) at the corners of the shapes the fit saw; a model
    without a recorded support is checked on a wide default grid (1-256 sequences, 0-8192 context)."""
    sup = pm.support or {}
    tok = default_tokens(pm.kind, model, 1024, 4)
    seqs = sup.get("seqs", [1, 256])
    tps = sup.get("tokens_per_seq", [tok, tok])
    ctx = sup.get("context_tokens", [0, 8192])
    return sorted({(max(1, round(a)), max(1, round(b)), max(0, round(c))) for a in seqs for b in tps for c in ctx})


def _check_above_roofline(p: Profile, mode: str, where: str) -> None:
    """A pass model may not predict less than the physical limit anywhere on its support: the
    simulator floors predictions at the roofline, which would hide such a model's error. Models
    of kind "endpoint" are exempt: they are inferred from end-to-end latencies (measure/fit/endpoint.py),
    not from pass timings, and stand only where the floor holds them; so are models whose predictor is
    not `linear_above_roofline` (engine-step, costmodel/stepcost/engine_step.py: shares of recorded
    engine steps, priced floored on the joint step as they were fitted, not lone passes)."""
    m = p.modes[mode]
    model = get_model(m.model)
    roof = Roofline(model, p.hardware, get_precision(p.precision),
                    get_model(m.assistant) if m.assistant else None)
    for kind, pm in m.pass_models.items():
        if pm.provenance.kind == "endpoint" or not get_predictor(pm.model_type).linear_above_roofline:
            continue
        for seqs, tokens, context in support_corners(pm, model):
            seg = (Segment(kind, seqs, tokens, context),)
            r = roof.pass_cost(seg)
            linear = pm.linear_ms(features(r, seg))
            if linear < r.roofline_ms * (1 - 1e-9):
                raise UserError(f"{where}/{kind} predicts {linear:.3g} ms at {seqs} seq x {tokens} tokens, context {context}, "
                                f"below its {r.roofline_ms:.3g} ms roofline", "refit it (`costmodel fit` keeps fits above the roofline)")


def _pass_model(v: dict) -> PassCostModel:
    diag = v.get("diagnostics")
    table = v.get("table")
    return PassCostModel(
        kind=v["kind"], coef={k: float(c) for k, c in v["coef"].items()}, support={k: list(x) for k, x in v.get("support", {}).items()},
        diagnostics=FitDiagnostics(**diag) if diag else None, provenance=Provenance(**v["provenance"]),
        median_x_roofline=v.get("median_x_roofline"), model_type=v.get("model_type", "linear"),
        table=PassTable(**table) if table is not None else None,
    )


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_model_type(pm: PassCostModel, where: str) -> None:
    """A registered model type (costmodel/stepcost), and a model its predictor can price."""
    if pm.model_type not in predictor_names():
        raise UserError(f"{where} has model_type {pm.model_type!r}", f"use one of {', '.join(predictor_names())}")
    get_predictor(pm.model_type).check(pm, where)


def _data_only(obj) -> dict:
    """An object's fields without what was derived from them (underscore keys: resolutions, memos)."""
    return {k: v for k, v in obj.__dict__.items() if not k.startswith("_")}


HELDOUT_ERROR_KEY = "heldout_error"  # optional top-level key: the engine model's error on settings the fit left out


def heldout_error(profile) -> dict | None:
    """The engine model's held-out error as the profile records it (top-level `heldout_error`: a
    one-line `basis` and per figure - p95_ttft_ms, p50_ttft_ms, p95_e2e_ms, p50_tpot_ms, output_tok_s -
    median_pct, worst_pct (signed, predicted/measured - 1) and n_loads), or None where it carries none.
    Read-only: the plan states it beside its SLO verdict."""
    d = getattr(profile, "__dict__", {})
    v = d.get(HELDOUT_ERROR_KEY)
    if v is None:
        v = (d.get("parts") or {}).get(HELDOUT_ERROR_KEY)
    return v if isinstance(v, dict) and isinstance(v.get("figures"), dict) else None
