"""Block diffusion on a replica (DiffusionGemma-26B-A4B, costmodel/modes/diffusion.py): after its
prefill a request denoises its canvas for k steps (one 256-token denoise forward per engine step),
then the next step is its commit pass, whose end emits the canvas: k+1 engine steps per canvas.
One engine step mixes prefill chunks, denoising canvases and commits in one forward; the mode's
draws (DiffusionDraws) give every canvas's k.

Canvas slots. vLLM's scheduler walks its running requests in order and gives each what it needs
while the token budget lasts (vllm/v1/core/sched/scheduler.py Scheduler.schedule, the RUNNING loop:
`while req_index < len(self.running) and token_budget > 0`, `num_new_tokens = min(num_new_tokens,
token_budget)`); a denoising or committing canvas needs the whole canvas (its draft tokens).
Admission is bounded by max_num_seqs alone (the WAITING loop: `len(self.running) <
self.max_num_running_reqs`, with budget left). So where the budget holds fewer canvases than
max_num_seqs (canvas 256, budget 512, max_num_seqs 4), up to max_num_seqs requests are admitted and
prefilled, the first budget // canvas of them in running order denoise, and the rest wait, prefilled
and holding their KV, for a canvas slot; a request keeps its slot until it finishes (earlier
requests come first in the walk every step), and a freed slot goes to the first waiting one in
running order (`parked`), in the next step.

Partial canvas. Where the budget is not a whole number of canvases (canvas 64, budget 100), the
walk gives the next request in running order what is left, `part` = budget - slots * canvas tokens
(36): vLLM schedules that many of its canvas's draft tokens (`num_scheduled_spec_tokens`), and the
DiffusionGemma sampler runs the request's step at the canvas width with the positions past them
padded (vllm/model_executor/models/diffusion_gemma.py DiffusionSampler, `valid_canvas_len`): a
denoising step counts toward its k like a whole one (the step counter moves per step, not per
position), and a commit emits the `part` tokens it computed (`num_sampled = valid_canvas_len`), the
next canvas starting after them. The request holds this partial slot (`pr`) until a whole slot
frees: from the next step its canvas goes on at full width (its step count kept), and the first
parked request takes the partial slot. With a partial canvas in the step the budget is spent: no
prefill chunk runs and no request is admitted. A request served partly in partial commits needs
more canvases than its output // canvas; each canvas past the ones drawn takes its last k."""

from __future__ import annotations

from collections import deque

from simulate.scheduler import Replica, steps_within


