"""The event loop of one simulated point: SimPy processes for the arrivals and for each replica's
engine; the run ends when every arrived request has finished, when the drain limit after the last
arrival passes, or when the backlog aborts it (metrics.py: stability)."""

from __future__ import annotations

import math

import simpy

from costmodel.schemas.profile import Profile
from simulate.engine import EngineConfig, kv_capacity_tokens, replica_class
from simulate.metrics import Records, Tracker, summarise
from simulate.steptime import KINDS, StepPricer
from simulate.request import DiffusionPlan, MtpPlan, Request, check_fits
from simulate.router import make_router
from simulate.workload import Requests

# After the last arrival the simulation runs on until everything finishes, for at most
# max(DRAIN_MIN_S, the arrival window) more seconds.
DRAIN_MIN_S = 120.0
ABORT_MIN_WAITING = 64


def simulate_point(profile: Profile, mode: str, reqs: Requests, *, replicas: int, cfg: EngineConfig, router: str, seed: int,
                   warmup_frac: float, abort_backlog_s: float | None, drain_s: float | None, workload_desc: str):
    kv_cap = kv_capacity_tokens(profile, mode, cfg)
    plan, blocks, canvas, k = None, None, 256, 0
    if mode == "diffusion":
        plan = DiffusionPlan(profile, reqs, seed)
        blocks, canvas = plan.blocks, plan.canvas
        check_fits(plan.kv_need(reqs), kv_cap, mode)
    elif mode == "mtp":
        plan = MtpPlan(profile, reqs, seed)
        k = plan.k
        check_fits(plan.kv_need(reqs), kv_cap, mode)
    else:
        check_fits(reqs.prompt_tokens + reqs.output_tokens, kv_cap, mode)
    pricer = StepPricer(profile, mode, cfg.shape_bits, draft_tokens=k, canvas=canvas)

    env = simpy.Environment()
    n = len(reqs)
    rec = Records(n)
    tracker = Tracker(reqs.window_s)
    cls = replica_class(mode)
    reps = [cls(i, env, cfg, kv_cap, pricer, rec, tracker, plan=plan) for i in range(replicas)]
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
    return summarise(
        mode=mode, profile=profile, qps=reqs.qps, replicas=reps, reqs=reqs, n_arrived=state["arrived"], rec=rec, tracker=tracker,
        t_end=t_end, warmup_s=warmup_frac * (min(t_end, reqs.window_s) if state["abort"] else reqs.window_s), abort=state["abort"], drain_s=drain, seed=seed, blocks=blocks, cfg=cfg,
        kv_cap=kv_cap, router=router, workload_desc=workload_desc,
        tokens_per_g1=canvas if mode == "diffusion" else (k + 1 if mode == "mtp" else 1), tokens_per_g2=canvas,
        kinds=KINDS[mode],
    ), pricer
