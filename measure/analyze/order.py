"""First-acceptance order per canvas position, from the `commits` and `generations` run tables.

Trap 3 of the study: accepted positions can be re-noised and accepted again, so "commit order"
means the order of *first* acceptance: a position's commit call is the first accept_canvas call
whose `accepted_positions` holds it, and its commit entropy is the entropy recorded for it in that
call. Trap 1: trailing EOS/pad positions commit first; content positions are the canvas positions
before the first EOS/pad (`eos_positions` of the generations row), and every statistic but the raw
one uses content positions only. Positions never accepted (random weights accept about one per
call, so most of a 256-token canvas never is) have no commit call: they are left out of the order
and counted as coverage.

The analysis unit is one canvas (gen_id, canvas): positions are canvas-local and each canvas is its
own ordering. A one-canvas generation (the study's, max_new_tokens 256) is one unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from costmodel.errors import UserError

COMMIT_COLUMNS = ("gen_id", "canvas", "call", "accepted_positions", "accepted_entropy", "new_positions", "renoised_positions")
GENERATION_COLUMNS = ("gen_id", "regime", "prompt_id", "seed", "split", "canvas", "final_tokens", "eos_positions")


@dataclass
class HookChecks:
    """Consistency of the accept_canvas records: what a run on random weights *can* vouch for."""

    commit_rows: int = 0
    canvases_with_commits: int = 0
    canvases_without_commits: int = 0  # generation canvases that no commit row names
    orphan_commit_canvases: int = 0  # commit canvases absent from the generations table (dropped)
    positions_out_of_range: int = 0  # accepted positions outside [0, canvas length) (dropped)
    entropy_length_mismatch_rows: int = 0  # accepted_entropy not the length of accepted_positions
    new_positions_mismatch_rows: int = 0  # new_positions != first acceptances derived at that call
    renoised_not_accepted_before: int = 0  # renoised positions never accepted before that call

    def problems(self) -> list[str]:
        out = []
        for name, what in [
            ("orphan_commit_canvases", "commit canvases with no generations row (left out)"),
            ("positions_out_of_range", "accepted positions outside the canvas (left out)"),
            ("entropy_length_mismatch_rows", "commit rows whose accepted_entropy length differs from accepted_positions (entropy unused)"),
            ("new_positions_mismatch_rows", "commit rows whose new_positions differ from the first acceptances derived from accepted_positions"),
            ("renoised_not_accepted_before", "re-noised positions that had not been accepted before"),
            ("canvases_without_commits", "generation canvases without commit rows (left out)"),
        ]:
            n = getattr(self, name)
            if n:
                out.append(f"{n} {what}")
        return out


@dataclass
class CanvasTrace:
    """One canvas's commit history reduced to what the lens needs."""

    gen_id: str
    canvas: int
    regime: str
    prompt_id: str
    seed: int
    split: str
    canvas_positions: int  # length of the canvas (final_tokens)
    content_positions: int  # positions before the first EOS/pad
    accept_calls: int  # accept_canvas calls (commit rows) on this canvas
    positions: np.ndarray  # every position ever accepted, ascending
    first_call: np.ndarray  # call index of each position's first acceptance
    commit_entropy_nats: np.ndarray  # entropy recorded at that first acceptance (NaN if unrecorded)
    renoise_events_all: int  # re-noise records on any position
    renoise_events_content: int  # re-noise records on content positions
    correct: float = math.nan  # 1/0 when the regime is scored, NaN otherwise

    @property
    def content_mask(self) -> np.ndarray:
        return self.positions < self.content_positions


@dataclass
class Traces:
    canvases: list[CanvasTrace] = field(default_factory=list)
    checks: HookChecks = field(default_factory=HookChecks)


def _ints(v) -> np.ndarray:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return np.zeros(0, dtype=np.int64)
    return np.asarray(v, dtype=np.int64).reshape(-1)


def _floats(v) -> np.ndarray:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return np.zeros(0, dtype=float)
    return np.asarray(v, dtype=float).reshape(-1)


def _correct(v) -> float:
    if v is None or v is pd.NA:
        return math.nan
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return math.nan if math.isnan(f) else float(f != 0)


