"""The day's budget workbook (`costmodel report DAYDIR -o day.xlsx`, openpyxl), answer first:

- Summary: the answer as planned (text), and the cheapest fleet meeting the SLO every hour at the
  workbook's current prices (MIN / INDEX-MATCH over Month's meeting rows, so a price edit can change it).
- Month: every fleet's day and month; USD per day, month and year are formulas of the Prices sheet
  beside the values as simulated (a reader without recalculation sees those); fleets missing the
  SLO listed last, flagged.
- Hours: the fleet hour by hour, USD per hour a formula of the Prices sheet.
- Prices: one editable (yellow) USD per GPU-hour per GPU under the day's pricing model.
- Pricing models, Price sensitivity, Assumptions: the tables of reports/day.py as values.
"""

from __future__ import annotations

import io
from pathlib import Path

from openpyxl import Workbook
from openpyxl.styles import Font, PatternFill
from openpyxl.utils import get_column_letter

from costmodel import atomic
from costmodel.costing import HOURS_PER_MONTH, HOURS_PER_YEAR
from costmodel.costing.day import committed
from costmodel.schemas.day import DayRecord
from costmodel.costing.day_answer import answer, day_basis
from reports.day import billed_gpu_hours, fleet_key, owned, price_sensitivity, prices, pricing, pricing_models_table

INPUT = PatternFill("solid", fgColor="FFF2CC")
BOLD = Font(bold=True)
DAYS_PER_MONTH_CELL = "Prices!$C$2"


def _prices_sheet(ws, day: DayRecord, ps: dict) -> dict[str, str]:
    ws.append(("GPU", "pricing model", "USD per GPU-hour (edit)", "on-demand USD per GPU-hour", "billed for", "electricity USD per kWh", "PUE", "source"))
    ws.cell(2, 1, "days per month")
    ws.cell(2, 3, HOURS_PER_MONTH / 24)
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
                 "USD per day", "USD per month", "USD per year", "USD per month (as simulated)", "flag")


def _month_sheet(ws, day: DayRecord, ps: dict, refs: dict) -> int:
    """Returns how many rows (from row 2) meet the SLO every hour (they come first)."""
    ws.append(MONTH_COLUMNS)
    meeting = 0
    for i, b in enumerate(day.bills, start=2):
        p = ps.get(b.hardware)
        ok = b.meets_slo_every_hour
        meeting += ok
        has = p is not None and not b.note
        elec = (b.energy_kwh_per_day * p.pue * p.electricity_usd_per_kwh) if has and owned(p) else 0.0
        costs = [f"=M{i}*{refs[b.hardware]}+N{i}", f"=O{i}*{DAYS_PER_MONTH_CELL}", f"=P{i}*{HOURS_PER_YEAR / HOURS_PER_MONTH:g}"] if has else ["", "", ""]
        flag = "" if ok else (b.note or f"misses the SLO in {b.hours - b.hours_meeting_slo} of {b.hours} hours")
        ws.append([fleet_key(b), b.hardware, b.mode, b.policy, ok, b.hours_meeting_slo, b.hours, b.replicas_min, b.replicas_max, b.requests_per_day,
                   b.slo_attainment if b.slo_attainment == b.slo_attainment else None, b.gpu_hours_per_day,
                   billed_gpu_hours(b, p) if has else None, round(elec, 4), *costs,
                   b.cost_usd_per_month if b.cost_usd_per_month == b.cost_usd_per_month else None, flag])
    return meeting


HOUR_COLUMNS = ("hour", "GPU", "mode", "policy", "offered QPS", "replicas mean", "replicas max", "SLO attainment", "meets SLO", "GPU-hours",
                "USD (as simulated)", "USD at these prices")


def _hours_sheet(ws, day: DayRecord, ps: dict, refs: dict) -> None:
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
                   round(float(r["gpu_hours"]), 4), round(float(r["cost_usd"]), 4),
                   f"={held:.6g}*{refs[r['hardware']]}" if p is not None else ""])


def _summary_sheet(ws, day: DayRecord, meeting: int) -> None:
    a = answer(day)
    ws.append(("The answer (as planned)", a.text))
    if a.projected:
        ws.append(("Projection", f"The winner rests on {a.rests_on}. Measure that GPU before committing to it."))
    ws.append(("Load", day.load))
    ws.append(("SLO (every hour)", day.slo))
    ws.append(("Pricing", pricing(day).model))
    ws.append(())
    r = ws.max_row + 1
    ws.append(("Cheapest fleet meeting the SLO every hour at these prices", "USD per month", "USD per year"))
    if meeting:
        rng = f"Month!$P$2:$P${meeting + 1}"
        ws.append((f"=INDEX(Month!$A$2:$A${meeting + 1},MATCH(B{r + 1},{rng},0))", f"=MIN({rng})", f"=B{r + 1}*{HOURS_PER_YEAR / HOURS_PER_MONTH:g}"))
    else:
        ws.append(("no fleet meets the SLO in every hour", None, None))
    ws.append(())
    ws.append(("Fleets missing the SLO in any hour are listed after those meeting it in Month, flagged, and never chosen here.",))


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
    ps = prices(day)
    wb = Workbook()
    summary = wb.active
    summary.title = "Summary"
    month, hours, price_ws = wb.create_sheet("Month"), wb.create_sheet("Hours"), wb.create_sheet("Prices")
    refs = _prices_sheet(price_ws, day, ps)
    meeting = _month_sheet(month, day, ps, refs)
    _hours_sheet(hours, day, ps, refs)
    _summary_sheet(summary, day, meeting)
    table, _ = pricing_models_table(day)
    _values_sheet(wb.create_sheet("Pricing models"), table)
    _values_sheet(wb.create_sheet("Price sensitivity"), price_sensitivity(day))
    _assumptions_sheet(wb.create_sheet("Assumptions"), day)
    for ws in wb.worksheets:
        _widths(ws)
    buf = io.BytesIO()
    wb.save(buf)
    return [atomic.write_bytes(Path(path), buf.getvalue())]
