"""The event loop of one simulated point: SimPy processes for the arrivals and for each replica's
engine; the run ends when every arrived request has finished, when the drain limit after the last
arrival passes, or when the backlog aborts it (metrics.py: stability)."""

from __future__ import annotations

import math

import simpy

from costmodel.modes import get_mode
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


def simulate_point(profile: Profile, mode: str, reqs: Requests, *, replicas: int, cfg: EngineConfig, router: str, seed: int,
                   warmup_frac: float, abort_backlog_s: float | None, drain_s: float | None, workload_desc: str):
    serving = get_mode(mode)
    kv_cap = kv_capacity_tokens(profile, mode, cfg)
    draws = serving.draw(profile, reqs, seed)
    check_fits(draws.kv_need_tokens, kv_cap, mode)
    pricer = StepPricer(profile, serving, draws, cfg.shape_bits)

    env = simpy.Environment()
    n = len(reqs)
    rec = Records(n)
    tracker = Tracker(reqs.window_s)
    cls = replica_class(serving)
    reps = [cls(i, env, cfg, kv_cap, pricer, rec, tracker, plan=draws, n_groups=len(serving.group_kinds)) for i in range(replicas)]
    route = make_router(router, reps)
    done = env.event()
    drain = drain_s if drain_s is not None else max(DRAIN_MIN_S, reqs.window_s)
    limit = max(ABORT_MIN_WAITING, abort_backlog_s * reqs.qps / replicas) if abort_backlog_s else math.inf
    state = {"arrived": 0, "abort": "", "all_arrived": False}

    def finish_hook(t: float) -> None:
        if state["all_arrived"] and tracker.n == 0 and not done.triggered:
            done.succeed()

    for rep in reps:
        rep.on_depart = finish_hook
        env.process(rep.run())

    def arrivals():
        arr = reqs.arrival_s.tolist()
        prompt = reqs.prompt_tokens.tolist()
        out = reqs.output_tokens.tolist()
        rec_replica = rec.replica
        for i in range(n):
            t = arr[i]
            if t > env.now:
                yield env.timeout(t - env.now)
            tracker.arrive(t)
            rep = route(Request(i, t, prompt[i], out[i]))
            rec_replica[i] = rep.idx
            state["arrived"] = i + 1
            if len(rep.waiting) > limit:
                state["abort"] = (f"aborted at {t:.0f} s: {len(rep.waiting)} requests waiting on replica {rep.idx} "
                                  f"(more than {abort_backlog_s:g} s of its arrivals); arrivals outpace service")
                done.succeed()
                return
        state["all_arrived"] = True
        if tracker.n == 0:
            done.succeed()
            return
        yield env.timeout(drain)
        if not done.triggered:
            done.succeed()

    env.process(arrivals())
    env.run(until=done)
    t_end = env.now
    tracker.close(t_end)
    for rep in reps:  # requests still in the system: record how far they got
        for r in list(rep.running.values()) + list(rep.waiting):
            rec.steps[r.rid] = r.steps
            rec.preemptions[r.rid] = r.preemptions
    warmup_s = warmup_frac * (min(t_end, reqs.window_s) if state["abort"] else reqs.window_s)
    return summarise(FinishedRun(
        mode=serving, profile=profile, reqs=reqs, draws=draws, cfg=cfg, replicas=reps, rec=rec, tracker=tracker,
        n_arrived=state["arrived"], t_end=t_end, warmup_s=warmup_s, abort=state["abort"], drain_s=drain, seed=seed,
        kv_cap=kv_cap, router=router, workload_desc=workload_desc,
    )), pricer
