"""Commit-order analysis (`costmodel analyze`): the published study's lens on a measured run.

order.py             first-acceptance order per canvas position, content positions, hook-data checks
rank_stats.py        tie-aware tau_b, same-call pair fraction, prompt-clustered bootstrap, AUROC
core.py              per-canvas measures and per-regime aggregates (the definitions live here)
report.py            tables (CSV + parquet), summary.md, self-contained summary.html with the bin sweep
study.py             the API of `costmodel analyze`: AnalyzeOptions -> run_analysis (read inputs, analyse, write)
synthetic_commits.py commit traces with known answers (tests, demo runs)
(the click command is measure/cli/analyze.py)
"""

from measure.analyze.core import Analysis, analyze_tables

__all__ = ["Analysis", "analyze_tables"]
