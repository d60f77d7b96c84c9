"""A profile resolved for pricing: its catalog objects, and per mode the `ModeCost` that prices its
passes and engine steps. Every price cache lives here, owned by the resolution of one profile
object (kept on that object, dropped when it is pickled), not in module globals: a profile that
is garbage-collected takes its caches with it, and two profiles never share one."""

from __future__ import annotations

from dataclasses import dataclass, field

from costmodel.errors import UserError
from costmodel.hardware import HardwareSpec
from costmodel.models import ModelShape, get_model
from costmodel.modes import ServingMode, get_mode
from costmodel.precision import Precision, get_precision
from costmodel.roofline import Roofline, Segment
from costmodel.stepcost.base import get_predictor, step_terms
from costmodel.stepcost.linear import coef_positions

CUDA_GRAPHS_KEY = "cuda_graph_max_tokens"  # profile engine section: mode -> the largest step (tokens) the engine ran as a CUDA graph
KNEE_KEY = "step_knee_tokens"  # profile engine section: mode -> the step size (tokens) past which the engine's kernels change regime
PASS_MEMO_MAX = 262_144  # priced passes kept per mode (the simulator's steps reuse a few thousand)


class ModeCost:
    """The price of one mode's passes and engine steps on one profile (the `StepCost` a
    simulator's step pricer, the static-batch server and the fits ask)."""

    __slots__ = ("profile", "mode", "serving", "roofline", "pass_models", "hardware_id", "precision", "memo", "graph_max_tokens", "knee_tokens", "by_kinds",
                 "positions", "forward")

    def __init__(self, resolved: "ResolvedProfile", mode: "ServingMode | str"):
        p = resolved.profile
        self.profile = p
        self.serving = mode if isinstance(mode, ServingMode) else get_mode(mode)  # the object, resolved at the edge (a name still resolves)
        self.mode = mode = self.serving.name
        self.pass_models = p.mode(mode).pass_models
        self.roofline = Roofline(resolved.models[mode], resolved.spec, resolved.precision, resolved.assistants[mode])
        self.hardware_id = p.hardware.id
        self.precision = p.precision
        self.memo: dict = {}
        self.by_kinds: dict = {}  # the segments' kinds -> (their pass models, the predictor pricing them): resolved once per kinds
        self.positions: dict = {}  # id(pass model) -> (the model, its coefficients by feature position): coef_positions
        self.forward = None  # (prefill, groups, draws, ms) of the last step's passes: forward_ms
        graphs = p.engine.get(CUDA_GRAPHS_KEY) if isinstance(p.engine, dict) else None
        self.graph_max_tokens = int((graphs or {}).get(mode) or 0)  # the engine's largest CUDA graph (0: no regime priced)
        knees = p.engine.get(KNEE_KEY) if isinstance(p.engine, dict) else None
        self.knee_tokens = int((knees or {}).get(mode) or 0)  # its kernels' regime change (0: none found)

    def pass_ms(self, segments) -> float:
        """Predicted milliseconds of ONE forward pass over `segments` (roofline.Segment)."""
        segments = tuple(segments)
        v = self.memo.get(segments)
        if v is None:
            if len(self.memo) >= PASS_MEMO_MAX:
                self.memo.clear()
            v = self.memo[segments] = self._price(segments)
        return v

    def step_ms(self, prefill: Segment | None, groups: tuple[Segment, ...], draws) -> float:
        """Milliseconds of one engine step: the mode's passes (`ServingMode.step_ms`) plus every
        registered step term."""
        ms = self.serving.step_ms(self, prefill, groups, draws)
        self.forward = (prefill, groups, draws, ms)
        for term in step_terms():
            ms += term.step_ms(self, prefill, groups, draws)
        return ms

    def forward_ms(self, prefill: Segment | None, groups: tuple[Segment, ...], draws) -> float:
        """The mode's passes of one engine step (`ServingMode.step_ms`): what a step term that hides behind
        them reads; the step being priced (step_ms) has them already."""
        f = self.forward
        if f is not None and f[0] is prefill and f[1] is groups and f[2] is draws:
            return f[3]
        return self.serving.step_ms(self, prefill, groups, draws)

    def coef_positions(self, pm) -> tuple | None:
        """pm's coefficients by feature position (costmodel/stepcost/linear.py coef_positions), once per model."""
        hit = self.positions.get(id(pm))
        if hit is None or hit[0] is not pm:
            hit = self.positions[id(pm)] = (pm, coef_positions(pm.coef))
        return hit[1]

    def predictor_of(self, pm):
        """The predictor that prices pass model `pm` here: its own, or down its fallbacks."""
        pred = get_predictor(pm.model_type)
        while not pred.prices(pm, self.hardware_id, self.precision):
            pred = get_predictor(pred.fallback)
        return pred

    def _price(self, segments: tuple) -> float:
        kinds = tuple(seg.kind for seg in segments)
        found = self.by_kinds.get(kinds)
        if found is None:
            found = self.by_kinds[kinds] = self._pricer(kinds)
        models, pred = found
        return pred.pass_ms(self, models, segments)

    def _pricer(self, kinds: tuple) -> tuple[list, object]:
        """The pass models of `kinds` and the one predictor that prices them together."""
        models = []
        for kind in kinds:
            try:
                models.append(self.pass_models[kind])
            except KeyError:
                raise UserError(f"profile {self.profile.profile_id} has no cost model for {self.mode}/{kind}",
                                "refit the profile with that pass kind") from None
        preds = [self.predictor_of(pm) for pm in models]
        if any(p is not preds[0] for p in preds):  # kinds priced by different predictors: their common fallback
            preds = [_root(p) for p in preds]
            if any(p is not preds[0] for p in preds):
                raise UserError(f"profile {self.profile.profile_id}: a {self.mode} pass mixes model types {sorted({p.name for p in preds})}",
                                "give the pass kinds a mode runs together one model type")
        return models, preds[0]


