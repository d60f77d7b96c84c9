# Cython declarations for sim.py (simulate/native.py compiles it; the .py runs as is without).
cimport cython
from simulate.metrics cimport Tracker
from simulate.request cimport Request
from simulate.scheduler cimport Replica

cdef class _MissWatch:
    cdef public list arr, post, watch
    cdef public double next_s

    @cython.locals(nxt=double, p=long, count=long, need=long, n=long, i=long, v=double, lim=double, col=double[:], deadlines=list, post=list,
                   arr=list)
    cpdef str missed(self, double now)


cdef class _Loop:
    cdef public object reqs, rec, route, abort_backlog_s, abort, miss, content
    cdef public long block_size, max_in_flight
    cdef public bint drain_auto, pick_least
    cdef public list sent, returns
    cdef public double fe_s, handover_s, last_send, pickup_s
    cdef public bint front
    cdef public list wake_at
    cdef public list fe_free
    cdef public Tracker tracker
    cdef public list departures, reps, woken
    cdef public double wake_s, drain_s, limit, bound, prev
    cdef public long arrived

    @cython.locals(rep=Replica, t=double, w=double, woken=list, keep=list)
    cpdef _advance(self, double bound, double prev)
    @cython.locals(e=double)
    cpdef double _handed_over(self, Replica rep, double t) except? -1.0
    cpdef bint _join(self, Replica rep, long i, double t, long prompt, long out) except? True
    @cython.locals(reps=list, best=Replica, rep=Replica, j=long)
    cpdef Replica _least_outstanding(self)
    @cython.locals(r=Request)
    cpdef Request enqueue(self, Replica rep, long i, double t, long prompt, long out)
    @cython.locals(i=long, t=double, now=double, t_next=double, deadline=double, nxt=double, cap=long, k=long, window=double, rep=Replica,
                   hand=bint, e=double)
    cpdef double run(self) except? -1.0
    @cython.locals(rep=Replica, q=double, seen=double)
    cpdef double _free_slot(self, double now, long k) except? -2.0
