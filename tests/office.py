"""LibreOffice headless for the workbook tests: recalculate a workbook as a spreadsheet program
does and read back what its formulas give. `make test` installs LibreOffice (Makefile: the
`$(VENV)/.browsers` stamp), so its absence fails with one line saying how to install it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

INSTALL = "apt-get install -y libreoffice-calc-nogui (`make test` does it when run as root)"


def soffice() -> str:
    path = shutil.which("soffice")
    if path is None:
        pytest.fail(f"LibreOffice (soffice) is not installed: {INSTALL}")
    return path


def convert(src: Path, out_dir: Path, to: str = "xlsx:Calc MS Excel 2007 XML") -> Path:
    """`soffice --convert-to`: LibreOffice opens `src`, recalculates every formula (the workbook asks
    for a full calculation on load) and saves it as `to` in out_dir; returns the written file."""
    env = {**os.environ, "HOME": str(out_dir / ".home")}  # a profile of its own: parallel workers do not share one
    run = subprocess.run([soffice(), "--headless", "--norestore", "--convert-to", to, "--outdir", str(out_dir), str(src)],
                         capture_output=True, text=True, timeout=180, env=env)
    assert run.returncode == 0, run.stderr
    out = out_dir / f"{src.stem}.{to.split(':')[0]}"
    assert out.is_file(), f"soffice wrote nothing: {run.stdout} {run.stderr}"
    return out


def recalculated(src: Path, out_dir: Path) -> Path:
    """The workbook as LibreOffice recalculates and saves it (cached values are LibreOffice's)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return convert(src, out_dir)


def set_price(src: Path, dst: Path, hardware: str, usd: float) -> Path:
    """A copy of a budget workbook with one GPU's hourly price edited in its Prices sheet (column C), as a
    planner edits it; the workbook's own formulas recompute the rest once recalculated."""
    import openpyxl

    wb = openpyxl.load_workbook(src)
    ws = wb["Prices"]
    row = next(r for r in range(2, ws.max_row + 1) if ws[f"A{r}"].value == hardware)
    ws[f"C{row}"] = usd
    wb.save(dst)
    return dst
