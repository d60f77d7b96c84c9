"""Issue 50's audit cases (and with --issue 39, issue 39's), each re-run as a user would type it: the exit code and the line the user
gets (a one-line refusal, exit 2; or a run that completes, exit 0). A traceback or an exit other
than 0/2/130 is flagged. The fuzz suite (tests/test_fuzz_cli.py, tests/test_fuzz_faults.py) covers
the classes these cases stand for; this prints the literal cases for the issue's note.

    .venv/bin/python benchmarks/input_cases.py              # issue 50's cases, ~2 minutes on 2 cores
    .venv/bin/python benchmarks/input_cases.py --issue 39   # issue 39's
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


def files50(d: Path) -> dict[str, str]:
    """The input files issue 50's cases name, written under d."""
    prof = json.loads((ROOT / "costmodel/data/profiles/h200.json").read_text())
    hw = json.loads((ROOT / "costmodel/data/hardware.json").read_text())["gpus"]["h200"]

    def edited(edit):
        p = json.loads(json.dumps(prof))
        edit(p)
        return json.dumps(p)

    big_trace = "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i * 0.01:.2f},100,100\n" for i in range(300_000))
    docs = {
        "h200_10gb.json": edited(lambda p: p["hardware"].update(memory_gb=10, memory_bandwidth_tbps=1)),
        "neg_intercept.json": edited(lambda p: p["modes"]["ar"]["pass_models"]["decode_step"]["coef"].update(const=-1000)),
        "coef_1e300.json": edited(lambda p: p["modes"]["ar"]["pass_models"]["decode_step"]["coef"].update(const=1e300)),
        "neg_content.json": edited(lambda p: [c["content_length"].update(values=[-v for v in c["content_length"]["values"]])
                                              for c in p["commit_stats"].values()]),
        "tpc0.json": edited(lambda p: [c.update(tokens_per_call=0) for c in p["commit_stats"].values()]),
        "bench_twice.json": '{"duration": 10, "completed": 5, "completed": 50, "num_prompts": 5, "request_rate": 1}',
        "bench_1e9.json": json.dumps({"duration": 10, "completed": 10**9, "num_prompts": 10**9, "request_rate": 1}),
        "hw_unknown.json": json.dumps({"gpus": {"my-gpu": {**hw, "memory_GB": 80}}}),
        "prices_header.csv": "hardware,price_usd_per_gpu_hour\n",
        "gamma.json": json.dumps({"arrival": {"process": "gamma", "cv": 3}}),
        "unsorted.csv": "arrival_s,prompt_tokens,output_tokens\n0,10,10\n2,10,10\n1,10,10\n",
        "unsorted.json": json.dumps({"trace": "unsorted.csv"}),
        "plan_replicas0.yaml": "kind: plan\nbase: {mode: ar, hardware: h200, duration_s: 10, slo: 'p95_ttft_ms<=1000'}\ngrid: {qps: [1], max_replicas: [0]}\n",
        "big_trace.csv": big_trace,
        "laughs.yaml": "kind: simulate\na: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
            f"{n}: &{n} [{','.join(['*' + p] * 10)}]\n" for p, n in zip("abcdefgh", "bcdefghi")) + "base: {mode: ar, description: *i}\ngrid: {qps: [1]}\n",
        "bom.csv": "\ufefftime_s,qps\n0,2\n3600,2\n",
        "curve_twice.csv": "time_s,qps,qps\n0,2,3\n3600,2,3\n",
        "badpoint.yaml": "kind: simulate\nbase: {mode: ar, n_requests: 8, hardware: h200}\npoints: [{qps: 1}, {qps: 2, max_num_seqs: 0}]\n",
    }
    out = {}
    for name, text in docs.items():
        (d / name).write_text(text, encoding="utf-8")
        out[name] = str(d / name)
    loop = d / "loop.json"
    os.symlink(loop, loop)
    out["loop.json"] = str(loop)
    return out


