"""The cluster layer: a fleet of pools over time as SimPy processes, replicas advanced lazily.

SimPy runs the coarse events: the arrival process (routing each request to a pool by class and
to a replica by the pool's router, or rejecting it), each pool's autoscaler scrape, replica
provisioning (ready after its delay) and draining, queue timeouts, and interval samples. Replicas
are the simulator's fast engines (simulate/engines), run ahead lazily to each event by the
compiled loop of simulate/sim.py (`_Loop._advance`: only replicas with something visible before
the event run), exactly as a single point runs them.

Between two SimPy events nothing but arrivals happens, so the arrival process takes every
arrival before the next scheduled event (`env.peek()`) in one pass, one replica advance per
arrival as sim.py does, and yields to SimPy only at the next event: the cluster costs per coarse
event, not per request. A static fleet (no scrape, no timeout) therefore runs the same sequence
of replica advances as `run_point` and gives identical per-request results
(tests/test_cluster.py).

Every arrival is accounted for: it finishes, is rejected by admission (`max_waiting`) or by its
queue timeout (counted per reason), or is still running when the drain limit ends the run
(reported as unfinished).
"""

from __future__ import annotations

import gc
import heapq
import math
from dataclasses import dataclass

import numpy as np
import simpy

from costmodel.errors import UserError
from simulate.cluster.classes import assign
from simulate.cluster.pool import Life, Pool, PoolSpec
from simulate.metrics import Records, client_lag_s
from simulate.workload import Requests, check_run_size

REJECT_FULL, REJECT_TIMEOUT = 1, 2
DEFAULT_DRAIN_S = 3600.0
DEFAULT_SAMPLE_S = 3600.0


@dataclass
class Sample:
    """A pool at an interval boundary (read without advancing replicas: their counters are as of
    each replica's last booked step)."""

    t: float
    pool: int
    busy_s: float
    seq_steps: int
    steps: int
    ready: int
    pending: int
    draining: int


@dataclass
class FleetRun:
    """What a fleet simulation hands over (simulate/cluster/outcome.py reads it)."""

    reqs: Requests
    rec: Records  # first token and finish as the client sees them (Fleet._as_seen)
    rejected: np.ndarray  # 0 accepted, REJECT_FULL, REJECT_TIMEOUT
    pool_of: np.ndarray
    pools: list
    samples: list
    t_end: float
    sample_s: float
    drain_s: float


