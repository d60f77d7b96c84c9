"""`costmodel simulate`: the discrete-event serving simulator, one replica type per point, any
registered serving mode (costmodel/modes) and its engine (engines/).

api.py (the facade: run_point, simulate_grid, run_simulation), batch.py (a simulate command's points), point.py (one point's
inputs), sim.py (the event loop and the resolved Deployment), scheduler.py (continuous batching, KV admission,
preemption), engines/ (each mode's progression on a replica), engine.py (engine settings, KV capacity), steptime.py
(step durations: costmodel/stepcost prices them), request.py, routers/ (the router registry), workload.py (arrivals, lengths, regimes,
traces), metrics.py (what each metric means; stability), parallel.py (points in parallel: the one Dask/process runner),
plan/, sweep/ (the grid command), validate/, static_batch.py (static FCFS batches, what `validate` compares with),
build_native.py (compiles the hot modules: costmodel/native.py says how they are used, from `import costmodel` on)."""

import costmodel  # noqa: F401,E402  (first: its import installs the compiled modules' finder before any of ours loads)
