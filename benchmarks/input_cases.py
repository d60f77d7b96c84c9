"""Issue 39's audit cases, each re-run as a user would type it: the exit code and the line the user
gets (a one-line refusal, exit 2; or a run that completes, exit 0). A traceback or an exit other
than 0/2/130 is flagged. The fuzz suite (tests/test_fuzz_cli.py, tests/test_fuzz_faults.py) covers
the classes these cases stand for; this prints the literal cases for the issue's note.

    .venv/bin/python benchmarks/input_cases.py            # ~2 minutes on 2 cores
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRY = "import sys; from costmodel.cli import console_main; sys.argv[0] = 'costmodel'; sys.exit(console_main())"
# `costmodel measure` on a machine without torch: a finder ahead of the others says torch is not installed
NO_TORCH = ("import sys\nclass NoTorch:\n    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'torch':\n            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, NoTorch())\n" + ENTRY.replace("; ", "\n"))
SIM = ["simulate", "--qps", "2", "--mode", "ar", "--requests", "20", "--jobs", "1"]
DAY = ["plan", "--hardware", "h200", "--mode", "ar", "--duration", "3"]
SPEC = "kind: simulate\nbase: {mode: ar, n_requests: 8, hardware: h200}\ngrid: {qps: [1]}\n"


def files(d: Path) -> dict[str, str]:
    """The input files the cases name, written under d."""
    hw = json.loads((ROOT / "costmodel/data/hardware.json").read_text())["gpus"]["h200"]
    prof = json.loads((ROOT / "costmodel/data/profiles/h200.json").read_text())
    for c in prof.get("commit_stats", {}).values():  # a commit statistic of zero content tokens
        c["content_length"]["values"] = [0] * len(c["content_length"]["values"])
    docs = {
        "gamma_big.json": json.dumps({"arrival": {"process": "gamma", "cv": 1e300}}),
        "gamma_small.json": json.dumps({"arrival": {"process": "gamma", "cv": 1e-300}}),
        "sigma.json": json.dumps({"prompt_tokens": {"dist": "lognormal", "median": 100, "sigma": 1e300}}),
        "nested.json": "[" * 100_000 + "]" * 100_000,
        "uniform.json": json.dumps({"output_tokens": {"dist": "uniform", "min": 10.5, "max": 12.5}}),
        "fraction.json": json.dumps({"prompt_tokens": 100.5, "output_tokens": 64}),
        "think.json": json.dumps({"sessions": {"turns": 3, "think_s": 1e300}}),
        "trace.csv": "arrival_s,prompt_tokens,output_tokens\n0,10,10\n1e300,10,10\n",
        "latin1.yaml": (SPEC + "# caf\xe9\n").encode("latin-1"),
        "dup.yaml": "kind: simulate\nbase: {mode: ar, n_requests: 8}\ngrid: {qps: [1, 1.0]}\n",
        "spec.yaml": SPEC,
        "badpoint.yaml": "kind: simulate\nbase: {mode: ar, n_requests: 8, hardware: h200}\npoints: [{qps: 1, max_num_seqs: 0}]\n",
        "huge.yaml": "kind: simulate\nbase: {mode: ar, n_requests: 3000000, hardware: h200}\ngrid: {qps: [4, 5]}\n",
        "hw.json": json.dumps({"gpus": {"h200": {**hw, "memory_gb": 80}}}),
        "zero_commits.json": json.dumps(prof),
        "fleet.json": '{"pools": [{"hardware": "h200", "mode": "ar", "price_usd_per_gpu_hour": NaN}]}',
    }
    out = {}
    for name, text in docs.items():
        p = d / name
        (p.write_bytes if isinstance(text, bytes) else p.write_text)(text)
        out[name] = str(p)
    return out


def cases(d: Path, f: dict[str, str]) -> list[tuple[str, list[str], str]]:
    """(what the audit found, argv, entry) in the issue's order."""
    wl = lambda name: [*SIM, "--workload", f[name]]  # noqa: E731
    o = lambda name: str(d / name)  # noqa: E731
    return [
        ("gamma arrival cv 1e300 (OverflowError)", wl("gamma_big.json"), ENTRY),
        ("gamma arrival cv 1e-300 (ZeroDivisionError)", wl("gamma_small.json"), ENTRY),
        ("lognormal sigma 1e300", wl("sigma.json"), ENTRY),
        ("workload of 100,000 nested brackets (RecursionError)", wl("nested.json"), ENTRY),
        ("--load-curve diurnal hours=1e300 (ValueError)", [*DAY, "--load-curve", "diurnal:peak=10,trough=2,hours=1e300", "-o", o("d1")], ENTRY),
        ("a trace timestamp of 1e300", [*DAY, "--load-curve", f["trace.csv"], "-o", o("d2")], ENTRY),
        ("plan --load-curve --max-replicas 0", [*DAY, "--load-curve", "flat:5", "--max-replicas", "0", "-o", o("d3")], ENTRY),
        ("a Latin-1 YAML sweep spec (UnicodeDecodeError)", ["sweep", f["latin1.yaml"], "-o", o("s1")], ENTRY),
        ("costmodel measure -o o without torch (ModuleNotFoundError)", ["measure", "-o", o("m1")], NO_TORCH),
        ("... and with a model to time, without torch", ["measure", "--model", "gemma4-26b-a4b", "--random-weights", "-o", o("m2")], NO_TORCH),
        ("a fractional token count (was rounded)", wl("fraction.json"), ENTRY),
        ("a uniform 10.5..12.5 (drew 10)", wl("uniform.json"), ENTRY),
        ("duplicate QPS points (were merged)", ["plan", "--qps", "1,1", "--hardware", "h200", "--mode", "ar", "-o", o("p1")], ENTRY),
        ("duplicate grid points in a sweep spec (were merged)", ["sweep", f["dup.yaml"], "-o", o("s2")], ENTRY),
        ("a --hardware-file redefining a catalog GPU (overrode it)", ["roofline", "--hardware", "h200", "--hardware-file", f["hw.json"], "--batch", "1"], ENTRY),
        ("a warm-up share leaving one request", [*SIM, "--warmup", "0.95"], ENTRY),
        ("a commit statistic of zero content tokens (simulated as one)", [*SIM, "--mode", "diffusion", "--profile", f["zero_commits.json"]], ENTRY),
        ("an infinite price (printed inf)", ["plan", "--qps", "5", "--hardware", "h200", "--mode", "ar", "--price", "h200=inf", "-o", o("p2")], ENTRY),
        ("an absurd price (300-digit dollars)", ["plan", "--qps", "5", "--hardware", "h200", "--mode", "ar", "--price", "h200=1e300", "-o", o("p3")], ENTRY),
        ("--term spot_discount under on-demand (ignored)", ["plan", "--qps", "5", "--hardware", "h200", "--mode", "ar", "--term", "spot_discount=0.5",
                                                            "-o", o("p4")], ENTRY),
        ("--max-num-batched-tokens 1 without --max-num-seqs (rule skipped)", [*SIM, "--max-num-batched-tokens", "1"], ENTRY),
        ("a session think time of 1e300 s (a stable point, 0 ms)", wl("think.json"), ENTRY),
        ("a NaN pool price (reported as missing)", ["plan", "--load-curve", "flat:2,hours=1", "--fleet", f["fleet.json"], "-o", o("d4")], ENTRY),
        ("a sweep point's error (fix in CLI-flag terms, no spec or point)", ["sweep", f["badpoint.yaml"], "-o", o("s3")], ENTRY),
        ("a sweep point above the memory budget (failed in a Dask worker: 'Compute Failed' and a traceback)",
         ["sweep", f["huge.yaml"], "--jobs", "2", "-o", o("s4")], ENTRY),
        ("plan --seeds 1000000 (about 18 hours, unbounded)", ["plan", "--seeds", "1000000", "--hardware", "h200", "--mode", "ar", "-o", o("p5")], ENTRY),
        ("a 24 h day at 3,000 QPS (unbounded before)", [*DAY, "--load-curve", "flat:3000,hours=24", "-o", o("d5")], ENTRY),
    ]


def run(argv: list[str], entry: str) -> tuple[int, str]:
    env = {**os.environ, "COSTMODEL_NO_PROGRESS": "1", "COSTMODEL_JOBS": "1"}
    p = subprocess.run([sys.executable, "-c", entry, *argv], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    text = (p.stderr.strip() or p.stdout.strip()).splitlines()
    if "Traceback" in p.stderr or (p.returncode == 2 and len(p.stderr.strip().splitlines()) != 1):
        return p.returncode, "TRACEBACK: " + (text[-1] if text else "")
    line = text[0] if p.returncode else (text[-1] if text else "")
    return p.returncode, line


def main() -> int:
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        f = files(d)
        for what, argv, entry in cases(d, f):
            code, line = run(argv, entry)
            flag = "" if code in (0, 2, 130) and not line.startswith("TRACEBACK") else "  <-- NOT CLEAN"
            bad += bool(flag)
            print(f"{what}\n    exit {code}: {line[:220]}{flag}")
    print(f"\n{bad} of the {len(cases(d, f))} cases not clean (a traceback, a refusal of more than one line, or an exit other than 0, 2, 130)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
