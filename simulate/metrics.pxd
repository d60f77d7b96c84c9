# Cython declarations for metrics.py (simulate/native.py compiles it; the .py runs as is without).
cimport cython

cdef class Tracker:
    cdef public double window_end, t_last
    cdef public long nbins, b, n, arrived, departed
    cdef public list edges, area

    @cython.locals(tl=double, te=double, b=long, n=long, last=long, e=double, a=double, edges=list)
    cpdef _acc(self, double t)
    cpdef arrive(self, double t)
    cpdef depart(self, double t)
    cpdef close(self, double t)
