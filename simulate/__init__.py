"""`costmodel simulate`: the discrete-event serving simulator, one replica type per point, any
registered serving mode (costmodel/modes) and its engine (engines/).

api.py (the facade: run_point, sweep, run_simulation), batch.py (a simulate command's points),
point.py (one point's inputs), sim.py (the event loop and the resolved Deployment), scheduler.py
(continuous batching, KV admission, preemption), engines/ (each mode's progression on a replica),
engine.py (engine settings, KV capacity), steptime.py (step durations from the profile), request.py, router.py, workload.py
(arrivals, lengths, regimes, traces), metrics.py (what each metric means; stability), sweep.py
(points in parallel), static_batch.py (static FCFS batches, what `validate` compares with), native.py (the hot modules
compiled with Cython, used when current)."""

from simulate import native as _native

_native.install()
