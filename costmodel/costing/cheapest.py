"""From evaluated points (flat PointSummary rows) to what a planner reads: each point priced and
checked against the SLO, the cheapest SLO-meeting configuration per (hardware, mode, QPS), the
cheapest option per QPS and the crossover. `plan` and `report` share it, so a report re-prices a
plan without re-simulating (the fewest replicas meeting an SLO does not depend on price)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from costmodel.hardware import HardwareSpec
from costmodel.modes import mode_order
from costmodel.costing.costs import add_costs, cost_of_row
from costmodel.costing.crossover import Crossover, best_cell_records, best_per_cell, cheapest_per_qps, find_crossover, overlaps, ties
from costmodel.costing.verdict import PASS, judge
from costmodel.costing.pricing import GpuPrice, PricingConfig, gpu_price
from costmodel.slo import Slo

LEAD_COLUMNS = (
    "hardware", "mode", "qps", "meets_slo", "replicas", "gpus", "cost_usd_per_month", "replicas_low", "cost_usd_per_month_low", "borderline", "cost_usd_per_hour", "cost_usd_per_mtok_output",
    "cost_usd_per_mtok_total", "cost_usd_per_1k_requests", "energy_kwh_per_mtok_output", "cheapest_at_qps", "slo", "slo_failures", "evaluations",
)


@dataclass
class Analysis:
    slo: Slo
    pricing: PricingConfig
    prices: dict[str, GpuPrice]
    points: pd.DataFrame  # every evaluated point, priced, with meets_slo and slo_failures
    cells: pd.DataFrame  # one row per (hardware, mode, qps): its cheapest SLO-meeting point, or why none meets
    cheapest: pd.DataFrame  # one row per QPS
    crossover: Crossover
    crossover_by_hardware: dict[str, Crossover] = field(default_factory=dict)
    qps: list[float] = field(default_factory=list)  # every evaluated QPS (the crossover's bisection points included)
    loads: list[float] = field(default_factory=list)  # the loads asked about, the ones the answer is given for (default: qps)
    _best: tuple | None = field(default=None, init=False, repr=False, compare=False)  # best_frame() and its records, once computed

    def best_frame(self) -> pd.DataFrame:
        """best_per_cell(points), once per analysis: the answer's lines, its CSV and the report's charts each read it."""
        if self._best is None:
            best = best_per_cell(self.points)
            self._best = (best, best.to_dict("records"))
        return self._best[0]

    def best_records(self) -> list[dict]:
        """best_frame() as records."""
        self.best_frame()
        return self._best[1]


def _winners(best: pd.DataFrame, cheapest: pd.DataFrame) -> dict[tuple, float]:
    """(qps, hardware, mode) -> monthly cost of every cheapest option per QPS, the options tied with it included."""
    out = {}
    by_qps: dict = {}
    for x in best[[c for c in ("qps", "hardware", "mode", "cost_usd_per_month", "cost_usd_per_month_low") if c in best.columns]].to_dict("records"):
        by_qps.setdefault(x["qps"], []).append(x)
    for r in cheapest.to_dict("records"):
        if r["none_meets"]:
            continue
        lo, hi = float(r.get("cost_usd_per_month_low", r["cost_usd_per_month"])), float(r["cost_usd_per_month"])
        for x in by_qps.get(r["qps"], []):
            if ties(float(x["cost_usd_per_month"]), hi) or overlaps(float(x["cost_usd_per_month_low"]), float(x["cost_usd_per_month"]), lo, hi):
                out[(r["qps"], x["hardware"], x["mode"])] = float(x["cost_usd_per_month"])
    return out


def _borderline_below(tried: list[dict], replicas: int) -> str:
    """The counts below a cell's settled one whose verdict is borderline, with why: '1 replica: ttft_ms_p95 980 against 1000: borderline (...)'."""
    b = sorted(((int(r["replicas"]), r["slo_failures"]) for r in tried if r.get("slo_verdict") == "borderline" and r["replicas"] < replicas),
               key=lambda x: x[0])
    return "; ".join(f"{n} replica{'s' if n != 1 else ''}: {why}" for n, why in b)


def _order_key(q, hardware, mode, replicas) -> tuple:
    """A row's place in analyse's order: by QPS, GPU, mode (the modes' order) and replicas (ties keep their order)."""
    return q, hardware, mode_order(mode), replicas


def _order(df: pd.DataFrame) -> pd.DataFrame:
    """The rows in _order_key's order: a stable sort of the rows' positions on these four columns' values (one take of
    the wide rows, not a frame sorted with a key column)."""
    if df.empty:
        return df
    keys = list(map(_order_key, df["qps"].tolist(), df["hardware"].tolist(), df["mode"].tolist(), df["replicas"].tolist()))
    return df.take(sorted(range(len(keys)), key=keys.__getitem__)).reset_index(drop=True)


