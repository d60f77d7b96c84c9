# Cython declarations for diffusion.py (simulate/native.py compiles it; the .py runs as is without).
cimport cython
from simulate.request cimport Request
from simulate.scheduler cimport Replica, steps_within

cdef class DiffusionReplica(Replica):
    cdef public long C, n_den, n_com, s_den, s_com, slots, part
    cdef public long cm_nd, cm_nc, cm_sd, cm_sc
    cdef public double cm_dt
    cdef public long sq_nd, sq_nc
    cdef public tuple sq_t
    cdef public list k, kofs, nblocks
    cdef public object parked, pr

    @cython.locals(s=long, C=long, nc=long, nd=long, m=long, tp=long, psum=long, dt=double, grow=long, pr=Request, g=long)
    cpdef double schedule(self) except? -1.0
    cpdef long _part_growth(self)
    cpdef tuple _seqs(self, long nd, long nc)
    @cython.locals(nd=long, nc=long, s=long, due=double, grow=long, steps=double, last_due=bint, dt=double, tokens=long, pr=Request, g=long, sd=long, sc=long)
    cpdef coast(self, double t, double bound, double prev)
    @cython.locals(s=long, r=Request, ep=long, freed=bint)
    cpdef complete(self, double t)
    @cython.locals(partial=bint, w=long)
    cpdef bint _emit(self, Request r, long s, double t) except? False
    @cython.locals(b=long, nb=long)
    cpdef long _k_of(self, Request r)
    cpdef _begin(self, Request r, long s, bint partial, long steps)
    cpdef _leave_slot(self, Request r)
    @cython.locals(parked=object, pr=Request, r=Request)
    cpdef _fill(self, long s)
    cpdef _denoise(self, Request r, long s)
    cpdef enter_decode(self, Request r, long s, double t)
    cpdef drop_decoder(self, Request r, long s)
