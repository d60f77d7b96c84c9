"""The day's budget workbook (issue 48 item 4): every formula carries its value (pandas reads the
costs and the winner as numbers and text without a spreadsheet program), and a real spreadsheet
engine (LibreOffice headless) recalculating it after a price edit gives the new winner (or tie) and
totals. Runs in `make test` (which installs LibreOffice), never skipped."""

from __future__ import annotations

import openpyxl
import pandas as pd
import pytest

from office import recalculated, set_price

# --every-fleet: a price edit may make any fleet the winner, so none is left unsimulated for its cost floor
DAY = ["plan", "--load-curve", "flat:6,hours=0.1", "--slo", "p95_ttft_ms<=1000,p95_e2e_ms<=8000", "--jobs", "1", "--duration", "30", "--every-fleet"]
DAYS_PER_MONTH = 365.25 / 12


def _workbook(cli, tmp_path, modes: str):
    out = tmp_path / "day"
    code, _, err = cli(*DAY, "--mode", modes, "--hardware", "h100-sxm,rtx-5090", "-o", str(out))
    assert code == 0, err
    code, _, err = cli("report", str(out), "-o", str(tmp_path / "day.xlsx"))
    assert code == 0, err
    return tmp_path / "day.xlsx"


@pytest.fixture
def one_winner(cli, tmp_path):
    return _workbook(cli, tmp_path, "mtp")  # one RTX 5090 beats one H100: a winner


@pytest.fixture
def a_tie(cli, tmp_path):
    return _workbook(cli, tmp_path, "ar,mtp")  # AR and MTP each on one GPU: the same monthly cost, a tie


def _summary(path) -> dict:
    """The Summary's 'at these prices' row, by its header (the row under the header naming it)."""
    ws = openpyxl.load_workbook(path, data_only=True)["Summary"]
    rows = list(ws.iter_rows(values_only=True))
    i = next(k for k, r in enumerate(rows) if r[0] == "Cheapest fleet meeting the SLO every hour at these prices")
    return dict(zip(rows[i], rows[i + 1]))


def test_pandas_reads_the_shipped_workbooks_costs_as_numbers(one_winner):
    month = pd.read_excel(one_winner, sheet_name="Month")
    for col in ("USD per day", "USD per month", "USD per year"):
        assert pd.api.types.is_float_dtype(month[col]) and month[col].notna().all(), col
    assert month["USD per month"].tolist() == pytest.approx(month["USD per month (as simulated)"].tolist(), rel=1e-6)
    assert month["USD per month"].tolist() == pytest.approx((month["USD per day"] * DAYS_PER_MONTH).tolist())
    hours = pd.read_excel(one_winner, sheet_name="Hours")
    assert pd.api.types.is_float_dtype(hours["USD at these prices"]) and hours["USD at these prices"].notna().all()
    s = _summary(one_winner)
    assert s["Cheapest fleet meeting the SLO every hour at these prices"] == "rtx-5090 / mtp / autoscaled"
    assert s["USD per month"] == pytest.approx(month["USD per month"].min()) and s["USD per year"] == pytest.approx(s["USD per month"] * 12)


def test_libreoffice_recalculates_the_same_answer(one_winner, tmp_path):
    calc = recalculated(one_winner, tmp_path / "calc")
    cached, again = _summary(one_winner), _summary(calc)
    assert again["Cheapest fleet meeting the SLO every hour at these prices"] == cached["Cheapest fleet meeting the SLO every hour at these prices"]
    assert again["USD per month"] == pytest.approx(cached["USD per month"]) and again["USD per year"] == pytest.approx(cached["USD per year"])
    assert "#" not in str(again.values())  # no #N/A, #VALUE!


def test_a_price_edit_recalculated_gives_the_new_winner_and_totals(one_winner, tmp_path):
    set_price(one_winner, tmp_path / "edited.xlsx", "rtx-5090", 10.0)
    calc = recalculated(tmp_path / "edited.xlsx", tmp_path / "calc")
    s = _summary(calc)
    assert s["Cheapest fleet meeting the SLO every hour at these prices"] == "h100-sxm / mtp / autoscaled"  # $10/h: the H100 wins now
    month = pd.read_excel(calc, sheet_name="Month").set_index("fleet")
    rtx = month.loc["rtx-5090 / mtp / autoscaled"]
    assert rtx["USD per month"] == pytest.approx(rtx["billed GPU-hours per day"] * 10.0 * DAYS_PER_MONTH)
    assert s["USD per month"] == pytest.approx(month.loc["h100-sxm / mtp / autoscaled", "USD per month"])
    assert s["USD per year"] == pytest.approx(s["USD per month"] * 12)


def test_a_tie_is_named_not_picked_and_an_edit_can_break_it(a_tie, tmp_path):
    s = _summary(a_tie)
    assert s["Cheapest fleet meeting the SLO every hour at these prices"].startswith("tie")
    assert "rtx-5090 / ar / autoscaled = rtx-5090 / mtp / autoscaled" in s["Cheapest fleet meeting the SLO every hour at these prices"]
    assert s["fleets of other GPUs or modes tied with it (within 1%, or intervals overlapping)"] == 1
    again = _summary(recalculated(a_tie, tmp_path / "calc"))
    assert again["Cheapest fleet meeting the SLO every hour at these prices"] == s["Cheapest fleet meeting the SLO every hour at these prices"]
    set_price(a_tie, tmp_path / "edited.xlsx", "rtx-5090", 10.0)  # the RTX 5090s out: the H100's AR and MTP tie instead
    edited = _summary(recalculated(tmp_path / "edited.xlsx", tmp_path / "calc2"))
    assert edited["Cheapest fleet meeting the SLO every hour at these prices"].endswith("h100-sxm / ar / autoscaled = h100-sxm / mtp / autoscaled")
    assert edited["USD per month"] == pytest.approx(pd.read_excel(a_tie, sheet_name="Month").set_index("fleet").loc[
        "h100-sxm / ar / autoscaled", "USD per month"])
