"""The day's budget workbook (`costmodel report DAYDIR -o day.xlsx`, openpyxl), answer first:

- Summary: the answer as planned (text), and the cheapest fleet meeting the SLO every hour at the
  workbook's current prices (MIN / INDEX-MATCH over Month's meeting rows, so a price edit can change
  it), or the tie (every fleet of another GPU or mode within 1%, named: none wins).
- Month: every fleet's day and month; USD per day, month and year are formulas of the Prices sheet
  beside the month as simulated; fleets missing the SLO listed last, flagged.
- Hours: the fleet hour by hour, USD per hour a formula of the Prices sheet.
- Prices: one editable (yellow) USD per GPU-hour per GPU under the day's pricing model.
- Pricing models, Price sensitivity, Assumptions: the tables of reports/day.py as values.

Every formula carries the value it evaluates to at the day's prices (reports/xlsx_values.py), so
pandas and previewers read numbers and the winner; a spreadsheet program recalculates on open.
"""

from __future__ import annotations

import io
import math
from dataclasses import replace
from pathlib import Path

from openpyxl import Workbook
from openpyxl.styles import Font, PatternFill
from openpyxl.utils import get_column_letter
from openpyxl.worksheet.formula import ArrayFormula

from costmodel import atomic
from costmodel.costing import DAYS_PER_MONTH, HOURS_PER_MONTH, HOURS_PER_YEAR, TIE_FRAC
from costmodel.costing.day import committed
from costmodel.schemas.day import DayRecord
from costmodel.costing.day_answer import answer, day_basis
from reports.day import billed_gpu_hours, fleet_key, owned, price_sensitivity, prices, pricing, pricing_models_table, span_note
from reports.xlsx_values import FormulaValues

INPUT = PatternFill("solid", fgColor="FFF2CC")
BOLD = Font(bold=True)
DAYS_PER_MONTH_CELL = "Prices!$C$2"
YEAR_PER_MONTH = HOURS_PER_YEAR / HOURS_PER_MONTH
TIE_TEXT = "tie (the same monthly cost, no winner): "


def _prices_sheet(ws, day: DayRecord, ps: dict) -> dict[str, str]:
    ws.append(("GPU", "pricing model", "USD per GPU-hour (edit)", "on-demand USD per GPU-hour", "billed for", "electricity USD per kWh", "PUE", "source"))
    ws.cell(2, 1, "days per month")
    ws.cell(2, 3, DAYS_PER_MONTH)
    refs = {}
    for i, (h, p) in enumerate(ps.items(), start=3):
        ws.append((h, p.basis, p.rate_usd_per_gpu_hour, p.on_demand_usd_per_gpu_hour,
                   "the fleet's most GPUs, all day" if committed(p) else "GPU-hours held", p.electricity_usd_per_kwh if owned(p) else 0.0,
                   p.pue, p.rate_source))
        ws[f"C{i}"].fill = INPUT
        refs[h] = f"Prices!$C${i}"
    ws.cell(ws.max_row + 2, 1, "Yellow cells are inputs: change a price and every cost in Month, Hours and Summary recomputes.")
    return refs


MONTH_COLUMNS = ("fleet", "GPU", "mode", "policy", "meets SLO every hour", "hours meeting SLO", "hours", "replicas min", "replicas max",
                 "requests per day", "SLO attainment", "GPU-hours per day", "billed GPU-hours per day", "electricity USD per day",
                 "USD per day", "USD per month", "USD per year", "USD per month (as simulated)", "flag", "competes for the answer",
                 f"ties the cheapest (within {TIE_FRAC:.0%}, or intervals overlapping)", "SLO verdict", "billed GPU-hours per day, low end",
                 "electricity USD per day, low end", "USD per month, 95% interval low end")


