"""Public request traces replayed with their own timestamps and lengths.

Formats read (recognised by their columns):

- `azure`: Azure LLM inference traces 2023/2024 (CSV `TIMESTAMP,ContextTokens,GeneratedTokens`,
  TIMESTAMP a date-time);
- `burstgpt`: BurstGPT (CSV `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`,
  Timestamp in seconds; rows with 0 response tokens are failed requests and are left out);
- `mooncake`: Mooncake traces (JSONL `timestamp,input_length,output_length,hash_ids`, timestamp in
  ms; hash_ids name shared prefix blocks, which the simulator does not model: no prefix caching);
- `costmodel`: the simulator's own trace columns (`arrival_s`, `prompt_tokens`, `output_tokens`).

`compress` divides the timestamps (a 24-hour trace with compress=24 plays in an hour at 24x the
rate); `rate_scale` keeps the time axis and thins (< 1) or replicates (> 1) requests at random
(seeded): a replica of request i arrives uniformly within the trace's mean gap after it, so the
shape of the load over time stays the trace's at any scale coarser than a gap.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.errors import UserError
from costmodel.fields import DAY_REQUESTS, TOKENS, TRACE_SPAN_S, Field
from costmodel.jsonfile import read_csv
from costmodel.schemas.profile import Profile
from costmodel.seeding import rng_for
from simulate.workload import STREAM_REGIME, Requests

STREAM_TRACE_SCALE = 11
# the day's options that reach a trace (simulate/cli/plan_day.py): compress divides its time axis, load-scale thins or replicates
COMPRESS = Field("--compress", 0, 1e6, above=True, example="24")
LOAD_SCALE = Field("--load-scale", 0, 1e4, above=True, example="2", why="a trace replicated more often than this is a typo")
# format -> (time column, prompt column, output column, time unit in seconds; None: a date-time)
FORMATS = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens", None),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens", 1.0),
    "mooncake": ("timestamp", "input_length", "output_length", 1e-3),
    "costmodel": ("arrival_s", "prompt_tokens", "output_tokens", 1.0),
}
FORMAT_NAMES = ("Azure LLM inference 2023/2024 (TIMESTAMP,ContextTokens,GeneratedTokens), BurstGPT (Timestamp,Request tokens,"
                "Response tokens), Mooncake JSONL (timestamp,input_length,output_length,hash_ids), costmodel (arrival_s,prompt_tokens,output_tokens)")


@dataclass(frozen=True)
class TraceLoad:
    """A trace as arrival times (s from its first request) and lengths, after compress and rate_scale."""

    path: str
    fmt: str
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    dropped: int  # rows left out (failed requests: no output)

    @property
    def span_s(self) -> float:
        return float(self.arrival_s[-1]) if len(self.arrival_s) else 0.0

    @property
    def describe(self) -> str:
        extra = f", {self.dropped:,} failed rows left out" if self.dropped else ""
        return f"{self.fmt} trace {self.path} ({len(self.arrival_s):,} requests over {self.span_s / 3600:.2f} h{extra})"


def _frame(path: Path, max_rows: int | None = None) -> pd.DataFrame:
    """The trace's rows; with `max_rows`, at most one more is read (a longer trace is refused before it is read whole)."""
    where = f"trace {path}"
    if not path.is_file():
        raise UserError(f"{where} does not exist", "check the path")
    try:
        if path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
            df = pd.read_json(path, lines=True, nrows=None if max_rows is None else max_rows + 1)
        else:
            df = read_csv(path, "trace", skipinitialspace=True, nrows=None if max_rows is None else max_rows + 1)  # a column named twice refused
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{where} could not be parsed ({str(e).splitlines()[0] if str(e) else type(e).__name__})", f"formats read: {FORMAT_NAMES}") from None
    if max_rows is not None and len(df) > max_rows:
        raise UserError(f"{where} holds more than {max_rows:,} requests, above the bound of {max_rows:,} requests a day may simulate ({DAY_REQUESTS.why})",
                        f"cut the trace to the hours you need; or pass {DAY_REQUESTS.override} to run it")
    return df


def detect(df: pd.DataFrame, where: str) -> str:
    for name, (t, p, o, _) in FORMATS.items():
        if {t, p, o} <= set(df.columns):
            return name
    raise UserError(f"{where} is in no format read (columns {', '.join(map(str, df.columns[:6]))})", f"formats read: {FORMAT_NAMES}")


