# Cython declarations for ar.py (simulate/native.py compiles it; the .py runs as is without).
cimport cython
from simulate.request cimport Request
from simulate.scheduler cimport Replica, steps_within

cdef class ArReplica(Replica):
    cdef public long n_dec
    cdef public double g, sum_ctx
    cdef public long dm_n, dm_lo, dm_hi
    cdef public double dm_dt
    cdef public long seqs_n
    cdef public tuple seqs_t

    @cython.locals(s=long, n=long, look=long, m=long, tp=long, psum=long, dt=double)
    cpdef double schedule(self) except? -1.0
    @cython.locals(n=long, s=long, due=double, look_n=long, ng=double, steps=double, last_due=bint, st=long, sc=double, dt=double, c_end=long)
    cpdef coast(self, double t, double bound, double prev)
    @cython.locals(c=long, dt=double)
    cpdef double _decode(self, long n, double x) except? -1.0
    @cython.locals(sc=double, dt=double, hi=long, j=long, j1=long, x=double, v=double, up=long, c=long)
    cpdef list _segments(self, long steps, long n, double ng)
    cpdef tuple _seqs(self, long n)
    @cython.locals(s=long, r=Request, ep=long, done=long, kv=double)
    cpdef complete(self, double t)
    @cython.locals(rem=long)
    cpdef enter_decode(self, Request r, long s, double t)
    @cython.locals(done=long, kv=double)
    cpdef drop_decoder(self, Request r, long s)
    cpdef long _steps_for(self, Request r, long rem) except? -1
    cpdef long _tokens_after(self, Request r, long done) except? -1
    cpdef _advance(self, Request r, long done)
