"""A point's SLO verdict: pass, fail or borderline, judged on the intervals its replications give.

A plan point (simulate/plan/settle.py) carries, per SLO bound, the 95% interval of its figure's mean
over replications (`ttft_ms_p95_ci95_low`, `ttft_ms_p95_ci95_high`) and how many of its
replications stayed stable. It passes when every interval lies wholly below its bound and every
replication was stable; it fails when an interval lies wholly above its bound or every replication
(at least two) was unstable; anything else is BORDERLINE, never a clean pass or fail. Stability is
settled the same way in both directions: every replication agreeing, or the interval of their mean
backlog growth lying wholly on one side of its limit; replications that disagree leave it open. A row with no
intervals (one window: `costmodel simulate`, an older plan) is judged on its figures as they are.
A report that re-judges a plan under another SLO uses the same rule on the same columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from costmodel.slo import Slo

PASS, FAIL, BORDERLINE = "pass", "fail", "borderline"
FAIL_REPLICATIONS = 2  # every one of at least this many unstable settles a fail, as every one stable settles stability
STABILITY = "backlog_growth_ratio"  # a replication's backlog growth / its stability test's limit (simulate/plan/settle.py)


def ci_columns(column: str) -> tuple[str, str]:
    """The interval columns of a figure: ttft_ms_p95 -> ttft_ms_p95_ci95_low, ttft_ms_p95_ci95_high."""
    return f"{column}_ci95_low", f"{column}_ci95_high"


@dataclass(frozen=True)
class Verdict:
    status: str  # pass | fail | borderline
    failures: tuple[str, ...] = ()  # why it fails, or why it is not settled (borderline)
    meets_on_mean: bool = False  # the figures' means meet every bound and most replications were stable (the point estimate's reading)
    stability_open: bool = False  # only the queue's growth in short windows decides it (no bound missed, no run aborted): a longer window may read it otherwise
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def text(self) -> str:
        return "; ".join(self.failures)


def _num(v) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return math.nan
    return x


def _ms2(x: float) -> str:
    return "unbounded" if math.isinf(x) else "n/a" if math.isnan(x) else f"{x:.2f}"


def _ms(x: float) -> str:
    return "unbounded" if math.isinf(x) else f"{x:,.0f}"


def _within(b, x: float) -> bool:
    """x on the bound's side of its limit (an interval's end may be infinite)."""
    return x <= b.limit_ms if b.op == "<=" else x < b.limit_ms


def _count(row: dict, key: str) -> int:
    return int(_num(row.get(key))) if math.isfinite(_num(row.get(key))) else 0


def _stability(row: dict, reps: int | None) -> tuple[list[str], list[str], bool, bool]:
    """(failures, open readings, most replications stable, whether only the queue's growth is in doubt
    (Verdict.stability_open)) of a row's stability: settled alike both ways, by every replication
    agreeing or by the interval of their mean growth against its limit."""
    stable = bool(row.get("stable", False))
    if reps is None or not math.isfinite(_num(row.get("stable_replications"))):
        why = f"unstable ({row.get('stability_reason') or 'queue grows without bound'})"
        return ([] if stable else [why]), [], stable, False
    stable_reps = int(_num(row.get("stable_replications")))
    lo, hi = (_num(row.get(c)) for c in ci_columns(STABILITY))
    stopped, aborted = _count(row, "stopped_replications"), _count(row, "aborted_replications")
    queue = reps - stable_reps - stopped  # unstable for their queue, not stopped at a certain latency miss (the latency figures count those)
    watched = reps - stopped
    why = row.get("stability_reason") or "queue grows without bound"
    text = f"unstable in {queue} of {reps} replications (backlog growth / its limit, 95% interval {_ms2(lo)}-{_ms2(hi)}; {why})"
    majority = 2 * stable_reps > reps
    if queue <= 0 or (math.isfinite(hi) and hi <= 1.0):
        return [], [], majority, False  # every watched replication stable, or their mean growth below the limit
    if aborted >= FAIL_REPLICATIONS and aborted == reps:
        return [f"arrivals outpace service in all {reps} replications ({why})"], [], majority, False
    if (queue == watched and watched >= FAIL_REPLICATIONS) or (math.isfinite(lo) and lo > 1.0):
        return [text], [], majority, aborted == 0
    return [], [text], majority, aborted == 0


def judge(row: dict, slo: Slo) -> Verdict:
    """The verdict of one flat point row against `slo` (module docstring). A row the plan pinned
    between two QPS instead of simulating (`slo_pinned`) keeps its verdict under the SLO it was pinned
    for, and has none under another."""
    pinned = row.get("slo_pinned")
    if isinstance(pinned, str) and pinned:
        if row.get("slo_pinned_for") == slo.text:
            return Verdict(str(row.get("slo_verdict")), (), str(row.get("slo_verdict")) == PASS)
        return Verdict(FAIL, (f"{pinned}, for the SLO {row.get('slo_pinned_for')}; no figures under another",), False)
    reps = row.get("replications")
    reps = int(reps) if reps is not None and math.isfinite(_num(reps)) else None
    out_fail, out_open, majority_stable, stability_open = _stability(row, reps)
    stability_fails = len(out_fail)
    on_mean = majority_stable
    for b in slo.bounds:
        v = _num(row.get(b.column))
        lo_col, hi_col = ci_columns(b.column)
        has_ci = lo_col in row and hi_col in row and not (math.isnan(_num(row[lo_col])) or math.isnan(_num(row[hi_col])))
        on_mean = on_mean and b.holds(v)
        shown = "n/a" if not math.isfinite(v) else f"{v:,.0f}"
        if not has_ci:
            if not b.holds(v):
                out_fail.append(f"{b.column} {shown} > {b.limit_ms:g}" if b.op == "<=" else f"{b.column} {shown} >= {b.limit_ms:g}")
            continue
        lo, hi = _num(row[lo_col]), _num(row[hi_col])
        span = f"95% interval {_ms(lo)}-{_ms(hi)} over {reps or '?'} replications"
        if _within(b, hi):
            continue
        if not _within(b, lo):
            out_fail.append(f"{b.column} {shown} > {b.limit_ms:g} ({span})")
        else:
            out_open.append(f"{b.column} {shown} against {b.limit_ms:g}: borderline ({span})")
    stability_open = stability_open and len(out_fail) <= stability_fails  # no bound certainly missed: the queue's growth decides
    if out_fail:
        return Verdict(FAIL, tuple(out_fail + out_open), on_mean, stability_open)
    if out_open:
        return Verdict(BORDERLINE, tuple(out_open), on_mean, stability_open)
    return Verdict(PASS, (), on_mean)
