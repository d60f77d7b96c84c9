"""`costmodel simulate`: the discrete-event (SimPy) serving simulator, one replica type per point,
any registered serving mode (costmodel/modes).

api.py (the facade: run_point, sweep, run_simulation), batch.py (a simulate command's points),
point.py (one point's inputs), sim.py (the event loop and the resolved Deployment), scheduler.py
(continuous batching, KV admission, preemption), engine.py (engine settings, KV capacity, replica
classes), steptime.py (step durations from the profile), request.py, router.py, workload.py
(arrivals, lengths, regimes, traces), metrics.py (what each metric means; stability), sweep.py
(points in parallel), static_batch.py (static FCFS batches, what `validate` compares with)."""
