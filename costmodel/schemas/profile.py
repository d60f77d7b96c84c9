"""The profile: the one document the simulator reads. Pass cost models (fitted with statsmodels
on roofline features), commit statistics per regime, MTP acceptance, the hardware it is for, and
provenance for every part (measured / projected / published / roofline / endpoint).

Pass cost model. A pass's time is predicted from features of its shape that follow the roofline:

    ms = max(roofline_ms, sum_f coef[f] * feature_f(shape))

with features from `FEATURES` (`memory_ms`, `compute_ms` are the pass's roofline terms on the
profile's hardware, so the coefficients carry the engine's efficiency and survive projection to
another GPU). A forward pass that mixes kinds (prefills beside denoising canvases, as vLLM
batches them) is priced on its joint roofline (one weight read) with the coefficients of each kind
present weighted by its share of the pass's query tokens; a pure pass reduces to its own model.

Pass-model types (`PassCostModel.model_type`): "linear" (the above; every profile before the
type existed) and "table": pass times on a grid of (sequences, tokens per sequence, context)
composed from operator tables (measure/ops), interpolated multilinearly in log space
(log ms over log seqs, log tokens, log(context + CONTEXT_OFFSET)), power-law extrapolation beyond
the grid. The table holds for the GPU and precision it names; elsewhere the model's linear
coefficients, which a table model keeps too, price the pass (a projected profile carries a table
projected point by point to its own GPU, and as its fallback the source's median ratio to the
roofline: measure/fit/projection.py). A
pass mixing kinds priced by tables shares its token-proportional work (the layers' GEMMs, MoE,
norms: `PassTable.token_ms` over the pass's total tokens) and adds each segment's own part
(attention, logits, sampler: its table time minus its token part), as the operator composition
does.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from costmodel import atomic
from costmodel.errors import UserError
from costmodel.hardware import HardwareSpec, validate_spec
from costmodel.jsonfile import read_json
from costmodel.models import ModelShape, get_model
from costmodel.modes import get_mode, mode_names
from costmodel.precision import Precision, get_precision
from costmodel.roofline import Roofline, Segment, default_tokens

SCHEMA_VERSION = 1
PROVENANCE_KINDS = ("measured", "projected", "published", "roofline", "endpoint")
# how to supply a profile part a mode draws from (costmodel.modes.base.PROFILE_PARTS)
PART_FIXES = {"commit_stats": "include commit statistics per regime: the published prior or a measured run",
              "mtp_acceptance": "add per-position acceptance with its provenance"}
PASS_MODEL_TYPES = ("linear", "table")
CONTEXT_OFFSET = 64.0  # tokens added to the context before its log in table interpolation (context may be 0)
FEATURES = ("const", "roofline_ms", "memory_ms", "compute_ms", "kv_ms", "seqs", "tokens", "context_ktokens")


@dataclass
class Provenance:
    kind: str  # one of PROVENANCE_KINDS
    source: str  # run ids, "projected from <profile id>", a citation, or "roofline / efficiency 0.5"
    hardware: str | None = None
    date: str | None = None
    notes: str = ""

    def validate(self, where: str) -> None:
        if self.kind not in PROVENANCE_KINDS:
            raise UserError(f"{where}: provenance kind {self.kind!r} is unknown", f"use one of {', '.join(PROVENANCE_KINDS)}")


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
                                "rebuild the table (measure/ops/passtable.py)")
        dims = (len(self.seqs), len(self.tokens_per_seq), len(self.context_tokens))
        ok = isinstance(self.ms, list) and len(self.ms) == dims[0] and all(
            isinstance(r, list) and len(r) == dims[1] and all(isinstance(c, list) and len(c) == dims[2] and all(_finite(v) and v > 0 for v in c)
                                                             for c in r) for r in self.ms)
        if not ok:
            raise UserError(f"{where}: table ms must be {dims[0]} x {dims[1]} x {dims[2]} (seqs x tokens_per_seq x context_tokens) "
                            "finite times > 0", "rebuild the table (measure/ops/passtable.py)")
        if not isinstance(self.token_ms, list) or len(self.token_ms) != len(self.token_m) or not all(_finite(v) and v > 0 for v in self.token_ms):
            raise UserError(f"{where}: table token_ms must hold one finite time > 0 per token_m value", "rebuild the table (measure/ops/passtable.py)")
        if not (_finite(self.overhead_ms) and self.overhead_ms >= 0):
            raise UserError(f"{where}: table overhead_ms must be a finite time >= 0", "rebuild the table (measure/ops/passtable.py)")

    def grids(self) -> "_TableGrids":
        g = self.__dict__.get("_grids")
        if g is None:
            g = self.__dict__["_grids"] = _TableGrids.of(self)
        return g

    def pass_ms(self, seqs: float, tokens: float, context: float) -> float:
        """Interpolated time of one pass of this kind (a single segment); memoised, because the
        simulator prices the same segment inside many mixed steps."""
        memo = self._memo()
        key = (seqs, tokens, context)
        v = memo.get(key)
        if v is None:
            v = memo[key] = self.grids().at(seqs, tokens, context)
        return v

    def tokens_ms(self, m: float) -> float:
        """The token-proportional part of a pass over m tokens (memoised in the same dict as pass_ms:
        its keys are numbers, pass_ms's are tuples)."""
        memo = self._memo()
        v = memo.get(m)
        if v is None:
            v = memo[m] = self.grids().tok(m)
        return v

    def _memo(self) -> dict:
        memo = self.__dict__.get("_values")
        if memo is None:
            memo = self.__dict__["_values"] = {}
        return memo


@dataclass
class PassCostModel:
    kind: str
    coef: dict[str, float]
    support: dict[str, list[float]] = field(default_factory=dict)  # feature/shape name -> [min, max] seen in the fit
    diagnostics: FitDiagnostics | None = None
    provenance: Provenance = field(default_factory=lambda: Provenance("roofline", "unfitted"))
    median_x_roofline: float | None = None  # measured / roofline time, median over the fit data
    model_type: str = "linear"  # one of PASS_MODEL_TYPES
    table: PassTable | None = None  # model_type "table": the pass-time grid (coef stays the fallback off its GPU/precision)

    def table_for(self, hardware_id: str, precision: str) -> PassTable | None:
        """The table that prices this kind on that GPU and precision, else None (linear model)."""
        t = self.table
        if self.model_type == "table" and t is not None and t.hardware == hardware_id and t.precision == precision:
            return t
        return None

    def linear_ms(self, feats: dict[str, float]) -> float:
        return sum(c * feats[f] for f, c in self.coef.items())

    def extrapolated(self, shape: dict[str, float]) -> bool:
        """True when a shape lies outside the range the fit saw (by seqs, tokens, context)."""
        for k, (lo, hi) in self.support.items():
            if k in shape and not (lo <= shape[k] <= hi):
                return True
        return False


@dataclass
class Distribution:
    """A discrete distribution: values with probabilities (empirical, or a discretised prior)."""

    values: list[float]
    probs: list[float]

    def validate(self, where: str) -> None:
        if not self.values or len(self.values) != len(self.probs):
            raise UserError(f"{where}: distribution needs equal, non-empty values and probs", "regenerate the profile")
        if any(p < 0 for p in self.probs) or not math.isclose(sum(self.probs), 1.0, rel_tol=1e-6, abs_tol=1e-6):
            raise UserError(f"{where}: distribution probs must be >= 0 and sum to 1", "regenerate the profile")

    @property
    def mean(self) -> float:
        return float(np.dot(self.values, self.probs))

    def quantile(self, q: float) -> float:
        order = np.argsort(self.values)
        cdf = np.cumsum(np.asarray(self.probs)[order])
        return float(np.asarray(self.values)[order][min(np.searchsorted(cdf, q - 1e-12), len(cdf) - 1)])

    def sample(self, rng: np.random.Generator, n: int | None = None):
        return rng.choice(np.asarray(self.values), size=n, p=np.asarray(self.probs))

    @classmethod
    def constant(cls, v: float) -> "Distribution":
        return cls([float(v)], [1.0])

    @classmethod
    def from_samples(cls, xs) -> "Distribution":
        vals, counts = np.unique(np.asarray(xs, dtype=float), return_counts=True)
        return cls(vals.tolist(), (counts / counts.sum()).tolist())


@dataclass
class CommitStats:
    """How a regime's canvases converge: what the simulator draws per block."""

    regime: str
    steps_per_canvas: Distribution  # accept-calls (denoising steps) per canvas, k_b
    tokens_per_call: float  # content tokens committed per accept-call
    content_length: Distribution  # content tokens per generation (EOS/pad excluded)
    renoise_per_generation: float
    commit_entropy_nats: float | None
    provenance: Provenance
    description: str = ""


@dataclass
class MtpAcceptance:
    num_speculative_tokens: int
    per_position: list[float]  # P(draft i accepted | drafts < i accepted), i = 1..k
    provenance: Provenance

    @property
    def mean_acceptance_length(self) -> float:
        """Expected tokens emitted per verify step: 1 (bonus/correction) + expected accepted drafts."""
        total, p = 1.0, 1.0
        for a in self.per_position[: self.num_speculative_tokens]:
            p *= a
            total += p
        return total

    def sample_accepted(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Accepted draft tokens per verify step (0..k), n draws."""
        k = self.num_speculative_tokens
        u = rng.random((n, k))
        ok = u < np.asarray(self.per_position[:k])[None, :]
        # accepted = length of the leading run of successes
        return np.where(ok.all(axis=1), k, np.argmin(ok, axis=1))


@dataclass
class ModeProfile:
    mode: str
    model: str  # ModelShape catalog name (target)
    assistant: str | None = None  # MTP drafter catalog name
    pass_models: dict[str, PassCostModel] = field(default_factory=dict)
    notes: str = ""


@dataclass
class Profile:
    profile_id: str
    hardware: dict  # HardwareSpec.to_dict(): the simulator reads nothing else about the GPU
    precision: str
    engine: dict
    modes: dict[str, ModeProfile]
    commit_stats: dict[str, CommitStats] = field(default_factory=dict)
    mtp_acceptance: MtpAcceptance | None = None
    provenance: Provenance = field(default_factory=lambda: Provenance("roofline", ""))
    created_at: str = ""
    notes: list[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    # ---- I/O -----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> Path:
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
            commit = {r: CommitStats(
                regime=c["regime"],
                steps_per_canvas=Distribution(**c["steps_per_canvas"]),
                tokens_per_call=float(c["tokens_per_call"]),
                content_length=Distribution(**c["content_length"]),
                renoise_per_generation=float(c["renoise_per_generation"]),
                commit_entropy_nats=c.get("commit_entropy_nats"),
                provenance=Provenance(**c["provenance"]),
                description=c.get("description", ""),
            ) for r, c in d.get("commit_stats", {}).items()}
            mtp = d.get("mtp_acceptance")
            prof = cls(
                profile_id=d["profile_id"], hardware=d["hardware"], precision=d["precision"], engine=d.get("engine", {}),
                modes=modes, commit_stats=commit,
                mtp_acceptance=MtpAcceptance(int(mtp["num_speculative_tokens"]), [float(x) for x in mtp["per_position"]], Provenance(**mtp["provenance"])) if mtp else None,
                provenance=Provenance(**d["provenance"]), created_at=d.get("created_at", ""), notes=list(d.get("notes", [])),
            )
        except UserError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise UserError(f"{where} is not a valid costmodel profile ({e.__class__.__name__}: {e})", "regenerate it with `costmodel fit` or `costmodel profile validate` it") from None
        prof.validate(where)
        return prof

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        return cls.from_dict(read_json(path, "profile"), f"profile {path}")

    def validate(self, where: str = "profile") -> "Profile":
        validate_spec(self.hardware.get("id", "?"), self.hardware, where)
        get_precision(self.precision)
        self.provenance.validate(where)
        if not self.modes:
            raise UserError(f"{where} has no modes", f"a profile needs at least one of {', '.join(mode_names())}")
        for name, m in self.modes.items():
            if name not in mode_names() or m.mode != name:
                raise UserError(f"{where}: mode {name!r} is unknown or mislabelled", f"modes are {', '.join(mode_names())}")
            serving = get_mode(name)
            get_model(m.model)
            if serving.assistant:
                if not m.assistant:
                    raise UserError(f"{where}: mode {name} lacks its assistant model", f"set modes.{name}.assistant")
                get_model(m.assistant)
            for part in serving.profile_parts:
                if not getattr(self, part):
                    raise UserError(f"{where}: mode {name} needs {part}", PART_FIXES[part])
            for kind in serving.pass_kinds:
                if kind not in m.pass_models:
                    raise UserError(f"{where}: mode {name} lacks a cost model for pass kind {kind}", "refit or regenerate the profile")
            for kind, pm in m.pass_models.items():
                _check_model_type(pm, f"{where}: pass model {name}/{kind}")
                bad = [f for f in pm.coef if f not in FEATURES]
                if bad:
                    raise UserError(f"{where}: pass model {name}/{kind} uses unknown features {bad}", f"features are {', '.join(FEATURES)}")
                _check_coefficients(pm, f"{where}: pass model {name}/{kind}")
                pm.provenance.validate(f"{where}: {name}/{kind}")
            _check_above_roofline(self, name, f"{where}: pass model {name}")
        for r, c in self.commit_stats.items():
            c.steps_per_canvas.validate(f"{where}: commit_stats.{r}.steps_per_canvas")
            c.content_length.validate(f"{where}: commit_stats.{r}.content_length")
            if min(c.steps_per_canvas.values) < 1:
                raise UserError(f"{where}: commit_stats.{r} has fewer than 1 step per canvas", "regenerate the profile")
            c.provenance.validate(f"{where}: commit_stats.{r}")
        if self.mtp_acceptance:
            a = self.mtp_acceptance
            if not (1 <= a.num_speculative_tokens <= len(a.per_position)) or any(not 0 <= p <= 1 for p in a.per_position):
                raise UserError(f"{where}: mtp_acceptance needs k >= 1 probabilities in [0, 1]", "fix per_position")
            a.provenance.validate(f"{where}: mtp_acceptance")
        return self

    # ---- resolved objects and prediction -------------------------------------------------------
    def resolved(self) -> "ResolvedProfile":
        """The catalog objects the profile names, resolved once per profile object."""
        return _resolved_for(self._key())

    def hardware_spec(self) -> HardwareSpec:
        return self.resolved().spec

    def roofline(self, mode: str):
        return _roofline_for(self._key(), mode)

    def _key(self):
        return _ProfileKey(self)

    def pass_ms(self, mode: str, segments) -> float:
        """Predicted milliseconds of ONE forward pass over `segments` (tuple of roofline.Segment)."""
        return _predict(self._key(), mode, tuple(segments))

    def mode(self, mode: str) -> ModeProfile:
        try:
            return self.modes[mode]
        except KeyError:
            raise UserError(f"profile {self.profile_id} has no mode {mode!r}", f"it has {', '.join(self.modes)}") from None


# Features a fit may weight below zero: an intercept under a steeper slope, and kv_ms, the KV share
# of memory_ms, which re-prices KV bytes (kv_ms + memory_ms >= 0 keeps every byte priced >= 0).
# Both are still held above the roofline on the model's support (_check_above_roofline).
SIGNED_FEATURES = ("const", "kv_ms")


def _check_coefficients(pm: PassCostModel, where: str) -> None:
    """Coefficients finite and >= 0 (bar SIGNED_FEATURES): the features are times and sizes, so a
    negative weight makes a bigger pass cheaper (a negative denoise_step term halved diffusion's
    simulated p50)."""
    bad = {f: c for f, c in pm.coef.items() if not (isinstance(c, (int, float)) and math.isfinite(c) and (c >= 0 or f in SIGNED_FEATURES))}
    if pm.coef.get("kv_ms", 0.0) < 0 and pm.coef.get("kv_ms", 0.0) + pm.coef.get("memory_ms", 0.0) < 0:
        bad["kv_ms"] = pm.coef["kv_ms"]
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
    not from pass timings, and stand only where the floor holds them."""
    m = p.modes[mode]
    model = get_model(m.model)
    roof = Roofline(model, validate_spec(p.hardware.get("id", "?"), p.hardware, where), get_precision(p.precision),
                    get_model(m.assistant) if m.assistant else None)
    for kind, pm in m.pass_models.items():
        if pm.provenance.kind == "endpoint":
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
    """A known type; a table model has a well-formed table and keeps linear coefficients (what prices
    it off the table's GPU/precision, e.g. after `costmodel profile project`)."""
    if pm.model_type not in PASS_MODEL_TYPES:
        raise UserError(f"{where} has model_type {pm.model_type!r}", f"use one of {', '.join(PASS_MODEL_TYPES)}")
    if pm.model_type == "linear" and pm.table is not None:
        raise UserError(f"{where} carries a table but model_type is 'linear'", "set model_type to 'table' or drop the table")
    if pm.model_type == "table":
        if not isinstance(pm.table, PassTable):
            raise UserError(f"{where} has model_type 'table' but no table", "rebuild the table (measure/ops/passtable.py)")
        if not pm.coef:
            raise UserError(f"{where}: a table model needs its linear coefficients too (used off the table's GPU/precision)",
                            "keep the fitted coef beside the table")
        pm.table.validate(where)


def _bracket(xs: list[float], x: float) -> tuple[int, float]:
    """(i, w): x at weight w between xs[i] and xs[i + 1]; below the grid w = 0 (the first point),
    above it w > 1 (linear extrapolation from the last two points)."""
    i = bisect.bisect_right(xs, x) - 1
    if i < 0:
        return 0, 0.0
    i = min(i, len(xs) - 2)
    return i, (x - xs[i]) / (xs[i + 1] - xs[i])


@dataclass(frozen=True)
class _TableGrids:
    """A PassTable's axes and values in log space, for interpolation."""

    ls: list
    lt: list
    lc: list
    lv: list
    lm: list
    lmv: list

    @classmethod
    def of(cls, t: PassTable) -> "_TableGrids":
        log = math.log
        return cls([log(x) for x in t.seqs], [log(x) for x in t.tokens_per_seq], [log(x + CONTEXT_OFFSET) for x in t.context_tokens],
                   [[[log(v) for v in c] for c in r] for r in t.ms], [log(x) for x in t.token_m], [log(v) for v in t.token_ms])

    def at(self, seqs: float, tokens: float, context: float) -> float:
        lc, lt, lv = self.lc, self.lt, self.lv
        k, wk = _bracket(lc, math.log(context + CONTEXT_OFFSET)) if len(lc) > 1 else (0, 0.0)
        j, wj = _bracket(lt, math.log(tokens)) if len(lt) > 1 else (0, 0.0)

        def line(a: int, b: int) -> float:
            row = lv[a][b]
            return row[k] + (row[k + 1] - row[k]) * wk if wk else row[k]

        def plane(a: int) -> float:
            y0 = line(a, j)
            return y0 + (line(a, j + 1) - y0) * wj if wj else y0

        if len(self.ls) == 1:
            return math.exp(plane(0))
        i, wi = _bracket(self.ls, math.log(seqs))
        y = plane(i)
        return math.exp(y + (plane(i + 1) - y) * wi if wi else y)

    def tok(self, m: float) -> float:
        if len(self.lm) == 1:
            return math.exp(self.lmv[0])
        i, w = _bracket(self.lm, math.log(m))
        return math.exp(self.lmv[i] + (self.lmv[i + 1] - self.lmv[i]) * w)


def _table_pass_ms(tables: list[PassTable], segments) -> float:
    """One forward over segments priced from tables: a pure pass is its table's value; a mixed pass
    shares the token-proportional part and the step overhead, and adds each segment's own part."""
    live = [(t, s) for t, s in zip(tables, segments) if s.seqs > 0 and s.tokens > 0]
    if len(live) == 1:
        t, s = live[0]
        return t.pass_ms(s.seqs, s.tokens, s.context)
    if not live:
        return 0.0
    total = sum(s.seqs * s.tokens for _, s in live)
    ms = max(t.tokens_ms(total) for t, _ in live) + max(t.overhead_ms for t, _ in live)
    for t, s in live:
        ms += max(0.0, t.pass_ms(s.seqs, s.tokens, s.context) - t.tokens_ms(s.seqs * s.tokens) - t.overhead_ms)
    return ms


class _ProfileKey:
    """Hashable handle so predictions can be memoised per profile object."""

    __slots__ = ("profile",)

    def __init__(self, profile: Profile):
        self.profile = profile

    def __hash__(self):
        return id(self.profile)

    def __eq__(self, other):
        return isinstance(other, _ProfileKey) and other.profile is self.profile


@dataclass(frozen=True)
class ResolvedProfile:
    """A profile's GPU, precision and per-mode model shapes as objects (what the simulator and the
    plan use), instead of the catalog names the JSON holds."""

    spec: HardwareSpec
    precision: Precision
    models: dict[str, ModelShape]  # mode -> the served model's shape
    assistants: dict[str, ModelShape | None]  # mode -> its drafter's shape (MTP), else None


@lru_cache(maxsize=64)
def _resolved_for(key: _ProfileKey) -> ResolvedProfile:
    p = key.profile
    return ResolvedProfile(validate_spec(p.hardware["id"], p.hardware, p.profile_id), get_precision(p.precision),
                           {n: get_model(m.model) for n, m in p.modes.items()},
                           {n: get_model(m.assistant) if m.assistant else None for n, m in p.modes.items()})


@lru_cache(maxsize=64)
def _roofline_for(key: _ProfileKey, mode: str):
    r = key.profile.resolved()
    key.profile.mode(mode)
    return Roofline(r.models[mode], r.spec, r.precision, r.assistants[mode])


def features(roof_pass, segments) -> dict[str, float]:
    """Feature values of one pass (see FEATURES) from its roofline and shape."""
    return {
        "const": 1.0,
        "roofline_ms": roof_pass.roofline_ms,
        "memory_ms": roof_pass.memory_ms,
        "compute_ms": roof_pass.compute_ms,
        # the KV-cache share of memory_ms: lets a fit price KV reads at another efficiency than weights
        "kv_ms": roof_pass.memory_ms * (roof_pass.kv_read_bytes + roof_pass.kv_write_bytes) / roof_pass.bytes if roof_pass.bytes else 0.0,
        "seqs": float(sum(s.seqs for s in segments)),
        "tokens": float(sum(s.seqs * s.tokens for s in segments)),
        "context_ktokens": sum(s.seqs * s.context for s in segments) / 1000.0,
    }


@lru_cache(maxsize=262144)
def _predict(key: _ProfileKey, mode: str, segments: tuple) -> float:
    p = key.profile
    roofline = _roofline_for(key, mode)
    pms = p.mode(mode).pass_models
    models = []
    for seg in segments:
        try:
            models.append(pms[seg.kind])
        except KeyError:
            raise UserError(f"profile {p.profile_id} has no cost model for {mode}/{seg.kind}", "refit the profile with that pass kind") from None
    tables = [pm.table_for(p.hardware.get("id"), p.precision) for pm in models]
    if all(t is not None for t in tables):
        ms = _table_pass_ms(tables, segments)
        # the roofline floor: a pass's roofline is at most the sum of its segments' own rooflines
        # (FLOPs add up; weights are read once), so the joint one is only needed below that sum
        bound = sum(roofline.segment_roofline_ms(s) for s in segments)
        return ms if ms >= bound else max(roofline.pass_cost(segments).roofline_ms, ms)
    roof = roofline.pass_cost(segments)
    feats = features(roof, segments)
    total_tokens = feats["tokens"]
    linear = 0.0
    for seg, pm in zip(segments, models):
        linear += (seg.seqs * seg.tokens / total_tokens) * pm.linear_ms(feats)
    return max(roof.roofline_ms, linear)
