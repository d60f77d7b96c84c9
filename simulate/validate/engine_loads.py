"""A profile fitted on a real engine's recorded steps, checked on loads that took no part in the fit
(issue 37): per load, predicted vs measured output tok/s, TTFT p50 and p95, TPOT p50.

A campaign folder (measure/vllm/gpu_run.py: data/runs/engine/<gpu>-<precision>-<mode>/<setup>/) holds
the engine's steps and the loads it served. measure/validate/engine_campaign.py reads each setup as a
`RecordedSetup` (costmodel/schemas/engine_setup.py: the loads' roles from the calibration design,
measure/vllm/gpu_design.py: other concurrencies, Poisson rates and prompt lengths than the fitted
ones; their first-use stalls) and fits one profile on every mode's steps less the check loads' and
the warm-up's. Here, `with_frontend_latency` fits each mode's front-end latency on a fitted load and
`check_loads` simulates each check load in its own terms (its requests' lengths, closed-loop clients
or its recorded send times, the engine settings it ran with) and sets the figures side by side.

    setups = recorded_setups(Path("data/runs/engine"), "h200", "fp8")   # measure.validate.engine_campaign
    prof, notes = fit_campaign(setups)
    notes += with_frontend_latency(prof, setups)
    rows = check_loads(prof, setups)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from costmodel.engine_settings import from_run_engine
from costmodel.schemas.engine_loads import RecordedLoad, read_load_windows, recorded_loads
from costmodel.schemas.engine_setup import RecordedSetup
from costmodel.schemas.profile import ENGINE_PICKUP_KEY, FRONTEND_HANDOVER_KEY, FRONTEND_LATENCY_KEY, Profile
from costmodel.schemas.rundir import load_run
from simulate.calibrate import HANDOVER_MIN_CLIENTS, engine_pickup_fit, frontend_handover_fit, frontend_latency_fit
from simulate.compare import LoadComparison, compare_loads, from_recorded

COLD_SHARE = 0.02  # a load that spent more of its time in first-use stalls is not scored as a steady state
POISSON_STALL_SHARE = 0.10
# % (issue 37; TTFT p95 issue 49): the latencies below saturation
TARGETS = {"tok_s": 10.0, "tpot_p50_ms": 10.0, "ttft_p50_ms": 15.0, "ttft_p95_ms": 20.0}


@dataclass(frozen=True)
class LoadCheck:
    mode: str
    setup: str
    load: RecordedLoad
    comparison: LoadComparison
    in_fit: bool
    engine_running: float = math.nan  # mean running requests over the load's engine steps
    client_in_flight: float = math.nan  # mean requests the clients had sent and not yet seen finish
    stalls: int = 0  # first-use stalls among its steps (measure/fit/stalls.py): a one-time compilation, not a steady state
    stall_s: float = 0.0  # their summed time above their like
    duration_s: float = math.nan  # the load's window
    path: Path | None = None  # the recorded setup's folder (one engine start)

    @property
    def status(self) -> str:
        """What the load can be scored as: "refused" (the engine failed its requests), "cold" (more than
        COLD_SHARE of its time went to first-use compilations, which the simulator does not model: a
        server pays each once) or "steady"."""
        return "refused" if self.load.refused else "cold" if self.stall_s > COLD_SHARE * self.duration_s else "steady"

    @property
    def ttft_request_error_pct(self) -> float:
        """Median over requests of predicted / measured TTFT - 1 (%), request by request in send order: where a
        load's TTFTs gather in groups (prompts within and past the CUDA graphs), its p50 can fall between them and
        miss where the requests agree, or agree where they miss."""
        import numpy as np

        m, p = np.asarray(self.load.ttft_ms, float), np.asarray(self.comparison.ttft_ms, float)
        if len(m) != len(p) or not len(m):
            return math.nan
        ok = np.isfinite(m) & np.isfinite(p) & (m > 0)
        return float(100 * np.median(p[ok] / m[ok] - 1)) if ok.any() else math.nan

    def error_pct(self, metric: str) -> float:
        e = self.comparison.error(metric)
        return 100 * e if math.isfinite(e) else math.nan


def with_frontend_latency(prof: Profile, setups: list[RecordedSetup], as_run: Profile | None = None) -> list[str]:
    """Each mode's front end, written into `prof`'s engine section; the lines that say so. First its
    per-request handover and the idle engine's pickup (simulate/calibrate.py frontend_handover_fit,
    engine_pickup_fit), read off the opening bursts of the fitted closed loops (`opening_bursts`); then its
    constant latency, fitted by simulation (with that
    handover) on the fitted loads where requests do not queue (`frontend_loads`, over all the mode's
    setups and engine starts). `as_run`: the same engine with the behaviour the runs had
    (dummy weights: every canvas to its step budget), when `prof` carries another (the published
    prior); the loads are simulated on it. Setup directories without recorded loads are passed over."""
    as_run = prof if as_run is None else as_run
    by_mode: dict[str, list[RecordedSetup]] = {}
    for s in setups:
        if (s.path / "loads.json").exists():
            by_mode.setdefault(s.mode, []).append(s)
    fronts, msgs = {}, []
    for mode, dirs in by_mode.items():
        if mode not in prof.modes:
            continue
        bursts = opening_bursts(dirs)
        hand = frontend_handover_fit([(lb, sends) for lb, sends, _ in bursts])
        pick = engine_pickup_fit(bursts, hand["ms"]) if hand is not None else None
        for p in {id(prof): prof, id(as_run): as_run}.values():  # the constant below is fitted with these in place
            for key, rec in ((FRONTEND_HANDOVER_KEY, hand), (ENGINE_PICKUP_KEY, pick)):
                if rec is not None:
                    p.engine.setdefault(key, {})[mode] = rec
            p.__dict__.pop("_resolved", None)
        if hand is not None:
            msgs.append(f"{mode}: front-end handover {hand['ms']:.2f} ms per request (median over {len(hand['loads'])} opening bursts of "
                        f"closed loops of the gap between consecutive sends: the clients send in the front end's event loop, so each send "
                        f"waits for the request before it to be handed to the engine)")
        if pick is not None:
            msgs.append(f"{mode}: idle engine pickup {pick['ms']:.2f} ms (median over {len(pick['loads'])} opening bursts of when the "
                        f"engine's first step stopped taking the burst's requests, after the first send)")
        picks = frontend_loads(dirs)
        if not picks:
            continue
        settings = {}
        for sdir, _ in picks:
            if sdir not in settings:
                run = load_run(sdir)
                settings[sdir] = from_run_engine(run.manifest.engine, run.manifest.serving, f"run {sdir}")
        fronts[mode] = frontend_latency_fit(as_run, mode, [from_recorded(ld) for _, ld in picks], engines=[settings[d] for d, _ in picks])
        where = ", ".join(f"{ld.name} in {sdir.parent.name}/{sdir.name}" for sdir, ld in picks)
        msgs.append(f"{mode}: front-end latency {fronts[mode]['ms']:.1f} ms per request (median over {len(picks)} loads of TTFT p50 "
                    f"measured less simulated: {where})")
    if fronts:
        prof.engine[FRONTEND_LATENCY_KEY] = fronts
        prof.__dict__.pop("_resolved", None)
    return msgs


def opening_bursts(setups: list[RecordedSetup]) -> list[tuple[str, tuple, int | None]]:
    """(label, send times in s, the requests the engine's first prefill step held) of the opening burst of every
    fitted closed loop of at least HANDOVER_MIN_CLIENTS clients the setups' engines served: its first `clients`
    requests, sent at once. The held count is None where that step filled the token budget or held the whole
    burst (then it says nothing of when the engine started)."""
    import pandas as pd

    out = []
    for rec in setups:
        loads = [ld for ld in recorded_loads(rec.path) if ld.kind == "closed" and (ld.concurrency or 0) >= HANDOVER_MIN_CLIENTS
                 and rec.setup.role(ld.name) == "fit" and not ld.refused]
        if not loads:
            continue
        run = load_run(rec.path)
        steps, budget = run.table("steps"), int(run.manifest.engine.get("max_num_batched_tokens") or 0)
        req = pd.read_parquet(rec.path / "requests.parquet")
        for ld in loads:
            c = int(ld.concurrency)
            b = req[req["load"] == ld.name].sort_values("arrival_s").head(c)
            t0, t1 = float(b["arrival_s"].min()), float(b["first_token_s"].max())
            pre = steps[(steps["wall_time"] >= t0) & (steps["wall_time"] <= t1 + 1e-3) & (steps["prefill_tokens"] > 0)]
            k1 = int(pre["prefill_reqs"].iloc[0]) if len(pre) and math.isfinite(t1) else None
            if k1 is not None and (k1 >= c or (budget and int(pre["prefill_tokens"].iloc[0]) >= budget)):
                k1 = None
            out.append((f"{ld.name} in {rec.path.parent.name}/{rec.path.name}", tuple(ld.send_s[:c]), k1))
    return out


FRONTEND_MAX_CLIENTS = 4  # closed loops of at most this many clients barely queue: their TTFT is prefill and front-end


def frontend_loads(setups: list[RecordedSetup]) -> list[tuple[Path, RecordedLoad]]:
    """The (setup, load) pairs a mode's front-end latency is fitted on, among the fitted loads the engine
    served in every start: the lowest-rate Poisson ones (the least queueing; a TTFT p50 over tens of
    requests shrugs off a few that met a first-use stall, up to POISSON_STALL_SHARE of its time), else
    the steady closed loops of at most FRONTEND_MAX_CLIENTS clients, else the steady closed loop(s) with
    the fewest clients (else any with the fewest). Several loads, because one closed loop is a handful of requests and engine starts differ
    (measure/validate/engine_repeats.py). (Leaving stalled requests out instead biases the p50: at low
    load the requests that meet a stall are those whose own new prompt length compiled.)"""
    poisson, closed = [], []
    for rec in setups:
        share = {n: s / d if d > 0 else math.inf for n, (_, s, d) in rec.stalls.items()}
        for ld in recorded_loads(rec.path):
            if rec.setup.role(ld.name) == "fit" and not ld.refused:
                {"poisson": poisson, "closed": closed}.get(ld.kind, []).append((rec.path, ld, share.get(ld.name, 0.0)))  # bursty loads: neither
    lowest = [c for c in poisson if c[1].rate_rps == min(p[1].rate_rps for p in poisson) and c[2] <= POISSON_STALL_SHARE]
    if lowest:
        return [c[:2] for c in lowest]
    steady = [c for c in closed if c[2] <= COLD_SHARE]
    few = [c for c in steady if (c[1].concurrency or 0) <= FRONTEND_MAX_CLIENTS]
    if few:
        return [c[:2] for c in few]
    pool = steady or closed  # a cold loop's TTFT is its compilations'
    fewest = min((c[1].concurrency or 0 for c in pool), default=None)
    return [c[:2] for c in pool if (c[1].concurrency or 0) == fewest]


def check_loads(profile: Profile, setups: list[RecordedSetup], include_fit: bool = False, seed: int = 0) -> list[LoadCheck]:
    """Every check load (and, with include_fit, the fitted ones too) of the recorded setups simulated in its own terms."""
    out = []
    for rec in setups:
        mode, sdir, setup, stalls = rec.mode, rec.path, rec.setup, rec.stalls
        if mode not in profile.modes:
            continue
        run = load_run(sdir)
        settings = from_run_engine(run.manifest.engine, run.manifest.serving, f"run {sdir}")
        loads = [ld for ld in recorded_loads(sdir) if setup.role(ld.name) != "warmup"]
        occupancy = load_occupancy(sdir)
        for ld in loads:
            held = setup.role(ld.name) == "check"
            if not held and not include_fit:
                continue
            cmp = compare_loads(profile, mode, [from_recorded(ld)], settings, seed=seed)[0]
            out.append(LoadCheck(mode, sdir.name, ld, cmp, not held, *occupancy.get(ld.name, (math.nan, math.nan)),
                                 *stalls.get(ld.name, (0, 0.0, math.nan)), path=sdir))
    return out


def load_occupancy(setup_dir: Path) -> dict[str, tuple[float, float]]:
    """Per load: (the engine's mean running requests over its steps, the clients' mean requests in
    flight). Where the second exceeds the first, requests sat in the engine's front-end (input and
    output processing), not in its batch."""
    import pandas as pd

    run = load_run(setup_dir)
    steps = run.table("steps")
    req = pd.read_parquet(Path(setup_dir) / "requests.parquet")
    out = {}
    for w in read_load_windows(setup_dir):
        s = steps[(steps["wall_time"] >= w.start_s) & (steps["wall_time"] <= w.end_s)]
        q = req[req["load"] == w.name]
        dur = w.end_s - w.start_s
        out[w.name] = (float(s["running"].mean()) if len(s) else math.nan, float((q["finish_s"] - q["arrival_s"]).sum() / dur) if dur > 0 else math.nan)
    return out
