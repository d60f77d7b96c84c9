"""Ties named everywhere one option would otherwise be picked (issue 48 item 3), on a day whose AR and
MTP fleets each need one RTX 5090 (the same monthly cost): the HTML page as Chromium draws it
highlights no single row, its 'cheapest per model' list and price sensitivity name the tie, the
CSV marks every tied fleet. Chromium is installed by `make test`; its absence fails, never skips."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.browser_check import check_html, find_chromium

DAY = ["plan", "--load-curve", "flat:6,hours=0.1", "--slo", "p95_ttft_ms<=1000,p95_e2e_ms<=8000", "--jobs", "1", "--duration", "30",
       "--hardware", "h100-sxm,rtx-5090"]
TIE = "tie: rtx-5090 / ar / autoscaled = rtx-5090 / mtp / autoscaled"


@pytest.fixture
def tied_day(cli, tmp_path):
    out = tmp_path / "day"
    code, text, err = cli(*DAY, "--mode", "ar,mtp", "-o", str(out))
    assert code == 0, err
    assert text.strip().splitlines()[-1].startswith("A tie")  # the answer line says tie
    return out


def test_the_day_page_highlights_no_single_row_in_a_tie(cli, tied_day, tmp_path):
    if find_chromium() is None:
        pytest.fail("chromium is not installed: apt-get install -y chromium (`make test` does it when run as root)")
    page = tmp_path / "day.html"
    code, _, err = cli("report", str(tied_day), "-o", str(page))
    assert code == 0, err
    res = check_html(page)
    assert res.ok, res.problems  # the hour-by-hour chart renders, no page error, nothing fetched
    marked = [(r["kind"], r["cells"][0]) for r in res.highlighted]
    assert marked == [("tie", "rtx-5090 / ar / autoscaled"), ("tie", "rtx-5090 / mtp / autoscaled")]  # both drawn as a tie, no winner
    html = page.read_text()
    assert f"<li>on-demand: {TIE}</li>" in html  # the cheapest per pricing model: the tie, not one of it


def test_month_csv_names_the_tie(tied_day):
    month = pd.read_csv(tied_day / "month.csv", keep_default_na=False)
    assert month[month["answer"] != ""][["hardware", "mode", "policy", "answer"]].values.tolist() == [
        ["rtx-5090", "ar", "autoscaled", "tie"], ["rtx-5090", "mtp", "autoscaled", "tie"]]


def test_the_day_csv_and_sensitivity_name_the_tie(cli, tied_day, tmp_path):
    code, _, err = cli("report", str(tied_day), "-o", str(tmp_path / "bills.csv"))
    assert code == 0, err
    bills = pd.read_csv(tmp_path / "bills.csv", keep_default_na=False)
    assert bills.set_index(["hardware", "mode", "policy"])["answer"].to_dict() == {
        **{(h, m, p): "" for h in ("h100-sxm", "rtx-5090") for m in ("ar", "mtp") for p in ("autoscaled", "static")},
        ("rtx-5090", "ar", "autoscaled"): "tie", ("rtx-5090", "mtp", "autoscaled"): "tie"}
    assert "answer" in pd.read_csv(tmp_path / "bills.dictionary.csv")["column"].tolist()

    from costmodel.schemas.day import read_day
    from reports.day import price_sensitivity

    sens = price_sensitivity(read_day(tied_day)).set_index("input")
    assert sens.loc["h100-sxm USD per GPU-hour", "winner_at_low"] == TIE  # the H100's low price does not undercut one RTX 5090
    assert sens.loc["h100-sxm USD per GPU-hour", "winner_changes_at"] == "no"