def cases50(d: Path, f: dict[str, str]) -> list[tuple[str, list[str], str]]:
    """Issue 50's cases, in its order. Sets for the manifest cases are made by setup50 first."""
    o = lambda name: str(d / name)  # noqa: E731
    sim = ["simulate", "--qps", "1", "--requests", "5", "--jobs", "1"]
    prof = lambda name: ["profile", "validate", f[name]]  # noqa: E731
    plan = ["plan", "--hardware", "h200", "--mode", "ar", "--duration", "10", "--jobs", "1"]
    return [
        ("profile validate: hardware redefines h200 as 10 GB, 1 TB/s (was OK)", prof("h200_10gb.json"), ENTRY),
        ("simulate on that profile (ran)", [*sim, "--mode", "ar", "--profile", f["h200_10gb.json"]], ENTRY),
        ("profile validate: decode intercept -1000 ms (was OK; simulate floored every step)", prof("neg_intercept.json"), ENTRY),
        ("profile validate: a coefficient of 1e300 (was OK)", prof("coef_1e300.json"), ENTRY),
        ("profile validate: negative content lengths (was OK)", prof("neg_content.json"), ENTRY),
        ("profile validate: tokens_per_call 0 (was OK)", prof("tpc0.json"), ENTRY),
        ("profile roofline --efficiency 1e-300 (wrote a profile validate accepted)", ["profile", "roofline", "--hardware", "h200", "--efficiency", "1e-300",
                                                                                   "-o", o("eff.json")], ENTRY),
        ("load curve hours given twice (ran the second)", [*plan, "--load-curve", "diurnal:peak=4,trough=2,hours=1,hours=2", "-o", o("d1")], ENTRY),
        ("load curve CSV naming qps twice (read the first)", [*plan, "--load-curve", f["curve_twice.csv"], "-o", o("d1b")], ENTRY),
        ("bench file giving completed twice (kept the last)", ["compare-bench", f["bench_twice.json"]], ENTRY),
        ("hardware-file entry with an unknown field (ignored)", ["roofline", "--hardware", "my-gpu", "--hardware-file", f["hw_unknown.json"]], ENTRY),
        ("price file with only a header (overrode nothing, silently)", [*plan, "--qps", "2", "--price-file", f["prices_header.csv"], "-o", o("p1")], ENTRY),
        ("--num-speculative-tokens with --mode diffusion (ignored)", [*sim, "--mode", "diffusion", "--num-speculative-tokens", "3"], ENTRY),
        ("--canvas-length with --mode ar (ignored)", [*sim, "--mode", "ar", "--canvas-length", "128"], ENTRY),
        ("--max-denoising-steps with --mode ar (ignored)", [*sim, "--mode", "ar", "--max-denoising-steps", "8"], ENTRY),
        ("--max-seeds without --seeds (ignored)", [*plan, "--qps", "2", "--max-seeds", "5", "-o", o("p2")], ENTRY),
        ("roofline --prompt with a decode pass (ignored)", ["roofline", "--pass-kind", "decode_step", "--model", "gemma4-26b-a4b", "--prompt", "99"], ENTRY),
        ("--concurrency with a gamma-arrival workload (dropped the process)", ["simulate", "--concurrency", "4", "--requests", "5", "--mode", "ar",
                                                                              "--workload", f["gamma.json"], "--jobs", "1"], ENTRY),
        ("memory --max-model-len 1000000 (model limit 262,144)", ["memory", "--max-model-len", "1000000"], ENTRY),
        ("memory --block-size 7", ["memory", "--block-size", "7"], ENTRY),
        ("memory --num-speculative-tokens 100", ["memory", "--mode", "mtp", "--num-speculative-tokens", "100"], ENTRY),
        ("an unsorted workload trace (was sorted)", [*sim, "--mode", "ar", "--workload", f["unsorted.json"]], ENTRY),
        ("--canvas-length 3 (reused the 256-token canvas's commit statistics)", [*sim, "--mode", "diffusion", "--canvas-length", "3"], ENTRY),
        ("a run of 5 requests (printed p99)", [*sim, "--mode", "ar"], ENTRY),
        ("day --startup-s 1e300 (an autoscaled fleet that never grows)", [*plan, "--load-curve", "flat:2,hours=1", "--startup-s", "1e300", "-o", o("d2")], ENTRY),
        ("report on a plan set whose manifest was deleted and plan.json edited (priced $20,440)", ["report", o("nomanifest"), "-o", o("r.csv")], ENTRY),
        ("a plan written into an old sweep directory (left points/ beside it)", [*plan, "--qps", "2", "-o", o("oldsweep")], ENTRY),
        ("analyze --bootstrap 1e12 (MemoryError)", ["analyze", o("norun"), "--bootstrap", "1000000000000", "-o", o("a1")], ENTRY),
        ("a bench file of 10^9 prompts (MemoryError)", ["compare-bench", f["bench_1e9.json"]], ENTRY),
        ("a plan-kind sweep spec with max_replicas: 0 (ValueError)", ["sweep", f["plan_replicas0.yaml"], "-o", o("s1")], ENTRY),
        ("--load-scale 1000 on a 300k-row trace (built 300M requests first)", [*plan, "--load-curve", f["big_trace.csv"], "--load-scale", "1000",
                                                                             "-o", o("d3")], ENTRY),
        ("plan with 10,000 QPS values (unbounded)", [*plan, "--qps", ",".join(str(i) for i in range(1, 10_001)), "-o", o("p3")], ENTRY),
        ("simulate --replicas 100000 (unbounded)", [*sim, "--mode", "ar", "--replicas", "100000"], ENTRY),
        ("a YAML spec of nested aliases ('billion laughs')", ["sweep", f["laughs.yaml"], "-o", o("s2")], ENTRY),
        ("a profile that is a symlink loop (was 'does not exist')", ["profile", "validate", f["loop.json"]], ENTRY),
        ("a load curve with a UTF-8 BOM (was 'in no format read')", [*plan, "--load-curve", f["bom.csv"], "-o", o("d4")], ENTRY),
        ("a sweep-spec value out of range (named neither spec nor point; CLI-flag fix)", ["sweep", f["badpoint.yaml"], "-o", o("s3")], ENTRY),
        ("an option given twice (last won)", [*sim, "--mode", "ar", "--seed", "1", "--seed", "2"], ENTRY),
    ]


