# Cython declarations for kvcache.py (simulate/native.py compiles it; the .py runs as is without).
cimport cython
from simulate.request cimport Request

cdef class SharedRun:
    cdef public list hashes
    cdef public long n, top, lead
    cdef public dict index, holders
    cdef public bint dirty

cdef class PrefixCache:
    cdef public long bs, align, hit_tokens, evicted_blocks, run_lo, run_hi
    cdef public bint drop_last
    cdef public dict ref, runs
    cdef public object free

    @cython.locals(n=long, sid=object, h=object, run=SharedRun)
    cpdef SharedRun run_of(self, list hashes)
    @cython.locals(n=long, i=long, lead=long, run=SharedRun)
    cpdef long lookup(self, list hashes, long num_tokens) except? -1
    @cython.locals(n=long, i=long, j=long, run=SharedRun)
    cpdef long shared_tokens(self, list hashes, long blocks) except? -1
    @cython.locals(moved=long, i=long, j=long, k=long, c=long, refs=list, hashes=list, ref=dict, run=SharedRun)
    cpdef long acquire(self, Request r, long blocks) except? -1
    @cython.locals(a=long, end=long, j=long, top=long, run_n=long, hashes=list, refs=list, ref=dict, run=SharedRun)
    cpdef insert(self, Request r, long upto_tokens)
    @cython.locals(held=long, c=long, k=long, top=long, new_top=long, lo=long, j=long, ref=dict, holders=dict, run=SharedRun)
    cpdef long release(self, Request r) except? -1
    @cython.locals(n=long, lo=long, hi=long, hv=long, ref=dict, runs=dict, run=SharedRun)
    cpdef evict(self, long room_blocks)
