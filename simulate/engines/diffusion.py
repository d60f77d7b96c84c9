"""Block diffusion on a replica (DiffusionGemma-26B-A4B, costmodel/modes/diffusion.py): after its
prefill a request denoises its canvas for k steps (one 256-token denoise forward per engine step),
then the next step is its commit pass, whose end emits the canvas: k+1 engine steps per canvas.
One engine step mixes prefill chunks, denoising canvases and commits in one forward; the mode's
draws (DiffusionDraws) give every canvas's k.

Canvas slots. vLLM's scheduler walks its running requests in order and gives each what it needs
while the token budget lasts (vllm/v1/core/sched/scheduler.py Scheduler.schedule, the RUNNING loop:
`while req_index < len(self.running) and token_budget > 0`); a denoising or committing canvas needs
the whole canvas. Admission is bounded by max_num_seqs alone (the WAITING loop: `len(self.running)
< self.max_num_running_reqs`, with budget left). So where the budget holds fewer canvases than
max_num_seqs (canvas 256, budget 512, max_num_seqs 4), up to max_num_seqs requests are admitted and
prefilled, the first budget // canvas of them in running order denoise, and the rest wait, prefilled
and holding their KV, for a canvas slot; a request keeps its slot until it finishes (earlier
requests come first in the walk every step), and a freed slot goes to the first waiting one in
running order (`parked`), in the next step."""

from __future__ import annotations

from collections import deque

from simulate.scheduler import Replica, steps_within


class DiffusionReplica(Replica):
    """Counters for denoising canvases (n_den, s_den) and commits (n_com, s_com); `slots` canvases
    of the token budget, `parked` the prefilled requests waiting for one."""

    def __init__(self, *a, **kw):
        plan = kw["plan"]
        super().__init__(*a, tokens_per_seq=plan.canvas, **kw)
        cfg = a[2] if len(a) > 2 else kw["cfg"]
        self.C = plan.canvas
        self.slots = self.budget // self.C  # canvases one step's budget holds
        self.max_seqs = int(cfg.max_num_seqs)  # admission: max_num_seqs alone (see the module docstring)
        self.parked = deque()
        self.k = plan.k
        self.kofs = plan.kofs
        self.nblocks = plan.blocks_list
        self.n_den = self.n_com = 0
        self.s_den = self.s_com = 0

    def schedule(self) -> float:
        s = self.step
        C = self.C
        nc = self.n_com
        while nc and self.kv_used + self.kv_reserved + C * nc > self.kv_cap:
            self.preempt_last(s)
            nc = self.n_com
        self.kv_used += C * nc
        nd = self.n_den
        m, tp, psum = self.schedule_prefill(self.budget - C * (nd + nc), self.now)
        dt = self.pricer.price(m, tp, psum, (nd, nc), (self.s_den, self.s_com))
        self.account(dt, m, tp, (nd, nc))
        return dt

    def coast(self, t: float, bound: float, prev: float):
        """Run, in closed form, the steps from t in which nothing is prefilled, admitted or preempted
        (one price: the counters do not move), up to and including the next step that ends with a
        canvas finishing its denoising or commit; the one that ends past `bound` (or that step) is
        left in flight (Replica.advance, book_run). Returns the time a full step must start at, or
        None when a step is in flight."""
        nd, nc = self.n_den, self.n_com
        if not (nd or nc) or self.prefilling:
            return t
        s, due = self.step, self.next_due()
        grow = self.C * nc
        # steps before the commits' KV growth needs a preemption (denoising canvases write none)
        steps = steps_within(self.kv_cap - self.kv_reserved - grow - self.kv_used, grow) if nc else float("inf")
        steps = min(steps, self.head_admitted_at(self.C * (nd + nc), grow) - s)  # an admission is a full step
        last_due = due - s + 1 <= steps
        if last_due:
            steps = due - s + 1
        if steps <= 0 or steps == float("inf"):
            return t
        dt = self.pricer.price(0, 0, 0, (nd, nc), (self.s_den, self.s_com))
        return self.book_run(t, bound, prev, [(int(steps), dt)], last_due, grow, (nd, nc))[0]

    def complete(self, t: float) -> None:
        s = self.step
        self.step = s + 1
        if self.chunks:
            self.complete_prefill(s, t)
        ev = self.events.pop(s, None)
        if ev:
            for r, ep in ev:
                if ep != r.epoch:
                    continue
                if r.block >= self.nblocks[r.rid]:  # its wasted denoise step after the last commit (async)
                    self.n_den -= 1
                    self.s_den -= r.ctx0
                    r.steps += 1
                    self.release(r, r.ctx0)
                    self._free_slot(s)
                elif r.committing:
                    self._emit(r, s, t)
                else:  # k denoising steps done: the next step is the commit pass
                    self.n_den -= 1
                    self.s_den -= r.ctx0
                    self.n_com += 1
                    self.s_com += r.ctx0
                    r.steps += s - r.dec_start + 1
                    r.committing = True
                    r.dec_start = s + 1
                    self.push(s + 1, r)

    def _emit(self, r, s: int, t: float) -> None:
        """Commit done: emit the canvas; finish, or start denoising the next one."""
        self.n_com -= 1
        self.s_com -= r.ctx0
        r.steps += 1
        r.committing = False
        r.block += 1
        r.ctx0 += self.C
        r.emitted = min(r.n_out, self.C * r.block)
        self.first_output(r, t)
        if r.block < self.nblocks[r.rid]:
            self._denoise(r, s)
        elif self.async_sched:
            # vLLM's DiffusionAsyncScheduler scheduled step s+1 before this commit's output was read, with
            # r as a denoising canvas (the max_tokens guard does not fire on a final commit,
            # vllm/v1/core/sched/diffusion_scheduler.py): r finishes now, its canvas and slot go after s+1
            self.record_finish(r, t)
            self.n_den += 1
            self.s_den += r.ctx0
            r.dec_start = s + 1
            self.push(s + 1, r)
        else:
            self.finish(r, t, r.ctx0)
            self._free_slot(s)

    def _free_slot(self, s: int) -> None:
        """A canvas slot was freed in step s: the first parked requests take the free slots from s+1."""
        parked = self.parked
        while parked and self.n_den + self.n_com < self.slots:
            self._denoise(parked.popleft(), s)

    def _denoise(self, r, s: int) -> None:
        if self.n_den + self.n_com >= self.slots:  # no canvas slot in the budget: wait, in running order
            self.parked.append(r)
            return
        r.dec_start = s + 1
        self.n_den += 1
        self.s_den += r.ctx0
        self.push(s + self.k[self.kofs[r.rid] + r.block], r)

    def enter_decode(self, r, s: int, t: float) -> None:
        r.ctx0 = r.prefill_len
        r.committing = False
        self._denoise(r, s)

    def drop_decoder(self, r, s: int) -> None:
        """Committed canvases stay emitted; the canvas in progress restarts from noise (a parked
        request had none: it leaves the slot queue; an active one's slot goes to the first parked)."""
        if r in self.parked:
            self.parked.remove(r)
        elif r.committing:
            self.n_com -= 1
            self.s_com -= r.ctx0
        else:
            self.n_den -= 1
            self.s_den -= r.ctx0
            r.steps += s - r.dec_start
        self.free_kv(r, r.ctx0, r.ctx0)
        r.committing = False
        r.prefill_len = r.ctx0
        self._free_slot(s - 1)
