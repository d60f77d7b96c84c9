"""The sweep stage (`costmodel sweep SPEC -o DIR`): a declarative grid over profile, engine,
workload and SLO parameters (spec.py), run point by point on Dask or serially, resumably, into one
results table (run.py)."""
