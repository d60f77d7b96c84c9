"""Why a held-out load misses (issue 49): one row per (held-out warm load, figure) outside its target, with
the engine's own spread there, the same load's in-sample error (the profile fitted on every settings set of
the mode, the held-out one included) and a reason class computed from the three:

- "engine's own spread": |held-out error| no larger than how far the engine's own starts differed there;
  the engine's noise floor, not the model's error.
- "transfer to unseen settings": the in-sample error is within target: the model prices this setting once it
  has seen it, so the miss is the step cost's transfer from the other settings sets.
- "model structure": the in-sample error misses too: something the engine model does not capture
  (scheduling, queueing, the front end), with a hint where the load's data says more (`structure_hint`): requests
  outside the engine's batch, a closed loop's opening burst and how the engine took it in, a p95 over few
  requests, the step price on the engine's own steps.

It reads rows as pipeline/engine_loso.py scores them (HeldOutLoad: `error_pct`, `scored`, `spread_pct`,
`context`) and imports nothing of it (engine_loso prints through it).

    rows = misses(result.rows, in_sample, targets)     # in_sample: (mode, run, load) -> figure -> error %
    print_misses(rows)                                 # the table and, per mode, "misses by reason"
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from dataclasses import asdict, dataclass

SPREAD, TRANSFER, STRUCTURE = "engine's own spread", "transfer to unseen settings", "model structure"
REASONS = (SPREAD, TRANSFER, STRUCTURE)
TTFT_FIGURES = ("ttft_p50_ms", "ttft_p95_ms")
FRONTEND_EXCESS = 1.10  # clients holding 10% more requests than the engine runs: requests wait outside its batch
FEW_REQUESTS = 40  # a p95 over fewer requests is its largest two or so
FEW_CLIENTS = 4  # a closed loop of so few clients barely queues: its TTFT is prefill and the front end's latency
FIGURE_ORDER = ("tok_s", "ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms")  # as engine_loso's FIGURES


@dataclass(frozen=True)
class Miss:
    mode: str
    held: str  # the held-out settings set
    run: str  # <campaign folder>/<setup>: the engine start that served the load
    load: str
    figure: str
    error_pct: float  # held out: predicted / measured - 1
    spread_pct: float  # the engine against itself there (largest / smallest start - 1); NaN: one start
    in_sample_pct: float  # the same load, the profile fitted on every settings set of the mode
    target_pct: float
    reason: str
    hint: str = ""


def classify(error_pct: float, spread_pct: float, in_sample_pct: float, target_pct: float) -> str:
    """The reason class of a miss (module docstring), from its held-out error, the engine's spread and its in-sample error."""
    if math.isfinite(spread_pct) and abs(error_pct) <= spread_pct:
        return SPREAD
    if math.isfinite(in_sample_pct) and abs(in_sample_pct) <= target_pct:
        return TRANSFER
    return STRUCTURE


def structure_hint(fig: str, ctx: dict) -> str:
    """What the load's own data says about a miss the engine model cannot fit even in-sample (ctx: HeldOutLoad.context)."""
    hints = []
    closed = ctx.get("kind") == "closed"
    run, held = ctx.get("engine_running", math.nan), ctx.get("client_in_flight", math.nan)
    if fig in TTFT_FIGURES and held > FRONTEND_EXCESS * run:
        hints.append(f"requests outside the engine's batch (front end or waiting queue): the clients held {held:.1f} on average, "
                     f"the engine ran {run:.1f} (mean over its steps)")
    clients, requests = ctx.get("clients") or 0, ctx.get("requests") or 0
    if fig in TTFT_FIGURES and closed and 0 < clients <= FEW_CLIENTS:
        hints.append(f"{clients} client{'s' if clients > 1 else ''}: prefill plus the front end's latency (one figure per mode, "
                     "fitted on the lowest loads)")
    if fig == "ttft_p50_ms" and closed and clients and requests <= 2 * clients:
        hints.append(f"p50 on the edge of the opening burst ({clients} of {requests} requests sent at once)")
    if fig == "ttft_p95_ms" and closed and ctx.get("p95_in_opening_burst"):
        hints.append(f"p95 is the opening burst's ({clients} prompts sent at once" + _burst_steps(ctx) + ")")
    if fig == "ttft_p95_ms" and ctx.get("requests", FEW_REQUESTS) < FEW_REQUESTS:
        hints.append(f"p95 of {ctx['requests']} requests")
    priced = ctx.get("steps_priced_pct", math.nan)
    if fig in ("tok_s", "tpot_p50_ms") and math.isfinite(priced):
        hints.append(f"step price {priced:+.0f}% on the engine's own steps" + (" (the schedule's share is the rest)" if abs(priced) < 5 else ""))
    return "; ".join(hints)


