"""The budget workbook: its sheets, every input with a basis and a source, and formulas that
recompute the totals (and the winner) when a price cell changes: evaluated by the `formulas`
package and by LibreOffice headless, which also opens it (PDF)."""

import os
import shutil
import subprocess

import openpyxl
import pytest

from test_reports_fakes import toy_point


@pytest.fixture
def budget(cli, tmp_path, monkeypatch):
    import simulate.plan.planner as plan

    monkeypatch.setattr(plan, "simulator_point", lambda profile, duration_s, seed, workload=None, miss_bounds=(), engine=None: toy_point)
    out = tmp_path / "plan"
    assert cli("plan", "--qps", "2,10", "--hardware", "h200,rtx-5090", "--mode", "diffusion,ar", "--jobs", "1", "-o", str(out))[0] == 0
    code, _, err = cli("report", str(out), "-o", str(tmp_path / "budget.xlsx"))
    assert code == 0, err
    return tmp_path / "budget.xlsx"


def _set_price(src, dst, hardware: str, usd: float):
    wb = openpyxl.load_workbook(src)
    ws = wb["Prices"]
    row = next(r for r in range(2, ws.max_row + 1) if ws[f"A{r}"].value == hardware)
    ws[f"C{row}"] = usd
    wb.save(dst)


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
    assert all(str(r["USD per month"]).startswith("=") for r in fleet if r["meets SLO"] == "TRUE")
    assert wb["Prices"]["I2"].value.startswith("=")  # the effective rate is a formula of the editable cells


def test_a_price_change_recomputes_the_totals(budget, tmp_path):
    formulas = pytest.importorskip("formulas")
    _set_price(budget, tmp_path / "changed.xlsx", "rtx-5090", 10.0)
    sol = formulas.ExcelModel().loads(str(tmp_path / "changed.xlsx")).finish().calculate()
    cell = {k.split("]")[1].upper(): v.value[0][0] for k, v in sol.items() if hasattr(v, "value")}
    fleet = _fleet(openpyxl.load_workbook(tmp_path / "changed.xlsx"))
    for i, r in enumerate(fleet, start=2):
        if r["meets SLO"] == "TRUE" and r["GPU"] == "rtx-5090":
            assert cell[f"FLEET'!J{i}"] == pytest.approx(r["GPUs"] * 10.0 * 730)  # GPUs x the new price x 730 h
    assert "h200" in cell["SUMMARY'!B2"]  # at $10/h the RTX 5090 no longer wins: the winner recomputes too
    assert cell["SUMMARY'!D2"] == pytest.approx(cell["SUMMARY'!C2"] * 12)


def test_libreoffice_opens_and_recomputes_it(budget, tmp_path):
    soffice = shutil.which("soffice")
    if soffice is None:
        if os.environ.get("CI"):
            pytest.fail("LibreOffice is missing in CI: .ci/run installs it (apt-get install -y libreoffice-calc-nogui)")
        pytest.skip("LibreOffice is not installed (apt-get install -y libreoffice-calc-nogui)")
    _set_price(budget, tmp_path / "changed.xlsx", "rtx-5090", 10.0)
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    run = lambda *a: subprocess.run([soffice, "--headless", "--norestore", *a], capture_output=True, text=True, timeout=120, env=env)
    assert run("--convert-to", "pdf", "--outdir", str(tmp_path / "pdf"), str(budget)).returncode == 0
    assert (tmp_path / "pdf" / "budget.pdf").stat().st_size > 5000
    # every sheet as CSV, formulas recomputed by Calc: sheet index 1 (Summary)
    assert run("--convert-to", "csv:Text - txt - csv (StarCalc):44,34,76,1,,0,false,true,false,false,false,1", "--outdir", str(tmp_path / "csv"),
               str(tmp_path / "changed.xlsx")).returncode == 0
    summary = next((tmp_path / "csv").glob("*.csv")).read_text().splitlines()
    assert "h200" in summary[1].split(",")[1]


def test_an_unwritable_workbook_path_is_one_line(cli, tmp_path, budget):
    code, _, err = cli("report", str(budget.parent / "plan"), "-o", str(budget / "x.xlsx"))  # under a file: cannot be written
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert openpyxl.load_workbook(budget).sheetnames[0] == "Summary"  # what was written stays
