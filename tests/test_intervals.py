"""Student-t quantiles (costmodel/intervals.py): scipy's, read from the table scipy wrote where an answer asks
for them, so a plan's replications are judged without importing scipy."""

from __future__ import annotations

import json
import subprocess
import sys

from costmodel import intervals
from costmodel.intervals import TABLE, TABLE_DF, TABLE_LOOKS, scipy_t_quantile, t_interval, t_quantile


def test_the_table_is_scipys_quantiles_to_the_bit():
    doc = json.loads(TABLE.read_text())
    assert doc["confidence"] == intervals.CONFIDENCE
    assert sorted(map(int, doc["quantiles"])) == list(range(1, TABLE_DF + 1))
    for df, row in doc["quantiles"].items():
        assert row == [scipy_t_quantile(int(df), k) for k in range(1, TABLE_LOOKS + 1)], df


def test_a_quantile_outside_the_table_asks_scipy():
    assert t_quantile(TABLE_DF + 80) == scipy_t_quantile(TABLE_DF + 80)
    assert t_quantile(3, TABLE_LOOKS + 4) == scipy_t_quantile(3, TABLE_LOOKS + 4)
    assert t_quantile(1) == 12.706204736174694  # the textbook 12.706 (95%, one degree of freedom)


def test_an_interval_of_two_replications_is_wide():
    lo, hi = t_interval([1.0, 3.0])
    assert (lo, hi) == (2.0 - 12.706204736174694, 2.0 + 12.706204736174694)


def test_the_table_is_rewritten_by_its_command(tmp_path):
    out = intervals.write_table(tmp_path / "t.json")
    assert json.loads(out.read_text()) == json.loads(TABLE.read_text())


def test_judging_replications_loads_no_scipy():
    code = ("import sys\nfrom simulate.plan.settle import _interval\nprint(_interval([900.0, 950.0, 990.0], 1000.0, looks=5))\n"
            "print('scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[1] == "False"
