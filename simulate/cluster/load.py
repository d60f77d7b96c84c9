"""Load over time: a rate curve (requests/s against time) and the arrivals it draws.

A curve is piecewise linear between its points (time_s, qps). Sources:

- a CSV file with the header `time_s,qps` (seconds from the start of the day, strictly increasing;
  rates >= 0; the curve starts at its first time);
- `flat:QPS[,hours=24]`: one rate for the whole span;
- `diurnal:peak=30,trough=10,peak_hour=14[,hours=24]`: a cosine between trough and peak over a
  24-hour period, highest at `peak_hour` (hour of day), sampled every 5 minutes.

Arrivals are a unit-rate renewal process (the workload's: Poisson by default) mapped through the
inverse of the curve's cumulative rate (time rescaling), so the same seed gives the same request
sequence whatever the curve, and `flat:Q` gives exactly the arrivals of a constant-rate point at Q.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.errors import UserError
from costmodel.fields import CURVE_HOURS
from costmodel.jsonfile import read_csv
from costmodel.options import QPS_MAX, check_rate
from costmodel.schemas.profile import Profile
from simulate.workload import Requests, Workload, build_requests

DAY_S = 86400.0
DIURNAL_STEP_S = 300.0
PRESETS = "flat:QPS[,hours=H] or diurnal:peak=P,trough=T,peak_hour=H[,hours=H]"


@dataclass(frozen=True)
class LoadCurve:
    """Requests/s at each of `time_s` (from 0), linear in between; `source` says where it came from."""

    time_s: tuple
    qps: tuple
    source: str

    @property
    def span_s(self) -> float:
        return float(self.time_s[-1])

    @property
    def peak_qps(self) -> float:
        return float(max(self.qps))

    def cumulative(self) -> np.ndarray:
        """Expected arrivals up to each point (the integral of the rate)."""
        t, q = np.asarray(self.time_s, float), np.asarray(self.qps, float)
        return np.concatenate([[0.0], np.cumsum(np.diff(t) * (q[:-1] + q[1:]) / 2)])

    @property
    def expected_requests(self) -> float:
        return float(self.cumulative()[-1])

    def rate_at(self, t) -> np.ndarray:
        return np.interp(t, self.time_s, self.qps)

    def invert(self, s: np.ndarray) -> np.ndarray:
        """The times at which the cumulative rate reaches s (each s in [0, expected_requests])."""
        t, q = np.asarray(self.time_s, float), np.asarray(self.qps, float)
        lam = self.cumulative()
        k = np.clip(np.searchsorted(lam, s, side="right") - 1, 0, len(t) - 2)
        r0, slope = q[k], (q[k + 1] - q[k]) / (t[k + 1] - t[k])
        d = np.maximum(s - lam[k], 0.0)
        # r0 dt + slope dt^2 / 2 = d, in the form that is stable for slope -> 0
        root = np.sqrt(np.maximum(r0 * r0 + 2 * slope * d, 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            dt = np.where(r0 + root > 0, 2 * d / (r0 + root), 0.0)
        return np.minimum(t[k] + dt, t[k + 1])

    def scaled(self, factor: float) -> "LoadCurve":
        return LoadCurve(self.time_s, tuple(q * factor for q in self.qps), f"{self.source} x {factor:g}")

    def window(self, t0: float, t1: float) -> "LoadCurve":
        """The curve between t0 and t1 (within its span), its time shifted to start at 0."""
        t = np.asarray(self.time_s, float)
        inner = t[(t > t0) & (t < t1)]
        times = np.concatenate([[t0], inner, [t1]])
        return LoadCurve(tuple((times - t0).tolist()), tuple(self.rate_at(times).tolist()), f"{self.source}, {t0:g}-{t1:g} s")

    def hourly_qps(self) -> np.ndarray:
        """Mean offered rate of each hour of the span."""
        hours = max(1, math.ceil(self.span_s / 3600 - 1e-9))
        lam = self.cumulative()
        edges = np.minimum(np.arange(hours + 1) * 3600.0, self.span_s)
        at = np.interp(edges, self.time_s, lam)
        return np.diff(at) / np.maximum(np.diff(edges), 1e-9)


def _check(t: np.ndarray, q: np.ndarray, where: str) -> None:
    if len(t) < 2:
        raise UserError(f"{where} has {len(t)} point(s)", "give at least two rows of time_s,qps")
    for name, x in (("time_s", t), ("qps", q)):
        bad = ~np.isfinite(x)
        if bad.any():
            raise UserError(f"{where}: row {int(np.argmax(bad)) + 1} has a missing or non-numeric {name}", "give a number in every row")
    if (q < 0).any():
        i = int(np.argmax(q < 0))
        raise UserError(f"{where}: row {i + 1} has a negative rate ({q[i]:g} qps)", "rates are requests per second, >= 0")
    d = np.diff(t)
    if (d == 0).any():
        i = int(np.argmax(d == 0))
        raise UserError(f"{where}: rows {i + 1} and {i + 2} have the same time_s ({t[i]:g})", "give each time once")
    if (d < 0).any():
        i = int(np.argmax(d < 0))
        raise UserError(f"{where}: time_s is not sorted (row {i + 2}: {t[i + 1]:g} after {t[i]:g})", "sort the rows by time_s")
    if not (q > 0).any():
        raise UserError(f"{where}: every rate is 0", "give a positive rate somewhere")
    if q.max() > QPS_MAX:
        i = int(np.argmax(q))
        raise UserError(f"{where}: row {i + 1} has a rate of {q[i]:g} qps, above {QPS_MAX:g}", f"give rates <= {QPS_MAX:g} requests/s")
    span_h = (t[-1] - t[0]) / 3600
    if span_h > CURVE_HOURS.hi:
        raise UserError(f"{where}: time_s spans {span_h:,.4g} hours (row {len(t)}: {t[-1]:g} s), above {CURVE_HOURS.hi:g} ({CURVE_HOURS.why})",
                        "give time_s in seconds from the start of the day; split a longer curve into months")


def curve(t, q, source: str) -> LoadCurve:
    t, q = np.asarray(t, float), np.asarray(q, float)
    _check(t, q, source)
    return LoadCurve(tuple((t - t[0]).tolist()), tuple(q.tolist()), source)


def read_curve_csv(path: Path) -> LoadCurve:
    where = f"load curve {path}"
    if not path.is_file():
        raise UserError(f"{where} {'is not a file' if path.exists() else 'does not exist'}", f"give a CSV with columns time_s,qps or a preset ({PRESETS})")
    try:
        df = read_csv(path, "load curve")  # a BOM read as UTF-8's, a column named twice refused (costmodel/jsonfile.py)
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise UserError(f"{where} could not be parsed ({str(e).splitlines()[0] if str(e) else type(e).__name__})", "give a CSV with columns time_s,qps") from None
    missing = [c for c in ("time_s", "qps") if c not in df.columns]
    if missing:
        raise UserError(f"{where} lacks column(s) {', '.join(missing)}", "give a CSV with the header time_s,qps")
    t = pd.to_numeric(df["time_s"], errors="coerce").to_numpy(float)
    q = pd.to_numeric(df["qps"], errors="coerce").to_numpy(float)
    return curve(t, q, where)


def _params(text: str, body: str, allowed: dict) -> dict:
    out = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        k, sep, v = part.partition("=")
        if not sep or k.strip() not in allowed:
            raise UserError(f"load curve {text!r}: {part!r} is not one of {', '.join(f'{a}=' for a in allowed)}", f"e.g. {PRESETS}")
        if k.strip() in out:  # never the last of two: a typo or a conflict
            raise UserError(f"load curve {text!r} gives {k.strip()} twice", f"give {k.strip()}= once")
        try:
            out[k.strip()] = float(v)
        except ValueError:
            raise UserError(f"load curve {text!r}: {k.strip()}={v!r} is not a number", f"e.g. {PRESETS}") from None
    return {k: out.get(k, d) for k, d in allowed.items()}


def _diurnal(text: str, body: str) -> LoadCurve:
    p = _params(text, body, {"peak": None, "trough": None, "peak_hour": 14.0, "hours": 24.0})
    if p["peak"] is None or p["trough"] is None:
        raise UserError(f"load curve {text!r} needs peak= and trough=", "e.g. diurnal:peak=30,trough=10,peak_hour=14")
    if not 0 <= p["trough"] <= p["peak"] or p["peak"] <= 0:
        raise UserError(f"load curve {text!r}: need 0 <= trough <= peak and peak > 0", "e.g. diurnal:peak=30,trough=10")
    if not 0 <= p["peak_hour"] < 24:
        raise UserError(f"load curve {text!r}: peak_hour must be in [0, 24)", "e.g. peak_hour=14")
    for k in ("peak", "trough"):
        if p[k] > 0:
            check_rate(p[k], f"load curve {text!r}: {k}")
    CURVE_HOURS.check(p["hours"], f"load curve {text!r}")
    t = np.arange(0.0, p["hours"] * 3600 + 1e-9, DIURNAL_STEP_S)
    if t[-1] < p["hours"] * 3600:
        t = np.append(t, p["hours"] * 3600)
    phase = 2 * np.pi * (t / 3600 - p["peak_hour"]) / 24
    q = p["trough"] + (p["peak"] - p["trough"]) * (1 + np.cos(phase)) / 2
    return curve(t, q, f"diurnal (peak {p['peak']:g} at {p['peak_hour']:g} h, trough {p['trough']:g} QPS)")


def parse_curve(text: str | Path) -> LoadCurve:
    """A preset (`flat:...`, `diurnal:...`) or a CSV path -> LoadCurve (one-line errors)."""
    s = str(text).strip()
    kind, sep, body = s.partition(":")
    if sep and kind == "flat":
        head, _, rest = body.partition(",")
        try:
            qps = float(head)
        except ValueError:
            raise UserError(f"load curve {s!r}: {head!r} is not a rate", "e.g. flat:30") from None
        hours = _params(s, rest, {"hours": 24.0})["hours"]
        if not (qps > 0 and hours > 0):
            raise UserError(f"load curve {s!r}: the rate and hours must be positive", "e.g. flat:30,hours=1")
        check_rate(qps, f"load curve {s!r}: the rate")
        CURVE_HOURS.check(hours, f"load curve {s!r}")
        return curve([0.0, hours * 3600], [qps, qps], f"flat {qps:g} QPS")
    if sep and kind == "diurnal":
        return _diurnal(s, body)
    if sep and kind.isalpha() and not Path(s).exists():
        raise UserError(f"load curve preset {kind!r} is unknown", f"use {PRESETS}, or a CSV file with columns time_s,qps")
    return read_curve_csv(Path(s))


def curve_requests(profile: Profile, workload: Workload | None, lc: LoadCurve, seed: int) -> Requests:
    """The requests of a curve: the workload's lengths and regimes, arrivals by time rescaling."""
    want = lc.expected_requests
    n = int(want + 6 * math.sqrt(want) + 64)
    reqs = build_requests(profile, workload, 1.0, n_requests=n, seed=seed)
    s = reqs.arrival_s
    keep = int(np.searchsorted(s, want, side="right"))
    if keep == 0:
        raise UserError(f"{lc.source}: no request arrives in {lc.span_s:g} s", "give a higher rate or a longer curve")
    arr = lc.invert(s[:keep])
    # the prompt content goes with the lengths (a shared system prompt's blocks hit the prefix cache, as in a point)
    return Requests(arr, reqs.prompt_tokens[:keep], reqs.output_tokens[:keep], reqs.regime_idx[:keep], reqs.regimes,
                    lc.span_s, want / lc.span_s, content=None if reqs.content is None else reqs.content[:keep])
