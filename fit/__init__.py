"""Fitting: measured runs -> a versioned Profile (pass cost models with statsmodels, commit
statistics, MTP acceptance), and projection of a profile to another GPU or precision.

- `passfit`: one roofline-feature regression per pass kind, with k-fold and held-out diagnostics.
- `commitfit`: commit statistics per regime from runs with the model's own weights.
- `mtpfit`: MTP per-position acceptance from vLLM spec-decode counters, else the stated default.
- `projection`: carry fitted coefficients (engine efficiency) to another GPU/precision.
- `build`: assemble a Profile from run directories (what `costmodel fit` runs).
- `synthetic`: run directories from a known cost model, to check that a fit recovers it.
"""
