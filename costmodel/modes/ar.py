"""Autoregressive decoding (Gemma-4-26B-A4B): the prefill's last chunk emits the first token, then
one decode token per sequence per engine step (vLLM's default path)."""

from __future__ import annotations

from costmodel.modes.base import ServingMode


class ArEngine:
    """Replica mixin. Counters n_dec (decoding sequences) and sum_ctx (their contexts); a step
    emits `g` tokens per sequence (1 for AR). MTP is the same engine with another step."""

    tokens_per_seq = 1  # query tokens (and KV slots written) per decoding sequence per step
    g = 1  # mean tokens emitted per decoding sequence per step

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.n_dec = 0
        self.sum_ctx = 0

    def schedule(self) -> float:
        s = self.step
        n = self.n_dec
        look = self.tokens_per_seq  # KV slots a step writes before rejected drafts free them
        while n and self.kv_used + self.kv_reserved + n * look > self.kv_cap:
            self.preempt_last(s)
            n = self.n_dec
        self.kv_used += n * self.g
        m, tp, psum = self.schedule_prefill(self.budget - n * look, self.now)
        dt = self.price(m, tp, psum, (n,), (self.sum_ctx,))
        self.account(dt, m, tp, (n,))
        return dt

    def coast(self, t: float, bound: float, prev: float):
        """Run the decode-only steps from t that change nothing but time, KV and contexts (no event
        due, no prefill, no admission, no preemption) with the same float operations as schedule()
        + complete(); the one that ends past `bound` is left in flight (Replica.advance). Returns
        the time a full step must start at, or None when a step is in flight."""
        n = self.n_dec
        if not n or self.prefilling:
            return t
        s, due = self.step, self.next_due()
        if s >= due:
            return t
        look_n, ng, kv_cap, kv_res = n * self.tokens_per_seq, n * self.g, self.kv_cap, self.kv_reserved
        kv, sc, waiting = self.kv_used, self.sum_ctx, self.waiting
        head = waiting[0].prefill_len if waiting else 0
        admits = bool(waiting) and self.budget - look_n > 0 and len(self.running) < self.max_seqs
        pricer, wend = self.pricer, self.tracker.window_end
        busy, busy_w, s0, hi, dt, flight = self.busy_s, self.busy_window_s, s, -1, 0.0, False
        while s < due and kv + kv_res + look_n <= kv_cap:
            if admits and kv + ng + kv_res + head <= kv_cap:
                break  # the head of the queue would be admitted: a full step
            c = int(sc / n + 0.5)
            if c >= hi:
                dt, hi = pricer.decode_price(n, sc, c)
            te = t + dt
            kv += ng
            busy += dt
            if t < wend:
                busy_w += dt if te <= wend else wend - t
            if te > bound or (te == bound and t >= prev):
                flight = True  # started, ends after the bound
                break
            t, s = te, s + 1
            sc += ng
        if s - s0 + flight:
            self.sum_ctx = sc
        return self.book_coast(s, s0, flight, t, te if flight else t, kv, busy, busy_w, (n,))

    def complete(self, t: float) -> None:
        s = self.step
        self.step = s + 1
        self.sum_ctx += self.n_dec * self.g
        if self.chunks:
            self.complete_prefill(s, t)
        ev = self.events.pop(s, None)
        if ev:
            for r, ep in ev:
                if ep == r.epoch:
                    done = s - r.dec_start + 1
                    kv = r.ctx0 + self.g * done
                    self.n_dec -= 1
                    self.sum_ctx -= kv
                    self._advance(r, done)
                    r.emitted = r.n_out
                    self.finish(r, t, kv)

    def enter_decode(self, r, s: int, t: float) -> None:
        r.emitted += 1
        self.first_output(r, t)
        rem = r.n_out - r.emitted
        if rem <= 0:
            self.finish(r, t, r.prefill_len)
            return
        r.dec_start = s + 1
        r.ctx0 = r.prefill_len
        self.n_dec += 1
        self.sum_ctx += r.ctx0
        self.push(s + self._steps_for(r, rem), r)

    def drop_decoder(self, r, s: int) -> None:
        done = s - r.dec_start
        kv = r.ctx0 + self.g * done
        self.n_dec -= 1
        self.sum_ctx -= kv
        self.kv_used -= kv
        r.emitted += self._tokens_after(r, done)
        self._advance(r, done)
        r.prefill_len = r.prompt + r.emitted

    # one token per step; MTP overrides these three
    def _steps_for(self, r, rem: int) -> int:
        return rem

    def _tokens_after(self, r, done: int) -> int:
        return done

    def _advance(self, r, done: int) -> None:
        r.steps += done


class ArMode(ServingMode):
    name = "ar"
    label = "AR"
    description = "Gemma-4-26B-A4B autoregressive"
    order = 1
    line_style = ("--", "s")
    model_family = "gemma4"
    default_model = "gemma4-26b-a4b"
    pass_kinds = ("prefill", "decode_step")
    prefill_kind = "prefill"
    group_kinds = ("decode_step",)
    sim_cost_rank = 0  # one decode step per token: the slowest to simulate
    engine = ArEngine
