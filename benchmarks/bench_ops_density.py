"""What a coarser ops grid costs in accuracy (the density `--budget-s` trades for time,
measure/ops/grids.py): a full-grid ops run's table thinned to each coarser level's units, every pass
kind composed at its profile-table grid, against the full table composed.

    python benchmarks/bench_ops_density.py data/runs/ops/cli-20261125/h100-fp8-b
"""
import json
import pathlib
import statistics
import sys

from measure.ops import kernelset
from measure.ops.campaign import plan_units
from measure.ops.grids import plan_grid
from measure.ops.passtable import GRIDS, build_table
from measure.ops.table import OpTable, read_rows, unit_key

run = pathlib.Path(sys.argv[1])
rows = read_rows(run / "ops.csv")
meta = json.loads((run / "meta.json").read_text())
prec, hw = meta["precisions"][0], meta["hardware"]
full = OpTable(rows, meta)
ks = kernelset.load(meta["kernel_set"])
units, smoke = plan_units([prec]), plan_units([prec], smoke=True)
print(f"{run} ({hw}, {prec}), full grid: {len(units)} units")
for lv in ("half", "coarse", "smoke"):
    g = plan_grid(units, ks, 0, force=lv, smoke_units=smoke)
    keep = {unit_key(pr, o.name, at) for pr, o, at in g.units}
    t = OpTable([r for r in rows if unit_key(r["precision"], r["op"], kernelset.row_axes(r)) in keep], meta)
    errs = []
    for kind in GRIDS:
        a, b = build_table(t, kind, prec, hw), build_table(full, kind, prec, hw)
        errs += [abs(x / y - 1) * 100 for pa, pb in zip(a.ms, b.ms) for ra, rb in zip(pa, pb) for x, y in zip(ra, rb)]
    print(f"{lv}: {len(g.units)} units, est {g.est_s:.0f} s: pass-table error vs the full grid median {statistics.median(errs):.2f}%, "
          f"p95 {sorted(errs)[int(0.95 * len(errs))]:.2f}%, max {max(errs):.1f}%, within 5% {sum(e <= 5 for e in errs) / len(errs):.1%}")
