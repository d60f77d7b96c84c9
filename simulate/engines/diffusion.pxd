# Cython declarations for diffusion.py (simulate/native.py compiles it; the .py runs as is without).
cimport cython
from simulate.request cimport Request
from simulate.scheduler cimport Replica

cdef class DiffusionReplica(Replica):
    cdef public long C, n_den, n_com, s_den, s_com, slots
    cdef public list k, kofs, nblocks
    cdef public object parked

    @cython.locals(s=long, C=long, nc=long, nd=long, m=long, tp=long, psum=long, dt=double)
    cpdef double schedule(self) except? -1.0
    @cython.locals(nd=long, nc=long, s=long, due=double, grow=long, steps=double, last_due=bint, dt=double)
    cpdef coast(self, double t, double bound, double prev)
    @cython.locals(s=long, r=Request, ep=long)
    cpdef complete(self, double t)
    cpdef _emit(self, Request r, long s, double t)
    @cython.locals(parked=object)
    cpdef _free_slot(self, long s)
    cpdef _denoise(self, Request r, long s)
    cpdef enter_decode(self, Request r, long s, double t)
    cpdef drop_decoder(self, Request r, long s)
