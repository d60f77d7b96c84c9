"""Cost arithmetic pinned against hand-computed cases (cloud and on-prem), pricing errors, the
finance CSV and its data dictionary."""

import math

import pandas as pd
import pytest

from costmodel.errors import UserError
from costmodel.hardware import get_hardware
from costmodel.schemas.dictionary import describe, dictionary_paths, write_table as write_finance_csv
from costmodel.costing import PricingConfig, add_costs, gpu_price, point_cost
from test_reports_fakes import point, simulate_dir


def test_cloud_cost_by_hand():
    # h200 at --price h200=3.50; 3 replicas, 50% busy, 10 req/s, 2,000 output tok/s, 6,000 total tok/s
    price = gpu_price(get_hardware("h200"), PricingConfig(price_usd_per_gpu_hour={"h200": 3.5}))
    c = point_cost(3, 0.5, 10.0, 2000.0, 6000.0, price)
    assert c.gpus == 3 and c.pricing_basis == "on-demand"
    assert c.cost_usd_per_hour == pytest.approx(10.5)  # 3 x 3.50
    assert c.cost_usd_per_month == pytest.approx(7665.0)  # 10.5 x 730
    assert c.cost_usd_per_mtok_output == pytest.approx(1.4583333333)  # 10.5 / (2000 x 3600) x 1e6
    assert c.cost_usd_per_mtok_total == pytest.approx(0.4861111111)  # 10.5 / (6000 x 3600) x 1e6
    assert c.cost_usd_per_1k_requests == pytest.approx(0.2916666667)  # 10.5 / (10 x 3600) x 1000
    assert c.electricity_usd_per_gpu_hour == 0.0  # rental includes power
    assert c.power_w_per_gpu == pytest.approx(350.0)  # 700 W board x 0.5
    assert c.facility_power_kw == pytest.approx(1.26)  # 3 x 350 W x PUE 1.2
    assert c.energy_kwh_per_mtok_output == pytest.approx(0.175)  # 1.26 kW / (2000 x 3600) x 1e6
    assert "--price h200=3.5" in c.price_source
    # the API price-sheet split: 4,000 input + 4 x 2,000 output token-equivalents/s recover the hourly cost
    assert c.breakeven_usd_per_mtok_input == pytest.approx(10.5 / (12000 * 3600) * 1e6)
    assert c.breakeven_usd_per_mtok_output == pytest.approx(4 * c.breakeven_usd_per_mtok_input)
    assert c.cost_usd_per_year == pytest.approx(10.5 * 8760) and c.upfront_usd == 0


def test_cloud_catalog_default_price_and_source():
    price = gpu_price(get_hardware("h100-sxm"), PricingConfig())
    assert price.rate_usd_per_gpu_hour == 2.95 and "aimultiple" in price.rate_source
    c = point_cost(2, 1.0, 1.0, 100.0, 100.0, price)
    assert c.cost_usd_per_month == pytest.approx(2 * 2.95 * 730)


def test_onprem_cost_by_hand():
    # h200 purchase $36,000 + host $4,000 per GPU (catalog) over 4 years of 8,760 h; 50% busy at 700 W board + 575 W host;
    # $0.08/kWh; PUE 1.2
    cfg = PricingConfig(model="onprem", electricity_usd_per_kwh=0.08, pue=1.2, amortisation_years=4)
    price = gpu_price(get_hardware("h200"), cfg)
    c = point_cost(3, 0.5, 10.0, 2000.0, 6000.0, price)
    assert c.pricing_basis == "onprem"
    assert c.rate_usd_per_gpu_hour == pytest.approx(40000 / 35040)
    assert c.electricity_usd_per_gpu_hour == pytest.approx(0.0888)  # (0.350 + 0.575) kW x 1.2 x 0.08
    assert c.cost_usd_per_hour == pytest.approx(3 * (40000 / 35040 + 0.0888))
    assert c.cost_usd_per_month == pytest.approx(3 * (40000 / 35040 + 0.0888) * 730)
    assert c.upfront_usd == pytest.approx(3 * 40000)
    assert c.energy_kwh_per_mtok_output == pytest.approx(3.33 / 7200 * 1000)  # 3 x 925 W x 1.2