def _times(df: pd.DataFrame, col: str, unit: float | None, where: str) -> np.ndarray:
    if unit is None:
        ts = pd.to_datetime(df[col], format="ISO8601", errors="coerce")
        bad = ts.isna().to_numpy()
        t = (ts - ts.min()).dt.total_seconds().to_numpy(float) if not bad.all() else np.full(len(df), np.nan)
    else:
        t = pd.to_numeric(df[col], errors="coerce").to_numpy(float) * unit
        bad = ~np.isfinite(t)
    if bad.any():
        i = int(np.argmax(bad))
        raise UserError(f"{where}: row {i + 1} has {col} {df[col].iloc[i]!r}, not a time", "fix the trace")
    if t.max() - t.min() > TRACE_SPAN_S.hi:
        i = int(np.argmax(t))
        raise UserError(f"{where}: {col} spans {(t.max() - t.min()):.3g} s (row {i + 1}: {df[col].iloc[i]}), above {TRACE_SPAN_S.hi / 86400:g} days "
                        f"({TRACE_SPAN_S.why})", f"fix row {i + 1}'s {col}")
    d = np.diff(t)
    if (d < 0).any():
        i = int(np.argmax(d < 0))
        raise UserError(f"{where}: timestamps are not sorted (row {i + 2} is before row {i + 1})", "sort the trace by its timestamp")
    return t - t[0]


def load_trace(path: str | Path, *, compress: float = 1.0, rate_scale: float = 1.0, seed: int = 0, max_rows: int | None = None) -> TraceLoad:
    """Read a public trace (FORMATS) and apply compress and rate_scale (module docstring); a trace of more
    than `max_rows` rows is refused after reading one row more."""
    path = Path(path)
    where = f"trace {path}"
    for opt, v in ((COMPRESS, compress), (LOAD_SCALE, rate_scale)):  # named as the user gives them: plan's options
        opt.check(v, where)
    df = _frame(path, max_rows)
    if len(df) == 0:
        raise UserError(f"{where} holds no requests", "give at least one row")
    fmt = detect(df, where)
    tcol, pcol, ocol, unit = FORMATS[fmt]
    t = _times(df, tcol, unit, where)
    p = pd.to_numeric(df[pcol], errors="coerce").to_numpy(float)
    o = pd.to_numeric(df[ocol], errors="coerce").to_numpy(float)
    if not (np.isfinite(p).all() and np.isfinite(o).all()):
        i = int(np.argmax(~(np.isfinite(p) & np.isfinite(o))))
        raise UserError(f"{where}: row {i + 1} has a missing token count", "fix the trace")
    keep = (o >= 1) & (p >= 1)
    for col, x in ((pcol, p), (ocol, o)):  # a fraction or an absurd count is refused, never rounded
        bad = keep & ((x != np.round(x)) | (x > TOKENS.hi))
        if bad.any():
            i = int(np.argmax(bad))
            TOKENS.named(col).check(float(x[i]), f"{where} row {i + 1}")
    t, p, o = t[keep] / compress, p[keep].astype(np.int64), o[keep].astype(np.int64)
    if len(t) == 0:
        raise UserError(f"{where} has no request with both prompt and output tokens", "give a trace of completed requests")
    if max_rows is not None and len(t) * rate_scale > max_rows:  # bounded by the product before the copies are built
        raise UserError(f"{where}: {len(t):,} requests x {LOAD_SCALE.name} {rate_scale:g} would build about {len(t) * rate_scale:,.0f} requests, "
                        f"above the bound of {max_rows:,} ({DAY_REQUESTS.why})", f"give a smaller {LOAD_SCALE.name}; or pass {DAY_REQUESTS.override} to run it")
    t, p, o = _rate_scale(t, p, o, rate_scale, seed)
    return TraceLoad(str(path), fmt, t - t[0], p, o, int((~keep).sum()))


def _rate_scale(t, p, o, factor: float, seed: int):
    if factor == 1.0:
        return t, p, o
    rng = rng_for(seed, STREAM_TRACE_SCALE)
    copies = np.floor(factor) + (rng.random(len(t)) < factor - np.floor(factor))
    idx = np.repeat(np.arange(len(t)), copies.astype(np.int64))
    if len(idx) == 0:
        raise UserError(f"{LOAD_SCALE.name} {factor:g} leaves no request of the trace", f"give a larger {LOAD_SCALE.name}")
    gap = t[-1] / max(len(t) - 1, 1)
    first = np.r_[True, idx[1:] != idx[:-1]]  # the first copy keeps the recorded time
    shift = np.where(first, 0.0, rng.random(len(idx)) * gap)
    tt = t[idx] + shift
    order = np.argsort(tt, kind="stable")
    return tt[order], p[idx][order], o[idx][order]


def trace_requests(profile: Profile, tr: TraceLoad, seed: int) -> Requests:
    """The trace as a run's requests; regimes (which only set diffusion's steps per canvas) drawn
    evenly from the profile's, as the default workload does."""
    names = tuple(sorted(profile.regimes)) or ("-",)
    regime_idx = rng_for(seed, STREAM_REGIME).integers(0, len(names), size=len(tr.arrival_s)).astype(np.int64)
    span = max(tr.span_s, 1e-9)
    return Requests(np.asarray(tr.arrival_s, float), tr.prompt_tokens, tr.output_tokens, regime_idx, names, span, len(tr.arrival_s) / span)
