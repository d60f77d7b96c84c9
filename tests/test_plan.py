"""SLO parsing, the replica search, the crossover on a constructed case, and `costmodel plan` /
`costmodel report` end to end on a toy evaluator standing in for the simulator."""

import json
import math

import pandas as pd
import pytest

from costmodel.errors import UserError
from costmodel.hardware import get_hardware
from costmodel.slo import STABLE_ONLY, parse_slo
from costmodel.costing import PricingConfig, analyse, find_crossover
from simulate.plan.search import fewest_replicas
from test_reports_fakes import point, simulate_dir, toy_min_replicas, toy_point

SLO = "p95_ttft_ms<=1000,p95_e2e_ms<=5000"


# ---- SLO ---------------------------------------------------------------------------------------
def test_parse_slo():
    s = parse_slo(" p95_ttft_ms <= 1000 , p99_e2e_ms<5000,mean_tpot_ms<=40")
    assert [(b.column, b.op, b.limit_ms) for b in s.bounds] == [("ttft_ms_p95", "<=", 1000), ("e2e_ms_p99", "<", 5000), ("tpot_ms_mean", "<=", 40)]
    assert s.text == "p95_ttft_ms<=1000,p99_e2e_ms<5000,mean_tpot_ms<=40"
    ok = point(ttft_p95=1000, e2e_p95=4000)
    assert parse_slo(SLO).meets(ok)
    assert parse_slo(SLO).failures(point(ttft_p95=1001)) == ["ttft_ms_p95 1001 > 1000"]
    assert parse_slo(SLO).failures(point(stable=False))[0].startswith("unstable")
    assert STABLE_ONLY.meets(point()) and not STABLE_ONLY.meets(point(stable=False))


@pytest.mark.parametrize("text, needle", [
    ("", "--slo is empty"),
    ("p95_ttft_ms", "is not METRIC<=VALUE"),
    ("p95_ttft_ms>=100", "use <= or <"),
    ("p95_latency_ms<=100", "metric 'p95_latency_ms' is unknown"),
    ("p97_ttft_ms<=100", "is unknown"),
    ("p95_ttft_ms<=fast", "is not a number"),
    ("p95_ttft_ms<=-5", "positive number"),
    ("p95_ttft_ms<=1,,p95_e2e_ms<=2", "empty clause"),
    ("p95_ttft_ms<=1,p95_ttft_ms<=2", "twice"),
])
def test_slo_errors_are_one_line(text, needle):
    with pytest.raises(UserError) as e:
        parse_slo(text)
    assert needle in str(e.value) and "\n" not in str(e.value)


# ---- replica search ----------------------------------------------------------------------------
@pytest.mark.parametrize("threshold", [1, 2, 7, 37, 100, 255])
def test_search_finds_the_minimum_in_few_calls(threshold):
    calls = []

    def ev(r):
        calls.append(r)
        return r >= threshold, None

    res = fewest_replicas(ev, max_replicas=256)
    assert res.replicas == threshold
    assert len(calls) <= 2 * math.ceil(math.log2(threshold + 1)) + 1
    assert len(set(calls)) == len(calls)  # never the same count twice


def test_search_from_a_guess_and_a_lower_bound():
    calls = []

    def ev(r):
        calls.append(r)
        return r >= 42, None

    assert fewest_replicas(ev, lower=11, start=44).replicas == 42 and len(calls) <= 5  # guess close above (44, 43, 42, 40, 41)
    calls.clear()
    assert fewest_replicas(ev, lower=11, start=43).replicas == 42 and calls == [43, 42, 41]  # one above: steps of 1, no overshoot
    calls.clear()
    assert fewest_replicas(ev, lower=11, start=40).replicas == 42 and calls == [40, 41, 42]  # two below: steps of 1, 1
    calls.clear()
    assert fewest_replicas(ev, lower=42).replicas == 42 and calls == [42]  # the lower bound already meets


def test_search_gives_up_at_max_and_uses_hints():
    res = fewest_replicas(lambda r: (False, None), max_replicas=10)
    assert res.replicas is None and res.probes[-1] == (10, False)
    calls = []

    def ev(r):
        calls.append(r)
        return r >= 30, 30  # e.g. offered load / served load per replica

    assert fewest_replicas(ev, max_replicas=64).replicas == 30 and calls[:2] == [1, 30]


