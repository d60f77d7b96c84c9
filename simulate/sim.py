"""The event loop of one simulated point: SimPy processes for the arrivals and for each replica's
engine; the run ends when every arrived request has finished, when the drain limit after the last
arrival passes, or when the backlog aborts it (metrics.py: stability)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import simpy

from costmodel.modes import ModeDraws, ServingMode, get_mode
from costmodel.schemas.profile import Profile
from simulate.engine import EngineConfig, kv_capacity_tokens, replica_class
from simulate.metrics import FinishedRun, Records, Tracker, summarise
from simulate.request import Request, check_fits
from simulate.router import make_router
from simulate.steptime import StepPricer
from simulate.workload import Requests

# After the last arrival the simulation runs on until everything finishes, for at most
# max(DRAIN_MIN_S, the arrival window) more seconds.
DRAIN_MIN_S = 120.0
ABORT_MIN_WAITING = 64


@dataclass
class Deployment:
    """One replica type as a point runs it, resolved once: the profile, the mode, the engine
    settings, the KV capacity they leave, the mode's draws for these requests and the step pricer."""

    profile: Profile
    mode: ServingMode
    cfg: EngineConfig
    kv_cap: int
    draws: ModeDraws
    pricer: StepPricer


def deploy(profile: Profile, mode: str, reqs: Requests, cfg: EngineConfig, seed: int) -> Deployment:
    serving = get_mode(mode)
    kv_cap = kv_capacity_tokens(profile, mode, cfg)
    draws = serving.draw(profile, reqs, seed)
    check_fits(draws.kv_need_tokens, kv_cap, mode)
    return Deployment(profile, serving, cfg, kv_cap, draws, StepPricer(profile, serving, draws, cfg.shape_bits))


class _Loop:
    """The SimPy processes of one point: arrivals routed to replicas, each replica's engine loop."""

    def __init__(self, dep: Deployment, reqs: Requests, replicas: int, router: str, abort_backlog_s: float | None, drain_s: float):
        self.env = env = simpy.Environment()
        self.reqs = reqs
        self.rec = Records(len(reqs))
        self.tracker = Tracker(reqs.window_s)
        cls = replica_class(dep.mode)
        self.reps = [cls(i, env, dep.cfg, dep.kv_cap, dep.pricer, self.rec, self.tracker, plan=dep.draws, n_groups=len(dep.mode.group_kinds))
                     for i in range(replicas)]
        self.route = make_router(router, self.reps)
        self.done = env.event()
        self.drain_s = drain_s
        self.abort_backlog_s = abort_backlog_s
        self.limit = max(ABORT_MIN_WAITING, abort_backlog_s * reqs.qps / replicas) if abort_backlog_s else math.inf
        self.arrived, self.abort, self.all_arrived = 0, "", False
        for rep in self.reps:
            rep.on_depart = self._finish_hook
            env.process(rep.run())
        env.process(self._arrivals())

    def _finish_hook(self, t: float) -> None:
        if self.all_arrived and self.tracker.n == 0 and not self.done.triggered:
            self.done.succeed()

    def _arrivals(self):
        env, reqs, tracker, done = self.env, self.reqs, self.tracker, self.done
        arr, prompt, out = reqs.arrival_s.tolist(), reqs.prompt_tokens.tolist(), reqs.output_tokens.tolist()
        rec_replica = self.rec.replica
        for i in range(len(arr)):
            t = arr[i]
            if t > env.now:
                yield env.timeout(t - env.now)
            tracker.arrive(t)
            rep = self.route(Request(i, t, prompt[i], out[i]))
            rec_replica[i] = rep.idx
            self.arrived = i + 1
            if len(rep.waiting) > self.limit:
                self.abort = (f"aborted at {t:.0f} s: {len(rep.waiting)} requests waiting on replica {rep.idx} "
                              f"(more than {self.abort_backlog_s:g} s of its arrivals); arrivals outpace service")
                done.succeed()
                return
        self.all_arrived = True
        if tracker.n == 0:
            done.succeed()
            return
        yield env.timeout(self.drain_s)
        if not done.triggered:
            done.succeed()

    def run(self) -> float:
        """Run to the end; returns the end time, with unfinished requests' progress recorded."""
        self.env.run(until=self.done)
        t_end = self.env.now
        self.tracker.close(t_end)
        for rep in self.reps:  # requests still in the system: record how far they got
            for r in list(rep.running.values()) + list(rep.waiting):
                self.rec.steps[r.rid] = r.steps
                self.rec.preemptions[r.rid] = r.preemptions
        return t_end


def simulate_point(profile: Profile, mode: str, reqs: Requests, *, replicas: int, cfg: EngineConfig, router: str, seed: int,
                   warmup_frac: float, abort_backlog_s: float | None, drain_s: float | None, workload_desc: str):
    """One point: (PointSummary, per-request DataFrame), and the step pricer it used."""
    dep = deploy(profile, mode, reqs, cfg, seed)
    drain = drain_s if drain_s is not None else max(DRAIN_MIN_S, reqs.window_s)
    loop = _Loop(dep, reqs, replicas, router, abort_backlog_s, drain)
    t_end = loop.run()
    warmup_s = warmup_frac * (min(t_end, reqs.window_s) if loop.abort else reqs.window_s)
    return summarise(FinishedRun(
        mode=dep.mode, profile=profile, reqs=reqs, draws=dep.draws, cfg=cfg, replicas=loop.reps, rec=loop.rec, tracker=loop.tracker,
        n_arrived=loop.arrived, t_end=t_end, warmup_s=warmup_s, abort=loop.abort, drain_s=drain, seed=seed,
        kv_cap=dep.kv_cap, router=router, workload_desc=workload_desc,
    )), dep.pricer
