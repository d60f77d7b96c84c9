"""The budget workbook (`costmodel report RESULTS -o budget.xlsx`, openpyxl): four sheets a finance
reviewer can edit and recompute in any spreadsheet program.

- Prices: one row per GPU, its pricing model and every price input in editable (yellow) cells; the
  effective USD per GPU-hour is a formula of them (on-demand, reserved, spot, on-prem alike).
- Fleet: per (QPS, GPU, mode) the SLO-meeting fleet; USD per hour, month and year and USD per 1M
  output tokens are formulas of the Prices sheet; unstable or SLO-missing rows are flagged, their
  costs blank.
- Summary: per QPS the cheapest fleet at the workbook's current prices (MIN / INDEX-MATCH over the
  Fleet rows, so a price change can change the winner), or the tie named whole (TEXTJOIN of every
  option within 1%) and how many options tie with it, next to
  the answer as planned (its words are plan's: costmodel/costing/answer.py) and the crossover.

Every formula carries its computed value (reports/xlsx_values.py), so pandas and previewers read
numbers without a spreadsheet program; booleans are booleans.
- Assumptions: every input with its basis (measured / prior / projected) and source.
- Sensitivity (when the plan ran --sensitivity): the decision at both ends of each input's range.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd
from openpyxl import Workbook
from openpyxl.styles import Font, PatternFill
from openpyxl.utils import get_column_letter
from openpyxl.worksheet.formula import ArrayFormula

from costmodel import atomic
from costmodel.modes import mode_order
from costmodel.costing import HOURS_PER_MONTH, HOURS_PER_YEAR, TIE_FRAC, Analysis, GpuPrice, fleet_name, get_model
from reports.decision import decisions, seed_intervals, sensitivity_view
from reports.finance import assumptions
from reports.sources import Results
from reports.xlsx_values import FormulaValues

INPUT = PatternFill("solid", fgColor="FFF2CC")  # editable cells
BOLD = Font(bold=True)
TIE_TEXT = "tie (the same monthly cost, no winner): "
PRICE_COLUMNS = ("GPU", "pricing model", "on-demand USD per GPU-hour", "purchase USD per GPU", "host USD per GPU", "amortisation years",
                 "discount (reserved or spot, 0-1)", "spot availability (0-1)", "effective USD per GPU-hour", "how", "source")


def _rate_formula(model: str, r: int) -> str:
    """The effective USD per GPU-hour of Prices row `r` under `model` (columns C..H of PRICE_COLUMNS)."""
    if get_model(model).owned:
        return f"=(D{r}+E{r})/(F{r}*{HOURS_PER_YEAR:g})"
    if model.startswith("reserved"):
        return f"=C{r}*(1-G{r})"
    if model == "spot":
        return f"=C{r}*(H{r}*(1-G{r})+(1-H{r}))"
    return f"=C{r}"


def _rate_value(model: str, c: float, d: float, e: float, f: float, g: float, h: float) -> float:
    """What _rate_formula evaluates to on the same cells (its cached value)."""
    if get_model(model).owned:
        return (d + e) / (f * HOURS_PER_YEAR) if f else math.nan
    if model.startswith("reserved"):
        return c * (1 - g)
    if model == "spot":
        return c * (h * (1 - g) + (1 - h))
    return c


def _prices_sheet(ws, a: Analysis, cache: FormulaValues) -> dict[str, tuple[str, float]]:
    """Writes Prices; returns hardware -> (the absolute reference of its effective rate cell, its value)."""
    ws.append(PRICE_COLUMNS)
    refs = {}
    for i, (hw, p) in enumerate(a.prices.items(), start=2):
        t = p.terms
        discount = t.get(f"reserved_{int(p.term_years)}y_discount", t.get("spot_discount", 0.0)) if not get_model(p.basis).owned else 0.0
        inputs = [p.on_demand_usd_per_gpu_hour, p.purchase_usd or 0.0, t.get("host_usd_per_gpu", 0.0), p.amortisation_years or 0.0,
                  discount, t.get("spot_availability", 1.0)]
        ws.append([hw, p.basis, *inputs, None, get_model(p.basis).description, p.rate_source])
        cache.put(ws, f"I{i}", _rate_formula(p.basis, i), _rate_value(p.basis, *(float(x) for x in inputs)))
        for col in "CDEFGH":
            ws[f"{col}{i}"].fill = INPUT
        refs[hw] = (f"Prices!$I${i}", cache.values[(ws.title, f"I{i}")])
    n = len(a.prices) + 3
    ws.cell(n, 1, "hours per month").font = BOLD
    ws.cell(n, 3, HOURS_PER_MONTH)
    ws.cell(n + 1, 1, "hours per year").font = BOLD
    ws.cell(n + 1, 3, HOURS_PER_YEAR)
    ws.cell(n + 2, 1, "Yellow cells are inputs: change a price and every cost in Fleet and Summary recomputes.")
    return refs


def _fleet_rows(res: Results, a: Analysis) -> pd.DataFrame:
    """The Fleet rows: by QPS, then cheapest first with a tie in the plan's order (fewer GPUs, then the
    mode registry), so the Summary's MATCH finds the option the plan names first."""
    df = a.cells if res.kind == "plan" and not a.cells.empty else a.points
    df = df[df["replicas"].notna()]
    key = df.assign(_usd=df["cost_usd_per_month"].where(df["meets_slo"].astype(bool) if "meets_slo" in df else True).fillna(math.inf),
                    _m=df["mode"].map(mode_order))
    return key.sort_values(["qps", "_usd", "gpus", "_m"], kind="mergesort").drop(columns=["_usd", "_m"]).reset_index(drop=True)


