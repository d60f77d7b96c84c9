"""Predicted vs measured for real vLLM at load (issue 37), from the committed GPU runs.

One profile is fitted on the recorded engine steps of every mode (data/runs/engine/<gpu>-<precision>-*,
measure/vllm/gpu_run.py) less the held-out loads' steps (the checks the calibration design names,
measure/vllm/gpu_design.py: other concurrencies, Poisson rates and prompt lengths than the fitted ones), then every load is
simulated in its own terms (its requests' lengths; closed-loop clients or its recorded send times;
the engine settings it ran with) and set beside what the engine delivered: output tok/s, TTFT p50
and p95, TPOT p50 (as vllm bench computes them), and the engine's mean running requests (its step
records) beside the clients' mean requests in flight: where the clients hold more than the engine
runs, requests sat in vLLM's front-end (input and output processing), which the simulator does not
model. Targets: tok/s and TPOT within 10%, TTFT p50 within 15%.

The headline (issue 49) is leave one settings set out (pipeline/engine_loso.py): per mode, each settings
set (token budget, max_num_seqs, denoising steps, MTP k and acceptance, ...) held out in turn, the profile
fitted on the mode's other sets, every held-out load scored (tok/s, TTFT p50 and p95, TPOT p50, E2E p95) beside
the engine-against-itself spread where several starts served it. Targets: tok/s and TPOT p50 within 10%, TTFT
p50 within 15%, TTFT p95 within 20% on every held-out warm load below saturation. A mode with one settings set
recorded has nothing to hold out; `--loads` adds the older check (the design's held-out loads of every set).
Below it, the misses: each held-out warm load and figure outside its target, with the engine's own spread there, the
same load's in-sample error (one more fit per mode, on every settings set) and why it misses (pipeline/loso_misses.py:
the engine's own spread, transfer to unseen settings, or model structure), and per mode the misses by reason. On a
shared 2-core machine the whole took about 6 minutes (2026-11-29), explaining the misses about a third of it.

    .venv/bin/python benchmarks/bench_engine.py [--gpu h200] [--precision fp8] [--modes diffusion] [--loads [--all-loads]] [--csv out.csv]

`--csv`: the misses table; with `--loads`, the held-out loads table instead.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# the fits' least squares are small: one BLAS thread each (threads fighting over a shared 2-core machine made them 30x slower)
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import pandas as pd  # noqa: E402

from costmodel.errors import UserError  # noqa: E402
from measure.validate.engine_campaign import fit_campaign, recorded_setups, recorded_steps_priced  # noqa: E402
from pipeline.engine_loso import as_held_out, explain_misses, leave_one_setting_out, print_table, settings_sets  # noqa: E402
from pipeline.loso_misses import as_records, print_misses  # noqa: E402
from measure.validate.engine_repeats import load_repeats  # noqa: E402
from simulate.validate.engine_loads import COLD_SHARE, TARGETS, check_loads, with_frontend_latency  # noqa: E402

ROOT = Path(__file__).resolve().parents[1] / "data" / "runs" / "engine"


def fmt(v: float, nd: int = 0) -> str:
    return "-" if not math.isfinite(v) else f"{v:,.{nd}f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--precision", default="fp8")
    ap.add_argument("--root", type=Path, default=ROOT)
    ap.add_argument("--modes", default="", help="comma-separated modes of the leave-one-setting-out table (default: all)")
    ap.add_argument("--loads", action="store_true", help="also the design's held-out loads of every settings set, on one fit of all the others")
    ap.add_argument("--all-loads", action="store_true", help="with --loads: also the fitted loads (marked 'fit')")
    ap.add_argument("--csv", type=Path, default=None, help="the misses table (with --loads: the per-load table instead)")
    a = ap.parse_args(argv)
    if a.all_loads and not a.loads:
        print("error: --all-loads goes with --loads (the held-out loads table)", file=sys.stderr)
        return 2
    try:
        setups = recorded_setups(a.root, a.gpu, a.precision)
        result = leave_one_setting_out(setups, tuple(m for m in a.modes.split(",") if m))
        print_table(result)
        missed = explain_misses(result)
        print_misses(missed)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.csv and not a.loads:
        pd.DataFrame(as_records(missed)).to_csv(a.csv, index=False)
        print(f"wrote {a.csv}")
    if not a.loads:
        print_repeats(load_repeats(setups))
        return 0
    return held_out_loads(a, setups)


def held_out_loads(a, setups) -> int:
    """The design's held-out loads (EngineSetup.holdout) of every settings set, on one fit of everything else."""
    print()
    try:
        prof, msgs = fit_campaign(setups)
        msgs += with_frontend_latency(prof, setups)
        # each settings set with its own behaviour (MTP acceptance, denoising steps) and CUDA graphs, as LOSO scores it
        sets = settings_sets([s for s in setups if (s.path / "loads.json").exists()])
        rows = [row for mode, msets in sets.items() if mode in prof.modes for st in msets
                for row in check_loads(as_held_out(prof, mode, st), list(st.setups), include_fit=a.all_loads)]
        priced = recorded_steps_priced(prof, setups)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"profile fitted on {a.root.name}/{a.gpu}-{a.precision}-*: " + "; ".join(m for m in msgs if "features" in m).replace("\n", " ")[:600])
    for m in (m for m in msgs if "engine starts served" in m or "front-end latency" in m):  # the starts' offsets, the front-end
        print(m)
    out = []
    for r in rows:
        c = r.comparison
        rec = {"mode": r.mode, "setup": r.setup, "load": r.load.name, "role": "fit" if r.in_fit else "held-out", "status": r.status,
               "stalls": r.stalls, "stall_s": r.stall_s, "requests": len(r.load.prompt_tokens),
               "engine_running": r.engine_running, "client_in_flight": r.client_in_flight}
        for m in ("tok_s", "ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms"):
            rec[f"{m}_measured"], rec[f"{m}_predicted"], rec[f"{m}_error_pct"] = c.measured(m), c.predicted(m), r.error_pct(m)
        rec["ttft_request_error_pct"] = r.ttft_request_error_pct  # median over requests, request by request
        rec["steps_priced_error_pct"] = 100 * priced.get((r.path, r.load.name), math.nan)  # the step price alone, on the engine's own schedule
        rec["within_targets"] = all(not math.isfinite(rec[f"{m}_error_pct"]) or abs(rec[f"{m}_error_pct"]) <= t for m, t in TARGETS.items())
        out.append(rec)
    df = pd.DataFrame(out)
    hdr = (f"{'mode':9} {'setup':14} {'load':23} {'role':8} {'status':14} | {'tok/s meas':>10} {'pred':>7} {'err':>7} | {'TTFT50 meas':>11} {'pred':>6} "
           f"{'err':>7} {'per req':>7} | {'TTFT95 err':>10} | {'TPOT50 meas':>11} {'pred':>6} {'err':>7} | {'engine running':>14} {'client in flight':>16}")
    print(hdr)
    for x in out:
        status = f"cold {x['stalls']}/{x['stall_s']:.1f}s" if x["status"] == "cold" else x["status"]
        print(f"{x['mode']:9} {x['setup']:14} {x['load']:23} {x['role']:8} {status:14} | {fmt(x['tok_s_measured']):>10} {fmt(x['tok_s_predicted']):>7} "
              f"{fmt(x['tok_s_error_pct'], 1):>6}% | {fmt(x['ttft_p50_ms_measured']):>11} {fmt(x['ttft_p50_ms_predicted']):>6} "
              f"{fmt(x['ttft_p50_ms_error_pct'], 1):>6}% {fmt(x['ttft_request_error_pct'], 1):>6}% | {fmt(x['ttft_p95_ms_error_pct'], 1):>9}% | {fmt(x['tpot_p50_ms_measured'], 2):>11} "
              f"{fmt(x['tpot_p50_ms_predicted'], 2):>6} {fmt(x['tpot_p50_ms_error_pct'], 1):>6}% | {fmt(x['engine_running'], 1):>14} "
              f"{fmt(x['client_in_flight'], 1):>16} | {fmt(x['steps_priced_error_pct'], 1):>11}%")
    print("status: steady = scored; cold N/S = N first-use stalls (S s of one-time kernel compilation, measure/fit/stalls.py) in its "
          "steps, not a steady state; refused = the engine failed the load's requests (its log says why); TTFT per req: the median "
          "over requests of each one's predicted / measured TTFT - 1 (a p50 can fall between groups of TTFTs where the requests agree); "
          "steps priced: the profile's summed price of the load's recorded steps (the engine's own schedule) / their recorded time - 1, "
          "so a miss above it comes from the schedule the simulator chose")
    held = df[df["role"] == "held-out"]
    for mode, g in held.groupby("mode"):
        steady = g[g["status"] == "steady"]
        other = g[g["status"] != "steady"]
        loops = steady[steady["setup"].str.endswith("-steady")]  # the design's steady-state checks (measure/vllm/gpu_design.py)
        print(f"{mode}: {int(steady['within_targets'].sum())}/{len(steady)} steady held-out loads within every target; median |error| tok/s "
              f"{steady['tok_s_error_pct'].abs().median():.1f}%, TTFT p50 {steady['ttft_p50_ms_error_pct'].abs().median():.1f}%, "
              f"TTFT p95 {steady['ttft_p95_ms_error_pct'].abs().median():.1f}%, "
              f"TPOT p50 {steady['tpot_p50_ms_error_pct'].abs().median():.1f}% (TTFT per request {steady['ttft_request_error_pct'].abs().median():.1f}%)"
              + (f"; of them steady loops (8 requests per client) {int(loops['within_targets'].sum())}/{len(loops)}" if len(loops) else "")
              + (f"; not scored: {', '.join(f'{n} ({st})' for n, st in zip(other['load'], other['status']))}" if len(other) else ""))
    print_repeats(load_repeats(setups))
    if a.csv:
        df.to_csv(a.csv, index=False)
        print(f"wrote {a.csv}")
    return 0