def _month_sheet(ws, day: DayRecord, ps: dict, refs: dict, cache: FormulaValues, low_ref: str) -> list[tuple[str, float, bool, float]]:
    """Writes Month (costs as formulas of Prices, each with its value cached); returns each row's
    fleet, USD per month at the day's prices (NaN: no price, or the fleet misses the SLO in some
    hour) and whether it ties the cheapest (`low_ref`: the Summary cell of the cheapest). Rows
    meeting the SLO every hour come first (bill_order). 'competes for the answer': meets the SLO
    every hour and is its (GPU, mode)'s cheapest fleet (the answer compares (GPU, mode)s; a price
    edit scales a GPU's fleets alike, so which of its policies is cheaper does not change). The low
    end of each cost's 95% interval (the day from the fewest peak replicas not settled to miss) is
    priced alike (V-X); a fleet ties the cheapest where its low end is within TIE_FRAC of the
    cheapest's cost (the plan's rule: costs within TIE_FRAC, or intervals overlapping)."""
    ws.append(MONTH_COLUMNS)
    months, lows, competes, seen = [], [], [], set()
    for i, b in enumerate(day.bills, start=2):
        p = ps.get(b.hardware)
        ok = b.meets_slo_every_hour
        has = p is not None and not b.note
        billed = billed_gpu_hours(b, p) if has else None
        elec = ((b.energy_kwh_per_day + billed * p.host_power_w_per_gpu / 1000.0) * p.pue * p.electricity_usd_per_kwh) if has and owned(p) else 0.0
        flag = "" if ok else (b.note or f"misses the SLO in {b.hours - b.hours_meeting_slo} of {b.hours} hours")
        first = ok and has and (b.hardware, b.mode) not in seen
        seen |= {(b.hardware, b.mode)} if first else set()
        low_end = has and b.gpu_hours_per_day_low == b.gpu_hours_per_day_low
        billed_low = billed_gpu_hours(replace(b, replicas_max=b.replicas_max_low, gpu_hours_per_day=b.gpu_hours_per_day_low), p) if low_end else billed
        elec_low = (((b.energy_kwh_per_day_low + billed_low * p.host_power_w_per_gpu / 1000.0) * p.pue * p.electricity_usd_per_kwh)
                    if low_end and owned(p) else elec)
        if b.slo_verdict == "borderline":
            flag = "; ".join(x for x in (flag, f"borderline: {b.borderline}" if b.borderline else "borderline") if x)
        ws.append([fleet_key(b), b.hardware, b.mode, b.policy, ok, b.hours_meeting_slo, b.hours, b.replicas_min, b.replicas_max, b.requests_per_day,
                   b.slo_attainment if b.slo_attainment == b.slo_attainment else None, b.gpu_hours_per_day, billed, round(elec, 4), None, None, None,
                   b.cost_usd_per_month if b.cost_usd_per_month == b.cost_usd_per_month else None, flag, first, None, b.slo_verdict,
                   billed_low, round(elec_low, 4) if has else None, None])
        usd_day = billed * p.rate_usd_per_gpu_hour + round(elec, 4) if has else math.nan
        usd_day_low = billed_low * p.rate_usd_per_gpu_hour + round(elec_low, 4) if has else math.nan
        months.append(usd_day * DAYS_PER_MONTH if has and ok else math.nan)
        lows.append(min(usd_day, usd_day_low) * DAYS_PER_MONTH if has and ok else math.nan)
        competes.append(first)
        if has:
            cache.put(ws, f"O{i}", f"=M{i}*{refs[b.hardware]}+N{i}", usd_day)
            cache.put(ws, f"P{i}", f"=O{i}*{DAYS_PER_MONTH_CELL}", usd_day * DAYS_PER_MONTH)
            cache.put(ws, f"Q{i}", f"=P{i}*{YEAR_PER_MONTH:g}", usd_day * DAYS_PER_MONTH * YEAR_PER_MONTH)
            cache.put(ws, f"Y{i}", f"=MIN(P{i},(W{i}*{refs[b.hardware]}+X{i})*{DAYS_PER_MONTH_CELL})", min(usd_day, usd_day_low) * DAYS_PER_MONTH)
    low = min((m for m in months if m == m), default=math.nan)
    out = []
    for i, (b, m, lo, first) in enumerate(zip(day.bills, months, lows, competes), start=2):
        tied = bool(first and m == m and lo <= low * (1 + TIE_FRAC))
        cache.put(ws, f"U{i}", f"=AND(T{i},E{i},Y{i}<={low_ref}*{1 + TIE_FRAC:g})", tied)
        out.append((fleet_key(b), m, tied, lo))
    return out