class Fleet:
    def __init__(self, specs: list[PoolSpec], reqs: Requests, *, seed: int = 0, drain_s: float = DEFAULT_DRAIN_S,
                 sample_s: float = DEFAULT_SAMPLE_S):
        if not specs:
            raise UserError("a fleet needs at least one pool", "give a pool")
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise UserError(f"pool names repeat ({', '.join(names)})", "name each pool once")
        for s in specs:
            s.check()
        check_run_size(len(reqs), what="this fleet run")
        self.env = simpy.Environment()
        self.reqs, self.drain_s, self.sample_s = reqs, drain_s, sample_s
        self.rec = Records(len(reqs))
        self.rejected = np.zeros(len(reqs), np.int8)
        self.pool_of = assign([s.takes for s in specs], reqs)
        self.pools = [Pool(s, k, reqs, self.rec, self.pool_of == k, seed) for k, s in enumerate(specs)]
        for p in self.pools:  # the front end's handover and the idle engine's pickup are constants here (_as_seen)
            p.loop.front, p.loop.pickup_s = False, 0.0
        self.now = 0.0  # the instant every pool's replicas were last advanced to
        self.next_id = 0
        self.timeouts: list = []  # heap of (deadline, request id, request, replica, pool)
        self.samples: list[Sample] = []
        self.done = False
        for p in self.pools:
            n0 = min(max(p.policy.initial(p.spec.scaling.initial_replicas or p.spec.scaling.min_replicas), p.spec.scaling.min_replicas),
                     p.spec.scaling.max_replicas)
            for _ in range(n0):
                p.new_replica(self._id(), 0.0)

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    # ---- time --------------------------------------------------------------------------------
    def sync(self, t: float) -> None:
        """Advance every pool's replicas to t (an event scheduled at self.now)."""
        prev = self.now
        if t < prev:
            return
        for p in self.pools:
            p.loop._advance(t, prev)
            p.loop.wake_s = t
        self.now = t

    def run(self) -> FleetRun:
        gc_on = gc.isenabled()
        gc.disable()  # as sim.py: many short-lived objects, next to no cycles
        try:
            env = self.env
            main = env.process(self._arrivals())
            for p in self.pools:
                if p.policy.ticks:
                    env.process(self._autoscale(p))
            env.process(self._sampler())
            timeouts = [p.spec.queue_timeout_s for p in self.pools if p.spec.queue_timeout_s is not None]
            if timeouts:
                env.process(self._sweeper(min(timeouts)))
            env.run(until=main)
            env._queue.clear()  # the processes still waiting (sampler, scrapes) hold this fleet through their generators: let it go by refcount, no full gc
            t_end = self._close()
            self._as_seen()
        finally:
            if gc_on:
                gc.enable()
        return FleetRun(self.reqs, self.rec, self.rejected, self.pool_of, self.pools, self.samples, t_end, self.sample_s, self.drain_s)

    # ---- the arrival process ----------------------------------------------------------------------
    def _arrivals(self):
        env, pools = self.env, self.pools
        reqs = self.reqs
        arr, prompt, out = reqs.arrival_s.tolist(), reqs.prompt_tokens.tolist(), reqs.output_tokens.tolist()
        pool_of = [pools[k] for k in self.pool_of.tolist()] if len(pools) > 1 else None
        only = pools[0]
        n, i = len(arr), 0
        fast = pool_of is None and only.spec.max_waiting is None and only.spec.queue_timeout_s is None
        while i < n:
            horizon = env.peek()
            if fast:
                i = self._batch_one(i, n, horizon, arr, prompt, out)
            now = self.now
            while i < n and not fast:
                t = arr[i]
                if t > now:
                    tn = now + (t - now)  # the clock as a timeout of (t - now) sets it (sim.py)
                    if tn >= horizon:
                        break
                    for p in pools:
                        p.loop._advance(tn, now)
                        p.loop.wake_s = tn
                    now = self.now = tn
                self._arrive(pool_of[i] if pool_of is not None else only, i, t, prompt[i], out[i])
                i += 1
            if i < n:
                yield env.timeout(max(arr[i] - env.now, 0.0))
        yield from self._drain()

    def _batch_one(self, i: int, n: int, horizon: float, arr: list, prompt: list, out: list) -> int:
        """The arrivals before `horizon` on a one-pool fleet without admission control (the common
        case: _arrivals' loop and _arrive inlined, about 10% faster); returns the next arrival."""
        loop = self.pools[0].loop
        adv, arrive, enqueue = loop._advance, loop.tracker.arrive, loop.enqueue
        pick, route = self.pools[0].pick, self.pools[0].route
        now = self.now
        while i < n:
            t = arr[i]
            if t > now:
                tn = now + (t - now)
                if tn >= horizon:
                    break
                adv(tn, now)
                loop.wake_s = now = tn
            p, o = prompt[i], out[i]
            rep = pick() if pick is not None else route(p, o)
            rep.advance(loop.bound, loop.prev)
            arrive(t)
            enqueue(rep, i, t, p, o)
            i += 1
        self.now = now
        return i

    def _arrive(self, pool: Pool, i: int, t: float, prompt: int, out: int) -> None:
        loop = pool.loop
        rep = pool.route(prompt, out)
        rep.advance(loop.bound, loop.prev)  # it joins this replica's queue at this instant
        mw = pool.spec.max_waiting
        if mw is not None and len(rep.waiting) >= mw:
            self.rejected[i] = REJECT_FULL
            pool.rejected += 1
            return
        loop.tracker.arrive(t)
        r = loop.enqueue(rep, i, t, prompt, out)  # as a point's arrival: its prompt content for prefix caching
        to = pool.spec.queue_timeout_s
        if to is not None:
            heapq.heappush(self.timeouts, (t + to, i, r, rep, pool))

    def _drain(self):
        """After the last arrival: run on until every request finished or the drain limit."""
        env = self.env
        deadline = self.now + self.drain_s
        busy = any(p.policy.ticks for p in self.pools) or self.timeouts
        while True:
            nxt = deadline if not busy else min(deadline, env.peek(), self.now + self.sample_s)
            yield env.timeout(max(nxt - env.now, 0.0))
            self.sync(max(nxt, self.now))
            if self.timeouts:
                self._expire(self.now)
            if self.now >= deadline or not any(p.loop.tracker.n for p in self.pools):
                break
        self.done = True

    def _close(self) -> float:
        for p in self.pools:
            for rep in p.loop.reps:
                rep.advance(p.loop.bound, p.loop.prev)
        t_end = self.now if any(p.loop.tracker.n for p in self.pools) else max(p.loop.tracker.t_last for p in self.pools)
        for p in self.pools:
            p.loop.tracker.close(t_end)
            for rep in p.loop.reps:
                for r in list(rep.running.values()) + list(rep.waiting):
                    self.rec.steps[r.rid] = r.steps
                    self.rec.preemptions[r.rid] = r.preemptions
            p.retire_idle(t_end)
            for life in p.lives.values():  # the fleet stands at least to the end of the arrival window
                if life.end_s is None:
                    life.end_s = max(t_end, self.reqs.window_s, life.requested_s)
        return t_end

    def _as_seen(self) -> None:
        """The first token and the finish as the client sees them: each pool's profile front-end
        latency later (vLLM's input and output processing, which does not hold the engine), as
        simulate/metrics.py records a point's of several replicas, so a day's latencies are the plan's: the front
        end's handover and the idle engine's pickup once each, as a lone request meets them (client_lag_s)."""
        for p in self.pools:
            fe = client_lag_s(p.dep.profile, p.dep.mode.name, False)
            if fe:
                mine = self.pool_of == p.index
                self.rec.first_s[mine] += fe
                self.rec.finish_s[mine] += fe

    # ---- other processes ------------------------------------------------------------------------
    def _sampler(self):
        while not self.done:
            t = self.env.now
            for p in self.pools:
                busy, seqs, steps = p.counters()
                self.samples.append(Sample(t, p.index, busy, seqs, steps, len(p.ready), len(p.pending), len(p.draining)))
            yield self.env.timeout(self.sample_s)

    def _autoscale(self, pool: Pool):
        env = self.env
        every = pool.spec.scaling.scrape_interval_s
        while not self.done:
            yield env.timeout(every)
            if self.done:
                return
            self.sync(env.now)
            pool.retire_idle(env.now)
            self._scale(pool, env.now)

    def _expire(self, now: float) -> None:
        """Reject every request whose queue timeout passed before it started."""
        heap = self.timeouts
        while heap and heap[0][0] <= now:
            _, i, r, rep, pool = heapq.heappop(heap)
            if r.started or r not in rep.waiting:
                continue
            rep.waiting.remove(r)
            rep.outstanding -= 1
            pool.loop.tracker.depart(now)
            self.rejected[i] = REJECT_TIMEOUT
            pool.rejected += 1

    def _sweeper(self, shortest_s: float):
        """Queue timeouts, each at its deadline (woken at least every `shortest_s`: no later
        arrival can have an earlier deadline)."""
        env = self.env
        while not self.done:
            heap = self.timeouts
            nxt = min(heap[0][0], env.now + shortest_s) if heap else env.now + shortest_s
            yield env.timeout(max(nxt - env.now, 0.0))
            if self.done:
                return
            if heap and heap[0][0] <= env.now:
                self.sync(env.now)
                self._expire(env.now)

    def _scale(self, pool: Pool, now: float) -> None:
        """One scrape: the policy's recommendation, HPA's tolerance, bounds and scale-down window."""
        s = pool.spec.scaling
        busy, seqs, steps = pool.counters()
        t0, b0, q0, n0, a0 = pool.last
        arrived = pool.loop.tracker.arrived
        live_s = (len(pool.ready) + len(pool.draining)) * (now - t0)
        m = Metrics(len(pool.ready), len(pool.pending), len(pool.draining), pool.outstanding, sum(len(r.waiting) for r in pool.loop.reps),
                    pool.utilisation(busy - b0, seqs - q0, steps - n0, live_s), (arrived - a0) / max(now - t0, 1e-9), pool.provision_s,
                    arrived + pool.rejected)
        pool.last = (now, busy, seqs, steps, arrived)
        rec = pool.policy.desired(m, now)
        if rec is None:
            return
        want, ratio = rec
        current = len(pool.ready) + len(pool.pending)
        if ratio is not None and abs(ratio - 1) <= s.tolerance:
            want = current
        want = min(max(int(want), s.min_replicas), s.max_replicas)
        pool.history = [(t, w) for t, w in pool.history if t > now - s.scale_down_window_s] + [(now, want)]
        target = want if want >= current else max(w for _, w in pool.history)
        if target > current:
            for _ in range(target - current):
                self._provision(pool, now)
        elif target < current:
            self._shrink(pool, current - target, now)
        if target != current:
            pool.scale_log.append((now, target))

    def _provision(self, pool: Pool, now: float) -> None:
        life = Life(self._id(), now)
        pool.pending.append(life)
        self.env.process(self._ready_after(pool, life))

    def _ready_after(self, pool: Pool, life: Life):
        yield self.env.timeout(pool.provision_s)
        if life.end_s is not None:  # cancelled while provisioning
            return
        pool.pending.remove(life)
        self.sync(self.env.now)
        pool.new_replica(life.rid, self.env.now, life)

    def _shrink(self, pool: Pool, k: int, now: float) -> None:
        """Cancel the newest pending replicas first, then drain the ready ones with the fewest
        outstanding requests (one always stays ready)."""
        while k and pool.pending:
            life = pool.pending.pop()
            life.end_s = now
            pool.lives[life.rid] = life
            k -= 1
        victims = sorted(pool.ready, key=lambda r: (r.outstanding, -r.idx))[:min(k, len(pool.ready) - 1)]
        for rep in victims:
            pool.drain(rep, now)
        pool.retire_idle(now)


@dataclass(frozen=True)
class Metrics:
    """What an autoscaling policy sees at a scrape (one pool)."""

    ready: int
    pending: int
    draining: int
    outstanding: int  # queued + running on ready and draining replicas
    waiting: int
    utilisation: float  # share of step capacity used since the last scrape (pool.py)
    arrival_qps: float  # accepted arrivals per second since the last scrape
    provision_s: float
    arrived: int  # arrivals routed to the pool so far (rejected ones included)


def simulate_fleet(specs: list[PoolSpec], reqs: Requests, *, seed: int = 0, drain_s: float = DEFAULT_DRAIN_S,
                   sample_s: float = DEFAULT_SAMPLE_S) -> FleetRun:
    """Run `reqs` on a fleet of pools (PoolSpec) to the end (module docstring)."""
    if not (math.isfinite(drain_s) and drain_s >= 0 and sample_s > 0):
        raise UserError(f"drain_s {drain_s!r} must be >= 0 and sample_s {sample_s!r} > 0", "e.g. drain_s=3600, sample_s=3600")
    return Fleet(specs, reqs, seed=seed, drain_s=drain_s, sample_s=sample_s).run()
