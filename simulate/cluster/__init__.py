"""The cluster layer: fleets of replica pools over time (SimPy for the coarse events, the fast
replica engines inside). load.py (rate curves and their arrivals), traces.py (public traces),
classes.py (which pool takes a request), autoscalers/ (a registry; routers are the core's simulate/routers/), scaling.py (the
HPA-like machinery, provisioning delay), pool.py (a pool's replicas, lifecycle, utilisation),
fleet.py (the SimPy processes), fleetfile.py (a fleet described in JSON), outcome.py (per-interval goodput, SLO attainment, GPU-hours,
energy, dollars; the records are costmodel/schemas/day.py's), power.py (power from utilisation)."""
