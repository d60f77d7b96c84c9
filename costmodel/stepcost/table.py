"""The table pass model: pass times on a grid of (sequences, tokens per sequence, context)
composed from operator tables (data/runs/ops, measure/ops), interpolated multilinearly in log space (log ms over
log seqs, log tokens, log(context + CONTEXT_OFFSET)), power-law extrapolation beyond the grid.

A table holds for the GPU and precision it names; elsewhere the model's linear coefficients, which
a table model keeps too, price the pass (the `fallback`). A pass mixing kinds priced by tables
shares its token-proportional work (the layers' GEMMs, MoE, norms: `PassTable.token_ms` over the
pass's total tokens) and adds each segment's own part (attention, logits, sampler: its table time
minus its token part), as the operator composition does."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from costmodel.errors import UserError
from costmodel.roofline import Segment

CONTEXT_OFFSET = 64.0  # tokens added to the context before its log in table interpolation (context may be 0)


def _bracket(xs: list[float], x: float) -> tuple[int, float]:
    """(i, w): x at weight w between xs[i] and xs[i + 1]; below the grid w = 0 (the first point),
    above it w > 1 (linear extrapolation from the last two points)."""
    i = bisect.bisect_right(xs, x) - 1
    if i < 0:
        return 0, 0.0
    i = min(i, len(xs) - 2)
    return i, (x - xs[i]) / (xs[i + 1] - xs[i])


@dataclass(frozen=True)
class TableGrids:
    """A PassTable's axes and values in log space, for interpolation."""

    ls: list
    lt: list
    lc: list
    lv: list
    lm: list
    lmv: list

    @classmethod
    def of(cls, t) -> "TableGrids":
        log = math.log
        return cls([log(x) for x in t.seqs], [log(x) for x in t.tokens_per_seq], [log(x + CONTEXT_OFFSET) for x in t.context_tokens],
                   [[[log(v) for v in c] for c in r] for r in t.ms], [log(x) for x in t.token_m], [log(v) for v in t.token_ms])

    def at(self, seqs: float, tokens: float, context: float) -> float:
        lc, lt, lv = self.lc, self.lt, self.lv
        k, wk = _bracket(lc, math.log(context + CONTEXT_OFFSET)) if len(lc) > 1 else (0, 0.0)
        j, wj = _bracket(lt, math.log(tokens)) if len(lt) > 1 else (0, 0.0)

        def line(a: int, b: int) -> float:
            row = lv[a][b]
            return row[k] + (row[k + 1] - row[k]) * wk if wk else row[k]

        def plane(a: int) -> float:
            y0 = line(a, j)
            return y0 + (line(a, j + 1) - y0) * wj if wj else y0

        if len(self.ls) == 1:
            return math.exp(plane(0))
        i, wi = _bracket(self.ls, math.log(seqs))
        y = plane(i)
        return math.exp(y + (plane(i + 1) - y) * wi if wi else y)

    def tok(self, m: float) -> float:
        if len(self.lm) == 1:
            return math.exp(self.lmv[0])
        i, w = _bracket(self.lm, math.log(m))
        return math.exp(self.lmv[i] + (self.lmv[i + 1] - self.lmv[i]) * w)


class TableModel:
    """One PassTable's interpolation with its memo (the simulator prices the same segment inside
    many mixed steps): pass times keyed by (seqs, tokens, context), token parts by m."""

    __slots__ = ("table", "grids", "memo")

    def __init__(self, table):
        self.table = table
        self.grids = TableGrids.of(table)
        self.memo: dict = {}

    def pass_ms(self, seqs: float, tokens: float, context: float) -> float:
        key = (seqs, tokens, context)
        v = self.memo.get(key)
        if v is None:
            v = self.memo[key] = self.grids.at(seqs, tokens, context)
        return v

    def tokens_ms(self, m: float) -> float:
        v = self.memo.get(m)
        if v is None:
            v = self.memo[m] = self.grids.tok(m)
        return v


def table_model(table) -> TableModel:
    """The table's interpolation, built once per table object (kept beside its data, dropped when
    the profile is pickled: the schema's __getstate__)."""
    m = table.__dict__.get("_model")
    if m is None:
        m = table.__dict__["_model"] = TableModel(table)
    return m


def table_pass_ms(tables: list[TableModel], segments) -> float:
    """One forward over segments priced from tables: a pure pass is its table's value; a mixed pass
    shares the token-proportional part and the step overhead, and adds each segment's own part."""
    live = [(t, s) for t, s in zip(tables, segments) if s.seqs > 0 and s.tokens > 0]
    if len(live) == 1:
        t, s = live[0]
        return t.pass_ms(s.seqs, s.tokens, s.context)
    if not live:
        return 0.0
    total = sum(s.seqs * s.tokens for _, s in live)
    ms = max(t.tokens_ms(total) for t, _ in live) + max(t.table.overhead_ms for t, _ in live)
    for t, s in live:
        ms += max(0.0, t.pass_ms(s.seqs, s.tokens, s.context) - t.tokens_ms(s.seqs * s.tokens) - t.table.overhead_ms)
    return ms


class TablePredictor:
    name = "table"
    fallback = "linear"  # off the table's GPU or precision: the model's linear coefficients
    linear_above_roofline = True

    def check(self, pm, where: str) -> None:
        if pm.table is None:
            raise UserError(f"{where} has model_type 'table' but no table", "rebuild the profile (costmodel fit of its op table, measure/ops/passtable.py)")
        if not pm.coef:
            raise UserError(f"{where}: a table model needs its linear coefficients too (used off the table's GPU/precision)",
                            "keep the fitted coef beside the table")
        pm.table.validate(where)

    def prices(self, pm, hardware_id: str, precision: str) -> bool:
        return pm.table_for(hardware_id, precision) is not None

    def pass_ms(self, cost, models: list, segments: tuple[Segment, ...]) -> float:
        roofline = cost.roofline
        ms = table_pass_ms([table_model(pm.table) for pm in models], segments)
        # the roofline floor: a pass's roofline is at most the sum of its segments' own rooflines
        # (FLOPs add up; weights are read once), so the joint one is only needed below that sum
        bound = sum(roofline.segment_roofline_ms(s) for s in segments)
        return ms if ms >= bound else max(roofline.pass_cost(segments).roofline_ms, ms)
