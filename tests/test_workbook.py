"""The budget workbook: its sheets, every input with a basis and a source, and formulas that
recompute the totals (and the winner) when a price cell changes: evaluated by the `formulas`
package and by LibreOffice headless, which also opens it (PDF)."""

import csv
import os
import subprocess

import openpyxl
import pandas as pd
import pytest

import office
from test_reports_fakes import toy_point


@pytest.fixture
def budget(cli, tmp_path, toy_simulator):

    toy_simulator(lambda profile, duration_s, seed, workload=None, miss_bounds=(), engine=None: toy_point)
    out = tmp_path / "plan"
    assert cli("plan", "--qps", "2,10", "--hardware", "h200,rtx-5090", "--mode", "diffusion,ar", "--jobs", "1", "-o", str(out))[0] == 0
    code, _, err = cli("report", str(out), "-o", str(tmp_path / "budget.xlsx"))
    assert code == 0, err
    return tmp_path / "budget.xlsx"


def _fleet(wb):
    ws = wb["Fleet"]
    head = [c.value for c in ws[1]]
    return [dict(zip(head, (c.value for c in row))) for row in ws.iter_rows(min_row=2)]


def test_the_sheets_and_their_inputs(budget):
    wb = openpyxl.load_workbook(budget)
    assert wb.sheetnames == ["Summary", "Fleet", "Assumptions", "Prices"]
    assert {r[0].value for r in wb["Assumptions"].iter_rows(min_row=2)} <= {"measured", "prior", "projected"}
    assert all(r[4].value for r in wb["Assumptions"].iter_rows(min_row=2))  # a source per input
    fleet = _fleet(wb)
    assert all(str(r["USD per month"]).startswith("=") for r in fleet if r["meets SLO"] is True)
    assert {type(r["meets SLO"]) for r in fleet} == {bool}  # real booleans, not the text "TRUE"
    assert wb["Prices"]["I2"].value.startswith("=")  # the effective rate is a formula of the editable cells


def test_a_price_change_recomputes_the_totals(budget, tmp_path):
    import formulas  # the `dev` extra
    office.set_price(budget, tmp_path / "changed.xlsx", "rtx-5090", 10.0)
    sol = formulas.ExcelModel().loads(str(tmp_path / "changed.xlsx")).finish().calculate()
    cell = {k.split("]")[1].upper(): v.value[0][0] for k, v in sol.items() if hasattr(v, "value")}
    fleet = _fleet(openpyxl.load_workbook(tmp_path / "changed.xlsx"))
    for i, r in enumerate(fleet, start=2):
        if r["meets SLO"] is True and r["GPU"] == "rtx-5090":
            assert cell[f"FLEET'!J{i}"] == pytest.approx(r["GPUs"] * 10.0 * 730)  # GPUs x the new price x 730 h
    assert "h200" in cell["SUMMARY'!B2"]  # at $10/h the RTX 5090 no longer wins: the winner recomputes too
    assert cell["SUMMARY'!D2"] == pytest.approx(cell["SUMMARY'!C2"] * 12)


def test_libreoffice_opens_and_recomputes_it(budget, tmp_path):
    soffice = office.soffice()  # `make test` installs LibreOffice: its absence fails, never skips
    office.set_price(budget, tmp_path / "changed.xlsx", "rtx-5090", 10.0)
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    run = lambda *a: subprocess.run([soffice, "--headless", "--norestore", *a], capture_output=True, text=True, timeout=120, env=env)
    assert run("--convert-to", "pdf", "--outdir", str(tmp_path / "pdf"), str(budget)).returncode == 0
    assert (tmp_path / "pdf" / "budget.pdf").stat().st_size > 5000
    # every sheet as CSV, formulas recomputed by Calc: sheet index 1 (Summary)
    assert run("--convert-to", "csv:Text - txt - csv (StarCalc):44,34,76,1,,0,false,true,false,false,false,1", "--outdir", str(tmp_path / "csv"),
               str(tmp_path / "changed.xlsx")).returncode == 0
    summary = list(csv.reader(next((tmp_path / "csv").glob("*.csv")).read_text().splitlines()))
    # recomputed at $10/h: no RTX 5090, and the H200's two modes tie (the same fleet of H200s), named whole
    assert summary[1][1] == "tie (the same monthly cost, no winner): 1 x h200 (fp8), diffusion = 1 x h200 (fp8), ar", summary[1]


def test_an_unwritable_workbook_path_is_one_line(cli, tmp_path, budget):
    code, _, err = cli("report", str(budget.parent / "plan"), "-o", str(budget / "x.xlsx"))  # under a file: cannot be written
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert openpyxl.load_workbook(budget).sheetnames[0] == "Summary"  # what was written stays


def _planned(plan_dir):
    """The plan's answer per QPS as plan.json records it: the cheapest option and every option tied with it."""
    import json

    doc = json.loads((plan_dir / "plan.json").read_text())
    return {r["qps"]: {f"{r['hardware']}, {r['mode']}"} | {x.replace(" / ", ", ") for x in r["tied_with"].split(", ") if x}
            for r in doc["results"]["cheapest"] if not r["none_meets"]}


def _option(text: str) -> str:
    """'3 x rtx-5090 (int4), diffusion' -> 'rtx-5090, diffusion'."""
    gpus_hw, mode = text.rsplit(", ", 1)
    return f"{gpus_hw.split(' x ', 1)[1].split(' (')[0]}, {mode}"


def test_pandas_reads_numbers_and_the_plans_winner_without_a_spreadsheet_program(budget):
    summary = pd.read_excel(budget, sheet_name="Summary", nrows=2)
    fleet = pd.read_excel(budget, sheet_name="Fleet")
    assert fleet["meets SLO"].dtype == bool and pd.api.types.is_float_dtype(fleet["USD per month"])
    ok = fleet[fleet["meets SLO"]]
    prices = pd.read_excel(budget, sheet_name="Prices", nrows=2).set_index("GPU")["effective USD per GPU-hour"]
    assert ok["USD per month"].tolist() == pytest.approx((ok["GPUs"] * ok["GPU"].map(prices) * 730).tolist())  # no electricity on rentals
    planned = _planned(budget.parent / "plan")
    for r in summary.to_dict("records"):
        named = r["cheapest fleet at these prices"]
        if named.startswith("tie"):  # a tie is named whole, as the plan names it
            assert {_option(x) for x in named.split(": ", 1)[1].split(" = ")} == planned[r["QPS"]]
        else:
            assert {_option(named)} == planned[r["QPS"]]  # the plan's winner
        assert r["USD per month"] == pytest.approx(ok[ok["QPS"] == r["QPS"]]["USD per month"].min())
        assert bool(r["tie as planned"]) == (len(planned[r["QPS"]]) > 1) and r["options tied with it (within 1%)"] == len(planned[r["QPS"]]) - 1


def test_libreoffice_recalculation_keeps_the_plans_winner(budget, tmp_path):
    soffice = office.soffice()
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    run = subprocess.run([soffice, "--headless", "--norestore", "--convert-to", "xlsx:Calc MS Excel 2007 XML", "--outdir", str(tmp_path / "calc"),
                          str(budget)], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    recalculated = pd.read_excel(tmp_path / "calc" / "budget.xlsx", sheet_name="Summary", nrows=2)
    cached = pd.read_excel(budget, sheet_name="Summary", nrows=2)
    for col in ("cheapest fleet at these prices", "USD per month", "USD per year", "options tied with it (within 1%)"):
        assert recalculated[col].tolist() == (cached[col].tolist() if cached[col].dtype == object else pytest.approx(cached[col].tolist())), col
