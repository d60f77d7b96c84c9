# Cython declarations for mtp.py (simulate/native.py compiles it; the .py runs as is without).
cimport cython
from simulate.engines.ar cimport ArReplica
from simulate.request cimport Request

cdef class MtpReplica(ArReplica):
    cdef public list first_need, first_steps

    @cython.locals(rid=long, n=long)
    cpdef long _steps_for(self, Request r, long rem) except? -1
    cpdef long _tokens_after(self, Request r, long done) except? -1
    cpdef _advance(self, Request r, long done)
