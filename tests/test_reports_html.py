"""The HTML report: answer first, self-contained (plotly.js inlined, nothing fetched), interactive
charts that render in a real headless Chromium with hover data, and the crossover only where it
applies."""

import re

import pandas as pd
import pytest

from benchmarks.browser_check import check_html, find_chromium, screenshot, static_remote_refs
from test_reports_fakes import simulate_dir, toy_point


@pytest.fixture
def report_html(cli, tmp_path, toy_simulator):

    toy_simulator(lambda profile, duration_s, seed, workload=None, miss_bounds=(), engine=None: toy_point)
    out = tmp_path / "plan"
    code, _, err = cli("plan", "--qps", "2,5,10,20", "--hardware", "h200,rtx-5090", "--jobs", "1", "-o", str(out))
    assert code == 0, err
    code, _, err = cli("report", str(out), "-o", str(tmp_path / "report.html"))
    assert code == 0, err
    return tmp_path / "report.html"


def _chromium():
    if find_chromium() is None:  # `make test` installs it (the Makefile's .browsers stamp): a failure, never a skip
        pytest.fail("chromium is not installed: apt-get install -y chromium (`make test` does it when run as root)")


def test_the_page_opens_with_the_answer(report_html):
    page = report_html.read_text()
    order = [page.index(x) for x in ("The answer", "cheapest SLO-meeting fleet", "<h2>Charts</h2>", "What these numbers rest on",
                                     "Assumptions and provenance", "<h2>Details</h2>")]
    assert order == sorted(order)
    answer = page[page.index("The answer"):page.index("<h2>Charts</h2>")]
    assert re.search(r"At 2 QPS: (a tie at \$[\d,]+/month \(\$[\d,]+/year\)( each)?: )?\d+ x \S+", answer) and "/month" in answer
    assert 'id="crossover-answer"' in answer and "crossover" in answer  # the crossover's words, as plan prints them
    assert "runner-up" in answer and "rests on" in answer and "SLO: p95_ttft_ms&lt;=1000" in answer


def test_html_is_self_contained(report_html):
    page = report_html.read_text()
    assert static_remote_refs(page) == []
    assert page.count("<script") == 1 + page.count('<figure data-chart=')  # plotly.js once, one call per chart
    assert "<script src" not in page and "<link" not in page and "<img" not in page
    for chart in ("cost", "cost_per_mtok", "latency", "crossover"):  # one chart per question (a plan's throughput only repeats its load)
        assert f'<figure data-chart="{chart}"' in page
    assert "730 h" in page and "roofline" in page


def test_the_crossover_section_only_where_it_applies(cli, tmp_path):
    d = simulate_dir(tmp_path / "sim", [toy_point("h200", "ar", q, r) for q in (5.0, 20.0) for r in (2, 8)])
    assert cli("report", str(d), "-o", str(tmp_path / "ar.html"))[0] == 0
    page = (tmp_path / "ar.html").read_text()
    assert 'data-chart="crossover"' not in page and "Crossover" not in page
    assert "no SLO given: stability only" in page  # a simulate directory has no SLO: the table says so


def test_html_charts_render_in_headless_chromium(report_html, tmp_path):
    _chromium()
    res = check_html(report_html)
    assert res.ok, res.problems
    assert sorted(c["key"] for c in res.charts) == ["cost", "cost_per_mtok", "crossover", "latency"]
    assert res.resources == [] and res.errors == []
    for c in res.charts:
        assert c["width"] >= 300 and c["height"] >= 150 and c["points"] > 0
        assert "QPS" in c["hover_text"]  # hovering a point shows its load and value with units
    cost = next(c for c in res.charts if c["key"] == "cost")
    assert "per month" in cost["hover_text"]
    by_load = {}
    for r in res.highlighted:  # the plan table's rows drawn highlighted (GPU, mode, QPS, ...), by load
        by_load.setdefault(r["cells"][2], []).append(r["kind"])
    assert by_load and all(k == ["win"] or (len(k) > 1 and set(k) == {"tie"}) for k in by_load.values()), by_load  # one winner, or a tie: never one of it
    png = screenshot(res.chromium, report_html, tmp_path / "first.png", height=900)
    assert png.stat().st_size > 10_000


def test_the_check_fails_on_a_page_error_or_an_empty_chart(tmp_path):
    _chromium()
    page = tmp_path / "bad.html"
    page.write_text('<html><head></head><body><figure data-chart="cost" data-title="x"><div style="width:600px;height:400px"></div></figure>'
                    "<script>undefined_function();</script></body></html>")
    res = check_html(page)
    assert any("page error" in p for p in res.problems) and any("empty" in p for p in res.problems)


def test_static_check_catches_remote_assets():
    page = '<img src="https://cdn.example/x.png"><link rel="stylesheet" href="x.css"><style>@import url(http://a/b.css)</style>'
    assert len(static_remote_refs(page)) >= 3
