"""The one-launch small-batch MoE (triton_moe_gemv1*) against the committed op table's kernel at
the same shape: each gemv1 config graph-timed (measure.ops.timing, as the campaign times), its output
compared with the committed kernel's on the same weights and routing, one line per unit; rows to
OUT/gemv1.csv. A development sweep: the campaign re-times the whole family when a config wins.

    python scripts/time_moe_gemv1.py -o OUT [--ms 1,2,4,8]
"""

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    import pandas as pd
    import torch

    from measure.ops import kernels
    from measure.ops.devcheck import device_run
    from measure.ops.timing import graph_ms, quick_ms

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--ms", default="1,2,4,8")
    a = ap.parse_args()
    out, dev, gpu, short = device_run(a.out)
    ref = pd.read_csv(f"data/runs/ops/{short}/ops.csv")
    rows = []
    for prec in ("fp8", "bf16"):
        for m in map(int, a.ms.split(",")):
            p = {"m": m, "d": 2816, "experts": 128, "ffn": 704, "topk": 8}
            r = ref[(ref.op == "moe") & (ref.precision == prec) & (ref.m == m)]
            base_name, base_ms = (r.iloc[0]["kernel"], float(r.iloc[0]["ms"])) if len(r) else (None, float("nan"))
            cands = {c.name: c for c in kernels.moe_candidates(p, prec)}
            torch.manual_seed(7)
            base_out = cands[base_name].build(dict(p), prec, dev).run(0).float() if base_name in cands else None
            for name, c in cands.items():
                if "gemv1" not in name and name != base_name:
                    continue
                try:
                    torch.manual_seed(7)
                    b = c.build(dict(p), prec, dev)
                    y = b.run(0).float()
                    err = float((y - base_out).norm() / base_out.norm()) if base_out is not None else float("nan")
                    ms, n, method = graph_ms(b, dev, quick_ms(b, dev))
                except Exception as e:  # recorded, never silent
                    ms, err, method = float("nan"), float("nan"), f"{type(e).__name__}: {str(e)[:120]}"
                rows.append({"gpu": gpu, "precision": prec, "m": m, "kernel": name, "ms": ms, "rel_err_vs_committed": err,
                             "committed_kernel": base_name, "committed_ms": base_ms, "method": method})
                print(f"{prec} m={m} {name}: {ms:.4f} ms (err {err:.2g}) | committed {base_name} {base_ms:.4f} ms", flush=True)
                torch.cuda.empty_cache()
    with open(out / "gemv1.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