FLEET_COLUMNS = ("QPS", "GPU", "mode", "replicas", "GPUs", "meets SLO", "flag", "electricity USD per GPU-hour", "USD per hour", "USD per month",
                 "USD per year", "output tokens per s", "USD per 1M output tokens", "p95 TTFT ms", "p95 E2E ms", "option")


def _fleet_sheet(ws, res: Results, rows: pd.DataFrame, prices: dict[str, GpuPrice], refs: dict[str, tuple[str, float]],
                 cache: FormulaValues) -> list[float]:
    """Writes Fleet (costs as formulas of Prices, each with its cached value); returns each row's USD per month (NaN: misses)."""
    ws.append(FLEET_COLUMNS)
    months = []
    for i, r in enumerate(rows.to_dict("records"), start=2):
        ok = bool(r.get("meets_slo", r.get("stable", True)))
        flag = "" if ok else ("UNSTABLE" if not r.get("stable", True) else f"misses SLO: {str(r.get('slo_failures', ''))[:60]}")
        elec = round(prices[r["hardware"]].electricity_usd_per_gpu_hour(float(r.get("gpu_busy_frac") or 0.0)), 6)
        out_tps = round(float(r.get("output_tokens_per_s") or 0.0), 1)
        lat = [round(float(r[c]), 1) if ok and pd.notna(r.get(c)) else "" for c in ("ttft_ms_p95", "e2e_ms_p95")]
        ws.append([float(r["qps"]), r["hardware"], r["mode"], int(r["replicas"]), int(r["gpus"]), ok, flag, elec,
                   None, None, None, out_tps, None, *lat, fleet_name(r, res.profiles.get(str(r["hardware"]), {}))])
        ref, rate = refs[r["hardware"]]
        hour = int(r["gpus"]) * (rate + elec)
        months.append(hour * HOURS_PER_MONTH if ok else math.nan)
        if not ok:
            continue
        cache.put(ws, f"I{i}", f"=E{i}*({ref}+H{i})", hour)
        cache.put(ws, f"J{i}", f"=I{i}*{HOURS_PER_MONTH:g}", hour * HOURS_PER_MONTH)
        cache.put(ws, f"K{i}", f"=I{i}*{HOURS_PER_YEAR:g}", hour * HOURS_PER_YEAR)
        cache.put(ws, f"M{i}", f"=IF(L{i}>0,I{i}/(L{i}*3600)*1000000,\"\")", hour / (out_tps * 3600) * 1e6 if out_tps > 0 else "")
    return months


SUMMARY_COLUMNS = ("QPS", "cheapest fleet at these prices", "USD per month", "USD per year", f"options tied with it (within {TIE_FRAC:.0%})",
                   "as planned", "tie as planned", "runner-up as planned", "runner-up costs more (USD/month, as planned)", "winner rests on")