# ---- crossover on a constructed case -----------------------------------------------------------
def constructed_points():
    """Same price per replica (h200 $4.00/GPU-h): diffusion needs 1, 3, 10 replicas at 5, 20, 50 QPS;
    AR 2, 4, 6; MTP 2, 5, 8. Diffusion is the cheapest at 5 and 20 QPS, AR at 50."""
    need = {"diffusion": (1, 3, 10), "ar": (2, 4, 6), "mtp": (2, 5, 8)}
    rows = []
    for mode, rs in need.items():
        for q, r in zip((5.0, 20.0, 50.0), rs):
            rows.append(point(mode, "h200", q, r - 1, ttft_p95=900, e2e_p95=9000))  # one fewer: misses the SLO
            rows.append(point(mode, "h200", q, r, ttft_p95=900, e2e_p95=4000))
            rows.append(point(mode, "h200", q, r + 1, ttft_p95=500, e2e_p95=3000))  # more than needed
    return pd.DataFrame([x for x in rows if x["replicas"] >= 1])


def test_crossover_constructed_case():
    a = analyse(constructed_points(), parse_slo(SLO), PricingConfig(), {"h200": get_hardware("h200")})
    month = 4.0 * 730  # one h200 for a month
    cells = a.cells.set_index(["mode", "qps"])
    assert cells.loc[("diffusion", 50.0), "replicas"] == 10 and cells.loc[("ar", 50.0), "cost_usd_per_month"] == pytest.approx(6 * month)
    assert a.cheapest[["qps", "mode", "replicas"]].values.tolist() == [[5.0, "diffusion", 1], [20.0, "diffusion", 3], [50.0, "ar", 6]]
    c = a.crossover
    assert c.status == "bracketed" and (c.qps_low, c.qps_high) == (20.0, 50.0)
    # evaluated points only (no bisection here): the bracket's midpoint, the bracket stated
    assert c.qps_estimate == pytest.approx(35.0)
    assert c.cheapest_above == "ar on h200"
    assert "~35 QPS (95% interval 20-50 QPS)" in c.text and "below it DiffusionGemma is cheaper" in c.text


def test_crossover_edge_cases():
    pts = constructed_points()
    q = (5.0, 20.0, 50.0)
    above = find_crossover(analyse(pts[pts["qps"] < 50], parse_slo(SLO), PricingConfig(), {"h200": get_hardware("h200")}).points, q[:2])
    assert above.status == "above-range" and above.qps_low == 20.0
    below = analyse(pts[pts["qps"] == 50], parse_slo(SLO), PricingConfig(), {"h200": get_hardware("h200")}).crossover
    assert below.status == "below-range" and below.qps_high == 50.0
    never = analyse(pts[(pts["mode"] != "diffusion") | (pts["e2e_ms_p95"] > 5000)], parse_slo(SLO), PricingConfig(), {"h200": get_hardware("h200")}).crossover
    assert never.status == "diffusion-never-meets"  # only diffusion points that miss the SLO
    alone = analyse(pts[pts["mode"] != "diffusion"], parse_slo(SLO), PricingConfig(), {"h200": get_hardware("h200")}).crossover
    assert alone.status == "not-compared" and "no DiffusionGemma" in alone.text
    # diffusion does not meet the SLO at 50 QPS at all: bracketed, and the text says so
    nodiff = pts[~((pts["mode"] == "diffusion") & (pts["qps"] == 50))]
    c = analyse(nodiff, parse_slo(SLO), PricingConfig(), {"h200": get_hardware("h200")}).crossover
    assert c.status == "bracketed" and "only ar on h200 $17,520/month meets the SLO; no DiffusionGemma option does" in c.text


def test_repricing_changes_the_winner_not_the_replicas():
    # diffusion on a cheap GPU, AR on h200: cheap enough rtx-5090 keeps diffusion the cheapest at every QPS
    pts = constructed_points()
    pts.loc[pts["mode"] == "diffusion", "hardware"] = "rtx-5090"
    specs = {"h200": get_hardware("h200"), "rtx-5090": get_hardware("rtx-5090")}
    a = analyse(pts, parse_slo(SLO), PricingConfig(), specs)
    assert a.crossover.status == "above-range"
    b = analyse(pts, parse_slo(SLO), PricingConfig(price_usd_per_gpu_hour={"rtx-5090": 4.0}), specs)
    assert b.crossover.status == "bracketed" and b.cells["replicas"].tolist() == a.cells["replicas"].tolist()


