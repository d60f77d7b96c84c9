# Cython declarations for steptime.py (simulate/native.py compiles it; the .py runs as is without).
cimport cython

@cython.locals(n=long)
cpdef long bit_length(long x)

@cython.locals(bl=long)
cpdef long pack_code(long x, long bits)

@cython.locals(sh=long)
cpdef long round_bits(long v, long lim, long bits)

@cython.locals(sh=long)
cpdef long grid_below(long x, long b)

cpdef long grid_above(long x, long lo, long b)

cdef class StepPricer:
    cdef public object profile, mode, draws, qn, qc, cost
    cdef public bint exact
    cdef public long qc_bits, grid_bits, n_bits, c_bits, n_lim, c_lim, misses
    cdef public dict cache, dcache, segments
    cdef public long d_lo, d_hi, wc, wg
    cdef public bint packed, packed2, own_price
    cdef public dict pcache, pcache2
    cdef public list drows

    @cython.locals(c=long)
    cpdef tuple _one_group(self, long n, double ssum)
    @cython.locals(n1=long, n2=long, c=long)
    cpdef tuple _two_groups(self, tuple ns, tuple ss)
    @cython.locals(k=long, x=long, pc=long, b=long, lo=long, hi=long)
    cpdef double price(self, long m, long tp, long psum, tuple ns, tuple ss) except? -1.0
    @cython.locals(c=long, r=long, base=long)
    cpdef double price_one(self, long m, long tp, long psum, long n, double ssum) except? -1.0
    @cython.locals(c=long, c1=long, c2=long, cl=long, cb=long, r1=long, r2=long, base=long)
    cpdef double price_two(self, long m, long tp, long psum, long n1, long n2, double s1, double s2) except? -1.0
    @cython.locals(x=long, pc=long, b=long, lo=long, hi=long, head=long, pk=long)
    cpdef double _on_grid(self, dict packed, long base, long m_shift, long m, long tp, long psum, tuple rest) except? -1.0
    cpdef double _cached(self, tuple key, object full) except? -1.0
    @cython.locals(k=long)
    cpdef double price_part(self, tuple ns, tuple ss, long g, long tokens, double ctx) except? -1.0
    cpdef tuple decode_price(self, long n, double ssum, long c)
    @cython.locals(bl=long, sh=long, q=long, half=long, lo=long, hi=long, key=long, rows=list, row=list, k=long)
    cpdef double decode_at(self, long n, double ssum, long c) except? -1.0
    cpdef double _miss(self, tuple key, tuple full) except? -1.0
