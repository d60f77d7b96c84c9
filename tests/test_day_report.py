"""The day as a finance artefact (issue 38 item 3): `plan --load-curve -o DAYDIR` is an output set;
`costmodel report DAYDIR` writes the answer-first HTML and the budget workbook; plan's options work
with the day or are refused with one line; request counts are the real day's; fleets missing the SLO
come last, marked; a winner resting on a projected GPU profile says so."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from openpyxl import load_workbook

from costmodel.errors import UserError
from costmodel.schemas.day import DayRecord, MonthBill, bill_order, read_day
from costmodel.shipped import shipped_profiles
from costmodel.costing.day_answer import answer
from reports.day_html import render_day

DAY = ["plan", "--load-curve", "flat:6,hours=0.1", "--slo", "p95_ttft_ms<=1000,p95_e2e_ms<=8000", "--mode", "mtp",
       "--hardware", "h100-sxm,rtx-5090", "--jobs", "1", "--duration", "30"]


def test_the_day_is_an_output_set_and_reports_answer_first(cli, tmp_path):
    out = tmp_path / "day"
    code, text, err = cli(*DAY, "-o", str(out))
    assert code == 0, err
    assert (out / "outputs.manifest.json").is_file()  # manifested, published whole
    assert "projected rtx-5090 profile" in text  # the console's answer names the projection it rests on
    month = pd.read_csv(out / "month.csv", keep_default_na=False)
    assert month["answer"].tolist()[0] == "cheapest" and set(month["answer"].tolist()[1:]) == {""}  # one winner, named
    # the real requests (not 1/compress of them), the 6-minute span scaled to a day as the month scales it (not per 6 minutes)
    assert month.requests_per_day.iloc[0] == pytest.approx(6 * 86400, rel=0.1)
    # (float: a fleet listed as not simulated, simulate/plan/day_bounds.py, leaves its figures empty)
    assert float(month.cost_usd_per_month.iloc[0]) == pytest.approx(float(month.cost_usd_per_day.iloc[0]) * 365.25 / 12)

    code, text, err = cli("report", str(out), "-o", str(tmp_path / "day.html"))
    assert code == 0, err
    page = (tmp_path / "day.html").read_text()
    answer = page.index('id="decision"')
    assert answer < page.index("The fleet hour by hour") and answer < page.index("The month's bills")  # the answer first
    assert "rests on a projection" in page and "Price sensitivity" in page and "Pricing models" in page
    assert "The load covers 0.1 h, not a whole day: its per-day figures (requests, GPU-hours, energy, USD) are scaled to 24 h" in page

    code, text, err = cli("report", str(out), "-o", str(tmp_path / "day.xlsx"), "--pricing", "reserved-1y")
    assert code == 0, err
    wb = load_workbook(tmp_path / "day.xlsx")
    assert wb.sheetnames[:4] == ["Summary", "Month", "Hours", "Prices"]
    assert wb["Summary"]["A1"].value.startswith("The answer") and "Cheapest fleet" in wb["Summary"]["B1"].value
    assert wb["Prices"]["B3"].value == "reserved-1y" and str(wb["Month"]["P2"].value).startswith("=")
    assert wb["Month"]["E2"].value is True  # a real boolean


def test_a_changed_file_is_refused_by_the_report(cli, tmp_path):
    out = tmp_path / "day"
    code, _, err = cli(*DAY[:-6], "--hardware", "h100-sxm", "--jobs", "1", "--duration", "30", "-o", str(out))
    assert code == 0, err
    assert read_day(out).bills
    doc = json.loads((out / "day.json").read_text())
    doc["slo"] = "p95_ttft_ms<=1"
    (out / "day.json").write_text(json.dumps(doc))
    with pytest.raises(UserError, match="does not match its manifest"):
        read_day(out)


@pytest.mark.parametrize("args, needle", [
    (["--seeds", "3"], "--seeds does not apply with --load-curve"),
    (["--sensitivity"], "--sensitivity does not apply with --load-curve"),
    (["--prefix-caching", "on,off"], "a day runs one engine"),
    (["--pricing", "onprem", "--purchase-usd", "h200=1"], "not among the GPUs"),
])
def test_plan_options_with_a_day_work_or_are_refused_in_one_line(cli, tmp_path, args, needle):
    code, out, err = cli(*DAY, *args, "-o", str(tmp_path / "x"))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_pricing_and_profile_apply_to_the_day(cli, tmp_path):
    base = ["plan", "--load-curve", "flat:4,hours=0.05", "--mode", "mtp", "--jobs", "1", "--duration", "30"]
    code, _, err = cli(*base, "--hardware", "h100-sxm", "-o", str(tmp_path / "od"))
    assert code == 0, err
    code, _, err = cli(*base, "--profile", str(shipped_profiles()["h100-sxm"]), "--pricing", "reserved-1y", "--prefix-caching", "off",
                       "-o", str(tmp_path / "r1"))
    assert code == 0, err
    od, r1 = (json.loads((tmp_path / d / "day.json").read_text()) for d in ("od", "r1"))
    assert r1["pricing"]["model"] == "reserved-1y" and r1["settings"]["engine"] == {"enable_prefix_caching": False}
    assert r1["settings"]["profiles"]["h100-sxm"].endswith(".json")
    assert r1["bills"][0]["cost_usd_per_month"] < od["bills"][0]["cost_usd_per_month"]  # the 1-year discount


def _bill(hw, cost, hours_ok, note=""):
    return MonthBill(hw, "mtp", "autoscaled", "request-rate", 1, 2, 1000, 0, hours_ok / 24, hours_ok, 24, 30.0, 10.0, cost / 30, cost, 300.0,
                     note=note)


def test_fleets_missing_the_slo_come_after_those_meeting_it_and_are_marked():
    cheap_miss, dear_ok, none = _bill("rtx-5090", 100.0, 20), _bill("h100-sxm", 500.0, 24), _bill("h200", float("nan"), 0, note="no fleet")
    assert sorted([none, cheap_miss, dear_ok], key=bill_order) == [dear_ok, cheap_miss, none]
    day = DayRecord(Path("day"), sorted([none, cheap_miss, dear_ok], key=bill_order), pd.DataFrame(),
                    {"profiles": {}, "prices": {}, "hardware_specs": {}, "pricing": {}, "load": "flat 3 QPS", "slo": "p95_ttft_ms<=500"})
    assert answer(day).winner is dear_ok  # never the cheaper fleet that misses the SLO
    page = render_day(day)
    assert page.index("h100-sxm / mtp") < page.index("rtx-5090 / mtp") and "NO: 20/24 hours" in page


def test_a_day_whose_two_best_fleets_cost_the_same_is_a_tie():
    """Two (GPU, mode) fleets within the plan's 1% cost the same: the answer says tie and names both."""
    from costmodel.schemas.day import MonthBill
    from costmodel.costing.day_answer import DayAnswer

    def bill(mode: str, usd: float) -> MonthBill:
        return MonthBill("gpu-a", mode, "autoscaled", "target", 1, 2, 100, 0, 1.0, 24, 24, 30.0, 10.0, 70.0, usd, 300.0)

    a, b = bill("m1", 1102.0), bill("m2", 1105.0)
    tie = DayAnswer(a, "1-2 x gpu-a, m1", "measured pass timings", False, b, "1-2 x gpu-a, m2")
    assert tie.tie and tie.text.startswith("A tie") and "1-2 x gpu-a, m1 = 1-2 x gpu-a, m2" in tie.text and "no winner" in tie.text
    won = DayAnswer(a, "1-2 x gpu-a, m1", "measured pass timings", False, bill("m2", 1300.0), "1-2 x gpu-a, m2")
    assert not won.tie and "runner-up 1-2 x gpu-a, m2 costs $198/month more" in won.text
