"""The event loop of one simulated point: arrivals routed to replicas, each replica's engine steps;
the run ends when every arrived request has finished, when the drain limit after the last arrival
passes, or when the backlog aborts it (metrics.py: stability).

Replicas interact only at arrivals (the router reads their outstanding counts) and through the
requests-in-system record (departures in time order), so between two arrivals each replica runs
its own steps ahead to the next arrival (scheduler.Replica.advance) and the loop then merges the
departures. Ties at one instant are ordered as a heap of (time, scheduling order) orders them, so
the results are those of a one-event-at-a-time simulation (SimPy's, which this loop replaced).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from costmodel.modes import ModeDraws, ServingMode, get_mode
from costmodel.schemas.profile import Profile
from simulate.engine import EngineConfig, ReplicaLimits, replica_class, replica_limits
from simulate.metrics import FinishedRun, Records, Tracker, summarise
from simulate.request import Request, check_fits
from simulate.router import make_router
from simulate.steptime import StepPricer
from simulate.workload import Requests

# After the last arrival the simulation runs on until everything finishes, for at most
# max(DRAIN_MIN_S, the arrival window) more seconds.
DRAIN_MIN_S = 120.0
ABORT_MIN_WAITING = 64
CONTEXT_SAMPLE = 1000  # final contexts the KV capacity is sized on (quantiles of the requests')


@dataclass
class Deployment:
    """One replica type as a point runs it, resolved once: the profile, the mode, the engine
    settings, the KV capacity they leave, the mode's draws for these requests and the step pricer."""

    profile: Profile
    mode: ServingMode
    cfg: EngineConfig  # every setting filled in (vLLM's defaults where the user gave none)
    limits: ReplicaLimits
    draws: ModeDraws
    pricer: StepPricer

    @property
    def kv_cap(self) -> int:
        return self.limits.kv_capacity_tokens


def _context_sample(kv_need: np.ndarray, n: int = CONTEXT_SAMPLE) -> np.ndarray:
    """Evenly spaced quantiles of the requests' final contexts: what the KV blocks are sized for."""
    if len(kv_need) <= n:
        return kv_need
    return np.quantile(kv_need, np.linspace(0.0, 1.0, n), method="nearest")


def deploy(profile: Profile, mode: str, reqs: Requests, cfg: EngineConfig, seed: int) -> Deployment:
    serving = get_mode(mode)
    draws = serving.draw(profile, reqs, seed)
    limits = replica_limits(profile, mode, cfg, _context_sample(draws.kv_need_tokens))
    check_fits(draws.kv_need_tokens, limits.kv_capacity_tokens, mode)
    return Deployment(profile, serving, limits.cfg, limits, draws, StepPricer(profile, serving, draws, cfg.shape_bits))


class _Loop:
    """One point's arrivals, replicas and clock."""

    def __init__(self, dep: Deployment, reqs: Requests, replicas: int, router: str, abort_backlog_s: float | None, drain_s: float,
                 step_trace: list | None = None):
        self.reqs = reqs
        self.rec = Records(len(reqs))
        self.tracker = Tracker(reqs.window_s)
        self.departures: list[float] = []
        cls = replica_class(dep.mode)
        self.reps = [cls(i, self.departures, dep.cfg, dep.kv_cap, dep.pricer, self.rec, self.tracker, plan=dep.draws,
                         n_groups=len(dep.mode.group_kinds)) for i in range(replicas)]
        self.route = make_router(router, self.reps)
        if step_trace is not None:  # every engine step recorded (scheduler.Replica.trace; validate/vllm)
            for rep in self.reps:
                rep.trace = step_trace
        self.woken: list = []
        self.wake_s = 0.0  # the instant the replicas in `woken` were woken
        for rep in self.reps:
            rep.woken_list = self.woken
        self.drain_s = drain_s
        self.abort_backlog_s = abort_backlog_s
        self.limit = max(ABORT_MIN_WAITING, abort_backlog_s * reqs.qps / replicas) if abort_backlog_s else math.inf
        self.arrived, self.abort = 0, ""

    def _advance(self, bound: float, prev: float) -> None:
        """Start the replicas woken at the last instant, run every replica to `bound` (an event
        scheduled at `prev`), then record the departures in time order."""
        for rep in self.woken:
            rep.start(self.wake_s)
        self.woken.clear()
        for rep in self.reps:
            rep.advance(bound, prev)
        deps = self.departures
        if deps:
            deps.sort()
            depart = self.tracker.depart
            for t in deps:
                depart(t)
            deps.clear()

    def _arrive(self, i: int, t: float, prompt: int, out: int) -> bool:
        """Route arrival i; True when it aborts the run."""
        self.tracker.arrive(t)
        rep = self.route(Request(i, t, prompt, out))
        self.rec.replica[i] = rep.idx
        self.arrived = i + 1
        if len(rep.waiting) > self.limit:
            self.abort = (f"aborted at {t:.0f} s: {len(rep.waiting)} requests waiting on replica {rep.idx} "
                          f"(more than {self.abort_backlog_s:g} s of its arrivals); arrivals outpace service")
            return True
        return False

    def run(self) -> float:
        """Run to the end; returns the end time, with unfinished requests' progress recorded."""
        reqs = self.reqs
        arr, prompt, out = reqs.arrival_s.tolist(), reqs.prompt_tokens.tolist(), reqs.output_tokens.tolist()
        now = 0.0
        for i in range(len(arr)):
            t = arr[i]
            if t > now:
                t_next = now + (t - now)  # the clock as a timeout of (t - now) sets it
                self._advance(t_next, now)
                now = self.wake_s = t_next
            if self._arrive(i, t, prompt[i], out[i]):
                # what was already due at this instant runs before the stop: wakes and steps ending now
                self._advance(now, math.inf)
                return self._close(now)
        deadline = now + self.drain_s
        self._advance(deadline, now)
        t_end = deadline if self.tracker.n else self.tracker.t_last
        return self._close(t_end)

    def _close(self, t_end: float) -> float:
        self.tracker.close(t_end)
        for rep in self.reps:  # requests still in the system: record how far they got
            for r in list(rep.running.values()) + list(rep.waiting):
                self.rec.steps[r.rid] = r.steps
                self.rec.preemptions[r.rid] = r.preemptions
        return t_end


def simulate_point(profile: Profile, mode: str, reqs: Requests, *, replicas: int, cfg: EngineConfig, router: str, seed: int,
                   warmup_frac: float, abort_backlog_s: float | None, drain_s: float | None, workload_desc: str,
                   step_trace: list | None = None):
    """One point: (PointSummary, per-request DataFrame), and the step pricer it used."""
    dep = deploy(profile, mode, reqs, cfg, seed)
    drain = drain_s if drain_s is not None else max(DRAIN_MIN_S, reqs.window_s)
    loop = _Loop(dep, reqs, replicas, router, abort_backlog_s, drain, step_trace)
    t_end = loop.run()
    warmup_s = warmup_frac * (min(t_end, reqs.window_s) if loop.abort else reqs.window_s)
    return summarise(FinishedRun(
        mode=dep.mode, profile=profile, reqs=reqs, draws=dep.draws, cfg=dep.cfg, limits=dep.limits, replicas=loop.reps, rec=loop.rec, tracker=loop.tracker,
        n_arrived=loop.arrived, t_end=t_end, warmup_s=warmup_s, abort=loop.abort, drain_s=drain, seed=seed,
        kv_cap=dep.kv_cap, router=router, workload_desc=workload_desc,
    )), dep.pricer
