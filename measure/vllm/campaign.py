"""Record a real vLLM engine on the tiny models, per mode: one server (step recorder on), the
project's endpoint load generator (`costmodel measure --endpoint`) at a few rates, and vLLM's own
`vllm bench serve --save-result`. Run in the vLLM environment:

    .venv-vllm/bin/python -m measure.vllm.campaign -o data/runs/vllm-cpu [--modes diffusion,ar,mtp] [--models models/tiny]

writes, per mode M: OUT/M-steps (engine-steps run: every engine step of the server),
OUT/M-endpoint (endpoint run), OUT/M-bench.json (`vllm bench serve` result; import it with
`costmodel import-bench`). A server that does not come up, or dies, ends that mode with one line;
what was written stays readable (a killed recorder's run is marked incomplete).
The loads (each mode's `vllm_campaign_load`) are small: every mode takes a few minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from costmodel.errors import UserError
from costmodel.modes import ServingMode, all_modes, get_mode
from measure.vllm import require_vllm
from measure.vllm.server import ServerSpec, VllmServer
from measure.vllm.tiny_models import build_all, diffusion_dir

@dataclass(frozen=True)
class Load:
    qps: str  # comma list: one load per rate
    requests: int  # per rate
    max_tokens: int
    bench_prompts: int
    bench_rate: float
    bench_input_len: int
    bench_output_len: int


def load_of(mode: ServingMode) -> Load:
    """The mode's load (ServingMode.vllm_campaign_load: diffusion's steps run Triton kernels in the
    interpreter on a CPU, 100-400 ms each, so its requests are fewer and shorter)."""
    return Load(**mode.vllm_campaign_load)


def spec_for(mode: ServingMode, dirs: dict[str, Path], canvas: int = 32, k: int = 2) -> ServerSpec:
    if mode.decodes_canvases:
        return ServerSpec(mode, dirs[diffusion_dir(canvas)], served_name=mode.vllm_served, canvas_length=canvas)
    if mode.assistant:
        return ServerSpec(mode, dirs[mode.vllm_model_dir], served_name=mode.vllm_served, assistant_dir=dirs["mtp-assistant"], num_speculative_tokens=k)
    return ServerSpec(mode, dirs[mode.vllm_model_dir], served_name=mode.vllm_served)


def prompts_file(path: Path, n: int = 12) -> Path:
    """Prompts of varied length (the probe suite's, cut at several lengths): prefills of several sizes."""
    from measure.vllm.tiny_models import _corpus

    lines = _corpus()
    rows = []
    for i in range(n):
        text = " ".join(lines[i % len(lines)].split()[: 6 + (i * 7) % 40])
        rows.append({"prompt": text, "regime": "R1", "prompt_id": f"v{i:02d}"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def endpoint_load(url: str, mode: ServingMode, out: Path, load: Load, prompts: Path, canvas: int | None) -> None:
    """`costmodel measure --endpoint` (the completions API; ignore_eos: lengths set by max_tokens), this
    environment's console script."""
    args = [str(Path(sys.executable).parent / "costmodel"), "measure", "--endpoint", url, "--model", mode.vllm_served, "--mode", mode.name, "--qps", load.qps, "--requests", str(load.requests),
            "--max-tokens", str(load.max_tokens), "--prompts", str(prompts), "--api", "completions", "--ignore-eos",
            "--metrics-interval", "0.5", "--timeout", "300", "-o", str(out)]
    if canvas:
        args += ["--canvas-length", str(canvas)]
    code = subprocess.run(args).returncode
    if code != 0:
        raise UserError(f"`costmodel measure --endpoint` exited {code} for mode {mode}", "see its output above")


def bench_serve(url: str, mode: ServingMode, tokenizer: Path, out: Path, load: Load, seed: int = 0) -> dict:
    """vLLM's own benchmark with --save-result. The `vllm` console script fails for the vllm-cpu
    distribution (PackageNotFoundError), so it is driven through vllm.benchmarks.serve."""
    from vllm.benchmarks.serve import add_cli_args, main  # the vLLM environment only
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    port = url.rsplit(":", 1)[1]
    args = parser.parse_args([
        "--backend", "openai", "--host", "127.0.0.1", "--port", port, "--endpoint", "/v1/completions", "--model", mode.vllm_served,
        "--tokenizer", str(tokenizer), "--dataset-name", "random", "--random-input-len", str(load.bench_input_len),
        "--random-output-len", str(load.bench_output_len), "--num-prompts", str(load.bench_prompts), "--request-rate", str(load.bench_rate),
        "--ignore-eos", "--seed", str(seed), "--save-result", "--result-dir", str(out.parent), "--result-filename", out.name, "--disable-tqdm",
    ])
    return main(args)


def record_mode(serving: ServingMode, dirs: dict[str, Path], out: Path, canvas: int = 32, k: int = 2, timeout_s: float = 600.0) -> dict[str, Path]:
    """One server of the mode with the recorder on; the endpoint loads, then the bench; the server stopped."""
    mode = serving.name
    load = load_of(serving)
    spec = spec_for(serving, dirs, canvas, k)
    steps, ep, bench = out / f"{mode}-steps", out / f"{mode}-endpoint", out / f"{mode}-bench.json"
    for p in (steps, ep):
        if p.exists():
            raise UserError(f"{p} already exists", "choose another -o or remove it")
    out.mkdir(parents=True, exist_ok=True)
    prompts = prompts_file(out / f".{mode}-prompts.jsonl")
    t0 = time.monotonic()
    with VllmServer(spec, record_dir=steps, timeout_s=timeout_s, log_path=out / f".{mode}-server.log") as srv:
        print(f"{mode}: server up in {time.monotonic() - t0:.0f} s at {srv.url}", flush=True)
        endpoint_load(srv.url, serving, ep, load, prompts, canvas if serving.decodes_canvases else None)
        bench_serve(srv.url, serving, spec.model_dir, bench, load)
        if not srv.alive():
            raise UserError(f"vLLM server ({mode}) died during the loads: {srv.cause()}", "see the server log")
    prompts.unlink()
    print(f"{mode}: recorded in {time.monotonic() - t0:.0f} s -> {steps}, {ep}, {bench}", flush=True)
    return {"steps": steps, "endpoint": ep, "bench": bench}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--modes", default=",".join(m.name for m in all_modes() if m.vllm_served))
    ap.add_argument("--models", type=Path, default=Path("models/tiny"), help="where the tiny model directories are (built if missing)")
    ap.add_argument("--canvas-length", type=int, default=32, help="any canvas length: its tiny model is built")
    ap.add_argument("--num-speculative-tokens", type=int, default=2)
    a = ap.parse_args(argv)
    try:
        require_vllm()  # `vllm bench serve` runs in this interpreter
        dirs = build_all(a.models, canvases=[a.canvas_length])
        served = [m.name for m in all_modes() if m.vllm_served]
        for name in [m.strip() for m in a.modes.split(",") if m.strip()]:
            if name not in served:
                raise UserError(f"--modes: {name!r} is unknown", f"use {', '.join(served)}")
            record_mode(get_mode(name), dirs, a.out, a.canvas_length, a.num_speculative_tokens)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
