"""Device check after a CPU-only refactor of the ops kernels: every campaign self-check on the GPU,
then the units the refactor touched timed with every candidate and compared with the committed op
table of the same GPU (data/runs/ops/<gpu>/ops.csv). Prints one line per unit; rows to OUT/recheck.csv.

    python scripts/devcheck_refactor.py -o OUT
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHECKS = ("gemv2", "router_1launch", "sampler_split", "sampler_r4", "pdl_chain", "qk_heads", "gemm_act", "softcap", "norm_fused",
          "qk_1launch", "moe", "moe_prefill_tiles", "scaled_mm", "flash", "router")
UNITS = [("ar_sampler", "*", {"m": 1}), ("ar_sampler", "*", {"m": 256}), ("dg_sampler", "*", {"m": 256}),
         ("moe", "fp8", {"m": 1}), ("moe", "bf16", {"m": 1}), ("moe", "fp8", {"m": 256}),
         ("attn.full.causal", "*", {"seqs": 1, "q": 1, "ctx": 1024}), ("attn.full.causal", "*", {"seqs": 1, "q": 256, "ctx": 1024}),
         ("attn.full.bidirectional", "*", {"seqs": 1, "q": 256, "ctx": 1024})]


def main() -> int:
    import pandas as pd

    from costmodel.models import get_model
    from measure.ops import campaign, kernels
    from measure.ops.devcheck import device_run
    from measure.ops.shapes import all_ops
    from measure.ops.table import RowWriter

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-o", "--out", required=True)
    out, dev, gpu, short = device_run(ap.parse_args().out)
    checks, disabled = {}, {}
    for name in CHECKS:
        t0 = time.time()
        getattr(campaign, f"_check_{name}")(dev, checks, disabled)
        print(f"[check] {name} {time.time() - t0:.1f} s", flush=True)
    (out / "selfcheck.json").write_text(json.dumps({"gpu": gpu, "selfcheck": checks, "disabled": disabled}, indent=1, default=str))
    print("disabled:", json.dumps(disabled, default=str)[:3000], flush=True)
    kernels.set_components(f"data/runs/ops/{short}")
    ops = all_ops(get_model("gemma4-26b-a4b"), get_model("gemma4-26b-a4b-assistant")).ops
    ref = pd.read_csv(f"data/runs/ops/{short}/ops.csv")
    w = RowWriter(out / "recheck.csv")
    for op, prec, at in UNITS:
        row = campaign.time_unit(ops[op], at, prec, dev, disabled)
        row["gpu"] = gpu
        w.add(row)
        r = ref[(ref.op == op) & (ref.precision == prec)]
        for k, v in at.items():
            r = r[r[k] == v]
        was = f"{r.iloc[0]['kernel']} {r.iloc[0]['ms']:.4f} ms" if len(r) else "no committed row"
        print(f"{op} {prec} {at}: now {row.get('kernel')} {float(row.get('ms') or 'nan'):.4f} ms; committed {was}", flush=True)
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
