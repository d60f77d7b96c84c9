"""The day's answers with their intervals (issue 48): each hour's SLO verdict rests on 95% batch-means
intervals (pass, fail, or borderline: never a clean pass or fail where the interval straddles the
bound); a peak fleet whose smaller counts are borderline gives each bill a cost interval (a second
day from the fewest replicas not settled to miss); where two fleets' intervals overlap the answer is
a tie; the answer ends with the engine model's held-out error."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import openpyxl
import pandas as pd
import pytest

from office import recalculated

from costmodel.costing.day_answer import DayAnswer, answer, answer_column, cheapest
from costmodel.schemas.day import DayRecord, MonthBill, bill_order
from simulate.cluster.outcome import RequestBound, batch_interval, hour_verdict
from simulate.plan import day as day_mod

TTFT = RequestBound("p95", "ttft", 1000.0)


def test_an_hour_far_below_its_bound_passes_and_one_at_it_is_borderline():
    rng = np.random.default_rng(0)
    far = rng.exponential(200.0, 5000)  # p95 ~600 ms against 1000
    lo, hi = batch_interval(far, "p95", 1000.0)
    assert lo < np.percentile(far, 95) < hi < 1000.0
    assert hour_verdict({"ttft_ms_p95": float(np.percentile(far, 95))}, {"ttft_ms_p95_ci95_low": lo, "ttft_ms_p95_ci95_high": hi},
                        [TTFT], True, 0.5, None) == ("pass", "")
    at = far * 1000.0 / np.percentile(far, 95)  # its p95 on the bound: too close to call
    lo, hi = batch_interval(at, "p95", 1000.0)
    status, why = hour_verdict({"ttft_ms_p95": 1000.0}, {"ttft_ms_p95_ci95_low": lo, "ttft_ms_p95_ci95_high": hi}, [TTFT], True, 0.5, None)
    assert status == "borderline" and "straddles 1000" in why
    far_above = far * 3
    lo, hi = batch_interval(far_above, "p95", 1000.0)
    assert hour_verdict({"ttft_ms_p95": 1800.0}, {"ttft_ms_p95_ci95_low": lo, "ttft_ms_p95_ci95_high": hi}, [TTFT], False, 0.5, None)[0] == "fail"


def test_too_few_requests_for_two_batches_have_no_interval():
    assert all(math.isnan(x) for x in batch_interval(np.ones(30), "p95", 1000.0))


def _bill(hw, mode, cost, low=float("nan"), hours_borderline=0, borderline=""):
    return MonthBill(hw, mode, "autoscaled", "request-rate", 1, 2, 1000, 0, 1.0, 24, 24, 30.0, 10.0, cost / 30, cost, 300.0,
                     hours_borderline=hours_borderline, borderline=borderline, cost_usd_per_month_low=low)


def _day(bills, profiles=None, slo="p95_ttft_ms<=1000,max_utilisation<=0.8"):
    return DayRecord(Path("day"), sorted(bills, key=bill_order), pd.DataFrame(),
                     {"profiles": profiles or {}, "prices": {}, "hardware_specs": {}, "pricing": {}, "load": "flat 3 QPS", "slo": slo})


def test_overlapping_cost_intervals_are_a_tie_everywhere():
    a, b = _bill("gpu-a", "mtp", 1000.0), _bill("gpu-b", "ar", 1300.0, low=900.0)  # b's interval reaches below a's cost
    assert [x.mode for x in cheapest([a, b])] == ["mtp", "ar"] and answer_column([a, b]) == ["tie", "tie"]
    text = answer(_day([a, b])).text
    assert text.startswith("A tie") and "overlapping 95% intervals: no winner" in text
    c = _bill("gpu-b", "ar", 1300.0, low=1200.0)  # apart: a winner, with the runner-up's margin
    assert answer_column([a, c]) == ["cheapest", ""]
    assert "runner-up 1-2 x gpu-b, ar, autoscaled costs $300/month more" in answer(_day([a, c])).text


def test_the_winners_interval_borderline_hours_and_held_out_error_are_in_the_line():
    w = _bill("gpu-a", "mtp", 1000.0, low=800.0, hours_borderline=1, borderline="hour 14: ttft_ms_p95 ... straddles 1000")
    prov = {"gpu-a": {"heldout_error": {"figures": {"p95_ttft_ms": {"median_pct": -8.0, "worst_pct": -22.0, "n_loads": 6}}}}}
    a = answer(_day([w, _bill("gpu-b", "ar", 2000.0)], prov))
    assert isinstance(a, DayAnswer) and a.interval and not a.tie
    assert "$1,000/month ($12,000/year), 95% interval $800-1,000/month (fewer replicas at the peak are borderline)" in a.text
    assert "borderline in 1 of 24 hours (hour 14:" in a.text
    assert a.text.endswith("engine model's held-out p95 TTFT error: gpu-a median -8%, worst -22% (6 loads).")


def test_a_borderline_peak_gives_every_bill_a_cost_interval(monkeypatch, cli, tmp_path):
    """The peak search found 2 replicas settled and 1 borderline: each policy's day runs again from 1,
    the low end of its cost's interval, in month.csv, the workbook and the answer."""
    real = day_mod._peak_search

    def borderline_peak(cfg, lc, slo, workload, say, **kw):
        out = real(cfg, lc, slo, workload, say, **kw)
        return {k: (n + 1, lc.peak_qps / (n + 1), n) for k, (n, _, _) in out.items()}  # one more settled; the search's count borderline

    monkeypatch.setattr(day_mod, "_peak_search", borderline_peak)
    code, text, err = cli("plan", "--load-curve", "flat:6,hours=0.1", "--slo", "p95_ttft_ms<=1000,p95_e2e_ms<=8000", "--hardware", "rtx-5090",
                          "--mode", "mtp", "--duration", "30", "--jobs", "1", "-o", str(tmp_path / "day"))
    assert code == 0, err
    assert "(fewer replicas at the peak are borderline)" in text.splitlines()[-1]  # the console's answer line
    static = next(b for b in day_mod_read(tmp_path / "day").bills if b.policy == "static")
    assert static.replicas_peak == static.replicas_peak_low + 1 and static.replicas_max_low == static.replicas_peak_low
    assert static.cost_usd_per_month_low == pytest.approx(static.cost_usd_per_month * static.replicas_peak_low / static.replicas_peak)
    assert "borderline (settled pass at" in static.borderline and static.slo_verdict == "borderline"
    month = pd.read_csv(tmp_path / "day" / "month.csv")
    assert (month.cost_usd_per_month_low < month.cost_usd_per_month).all() and set(month.slo_verdict) == {"borderline"}
    assert "95% interval $" in answer(day_mod_read(tmp_path / "day")).text
    code, _, err = cli("report", str(tmp_path / "day"), "-o", str(tmp_path / "day.xlsx"))
    assert code == 0, err
    m = pd.read_excel(tmp_path / "day.xlsx", sheet_name="Month")
    assert (m["USD per month, 95% interval low end"] < m["USD per month"]).all()
    ws = openpyxl.load_workbook(tmp_path / "day.xlsx")["Month"]
    assert str(ws["Y2"].value).startswith("=MIN(P2,")  # the low end recomputed from Prices, as the cost is
    calc = pd.read_excel(recalculated(tmp_path / "day.xlsx", tmp_path / "calc"), sheet_name="Month")  # LibreOffice agrees with the stored values
    assert calc["USD per month, 95% interval low end"].tolist() == pytest.approx(m["USD per month, 95% interval low end"].tolist())