def require_columns(df: pd.DataFrame, columns: tuple[str, ...], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise UserError(f"{what} lacks columns {missing}", "give a commits/generations table in the run-directory schema (measure/rundir.py)")


def build_traces(commits: pd.DataFrame, generations: pd.DataFrame) -> Traces:
    """Join commit rows to their generation canvases and derive each position's first acceptance."""
    require_columns(commits, COMMIT_COLUMNS, "the commits table")
    require_columns(generations, GENERATION_COLUMNS, "the generations table")
    gens = generations.copy()
    gens["canvas"] = gens["canvas"].astype(int)
    dup = gens.duplicated(["gen_id", "canvas"])
    if dup.any():
        first = gens.loc[dup, ["gen_id", "canvas"]].iloc[0]
        raise UserError(f"the generations table has {int(dup.sum())} duplicate (gen_id, canvas) rows, e.g. {first.gen_id!r} canvas {first.canvas}",
                        "each generated canvas must appear once; remove the repeated rows")
    out = Traces()
    checks = out.checks
    checks.commit_rows = len(commits)
    by_canvas = {key: grp for key, grp in commits.groupby([commits["gen_id"], commits["canvas"].astype(int)], sort=False)}
    has_correct = "correct" in gens.columns
    for g in gens.itertuples(index=False):
        key = (g.gen_id, int(g.canvas))
        rows = by_canvas.pop(key, None)
        if rows is None or rows.empty:
            checks.canvases_without_commits += 1
            continue
        checks.canvases_with_commits += 1
        out.canvases.append(_trace(g, rows.sort_values("call"), checks, _correct(g.correct) if has_correct else math.nan))
    checks.orphan_commit_canvases = len(by_canvas)
    return out


def _trace(g, rows: pd.DataFrame, checks: HookChecks, correct: float) -> CanvasTrace:
    tokens = _ints(g.final_tokens)
    eos = _ints(g.eos_positions)
    calls = rows["call"].to_numpy()
    canvas_len = int(tokens.size) if tokens.size else int(max((_ints(p).max(initial=-1) for p in rows["accepted_positions"]), default=-1) + 1)
    content = min(int(eos.min()), canvas_len) if eos.size else canvas_len
    seen_call = np.full(canvas_len, -1, dtype=np.int64)  # first-acceptance call per position, -1 = not yet
    seen_entropy = np.full(canvas_len, math.nan)
    renoise_all = renoise_content = 0
    for call, acc, ent, new, ren in zip(calls, rows["accepted_positions"], rows["accepted_entropy"], rows["new_positions"], rows["renoised_positions"]):
        call = int(call)
        acc, ent, new, ren = _ints(acc), _floats(ent), _ints(new), _ints(ren)
        if ent.size != acc.size:
            checks.entropy_length_mismatch_rows += 1
            ent = np.full(acc.size, math.nan)
        inside = (acc >= 0) & (acc < canvas_len)
        checks.positions_out_of_range += int((~inside).sum())
        acc, ent = acc[inside], ent[inside]
        fresh = seen_call[acc] < 0
        seen_call[acc[fresh]] = call
        seen_entropy[acc[fresh]] = ent[fresh]
        if not np.array_equal(np.unique(acc[fresh]), np.unique(new)):
            checks.new_positions_mismatch_rows += 1
        ren = ren[(ren >= 0) & (ren < canvas_len)]
        checks.renoised_not_accepted_before += int(((seen_call[ren] < 0) | (seen_call[ren] >= call)).sum())
        renoise_all += int(ren.size)
        renoise_content += int((ren < content).sum())
    pos = np.flatnonzero(seen_call >= 0)
    return CanvasTrace(
        gen_id=str(g.gen_id), canvas=int(g.canvas), regime=str(g.regime), prompt_id=str(g.prompt_id), seed=int(g.seed), split=str(g.split),
        canvas_positions=canvas_len, content_positions=content, accept_calls=int(len(rows)),
        positions=pos, first_call=seen_call[pos], commit_entropy_nats=seen_entropy[pos],
        renoise_events_all=renoise_all, renoise_events_content=renoise_content, correct=correct,
    )
