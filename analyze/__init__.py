"""Commit-order analysis (`costmodel analyze`): the published study's lens on a measured run.

order.py     first-acceptance order per canvas position, content positions, hook-data checks
stats.py     tie-aware tau_b, same-call pair fraction, prompt-clustered bootstrap, AUROC
core.py      per-canvas measures and per-regime aggregates (the definitions live here)
report.py    tables (CSV + parquet), summary.md, self-contained summary.html with the bin sweep
synthetic.py commit traces with known answers (tests, demo runs)
cli.py       the click command
"""

from analyze.core import Analysis, analyze_tables

__all__ = ["Analysis", "analyze_tables"]