def day_mod_read(path):
    from costmodel.schemas.day import read_day

    return read_day(path)


def test_the_headroom_term_is_judged_on_its_sub_windows_interval(tmp_path):
    """With max_utilisation in the SLO the fleet samples its counters ten times an interval; the
    hour's utilisation interval decides (here wholly below 0.5: a pass), and day.csv carries it."""
    util = {"utilisation_ci95_low": 0.45, "utilisation_ci95_high": 0.55}
    status, why = hour_verdict({}, util, [], True, 0.49, 0.5)
    assert status == "borderline" and "utilisation 95% batch-means interval 0.45-0.55 straddles 0.5" in why
    assert hour_verdict({}, {"utilisation_ci95_low": 0.6, "utilisation_ci95_high": 0.7}, [], False, 0.65, 0.5)[0] == "fail"
    cfg = day_mod.DayConfig(load="flat:6,hours=0.2", slo="p95_ttft_ms<=1000,max_utilisation<=0.5", hardware=["rtx-5090"], modes=["mtp"],
                            duration_s=30, jobs=1)
    out = day_mod.run_day(cfg)
    day_mod.write_day(out, tmp_path / "day")
    hours = pd.read_csv(tmp_path / "day" / "day.csv")
    assert (hours.utilisation_ci95_low <= hours.utilisation).all() and (hours.utilisation <= hours.utilisation_ci95_high).all()
    assert (hours.utilisation_ci95_high < 0.5).all() and set(hours.slo_verdict) == {"pass"}