HOUR_COLUMNS = ("hour", "GPU", "mode", "policy", "offered QPS", "replicas mean", "replicas max", "SLO attainment", "meets SLO", "GPU-hours",
                "USD (as simulated)", "USD at these prices", "SLO verdict (95% batch-means intervals)")


def _hours_sheet(ws, day: DayRecord, ps: dict, refs: dict, cache: FormulaValues) -> None:
    ws.append(HOUR_COLUMNS)
    h = day.hours
    if h.empty:
        return
    peak = h.groupby(["hardware", "mode", "policy"]).replicas_max.transform("max")
    for i, (k, r) in enumerate(h.sort_values(["policy", "hardware", "mode", "hour"], kind="mergesort").iterrows(), start=2):
        p = ps.get(r["hardware"])
        held = float(peak[k]) * (r["end_s"] - r["start_s"]) / 3600 if p is not None and committed(p) else float(r["gpu_hours"])
        ws.append([float(r["hour"]), r["hardware"], r["mode"], r["policy"], round(float(r["offered_qps"]), 3), round(float(r["replicas_mean"]), 3),
                   int(r["replicas_max"]), float(r["slo_attainment"]) if r["slo_attainment"] == r["slo_attainment"] else None, bool(r["meets_slo"]),
                   round(float(r["gpu_hours"]), 4), round(float(r["cost_usd"]), 4), None,
                   str(r["slo_verdict"]) if isinstance(r.get("slo_verdict"), str) else None])
        if p is not None:
            cache.put(ws, f"L{i}", f"={held:.6g}*{refs[r['hardware']]}", float(f"{held:.6g}") * p.rate_usd_per_gpu_hour)


SUMMARY_HEAD = ("Cheapest fleet meeting the SLO every hour at these prices", "USD per month", "USD per year",
                f"fleets of other GPUs or modes tied with it (within {TIE_FRAC:.0%}, or intervals overlapping)", "USD per month, 95% interval low end")


def summary_row(day: DayRecord) -> int:
    """The Summary row of the cheapest fleet at these prices (its header one above)."""
    return (6 if answer(day).projected else 5) + 2


def _summary_sheet(ws, day: DayRecord, month_rows: list[tuple[str, float, bool, float]], cache: FormulaValues) -> None:
    """The answer as planned (text), then the cheapest fleet at the workbook's prices (formulas of
    Month: MIN, INDEX/MATCH, and a tie named by TEXTJOIN over Month's 'ties the cheapest')."""
    a = answer(day)
    ws.append(("The answer (as planned)", a.text))
    if a.projected:
        ws.append(("Projection", f"The answer rests on {a.rests_on}. Measure that GPU before committing to it."))
    ws.append(("Load", day.load))
    ws.append(("SLO (every hour)", day.slo))
    ws.append(("Pricing", pricing(day).model + span_note(day)))
    r = summary_row(day)
    for c, v in enumerate(SUMMARY_HEAD, start=1):
        ws.cell(r - 1, c, v).font = BOLD
    meeting = sum(b.meets_slo_every_hour for b in day.bills)
    months = [m for _, m, _, _ in month_rows[:meeting] if m == m]
    if months:
        low = min(months)
        tied = [k for k, _, t, _ in month_rows if t]
        first, first_low = next((k, lo) for k, m, _, lo in month_rows if m == low)
        n = len(month_rows) + 1
        rng, names = f"Month!$P$2:$P${meeting + 1}", f"Month!$A$2:$A${meeting + 1}"
        name = ArrayFormula(f"A{r}", f'=IF(D{r}>0,"{TIE_TEXT}"&_xlfn.TEXTJOIN(" = ",TRUE,IF(Month!$U$2:$U${n},Month!$A$2:$A${n},"")),'
                                     f"INDEX({names},MATCH(B{r},{rng},0)))")
        cache.put(ws, f"A{r}", name, TIE_TEXT + " = ".join(tied) if len(tied) > 1 else first)
        cache.put(ws, f"B{r}", f"=MIN({rng})", low)
        cache.put(ws, f"C{r}", f"=B{r}*{YEAR_PER_MONTH:g}", low * YEAR_PER_MONTH)
        cache.put(ws, f"D{r}", f"=COUNTIF(Month!$U$2:$U${n},TRUE)-1", len(tied) - 1)
        cache.put(ws, f"E{r}", f"=INDEX(Month!$Y$2:$Y${meeting + 1},MATCH(B{r},{rng},0))", first_low)
    else:
        ws.cell(r, 1, "no fleet meets the SLO in every hour")
    ws.cell(r + 2, 1, "Fleets missing the SLO in any hour are listed after those meeting it in Month, flagged, and never chosen here. "
                      f"Fleets of different GPUs or modes within {TIE_FRAC:.0%} of each other's monthly cost, or whose 95% intervals overlap, are a tie: "
                      "all are named, none wins. A cost's interval runs from the day of the fewest peak replicas not settled to miss the SLO "
                      "(Month's low end) to the settled fleet's.")


