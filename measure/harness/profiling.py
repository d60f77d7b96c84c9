"""Where a pass's time goes: torch.profiler over a few steps, kernel time per category and the top
kernels, per step. Written beside the run (RUN/profile/<unit>.json and .txt)."""

from __future__ import annotations

import re
from pathlib import Path

from costmodel import atomic

# First match wins; kernel names as CUDA/CUTLASS/cuBLAS/inductor emit them.
CATEGORIES: list[tuple[str, re.Pattern]] = [
    ("attention", re.compile(r"flash|fmha|attention|sdpa", re.I)),
    ("moe_grouped_gemm", re.compile(r"GroupProblemShape|grouped|moe|histc|bincount", re.I)),
    ("gemm", re.compile(r"gemm|cutlass|cublas|xmma|nvjet|sm90_|triton_tem|matmul|addmm|bmm|_mm_", re.I)),
    ("sampling_softmax_sort", re.compile(r"softmax|multinomial|sort|argmax|topk|radix|cumsum|scan|distribution|log_softmax|entropy", re.I)),
    ("inductor_fused", re.compile(r"triton_(poi|red|per)", re.I)),
    ("reduction", re.compile(r"reduce", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|index|scatter|gather|where|cat|fill|copy|memset|memcpy", re.I)),
]


def categorize(name: str) -> str:
    for cat, pat in CATEGORIES:
        if pat.search(name):
            return cat
    return "other"


def new_profiler(cuda: bool):
    import torch  # optional heavy dependency (the measure extra)

    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    return torch.profiler.profile(activities=acts, record_shapes=False)


def summarize(prof, steps: int, cuda: bool) -> dict:
    """Per-step kernel time by category and the 25 costliest kernels (device time on GPU, CPU time
    of ops on CPU)."""
    rows = []
    for ev in prof.key_averages():
        if cuda:
            t_us = getattr(ev, "self_device_time_total", None)
            if t_us is None:
                t_us = getattr(ev, "self_cuda_time_total", 0)
            dev = str(getattr(ev, "device_type", ""))
            if not t_us or ("CUDA" not in dev and "cuda" not in dev.lower()):
                continue
        else:
            t_us = ev.self_cpu_time_total
            if not t_us:
                continue
        rows.append((ev.key, float(t_us) / 1000.0 / max(steps, 1), int(ev.count)))
    rows.sort(key=lambda r: -r[1])
    total = sum(r[1] for r in rows)
    cats: dict[str, float] = {}
    for name, ms, _ in rows:
        c = categorize(name)
        cats[c] = cats.get(c, 0.0) + ms
    return {
        "steps": steps, "time": "device (kernel) time" if cuda else "host CPU time of ops",
        "total_ms_per_step": total,
        "categories_ms_per_step": dict(sorted(cats.items(), key=lambda kv: -kv[1])),
        "top_kernels": [{"name": n[:160], "ms_per_step": ms, "calls_per_step": cnt / max(steps, 1), "category": categorize(n)} for n, ms, cnt in rows[:25]],
        "kernels_counted": len(rows),
    }


def write(run_dir: Path, unit: str, summary: dict, extra: dict) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in unit)
    doc = {**extra, **summary}
    path = atomic.write_json(Path(run_dir) / "profile" / f"{safe}.json", doc)
    lines = [f"# {unit}: {summary['time']} per step over {summary['steps']} steps = {summary['total_ms_per_step']:.3f} ms",
             *(f"{k:>24s}  {v:9.3f} ms" for k, v in summary["categories_ms_per_step"].items()), "", "top kernels:"]
    lines += [f"{k['ms_per_step']:9.3f} ms  x{k['calls_per_step']:<6.1f} {k['category']:<22s} {k['name']}" for k in summary["top_kernels"]]
    atomic.write_text(Path(run_dir) / "profile" / f"{safe}.txt", "\n".join(lines) + "\n")
    return path
