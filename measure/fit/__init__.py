"""`costmodel fit`: measured runs -> a versioned Profile (pass cost models with statsmodels, commit
statistics, MTP acceptance), and projection of a profile to another GPU or precision.

- `passes`: one roofline-feature regression per pass kind, with k-fold and held-out diagnostics.
- `commits`: commit statistics per regime from runs with the model's own weights.
- `mtp`: MTP per-position acceptance from vLLM spec-decode counters, else the stated default.
- `endpoint`, `endpoint_data`: pass costs and behaviour from live-endpoint runs.
- `projection`: carry fitted coefficients (engine efficiency) to another GPU/precision.
- `assemble`: assemble a Profile from run directories (what `costmodel fit` runs).
- `synthetic_runs`: run directories from a known cost model, to check that a fit recovers it.
"""