def _marked(pts: pd.DataFrame, win: dict[tuple, float]) -> list[bool]:
    """Per point: whether it is the first SLO-meeting point of a winning option (`win`: (qps, hardware, mode) -> its monthly
    cost; np.isclose's tolerance), so that one row per winner is marked."""
    marked, seen = [False] * len(pts), set()
    cols = (pts[c].tolist() for c in ("qps", "hardware", "mode", "meets_slo", "cost_usd_per_month"))
    for i, (q, h, m, ok, usd) in enumerate(zip(*cols)):
        want = win.get((q, h, m))
        if ok and want is not None and (q, h, m) not in seen and abs(usd - want) <= 1e-8 + 1e-5 * abs(want):
            marked[i] = True
            seen.add((q, h, m))
    return marked


VERDICT_COLUMNS = ("meets_slo", "slo_verdict", "slo_meets_on_mean")  # what a judged point carries of its verdict (the analysis and the crossover search)


def _verdict_fields(v) -> dict:
    """A point's VERDICT_COLUMNS from its verdict (costmodel/costing/verdict.py)."""
    return {"meets_slo": v.status == PASS, "slo_verdict": v.status, "slo_meets_on_mean": v.meets_on_mean}


def _judged(points: pd.DataFrame, slo: Slo, prices: dict) -> pd.DataFrame:
    """The points priced and judged: pass / fail / borderline on the replications' intervals (verdict.py)."""
    points = points.reset_index(drop=True)
    records = points.to_dict("records")  # once: the costs and the verdicts read the same rows
    pts = add_costs(points, prices, records)
    pts["qps"] = pts["qps"].astype(float)
    verdicts = [judge(r, slo) for r in records]
    fields = [_verdict_fields(v) for v in verdicts]
    for column in VERDICT_COLUMNS:
        pts[column] = [f[column] for f in fields]
    pts["slo_failures"] = [v.text for v in verdicts]
    pts["slo"] = slo.text or "stable"
    return _order(pts)


def _cells(pts: pd.DataFrame, best: pd.DataFrame, slo: Slo, qps_values, hardware, modes, cell_notes) -> list[dict]:
    """One row per (QPS, GPU, mode): its cheapest passing fleet, else why none passed (of the counts tried, or
    the search's note for a cell it skipped); a cell with neither is left out."""
    best_at = {(r["hardware"], r["mode"], float(r["qps"])): r for r in best.to_dict("records")}
    tried_at: dict = {}  # (hardware, mode, qps) -> the cell's rows (the columns read here), in pts' order
    for r in pts[["hardware", "mode", "qps", "replicas", "slo_verdict", "slo_failures"]].to_dict("records"):
        tried_at.setdefault((r["hardware"], r["mode"], r["qps"]), []).append(r)
    cells = []
    for q in qps_values:
        for h in hardware:
            for m in modes:
                b = best_at.get((h, m, q))
                tried = tried_at.get((h, m, q), [])
                if b is not None:
                    row = dict(b)
                    row["borderline"] = _borderline_below(tried, int(row["replicas"]))
                elif tried:
                    last = max(reversed(tried), key=lambda r: r["replicas"])  # the largest count tried (the last of equals)
                    top = int(last["replicas"])
                    row = {"hardware": h, "mode": m, "qps": q, "meets_slo": False, "slo": pts["slo"].iloc[0],
                           "slo_failures": f"no fleet of up to {top} replicas meets the SLO (of the counts tried); at {top}: {last['slo_failures']}"}
                elif cell_notes and (h, m, q) in cell_notes:
                    row = {"hardware": h, "mode": m, "qps": q, "meets_slo": False, "slo": slo.text or "stable", "slo_failures": cell_notes[(h, m, q)]}
                else:
                    continue
                row["evaluations"] = len(tried)
                cells.append(row)
    return cells