def _root(pred):
    """The last predictor down `pred`'s fallbacks (one that prices every model)."""
    while pred.fallback is not None:
        pred = get_predictor(pred.fallback)
    return pred


@dataclass
class ResolvedProfile:
    """A profile's GPU, precision and per-mode model shapes as objects (what the simulator and the
    plan use) instead of the catalog names the JSON holds, and its price caches."""

    profile: object
    spec: HardwareSpec
    precision: Precision
    models: dict[str, ModelShape]  # mode -> the served model's shape
    assistants: dict[str, ModelShape | None]  # mode -> its drafter's shape (MTP), else None
    costs: dict[str, ModeCost] = field(default_factory=dict)
    step_caches: dict[tuple, dict] = field(default_factory=dict)
    memos: dict[str, dict] = field(default_factory=dict)

    def cost(self, mode: "ServingMode | str") -> ModeCost:
        name = mode.name if isinstance(mode, ServingMode) else mode
        c = self.costs.get(name)
        if c is None:
            c = self.costs[name] = ModeCost(self, mode)
        return c

    def roofline(self, mode: str) -> Roofline:
        return self.cost(mode).roofline

    def memo(self, name: str) -> dict:
        """A dict for another object derived from this profile (e.g. a point's replica limits), kept
        and dropped with the profile's other caches instead of in a module global keyed by id()."""
        m = self.memos.get(name)
        if m is None:
            m = self.memos[name] = {}
        return m

    def step_cache(self, key: tuple) -> dict:
        """Engine-step prices of one pricing (mode, resolution, draws' shapes): shared by every run
        on this profile object, so plan's repeated points reuse them (simulate/steptime.py)."""
        c = self.step_caches.get(key)
        if c is None:
            c = self.step_caches[key] = {}
        return c


def resolve(profile) -> ResolvedProfile:
    """The profile resolved once per profile object."""
    r = profile.__dict__.get("_resolved")
    if r is None:
        p = profile
        r = ResolvedProfile(p, p.hardware, get_precision(p.precision),
                            {n: get_model(m.model) for n, m in p.modes.items()},
                            {n: get_model(m.assistant) if m.assistant else None for n, m in p.modes.items()})
        profile.__dict__["_resolved"] = r
    return r


def pass_cost(profile, mode: str) -> ModeCost:
    """The ModeCost of `mode` on `profile`."""
    return resolve(profile).cost(mode)
