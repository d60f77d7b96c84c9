"""Student-t intervals of a mean, the one rule behind every interval an answer prints: a plan point's
over its replications (simulate/plan/settle.py), an hour's over its batch means
(simulate/cluster/outcome.py), the crossover's over seeds (costmodel/costing/crossover.py).

The quantiles are scipy's (`scipy.special.stdtrit`). Those an answer asks for in practice (up to
TABLE_DF degrees of freedom, up to TABLE_LOOKS looks) are read from a table scipy wrote,
costmodel/data/t_quantiles.json (`python -m costmodel.intervals --write-table` rewrites it, and
tests/test_intervals.py checks every entry against scipy): importing scipy.special costs a
command about 0.25 s, a quarter of the default plan's start, for a handful of numbers. Any other
(df, looks) asks scipy."""

from __future__ import annotations

import json
import math
import statistics
import sys
from functools import lru_cache
from pathlib import Path

CONFIDENCE = 0.95
TABLE = Path(__file__).resolve().parent / "data" / "t_quantiles.json"
TABLE_DF = 120  # degrees of freedom tabled: 1..TABLE_DF (a plan's replications, a day's batch means, the crossover's seeds)
TABLE_LOOKS = 16  # looks tabled: 1..TABLE_LOOKS (a plan's --max-replications - 1)


def _probability(looks: int) -> float:
    """The one-sided probability whose quantile a two-sided CONFIDENCE interval over `looks` looks needs."""
    return 1 - (1 - CONFIDENCE) / (2 * max(1, looks))


def scipy_t_quantile(df: int, looks: int = 1) -> float:
    """t_quantile computed by scipy (what the table holds)."""
    from scipy.special import stdtrit  # scipy.special, not the heavier scipy.stats

    return float(stdtrit(df, _probability(looks)))


@lru_cache(maxsize=1)
def _table() -> dict:
    """{(df, looks): quantile} read from TABLE, when it was written for this CONFIDENCE; else empty (scipy answers)."""
    try:
        doc = json.loads(TABLE.read_text())
    except (OSError, ValueError):
        return {}
    if doc.get("confidence") != CONFIDENCE:
        return {}
    return {(int(d), int(k)): float(q) for d, row in doc["quantiles"].items() for k, q in enumerate(row, start=1)}


@lru_cache(maxsize=256)  # a plan asks for the same few (df, looks) thousands of times
def t_quantile(df: int, looks: int = 1) -> float:
    """The two-sided quantile of Student's t on `df` degrees of freedom for a CONFIDENCE interval
    looked at up to `looks` times (Bonferroni: each look at 1 - (1 - CONFIDENCE) / looks, so the
    verdict a sequence of looks settles errs less than 1 - CONFIDENCE) (scipy, through the table)."""
    q = _table().get((int(df), max(1, int(looks)))) if float(df).is_integer() else None
    return q if q is not None else scipy_t_quantile(df, looks)


def t_interval(values, looks: int = 1) -> tuple[float, float]:
    """(low, high) of the CONFIDENCE t-interval of the mean of `values` (at least two)."""
    vals = [float(v) for v in values]
    mean = statistics.fmean(vals)
    half = t_quantile(len(vals) - 1, looks) * statistics.stdev(vals) / math.sqrt(len(vals))
    return mean - half, mean + half


def write_table(path: Path = TABLE) -> Path:
    """Write scipy's quantiles for df 1..TABLE_DF and looks 1..TABLE_LOOKS to `path` (floats round-trip exactly in JSON)."""
    from costmodel.atomic import write_json

    about = ("two-sided Student-t quantiles, scipy.special.stdtrit(df, 1 - (1 - confidence) / (2 * looks)); rows by degrees of freedom, "
             "entries by looks 1..; written by python -m costmodel.intervals --write-table")
    quantiles = {str(df): [scipy_t_quantile(df, k) for k in range(1, TABLE_LOOKS + 1)] for df in range(1, TABLE_DF + 1)}
    return write_json(path, {"about": about, "confidence": CONFIDENCE, "quantiles": quantiles})


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-table"]:
        print("usage: python -m costmodel.intervals --write-table", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {write_table()}")
