"""One pool of a fleet: replicas of one mode on one GPU type behind one router, with one price
and one autoscaler. Its replicas are the simulator's own (simulate/engines, driven through the
compiled event loop's `_advance` of simulate/sim.py); the pool adds their lifecycle (requested,
ready, draining, retired) and the counters the autoscaler scrapes.

Utilisation (what `target-utilisation` scales on and power follows): the share of the replicas'
step capacity used over an interval = (time running engine steps / replica time) x (mean running
sequences per step / the engine's running cap, limits.max_running: KV blocks, max_num_seqs or
the sampler's buffers). A replica stepping all the time with one sequence of a possible 8 is 1/8
utilised; `gpu_busy_frac` would call it fully busy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from costmodel.errors import UserError
from costmodel.modes import ServingMode, get_mode
from costmodel.schemas.profile import Profile
from simulate.cluster.autoscalers import make_autoscaler
from simulate.cluster.classes import RequestClass
from simulate.cluster.scaling import Scaling, provision_s
from simulate.engine import EngineConfig
from simulate.engines import engine_for
from simulate.point import resolve_engine
from simulate.routers import DEFAULT_ROUTER, check_router, make_router
from simulate.sim import Deployment, _Loop, deploy


@dataclass(eq=False)
class PoolSpec:
    """What a pool is: `profile` (its GPU), `mode`, the autoscaling policy and its bounds, the
    router inside it, the price per GPU-hour (None: the GPU catalog's), the requests it takes
    (None: any) and its admission control (`max_waiting`: reject an arrival when the replica it
    is routed to already queues this many; `queue_timeout_s`: reject a request not started
    within this long of its arrival)."""

    name: str
    profile: Profile
    mode: str
    autoscaler: object = None  # an autoscalers policy; None: static at scaling.initial_replicas (or min)
    scaling: Scaling = field(default_factory=Scaling)
    router: str = DEFAULT_ROUTER
    engine: EngineConfig | dict | None = None  # settings over the profile's, as run_point's `engine` (None: the defaults)
    price_usd_per_gpu_hour: float | None = None
    takes: RequestClass | None = None
    max_waiting: int | None = None
    queue_timeout_s: float | None = None

    @cached_property
    def serving(self) -> ServingMode:
        """The mode's registry entry, resolved once (what deploy and the engines take)."""
        return get_mode(self.mode)

    @property
    def hardware(self) -> str:
        return self.profile.hardware.id

    def price(self) -> float:
        p = self.price_usd_per_gpu_hour
        if p is None:
            p = self.profile.hardware.price_usd_per_gpu_hour
        if p is None or not isinstance(p, (int, float)) or not math.isfinite(p) or p < 0:
            raise UserError(f"pool {self.name}: {self.hardware} has no price per GPU-hour", "give the pool a price_usd_per_gpu_hour")
        return float(p)

    def policy(self):
        return self.autoscaler if self.autoscaler is not None else make_autoscaler("static")

    def check(self) -> "PoolSpec":
        where = f"pool {self.name}"
        self.scaling.check(where)
        self.price()
        if self.max_waiting is not None and not (isinstance(self.max_waiting, int) and self.max_waiting >= 0):
            raise UserError(f"{where}: max_waiting {self.max_waiting!r} must be an integer >= 0", "e.g. 64")
        if self.queue_timeout_s is not None and not self.queue_timeout_s > 0:
            raise UserError(f"{where}: queue_timeout_s {self.queue_timeout_s!r} must be > 0", "e.g. 30")
        check_router(self.router)
        return self


@dataclass
class Life:
    """One replica's lifecycle; GPU time is billed from `requested_s` to `end_s`."""

    rid: int
    requested_s: float
    ready_s: float | None = None
    drain_s: float | None = None
    end_s: float | None = None


def deploy_for(spec: PoolSpec, reqs, members: np.ndarray, seed: int) -> Deployment:
    """A pool's replicas resolved exactly as a point's (sim.deploy, engine settings through
    point.resolve_engine: the engine's canvas, k, async scheduling, batch limits, prefix caching),
    the KV capacity sized on and checked against only the requests the pool takes."""
    return deploy(spec.profile, spec.serving, reqs, resolve_engine(spec.profile, spec.engine), seed, members=members)


class Pool:
    """A pool at run time: its event loop (replicas, departures, requests-in-system tracker),
    routable replicas and lifecycle."""

    def __init__(self, spec: PoolSpec, index: int, reqs, rec, members: np.ndarray, seed: int):
        self.spec, self.index = spec, index
        self.dep = deploy_for(spec, reqs, members, seed)
        self.loop = _Loop(self.dep, reqs, 1, "round-robin", None, 0.0)
        self.loop.reps = []
        self.loop.rec = rec
        self.rec = rec
        self.cls = engine_for(spec.mode)
        self.ready: list = []  # routable, in the order they became ready
        self.draining: list = []
        self.pending: list = []  # Life of replicas requested and not ready
        self.lives: dict[int, Life] = {}
        self.route = make_router(spec.router, self.ready)
        self.policy = spec.policy()
        # a fleet that never changes behind the default router picks as a point does: the loop's compiled pick over
        # the same replicas in the same order (its ready list is the loop's), no Python call per arrival
        self.pick = self.loop._least_outstanding if spec.router == "least-outstanding" and not self.policy.ticks else None
        self.provision_s = provision_s(spec.profile, spec.serving, spec.scaling)
        self.max_running = max(1, int(self.dep.limits.max_running))
        self.retired = [0.0, 0, 0]  # busy seconds, sequence-steps, steps of retired replicas
        self.history: list = []  # (time, recommendation) within the scale-down window
        self.scale_log: list = []  # (time, replicas wanted)
        self.last = (0.0, 0.0, 0, 0, 0)  # time, busy, seq-steps, steps, arrivals at the last scrape
        self.rejected = 0

    # ---- replicas -------------------------------------------------------------------------------
    def new_replica(self, rid: int, t: float, life: Life | None = None):
        d = self.dep
        rep = self.cls(rid, self.loop.departures, d.cfg, d.kv_cap, d.pricer, self.rec, self.loop.tracker, plan=d.draws,
                       n_groups=len(d.mode.group_kinds))
        rep.woken_list = self.loop.woken
        self.loop.reps.append(rep)
        self.ready.append(rep)
        self.lives[rid] = life or Life(rid, t)
        self.lives[rid].ready_s = t
        return rep

    def drain(self, rep, t: float) -> None:
        self.ready.remove(rep)
        self.draining.append(rep)
        self.lives[rep.idx].drain_s = t

    def retire_idle(self, t: float) -> None:
        """Retire draining replicas with nothing left to run (their GPU time ends at t)."""
        for rep in [r for r in self.draining if not r.running and not r.waiting and r.t_end is None and not r.woken]:
            self.draining.remove(rep)
            self.loop.reps.remove(rep)
            b = self.retired
            b[0] += rep.busy_s
            b[1] += rep.acc_prefill_seqs + sum(rep.acc_groups)
            b[2] += rep.n_steps
            self.lives[rep.idx].end_s = t

    def counters(self) -> tuple[float, int, int]:
        """Busy seconds, sequence-steps and steps of every replica so far (retired included)."""
        busy, seqs, steps = self.retired
        for rep in self.loop.reps:
            busy += rep.busy_s
            seqs += rep.acc_prefill_seqs + sum(rep.acc_groups)
            steps += rep.n_steps
        return busy, seqs, steps

    @property
    def outstanding(self) -> int:
        return sum(r.outstanding for r in self.loop.reps)

    def utilisation(self, d_busy: float, d_seqs: int, d_steps: int, replica_s: float) -> float:
        """Share of step capacity used (module docstring) over an interval of `replica_s` replica-seconds."""
        if replica_s <= 0 or d_steps <= 0:
            return 0.0
        return min(1.0, d_busy / replica_s) * min(1.0, d_seqs / (d_steps * self.max_running))