# ---- plan / report end to end on the toy evaluator ---------------------------------------------
@pytest.fixture
def toy_sim(toy_simulator):
    calls = []

    def fake_simulator_point(profile, duration_s, seed, workload=None, miss_bounds=(), engine=None):
        def pt(hardware, mode, qps, replicas):
            calls.append((hardware, mode, qps, replicas))
            return toy_point(hardware, mode, qps, replicas)

        return pt

    toy_simulator(fake_simulator_point)
    return calls


def test_plan_and_report_end_to_end(cli, tmp_path, toy_sim):
    out = tmp_path / "plan"
    code, stdout, err = cli("plan", "--qps", "5,20,50", "--slo", SLO, "--hardware", "h200,rtx-5090", "--mode", "diffusion,ar,mtp",
                            "--jobs", "1", "-o", str(out))
    assert code == 0, err
    for name in ("plan.csv", "plan.dictionary.csv", "plan.dictionary.md", "plan.json"):
        assert (out / name).exists(), name
    df = pd.read_csv(out / "plan.csv")
    rows = df.groupby("qps").size()
    # the grid's every cell; the crossover's bisection points each simulate one GPU's modes (its own crossover) or every GPU's
    assert {5.0, 20.0, 50.0} <= set(df["qps"]) and (rows[[5.0, 20.0, 50.0]] == 6).all() and (rows % 3 == 0).all()
    for r in df.to_dict("records"):  # the search agrees with brute force on every cell
        want = toy_min_replicas(r["hardware"], r["mode"], r["qps"], 1000, 5000, max_r=64)
        got = None if pd.isna(r["replicas"]) else int(r["replicas"])
        assert got == want, r
    # under 5 points a cell, each settled in 2 (a miss) or 3 (a pass) replications of the deterministic toy; brute force up to the
    # answers would take several hundred simulations
    assert len(toy_sim) < 15 * len(df)
    assert "Cheapest SLO-meeting option per QPS" in stdout and "crossover" in stdout and "wall time:" in stdout
    doc = json.loads((out / "plan.json").read_text())
    assert doc["results"]["crossover"]["status"] in ("bracketed", "below-range", "above-range", "diffusion-never-meets")
    assert doc["profiles"]["h200"]["pass_models"]["diffusion"]["denoise_step"]["kind"] in ("measured", "projected", "roofline")

    # report: CSV (+ dictionary) and HTML from the plan directory, and re-priced on-prem
    code, stdout, err = cli("report", str(out), "-o", str(tmp_path / "fin.csv"))
    assert code == 0, err
    fin = pd.read_csv(tmp_path / "fin.csv")
    assert fin["replicas"].tolist() == df["replicas"].tolist() or fin["replicas"].fillna(-1).tolist() == df["replicas"].fillna(-1).tolist()
    assert (tmp_path / "fin.dictionary.csv").exists()
    code, stdout, err = cli("report", str(out), "-o", str(tmp_path / "r.html"), "--onprem", "--pue", "1.58")
    assert code == 0, err
    page = (tmp_path / "r.html").read_text()
    for chart in ("latency", "cost_per_mtok", "cost", "crossover"):
        assert f'<figure data-chart="{chart}"' in page
    assert "Assumptions and provenance" in page and "roofline" in page and "PUE 1.58" in page


def test_plan_parallel_matches_serial(cli, tmp_path, toy_sim):
    args = ("plan", "--qps", "5,20", "--hardware", "h200,rtx-5090", "--mode", "diffusion,ar")
    assert cli(*args, "--jobs", "1", "-o", str(tmp_path / "a"))[0] == 0
    assert cli(*args, "--jobs", "2", "-o", str(tmp_path / "b"))[0] == 0
    a, b = pd.read_csv(tmp_path / "a" / "plan.csv"), pd.read_csv(tmp_path / "b" / "plan.csv")
    assert a["replicas"].tolist() == b["replicas"].tolist() and a["cost_usd_per_month"].tolist() == b["cost_usd_per_month"].tolist()


def test_report_from_a_simulate_directory(cli, tmp_path):
    d = simulate_dir(tmp_path / "sim", [toy_point("h200", m, q, r) for m in ("diffusion", "ar") for q in (5.0, 20.0) for r in (2, 8)])
    code, out, err = cli("report", str(d), "-o", str(tmp_path / "s.csv"), "--price", "h200=3.5")
    assert code == 0, err
    df = pd.read_csv(tmp_path / "s.csv")
    assert len(df) == 8 and set(df["cost_usd_per_hour"].round(6)) == {7.0, 28.0}
    code, out, err = cli("report", str(d), "-o", str(tmp_path / "s.html"), "--slo", SLO)
    assert code == 0, err
    assert '<figure data-chart="latency"' in (tmp_path / "s.html").read_text()


