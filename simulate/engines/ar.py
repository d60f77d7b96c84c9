"""Autoregressive decoding on a replica (Gemma-4-26B-A4B, costmodel/modes/ar.py): the prefill's last
chunk emits the first token, then one decode token per sequence per engine step (vLLM's default
path)."""

from __future__ import annotations


from simulate.scheduler import Replica, steps_within


class ArReplica(Replica):
    """Counters n_dec (decoding sequences) and sum_ctx (their contexts); a step emits `g` tokens
    per sequence (1 for AR) and writes `tokens_per_seq` KV slots per sequence. MTP is the same
    engine with another step."""

    def __init__(self, *a, tokens_per_seq: int = 1, g: float = 1, **kw):
        super().__init__(*a, tokens_per_seq=tokens_per_seq, **kw)
        self.g = g  # mean tokens emitted per decoding sequence per step
        self.n_dec = 0
        self.sum_ctx = 0
        self.dm_n, self.dm_lo, self.dm_hi, self.dm_dt = -1, 0, 0, 0.0  # _decode's last price
        self.seqs_n, self.seqs_t = -1, ()  # _seqs's last tuple

    def schedule(self) -> float:
        s = self.step
        n = self.n_dec
        look = self.tokens_per_seq  # KV slots a step writes before rejected drafts free them
        while n and self.kv_used + self.kv_reserved + n * look > self.kv_cap:
            self.preempt_last(s)
            n = self.n_dec
        self.kv_used += n * self.g
        m, tp, psum = self.schedule_prefill(self.budget - n * look, self.now)
        dt = self.pricer.price_one(m, tp, psum, n, self.sum_ctx)
        self.account(dt, m, tp, self._seqs(n))
        return dt

    def _seqs(self, n: int) -> tuple:
        """(n,): the step's sequences per group, as account and book_one take them, made once per count."""
        if n != self.seqs_n:
            self.seqs_n, self.seqs_t = n, (n,)
        return self.seqs_t

    def coast(self, t: float, bound: float, prev: float):
        """Run, in closed form, the decode-only steps from t that change nothing but time, KV and
        contexts (no prefill, no admission, no preemption), up to and including the next step that
        ends with a request transition; the one that ends past `bound` (or that transition step) is
        left in flight (Replica.advance, book_run). Returns the time a full step must start at, or
        None when a step is in flight."""
        n = self.n_dec
        if not n or self.prefilling:
            return t
        s, due = self.step, self.next_due()
        look_n, ng = n * self.tokens_per_seq, n * self.g
        steps = steps_within(self.kv_cap - self.kv_reserved - look_n - self.kv_used, ng)  # before a preemption
        steps = min(steps, self.head_admitted_at(look_n, ng) - s)  # an admission is a full step
        last_due = due - s + 1 <= steps
        if last_due:
            steps = due - s + 1
        if steps <= 0:
            return t
        st = int(steps)
        sc = self.sum_ctx
        dt = self._decode(n, sc)
        c_end = int((sc + (st - 1) * ng) / n + 0.5)  # the run's last mean context (C arithmetic when compiled)
        if c_end < self.dm_hi:  # the common case: one price for the whole run
            res = self.book_one(t, bound, prev, st, dt, last_due, ng, self._seqs(n))
        else:
            res = self.book_run(t, bound, prev, self._segments(st, n, ng), last_due, ng, self._seqs(n))[0]
        self.sum_ctx += self.coasted * ng
        return res

    def _decode(self, n: int, x) -> float:
        """Seconds of a decode step of n sequences at context sum x (pricer.decode_at), remembering the
        last price and the mean contexts it holds for [dm_lo, dm_hi): a coast resumed after an arrival
        asks for the same one."""
        c = int(x / n + 0.5)
        if n == self.dm_n and self.dm_lo <= c < self.dm_hi:
            return self.dm_dt
        pricer = self.pricer
        dt = pricer.decode_at(n, x, c)
        self.dm_n, self.dm_lo, self.dm_hi, self.dm_dt = n, pricer.d_lo, pricer.d_hi, dt
        return dt

    def _segments(self, steps: int, n: int, ng: float) -> list:
        """The next `steps` decode steps as runs of one price: [(steps, seconds), ...]. The price
        holds while the rounded mean context stays below the bound _decode leaves for it."""
        sc = self.sum_ctx
        dt = self._decode(n, sc)
        c = int((sc + (steps - 1) * ng) / n + 0.5)  # (C arithmetic when compiled, as the mean contexts below)
        if c < self.dm_hi:
            return [(steps, dt)]
        segs, j = [], 0
        while j < steps:
            x = sc + j * ng
            dt = self._decode(n, x)
            hi = self.dm_hi
            v = ((hi - 0.5) * n - sc) / ng
            up = int(v)  # math.ceil(v), in C arithmetic when compiled
            if up < v:
                up += 1
            j1 = max(j + 1, min(steps, up))
            while j1 > j + 1:
                c = int((sc + (j1 - 1) * ng) / n + 0.5)
                if c < hi:
                    break
                j1 -= 1
            while j1 < steps:
                c = int((sc + j1 * ng) / n + 0.5)
                if c >= hi:
                    break
                j1 += 1
            segs.append((j1 - j, dt))
            j = j1
        return segs

    def complete(self, t: float) -> None:
        s = self.step
        self.step = s + 1
        self.sum_ctx += self.n_dec * self.g
        if self.chunks:
            self.complete_prefill(s, t)
        ev = self.events_at(s)
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
        self.free_kv(r, kv, kv)
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
