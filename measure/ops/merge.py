"""Replace the rows of some op families in an op table with a re-timed table's rows (unit by unit),
keeping the re-run's provenance in meta.json["reruns"].

    python -m measure.ops.merge BASE_DIR RERUN_DIR --families attn --why "..."
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from measure.ops.table import COLUMNS, read_rows


def _key(r: dict) -> tuple:
    return tuple(r.get(k, "") for k in ("precision", "op", "m", "seqs", "q", "ctx"))


def merge(base: Path, rerun: Path, families: set[str], why: str) -> tuple[int, int]:
    """The re-run's rows of `families` replace the base rows of the same unit (precision, op, shape);
    base rows the re-run did not time (a partial re-run, e.g. small m only) stay."""
    new = [r for r in read_rows(rerun / "ops.csv") if r["family"] in families]
    redone = {_key(r) for r in new}
    rows = [r for r in read_rows(base / "ops.csv") if _key(r) not in redone]
    with (base / "ops.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows + new:
            w.writerow({k: r.get(k, "") for k in COLUMNS})
    m = json.loads((base / "meta.json").read_text())
    mn = json.loads((rerun / "meta.json").read_text())
    m.setdefault("reruns", []).append({"families": sorted(families), "date": mn.get("date"), "command": mn.get("command"),
                                       "wall_s": mn.get("wall_s"), "selfcheck": mn.get("selfcheck"), "status": mn.get("status"),
                                       "missing_count": mn.get("missing_count"), "why": why})
    (base / "meta.json").write_text(json.dumps(m, indent=1))
    return len(rows), len(new)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("base")
    ap.add_argument("rerun")
    ap.add_argument("--families", required=True)
    ap.add_argument("--why", required=True)
    a = ap.parse_args(argv)
    kept, new = merge(Path(a.base), Path(a.rerun), set(a.families.split(",")), a.why)
    print(f"{a.base}: kept {kept} rows, {new} re-timed rows from {a.rerun}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
