"""Timing of one op: a quick eager estimate per candidate (CUDA events) to pick the fastest, then
the winner timed back-to-back under a CUDA graph (n calls captured in one graph, rotating weight
copies so weights stream from memory as in a 30-layer forward; median of the replays / n), so
host launch time is not in the figure. On a CPU (the tests) wall-clock loops stand in, labelled."""

from __future__ import annotations

import statistics
import time

import torch

from measure.ops.kernels import Bench

GRAPH_TARGET_MS = 2.0  # aim each graph replay at about this long
MAX_IN_GRAPH = 64


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def quick_ms(bench: Bench, dev: torch.device, reps: int = 3) -> float:
    """Median of `reps` single calls after one warm-up (events on CUDA, wall clock on CPU)."""
    bench.run(0)
    _sync(dev)
    out = []
    for i in range(reps):
        if dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            bench.run(i + 1)
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            bench.run(i + 1)
            out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def graph_ms(bench: Bench, dev: torch.device, est_ms: float, replays: int = 5) -> tuple[float, int, str]:
    """(ms per call, calls per graph, method). Falls back to back-to-back eager calls timed with
    events when the op cannot be captured (recorded in the method)."""
    n = int(max(1, min(MAX_IN_GRAPH, round(GRAPH_TARGET_MS / max(est_ms, 1e-4)))))
    n = max(n, min(bench.copies, MAX_IN_GRAPH)) if est_ms < GRAPH_TARGET_MS else n
    if dev.type != "cuda":
        t0 = time.perf_counter()
        for i in range(n):
            bench.run(i)
        return (time.perf_counter() - t0) * 1e3 / n, n, "cpu_wall"
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for i in range(2):
                bench.run(i)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(n):
                bench.run(i)
        g.replay()
        torch.cuda.synchronize()
        ts = []
        for _ in range(replays):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) / n)
        del g
        return statistics.median(ts), n, "cuda_graph"
    except Exception as e:  # not capturable: time back-to-back eager launches instead, and say so
        torch.cuda.synchronize()
        ts = []
        for _ in range(replays):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for i in range(n):
                bench.run(i)
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) / n)
        return statistics.median(ts), n, f"eager_events (graph capture failed: {type(e).__name__})"


def copy_bandwidth_tbps(dev: torch.device, gib: float = 1.0, reps: int = 10) -> float | None:
    """Device-to-device copy, bytes read + written per second (TB/s)."""
    if dev.type != "cuda":
        return None
    n = int(gib * 2**30) // 2
    src = torch.empty(n, dtype=torch.bfloat16, device=dev).normal_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ms = statistics.median(ts)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n * 2 / (ms * 1e-3) / 1e12


def matmul_tflops(dev: torch.device, fp8: bool = False, n: int = 8192, reps: int = 10) -> float | None:
    if dev.type != "cuda":
        return None
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    if fp8:
        f8 = torch.float8_e4m3fn
        a8, b8 = a.to(f8), b.to(f8).t().contiguous().t()
        one = torch.ones((), device=dev)

        def f():
            return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        def f():
            return a @ b
    f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        f()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return 2 * n**3 / (statistics.median(ts) * 1e-3) / 1e12


def step_overhead(dev: torch.device, batches=(1, 64, 512), reps: int = 200) -> dict:
    """The per-step cost outside the ops: host wall time of one engine step's device round trip
    (pinned H2D copy of token ids and positions, one CUDA-graph launch of a trivial kernel, D2H copy
    of the sampled tokens, synchronise), minus nothing: the trivial kernel takes microseconds.
    A serving engine's CPU scheduler and Python work are NOT in this term (stated in the tables)."""
    out = {"method": "wall clock of H2D ids+positions, graph replay (1 tiny kernel), D2H tokens, synchronize; median", "per_batch_ms": {}}
    if dev.type != "cuda":
        out["method"] = "cpu: no device round trip (0)"
        out["per_batch_ms"] = {str(b): 0.0 for b in batches}
        return out
    for B in batches:
        ids_h = torch.zeros(2, B, dtype=torch.int64).pin_memory()
        ids_d = torch.zeros(2, B, dtype=torch.int64, device=dev)
        tok_h = torch.zeros(B, dtype=torch.int64).pin_memory()
        x = torch.zeros(B, device=dev)
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            x.add_(1)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            x.add_(1)
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            ids_d.copy_(ids_h, non_blocking=True)
            g.replay()
            tok_h.copy_(ids_d[0], non_blocking=True)
            torch.cuda.synchronize()
            ts.append((time.perf_counter() - t0) * 1e3)
        out["per_batch_ms"][str(B)] = statistics.median(ts)
    return out
