"""Compare a re-timed op table with the base one unit by unit (kernel and ms before and after),
and print the selfcheck of the re-run: what a re-timing changed, for its log.

    python -m measure.ops.compare BASE_DIR RERUN_DIR
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from measure.ops.table import read_rows


def _key(r: dict) -> tuple:
    return (r["precision"], r["op"], r.get("m", ""), r.get("seqs", ""), r.get("q", ""), r.get("ctx", ""))


def compare(base: Path, rerun: Path) -> list[str]:
    old = {_key(r): r for r in read_rows(base / "ops.csv")}
    lines = [f"{'prec':4} {'op':26} {'shape':14} {'old ms':>9} {'new ms':>9} {'ratio':>6}  kernel (new; old if changed)"]
    for r in read_rows(rerun / "ops.csv"):
        o = old.get(_key(r))
        shape = f"m={r['m']}" if r.get("m") else f"{r['seqs']}x{r['q']} c{r['ctx']}"
        new_ms = float(r["ms"]) if r.get("ms") else float("nan")
        old_ms = float(o["ms"]) if o and o.get("ms") else float("nan")
        changed = "" if not o or o.get("kernel") == r.get("kernel") else f"; was {o.get('kernel')}"
        lines.append(f"{r['precision']:4} {r['op']:26} {shape:14} {old_ms:9.4f} {new_ms:9.4f} {new_ms / old_ms:6.2f}  "
                     f"{r.get('kernel') or r.get('fallback', '')[:80]}{changed}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("rerun")
    a = ap.parse_args(argv)
    for line in compare(Path(a.base), Path(a.rerun)):
        print(line)
    meta = Path(a.rerun) / "meta.json"
    if meta.exists():
        m = json.loads(meta.read_text())
        bad = {k: v for k, v in (m.get("selfcheck") or {}).items() if not isinstance(v, float)}
        print("disabled:", json.dumps(m.get("disabled_kernels", {})))
        print("selfcheck non-numeric:", json.dumps(bad)[:1500])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
