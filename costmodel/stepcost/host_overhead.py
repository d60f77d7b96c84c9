"""An engine's host work per step (scheduling, input preparation, sampling bookkeeping, output
processing, detokenisation, streaming) as a step term beside the forward passes.

Why a term of its own: a profile composed from kernel timings (the ops what-ifs) prices the GPU alone,
while vLLM spends CPU time on every step. At batch 1 that time is a large share of a decode step, so
leaving it out makes AR and MTP look up to 2x faster than the engine users run; fitting it into
the pass coefficients instead would smear it over batch sizes where it is not.

The profile's engine section carries it per mode (`engine["host_overhead"][mode]`):

    {"coef": {"ms": 1.2, "ms_per_request": 0.05, "ms_per_token": 0.0, "ms_per_draft_token": 0.01,
              "ms_per_canvas": 0.0},
     "source": "fitted from recorded vLLM 0.32.0 steps (gap - model time, block sums) ...",
     "async_scheduling": false,      # the engine setting it was measured under
     "net_of_overlap": false}        # true: fitted to end-to-end times, so already what a step adds

host_ms = ms + ms_per_request x requests + ms_per_token x scheduled tokens + ms_per_draft_token x
draft tokens + ms_per_canvas x canvases, over the step's composition. With vLLM's async scheduling
(the GPU default) the host work of step N+1 runs while step N's forward runs, so a step costs only
the host time its forward does not cover: max(0, host_ms - forward_ms) (steady state: neighbouring
steps have the same composition). Which setting applies: the engine's (`engine["async_scheduling"]`,
set by the simulator's engine view from the run's settings: simulate/engine.py), else the one the
overhead was measured under. A term calibrated to end-to-end figures (`costmodel fit --calibrate` on
a `vllm bench serve` result) is the time a step took beyond the priced forward, whatever overlap the
engine managed, so it is added in full under either setting (`net_of_overlap`)."""

from __future__ import annotations

import copy
import math

from costmodel.errors import UserError

HOST_OVERHEAD_KEY = "host_overhead"  # the profile engine section's key
COEFS = ("ms", "ms_per_request", "ms_per_token", "ms_per_draft_token", "ms_per_canvas")


def composition(serving, prefill, groups, draws) -> dict[str, float]:
    """The step's composition the host work scales with: requests, scheduled (query) tokens, draft
    tokens (the assistant's: side passes x verifying sequences), canvases (a canvas mode's groups)."""
    reqs = (prefill.seqs if prefill is not None else 0) + sum(g.seqs for g in groups)
    tokens = (prefill.seqs * prefill.tokens if prefill is not None else 0) + sum(g.seqs * g.tokens for g in groups)
    drafts = getattr(draws, "side_passes", 0) * groups[0].seqs if serving.side_kinds and groups else 0
    canvases = sum(g.seqs for g in groups) if serving.decodes_canvases else 0
    return {"ms": 1.0, "ms_per_request": float(reqs), "ms_per_token": float(tokens), "ms_per_draft_token": float(drafts),
            "ms_per_canvas": float(canvases)}


def host_ms(coef: dict[str, float], comp: dict[str, float]) -> float:
    return sum(coef.get(k, 0.0) * comp[k] for k in COEFS)


def overlapped_ms(host: float, forward_ms: float, async_scheduling: bool) -> float:
    """What the host work adds to a step: all of it, or with async scheduling what the forward does not hide."""
    return max(0.0, host - forward_ms) if async_scheduling else host


def mode_record(engine: dict, mode: str) -> dict | None:
    sec = engine.get(HOST_OVERHEAD_KEY) if isinstance(engine, dict) else None
    return sec.get(mode) if isinstance(sec, dict) else None


def basis(rec: dict) -> str:
    """Where a mode's step term comes from, for provenance lines: "calibrated" (fitted to an
    end-to-end figure), "measured" (fitted to recorded steps), "carried ..." when taken from another
    GPU or precision's profile (costmodel profile carry-term)."""
    kind = "calibrated" if rec.get("net_of_overlap") else "measured"
    return ("carried " if str(rec.get("source", "")).startswith("carried from") else "") + kind


