"""The GPU half of `costmodel validate`: build each mode's model once (as `costmodel measure`
does), serve each mode's loads in real time (the requests and the rates are the simulator's,
drawn before: `ModeLoads`, costmodel/schemas/validation_loads.py, handed on by pipeline/validate.py)
and record each load as a run directory of kind "validate" (scored by simulate/validate/runner.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from costmodel.errors import UserError
from costmodel.hardware import detect_local
from costmodel.models import AR_SIBLING
from costmodel.modes import ServingMode, get_mode
from costmodel.schemas.rundir import RunManifest, RunWriter, new_run_id, software_versions
from costmodel.schemas.validation_loads import ModeLoads
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


def run_validation_loads(loads: list[ModeLoads], model, random_weights, checkpoint, ar_checkpoint, assistant_checkpoint, experts, device,
                         out: Path, con) -> None:
    """Every mode's loads served on its model, a load already recorded under `out` skipped."""
    import torch  # optional heavy dependency (the measure extra)

    dev = device or "cuda"
    if dev.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {device or 'cuda (the default)'}: torch sees no CUDA GPU, and a full-size model on the CPU would take "
                        "hours", "run on a GPU machine, pass --device cpu with a tiny-* --model, or re-score recorded loads with --score-only")
    try:
        gpu_name, spec = detect_local()
        hw = spec.id if spec else None
    except UserError:
        gpu_name, hw = None, None
    for ml in loads:
        serving = get_mode(ml.mode)  # the --mode name, resolved once
        cfg = _harness_config(serving, model, random_weights, checkpoint, ar_checkpoint, assistant_checkpoint, experts, dev, out)
        loaded = load_models(cfg, dev)
        if serving.harness == "canvas":
            server = DiffusionServer(loaded.model, torch.device(dev), seed=ml.workload.get("seed", 0))
        else:
            server = ARServer(loaded.model, torch.device(dev), assistant=loaded.assistant if serving.assistant else None,
                              draft_tokens=ml.draft_tokens, seed=ml.workload.get("seed", 0))
        # Warm-up, untimed: requests of another seed served back to back in full batches. A cold eager
        # engine runs its first ~20 batches up to 1.5x slower (seen on the H200: the first rate served was
        # the slow one whichever rate came first), so a load run measures a warm server, as a production replica is.
        for i in range(0, len(ml.warmup), ml.max_batch):
            server.serve(ml.warmup[i:i + ml.max_batch])
        for rate, reqs in ml.rates:
            _serve_rate(server, ml, serving, loaded, rate, reqs, (hw, gpu_name), {"name": "transformers", "compiled": False,
                        "experts_implementation": experts, "device": dev}, out, con)
        del server, loaded
        if dev.startswith("cuda"):
            torch.cuda.empty_cache()


def _serve_rate(server, ml: ModeLoads, serving: ServingMode, loaded, rate: float, reqs, gpu: tuple, engine: dict, out: Path, con) -> None:
    """One rate's load served and recorded (skipped when already recorded)."""
    mode = ml.mode
    if (rate_dir(out, mode, rate) / "manifest.json").exists():
        con.print(f"{mode} @ {rate:g} req/s: already recorded, skipped")
        return
    con.print(f"{mode} @ {rate:g} req/s: {len(reqs)} requests, static batches of up to {ml.max_batch}")
    rows = run_load(server, reqs, ml.max_batch)
    settings = {"rate_rps": rate, **ml.workload, "n_requests": len(reqs), "max_batch": ml.max_batch, "warmup_requests": len(ml.warmup),
                "policy": "static FCFS batches (simulate.static_batch)"}
    commit = "replay" if (serving.harness == "canvas" and loaded.weights == "random") else ("model" if loaded.weights == "checkpoint" else "none")
    manifest = base_manifest(mode, loaded.source, loaded.weights, commit, gpu[0], gpu[1], settings, engine)
    manifest.notes += loaded.notes
    record_load_run(out, mode, rate, rows, manifest)


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
