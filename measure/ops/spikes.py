"""Spikes: a token op's time that grows faster than linearly from the previous grid point, or lies
above the next one, by SPIKE times is a glitch of that timing (a clock dip, another process), not
the kernel: the campaign re-times such units once and keeps the faster (measure/ops/run.py). Seen
on a fresh H100 (2026-11-25): the assistant's fp8 pre-projection at 1024 tokens timed 0.296 ms, 13x
the committed 0.022, between neighbours that agreed within 1%."""

from __future__ import annotations

SPIKE = 1.5


def spikes(rows: list[dict]) -> list[dict]:
    """The rows of token ops (an `m` axis) that look like timing glitches (see the module docstring)."""
    series: dict = {}
    for r in rows:
        if r.get("ms") and r.get("m"):
            series.setdefault((r["precision"], r["op"]), []).append(r)
    out = []
    for s in series.values():
        s.sort(key=lambda r: int(r["m"]))
        for i, r in enumerate(s):
            ms, m = float(r["ms"]), int(r["m"])
            prev, nxt = (s[i - 1] if i else None), (s[i + 1] if i + 1 < len(s) else None)
            if (prev and ms > SPIKE * float(prev["ms"]) * m / int(prev["m"])) or (nxt and ms > SPIKE * float(nxt["ms"])):
                out.append(r)
    return out
