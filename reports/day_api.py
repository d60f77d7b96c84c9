"""`costmodel report DAYDIR` (a `plan --load-curve -o` output set): the HTML page, the budget
workbook or the month's bills as a finance CSV, optionally re-priced under other pricing options
(the fleets, GPU-hours and energy are the day's: price does not change them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pandas as pd

from costmodel import atomic, outputset
from costmodel.errors import UserError
from costmodel.schemas.day import DayRecord, day_docs, read_day
from costmodel.schemas.dictionary import write_table
from costmodel.costing import TIE_FRAC, PricingConfig
from costmodel.costing.day import price_hours
from costmodel.costing.day_answer import DayAnswer, answer, answer_column
from reports.day import prices, repriced
from reports.day_html import render_day
from reports.day_workbook import write_day_workbook


@dataclass
class DayReport:
    answer: DayAnswer
    written: list[Path]


def with_pricing(day: DayRecord, pricing: PricingConfig) -> DayRecord:
    """The day's bills and hours under `pricing`."""
    pricing = pricing.validate()
    doc = {**day.doc, "pricing": pricing.to_dict()}
    new = replace(day, doc=doc)
    ps = prices(new, pricing)
    doc["prices"] = {h: asdict(p) for h, p in ps.items()}
    return replace(new, bills=repriced(new, pricing), hours=price_hours(day.hours, ps))


def make_day_report(results: str | Path, out: str | Path, pricing: PricingConfig | None = None, slo: str | None = None) -> DayReport:
    suffix = Path(out).suffix.lower()
    if slo:
        raise UserError("--slo does not apply to a day directory: each hour was judged as the day ran",
                        "re-run `costmodel plan --load-curve ... --slo` for another SLO")
    day = read_day(results)
    if pricing is not None:
        day = with_pricing(day, pricing)
    with outputset.publishing_files(out, "report") as stage:
        staged = stage / Path(out).name
        if suffix == ".xlsx":
            written = write_day_workbook(day, staged)
        elif suffix == ".csv":
            bills = pd.DataFrame([{**asdict(b), "meets_slo_every_hour": b.meets_slo_every_hour, "slo_verdict": b.slo_verdict, "answer": a}
                                  for b, a in zip(day.bills, answer_column(day.bills))])
            written = write_table(bills, staged, day_docs())
        else:
            written = [atomic.write_text(staged, render_day(day))]
    return DayReport(answer(day), outputset.published(written, stage, Path(out).parent))