def analyse(points: pd.DataFrame, slo: Slo, pricing: PricingConfig, specs: dict[str, HardwareSpec], qps=None,
            cell_notes: dict | None = None, loads=None) -> Analysis:
    """Price and judge `points`; `specs` maps every hardware id in them to its catalog entry;
    `cell_notes[(hardware, mode, qps)]` explains cells with no point (e.g. skipped by the search);
    `loads`: the QPS the answer is given for (default: every QPS; a plan's crossover search adds its own). The
    crossovers alone, without the rest: `crossovers`."""
    pricing.check_hardware(specs)
    prices = {h: gpu_price(s, pricing) for h, s in specs.items()}
    pts = _judged(points, slo, prices)
    qps_values = sorted(set(float(q) for q in (qps if qps is not None else pts["qps"])))
    hardware = list(dict.fromkeys(specs))
    modes = sorted(set(pts["mode"]) | {m for (_, m, _) in (cell_notes or {})}, key=mode_order)

    best = best_per_cell(pts)
    cells = _cells(pts, best, slo, qps_values, hardware, modes, cell_notes)
    # the same columns whether or not any cell meets the SLO (a finance CSV keeps one schema)
    columns = list(LEAD_COLUMNS) + [c for c in pts.columns if c not in LEAD_COLUMNS]
    cells_df = pd.DataFrame(cells, columns=columns)
    cheapest = cheapest_per_qps(pts, qps_values, best)
    win = _winners(best, cheapest)
    if not cells_df.empty:
        cells_df["cheapest_at_qps"] = [(r["qps"], r["hardware"], r["mode"]) in win for r in cells_df.to_dict("records")]
        for c in ("replicas", "gpus", "evaluations", "replicas_low"):
            if c in cells_df:
                cells_df[c] = cells_df[c].astype("Int64")
        cells_df["meets_slo"] = cells_df["meets_slo"].astype(bool)
    pts["cheapest_at_qps"] = _marked(pts, win)
    lead = [c for c in LEAD_COLUMNS if c in pts.columns]
    pts = pts[lead + [c for c in pts.columns if c not in lead]]
    asked = sorted(set(float(q) for q in loads)) if loads is not None else qps_values
    return _with_crossovers(Analysis(slo, pricing, prices, pts, cells_df, cheapest, None, {}, qps_values, asked), cell_notes, hardware)


def _with_crossovers(a: Analysis, cell_notes: dict | None, hardware: list[str]) -> Analysis:
    """The analysis with its crossovers (_crossovers), read off its points and the best rows kept for the answer."""
    pts = a.points
    a.crossover, a.crossover_by_hardware = _crossovers(pts, zip(pts["hardware"].tolist(), pts["qps"].tolist()), a.best_records(), a.qps,
                                                       cell_notes, hardware)
    return a


def _crossovers(options, evaluated_at, best: list[dict], qps_values: list[float], cell_notes: dict | None,
                hardware: list[str]) -> tuple[Crossover, dict[str, Crossover]]:
    """The crossover over every GPU and each GPU's, each over the QPS where every GPU of its scope was evaluated
    (`evaluated_at`: the points' (hardware, qps) pairs; the cells the search skipped count as evaluated)."""
    seen = {(h, float(q)) for h, q in evaluated_at} | {(h, float(q)) for (h, _, q) in (cell_notes or {})}

    def evaluated(scope: list[str]) -> list[float]:
        """The QPS where every GPU of a crossover's scope was evaluated (a crossover-search QPS may have probed one GPU only)."""
        return [q for q in qps_values if all((h, q) in seen for h in scope)]

    return (find_crossover(options, evaluated(hardware), best=best),
            {h: find_crossover(options, evaluated([h]), hardware=h, best=best) for h in hardware})


def crossovers(points: list[dict], slo: Slo, pricing: PricingConfig, specs: dict[str, HardwareSpec], qps=None,
               cell_notes: dict | None = None) -> tuple[Crossover, dict[str, Crossover]]:
    """analyse(...).crossover and .crossover_by_hardware alone, from the points as records (flat PointSummary rows): each
    priced and judged as analyse does, in its order, the best per cell chosen as best_per_cell chooses, without a frame.
    A plan's crossover search asks after every round, and framing its ~130 points of ~100 columns cost more than the rest."""
    pricing.check_hardware(specs)
    prices = {h: gpu_price(s, pricing) for h, s in specs.items()}
    rows = [{"hardware": r["hardware"], "mode": r["mode"], "qps": float(r["qps"]), "replicas": r["replicas"],
             **cost_of_row(r, prices[r["hardware"]]).to_dict(), **_verdict_fields(judge(r, slo))} for r in points]
    keys = [_order_key(r["qps"], r["hardware"], r["mode"], r["replicas"]) for r in rows]
    rows = [rows[i] for i in sorted(range(len(rows)), key=keys.__getitem__)]
    qps_values = sorted(set(float(q) for q in (qps if qps is not None else (r["qps"] for r in rows))))
    return _crossovers(rows, ((r["hardware"], r["qps"]) for r in rows), best_cell_records(rows), qps_values, cell_notes, list(dict.fromkeys(specs)))
