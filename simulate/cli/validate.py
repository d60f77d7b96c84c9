"""The tables `costmodel validate` (pipeline/cli/validate.py) prints of the simulator's scores of a
recorded GPU validation (simulate/validate/runner.py)."""

from __future__ import annotations

from rich.table import Table

from simulate.validate.runner import ValidationResult


def print_validation(con, res: ValidationResult, profile_id: str, out) -> None:
    """Per (mode, rate, metric): measured vs predicted; per (mode, metric): MAPE below saturation."""
    t = Table(title=f"Simulator vs measured (profile {profile_id})")
    for c in ["mode", "rate req/s", "metric", "measured", "predicted", "error %", "saturated"]:
        t.add_column(c)
    for r in res.table.itertuples():
        t.add_row(r.mode, f"{r.rate_rps:g}", r.metric, f"{r.measured:.4g}", f"{r.predicted:.4g}", f"{r.rel_error_pct:+.1f}", "yes" if r.saturated else "")
    con.print(t)
    s = Table(title="MAPE below saturation (targets: throughput 3%, p50 E2E 5%, p99 E2E 8%)")
    for c in ["mode", "metric", "MAPE %", "target %", "met"]:
        s.add_column(c)
    for r in res.summary.itertuples():
        no_target = r.meets_target is None or r.meets_target != r.meets_target
        s.add_row(r.mode, r.metric, f"{r.mape_pct:.1f}", "" if no_target else f"{r.target_pct:g}", "" if no_target else ("yes" if r.meets_target else "NO"))
    con.print(s)
    con.print(f"wrote {out / 'validation.csv'} and {out / 'validation_summary.csv'}")