def _values_sheet(ws, df) -> None:
    ws.append(tuple(df.columns))
    for row in df.itertuples(index=False):
        ws.append([None if isinstance(v, float) and v != v else v for v in row])


def _assumptions_sheet(ws, day: DayRecord) -> None:
    ws.append(("GPU", "mode", "profile", "basis", "rests on"))
    for h, prov in day.doc.get("profiles", {}).items():
        for m in sorted({b.mode for b in day.bills if b.hardware == h}):
            ws.append((h, m, prov.get("profile_id"), (prov.get("provenance") or {}).get("kind"), day_basis(prov, m)))
    s = day.doc.get("settings", {})
    for k, v in (("workload", s.get("workload") or "simulator default"), ("engine settings", str(s.get("engine") or "defaults")),
                 ("seed", s.get("seed")), ("time compression", day.doc.get("compress")), ("scaling", str(day.doc.get("scaling")))):
        ws.append(("all", "", k, "", str(v)))


def _widths(ws) -> None:
    for col in ws.columns:
        n = max((len(str(c.value)) for c in col if c.value is not None and not str(c.value).startswith("=")), default=8)
        ws.column_dimensions[get_column_letter(col[0].column)].width = min(max(n + 2, 10), 60)
    for c in ws[1]:
        c.font = BOLD


def write_day_workbook(day: DayRecord, path: str | Path) -> list[Path]:
    """Summary, Month, Hours, Prices and the value sheets; every formula with its value cached
    (reports/xlsx_values.py), so pandas reads the costs and the winner without a spreadsheet program."""
    ps = prices(day)
    wb = Workbook()
    summary = wb.active
    summary.title = "Summary"
    month, hours, price_ws = wb.create_sheet("Month"), wb.create_sheet("Hours"), wb.create_sheet("Prices")
    cache = FormulaValues()
    refs = _prices_sheet(price_ws, day, ps)
    month_rows = _month_sheet(month, day, ps, refs, cache, f"Summary!$B${summary_row(day)}")
    _hours_sheet(hours, day, ps, refs, cache)
    _summary_sheet(summary, day, month_rows, cache)
    table, _ = pricing_models_table(day)
    _values_sheet(wb.create_sheet("Pricing models"), table)
    _values_sheet(wb.create_sheet("Price sensitivity"), price_sensitivity(day))
    _assumptions_sheet(wb.create_sheet("Assumptions"), day)
    for ws in wb.worksheets:
        _widths(ws)
    buf = io.BytesIO()
    wb.save(buf)
    return [atomic.write_bytes(Path(path), cache.fill(buf.getvalue(), wb.sheetnames))]