def test_onprem_overrides_and_measured_power():
    cfg = PricingConfig(model="onprem", purchase_usd={"rtx-5090": 2500.0}, electricity_usd_per_kwh=0.12, pue=1.5, amortisation_years=3,
                        active_power_w={"rtx-5090": 400.0}, active_power_source={"rtx-5090": "measured: run x"})
    price = gpu_price(get_hardware("rtx-5090"), cfg)
    c = point_cost(1, 0.25, 1.0, 100.0, 400.0, price)
    rate = (2500 + 2000) / (3 * 8760)  # purchase + the catalog's host share per RTX 5090
    elec = (0.4 * 0.25 + 0.150) * 1.5 * 0.12  # (100 W GPU + 150 W host) x PUE 1.5 x $0.12/kWh
    assert c.rate_usd_per_gpu_hour == pytest.approx(rate)
    assert c.electricity_usd_per_gpu_hour == pytest.approx(elec)
    assert c.cost_usd_per_hour == pytest.approx(rate + elec)
    assert c.power_source == "measured: run x"


def test_nothing_served_gives_empty_per_token_costs():
    price = gpu_price(get_hardware("h200"), PricingConfig())
    c = point_cost(1, 0.0, 0.0, 0.0, 0.0, price)
    assert c.cost_usd_per_month == pytest.approx(4.0 * 730)
    assert math.isnan(c.cost_usd_per_mtok_output) and math.isnan(c.cost_usd_per_1k_requests)


@pytest.mark.parametrize("cfg, needle", [
    (PricingConfig(price_usd_per_gpu_hour={"h200": -1.0}), "--price h200 -1 .* below its bound of 0"),
    (PricingConfig(price_usd_per_gpu_hour={"h200": 1e300}), "--price h200 1e\\+300 .* above its bound of 10,000"),
    (PricingConfig(price_usd_per_gpu_hour={"h200": math.inf}), "not a finite number"),
    (PricingConfig(pue=0.9), "--pue 0.9 is below its bound of 1"),
    (PricingConfig(electricity_usd_per_kwh=-0.1), "below its bound of 0"),
    (PricingConfig(amortisation_years=0), "--amortisation-years 0 years is below its bound of 0.25"),
    (PricingConfig(amortisation_years=1e-300), "below its bound of 0.25"),
    (PricingConfig(terms={"spot_discount": 0.5}), "--term spot_discount applies to --pricing spot, not on-demand"),
    (PricingConfig(model="onprem", terms={"host_usd_per_gpu": 1e300}), "out of range"),
])
def test_pricing_validation(cfg, needle):
    with pytest.raises(UserError, match=needle):
        cfg.validate()


def test_override_for_a_gpu_not_in_the_run():
    with pytest.raises(UserError, match="not among the GPUs"):
        PricingConfig(price_usd_per_gpu_hour={"h300": 1.0}).check_hardware(["h200"])


def test_add_costs_and_finance_csv(tmp_path):
    pts = pd.DataFrame([point("diffusion", "h200", 5.0, 2), point("ar", "rtx-5090", 5.0, 3)])
    prices = {h: gpu_price(get_hardware(h), PricingConfig()) for h in ("h200", "rtx-5090")}
    df = add_costs(pts, prices)
    assert df["cost_usd_per_month"].tolist() == pytest.approx([2 * 4.0 * 730, 3 * 0.915 * 730])
    paths = write_finance_csv(df, tmp_path / "fin.csv")
    assert [p.name for p in paths] == ["fin.csv", "fin.dictionary.csv", "fin.dictionary.md"]
    text = (tmp_path / "fin.csv").read_text()
    header = text.splitlines()[0].split(",")
    assert "ttft_ms_p95" in header and "ttft_ms_p99" in header and "cost_usd_per_mtok_output" in header
    assert "{" not in text and "[" not in text  # no JSON in cells
    back = pd.read_csv(tmp_path / "fin.csv")
    assert len(back) == 2 and back.columns.tolist() == header
    d = pd.read_csv(tmp_path / "fin.dictionary.csv")
    assert d["column"].tolist() == header  # every column documented, in order
    assert d[["meaning", "unit", "source"]].notna().all().all()
    assert not d["meaning"].str.contains("not described further").any()  # every simulator field has a real definition
    assert "| cost_usd_per_month |" in (tmp_path / "fin.dictionary.md").read_text()


