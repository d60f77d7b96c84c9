"""The tables `costmodel validate --engine vllm` (pipeline/validate_vllm.py) prints of the simulator's
re-score of a recorded vLLM validation (simulate/validate/vllm/rescore.py)."""

from __future__ import annotations

from rich.table import Table

from simulate.validate.vllm.score import SCHEDULE_TARGETS


def _fmt(v: float) -> str:
    return f"{v:.4g}" if v == v else "-"


def print_schedule(con, res) -> None:
    """The scheduling model alone: replays with vLLM's own step times (simulate/validate/vllm/replay.py replay_recorded)."""
    t = Table(title=f"Simulator's schedule vs vLLM's, step time held out (targets: >= {SCHEDULE_TARGETS['on_schedule_pct']:g}% of requests "
                    f"on vLLM's schedule, engine steps within {SCHEDULE_TARGETS['engine_steps_abs_err_pct']:g}%)")
    for c in ("mode", "load", "requests", "on vLLM's schedule %", "engine steps vLLM", "simulator", "error %"):
        t.add_column(c)
    for r in res.schedule.itertuples():
        t.add_row(r.mode, r.load, str(r.requests), f"{r.on_schedule_pct:.1f}", str(r.engine_steps), str(r.engine_steps_sim), f"{r.engine_steps_err_pct:+.2f}")
    con.print(t)


def print_scores(con, res) -> None:
    t = Table(title="Simulator vs vLLM's scheduler, per load (engine clock; client_* rows: the client's, with the calibration's front-end time)")
    for c in ("mode", "load", "metric", "vLLM", "simulator", "error %", "target %", "met"):
        t.add_column(c)
    for r in res.scores[res.scores["pricing"] == "calibration"].itertuples():
        met = "" if r.met is None or r.met != r.met else ("yes" if r.met else "NO")
        t.add_row(r.mode, r.load, r.metric, _fmt(r.measured), _fmt(r.predicted), f"{r.rel_error_pct:+.1f}",
                  "" if r.target_pct is None or r.target_pct != r.target_pct else f"{r.target_pct:g}", met)
    con.print(t)
    own = res.scores[(res.scores["pricing"] == "own steps") & res.scores["target_pct"].notna()]
    o = Table(title="Diagnosis: the same replays priced by a fit of each load's own steps (scheduling error alone)")
    for c in ("mode", "load", "metric", "vLLM", "simulator", "error %"):
        o.add_column(c)
    for r in own.itertuples():
        o.add_row(r.mode, r.load, r.metric, _fmt(r.measured), _fmt(r.predicted), f"{r.rel_error_pct:+.1f}")
    con.print(o)
    d = Table(title="Step-cost drift: engine step time in each load vs the calibration's at the same batch composition")
    for c in ("mode", "load", "step time vs calibration %", "steps compared %"):
        d.add_column(c)
    for r in res.drift.itertuples():
        d.add_row(r.mode, r.load, f"{r.step_time_vs_calibration_pct:+.1f}", f"{r.steps_compared_pct:.0f}")
    con.print(d)
    s = Table(title="Per mode: largest |error| below saturation, requests' step indices, schedule, overload check")
    summ = res.summary.set_index("mode")
    s.add_column("quantity")
    for mode in summ.index:
        s.add_column(mode, justify="right")
    for col in summ.columns:  # one row per quantity: the table stays readable however many there are
        s.add_row(col, *[_fmt(v) if isinstance(v, float) else str(v) for v in summ[col]])
    con.print(s)
