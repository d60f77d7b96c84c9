"""Two operator runs side by side, unit by unit: e.g. vLLM's own MoE (`costmodel measure --engine
ops --kernel-set vllm --ops-families moe`) against this project's kernels timed on the same machine.

Prints per unit (precision, op, shape) both times, their ratio and both kernels, and for each op the
difference a decode step of the catalog model pays for it at one token, summed over its layers
(an op of every decoder layer runs once per layer).

    .venv/bin/python benchmarks/compare_op_runs.py RUN_A RUN_B [--model gemma4-26b-a4b]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from costmodel.models import get_model  # noqa: E402
from measure.ops.kernelset import row_axes  # noqa: E402
from measure.ops.table import read_rows  # noqa: E402


def timed(run: Path) -> dict[tuple, dict]:
    return {(r["precision"], r["op"], tuple(sorted(row_axes(r).items()))): r for r in read_rows(run / "ops.csv") if r.get("ms")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--model", default="gemma4-26b-a4b", help="catalog model whose layer count prices the one-token difference")
    args = ap.parse_args(argv)
    a, b = timed(args.a), timed(args.b)
    common = sorted(set(a) & set(b), key=lambda k: (k[0], k[1], [v for _, v in k[2]]))
    if not common:
        print(f"error: {args.a} and {args.b} share no timed unit", file=sys.stderr)
        return 2
    layers = get_model(args.model).num_hidden_layers
    print(f"{'precision':<9} {'op':<10} {'shape':<14} {args.a.name + ' ms':>16} {args.b.name + ' ms':>16} {'a / b':>7}  kernels (a | b)")
    for k in common:
        ra, rb = a[k], b[k]
        ms_a, ms_b = float(ra["ms"]), float(rb["ms"])
        shape = ",".join(f"{n}={v}" for n, v in k[2])
        print(f"{k[0]:<9} {k[1]:<10} {shape:<14} {ms_a:>16.4f} {ms_b:>16.4f} {ms_a / ms_b:>7.2f}  {ra['kernel']} | {rb['kernel']}")
    for k in [k for k in common if dict(k[2]).get("m") == 1]:
        d = float(a[k]["ms"]) - float(b[k]["ms"])
        print(f"{k[0]} {k[1]} at one token: {d * 1e3:+.1f} us per layer, {d * layers:+.3f} ms per decode step over {layers} layers ({args.model})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
