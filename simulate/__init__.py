"""Discrete-event (SimPy) serving simulator for DiffusionGemma (diffusion), AR and MTP modes.

Modules (docs/simulator.md): workload (arrivals, lengths, regimes, traces), request (per-request
progress, per-mode random draws), scheduler (continuous batching, KV admission and preemption),
engine (per-mode step progression, engine limits, KV capacity), pricing (step durations from the
profile), router, metrics (definitions, stability), sim (the event loop), sweep (parallel points),
api (run_point, sweep), cli (`costmodel simulate`), results (the record contract)."""
