"""Device check for issue 17 item 6: build full-size DiffusionGemma-26B-A4B with random weights on
the GPU (measure/harness/build.py, meta device + tied weights materialised once) and report memory.

    python -m measure.ops.check_build [--model diffusiongemma-26b-a4b] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import time


def main(argv=None) -> int:
    import torch

    from costmodel.models import get_model
    from measure.harness.build import build_random, count_params

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="diffusiongemma-26b-a4b")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    t0 = time.time()
    res = {"model": a.model, "gpu": torch.cuda.get_device_name(), "total_gib": torch.cuda.get_device_properties(0).total_memory / 2**30}
    try:
        m = build_random(get_model(a.model), "cuda", "grouped_mm")
        torch.cuda.synchronize()
        res.update(ok=True, build_s=round(time.time() - t0, 1), params_b=count_params(m) / 1e9,
                   distinct_param_tensors=len({p.data_ptr() for p in m.parameters()}),
                   allocated_gib=torch.cuda.memory_allocated() / 2**30, peak_gib=torch.cuda.max_memory_allocated() / 2**30,
                   nonfinite_params=[n for n, p in m.named_parameters() if not torch.isfinite(p).all()][:5])
        try:  # one decoder-sized forward of the text stack at a 256-token canvas, if the model exposes it simply
            ids = torch.randint(0, 1000, (1, 256), device="cuda")
            with torch.no_grad():
                out = m.model.encoder(input_ids=ids) if hasattr(m, "model") and hasattr(m.model, "encoder") else m(input_ids=ids)
            h = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
            res.update(encoder_forward_finite=bool(torch.isfinite(h).all()), peak_after_forward_gib=torch.cuda.max_memory_allocated() / 2**30)
        except Exception as e:
            res["forward"] = f"{type(e).__name__}: {str(e)[:200]}"
    except Exception as e:
        res.update(ok=False, error=f"{type(e).__name__}: {str(e)[:300]}", peak_gib=torch.cuda.max_memory_allocated() / 2**30)
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0 if res.get("ok") else 1


if __name__ == "__main__":
    raise SystemExit(main())