def setup50(d: Path) -> None:
    """A plan set with its manifest deleted and plan.json edited; an old sweep directory (points/ and its set)."""
    plan = ["plan", "--hardware", "h200", "--mode", "ar", "--qps", "2", "--duration", "10", "--jobs", "1"]
    run([*plan, "-o", str(d / "nomanifest")], ENTRY)
    (d / "nomanifest" / "outputs.manifest.json").unlink(missing_ok=True)
    p = d / "nomanifest" / "plan.json"
    if p.exists():
        p.write_text(p.read_text().replace('"replicas": 1', '"replicas": 7'))
    spec = d / "old.yaml"
    spec.write_text("kind: simulate\nbase: {mode: ar, n_requests: 8, hardware: h200}\ngrid: {qps: [1]}\n")
    run(["sweep", str(spec), "--jobs", "1", "-o", str(d / "oldsweep")], ENTRY)


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
    issue = sys.argv[sys.argv.index("--issue") + 1] if "--issue" in sys.argv else "50"
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        if issue == "39":
            f = files(d)
            todo = cases(d, f)
        else:
            f = files50(d)
            setup50(d)
            todo = cases50(d, f)
        for what, argv, entry in todo:
            code, line = run(argv, entry)
            flag = "" if code in (0, 2, 130) and not line.startswith("TRACEBACK") else "  <-- NOT CLEAN"
            bad += bool(flag)
            print(f"{what}\n    exit {code}: {line[:220]}{flag}")
    print(f"\n{bad} of the {len(todo)} cases not clean (a traceback, a refusal of more than one line, or an exit other than 0, 2, 130)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
