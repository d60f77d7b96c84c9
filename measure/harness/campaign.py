"""One harness run: detect the GPU, build or load the models, plan the units, and write the run
directory unit by unit (resumable), with NVML telemetry and a progress bar.

Units: `timing-<cell>` per grid cell, `hook-overhead` (diffusion), `profile-<cell>` and
`probe-<prompt_id>`. A unit that runs out of GPU memory is skipped with a note and the run stays
`incomplete` (its other units are kept; --resume retries it)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from costmodel import atomic
from costmodel.console import make_console
from costmodel.errors import UserError
from costmodel.hardware import HardwareSpec, get_hardware, match_nvml_name
from costmodel.schemas.rundir import RunManifest, RunWriter, load_run, new_run_id, software_versions
from measure.harness import baseline, diffusion
from measure.harness.build import LoadedModels, load_models
from measure.harness.causal import CausalEngine
from measure.harness.config import Cell, HarnessConfig, HarnessOptions, parse_config
from measure.harness.context import RunContext, UnitRows
from measure.harness.kinds import CausalKinds
from measure.harness.replay import StepSchedule, load_schedule
from measure.harness.summary import write_summary
from measure.harness.telemetry import GpuInfo, Telemetry, gpu_info
from measure.harness.timing import PassTimer, RooflineAnnotator
from measure.probes import load_suite


def plan_units(cfg: HarnessConfig) -> list[tuple[str, str, object]]:
    """(unit name, kind, payload) in execution order. The hook-overhead and profile units run at the
    first cell's shape right after it, so a compiled engine re-uses that cell's compiled graphs and a
    campaign cut short still has them."""
    cells = [(f"timing-{c.label}", "timing", c) for c in cfg.cells()]
    units: list[tuple[str, str, object]] = cells[:1]
    first = Cell(cfg.batches[0], cfg.contexts[0])
    if cfg.serving.harness == "canvas" and cfg.hook_overhead_repeats and cfg.timing_grid:
        units.append(("hook-overhead", "hook", first))
    if cfg.profile_steps:
        units.append((f"profile-{first.label}", "profile", first))
    units += cells[1:]
    if cfg.probe_prompts_per_regime:
        per: dict[str, int] = {}
        for p in load_suite(cfg.probe_regimes):
            if cfg.probe_split != "all" and p.split != cfg.probe_split:
                continue
            if per.get(p.regime, 0) >= cfg.probe_prompts_per_regime:
                continue
            per[p.regime] = per.get(p.regime, 0) + 1
            units.append((f"probe-{p.prompt_id}", "probe", p))
    return units


def _device(cfg: HarnessConfig):
    import torch  # optional heavy dependency (the measure extra)

    name = cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {name}: torch sees no CUDA GPU", "run on a GPU machine, or pass --device cpu with a tiny-* model")
    return torch.device(name)


def _roofline_hw(cfg: HarnessConfig, gpu: GpuInfo, notes: list[str]):
    detected = match_nvml_name(gpu.name) if gpu.name else None
    if cfg.roofline_gpu:
        return detected, get_hardware(cfg.roofline_gpu)
    if gpu.name and detected is None:
        notes.append(f"GPU {gpu.name!r} is not in the hardware catalog: roofline columns are NaN (pass --roofline-gpu)")
    if not gpu.name:
        notes.append("no NVIDIA GPU detected: roofline columns are NaN unless --roofline-gpu is given")
    return detected, detected


def _compile_settings() -> dict:
    """Room for one compiled graph per grid shape (dynamo's default limit is 8 recompiles)."""
    import torch  # optional heavy dependency (the measure extra)

    out = {}
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 256)
            out[name] = 256
    for name in ("accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 4096)
            out[name] = 4096
    return out


@dataclass
class CampaignSetup:
    """What a harness run settles before it builds the models."""

    device: Any  # torch.device
    gpu: GpuInfo
    detected: HardwareSpec | None  # the local GPU, when the catalog knows it
    roof_hw: HardwareSpec | None  # the GPU whose roofline the passes are compared with
    compile_cfg: dict
    schedule: StepSchedule | None
    units: list[tuple[str, str, object]]
    notes: list[str] = field(default_factory=list)


def _setup(cfg: HarnessConfig) -> CampaignSetup:
    device = _device(cfg)
    notes: list[str] = []
    gpu = gpu_info(device.index or 0) if device.type == "cuda" else GpuInfo(None, None, None, None, None, None, error="CPU run")
    detected, roof_hw = _roofline_hw(cfg, gpu, notes)
    compile_cfg = _compile_settings() if cfg.engine == "compiled" else {}
    schedule = load_schedule(cfg.replay, cfg.replay_regimes) if cfg.replay else None
    return CampaignSetup(device, gpu, detected, roof_hw, compile_cfg, schedule, plan_units(cfg), notes)


def _engine_identity(cfg: HarnessConfig, setup: CampaignSetup, models: LoadedModels) -> dict:
    """manifest.engine: how the passes ran (the fit pools only runs that agree on it)."""
    import torch  # optional heavy dependency (the measure extra)
    import transformers  # optional heavy dependency (the measure extra)

    return {"name": "transformers", "engine": cfg.engine, "compiled": cfg.engine == "compiled",
            "cache": "static" if cfg.engine == "compiled" else "dynamic",
            "compile_mode": "reduce-overhead" if cfg.engine == "compiled" else None, "dynamo": setup.compile_cfg,
            "experts_implementation": cfg.experts_implementation,
            "attn_implementation": getattr(models.model.config, "_attn_implementation", None),
            "transformers": transformers.__version__, "torch": torch.__version__, "device": str(setup.device),
            "models": models.describe()}


def _settings(cfg: HarnessConfig, setup: CampaignSetup, tel: Telemetry) -> dict:
    """manifest.settings: the options, the GPU, telemetry, the replay schedule and where MTP acceptance comes from."""
    settings = cfg.settings()
    settings["gpu"] = setup.gpu.to_dict()
    settings["telemetry"] = {"interval_ms": cfg.telemetry_interval_ms, "enabled": tel.enabled, "energy_counter": tel.energy_counter}
    if setup.schedule is not None:
        settings["replay_schedule"] = setup.schedule.describe()
    if cfg.serving.assistant:
        settings["mtp_acceptance_source"] = (
            "greedy verification of the checkpoint's drafts" if cfg.weights == "checkpoint" else
            f"stated default: per-token acceptance {cfg.mtp_acceptance_rate} drawn per round (vLLM benchmarks' synthetic rate); NOT measured")
    return settings


def _manifest(cfg: HarnessConfig, setup: CampaignSetup, engine: dict, tel: Telemetry) -> RunManifest:
    import torch  # optional heavy dependency (the measure extra)
    import transformers  # optional heavy dependency (the measure extra)

    settings = _settings(cfg, setup, tel)
    notes = setup.notes
    if cfg.weights == "random":
        notes.append("RANDOM WEIGHTS: pass timings are the architecture's; "
                     + ("commit records are random-weights behaviour, not the model's" if cfg.serving.harness == "canvas" else
                        "MTP acceptance is the stated default, not measured" if cfg.serving.assistant else "no model behaviour is measured"))
    if setup.schedule is not None:
        notes.append(f"REPLAY: canvases stop after k_b steps drawn from {setup.schedule.source}; commit records are the sampler's on these weights")
    sw = software_versions()
    sw.update(torch_cuda=torch.version.cuda, driver=setup.gpu.driver, transformers=transformers.__version__, torch=torch.__version__)
    return RunManifest(
        run_id=new_run_id(f"gpu-{cfg.mode}"), kind="gpu", mode=cfg.mode, model=cfg.model, weights=cfg.weights,
        commit_source=cfg.commit_source, hardware=setup.detected.id if setup.detected else None, gpu_name=setup.gpu.name, precision="bf16",
        engine=engine, settings=settings, software=sw, planned_units=[u[0] for u in setup.units], notes=notes)


def _build(cfg: HarnessConfig, setup: CampaignSetup, console) -> LoadedModels:
    import torch  # optional heavy dependency (the measure extra)

    device = setup.device
    console.print(f"building {cfg.model} ({cfg.weights} weights, {cfg.mode}) on {device} ...")
    models = load_models(cfg, device)
    setup.notes += models.notes
    console.print(f"built in {models.build_s:.1f} s: {models.params / 1e9:.3f}B parameters"
                  + (f" + assistant {models.assistant_params / 1e9:.3f}B" if models.assistant is not None else ""))
    if device.type == "cuda":
        setup.notes.append(f"GPU memory allocated after build: {torch.cuda.memory_allocated(device) / 2**30:.1f} GiB")
    return models


def _print_summary(cfg: HarnessConfig, console) -> None:
    run = load_run(cfg.out)
    doc = write_summary(run)
    console.print(f"[bold]{cfg.out}[/bold]: {run.manifest.status}, {len(run.manifest.done_units)}/{len(run.manifest.planned_units)} units; "
                  f"summary in {cfg.out / 'summary.md'}")
    for r in doc["pass_medians"][:60]:
        x = r.get("x_roofline_median")
        console.print(f"  {r['pass_kind']:>15s} seqs {int(r['seqs']):>4d} tok {int(r['tokens_per_seq']):>4d} ctx {int(r['context_tokens']):>5d}: "
                      f"{r['gpu_ms_median']:8.2f} ms (x_roofline {'n/a' if x is None else f'{x:.2f}'}, n={r['n']})")


def run_campaign(cfg: HarnessConfig) -> int:
    t_start = time.perf_counter()
    console = make_console(stderr=True)
    setup = _setup(cfg)
    with Telemetry(cfg.telemetry_interval_ms, setup.device.index or 0) as tel:
        tel.set_phase("build")
        models = _build(cfg, setup, console)
        engine = _engine_identity(cfg, setup, models)
        engine_label = {"engine": cfg.engine, "experts_implementation": cfg.experts_implementation, "cache": engine["cache"],
                        "roofline_gpu": setup.roof_hw.id if setup.roof_hw else None}
        manifest = _manifest(cfg, setup, engine, tel)
        with RunWriter(cfg.out, manifest, resume=cfg.resume) as w:
            timer = PassTimer(setup.device)
            ctx = RunContext(cfg, models, setup.device, timer, RooflineAnnotator(models.shape, setup.roof_hw, models.assistant_shape),
                             cfg.out, engine_label, tel.set_phase, setup.schedule)
            if cfg.serving.harness != "canvas":
                ctx.causal = CausalEngine(models.model, cfg.engine, timer, models.assistant, CausalKinds.of(cfg.serving))
            _execute(ctx, w, tel, setup.units, console)
            atomic.write_json(cfg.out / "campaign_time.json", {
                "command_wall_s": time.perf_counter() - t_start, "build_s": models.build_s,
                "note": "wall time of this `costmodel measure` command (model build, compilation, warm-up, timed units), excluding Python start-up"})
    _print_summary(cfg, console)
    return 0


def run_harness(opts: HarnessOptions) -> int:
    """`costmodel measure` without --endpoint: check the options, then run the harness on the local GPU."""
    cfg = parse_config(opts)
    try:
        import torch  # noqa: F401  optional heavy dependency (the measure extra), checked before anything runs
        import transformers  # noqa: F401  optional heavy dependency (the measure extra)
    except ImportError as e:
        raise UserError(f"`costmodel measure` without --endpoint needs {e.name or 'torch'}", "pip install 'costmodel[measure]'") from None
    return run_campaign(cfg)


def uniform(rows: list[dict]) -> list[dict]:
    """Every row with the union of the rows' keys (None where absent), so parquet sees nulls, not NaN
    in list or string columns."""
    keys: dict[str, None] = {}
    for r in rows:
        keys.update(dict.fromkeys(r))
    return [{k: r.get(k) for k in keys} for r in rows]


def _execute(ctx: RunContext, w: RunWriter, tel: Telemetry, units, console) -> None:
    import torch  # optional heavy dependency (the measure extra)

    canvas = ctx.cfg.serving.harness == "canvas"  # the mode's harness program: diffusion.py's canvases, else causal (baseline.py)
    todo = [u for u in units if not w.is_done(u[0])]
    show = os.environ.get("COSTMODEL_NO_PROGRESS") != "1"
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, disable=not show, transient=False) as bar:
        task = bar.add_task("measure", total=len(todo))
        for name, kind, payload in todo:
            bar.update(task, description=name)
            t0 = time.perf_counter()
            cuda = ctx.device.type == "cuda"
            if cuda:
                torch.cuda.reset_peak_memory_stats(ctx.device)
            try:
                rows = UnitRows()
                if kind == "timing":
                    rows = (diffusion.timing_cell if canvas else baseline.timing_cell)(ctx, name, payload)
                elif kind == "hook":
                    doc = diffusion.hook_overhead(ctx, name)
                    rows.summary = (f"hook overhead {doc['overhead_ms_per_step']:.3f} ms/step ({doc['overhead_pct_of_step']:.2f}% of step), "
                                    f"identical outputs {doc['identical_pairs']}")
                elif kind == "profile":
                    doc = (diffusion.profile_steps if canvas else baseline.profile_steps)(ctx, name)
                    top = ", ".join(f"{k} {v:.2f}" for k, v in list(doc["categories_ms_per_step"].items())[:4])
                    rows.summary = f"profile {doc['total_ms_per_step']:.2f} ms/step: {top}"
                elif kind == "probe":
                    rows = (diffusion.probe_unit if canvas else baseline.mtp_probe_unit)(ctx, name, payload)
            except torch.cuda.OutOfMemoryError as e:
                w.note(f"{name}: CUDA out of memory, unit skipped ({str(e).splitlines()[0][:160]})")
                console.print(f"[yellow]{name}: out of GPU memory, skipped[/yellow]")
                torch.cuda.empty_cache()
                bar.advance(task)
                continue
            if cuda:
                peak = torch.cuda.max_memory_allocated(ctx.device) / 2**30
                for r in rows.passes:
                    r["unit_peak_mem_gib"] = peak
                rows.summary += f"; peak {peak:.1f} GiB"
            w.add("passes", uniform(rows.passes))
            w.add("commits", uniform(rows.commits))
            w.add("generations", uniform(rows.generations))
            w.add("telemetry", uniform(tel.take()))
            w.finish_unit(name)
            console.print(f"{name}: {time.perf_counter() - t0:.1f} s  {rows.summary}")
            bar.advance(task)
