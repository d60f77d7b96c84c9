"""The report stage's API (what `costmodel report` calls): read plan or simulation results,
re-price and re-judge them when asked (replica counts do not depend on price), and export a
finance CSV with its data dictionary or a self-contained HTML page with charts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from costmodel import atomic, outputset
from costmodel.errors import UserError
from costmodel.costing import Analysis, PricingConfig, analyse, with_seeds
from costmodel.slo import STABLE_ONLY, parse_slo
from reports.finance import write_finance_csv
from reports.html import render
from reports.sources import load_results
from reports.workbook import write_workbook

FORMATS = (".csv", ".html", ".htm", ".xlsx")


@dataclass
class ReportConfig:
    results: str  # a `costmodel plan -o` or `costmodel simulate -o` directory (or its plan.json / summary.csv)
    out: str  # out.csv or out.html
    slo: str | None = None  # judge by this SLO instead of the plan's (simulate results: stability only)
    pricing: PricingConfig | None = None  # replaces the plan's pricing


@dataclass
class ReportOutcome:
    analysis: Analysis
    written: list[Path]
    notes: list[str] = field(default_factory=list)


def make_report(cfg: ReportConfig) -> ReportOutcome:
    suffix = Path(cfg.out).suffix.lower()
    if suffix not in FORMATS:
        raise UserError(f"-o {cfg.out}: the output must end in .xlsx, .csv or .html", "e.g. -o report.html, -o finance.csv or -o budget.xlsx")
    res = load_results(cfg.results)
    slo = parse_slo(cfg.slo) if cfg.slo else (parse_slo(res.slo) if res.slo else STABLE_ONLY)
    notes = []
    if res.kind == "plan" and cfg.slo and slo.text != parse_slo(res.slo).text:
        notes.append(f"note: the plan searched replicas for {res.slo}; judged by {slo.text}, each cell shows the cheapest of the "
                     f"replica counts that search evaluated, which need not be the fewest: re-run `costmodel plan --slo` for those")
    pricing = cfg.pricing or res.pricing or PricingConfig()
    search = set(res.settings.get("crossover_search_qps") or [])  # a plan's crossover bisection points: evidence, not loads asked about
    a = analyse(res.points, slo, pricing, res.specs, res.qps, res.cell_notes, loads=[q for q in res.qps or [] if q not in search] or None)
    as_planned = res.kind == "plan" and pricing == res.pricing and slo.text == parse_slo(res.slo).text
    seeds = (res.extras.get("replicates") or {}).get("crossover_qps") or []
    if as_planned and seeds:  # plan --seeds: the crossover's interval over seeds, valid at the plan's prices and SLO only
        a.crossover = with_seeds(a.crossover, seeds)
    with outputset.publishing_files(cfg.out, "report") as stage:  # the CSV and its dictionaries land together (costmodel/outputset.py)
        staged = stage / Path(cfg.out).name
        if suffix == ".csv":
            written = write_finance_csv(a.cells if res.kind == "plan" else a.points, res, a, staged)
        elif suffix == ".xlsx":
            written = write_workbook(res, a, staged)
        else:
            written = [atomic.write_text(staged, render(res, a))]
    written = outputset.published(written, stage, Path(cfg.out).parent)
    return ReportOutcome(a, written, notes)
