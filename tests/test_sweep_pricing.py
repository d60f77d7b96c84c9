"""A sweep's results carry cost columns, priced per point (grid.price, pricing) or by
`costmodel sweep --pricing`; bad pricing fails before any simulation."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from costmodel.cli import main
from simulate.parallel import Workers
from simulate.sweep.run import run_sweep
from simulate.sweep.spec import parse_spec

SPEC = {"kind": "simulate", "base": {"hardware": "h200", "mode": "ar", "qps": 1, "duration_s": 8},
        "grid": {"price": [2.0, 4.0], "pricing": ["on-demand", "reserved-1y"]}}


def test_a_price_grid_gives_one_priced_row_per_value(tmp_path, monkeypatch):
    import simulate.sweep.run as run

    calls, real = [], run.run_point
    monkeypatch.setattr(run, "run_point", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    t = run_sweep(parse_spec(SPEC), tmp_path, Workers(workers=1)).table
    assert len(calls) == 1  # four points differing only in price and pricing: one simulation
    assert t["ttft_ms_p95"].nunique() == 1 and t["point_id"].nunique() == 4
    assert list(zip(t["param_price"], t["param_pricing"])) == [(2.0, "on-demand"), (2.0, "reserved-1y"), (4.0, "on-demand"), (4.0, "reserved-1y")]
    assert t["cost_usd_per_hour"].tolist() == pytest.approx([2.0, 1.4, 4.0, 2.8])  # 1 replica; reserved 1 y is 30% off
    assert t["cost_usd_per_month"].tolist() == pytest.approx([x * 730 for x in (2.0, 1.4, 4.0, 2.8)])
    assert list(t["pricing_basis"]) == ["on-demand", "reserved-1y"] * 2
    header = (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    assert {"cost_usd_per_month", "breakeven_usd_per_mtok_input", "breakeven_usd_per_mtok_output"} <= set(header)


def test_sweep_pricing_options(tmp_path, capsys):
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps({"base": {"hardware": "h200", "mode": "ar", "qps": 1, "duration_s": 8}}))
    assert main(["sweep", str(spec), "-o", str(tmp_path / "o"), "--jobs", "1", "--pricing", "spot", "--price", "h200=3"]) == 0
    row = pd.read_csv(tmp_path / "o" / "results.csv").iloc[0]
    assert row["pricing_basis"] == "spot" and row["cost_usd_per_hour"] == pytest.approx(0.9 * 1.5 + 0.1 * 3)
    capsys.readouterr()
    for args, needle in ((["--pricing", "hourly"], "not a pricing model"), (["--price", "rtx-5090=1"], "not among the GPUs"),
                         (["--pricing", "spot", "--term", "spot_discount=0.7"], "--pricing and --price")):
        assert main(["sweep", str(spec), "-o", str(tmp_path / "bad"), "--jobs", "1", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0]
    assert not (tmp_path / "bad").exists()


def test_report_reads_a_sweep(tmp_path, cli):
    spec = parse_spec({"kind": "plan", "base": {"hardware": "h200", "duration_s": 8, "slo": "p95_ttft_ms<=2000"},
                       "grid": {"mode": ["ar", "mtp"], "qps": [1, 2]}})
    run_sweep(spec, tmp_path / "sw", Workers(workers=1))
    for out in ("r.html", "r.csv", "r.xlsx"):
        code, _, err = cli("report", str(tmp_path / "sw"), "-o", str(tmp_path / out), "--pricing", "reserved-3y")
        assert code == 0, err
    fin = pd.read_csv(tmp_path / "r.csv")
    assert len(fin) == 4 and set(fin["pricing_basis"]) == {"reserved-3y"} and fin["slo"].eq("p95_ttft_ms<=2000").all()
    assert "The answer" in (tmp_path / "r.html").read_text()
