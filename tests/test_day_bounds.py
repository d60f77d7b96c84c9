"""A day simulates only the fleets that can change its answer (simulate/plan/day_bounds.py): every other
fleet is listed in the month table as not simulated, with the floor of its monthly cost and the fleets
it is dearer than; a fleet whose floor could still make it a winner, runner-up or tie is simulated."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from costmodel.costing import DAYS_PER_MONTH
from costmodel.schemas.day import MonthBill
from simulate.cluster.load import parse_curve
from simulate.cluster.scaling import Scaling
from simulate.plan.day import DayConfig, DayLoad, run_day
from simulate.plan.day_bounds import NOT_SIMULATED, floor_replicas, prunable, prune_limit

SLO = "p95_ttft_ms<=1000,p95_e2e_ms<=8000"


def _bill(hw, mode, policy, usd, meets=True):
    return MonthBill(hw, mode, policy, policy, 1, 2, 100, 0, 1.0, 24 if meets else 23, 24, 24.0, 1.0, usd / DAYS_PER_MONTH, usd, 30.0)


def _load(text):
    lc = parse_curve(text)
    return DayLoad(lc.source, lc.span_s, lc.peak_qps, lc.qps[0], lc.expected_requests, curve=lc)


def test_nothing_is_pruned_before_a_fleet_meets_the_slo():
    assert prune_limit([], "h100-sxm", "ar") == (math.inf, "", False)
    # a cheaper fleet that misses the SLO in an hour is no winner: it bounds nothing
    assert prune_limit([_bill("rtx-5090", "mtp", "autoscaled", 900, meets=False)], "h100-sxm", "ar")[0] == math.inf


def test_a_fleet_is_judged_against_its_own_gpu_and_mode_and_against_the_runner_up():
    bills = [_bill("rtx-5090", "mtp", "autoscaled", 1100)]
    limit, than, own = prune_limit(bills, "rtx-5090", "mtp")
    assert limit == 1100 and own and "rtx-5090/mtp autoscaled" in than  # the static fleet of the same GPU and mode must beat 1,100 to matter
    assert prunable(1100, (limit, than, own)) and not prunable(1090, (limit, than, own))  # at the same cost it could only equal it
    assert prune_limit(bills, "h100-sxm", "ar")[0] == math.inf  # another (GPU, mode) may still be the runner-up: simulated
    bills.append(_bill("rtx-5090", "ar", "autoscaled", 1600))
    limit, than, own = prune_limit(bills, "h100-sxm", "ar")
    assert limit == 1600 and not own and "runner-up rtx-5090/ar" in than
    assert not prunable(1600, (limit, than, own))  # another GPU or mode at the runner-up's cost: simulated (it could tie)  # dearer than both winner and runner-up: it changes nothing


def test_a_fleet_within_the_tie_margin_of_the_winner_is_never_pruned():
    bills = [_bill("rtx-5090", "mtp", "autoscaled", 1000), _bill("rtx-5090", "ar", "autoscaled", 1001)]
    assert prune_limit(bills, "h100-sxm", "mtp")[0] == pytest.approx(1010)  # a floor of 1,005 could tie the winner (TIE_FRAC 1%)


def test_the_autoscaled_floor_follows_the_curve_and_never_drops_below_min_replicas():
    lc = _load("diurnal:peak=30,trough=10,peak_hour=14")
    counts = floor_replicas(lc, target=5.0, scaling=Scaling(), interval_s=3600)
    assert len(counts) == 24 and min(counts) >= 1
    assert counts[14] == math.ceil(30 * 0.8 / (1.1 * 5.0)) and counts[2] < counts[14]  # the peak hour's floor is the largest
    assert floor_replicas(lc, None, Scaling(), 3600, n_static=3) == [3] * 24  # a static fleet: its replicas all day


def test_a_dearer_mode_is_listed_with_its_floor_and_the_cheaper_fleets_are_simulated():
    cfg = DayConfig(load="flat:4,hours=1", slo=SLO, hardware=["h100-sxm"], modes=["mtp", "ar", "diffusion"], duration_s=30, jobs=1)
    notes = []
    out = run_day(cfg, progress=notes.append)
    every = run_day(replace(cfg, every_fleet=True, modes=list(cfg.modes), hardware=list(cfg.hardware)))  # --every-fleet: all simulated
    assert not any(b.note for b in every.bills) and len(every.bills) == len(out.bills)
    cost = {(b.mode, b.policy): b.cost_low for b in every.bills}
    skipped = [b for b in out.bills if b.note.startswith(NOT_SIMULATED)]
    simulated = [b for b in out.bills if not b.note]
    assert skipped and any(f"{b.hardware}/{b.mode} {b.policy}: {b.note}" in notes for b in skipped)  # said as it happens
    for b in skipped:
        floor = float(b.note.split("$", 1)[1].split("/", 1)[0].replace(",", ""))
        assert "no less than" in b.note
        # never pruned when it could win: its floor is above its own mode's simulated fleet or the runner-up's
        assert floor >= min(s.cost_usd_per_month for s in simulated if s.meets_slo_every_hour) * 0.99
        assert floor <= cost[(b.mode, b.policy)] + 0.5  # a floor (in whole dollars): its day, simulated, costs no less
    assert {(b.hardware, b.mode, b.policy) for b in out.bills} == {("h100-sxm", m, p) for m in cfg.modes for p in ("autoscaled", "static")}
    assert set(out.hours.policy) <= {"autoscaled", "static"} and len(out.hours) == len(simulated)  # a one-hour day: one row per simulated fleet


def test_every_fleet_belongs_to_the_day(cli, tmp_path):
    code, _, err = cli("plan", "--every-fleet", "--qps", "5", "-o", str(tmp_path / "plan"))
    assert code == 2 and "--every-fleet applies to --load-curve only" in err


def test_an_autoscaled_fleets_floor_stays_below_its_simulated_day_on_a_changing_load():
    from simulate.plan.day_bounds import cost_floor

    cfg = DayConfig(load="diurnal:peak=40,trough=5,peak_hour=12", slo=SLO, hardware=["h100-sxm"], modes=["ar"], duration_s=30, jobs=1,
                    compress=24, every_fleet=True)
    out = run_day(cfg)
    auto = next(b for b in out.bills if b.policy == "autoscaled")
    target = out.curve.peak_qps / out.peak_replicas_low[("h100-sxm", "ar")]
    counts = floor_replicas(out.curve, target, cfg.scaling, cfg.interval_s)
    assert max(counts) > min(counts)  # the floor follows the curve: more replicas at noon than at night
    assert cost_floor(out.curve, out.prices["h100-sxm"], counts, cfg.interval_s) <= auto.cost_low
