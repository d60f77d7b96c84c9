# Cython declarations for kvcache.py (simulate/native.py compiles it; the .py runs as is without).
cimport cython
from simulate.request cimport Request

cdef class PrefixCache:
    cdef public long bs, align, hit_tokens, evicted_blocks
    cdef public bint drop_last
    cdef public dict ref
    cdef public object free

    @cython.locals(n=long, i=long)
    cpdef long lookup(self, list hashes, long num_tokens) except? -1
    @cython.locals(n=long, i=long)
    cpdef long shared_tokens(self, list hashes, long blocks) except? -1
    @cython.locals(moved=long, i=long, c=long, refs=list, hashes=list, ref=dict)
    cpdef long acquire(self, Request r, long blocks) except? -1
    @cython.locals(a=long, end=long, j=long, hashes=list, refs=list, ref=dict)
    cpdef insert(self, Request r, long upto_tokens)
    @cython.locals(held=long, c=long, ref=dict)
    cpdef long release(self, Request r) except? -1
    @cython.locals(n=long, ref=dict)
    cpdef evict(self, long room_blocks)