def print_repeats(reps) -> None:
    """The engine against itself: loads that two engine starts served alike (measure/validate/engine_repeats.py)."""
    if not reps:
        return
    print("\nthe engine against itself: one load, the same requests, in separate engine starts of one setup; step ms: median "
          "front-end gap of its steps within / past the largest CUDA graph (n steps); cold: first-use compilations took more "
          f"than {COLD_SHARE:.0%} of its time (the warm-up always: steps only)")
    print(f"{'mode':9} {'setup':9} {'load':12} {'run (engine start)':40} {'started':16} {'status':6} | {'tok/s':>6} {'TTFT50':>7} {'TPOT50':>7} | "
          f"{'graphed ms':>10} {'n':>4} {'eager ms':>9} {'n':>4}")
    for r in sorted(reps, key=lambda r: (r.mode, r.setup, r.load)):
        warm = r.load == "warmup"  # its first-use compilations make its latencies no steady state: steps only
        for s in r.starts:
            lat = "" if warm else f"{fmt(s.tok_s):>6} {fmt(s.ttft_p50_ms):>7} {fmt(s.tpot_p50_ms, 2):>7}"
            cold = "cold" if s.stall_s > COLD_SHARE * s.duration_s else "steady"
            print(f"{r.mode:9} {r.setup:9} {r.load:12} {s.run:40} {s.started_at[:16]:16} {cold:6} | {lat:>22} | {fmt(s.graphed_step_ms, 1):>10} "
                  f"{s.graphed_steps:>4} {fmt(s.eager_step_ms, 1):>9} {s.eager_steps:>4}")
        figs = () if warm else (("tok/s", "tok_s"), ("TTFT p50", "ttft_p50_ms"), ("TPOT p50", "tpot_p50_ms"))
        print(f"{'':9} {'':9} {'':12} spread (largest / smallest - 1): "
              + ", ".join(f"{n} {fmt(r.spread_pct(f), 1)}%" for n, f in (*figs, ("graphed steps", "graphed_step_ms"), ("eager steps", "eager_step_ms"))))


if __name__ == "__main__":
    raise SystemExit(main())
