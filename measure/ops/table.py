"""The op table: one CSV row per (precision, op, shape) with the kernel chosen and its time, plus a
`meta.json` beside it (provenance, ceilings measured in the same run, the overhead term, status,
planned and missing units). Torch-free: composition and fitting read it anywhere.

Interpolation (`OpTable.ms`): token ops are piecewise linear in m between grid points; attention
multilinear over (seqs, q, ctx); grid points the campaign skipped for memory (very large
seqs x ctx) are filled by scaling the nearest measured point along seqs (attention work is linear
in sequences once the GPU is full); beyond the grid, linear extrapolation from the last two points,
counted in `OpTable.extrapolated`. Logits-sized ops (lm_head, samplers, self-conditioning
embedding GEMM) run in chunks of VOCAB_CHUNK tokens: above that, whole chunks plus the remainder.
"""

from __future__ import annotations

import bisect
import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

COLUMNS = ("gpu", "precision", "op", "family", "m", "seqs", "q", "ctx", "kernel", "ms", "n_in_graph", "method",
           "candidates", "fallback", "detail", "source", "unit_s")  # source: where the kernel choice came from; unit_s: campaign seconds
VOCAB_CHUNK = 4096
CHUNKED_OPS = ("lm_head", "asst.lm_head", "dg_sampler", "ar_sampler", "gemm.sc_embed")
ANY = "*"  # precision of ops timed once per GPU (bf16 KV attention, samplers, norms)


def read_rows(path: str | Path) -> list[dict]:
    p = Path(path)
    if not p.exists():
        return []
    with p.open(newline="") as f:
        return list(csv.DictReader(f))


def _interp1(xs: list[float], ys: list[float], x: float) -> tuple[float, bool]:
    """Piecewise linear; above the grid linear extrapolation from the last two points, below it the
    first point's value (both flagged); a single point: constant."""
    if len(xs) == 1:
        return ys[0], x != xs[0]
    if x < xs[0]:
        return ys[0], True
    i = len(xs) - 2 if x >= xs[-1] else bisect.bisect_right(xs, x) - 1
    x0, x1, y0, y1 = xs[i], xs[i + 1], ys[i], ys[i + 1]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0), x > xs[-1]


@dataclass
class OpSeries:
    """One op at one precision: points keyed by axis tuples."""

    axes: tuple[str, ...]
    points: dict[tuple, float] = field(default_factory=dict)
    kernels: dict[tuple, str] = field(default_factory=dict)

    def grid(self, i: int) -> list[int]:
        return sorted({k[i] for k in self.points})


