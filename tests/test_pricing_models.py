"""Pricing models (--pricing): each model's GPU-hour by hand from the catalog terms, a model added
from outside in one module and one register() line, and the bad inputs (one line, exit 2)."""

import pytest

from costmodel.errors import UserError
from costmodel.hardware import get_hardware
from costmodel.costing import PricingConfig, PricingModel, PricingOptions, Rate, gpu_price, model_names, point_cost, pricing_config, register
from costmodel.costing import models as registry


def rate(model: str, hw: str = "h100-sxm", **kw) -> float:
    return gpu_price(get_hardware(hw), PricingConfig(model=model, **kw)).rate_usd_per_gpu_hour


def test_the_registered_models():
    assert model_names()[:5] == ("on-demand", "reserved-1y", "reserved-3y", "spot", "onprem")


def test_each_model_by_hand_from_the_catalog_terms():
    od = 2.95  # H100 SXM catalog on-demand
    assert rate("on-demand") == pytest.approx(od)
    assert rate("reserved-1y") == pytest.approx(od * (1 - 0.30))
    assert rate("reserved-3y") == pytest.approx(od * (1 - 0.45))
    assert rate("spot") == pytest.approx(0.9 * od * 0.5 + 0.1 * od)  # 90% of hours at half price, the rest on demand
    assert rate("onprem") == pytest.approx((32500 + 4000) / (4 * 8760))  # purchase + host share over 4 years
    # reserved and spot discount from a --price override
    assert rate("reserved-1y", price_usd_per_gpu_hour={"h100-sxm": 2.0}) == pytest.approx(1.4)


def test_upfront_share_of_a_commitment():
    p = gpu_price(get_hardware("h200"), PricingConfig(model="reserved-3y", terms={"upfront_share": 0.5}))
    assert p.upfront_usd_per_gpu == pytest.approx(0.5 * 4.0 * 0.55 * 3 * 8760)
    c = point_cost(2, 0.5, 1.0, 100.0, 300.0, p)
    assert c.upfront_usd == pytest.approx(2 * p.upfront_usd_per_gpu)
    assert c.cost_usd_per_hour == pytest.approx(2 * 4.0 * 0.55)  # the effective rate does not change with the cash flow
    assert "upfront_share 0.5 (--term upfront_share=0.5 (user override))" in p.rate_source


def test_every_term_has_a_source():
    p = gpu_price(get_hardware("rtx-5090"), PricingConfig(model="onprem"))
    assert p.terms == {"host_usd_per_gpu": 2000.0, "host_power_w_per_gpu": 150.0, "output_input_price_ratio": 4.0}
    assert all(p.term_sources[k] for k in p.terms) and "(A)" in p.term_sources["host_usd_per_gpu"]


def test_a_model_added_in_one_module_and_one_line(monkeypatch):
    class Leased(PricingModel):  # e.g. a fixed monthly lease per GPU
        name, label, description = "lease", "lease", "a fixed monthly lease"

        def rate(self, spec, on_demand_usd, on_demand_source, terms, purchase_usd, purchase_source, amortisation_years):
            return Rate(1000.0 / 730, "lease $1,000 per GPU-month")

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    register(Leased())
    assert "lease" in model_names()
    assert rate("lease", "h200") == pytest.approx(1000 / 730)


@pytest.mark.parametrize("opts, needle", [
    (PricingOptions(pricing="monthly"), "not a pricing model"),
    (PricingOptions(term=("spot_discount=1.5",)), "out of range"),
    (PricingOptions(term=("discount=0.5",)), "not a pricing term"),
    (PricingOptions(price=("h200=-1",)), "negative"),
    (PricingOptions(onprem=True, pricing="spot"), "two pricing models"),
    (PricingOptions(pricing="spot", purchase_usd=("h200=30000",)), "--onprem is not set"),
])
def test_bad_pricing_input(opts, needle):
    with pytest.raises(UserError, match=needle):
        pricing_config(opts)


def test_price_file(tmp_path):
    good = tmp_path / "prices.csv"
    good.write_text("hardware,price_usd_per_gpu_hour,purchase_usd\nh200,3.5,\nrtx-5090,0.8,2100\n")
    cfg = pricing_config(PricingOptions(price_file=str(good)))
    assert cfg.price_usd_per_gpu_hour == {"h200": 3.5, "rtx-5090": 0.8} and cfg.purchase_usd == {"rtx-5090": 2100.0}
    for body, needle in (("hardware,price_usd_per_gpu_hour\nh200,\n", "missing"), ("hardware,price_usd_per_gpu_hour\nh200,-2\n", "negative"),
                         ("gpu,usd\nh200,1\n", "lacks the column")):
        bad = tmp_path / "bad.csv"
        bad.write_text(body)
        with pytest.raises(UserError, match=needle):
            pricing_config(PricingOptions(price_file=str(bad)))


def test_pricing_on_the_command_line(cli, tmp_path):
    code, _, err = cli("report", str(tmp_path), "-o", str(tmp_path / "r.csv"), "--pricing", "weekly")
    assert code == 2 and "--pricing 'weekly' is not a pricing model" in err and "Traceback" not in err


def test_simulate_prints_what_each_point_costs(cli):
    code, out, err = cli("simulate", "--qps", "1", "--mode", "ar", "--hardware", "h200", "--duration", "8", "--jobs", "1", "--pricing", "spot")
    assert code == 0, err
    assert "Cost on h200, spot pricing ($2.200 per GPU-hour" in out  # 0.9 x 4.00 x 0.5 + 0.1 x 4.00
    assert "1,606" in out  # 2.20 x 730 USD/month
