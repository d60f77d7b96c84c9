# Cython declarations for request.py (simulate/native.py compiles it; the .py runs as is without).
cdef class Request:
    cdef public long rid, prompt, n_out, emitted, prefill_len, prefill_done, epoch, dec_start, ctx0
    cdef public long steps, preemptions, replica, block, mpos, eligible, ncached, hit, pre
    cdef public double arrival_s
    cdef public bint started, first, committing
    cdef public object cum, state, hashes, refs