def _summary_sheet(ws, res: Results, a: Analysis, rows: pd.DataFrame, months: list[float], cache: FormulaValues) -> None:
    ws.append(SUMMARY_COLUMNS)
    qps = rows["qps"].astype(float).tolist()
    for i, d in enumerate(decisions(res, a), start=2):
        block = [k + 2 for k, q in enumerate(qps) if q == d.qps]  # Fleet rows of this load (contiguous: sorted by QPS)
        meets = d.meets and bool(block)
        ws.append([d.qps, None if meets else "no option meets the SLO", None, None, None, d.fleet if d.meets else "", d.tie, d.runner_up,
                   "" if math.isnan(d.runner_up_more_usd_per_month) else round(d.runner_up_more_usd_per_month, 2), d.rests_on])
        if not meets:
            continue
        month, names = f"Fleet!$J${block[0]}:$J${block[-1]}", f"Fleet!$P${block[0]}:$P${block[-1]}"
        usd = [months[k - 2] for k in block]
        low = min((x for x in usd if not math.isnan(x)), default=math.nan)
        first = next((k for k, x in zip(block, usd) if x == low), block[0])
        tied = [ws.parent["Fleet"][f"P{k}"].value for k, x in zip(block, usd) if not math.isnan(x) and x <= low * (1 + TIE_FRAC)]
        # one option, or the tie named whole (every option within TIE_FRAC of the cheapest; none wins)
        winner = ArrayFormula(f"B{i}", f'=IF(E{i}>0,"{TIE_TEXT}"&_xlfn.TEXTJOIN(" = ",TRUE,IF(ISNUMBER({month})*({month}<=C{i}*{1 + TIE_FRAC:g}),'
                                       f'{names},"")),INDEX({names},MATCH(C{i},{month},0)))')
        cache.put(ws, f"B{i}", winner, TIE_TEXT + " = ".join(tied) if len(tied) > 1 else ws.parent["Fleet"][f"P{first}"].value)
        cache.put(ws, f"C{i}", f"=MIN({month})", low)
        cache.put(ws, f"D{i}", f"=C{i}*{HOURS_PER_YEAR / HOURS_PER_MONTH:g}", low * HOURS_PER_YEAR / HOURS_PER_MONTH)
        cache.put(ws, f"E{i}", f'=COUNTIF({month},"<="&C{i}*{1 + TIE_FRAC:g})-1', len(tied) - 1)
    k = ws.max_row + 2
    ws.cell(k, 1, f"SLO: {a.slo.text or 'stable only'}; pricing: {a.pricing.model}; month = {HOURS_PER_MONTH:g} h. "
                  "Costs recompute from the Prices sheet; 'as planned' columns are the report's answer at the prices it was made with. "
                  f"Options within {TIE_FRAC:.0%} of each other's monthly cost are a tie: all are named, none wins.")
    notes = [f"{q:g} QPS over {text}; {more}" for q, (text, more) in seed_intervals(res).items()]
    if a.crossover.status != "not-compared":
        notes.append(a.crossover.text)
    sens = sensitivity_view(res)
    if sens is not None:
        notes.append(f"Sensitivity (plan --sensitivity, at the plan's prices): {sens.verdict} (sheet Sensitivity)")
    for i, line in enumerate(notes, start=k + 1):
        ws.cell(i, 1, line)


def _assumptions_sheet(ws, res: Results, a: Analysis) -> None:
    ws.append(("basis", "input", "what it is", "GPU", "source"))
    for r in assumptions(res, a):
        ws.append((r.basis, r.part, r.figure, r.hardware, r.source))
    for hw, p in a.prices.items():
        ws.append(("prior", "on-demand price", f"${p.on_demand_usd_per_gpu_hour:g} per GPU-hour", hw, p.rate_source))
        for k, v in p.terms.items():
            ws.append(("prior", f"pricing term {k}", f"{v:g}", hw, p.term_sources.get(k, "")))
    ws.append(("prior", "SLO", a.slo.text or "stable only", "all", "plan --slo / report --slo"))
    for k in ("duration_s", "seed", "workload"):
        if res.settings.get(k) not in (None, ""):
            ws.append(("prior", f"simulation {k}", str(res.settings[k]), "all", f"{res.kind} settings"))


def _widths(ws) -> None:
    for col in ws.columns:
        n = max((len(str(c.value)) for c in col if c.value is not None and not str(c.value).startswith("=")), default=8)
        ws.column_dimensions[get_column_letter(col[0].column)].width = min(max(n + 2, 10), 60)
    ws.freeze_panes = "A2"
    for c in ws[1]:
        c.font = BOLD


def write_workbook(res: Results, a: Analysis, path: str | Path) -> list[Path]:
    """Summary, Fleet, Assumptions and Prices sheets, formulas linking them, each formula with its
    value cached (readers that do not calculate see the numbers); written atomically."""
    wb = Workbook()
    summary = wb.active
    summary.title = "Summary"
    fleet, assume, prices = wb.create_sheet("Fleet"), wb.create_sheet("Assumptions"), wb.create_sheet("Prices")
    cache = FormulaValues()
    refs = _prices_sheet(prices, a, cache)
    rows = _fleet_rows(res, a)
    months = _fleet_sheet(fleet, res, rows, a.prices, refs, cache)
    _summary_sheet(summary, res, a, rows, months, cache)
    _assumptions_sheet(assume, res, a)
    sheets = [summary, fleet, assume, prices]
    sens = sensitivity_view(res)
    if sens is not None:
        ws = wb.create_sheet("Sensitivity")
        ws.append(list(sens.table.columns))
        for r in sens.table.itertuples(index=False):
            ws.append(["" if isinstance(v, float) and math.isnan(v) else v for v in r])
        sheets.append(ws)
    for ws in sheets:
        _widths(ws)
    buf = io.BytesIO()
    wb.save(buf)
    return [atomic.write_bytes(path, cache.fill(buf.getvalue(), wb.sheetnames))]