def _burst_steps(ctx: dict) -> str:
    n, first = ctx.get("burst_steps", 0), ctx.get("first_step_reqs", 0)
    if n < 2 or not first:
        return ""
    return (f", admitted over {n} prefill steps of the {ctx.get('budget_tokens', 0):,}-token budget; the first, "
            f"+{ctx.get('first_step_ms', math.nan):,.0f} ms after the send, held {first} of them ({ctx.get('first_step_tokens', 0):,} tokens)")


def misses(rows, in_sample: dict, targets: dict[str, float | None]) -> list[Miss]:
    """One Miss per scored (load, figure) outside its target, as engine_loso's summary counts them."""
    out = []
    for r in rows:
        for fig, target in targets.items():
            if target is None or not r.scored(fig) or abs(err := r.error_pct(fig)) <= target:
                continue
            spread = r.spread_pct.get(fig, math.nan)
            ins = in_sample.get((r.mode, r.run, r.load), {}).get(fig, math.nan)
            reason = classify(err, spread, ins, target)
            out.append(Miss(r.mode, r.held, r.run, r.load, fig, err, spread, ins, target, reason,
                            structure_hint(fig, r.context) if reason == STRUCTURE else ""))
    return out


def by_reason(rows: list[Miss]) -> dict[str, dict[str, Counter]]:
    """mode -> reason -> Counter of figures."""
    out: dict[str, dict[str, Counter]] = {}
    for m in rows:
        out.setdefault(m.mode, {r: Counter() for r in REASONS})[m.reason][m.figure] += 1
    return out


def _pct(v: float, nd: int = 1) -> str:
    return "-" if not math.isfinite(v) else f"{v:+.{nd}f}%"


def print_misses(rows: list[Miss], file=sys.stdout) -> None:
    """The misses table, then per mode one line of misses by reason."""
    print("\nmisses: each held-out warm load (below saturation; throughput: all) and figure outside its target; self: the engine "
          "against itself there (largest / smallest start - 1; 'one start': not repeated); in-sample: the same load on the profile "
          "fitted on every settings set of the mode, the held-out one included", file=file)
    print(f"{'mode':9} {'held out':15} {'run':36} {'load':22} {'figure':12} {'held-out':>9} {'self':>9} {'in-sample':>9}  reason", file=file)
    for m in rows:
        self_ = "one start" if not math.isfinite(m.spread_pct) else _pct(m.spread_pct, 0)
        why = m.reason + (f": {m.hint}" if m.hint else "")
        print(f"{m.mode:9} {m.held:15} {m.run[:36]:36} {m.load[:22]:22} {m.figure:12} {_pct(m.error_pct):>9} {self_:>9} "
              f"{_pct(m.in_sample_pct):>9}  {why}", file=file)
    print_by_reason(rows, file)


def by_reason_lines(rows: list[Miss]) -> list[str]:
    """Per mode: its misses by reason, each with its figures (the line the data README quotes)."""
    lines = []
    for mode, reasons in sorted(by_reason(rows).items()):
        parts = [f"{reason} {sum(c.values())}" + (f" ({', '.join(f'{f} {c[f]}' for f in _ordered(c))})" if c else "")
                 for reason, c in reasons.items()]
        lines.append(f"{mode}: {sum(sum(c.values()) for c in reasons.values())} misses by reason: " + "; ".join(parts))
    return lines


def _ordered(figures) -> list[str]:
    return sorted(figures, key=lambda f: (FIGURE_ORDER.index(f) if f in FIGURE_ORDER else len(FIGURE_ORDER), f))


def print_by_reason(rows: list[Miss], file=sys.stdout) -> None:
    print("\nmisses by reason, per mode (" + "; ".join(f"{r}" for r in REASONS) + ")", file=file)
    for ln in by_reason_lines(rows):
        print(ln, file=file)


def as_records(rows: list[Miss]) -> list[dict]:
    """The table as CSV rows (benchmarks/bench_engine.py --csv)."""
    return [asdict(m) for m in rows]
