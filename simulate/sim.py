"""The event loop of one simulated point: arrivals routed to replicas, each replica's engine steps;
the run ends when every arrived request has finished, when the drain limit after the last arrival
passes, or when the backlog aborts it (metrics.py: stability).

Replicas interact only at arrivals (the router, simulate/routers/, reads their counts) and through the
requests-in-system record (departures in time order), so between two arrivals each replica runs
its own steps ahead to the next arrival (scheduler.Replica.advance) and the loop then merges the
departures. A replica whose next visible change (`quiet_until`) is after the arrival is left where
it is (its counts are already those at the arrival) unless the arrival is routed to it. Ties at one
instant are ordered as a heap of (time, scheduling order) orders them, so the results are those of
a one-event-at-a-time simulation (SimPy's, which this loop replaced).

Closed-loop clients (`Requests.concurrency` N, vllm bench serve --max-concurrency N): a request
whose arrival time has come is sent only while fewer than N are in the system, in arrival order
(vllm bench's semaphore); otherwise the loop runs the replicas on, from one visible change
(`quiet_until`) to the next, to the departure that frees a slot, and sends it then, after every
step ending at that instant (the reply comes before the next request). Its send time becomes its
arrival time. The arrival window (and so the warm-up, the steady window and the drain) is known
only once the last request is sent: the requests-in-system record is rebuilt over it at the end.
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass, replace

import numpy as np

from costmodel.errors import UserError
from costmodel.modes import ModeDraws, ServingMode
from costmodel.schemas.profile import Profile, engine_pickup_ms, frontend_handover_ms
from costmodel.stepcost.resolved import resolve
from simulate.engine import EngineConfig, ReplicaLimits, engine_profile, mode_settings, replica_limits
from costmodel import native
from simulate.engines import engine_for
from simulate.metrics import FinishedRun, Records, Tracker, client_lag_s, front_queued, summarise
from simulate.prefix import block_hashes
from simulate.request import Request, check_fits
from simulate.routers import least_outstanding, make_router
from simulate.steptime import StepPricer
from simulate.workload import Requests

# After the last arrival the simulation runs on until everything finishes, for at most
# max(DRAIN_MIN_S, the arrival window) more seconds.
DRAIN_MIN_S = 120.0
ABORT_MIN_WAITING = 64
CONTEXT_SAMPLE = 1000  # final contexts the KV capacity is sized on (quantiles of the requests')
MISS_STOP = "stopped early"  # how a point stopped by its MissBounds starts its stability reason
DRAIN_CHECK_S = 1.0  # with MissBounds, the drain runs in slices this long, checking between them
# the per-request record a latency metric ends at (metrics.py: queue_ms, ttft_ms, e2e_ms)
MISS_METRICS = {"queue": "start_s", "ttft": "first_s", "e2e": "finish_s"}


@dataclass(frozen=True)
class MissBound:
    """A percentile bound a caller needs met (plan's SLO): `pct` percentile of `metric` (queue,
    ttft or e2e, over the post-warm-up requests, as the summary computes it) must not exceed
    limit_ms. A point given MissBounds stops as soon as one is certainly missed, reported
    unstable with a reason starting MISS_STOP: its percentiles would not meet it whatever happens
    next, and a point that leaves requests unfinished is unstable anyway."""

    metric: str
    pct: float
    limit_ms: float


class _MissWatch:
    """Counts, in arrival order, post-warm-up requests whose bound's deadline (arrival + limit) has
    passed without the event, or whose event came late: certain violators. With N post-warm-up
    requests, numpy's linear percentile exceeds the limit once N - floor((N - 1) pct / 100) of them
    do (the interpolation's lower neighbour is then a violator); one more is required, for margin."""

    def __init__(self, bounds: tuple, reqs: Requests, rec: Records, warmup_s: float):
        arr = np.asarray(reqs.arrival_s)
        self.arr = arr.tolist()
        self.post = np.nonzero(arr >= warmup_s)[0].tolist()
        n = len(self.post)
        self.watch = []  # [bound, record array, needed, deadlines, position, count]
        for b in bounds:
            need = n - math.floor((n - 1) * b.pct / 100) + 1
            limit_s = b.limit_ms / 1e3
            deadlines = [self.arr[i] + limit_s * (1 + 1e-9) + 1e-9 for i in self.post]
            self.watch.append([b, getattr(rec, MISS_METRICS[b.metric]), need, deadlines, 0, 0])
        self.next_s = min((w[3][0] for w in self.watch if w[3]), default=math.inf)

    def missed(self, now: float) -> str:
        """'' while no bound is certainly missed at `now`; else why (compiled: C doubles, the record arrays read as typed views)."""
        nxt = math.inf
        post, arr = self.post, self.arr
        for w in self.watch:
            b, col, need, deadlines, p, count = w
            lim = b.limit_ms
            n = len(deadlines)
            while p < n and deadlines[p] < now:
                i = post[p]
                v = col[i]
                if not (v - arr[i]) * 1e3 <= lim:  # NaN: not happened yet, so after the deadline
                    count += 1
                p += 1
            w[4], w[5] = p, count
            if count >= need:
                return (f"{MISS_STOP} at {now:.0f} s: {count} post-warm-up requests already have {b.metric}_ms above {b.limit_ms:g} "
                        f"({need - 1} decide its p{b.pct:g}); the bound cannot be met")
            if p < len(deadlines):
                nxt = min(nxt, deadlines[p])
        self.next_s = nxt
        return ""


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


# plan's replica search runs one workload at several replica counts and modes, whose limits, engine views and draws
# are the same: each is kept on the profile's resolution
KEPT_MAX = 256  # entries of each per-profile cache below (replica limits, engine views, draws) ...
KEPT_MAX_REQUESTS = 20_000  # ... where draws are kept only for request sets this small (as simulate/point.py keeps them)


def _kept(profile: Profile, name: str, key, make, keep: bool = True):
    """make(), kept under `key` in the cache `name` of the profile's resolution (costmodel/stepcost/resolved.py:
    dropped with the profile object, never shared between two), at most KEPT_MAX entries; `keep` False: made, not kept."""
    memo = resolve(profile).memo(name)
    hit = memo.get(key)
    if hit is None:
        hit = make()
        if keep:
            if len(memo) >= KEPT_MAX:
                memo.clear()
            memo[key] = hit
    return hit


def _limits(profile: Profile, mode: ServingMode, cfg: EngineConfig, sample: np.ndarray) -> ReplicaLimits:
    """replica_limits, kept per profile object, mode, settings and context sample."""
    return _kept(profile, "replica limits", (mode.name, cfg, sample.dtype.str, sample.tobytes()),
                 lambda: replica_limits(profile, mode, cfg, sample))


def _engine_view(profile: Profile, mode: ServingMode, cfg: EngineConfig) -> Profile:
    """engine_profile under mode_settings, kept per profile object, mode and settings: a plan deploys one mode's
    settings hundreds of times, and resolving them layers and checks every setting."""
    return _kept(profile, "engine views", (mode.name, cfg),
                 lambda: engine_profile(profile, mode, mode_settings(profile, mode, cfg)[0]))  # the engine's canvas, denoising budget, k


def _draws(profile: Profile, mode: ServingMode, reqs: Requests, seed: int):
    """mode.draw, kept per engine view, mode, request set and seed: the request sets a plan reuses (simulate/point.py
    _requests) get the same draws for every replica count, and an engine only reads its draws. The set is kept with
    them, so that its id() is not another's."""
    kept, draws = _kept(profile, "draws", (mode.name, id(reqs), seed), lambda: (reqs, mode.draw(profile, reqs, seed)),
                        keep=len(reqs) <= KEPT_MAX_REQUESTS)
    return draws if kept is reqs else mode.draw(profile, reqs, seed)


def deploy(profile: Profile, mode: ServingMode, reqs: Requests, cfg: EngineConfig, seed: int, members: np.ndarray | None = None) -> Deployment:
    """The one way a replica type is resolved, for a point and for a fleet's pool alike. `members`
    (a boolean mask): the requests these replicas serve, what the KV blocks are sized for and
    checked against (a pool of a fleet serves only the requests its class takes; None: all)."""
    native.warn_if_stale()
    profile = _engine_view(profile, mode, cfg)
    draws = _draws(profile, mode, reqs, seed)
    need = draws.kv_need_tokens if members is None else draws.kv_need_tokens[members] if members.any() else draws.kv_need_tokens[:1]
    limits = _limits(profile, mode, cfg, np.asarray(_context_sample(need)))
    check_fits(need, limits.kv_capacity_tokens, mode.name)
    return Deployment(profile, mode, limits.cfg, limits, draws, StepPricer(profile, mode, draws, cfg.shape_bits))


def _only(rep):
    """The route of one replica: every arrival joins it, whatever the router."""

    def route(prompt_tokens: int, output_tokens: int):
        return rep

    return route


class _Loop:
    """One point's arrivals, replicas and clock."""

    def __init__(self, dep: Deployment, reqs: Requests, replicas: int, router: str, abort_backlog_s: float | None, drain_s: float | None,
                 step_trace: list | None = None, miss_bounds: tuple = (), warmup_s: float = 0.0):
        # closed-loop clients: at most this many requests in the system (0: open loop); the window is
        # the span of the sends, known at the last one (until then every engine step counts as inside it)
        self.max_in_flight = int(getattr(reqs, "concurrency", 0) or 0)
        if self.max_in_flight and miss_bounds:
            raise UserError("miss bounds (plan's early stop) need the arrival times up front; a closed loop makes them as it runs",
                            "simulate a closed loop without miss_bounds")
        self.sent: list = []  # closed loop: each request's send time, in arrival order
        # closed loop: every engine departure so far, in time order; a client sees its reply (and
        # frees its slot) the profile's front-end latency later (metrics.py: what the client sees)
        self.returns: list = []
        # the front end hands each request to its engine this long after the one before (a single-server queue
        # per replica; profile engine["frontend_handover_ms"]): a request reaches its replica at
        # max(its send, the replica's last handover) + handover_s (0: at its send). Simulated on one replica
        # (metrics.py front_queued); with several, added to what the client sees as a lone request meets it
        self.front = front_queued(dep.profile, dep.mode.name, replicas)
        self.fe_s = client_lag_s(dep.profile, dep.mode.name, self.front) if self.max_in_flight else 0.0
        self.handover_s = frontend_handover_ms(dep.profile, dep.mode.name) / 1e3 if self.front else 0.0
        self.last_send = 0.0  # closed loop: the last send time
        self.fe_free = [0.0] * replicas  # per replica: when its front end handed over its last request
        # an idle engine core steps this long after the request that wakes it, on every request handed over by
        # then (profile engine["engine_pickup_ms"]); per replica, the instant its first step starts
        self.pickup_s = engine_pickup_ms(dep.profile, dep.mode.name) / 1e3 if self.front else 0.0
        self.wake_at = [0.0] * replicas
        self.reqs = replace(reqs, arrival_s=reqs.arrival_s.copy()) if self.max_in_flight else reqs
        self.rec = Records(len(reqs))
        self.tracker = Tracker(math.inf if self.max_in_flight else reqs.window_s)
        self.departures: list[float] = []
        cls = engine_for(dep.mode.name)
        self.reps = [cls(i, self.departures, dep.cfg, dep.kv_cap, dep.pricer, self.rec, self.tracker, plan=dep.draws,
                         n_groups=len(dep.mode.group_kinds)) for i in range(replicas)]
        route = make_router(router, self.reps)  # simulate/routers: the registry pools route with too
        self.route = route if replicas > 1 else _only(self.reps[0])
        # the default router's choice made here, in the loop's own (compiled) code: the same pick, no call per arrival
        self.pick_least = replicas > 1 and getattr(route, "__module__", None) == least_outstanding.__name__
        if step_trace is not None:  # every engine step recorded (scheduler.Replica.trace; simulate/validate/vllm)
            for rep in self.reps:
                rep.trace = step_trace
        self.woken: list = []
        self.wake_s = 0.0  # the instant the replicas in `woken` were woken
        for rep in self.reps:
            rep.woken_list = self.woken
        self.drain_auto = drain_s is None  # max(DRAIN_MIN_S, the arrival window), once that is known
        self.drain_s = max(DRAIN_MIN_S, reqs.window_s) if drain_s is None else drain_s
        self.abort_backlog_s = abort_backlog_s
        # a closed loop cannot build a backlog: the requests waiting for a slot wait at the clients
        self.limit = (max(ABORT_MIN_WAITING, abort_backlog_s * reqs.qps / replicas) if abort_backlog_s and not self.max_in_flight
                      else math.inf)
        self.arrived, self.abort = 0, ""
        self.bound, self.prev = 0.0, 0.0  # the instant (and its scheduling time) the loop last ran replicas to
        self.miss = _MissWatch(miss_bounds, reqs, self.rec, warmup_s) if miss_bounds else None
        # prompt content for prefix caching (simulate/prefix.py): each arrival's block hashes, made at its arrival
        self.block_size = int(getattr(dep.cfg, "prefix_match_unit", None) or getattr(dep.cfg, "block_size", None) or 0)
        on = self.block_size > 0 and getattr(dep.cfg, "enable_prefix_caching", None) is not False
        self.content = reqs.content if on else None

    def _advance(self, bound: float, prev: float) -> None:
        """Start the replicas woken at the last instant, run every replica to `bound` (an event
        scheduled at `prev`), then record the departures in time order."""
        if self.pickup_s > 0:  # each woken replica starts once its pickup has passed
            woken = self.woken
            keep = []
            for rep in woken:
                w = self.wake_at[rep.idx]
                if w <= bound:
                    rep.start(w)
                else:
                    keep.append(rep)
            woken.clear()
            woken.extend(keep)
        else:
            for rep in self.woken:
                rep.start(self.wake_s)
            self.woken.clear()
        self.bound, self.prev = bound, prev
        for rep in self.reps:
            if rep.quiet_until <= bound:  # the others change nothing anyone can see before bound
                rep.advance(bound, prev)
        deps = self.departures
        if deps:
            deps.sort()
            for t in deps:
                self.tracker.depart(t)
            if self.max_in_flight:
                self.returns.extend(deps)
                if len(self.returns) > len(deps) and self.returns[-len(deps) - 1] > deps[0]:
                    self.returns.sort()
            deps.clear()

    def _handed_over(self, rep, t: float) -> float:
        """When `rep`'s front end hands over a request sent at t: after its previous one, handover_s each."""
        e = self.fe_free[rep.idx]
        e = (t if t > e else e) + self.handover_s
        self.fe_free[rep.idx] = e
        return e

    def _join(self, rep, i: int, t: float, prompt: int, out: int) -> bool:
        """Request i joins `rep` at t; True when it aborts the run."""
        self.tracker.arrive(t)
        rep.advance(self.bound, self.prev)  # it joins this replica's queue at this instant
        if self.pickup_s > 0 and rep.t_end is None and not rep.woken:  # it wakes an idle engine core
            self.wake_at[rep.idx] = t + self.pickup_s
            rep.quiet_until = t + self.pickup_s  # (a closed loop runs the replicas on to it)
        self.enqueue(rep, i, t, prompt, out)
        self.arrived = i + 1
        if len(rep.waiting) > self.limit:
            self.abort = (f"aborted at {t:.0f} s: {len(rep.waiting)} requests waiting on replica {rep.idx} "
                          f"(more than {self.abort_backlog_s:g} s of its arrivals); arrivals outpace service")
            return True
        return False

    def _least_outstanding(self):
        """simulate/routers/least_outstanding.py's pick: the first replica with the fewest outstanding."""
        reps = self.reps
        best = reps[0]
        for j in range(1, len(reps)):
            rep = reps[j]
            if rep.outstanding < best.outstanding:
                best = rep
        return best

    def enqueue(self, rep, i: int, t: float, prompt: int, out: int) -> Request:
        """Request i as the engine sees it (its prompt content's block hashes, for prefix caching)
        joins `rep`'s queue: the one way an arrival reaches a replica, a point's and a fleet's."""
        r = Request(i, t, prompt, out)
        if self.content is not None:
            r.hashes = block_hashes(self.content[i], self.block_size)
        rep.enqueue(r)
        self.rec.replica[i] = rep.idx  # (through rec: a fleet's pool gives its loop the fleet's records, simulate/cluster/pool.py)
        return r

    def run(self) -> float:
        """Run to the end; returns the end time, with unfinished requests' progress recorded."""
        reqs = self.reqs
        arr, prompt, out = reqs.arrival_s.tolist(), reqs.prompt_tokens.tolist(), reqs.output_tokens.tolist()
        miss = self.miss
        cap = self.max_in_flight
        hand = self.front
        now = 0.0
        for i in range(len(arr)):
            t = arr[i]
            if t > now:
                t_next = now + (t - now)  # the clock as a timeout of (t - now) sets it
                self._advance(t_next, now)
                now = self.wake_s = t_next
                if miss is not None and now > miss.next_s and self._missed(now):
                    return self._close(now)
            if cap:
                k = len(self.sent) - cap  # this send needs the client's (k+1)-th reply (none while k < 0)
                if k >= 0 and (len(self.returns) <= k or self.returns[k] + self.fe_s > now):
                    t = self._free_slot(now, k)
                    if t < 0:
                        return self._close(now)
                    now = t
                elif t < now:
                    if hand:  # the clock may be past the send: a handover moved it on
                        t = t if t > self.last_send else self.last_send
                        if k >= 0 and self.returns[k] + self.fe_s > t:
                            t = self.returns[k] + self.fe_s
                    else:
                        t = now  # ready while earlier requests waited for a slot: sent in arrival order
                self.sent.append(t)
                self.last_send = t
            rep = self._least_outstanding() if self.pick_least else self.route(prompt[i], out[i])
            if hand:  # routed at its send, it reaches its replica when the front end hands it over
                e = self._handed_over(rep, t)
                if e > now:
                    self._advance(e, now)
                    now = self.wake_s = e
                t = now
            if self._join(rep, i, t, prompt[i], out[i]):
                # what was already due at this instant runs before the stop: wakes and steps ending now
                self._advance(now, math.inf)
                return self._close(now)
        if cap:
            self._end_window(now)
        return self._drain(now)

    def _end_window(self, now: float) -> None:
        """Closed loop: the arrival window ends at the last send (or the drawn window, if later), known only now."""
        window = now if now > self.reqs.window_s else self.reqs.window_s
        self.tracker.window_end = window
        for rep in self.reps:  # a step in flight was booked in full, before the window's end was known
            if rep.t_end is not None and rep.t_end > window:
                rep.busy_window_s -= rep.t_end - (rep.t_start if rep.t_start > window else window)
        if self.drain_auto:
            self.drain_s = DRAIN_MIN_S if window < DRAIN_MIN_S else window

    def _drain(self, now: float) -> float:
        """After the last arrival: run on for drain_s (in slices where a certain miss may stop it); the end time."""
        miss = self.miss
        deadline = now + self.drain_s
        if miss is not None:  # the drain in slices, so a certain miss stops it too
            while self.tracker.n and now + DRAIN_CHECK_S < deadline:
                nxt = now + DRAIN_CHECK_S
                self._advance(nxt, now)
                now = self.wake_s = nxt
                if now > miss.next_s and self._missed(now):
                    return self._close(now)
        self._advance(deadline, now)
        t_end = deadline if self.tracker.n else self.tracker.t_last
        return self._close(t_end)

    def _free_slot(self, now: float, k: int) -> float:
        """Closed loop: run the replicas on from `now` to the first instant fewer than
        max_in_flight requests are in flight at the clients (their (k+1)-th reply seen: a departure
        plus the front-end latency), every step ending then included; returns it (-1 when nothing
        runs that could free a slot, with the reason in `abort`)."""
        self._advance(now, math.inf)  # replicas woken at this instant start; departures at it count
        while len(self.returns) <= k:
            q = math.inf
            for rep in self.reps:
                if rep.quiet_until < q:
                    q = rep.quiet_until
            if q == math.inf:
                self.abort = f"stopped at {now:.0f} s: {self.tracker.n} requests in the system and no engine step left to run"
                return -1.0
            if q < now:
                q = now
            self._advance(q, math.inf)
            now = q
        seen = self.returns[k] + self.fe_s
        if seen > now:  # the engine runs on while the reply reaches the client
            self._advance(seen, math.inf)
            now = seen
        self.wake_s = now
        return now

    def _missed(self, now: float) -> bool:
        why = self.miss.missed(now)
        if why:
            self.abort = why
        return bool(why)

    def _close(self, t_end: float) -> float:
        for rep in self.reps:  # the replicas the loop left behind, to where it stopped
            rep.advance(self.bound, self.prev)
        self.tracker.close(t_end)
        for rep in self.reps:  # requests still in the system: record how far they got
            for r in list(rep.running.values()) + list(rep.waiting):
                self.rec.steps[r.rid] = r.steps
                self.rec.preemptions[r.rid] = r.preemptions
        return t_end


def simulate_point(profile: Profile, mode: ServingMode, reqs: Requests, *, replicas: int, cfg: EngineConfig, router: str, seed: int,
                   warmup_frac: float, abort_backlog_s: float | None, drain_s: float | None, workload_desc: str,
                   step_trace: list | None = None, miss_bounds: tuple = ()):
    """One point: (PointSummary, per-request DataFrame), and the step pricer it used. `miss_bounds`
    (MissBound, ...): stop as soon as one is certainly missed (the point is reported unstable)."""
    (summary, records), pricer = simulate_records(profile, mode, reqs, replicas=replicas, cfg=cfg, router=router, seed=seed,
                                                  warmup_frac=warmup_frac, abort_backlog_s=abort_backlog_s, drain_s=drain_s,
                                                  workload_desc=workload_desc, step_trace=step_trace, miss_bounds=miss_bounds)
    return (summary, records.frame()), pricer


def simulate_records(profile: Profile, mode: ServingMode, reqs: Requests, *, replicas: int, cfg: EngineConfig, router: str, seed: int,
                     warmup_frac: float, abort_backlog_s: float | None, drain_s: float | None, workload_desc: str,
                     step_trace: list | None = None, miss_bounds: tuple = ()):
    """simulate_point with the per-request records as metrics.RequestRecords (no table built)."""
    # a point allocates many short-lived objects but makes few reference cycles: the cyclic
    # collector's passes over them would take time and free next to nothing (what they would free
    # waits for the next collection after the point)
    gc_on = gc.isenabled()
    gc.disable()
    try:
        return _simulate_point(profile, mode, reqs, replicas, cfg, router, seed, warmup_frac, abort_backlog_s, drain_s, workload_desc,
                               step_trace, miss_bounds)
    finally:
        if gc_on:
            gc.enable()


def _simulate_point(profile, mode, reqs, replicas, cfg, router, seed, warmup_frac, abort_backlog_s, drain_s, workload_desc, step_trace,
                    miss_bounds):
    dep = deploy(profile, mode, reqs, cfg, seed)
    loop = _Loop(dep, reqs, replicas, router, abort_backlog_s, drain_s, step_trace, tuple(miss_bounds), warmup_frac * reqs.window_s)
    t_end = loop.run()
    tracker = loop.tracker
    if loop.max_in_flight:  # the sends are the arrivals; the window their span
        reqs, tracker = _closed_loop_record(loop, t_end)
    warmup_s = warmup_frac * (min(t_end, reqs.window_s) if loop.abort else reqs.window_s)
    return summarise(FinishedRun(
        mode=dep.mode, profile=profile, reqs=reqs, draws=dep.draws, cfg=dep.cfg, limits=dep.limits, replicas=loop.reps, rec=loop.rec, tracker=tracker,
        n_arrived=loop.arrived, t_end=t_end, warmup_s=warmup_s, abort=loop.abort, drain_s=loop.drain_s, seed=seed,
        kv_cap=dep.kv_cap, router=router, workload_desc=workload_desc,
    )), dep.pricer


def _closed_loop_record(loop: _Loop, t_end: float) -> tuple[Requests, Tracker]:
    """A closed loop's requests with their send times as arrivals and its arrival window, and the
    requests-in-system record over that window, rebuilt from the sends and departures."""
    reqs = loop.reqs
    n = len(loop.sent)
    reqs.arrival_s[:n] = loop.sent
    window = max(reqs.window_s, loop.sent[-1]) if n else reqs.window_s
    reqs = replace(reqs, window_s=float(window))
    tracker = Tracker(reqs.window_s)
    fin = np.asarray(loop.rec.finish_s[:n]) + loop.fe_s  # the replies as the clients see them (metrics.py)
    fin = fin[np.isfinite(fin)]
    times = np.concatenate([np.asarray(loop.sent, float), fin])
    gone = np.concatenate([np.zeros(n, bool), np.ones(len(fin), bool)])
    order = np.lexsort((gone, times))  # in time order; at one instant, arrivals first
    for t, g in zip(times[order].tolist(), gone[order].tolist()):
        if g:
            tracker.depart(t)
        else:
            tracker.arrive(t)
    tracker.close(max(t_end, tracker.t_last))
    return reqs, tracker
