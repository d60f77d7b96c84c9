"""Quick device check of a few op units (development, not the campaign): the new kernels'
self-checks, then chosen units timed with every candidate (campaign.time_unit), printed as a short
table of the fastest candidates per unit; the rows go to OUT/devcheck.csv.

    python -m measure.ops.devcheck -o OUT --units moe:bf16:1024,router:*:1,attn.sliding.causal:*:1/1/1024 [--checks router_1launch,sampler_split]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def device_run(out: str):
    """A development run on the GPU: (its output folder, made; the CUDA device; the GPU's name; the
    folder of its committed op table under data/runs/ops)."""
    import torch

    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    gpu = torch.cuda.get_device_name(dev)
    return path, dev, gpu, "h200" if "H200" in gpu else "h100"


def main(argv=None) -> int:
    from costmodel.models import get_model
    from measure.ops import campaign, kernels
    from measure.ops.shapes import all_ops
    from measure.ops.table import RowWriter

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--units", required=True, help="comma list of OP:PRECISION:M, or OP:PRECISION:SEQS/Q/CTX for attention")
    ap.add_argument("--checks", default="", help="comma list of campaign self-checks (_check_NAME) to run first")
    ap.add_argument("--components", default=None)
    a = ap.parse_args(argv)
    out, dev, gpu, short = device_run(a.out)
    checks, disabled = {}, {}
    for name in filter(None, a.checks.split(",")):
        t0 = time.time()
        getattr(campaign, f"_check_{name}")(dev, checks, disabled)
        print(f"[check] {name} {time.time() - t0:.1f} s", flush=True)
    print(json.dumps({"selfcheck": checks, "disabled": disabled}, indent=0, default=str), flush=True)
    comp = a.components or f"data/runs/ops/{short}"
    kernels.set_components(comp)
    ops = all_ops(get_model("gemma4-26b-a4b"), get_model("gemma4-26b-a4b-assistant")).ops
    w = RowWriter(out / "devcheck.csv")
    lines = []
    for u in a.units.split(","):
        op, prec, m = u.split(":")
        at = dict(zip(("seqs", "q", "ctx"), map(int, m.split("/")))) if "/" in m else {"m": int(m)}
        t0 = time.time()
        row = campaign.time_unit(ops[op], at, prec, dev, disabled)
        row["gpu"] = gpu
        w.add(row)
        cands = json.loads(row.get("candidates") or "{}")
        timed = sorted((v, k) for k, v in cands.items() if isinstance(v, float))
        errs = {k: v for k, v in cands.items() if not isinstance(v, float)}
        lines.append(f"{op:24s} {prec:4s} m={m:>5s} best {row.get('kernel')} {row.get('ms')} ms | "
                     + "; ".join(f"{k} {v:.4f}" for v, k in timed[:5]) + (f" | errors: {list(errs)[:4]}" if errs else "")
                     + f" ({time.time() - t0:.0f} s)")
        print(lines[-1], flush=True)
    w.close()
    print("\n".join(["== summary (" + gpu + ")"] + lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
