# Cython declarations for steptime.py (simulate/native.py compiles it; the .py runs as is without).
cimport cython

@cython.locals(n=long)
cpdef long bit_length(long x)

cdef class StepPricer:
    cdef public object profile, mode, draws, qn, qc, cost
    cdef public bint exact
    cdef public long qc_bits, grid_bits, n_bits, c_bits, n_lim, c_lim, misses
    cdef public dict cache, dcache, segments
    cdef public long d_lo, d_hi

    @cython.locals(c=long, sh=long)
    cpdef tuple _one_group(self, long n, double ssum)
    @cython.locals(n1=long, n2=long, c=long, sh=long, lim=long, bits=long)
    cpdef tuple _two_groups(self, tuple ns, tuple ss)
    @cython.locals(k=long, x=long, pc=long, b=long, lo=long, hi=long, sh=long)
    cpdef double price(self, long m, long tp, long psum, tuple ns, tuple ss) except? -1.0
    @cython.locals(k=long)
    cpdef double price_part(self, tuple ns, tuple ss, long g, long tokens, double ctx) except? -1.0
    cpdef tuple decode_price(self, long n, double ssum, long c)
    @cython.locals(bl=long, sh=long, q=long, half=long, lo=long, hi=long, key=long)
    cpdef double decode_at(self, long n, double ssum, long c) except? -1.0
    cpdef double _miss(self, tuple key, tuple full) except? -1.0
