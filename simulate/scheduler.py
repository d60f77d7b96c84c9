"""Continuous batching on one replica, as vLLM's scheduler does it, without looping over running
sequences per step.

Per engine step, in order:
1. KV growth of the running decode-phase sequences is allocated; when the cache cannot hold it,
   the most recently admitted running request is preempted (recompute: its KV is freed, it returns
   to the head of the queue, and later re-prefills its prompt plus everything it already emitted),
   repeatedly, until the growth fits.
2. Decode-phase sequences take their tokens of the step budget (`max_num_batched_tokens`): AR 1,
   MTP k+1, diffusion one 256-token canvas (denoise or commit).
3. Partially prefilled requests continue (chunked prefill) with what is left of the budget, in
   admission order; then waiting requests are admitted first-come-first-served while the budget
   lasts, the running count is below the cap and the KV cache can hold their whole prefill
   (admission control; a request that does not fit blocks the ones behind it).

The running cap is min(max_num_seqs, max_num_batched_tokens // decode tokens per sequence), so every
running sequence advances every step: that is what lets each request's next event be scheduled
at a known future step index (`events[step] -> [(request, epoch)]`) instead of being re-examined
every step. Batch composition is kept as counters (sequences per phase, sum of their contexts).

Accounting: KV in tokens, no block rounding; a request's KV is its context (prompt and generated
tokens; diffusion: prompt and committed canvases, the canvas being denoised is not cached). With
prefix caching (simulate/kvcache.py, on unless the settings turn it off), a request with block
hashes starts its prefill after its cache hit, blocks running requests share count once, and
freed blocks stay cached (LRU) in the memory running requests leave; a request without hashes
(no content shared with another) skips the cache, except that a preempted one caches its own
blocks for its re-admission, as vLLM's recompute does.

Time: each replica keeps its own clock (`now`) and runs its steps ahead to a bound the event loop
(sim.py) gives it, the next arrival: replicas share nothing between arrivals but the record of
departures, which the loop merges in time order. A mode's `coast` runs stretches of steps in which
nothing but time and the counters changes (no prefill chunk, no admission, no preemption) in closed
form, up to and including the next step that ends with a request transition: the stretch is a few
runs of one step price each (`book_run`), so its cost does not grow with its length. Step i of a
run from ts ends at ts + (i + 1) * dt instead of a running sum, so results equal stepping one by one
up to float rounding (tests/test_simulate_coast.py). A replica also says until when nothing on it
can be seen from outside (`quiet_until`: no departure, admission or first output), and the loop
runs only the replicas due by then, and the one an arrival is routed to.
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush

from costmodel.errors import UserError
from simulate.kvcache import PrefixCache, private_hashes


class Replica:
    """One serving replica (one GPU). A mode's engine (simulate/engines/<mode>.py, a subclass)
    adds the per-mode decode progression: `schedule()` -> step seconds, `complete(t)`,
    `enter_decode(r, s, t)`, `drop_decoder(r, s)`.

    What an engine may use: `step` (index of the step being run), `now`, `budget`, `kv_used`,
    `kv_reserved`, `kv_cap`, `chunks` (this step's prefill chunks), `events` / `push(due, r)` (a
    request's next transition at a future step), `schedule_prefill(budget, now)`,
    `complete_prefill(s, t)`, `preempt_last(s)`, `pricer.price(m, tp, psum, group_seqs, group_ctx_sums)`,
    `account(dt, m, tp, group_seqs)`, `first_output(r, t)`, `finish(r, t, kv)` and `plan` (the
    mode's draws). Post-conditions of `schedule()`: KV for the step's growth is allocated, the
    prefill chunks are chosen, the step's seconds are returned and accounted once. An engine may
    also define `coast(t, bound, prev) -> t'` (see `advance`; `book_run` books it); the default
    runs no step ahead. `tokens_per_seq`: budget tokens one decode-phase sequence takes per step."""

    ENGINE_PART = ("schedule", "complete", "enter_decode", "drop_decoder")

    def __init__(self, idx: int, departures: list, cfg, kv_capacity: int, pricer, rec, tracker, plan=None, n_groups: int = 1,
                 tokens_per_seq: int = 1):
        missing = [m for m in self.ENGINE_PART if getattr(type(self), m) is getattr(Replica, m)]
        if missing:
            raise TypeError(f"{type(self).__name__} is not an engine: it does not implement {', '.join(missing)} (see simulate/engines)")
        self.idx = idx
        self.tokens_per_seq = tokens_per_seq
        # a list to record every step into, as (replica, step, start_s, seconds, prefill chunks,
        # prefill tokens, sequences per group), or None (no per-step cost). Set, it turns coasting
        # off, which changes no result beyond float rounding.
        self.trace = None
        # vLLM's async scheduling (GPU default; vllm/v1/engine/core.py step_with_batch_queue): step N+1 is
        # scheduled once step N is launched and step N-1's output taken in, so an arrival during step N is first
        # admitted at step N+2, or at N+1 while N's launch holds the host (`sched_next_s`, set in `start`)
        self.async_sched = bool(getattr(cfg, "async_scheduling", False))
        self.departures = departures  # finish times of every replica (the event loop merges them in time order)
        self.now = 0.0  # this replica's clock: the start of the step being scheduled, or the end of the last
        self.budget = int(cfg.max_num_batched_tokens)
        self.max_seqs = min(int(cfg.max_num_seqs), self.budget // self.tokens_per_seq)
        if self.max_seqs < 1:
            raise UserError(f"max_num_batched_tokens {self.budget} cannot hold one decode-phase sequence ({self.tokens_per_seq} tokens per step)",
                            f"give --max-num-batched-tokens >= {self.tokens_per_seq}")
        self.kv_cap = kv_capacity
        # vLLM's prefix cache (simulate/kvcache.py): on unless the settings turn it off (vLLM's default)
        bs = getattr(cfg, "block_size", None)
        self.pc = (PrefixCache(bs, getattr(cfg, "prefix_match_unit", None)) if bs and getattr(cfg, "enable_prefix_caching", None) is not False
                   else None)
        # whether blocks past a request's prompt (its output: AR tokens, MTP verified drafts, diffusion committed
        # canvases) can be hit by another request; not for the hybrid Gemma-4 layout (simulate/kvcache.py)
        self.cache_outputs = False
        self.pricer = pricer
        # the record's columns this replica writes, held directly (typed memoryviews when compiled)
        self.start_s, self.first_s, self.finish_s = rec.start_s, rec.first_s, rec.finish_s
        self.rec_steps, self.rec_preemptions = rec.steps, rec.preemptions
        self.rec_cached = rec.cached_tokens
        self.tracker = tracker
        self.plan = plan
        self.waiting: deque = deque()
        self.running: dict = {}  # rid -> Request, in admission order (preemption victim: the last)
        self.prefilling: list = []
        self.chunks: list = []  # (request, tokens) prefilled in the current step
        self.kv_used = 0.0  # KV tokens allocated
        self.kv_reserved = 0  # KV tokens still to be written by admitted prefills
        self.events: dict = {}
        self.dues: list = []  # heap of the step indices in `events` (stale ones below `step` included)
        self.step = 0
        self.outstanding = 0  # routed here and not finished (least-outstanding routing)
        self.t_start = 0.0  # start of the step in flight
        self.t_end = None  # end of the step in flight; None while idle
        self.sched_next_s = 0.0  # async: when the step after the one in flight is scheduled (arrivals by then join it)
        # nothing the loop or another replica can see (a departure, an admission, a first output)
        # happens on this replica before this time unless a request is routed here: the loop need
        # not run it to an arrival before then (it is at the end of a full step or of a coast)
        self.quiet_until = float("inf")
        self.woken = False  # idle, and a request arrived: the loop starts a step at the arrival
        self.woken_list: list = []  # the loop's list of woken replicas (it replaces this one)
        self.preemptions = 0
        self._init_steps(pricer, n_groups, tokens_per_seq)

    def _init_steps(self, pricer, n_groups: int, tokens_per_seq: int):
        """What a step's pricing and accounting keep: the eager launch under async scheduling, each group's budget
        tokens per sequence, the per-step accumulators."""
        # Async scheduling hands a step's outputs back only once the next step is launched (vLLM 0.26
        # vllm/v1/engine/core.py step_with_batch_queue: schedule and launch N+1, then wait for N's result). A step
        # past the largest CUDA graph is launched kernel by kernel from the host, so a first token sampled in the
        # step before it reaches the client that launch later (at most the step itself: `start`). The launch is the
        # profile's price of the smallest eager step, a lone prefill one token past the graphs (`eager_launch_s`).
        self.pending_first: list = []  # first tokens of the step that just ended, until the next step is known
        cost = getattr(pricer, "cost", None)
        self.graph_max = int(getattr(cost, "graph_max_tokens", 0) or 0) if self.async_sched else 0
        draws = getattr(pricer, "draws", None)
        gt = tuple(getattr(draws, "group_tokens", ()) or ())
        self.group_tokens = gt if len(gt) == n_groups else (tokens_per_seq,) * n_groups  # budget tokens per sequence, per group
        self.eager = False  # the step in flight runs past the largest CUDA graph
        self.launch_s = -1.0  # the eager launch (s), priced when first needed
        # per-step accumulators (batch composition, utilisation)
        self.busy_s = self.busy_window_s = 0.0
        self.n_steps = self.acc_prefill_seqs = self.acc_prefill_tokens = 0
        self.acc_groups = [0] * n_groups  # sequences per decode-phase group, summed over steps
        self.coasted = 0  # steps done by the last booked coast (book_one, _book)

    # ---- an engine's part (simulate/engines) ---------------------------------------------------
    # Declared here so the scheduler's own methods call them directly (compiled: through the C
    # vtable); every registered engine overrides all four, and a class that does not is refused
    # when it is instantiated (__init__ below), not in the middle of a run.
    def schedule(self) -> float:
        """Allocate the step's KV growth, choose its prefill chunks, account it; its seconds."""
        raise TypeError(f"{type(self).__name__} does not implement schedule()")

    def complete(self, t: float) -> None:
        """The step in flight ended at t: advance the step counter and its requests' transitions."""
        raise TypeError(f"{type(self).__name__} does not implement complete()")

    def enter_decode(self, r, s: int, t: float) -> None:
        """r's prefill completed in step s (ending at t)."""
        raise TypeError(f"{type(self).__name__} does not implement enter_decode()")

    def drop_decoder(self, r, s: int) -> None:
        """Take decode-phase r out of the batch before step s (it is being preempted)."""
        raise TypeError(f"{type(self).__name__} does not implement drop_decoder()")

    # ---- queue -------------------------------------------------------------------------------
    def enqueue(self, r) -> None:
        """Queue r; an idle replica joins the loop's `woken` list (it starts a step at the arrival)."""
        r.replica = self.idx
        # the first step that may admit r: the next one, or (async, a step in flight) the one after it unless r
        # arrived before that next step was scheduled (during the launch of the step in flight: `start`)
        if self.async_sched and self.t_end is not None:
            r.eligible = self.step + 1 if r.arrival_s <= self.sched_next_s else self.step + 2
        else:
            r.eligible = 0
        self.waiting.append(r)
        self.outstanding += 1
        if self.t_end is None:
            if not self.woken:
                self.woken = True
                self.woken_list.append(self)
        elif self.t_end < self.quiet_until:
            self.quiet_until = self.t_end  # r may be admitted when the step in flight ends

    # ---- scheduling --------------------------------------------------------------------------
    def schedule_prefill(self, budget: int, now: float) -> tuple[int, int, int]:
        """Prefill chunks for this step within `budget` tokens: (chunks, tokens, context sum)."""
        chunks = self.chunks
        if chunks:  # (an empty one is kept: no list made per step)
            chunks = self.chunks = []
        m = tp = psum = 0
        pc = self.pc
        for r in self.prefilling:
            if budget <= 0:
                break
            c = r.prefill_len - r.prefill_done
            if c > budget:
                c = budget
            chunks.append((r, c))
            m += 1
            tp += c
            psum += r.prefill_done
            budget -= c
            if r.hashes is not None and pc is not None:
                pc.insert(r, r.prefill_done + c)  # cached when scheduled (KVCacheManager.allocate_slots)
        waiting = self.waiting
        if waiting and budget > 0:
            running = self.running
            rec_start = self.start_s
            while waiting and budget > 0 and len(running) < self.max_seqs:
                r = waiting[0]
                if r.hashes is not None and pc is not None:
                    if not self._admit_cached(r):
                        break
                elif self.kv_used + self.kv_reserved + r.prefill_len > self.kv_cap or (r.eligible > self.step and running):
                    break  # (async: a step with nothing else to run takes it at once, as an idle engine does)
                waiting.popleft()
                running[r.rid] = r
                self.prefilling.append(r)
                self.kv_reserved += r.prefill_len - r.prefill_done
                if not r.started:
                    r.started = True
                    rec_start[r.rid] = now
                c = r.prefill_len - r.prefill_done
                if c > budget:
                    c = budget
                chunks.append((r, c))
                m += 1
                tp += c
                psum += r.prefill_done
                budget -= c
                if r.hashes is not None and pc is not None:
                    pc.insert(r, r.prefill_done + c)
        if tp:
            self.kv_used += tp
            self.kv_reserved -= tp
        return m, tp, psum

    # ---- prefix caching (simulate/kvcache.py) --------------------------------------------------
    def _cache_room(self) -> int:
        """Blocks the free cached blocks may occupy: the memory running requests leave."""
        return int((self.kv_cap - self.kv_used - self.kv_reserved) // self.pc.bs)

    def kv_need(self, r) -> float:
        """KV tokens r's admission takes: its prefill, less the hit blocks running requests share."""
        pc = self.pc
        if r.hashes is None or pc is None:
            return r.prefill_len
        pc.evict(self._cache_room())
        return r.prefill_len - pc.shared_tokens(r.hashes, pc.lookup(r.hashes, r.prefill_len))

    def _admit_cached(self, r) -> bool:
        """Admission of a request with block hashes (schedule_prefill's checks with its cache hit):
        its hit blocks are taken (KVCacheManager.get_computed_blocks, BlockPool.touch) and its
        prefill starts after them. False: it does not fit (or, async, is not eligible yet)."""
        pc = self.pc
        pc.evict(self._cache_room())
        hit = pc.lookup(r.hashes, r.prefill_len)
        need = r.prefill_len - (pc.shared_tokens(r.hashes, hit) if hit else 0)
        if self.kv_used + self.kv_reserved + need > self.kv_cap or (r.eligible > self.step and self.running):
            return False
        if hit:
            self.kv_used += pc.acquire(r, hit)
        r.prefill_done = hit * pc.bs
        if r.hit < 0:
            r.hit = r.prefill_done
            self.rec_cached[r.rid] = r.prefill_done
        return True

    def free_kv(self, r, kv: float, cached: float) -> None:
        """Free r's `kv` KV tokens as it leaves the batch (finished or preempted). With prefix
        caching its full blocks up to `cached` tokens are cached first and its blocks go to the free
        queue (those other running requests hold stay); a preempted request without hashes gets
        its own (private content) so that its re-admission hits them, as in vLLM."""
        pc = self.pc
        if pc is None or (r.hashes is None and (cached < pc.bs or r.n_out <= r.emitted)):
            self.kv_used -= kv
            return
        if r.hashes is None:
            r.hashes = private_hashes(r.rid, (r.prompt + r.n_out) // pc.bs)
        pc.insert(r, int(cached) if self.cache_outputs else min(int(cached), r.prompt))
        self.kv_used -= kv - pc.release(r)
        pc.evict(self._cache_room())

    def head_admitted_at(self, decode_tokens: int, kv_growth: float) -> float:
        """The step at which the head of the queue is admitted if the batch stays as it is (decode
        tokens and KV growth per step), by schedule_prefill's rules; inf when it is not (no budget
        or slot left, or its prefill does not fit the cache, which only fills up as the batch runs)."""
        w = self.waiting
        if not w or self.budget - decode_tokens <= 0 or len(self.running) >= self.max_seqs:
            return float("inf")
        r = w[0]  # (a typed record when compiled: its fields read in C)
        if self.kv_used + kv_growth + self.kv_reserved + (r.prefill_len if r.hashes is None else self.kv_need(r)) <= self.kv_cap:
            return self.step if self.step >= r.eligible else r.eligible
        return float("inf")

    def complete_prefill(self, s: int, t: float) -> None:
        for r, c in self.chunks:
            r.prefill_done += c
            r.steps += 1
            if r.prefill_done >= r.prefill_len:
                self.prefilling.remove(r)
                self.enter_decode(r, s, t)

    def preempt_last(self, s: int) -> None:
        """Recompute-preempt the most recently admitted running request before step s."""
        _, r = self.running.popitem()
        if r.prefill_done < r.prefill_len:
            self.prefilling.remove(r)
            self.kv_reserved -= r.prefill_len - r.prefill_done
            self.free_kv(r, r.prefill_done, r.prefill_done)
        else:
            self.drop_decoder(r, s)
        r.prefill_done = 0
        r.epoch += 1
        r.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(r)

    def push(self, due: int, r) -> None:
        key = due  # (one Python int when compiled, for the dict and the heap)
        ev = self.events.get(key)
        if ev is None:
            self.events[key] = [(r, r.epoch)]
            heappush(self.dues, key)
        else:
            ev.append((r, r.epoch))

    def events_at(self, s: int):
        """The transitions scheduled for step s, taken out of `events` (None: none). Every step in `events`
        is in the heap `dues`, so when its earliest is later than s there is none, and no lookup is made."""
        dues = self.dues
        if not dues:
            return None
        d = dues[0]
        if d > s:
            return None
        return self.events.pop(s, None)

    def next_due(self) -> float:
        """The smallest step index at or after `step` holding a request transition (inf: none)."""
        dues, s = self.dues, self.step
        while dues:
            d = dues[0]  # (a C integer when compiled: compared without a Python int made of s)
            if d >= s:
                return d
            heappop(dues)
        return float("inf")

    def finish(self, r, t: float, kv: float) -> None:
        self.release(r, kv)
        self.record_finish(r, t)

    def release(self, r, kv: float) -> None:
        """Free r's KV and running slot (its context's full blocks cached)."""
        if self.pc is None:
            self.kv_used -= kv
        else:
            self.free_kv(r, kv, kv)
        del self.running[r.rid]

    def record_finish(self, r, t: float) -> None:
        """r's last output was emitted at t (its slot may be released later: see the diffusion mode)."""
        self.outstanding -= 1
        self.finish_s[r.rid] = t
        self.rec_steps[r.rid] = r.steps
        self.rec_preemptions[r.rid] = r.preemptions
        self.departures.append(t)

    def first_output(self, r, t: float) -> None:
        if not r.first:
            r.first = True
            self.first_s[r.rid] = t
            if self.graph_max:
                self.pending_first.append(r)  # seen later if the next step is eager (start)

    def eager_launch_s(self) -> float:
        """Seconds the host takes to launch an eager step: the price of the smallest one (a lone prefill one token
        past the largest CUDA graph), from the profile's own step model."""
        if self.launch_s < 0:
            n = len(self.group_tokens)
            self.launch_s = self.pricer.price(1, self.graph_max + 1, 0, (0,) * n, (0.0,) * n)
        return self.launch_s

    def account(self, dt: float, m: int, tp: int, group_seqs: tuple) -> None:
        if self.graph_max:
            tokens = tp
            gt = self.group_tokens
            for i in range(min(len(group_seqs), len(gt))):  # (index loops: compiled, no iterator objects)
                n = group_seqs[i]
                g = gt[i]
                tokens += n * g
            self.eager = tokens > self.graph_max
        if self.trace is not None:
            self.trace.append((self.idx, self.step, self.now, dt, m, tp, tuple(group_seqs)))
        self.busy_s += dt
        end = self.tracker.window_end
        t0 = self.now
        if t0 < end:
            self.busy_window_s += dt if t0 + dt <= end else end - t0
        self.n_steps += 1
        self.acc_prefill_seqs += m
        self.acc_prefill_tokens += tp
        acc = self.acc_groups
        for i in range(len(group_seqs)):
            acc[i] += group_seqs[i]
        pc = self.pc
        if pc is not None and pc.free:  # the step's new blocks take the oldest free cached ones (BlockPool.get_new_blocks)
            pc.evict(self._cache_room())

    # ---- time ------------------------------------------------------------------------------
    def start(self, t: float) -> None:
        """Schedule a step at t (the replica was idle, or its last step ended at t).

        Async scheduling: the engine core schedules the next step once this one is launched and the previous one's
        output taken in (`step_with_batch_queue`). A step that follows another was launched while that one ran, so
        the next step is scheduled as this one starts, except after an eager prefill step, whose launch holds the
        host (the recorded gap before it), and after the step an idle engine starts (nothing ran to hide its launch):
        the profile's smallest eager step, at most the step itself (`eager_launch_s`). An arrival before then joins
        the next step. The first tokens of the step before an eager one are seen once its launch is done."""
        idle = self.t_end is None
        self.now = self.t_start = t
        self.woken = False
        dt = self.schedule()
        self.t_end = self.quiet_until = t + dt
        lag = 0.0
        if self.graph_max and (self.eager or idle):
            lag = self.eager_launch_s()
            if dt < lag:
                lag = dt
        self.sched_next_s = t + lag if (idle or self.chunks) else t
        if self.pending_first:
            if self.eager:  # the first tokens of the step before reach the client once this one is launched
                seen = t + lag
                for r in self.pending_first:
                    if self.first_s[r.rid] == t:
                        self.first_s[r.rid] = seen
            self.pending_first = []

    def coast(self, t: float, bound: float, prev: float):
        """Steps a mode can run from t without the per-step bookkeeping; returns the time the next
        full step starts at, or None when the mode left a step in flight (none by default)."""
        return t

    def book_run(self, t: float, bound: float, prev: float, segs: list, last_due: bool, kv_step: float,
                 group_seqs: tuple) -> tuple[float | None, int]:
        """Book a mode's coast in closed form: from t the steps of `segs` [(steps, seconds each), ...]
        run back to back (step i of a segment starting at ts spans ts + i*dt .. ts + (i+1)*dt), each
        growing the KV by `kv_step`; `last_due`: the run's last step is one whose end has a request
        transition (complete() must run it). Steps that end before `bound` (at it: when they started
        before `prev`, as a heap ordered by (time, scheduling order) runs them) are done; the next is
        left in flight. Sets `quiet_until` (the run's end: nothing another replica or the loop can see
        happens here before it). Returns (coast's result - the time the next full step starts at, or
        None with a step in flight - and the steps done)."""
        done, busy, f0, f1, run_end = _position(t, bound, prev, segs, last_due)
        res = self._book(t, done, busy, f0 is not None, f0 if f0 is not None else 0.0, f1 if f1 is not None else 0.0, run_end, kv_step,
                         group_seqs)
        return res, done

    def book_one(self, t: float, bound: float, prev: float, n: int, dt: float, last_due: bool, kv_step: float, group_seqs: tuple):
        """book_run of a run of one price, [(n, dt)] (a coast's common case), without building the run's
        list or its position's tuple; the steps done are left in `coasted`."""
        mf = (bound - t) / dt  # the steps that end before the bound, as _position finds them
        m = 0 if mf < 0 else (n if mf > n else int(mf))
        while m > 0:
            e = t + m * dt
            if e < bound or (e == bound and t + (m - 1) * dt < prev):
                break
            m -= 1
        while m < n:
            e = t + (m + 1) * dt
            if not (e < bound or (e == bound and t + m * dt < prev)):
                break
            m += 1
        run_end = t + n * dt
        if m < n:
            return self._book(t, m, (m + 1) * dt, True, t + m * dt, t + (m + 1) * dt, run_end, kv_step, group_seqs)
        if last_due:  # every step done: the last stays in flight for complete()
            return self._book(t, n - 1, n * dt, True, t + (n - 1) * dt, run_end, run_end, kv_step, group_seqs)
        return self._book(t, n, n * dt, False, 0.0, 0.0, run_end, kv_step, group_seqs)

    def _book(self, t: float, done: int, busy: float, in_flight: bool, f0: float, f1: float, run_end: float, kv_step: float, group_seqs: tuple):
        """Book a run's position (_position's): its steps done, and the one in flight [f0, f1) if any;
        returns the time the next full step starts at, or None with a step in flight."""
        k = done + in_flight
        self.coasted = done
        self.quiet_until = run_end
        self.step += done
        self.kv_used += k * kv_step
        self.busy_s += busy
        wend = self.tracker.window_end
        if t < wend:
            last = f1 if in_flight else run_end
            self.busy_window_s += (last if last < wend else wend) - t
        self.n_steps += k
        acc = self.acc_groups
        for i in range(len(group_seqs)):
            acc[i] += k * group_seqs[i]
        pc = self.pc
        if pc is not None and pc.free:  # as account() after each step: the KV only grew, so once at the end
            pc.evict(self._cache_room())
        if self.chunks:
            self.chunks = []
        if not in_flight:
            return run_end
        self.now = self.t_start = f0
        self.t_end = f1
        self.sched_next_s = f0  # a coasted step prefills nothing and follows a step: launched while that one ran (`start`)
        return None

    def advance(self, bound: float, prev: float) -> None:
        """Complete every step that ends before an event at `bound` scheduled at time `prev`: a step
        ending at `bound` itself goes first when it was scheduled earlier (t_start < prev), as a
        heap ordered by (time, scheduling order) runs them. Steps after it are scheduled, not run."""
        while True:
            if self.t_end is None:
                return
            te = self.t_end  # (a C double when compiled: compared without boxing bound)
            if te > bound or (te == bound and self.t_start >= prev):
                return
            self.now = te
            self.complete(te)
            if not self.running and not self.waiting:
                self.pending_first = []
                self.t_end = None
                self.quiet_until = float("inf")
                return
            t = self.coast(te, bound, prev) if self.trace is None and not self.pending_first else te
            if t is not None:
                self.start(t)


def _position(t: float, bound: float, prev: float, segs, last_due: bool) -> tuple:
    """Where a run of steps from t (book_run) stands at `bound`: (steps done, busy seconds of the
    steps done and in flight, in-flight step's start and end - None, None when none - and the
    run's end). A step ending exactly at `bound` is done when it started before `prev`."""
    done = 0
    ts = last_ts = t
    f0 = f1 = None
    busy = 0.0
    for n, dt in segs:
        last_ts = ts
        if f0 is None:
            # m: the steps of this segment that end before the bound (a float estimate, made exact)
            mf = (bound - ts) / dt
            m = 0 if mf < 0 else (n if mf > n else int(mf))
            while m > 0:
                e = ts + m * dt  # end of step m - 1
                if e < bound or (e == bound and ts + (m - 1) * dt < prev):
                    break
                m -= 1
            while m < n:
                e = ts + (m + 1) * dt
                if not (e < bound or (e == bound and ts + m * dt < prev)):
                    break
                m += 1
            if m < n:
                f0, f1 = ts + m * dt, ts + (m + 1) * dt
                done += m
                busy += (m + 1) * dt
            else:
                done += n
                busy += n * dt
        ts = ts + n * dt
    if f0 is None and last_due:  # every step done: the last stays in flight for complete()
        n, dt = segs[-1]
        done -= 1
        f0, f1 = last_ts + (n - 1) * dt, ts
    return done, busy, f0, f1, ts


def steps_within(room: float, per_step: float) -> int:
    """How many steps j = 0, 1, ... satisfy j * per_step <= room: a coast's steps before the KV
    growth (per_step per step) no longer fits the cache's free room."""
    if room < 0:
        return 0
    j = int(room / per_step)  # (then + 1: the int's sum in C when compiled)
    j += 1
    while j > 0 and (j - 1) * per_step > room:
        j -= 1
    while j * per_step <= room:
        j += 1
    return j
