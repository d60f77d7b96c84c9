"""Does the load generator keep its schedule at >= 200 requests/s? Starts the fast loopback test
server (tests/servers/openai_server.py, a separate process on 127.0.0.1), sends a Poisson load
through measure.endpoint.client and prints the dispatcher's lateness (actual - scheduled release
of each request) p50/p99/max in ms, plus how many requests succeeded.

    .venv/bin/python benchmarks/bench_client.py --qps 250 --duration 8 --max-tokens 16
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from measure.endpoint.client import LoadClient, LoadConfig, PlannedRequest, PromptItem, schedule_s  # noqa: E402


def _server_module():
    spec = importlib.util.spec_from_file_location("openai_server", ROOT / "tests" / "servers" / "openai_server.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["openai_server"] = mod
    spec.loader.exec_module(mod)
    return mod


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qps", type=float, default=250.0)
    ap.add_argument("--duration", type=float, default=8.0, help="seconds of arrivals")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--model", default="fast-diffusion",
                    help="fast-diffusion (one event per 32-token canvas), fast-mtp (one per verify step) or fast-ar (one per token)")
    ap.add_argument("--step-ms", type=float, default=1.0, help="server step time")
    ap.add_argument("--arrivals", choices=["poisson", "constant"], default="poisson")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    srv = _server_module().ServerProcess("--backend", "fast", "--step-ms", str(a.step_ms))
    try:
        t = schedule_s(a.qps, a.arrivals, None, a.duration, a.seed)
        item = PromptItem("bench", prompt="benchmark prompt with a few words")
        planned = [PlannedRequest(f"r{i:06d}", float(x), item) for i, x in enumerate(t)]
        cfg = LoadConfig(api_base=srv.url + "/v1", model=a.model, max_tokens=a.max_tokens, timeout_s=30.0)
        cpu0, srv0 = time.process_time(), _cpu_s(srv.proc.pid)
        res = asyncio.run(LoadClient(cfg).run(planned))
        cpu1, srv1 = time.process_time(), _cpu_s(srv.proc.pid)
    finally:
        srv.stop()
    late = np.array([r.lateness_ms for r in res.requests])
    ok = sum(r.status == "ok" for r in res.requests)
    ttft = np.array([r.ttft_ms for r in res.requests if r.status == "ok"])
    print(f"offered {a.qps:g} req/s ({a.arrivals}) for {a.duration:g} s: {len(planned)} requests, {ok} ok, "
          f"model {a.model}, max_tokens {a.max_tokens}, server step {a.step_ms:g} ms")
    print(f"achieved dispatch rate {len(planned) / max(res.last_arrival_s, 1e-9):.1f} req/s; all ended after {res.end_s:.2f} s")
    print(f"client lateness ms: p50 {np.percentile(late, 50):.3f}  p99 {np.percentile(late, 99):.3f}  max {late.max():.3f}")
    if ttft.size:
        print(f"TTFT ms (loopback): p50 {np.percentile(ttft, 50):.2f}  p99 {np.percentile(ttft, 99):.2f}")
    events = sum(r.n_chunks for r in res.requests)
    print(f"CPU s: client {cpu1 - cpu0:.2f} ({(cpu1 - cpu0) / len(planned) * 1e3:.2f} ms/request, {events} output events), "
          f"server {srv1 - srv0:.2f}; host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    return 0 if ok == len(planned) else 1


if __name__ == "__main__":
    sys.exit(main())