def test_dictionary_patterns():
    assert describe("e2e_ms_p99").unit == "ms" and "99th percentile" in describe("e2e_ms_p99").meaning
    assert describe("batch_verify_step_seqs").unit == "sequences"
    assert describe("cost_usd_per_month").unit == "USD/month"
    assert dictionary_paths("a/b/plan.csv")[0].name == "plan.dictionary.csv"


def test_telemetry_power_from_a_measured_run(tmp_path, cli):
    from costmodel.schemas.rundir import RunManifest, RunWriter
    from costmodel.costing import telemetry_power

    man = RunManifest(run_id="tele", kind="gpu", mode="ar", model="m", weights="random", commit_source="none", hardware="h200")
    with RunWriter(tmp_path / "run", man) as w:
        rows = [{"t_s": i, "phase": "timing", "power_w": p, "sm_clock_mhz": 1900, "mem_used_gb": 60, "gpu_util_pct": u, "energy_j": 0}
                for i, (p, u) in enumerate([(90.0, 0.0), (600.0, 100.0), (500.0, 90.0), (95.0, 10.0)])]
        w.add("telemetry", rows)
        w.finish_unit("u1")
    hw, watts, src = telemetry_power(tmp_path / "run")
    assert hw == "h200" and watts == pytest.approx(550.0)  # mean of the two busy samples (util >= 50%)
    assert "2 busy telemetry samples" in src and "tele" in src
    # through the CLI: on-prem electricity uses 550 W x utilisation instead of the 700 W board power
    import pandas as pd

    d = simulate_dir(tmp_path / "sim", [point("ar", "h200", 5.0, 1, busy=1.0)])
    code, out, err = cli("report", str(d), "-o", str(tmp_path / "t.csv"), "--onprem", "--telemetry", str(tmp_path / "run"))
    assert code == 0, err
    row = pd.read_csv(tmp_path / "t.full.csv").iloc[0]  # every column (the finance view leaves power out)
    assert row["power_w_per_gpu"] == pytest.approx(550.0)
    assert row["electricity_usd_per_gpu_hour"] == pytest.approx((0.55 + 0.575) * 1.2 * 0.08)  # GPU + the catalog host draw
    assert "measured" in row["power_source"]


def test_the_finance_csv_is_budget_ready(cli, tmp_path):
    """Rounded for a spreadsheet, an unstable row's latencies and per-token costs blank and the row flagged;
    the .full.csv keeps every digit."""
    d = simulate_dir(tmp_path / "sim", [point("ar", "h200", 20.025484, 1, ttft_p95=123.456789),
                                        point("ar", "h200", 30.0, 1, stable=False, ttft_p95=56000.0)])
    assert cli("report", str(d), "-o", str(tmp_path / "fin.csv"))[0] == 0
    fin, full = pd.read_csv(tmp_path / "fin.csv"), pd.read_csv(tmp_path / "fin.full.csv")
    ok, bad = fin.iloc[0], fin.iloc[1]
    assert ok["qps"] == 20.025 and ok["ttft_ms_p95"] == 123.5 and ok["cost_usd_per_month"] == 2920.0 and pd.isna(ok["flag"])
    assert full.iloc[0]["qps"] == pytest.approx(20.025484)
    assert bad["flag"].startswith("UNSTABLE") and pd.isna(bad["ttft_ms_p95"]) and pd.isna(bad["cost_usd_per_mtok_output"])
    assert bad["cost_usd_per_month"] == 2920.0  # the GPUs are still paid for
    assert "flag" in set(pd.read_csv(tmp_path / "fin.dictionary.csv")["column"])
