# Cython declarations for scheduler.py (simulate/native.py compiles it; the .py runs as is without).
cimport cython
from simulate.request cimport Request
from simulate.kvcache cimport PrefixCache
from simulate.steptime cimport StepPricer
from simulate.metrics cimport Tracker

cdef class Replica:
    cdef public long idx, tokens_per_seq, budget, max_seqs, step, outstanding
    cdef public long preemptions, n_steps, acc_prefill_seqs, acc_prefill_tokens, coasted
    cdef public object trace, plan, waiting, t_end
    cdef public Tracker tracker
    cdef public PrefixCache pc
    cdef public bint cache_outputs
    cdef public StepPricer pricer
    cdef public bint async_sched, woken, eager
    cdef public long graph_max
    cdef public double launch_s
    cdef public tuple group_tokens
    cdef public list departures, prefilling, chunks, dues, woken_list, acc_groups, pending_first
    cdef public dict running, events
    cdef public double sched_next_s
    cdef public double now, kv_cap, kv_used, kv_reserved, t_start, quiet_until, busy_s, busy_window_s
    cdef double[:] start_s, first_s, finish_s
    cdef long long[:] rec_steps, rec_preemptions, rec_cached

    cpdef double schedule(self) except? -1.0
    cpdef complete(self, double t)
    cpdef enter_decode(self, Request r, long s, double t)
    cpdef drop_decoder(self, Request r, long s)
    cpdef enqueue(self, Request r)
    @cython.locals(r=Request, c=long, m=long, tp=long, psum=long, rec_start="double[:]", chunks=list)
    cpdef tuple schedule_prefill(self, long budget, double now)
    @cython.locals(r=Request)
    cpdef double head_admitted_at(self, long decode_tokens, double kv_growth)
    cpdef long _cache_room(self)
    cpdef double kv_need(self, Request r)
    cpdef bint _admit_cached(self, Request r) except? False
    cpdef free_kv(self, Request r, double kv, double cached)
    @cython.locals(r=Request, c=long)
    cpdef complete_prefill(self, long s, double t)
    @cython.locals(r=Request)
    cpdef preempt_last(self, long s)
    @cython.locals(key=object)
    cpdef push(self, long due, Request r)
    @cython.locals(dues=list, s=long, d=long)
    cpdef double next_due(self)
    @cython.locals(dues=list, d=long)
    cpdef object events_at(self, long s)
    cpdef finish(self, Request r, double t, double kv)
    cpdef release(self, Request r, double kv)
    cpdef record_finish(self, Request r, double t)
    cpdef first_output(self, Request r, double t)
    cpdef double eager_launch_s(self) except? -1.0
    @cython.locals(end=double, t0=double, i=long, n=long, g=long, tokens=long, gt=tuple)
    cpdef account(self, double dt, long m, long tp, tuple group_seqs)
    @cython.locals(dt=double, lag=double, seen=double, r=Request, idle=bint)
    cpdef start(self, double t)
    cpdef coast(self, double t, double bound, double prev)
    @cython.locals(done=long, busy=double)
    cpdef tuple book_run(self, double t, double bound, double prev, list segs, bint last_due, double kv_step, tuple group_seqs)
    @cython.locals(mf=double, m=long, e=double, run_end=double)
    cpdef book_one(self, double t, double bound, double prev, long n, double dt, bint last_due, double kv_step, tuple group_seqs)
    @cython.locals(k=long, wend=double, last=double, i=long, n=long)
    cpdef _book(self, double t, long done, double busy, bint in_flight, double f0, double f1, double run_end, double kv_step, tuple group_seqs)
    @cython.locals(te=double, t=object)
    cpdef advance(self, double bound, double prev)

@cython.locals(done=long, ts=double, last_ts=double, busy=double, n=long, dt=double, m=long, e=double, mf=double)
cpdef tuple _position(double t, double bound, double prev, list segs, bint last_due)

@cython.locals(j=long)
cpdef long steps_within(double room, double per_step)