class DiffusionReplica(Replica):
    """Counters for denoising canvases (n_den, s_den) and commits (n_com, s_com) of whole canvases;
    `slots` whole canvases of the token budget, `part` tokens left beside them (0 when the budget
    is whole canvases), `pr` the request denoising or committing that partial canvas (None: none),
    `parked` the prefilled requests waiting for a slot."""

    def __init__(self, *a, **kw):
        plan = kw["plan"]
        super().__init__(*a, tokens_per_seq=plan.canvas, **kw)
        cfg = a[2] if len(a) > 2 else kw["cfg"]
        self.C = plan.canvas
        self.slots = self.budget // self.C  # canvases one step's budget holds
        self.part = self.budget - self.slots * self.C  # the partial canvas's tokens beside them
        self.max_seqs = int(cfg.max_num_seqs)  # admission: max_num_seqs alone (see the module docstring)
        self.parked = deque()
        self.pr = None
        self.k = plan.k
        self.kofs = plan.kofs
        self.nblocks = plan.blocks_list
        self.n_den = self.n_com = 0
        self.s_den = self.s_com = 0
        self.cm_nd = self.cm_nc = self.cm_sd = self.cm_sc = -1  # coast's last whole-canvas step (counters) and its price
        self.cm_dt = 0.0
        self.sq_nd, self.sq_nc, self.sq_t = -1, -1, ()  # _seqs's last tuple

    def schedule(self) -> float:
        s = self.step
        C = self.C
        nc = self.n_com
        grow = C * nc + self._part_growth()
        while grow and self.kv_used + self.kv_reserved + grow > self.kv_cap:
            self.preempt_last(s)
            nc = self.n_com
            grow = C * nc + self._part_growth()
        self.kv_used += grow
        nd = self.n_den
        pr = self.pr
        if pr is None:
            m, tp, psum = self.schedule_prefill(self.budget - C * (nd + nc), self.now)
            dt = self.pricer.price_two(m, tp, psum, nd, nc, self.s_den, self.s_com)
            self.account(dt, m, tp, self._seqs(nd, nc))
            return dt
        self.schedule_prefill(0, self.now)  # the partial canvas spent the budget: no chunk, no admission
        g = 1 if pr.committing else 0
        dt = self.pricer.price_part((nd, nc), (self.s_den, self.s_com), g, self.part, pr.ctx0)
        self.account(dt, 0, 0, (nd + 1 - g, nc + g))
        return dt

    def _seqs(self, nd: int, nc: int) -> tuple:
        """(nd, nc): the step's canvases per group, as account and book_one take them, made once per pair."""
        if nd != self.sq_nd or nc != self.sq_nc:
            self.sq_nd, self.sq_nc, self.sq_t = nd, nc, (nd, nc)
        return self.sq_t

    def _part_growth(self) -> int:
        """KV tokens the partial canvas writes this step: its part when it commits."""
        pr = self.pr
        return self.part if pr is not None and pr.committing else 0

    def coast(self, t: float, bound: float, prev: float):
        """Run, in closed form, the steps from t in which nothing is prefilled, admitted or preempted
        (one price: the counters do not move), up to and including the next step that ends with a
        canvas finishing its denoising or commit; the one that ends past `bound` (or that step) is
        left in flight (Replica.advance, book_run). Returns the time a full step must start at, or
        None when a step is in flight. A partial canvas spends the budget, so prefills wait."""
        nd, nc = self.n_den, self.n_com
        pr = self.pr
        if not (nd or nc) or (self.prefilling and pr is None):
            return t
        s, due = self.step, self.next_due()
        grow = self.C * nc + self._part_growth()
        # steps before the commits' KV growth needs a preemption (denoising canvases write none)
        steps = steps_within(self.kv_cap - self.kv_reserved - grow - self.kv_used, grow) if grow else float("inf")
        tokens = self.C * (nd + nc) + (self.part if pr is not None else 0)
        steps = min(steps, self.head_admitted_at(tokens, grow) - s)  # an admission is a full step
        last_due = due - s + 1 <= steps
        if last_due:
            steps = due - s + 1
        if steps <= 0 or steps == float("inf"):
            return t
        if pr is None:
            sd, sc = self.s_den, self.s_com
            if nd == self.cm_nd and nc == self.cm_nc and sd == self.cm_sd and sc == self.cm_sc:
                dt = self.cm_dt  # the counters as at the last coast (resumed after an arrival): its price
            else:
                dt = self.cm_dt = self.pricer.price_two(0, 0, 0, nd, nc, sd, sc)
                self.cm_nd, self.cm_nc, self.cm_sd, self.cm_sc = nd, nc, sd, sc
            seqs = self._seqs(nd, nc)
        else:
            g = 1 if pr.committing else 0
            dt = self.pricer.price_part((nd, nc), (self.s_den, self.s_com), g, self.part, pr.ctx0)
            seqs = (nd + 1 - g, nc + g)
        return self.book_one(t, bound, prev, int(steps), dt, last_due, grow, seqs)

    def complete(self, t: float) -> None:
        s = self.step
        self.step = s + 1
        if self.chunks:
            self.complete_prefill(s, t)
        ev = self.events_at(s)
        if ev:
            freed = False
            for r, ep in ev:
                if ep != r.epoch:
                    continue
                if r.committing:
                    freed = self._emit(r, s, t) or freed
                elif r.emitted >= r.n_out:  # its wasted denoise step after the last commit (async)
                    self._leave_slot(r)
                    r.steps += 1
                    self.release(r, r.ctx0)
                    freed = True
                else:  # k denoising steps done: the next step is the commit pass
                    if r is not self.pr:
                        self.n_den -= 1
                        self.s_den -= r.ctx0
                        self.n_com += 1
                        self.s_com += r.ctx0
                    r.steps += s - r.dec_start + 1
                    r.committing = True
                    r.dec_start = s + 1
                    self.push(s + 1, r)
            if freed:  # slots freed in step s are taken from s + 1, once every canvas of step s is done
                self._fill(s)

    def _emit(self, r, s: int, t: float) -> bool:
        """Commit done: emit the canvas (the partial one's part); finish, or start denoising the
        next one in the same slot. True when r's slot is freed."""
        partial = r is self.pr
        w = self.part if partial else self.C
        if not partial:
            self.n_com -= 1
            self.s_com -= r.ctx0
        r.steps += 1
        r.committing = False
        r.block += 1
        r.ctx0 += w
        r.emitted = min(r.n_out, r.emitted + w)
        self.first_output(r, t)
        if r.emitted < r.n_out:
            self._begin(r, s, partial, self._k_of(r))
            return False
        if self.async_sched:
            # vLLM's DiffusionAsyncScheduler scheduled step s+1 before this commit's output was read, with
            # r as a denoising canvas (the max_tokens guard does not fire on a final commit,
            # vllm/v1/core/sched/diffusion_scheduler.py): r finishes now, its canvas and slot go after s+1
            self.record_finish(r, t)
            self._begin(r, s, partial, 1)
            return False
        if partial:
            self.pr = None
        self.finish(r, t, r.ctx0)
        return True

    def _k_of(self, r) -> int:
        """Denoising steps of r's current canvas (past its drawn canvases: the last one's)."""
        b, nb = r.block, self.nblocks[r.rid]
        return self.k[self.kofs[r.rid] + (b if b < nb else nb - 1)]

    def _begin(self, r, s: int, partial: bool, steps: int) -> None:
        """r starts a canvas at step s+1 in a whole slot or (partial) the partial one; its denoising
        ends with step s + steps."""
        r.dec_start = s + 1
        if partial:
            self.pr = r
        else:
            self.n_den += 1
            self.s_den += r.ctx0
        self.push(s + steps, r)

    def _leave_slot(self, r) -> None:
        """A denoising r leaves its slot (whole or partial)."""
        if r is self.pr:
            self.pr = None
        else:
            self.n_den -= 1
            self.s_den -= r.ctx0

    def _fill(self, s: int) -> None:
        """Slots freed in step s, taken from s+1 in running order: the partial canvas's request goes on
        at full width, then the first parked requests start; the next parked one takes the partial slot."""
        parked = self.parked
        while self.n_den + self.n_com < self.slots:
            pr = self.pr
            if pr is not None:
                self.pr = None
                if pr.committing:
                    self.n_com += 1
                    self.s_com += pr.ctx0
                else:
                    self.n_den += 1
                    self.s_den += pr.ctx0
            elif parked:
                r = parked.popleft()
                self._begin(r, s, False, self._k_of(r))
            else:
                return
        if self.part and self.pr is None and parked:
            r = parked.popleft()
            self._begin(r, s, True, self._k_of(r))

    def _denoise(self, r, s: int) -> None:
        """r (prefilled in step s) takes a whole slot, else the partial one, else waits in running order."""
        if self.n_den + self.n_com < self.slots:
            self._begin(r, s, False, self._k_of(r))
        elif self.part and self.pr is None:
            self._begin(r, s, True, self._k_of(r))
        else:
            self.parked.append(r)

    def enter_decode(self, r, s: int, t: float) -> None:
        r.ctx0 = r.prefill_len
        r.committing = False
        self._denoise(r, s)

    def drop_decoder(self, r, s: int) -> None:
        """Committed canvases stay emitted; the canvas in progress restarts from noise (a parked
        request had none: it leaves the slot queue; an active one's slot goes to the next in running order)."""
        if r in self.parked:
            self.parked.remove(r)
        elif r.committing:
            if r is self.pr:
                self.pr = None
            else:
                self.n_com -= 1
                self.s_com -= r.ctx0
        else:
            self._leave_slot(r)
            r.steps += s - r.dec_start
        self.free_kv(r, r.ctx0, r.ctx0)
        r.committing = False
        r.prefill_len = r.ctx0
        self._fill(s - 1)