class OpTable:
    """All op rows of one GPU (both precisions) with interpolation."""

    def __init__(self, rows: list[dict], meta: dict | None = None):
        self.meta = meta or {}
        self.series: dict[tuple[str, str], OpSeries] = {}
        self.extrapolated: set[str] = set()
        self.gpu = (rows[0].get("gpu") if rows else None) or self.meta.get("gpu_name")
        for r in rows:
            if not r.get("ms"):
                continue
            attn = r["family"] == "attn"
            axes = ("seqs", "q", "ctx") if attn else ("m",)
            key = tuple(int(float(r[a])) for a in axes)
            s = self.series.setdefault((r["precision"], r["op"]), OpSeries(axes))
            s.points[key] = float(r["ms"])
            s.kernels[key] = r["kernel"]

    @classmethod
    def load(cls, folder: str | Path) -> "OpTable":
        folder = Path(folder)
        meta = json.loads((folder / "meta.json").read_text()) if (folder / "meta.json").exists() else {}
        return cls(read_rows(folder / "ops.csv"), meta)

    def has(self, op: str, precision: str) -> bool:
        return (precision, op) in self.series or (ANY, op) in self.series

    def _series(self, op: str, precision: str) -> OpSeries:
        s = self.series.get((precision, op)) or self.series.get((ANY, op))
        if s is None:
            raise KeyError(f"op {op} was not timed at {precision} (nor precision-independent) on {self.gpu}")
        return s

    def covers(self, op: str, precision: str, at: dict) -> bool:
        """Whether a token op was timed on both sides of `at` (no extrapolation needed)."""
        if not self.has(op, precision):
            return False
        s = self._series(op, precision)
        if s.axes != ("m",):
            return True
        xs = s.grid(0)
        return bool(xs) and xs[0] <= int(at["m"]) <= xs[-1]

    def kernel(self, op: str, precision: str) -> str:
        s = self._series(op, precision)
        ks = sorted(set(s.kernels.values()))
        return ",".join(ks)

    def ms(self, op: str, precision: str, at: dict) -> float:
        s = self._series(op, precision)
        if s.axes == ("m",):
            m = int(at["m"])
            if m <= 0:
                return 0.0
            if op in CHUNKED_OPS and m > VOCAB_CHUNK:
                full, rest = divmod(m, VOCAB_CHUNK)
                return full * self.ms(op, precision, {"m": VOCAB_CHUNK}) + (self.ms(op, precision, {"m": rest}) if rest else 0.0)
            xs = s.grid(0)
            y, out = _interp1(xs, [s.points[(x,)] for x in xs], m)
            if out:
                self.extrapolated.add(f"{op}@m={m}")
            return max(y, 0.0)
        return self._attn_ms(op, s, int(at["seqs"]), int(at["q"]), int(at["ctx"]))

    def _attn_point(self, s: OpSeries, seqs: int, q: int, ctx: int) -> float | None:
        """A grid point, or one filled from the nearest measured smaller seqs (work linear in seqs)."""
        v = s.points.get((seqs, q, ctx))
        if v is not None:
            return v
        cands = [k for k in s.points if k[1] == q and k[2] == ctx and k[0] < seqs]
        if cands:
            k = max(cands)
            return s.points[k] * seqs / k[0]
        cands = [k for k in s.points if k[0] == seqs and k[1] == q and k[2] < ctx]
        if cands:
            k = max(cands, key=lambda t: t[2])
            return s.points[k] * (ctx + q) / (k[2] + q)
        return None

    def _attn_ms(self, op: str, s: OpSeries, seqs: int, q: int, ctx: int) -> float:
        window = None
        if ".sliding." in op:
            window = self.meta.get("sliding_window", 1024)
        if window:  # the op restricts keys to the window: flat beyond it
            ctx = max(0, min(ctx, window - q)) if ".bidirectional" in op else min(ctx, window)
        S, Q, C = s.grid(0), s.grid(1), s.grid(2)
        if window:
            C = [c for c in C if c <= window] or C

        def along(grid, x, f):
            if len(grid) == 1:
                return f(grid[0]), x != grid[0]
            if x <= grid[0]:
                i = 0
            elif x >= grid[-1]:
                i = len(grid) - 2
            else:
                i = bisect.bisect_right(grid, x) - 1
            x0, x1 = grid[i], grid[i + 1]
            y0, y1 = f(x0), f(x1)
            if y0 is None or y1 is None:
                return None, True
            w = (x - x0) / (x1 - x0)
            return y0 + (y1 - y0) * w, x < grid[0] or x > grid[-1]

        flags = []

        def fc(sq, qq):
            y, o = along(C, ctx, lambda c: self._attn_point(s, sq, qq, c))
            flags.append(o)
            return y

        def fq(sq):
            y, o = along(Q, q, lambda qq: fc(sq, qq))
            flags.append(o)
            return y

        y, o = along(S, seqs, fq)
        flags.append(o)
        if y is None:
            raise KeyError(f"{op}: no measured points around seqs={seqs} q={q} ctx={ctx}")
        if any(flags):
            self.extrapolated.add(f"{op}@seqs={seqs},q={q},ctx={ctx}")
        return max(y, 0.0)

    def overhead_ms(self, batch: int) -> float:
        per = (self.meta.get("overhead") or {}).get("per_batch_ms") or {}
        if not per:
            return 0.0
        xs = sorted(int(k) for k in per)
        y, _ = _interp1(xs, [float(per[str(x)]) for x in xs], batch)
        return max(y, 0.0)
