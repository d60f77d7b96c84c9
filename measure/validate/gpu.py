"""The GPU half of `costmodel validate`: build each mode's model once (as `costmodel measure`
does), serve the seeded Poisson workload of each rate in real time (the workload and the rates are
the simulator's: `ValidationWorkload`, simulate/validate/loads.py, passed in by the CLI) and record
each load as a run directory of kind "validate" (scored by simulate/validate/runner.py)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from costmodel.errors import UserError
from costmodel.hardware import detect_local
from costmodel.models import AR_SIBLING
from costmodel.modes import ServingMode, get_mode
from costmodel.options import parse_floats
from costmodel.schemas.rundir import RunManifest, RunWriter, new_run_id, software_versions
from measure.harness.build import load_models
from measure.harness.config import HarnessOptions, parse_config
from measure.validate.loadrun import run_load
from measure.validate.servers import ARServer, DiffusionServer


def _harness_config(serving: ServingMode, model: str, random_weights: bool, checkpoint, ar_checkpoint, assistant_checkpoint, experts, device, out: Path):
    mode = serving.name  # --model names the DiffusionGemma model; the other modes serve its AR sibling
    target = model if serving.is_diffusion else AR_SIBLING.get(model, model)
    opts = HarnessOptions(mode=mode, model=target, random_weights=random_weights, out=str(out), experts_implementation=experts, device=device)
    if not random_weights:
        ck = checkpoint if serving.is_diffusion else ar_checkpoint
        if not ck:
            raise UserError(f"--checkpoint-weights needs a {'--checkpoint' if serving.is_diffusion else '--ar-checkpoint'} for {mode}",
                            "pass it or use --random-weights")
        opts = dataclasses.replace(opts, checkpoint=ck, model=None, assistant_checkpoint=assistant_checkpoint if serving.assistant else None)
    return parse_config(opts)


def run_validation_loads(workload, modes, rates, n_requests, max_batch, model, random_weights, checkpoint, ar_checkpoint,
                         assistant_checkpoint, experts, device, seed, out: Path, con, warmup_requests: int = 0) -> None:
    """`workload`: the requests and the rates (simulate.validate.loads.ValidationWorkload: `requests(mode, rate, n, seed)`,
    `auto_rates(mode, probe, batch)`, and its `profile`, `prompt_tokens`, `max_output_tokens`, `draft_tokens`)."""
    import torch  # optional heavy dependency (the measure extra)

    rate_given = None if rates == "auto" else finite_rates(parse_floats(rates, "rates"))  # checked before any model is built
    dev = device or "cuda"
    if dev.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {device or 'cuda (the default)'}: torch sees no CUDA GPU, and a full-size model on the CPU would take "
                        "hours", "run on a GPU machine, pass --device cpu with a tiny-* --model, or re-score recorded loads with --score-only")
    try:
        gpu_name, spec = detect_local()
        hw = spec.id if spec else None
    except UserError:
        gpu_name, hw = None, None
    for mode in modes:
        serving = get_mode(mode)  # the --modes name, resolved once
        cfg = _harness_config(serving, model, random_weights, checkpoint, ar_checkpoint, assistant_checkpoint, experts, dev, out)
        loaded = load_models(cfg, dev)
        if serving.harness == "canvas":
            server = DiffusionServer(loaded.model, torch.device(dev), seed=seed)
        else:
            server = ARServer(loaded.model, torch.device(dev), assistant=loaded.assistant if serving.assistant else None,
                              draft_tokens=workload.draft_tokens,
                              seed=seed)
        batch = serving.static_batch_requests or max_batch
        probe = workload.requests(serving, 1.0, n_requests, seed)
        rate_list = workload.auto_rates(serving, probe, batch) if rate_given is None else rate_given
        # Warm-up, untimed: a separate workload (another seed, same distributions) served back to back
        # in full batches. A cold eager engine runs its first ~20 batches up to 1.5x slower (seen on the
        # H200: the first rate served was the slow one whichever rate came first), so a load run
        # measures a warm server, as a production replica is.
        warm = workload.requests(serving, 1.0, max(batch, warmup_requests), seed + 10_000)
        for i in range(0, len(warm), batch):
            server.serve(warm[i:i + batch])
        for rate in rate_list:
            if (rate_dir(out, mode, rate) / "manifest.json").exists():
                con.print(f"{mode} @ {rate:g} req/s: already recorded, skipped")
                continue
            reqs = workload.requests(serving, rate, n_requests, seed)
            con.print(f"{mode} @ {rate:g} req/s: {n_requests} requests, static batches of up to {batch}")
            rows = run_load(server, reqs, batch)
            settings = {"rate_rps": rate, "n_requests": n_requests, "max_batch": batch, "prompt_tokens": list(workload.prompt_tokens),
                        "max_output_tokens": workload.max_output_tokens, "draft_tokens": workload.draft_tokens, "seed": seed,
                        "profile": workload.profile.profile_id,
                        "warmup_requests": max(batch, warmup_requests),
                        "policy": "static FCFS batches (simulate.static_batch)"}
            manifest = base_manifest(mode, loaded.source, loaded.weights, "replay" if (serving.harness == "canvas" and loaded.weights == "random") else ("model" if loaded.weights == "checkpoint" else "none"),
                                     hw, gpu_name, settings, {"name": "transformers", "compiled": False, "experts_implementation": experts, "device": dev})
            manifest.notes += loaded.notes
            record_load_run(out, mode, rate, rows, manifest)
        del server, loaded
        if dev.startswith("cuda"):
            torch.cuda.empty_cache()


def rate_dir(out: Path, mode: str, rate: float) -> Path:
    return out / f"{mode}-rate{rate:g}"


def record_load_run(out: Path, mode: str, rate: float, rows: list[dict], manifest: RunManifest) -> None:
    with RunWriter(rate_dir(out, mode, rate), manifest) as w:
        w.add("requests", rows)
        w.finish_unit(f"{mode}-rate{rate:g}")


def base_manifest(mode: str, model: str, weights: str, commit_source: str, hardware: str | None, gpu_name: str | None,
                  settings: dict, engine: dict) -> RunManifest:
    return RunManifest(run_id=new_run_id(f"validate-{mode}"), kind="validate", mode=mode, model=model, weights=weights,
                       commit_source=commit_source, hardware=hardware, gpu_name=gpu_name, engine=engine, settings=settings,
                       software=software_versions(), planned_units=[f"{mode}-rate{settings['rate_rps']:g}"])


def finite_rates(rates: list[float]) -> list[float]:
    bad = [r for r in rates if not (r > 0 and math.isfinite(r))]
    if bad:
        raise UserError(f"--rates {bad} are not positive", "give positive requests per second, or 'auto'")
    return rates