@pytest.mark.parametrize("args, needle", [
    (("plan", "--slo", "p95_ttft<=5", "-o", "X"), "--slo metric"),
    (("plan", "--hardware", "a100", "-o", "X"), "unknown hardware"),
    (("plan", "--mode", "beam", "-o", "X"), "unknown mode 'beam'"),
    (("plan", "--qps", "0", "-o", "X"), "--qps"),
    (("plan", "--price", "h200=-2", "-o", "X"), "negative"),
    (("plan", "--price", "h300=2", "-o", "X"), "not among the GPUs"),
    (("plan", "--onprem", "--price", "h200=2", "-o", "X"), "--onprem"),
    (("plan", "--pue", "0.5", "-o", "X"), "--pue 0.5 is below its bound of 1"),
    (("plan", "--electricity-usd-per-kwh", "0.1", "-o", "X"), "--onprem is not set"),
    (("plan", "--profile", "nope.json", "-o", "X"), "does not exist"),
    (("plan", "--workload", "nope.json", "-o", "X"), "does not exist"),
    (("plan", "--refine-crossover", "-1", "-o", "X"), "--refine-crossover -1 is below its bound of 0"),
    (("plan", "--max-replicas", "0", "-o", "X"), "--max-replicas 0 is below its bound of 1"),
    (("report", "missing-dir", "-o", "x.csv"), "do not exist"),
    (("report", ".", "-o", "x.pdf"), ".csv or .html"),
])
def test_bad_input_is_one_line_exit_2(cli, tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*args)
    assert code == 2, (args, out, err)
    assert needle in err and len(err.strip().splitlines()) == 1, err


def test_report_on_a_directory_without_results(cli, tmp_path):
    code, out, err = cli("report", str(tmp_path), "-o", str(tmp_path / "x.csv"))
    assert code == 2 and "neither plan.json nor summary.csv" in err


def test_refine_crossover_narrows_the_bracket(cli, tmp_path, toy_sim):
    out = tmp_path / "plan"
    code, stdout, err = cli("plan", "--qps", "2,20", "--hardware", "h200,rtx-5090", "--jobs", "1", "--refine-crossover", "2", "-o", str(out))
    assert code == 0, err
    doc = json.loads((out / "plan.json").read_text())
    qps = doc["settings"]["qps"]
    # 2, 20, then the midpoint 11 and a midpoint of the new bracket; at most 2 steps for each crossover (all GPUs, each GPU)
    assert qps[:1] == [2.0] and 11.0 in qps and len(qps) <= 2 + 2 * 3
    c = doc["results"]["crossover"]
    assert c["status"] == "bracketed" and c["qps_high"] - c["qps_low"] <= 9.0
    df = pd.read_csv(out / "plan.csv")
    for r in df[~df["qps"].isin([2.0, 20.0])].to_dict("records"):  # refined cells agree with brute force too
        want = toy_min_replicas(r["hardware"], r["mode"], r["qps"], 1000, 5000, max_r=64)
        assert (None if pd.isna(r["replicas"]) else int(r["replicas"])) == want, r
    # the report reads the refined QPS back
    assert cli("report", str(out), "-o", str(tmp_path / "r.csv"))[0] == 0
    assert sorted(pd.read_csv(tmp_path / "r.csv")["qps"].unique()) == sorted(qps)


def test_report_when_no_option_meets_the_slo(cli, tmp_path, toy_sim):
    out = tmp_path / "plan"
    assert cli("plan", "--qps", "5,20", "--hardware", "h200", "--mode", "diffusion,ar", "--jobs", "1", "-o", str(out))[0] == 0
    for name in ("none.csv", "none.html"):
        code, stdout, err = cli("report", str(out), "-o", str(tmp_path / name), "--slo", "p95_ttft_ms<=1")
        assert code == 0, err
        assert "note: the plan searched replicas for" in stdout and "meets the SLO at none of the evaluated QPS" in stdout
    df = pd.read_csv(tmp_path / "none.csv")
    assert not df["meets_slo"].any() and df["replicas"].isna().all()
    assert df["slo_failures"].str.match(r"no fleet of up to \d+ replicas meets the SLO \(of the counts tried\); at \d+: ").all()
    assert "no option meets the SLO" in (tmp_path / "none.html").read_text()
