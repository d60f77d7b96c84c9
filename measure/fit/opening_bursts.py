"""How a recorded vLLM engine took in a burst of requests sent at once (issue 49, p95 TTFT of a closed loop's opening):
the front end's handover per request and the idle engine core's pickup, read off the committed runs.

A closed loop's clients send their first requests at once. The driver (measure/vllm/gpu_run.py Client) sends in
AsyncLLM's own event loop, so each send is stamped once the request before it has been handed over: the gap between
consecutive sends is the front end's per-request handover. The engine's step records cannot show arrivals (under
async scheduling the first record of a burst already counts every request as running or waiting), but its first
prefill step shows how many of the burst it took: an idle engine core steps shortly after the first request reaches
it, on those handed over by then. The fit reads the same two off the fitted loads into a profile, and the simulator
models them (simulate/calibrate.py frontend_handover_fit, engine_pickup_fit; docs/measure.md, "p95 TTFT: what is
modelled"); this prints them over every run.

    python -m measure.fit.opening_bursts data/runs/engine h200 fp8
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from costmodel.schemas.engine_loads import recorded_loads
from costmodel.schemas.rundir import load_run

MIN_CLIENTS = 4  # a burst of fewer sends gives one or two gaps


@dataclass(frozen=True)
class Burst:
    """A closed loop's opening burst: its first `clients` requests."""

    run: str  # <campaign folder>/<setup>
    mode: str
    load: str
    sends_s: tuple  # send times, s after the first
    first_step_reqs: int  # requests in the engine's first prefill step of the burst
    first_step_full: bool  # that step filled the token budget: its size, not when it started, decided what it took

    @property
    def handover_ms(self) -> float:
        """The median gap between consecutive sends after the first (the event loop's first pass is longer)."""
        gaps = np.diff(np.asarray(self.sends_s, float))[1:]
        return float(np.median(gaps)) * 1e3 if len(gaps) else math.nan

    @property
    def pickup_ms(self) -> float:
        """When, after the first send, the idle engine stopped taking the burst into its first step: the middle
        between the last send that step held and the next (NaN where the step filled the budget or held all)."""
        k, s = self.first_step_reqs, np.asarray(self.sends_s, float) * 1e3
        if self.first_step_full or not 1 <= k < len(s):
            return math.nan
        return float((s[k - 1] + s[k]) / 2 - s[0])


def opening_bursts(setup_dir: Path) -> list[Burst]:
    """Every closed loop of at least MIN_CLIENTS clients one engine start served (a setup directory written by
    measure/vllm/gpu_run.py), its opening burst."""
    import pandas as pd

    setup_dir = Path(setup_dir)
    loads = [ld for ld in recorded_loads(setup_dir) if ld.kind == "closed" and (ld.concurrency or 0) >= MIN_CLIENTS and not ld.refused]
    if not loads:
        return []
    run = load_run(setup_dir)
    steps, budget = run.table("steps"), int(run.manifest.engine.get("max_num_batched_tokens") or 0)
    req = pd.read_parquet(setup_dir / "requests.parquet")
    out = []
    for ld in loads:
        c = int(ld.concurrency)
        b = req[req["load"] == ld.name].sort_values("arrival_s").head(c)
        t0, t1 = float(b["arrival_s"].min()), float(b["first_token_s"].max())
        if not math.isfinite(t1):
            continue
        pre = steps[(steps["wall_time"] >= t0) & (steps["wall_time"] <= t1 + 1e-3) & (steps["prefill_tokens"] > 0)]
        if not len(pre):
            continue
        first = pre.iloc[0]
        out.append(Burst(f"{setup_dir.parent.name}/{setup_dir.name}", str(run.manifest.mode), ld.name, tuple(ld.send_s[:c]),
                         int(first["prefill_reqs"]), bool(budget and int(first["prefill_tokens"]) >= budget)))
    return out


def summary_lines(bursts: list[Burst]) -> list[str]:
    """Per mode: the handover (median over bursts, and its spread) and the pickup, with how many bursts each rests on."""
    lines = []
    for mode in sorted({b.mode for b in bursts}):
        mine = [b for b in bursts if b.mode == mode]
        hand = np.array([b.handover_ms for b in mine])
        pick = np.array([b.pickup_ms for b in mine])
        pick = pick[np.isfinite(pick)]
        held = sorted(b.first_step_reqs for b in mine if not b.first_step_full)
        line = (f"{mode}: handover {np.median(hand):.2f} ms per request (median of {len(hand)} bursts, IQR {np.percentile(hand, 25):.2f}-"
                f"{np.percentile(hand, 75):.2f})")
        if len(pick):
            line += (f"; idle engine pickup {np.median(pick):.2f} ms (median of {len(pick)} bursts, {pick.min():.2f}-{pick.max():.2f}); "
                     f"first step held {held[0]}-{held[-1]} requests (median {np.median(held):g}) where the budget did not fill it")
        lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="the campaigns' folder, e.g. data/runs/engine")
    ap.add_argument("gpu")
    ap.add_argument("precision")
    a = ap.parse_args(argv)
    dirs = sorted(d for d in a.root.glob(f"{a.gpu}-{a.precision}-*/*/") if (d / "loads.json").exists())
    bursts = [b for d in dirs for b in opening_bursts(d)]
    if not bursts:
        print(f"no closed loop of {MIN_CLIENTS}+ clients under {a.root}/{a.gpu}-{a.precision}-*", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(bursts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