def async_on(engine: dict, rec: dict) -> bool:
    """Whether the term is hidden behind the forward: never for a net-of-overlap term, else by the
    engine's async setting (or the one the term was measured under)."""
    if rec.get("net_of_overlap"):
        return False
    a = engine.get("async_scheduling")
    return bool(a) if isinstance(a, bool) else bool(rec.get("async_scheduling", False))


def check(engine: dict, modes, where: str) -> None:
    """Refuse a host-overhead section the term could not price (the profile's validation)."""
    sec = engine.get(HOST_OVERHEAD_KEY) if isinstance(engine, dict) else None
    if sec is None:
        return
    fix = "refit it with `costmodel fit` (recorded vLLM steps) or `costmodel fit --calibrate`"
    if not isinstance(sec, dict):
        raise UserError(f"{where}: engine.{HOST_OVERHEAD_KEY} must map modes to overhead records", fix)
    for mode, rec in sec.items():
        if mode not in modes:
            raise UserError(f"{where}: engine.{HOST_OVERHEAD_KEY} names mode {mode!r}, which the profile does not price", fix)
        coef = rec.get("coef") if isinstance(rec, dict) else None
        if isinstance(rec, dict) and not isinstance(rec.get("net_of_overlap", False), bool):
            raise UserError(f"{where}: engine.{HOST_OVERHEAD_KEY}.{mode}.net_of_overlap must be true or false", fix)
        if not isinstance(coef, dict) or set(coef) - set(COEFS):
            raise UserError(f"{where}: engine.{HOST_OVERHEAD_KEY}.{mode}.coef must hold only {', '.join(COEFS)}", fix)
        for k, v in coef.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise UserError(f"{where}: engine.{HOST_OVERHEAD_KEY}.{mode}.coef.{k} = {v!r} must be a finite number >= 0 ms", fix)


class HostOverheadTerm:
    """The engine's host work per step, hidden behind the forward under async scheduling."""

    name = "engine_host"

    def step_ms(self, cost, prefill, groups, draws) -> float:
        engine = cost.profile.engine
        rec = mode_record(engine, cost.mode)
        if rec is None:
            return 0.0
        host = host_ms(rec["coef"], composition(cost.serving, prefill, groups, draws))
        if not host:
            return 0.0
        if not async_on(engine, rec):
            return host
        forward = cost.forward_ms(prefill, groups, draws) if hasattr(cost, "forward_ms") else cost.serving.step_ms(cost, prefill, groups, draws)
        return overlapped_ms(host, forward, True)


def with_terms(profile, records: dict[str, dict], calibrated_from=(), what: str = "profile"):
    """A copy of `profile` with these modes' step-term records (others keep theirs) and the runs they
    were calibrated on added to `engine.calibrated_from`; validated. The one way a term is written
    into a profile (simulate/calibrate.py's fit, measure/fit/calibrate.py's carry)."""
    unknown = [m for m in records if m not in profile.modes]
    if unknown:
        raise UserError(f"profile {profile.profile_id} has no mode {', '.join(unknown)}", f"apply the term to {', '.join(profile.modes)}")
    out = copy.deepcopy(profile)
    out.__dict__.pop("_resolved", None)
    eng = dict(out.engine)
    eng[HOST_OVERHEAD_KEY] = {**(eng.get(HOST_OVERHEAD_KEY) or {}), **records}
    if calibrated_from:
        eng["calibrated_from"] = sorted(set(eng.get("calibrated_from") or []) | set(calibrated_from))
    out.engine = eng
    return out.validate(what)


def with_step_constant(profile, modes: list[str], ms: float, source: str, calibrated_from=()):
    """A copy of `profile` whose engine step term for `modes` is a constant `ms` per step, net of
    overlap (an end-to-end figure already holds what async scheduling hid); other modes keep theirs.
    simulate/calibrate.py fits the constant to a batch-1 figure."""
    return with_terms(profile, {m: {"coef": {"ms": float(ms)}, "source": source, "net_of_overlap": True} for m in modes},
                      calibrated_from, "calibrated profile")
