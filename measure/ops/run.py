"""`costmodel measure --engine ops`: the operator campaign of the three models' passes on the local
GPU, written as a run directory (ops.csv: kernel, source and time per op and shape; meta.json:
provenance, the GPU's catalog entry and architecture, copy bandwidth, matmul rates, the per-step
device term, self-checks, missing units). `costmodel fit RUN` turns it into a profile.

Kernel choices come from the kernel set shipped for the GPU's architecture (measure/ops/kernelset.py),
self-checks run only for the kernels that set will time, and an architecture without one is autotuned.
The grid's density follows --budget-s (measure/ops/grids.py says what a coarser grid drops); an
interrupted or out-of-budget run keeps every finished op and `--resume` completes it.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from costmodel import atomic
from costmodel.errors import UserError
from costmodel.hardware import HardwareSpec, get_hardware, resolve_local
from costmodel.models import get_model
from costmodel.precision import get_precision
from measure.ops import kernelset
from measure.ops.campaign import device_facts, plan_units, selfcheck, time_unit, versions
from measure.ops.grids import GridPlan, plan_grid
from measure.ops.spikes import spikes
from measure.ops.table import COLUMNS, RowWriter, read_rows, unit_key

DEFAULT_BUDGET_S = 480.0  # a fresh machine's start leaves this of ten minutes of device time


@dataclass
class OpsOptions:
    out: str
    precision: str = "bf16"
    budget_s: float | None = None  # None: DEFAULT_BUDGET_S
    resume: bool = False
    hardware: str | None = None  # catalog id; default: the local GPU matched by its NVML name
    hardware_file: str | None = None
    device: str | None = None  # torch device (tests: cpu)
    model: str = "gemma4-26b-a4b"  # catalog target (tests: tiny-gemma4)
    grid: str | None = None  # force a density (full, half, coarse, smoke) instead of the budget's
    families: list[str] = field(default_factory=list)  # only these op families (development)
    autotune: bool = False  # every candidate even where a kernel set exists (to refresh a set after a new kernel)
    kernel_set: str | None = None  # a shipped kernel set by name instead of the architecture's (e.g. "vllm": vLLM's own MoE)
    max_units: int | None = None  # stop after this many (tests)


def _device(opts: OpsOptions):
    import torch  # heavy, optional: the measure extra

    if opts.device:
        return torch.device(opts.device)
    if not torch.cuda.is_available():
        raise UserError("--engine ops needs a CUDA GPU and none is visible to torch", "run it on the GPU machine (or --device cpu for a dry run)")
    return torch.device("cuda")


def _hardware(opts: OpsOptions, dev) -> tuple[str, HardwareSpec]:
    import torch

    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        return name, resolve_local(name, opts.hardware, opts.hardware_file)
    if not opts.hardware:
        raise UserError(f"--device {dev} has no GPU to look up in the catalog", "pass --hardware ID for the GPU the dry run stands for")
    return f"cpu ({platform.processor() or platform.machine()})", get_hardware(opts.hardware, opts.hardware_file)


def _check_out(out: Path, opts: OpsOptions, hw: HardwareSpec) -> None:
    """Nothing already written is lost or mixed with a new run."""
    meta_p = out / "meta.json"
    if not opts.resume:
        if (out / "ops.csv").exists() or meta_p.exists():
            raise UserError(f"{out} already holds an ops run", "pass --resume to complete it, or another -o")
        return
    if not meta_p.exists():
        raise UserError(f"--resume: {out} holds no ops run (meta.json)", "drop --resume to start one")
    old = json.loads(meta_p.read_text())
    if old.get("hardware") != hw.id or old.get("precisions") != [opts.precision] or old.get("model") != opts.model:
        raise UserError(f"--resume: {out} was run on {old.get('hardware')} in {old.get('precisions')} for {old.get('model')}",
                        "resume it with the same GPU, --precision and model, or pass another -o")


def _meta(opts: OpsOptions, gpu: str, hw: HardwareSpec, ks: kernelset.KernelSet, plan: GridPlan, budget_s: float) -> dict:
    return {
        "kind": "ops-run", "gpu_name": gpu, "hardware": hw.id, "architecture": hw.arch.to_dict(), "precisions": [opts.precision],
        "kernel_set": ks.name, "grid": plan.level, "grid_dropped": plan.dropped, "budget_s": budget_s, "model": opts.model,
        "sliding_window": get_model(opts.model).sliding_window, "versions": versions(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "command": "costmodel " + " ".join(sys.argv[1:]),
        "status": "incomplete", "planned_units": len(plan.units),
        "notes": [
            "ops timed with random data and uniform random top-8 routing (the roofline's assumption)",
            "attention runs on a bf16 KV cache in both precisions (SDPA has no fp8 attention); fp8 rows are the GEMMs and experts",
            "each op timed alone, back to back under a CUDA graph with rotating weight copies (>= 256 MB) so weights stream from HBM",
            "overhead: device round trip per step (H2D inputs, graph launch, D2H tokens, sync); an engine's CPU scheduling is not in it",
            f"kernels: {'the ' + ks.name + ' kernel set (shipped choices of the committed campaigns), self-checked' if ks.name else 'autotuned (no kernel set for ' + hw.arch.name + ')'}",
        ],
    }


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("ops"), BarColumn(), MofNCompleteColumn(), TextColumn("units"), TimeElapsedColumn(),
                    TextColumn("left"), TimeRemainingColumn(), TextColumn("{task.description}"), console=console, transient=False)


def _time_all(plan: GridPlan, done: set, ks: kernelset.KernelSet, dev, disabled: dict, gpu: str, out: Path, deadline: float,
              opts: OpsOptions, write_meta, console: Console) -> tuple[int, str | None]:
    """Time every planned unit not done yet, a row each as it finishes; (units timed, why it stopped)."""
    from measure.ops import kernels

    todo = [u for u in plan.units if unit_key(u[0], u[1].name, u[2]) not in done]
    writer, n, stopped, components = RowWriter(out / "ops.csv"), 0, None, False
    t0, quiet = time.time(), not console.is_terminal
    try:
        with _progress(console) as bar:
            task = bar.add_task("", total=len(todo))
            for pr, op, at in todo:
                if time.time() > deadline:
                    stopped = "budget reached"
                    break
                if opts.max_units is not None and n >= opts.max_units:
                    stopped = f"max_units {opts.max_units} reached"
                    break
                if op.family == "moe_dense" and not components:  # its parts run with this run's own kernel choices
                    components = kernels.set_components(out)
                t = time.time()
                row = time_unit(op, at, pr, dev, disabled, ks.choices(pr, op.name, at, op.family))
                row.update(gpu=gpu, unit_s=f"{time.time() - t:.3f}")
                writer.add(row)
                n += 1
                bar.update(task, advance=1, description=f"{op.name} {at}")
                if n % 100 == 0:
                    write_meta("incomplete")
                    if quiet:
                        print(f"[ops] {n}/{len(todo)} units, {time.time() - t0:.0f} s", flush=True)
    except KeyboardInterrupt:
        stopped = "interrupted"
    finally:
        writer.close()
    return n, stopped


def _retime_spikes(out: Path, plan: GridPlan, dev, disabled: dict) -> list[dict]:
    """Re-time once, with its own kernel, every unit that looks like a timing glitch
    (measure/ops/spikes.py) and keep the faster; the rows and meta.json say which."""
    rows = read_rows(out / "ops.csv")
    units = {unit_key(pr, o.name, at): (pr, o, at) for pr, o, at in plan.units}
    done = []
    for r in spikes(rows):
        key = unit_key(r["precision"], r["op"], kernelset.row_axes(r))
        if key not in units:
            continue
        pr, op, at = units[key]
        again = time_unit(op, at, pr, dev, disabled, [r["kernel"]])
        done.append({"unit": key, "first_ms": float(r["ms"]), "again_ms": float(again["ms"]) if again.get("ms") else None})
        if again.get("ms") and float(again["ms"]) < float(r["ms"]):
            r.update({k: again[k] for k in ("ms", "n_in_graph", "method", "detail")})
            r["source"] = f"{r['source']}; re-timed (first {done[-1]['first_ms']:.4g} ms looked like a glitch)"
    if done:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows({k: r.get(k, "") for k in COLUMNS} for r in rows)
        atomic.write_text(out / "ops.csv", buf.getvalue())
    return done


def run_ops(opts: OpsOptions) -> int:
    """The campaign on the local GPU into opts.out; returns 0 (an incomplete run says so and how to resume)."""
    get_precision(opts.precision)
    dev = _device(opts)
    gpu, hw = _hardware(opts, dev)
    hw.arch.check_precision(opts.precision, hw.id)
    if opts.autotune and opts.kernel_set:
        raise UserError("--autotune times every candidate; --kernel-set times one set's", "give one of them")
    ks = kernelset.load(None if opts.autotune else opts.kernel_set or hw.arch.kernel_set)
    budget_s = DEFAULT_BUDGET_S if opts.budget_s is None else float(opts.budget_s)
    units = plan_units([opts.precision], smoke=False, model=opts.model)
    if opts.families:
        units = [u for u in units if u[1].family in opts.families]
    if ks.families:  # a family-level set times only the families it names
        units = [u for u in units if u[1].family in ks.families]
        if not units:
            raise UserError(f"kernel set {ks.name} times the op families {', '.join(ks.families)}, none of those asked for",
                            f"give --ops-families {','.join(ks.families)}")
    plan = plan_grid(units, ks, budget_s, opts.grid, smoke_units=plan_units([opts.precision], smoke=True, model=opts.model))
    out = Path(opts.out)
    _check_out(out, opts, hw)
    out.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    console.print(f"[ops] {gpu} -> {hw.id} ({hw.arch.name}), {opts.precision}: {plan.describe()}")
    t_start = time.time()
    done = {unit_key(r["precision"], r["op"], kernelset.row_axes(r)) for r in read_rows(out / "ops.csv") if r.get("ms")}
    meta = _meta(opts, gpu, hw, ks, plan, budget_s)
    if opts.resume:
        meta["resumed_from"] = json.loads((out / "meta.json").read_text()).get("date")
    meta.update(device_facts(dev))
    used = {k for u in plan.units for k in ks.choices(u[0], u[1].name, u[2], u[1].family)} if ks.name else None
    t_check = time.time()
    meta["selfcheck"], disabled = selfcheck(dev, None, used)
    meta["selfcheck_s"], meta["disabled_kernels"] = round(time.time() - t_check, 1), disabled
    planned = [unit_key(pr, o.name, at) for pr, o, at in plan.units]

    def write_meta(status: str) -> list[str]:
        got = {unit_key(r["precision"], r["op"], kernelset.row_axes(r)) for r in read_rows(out / "ops.csv") if r.get("ms")}
        missing = [u for u in planned if u not in got]
        meta.update(status=status if not missing else "incomplete", done_units=len(got), missing_units=missing,
                    missing_count=len(missing), wall_s=round(time.time() - t_start, 1))
        atomic.write_json(out / "meta.json", meta)
        return missing

    write_meta("incomplete")
    n, stopped = _time_all(plan, done, ks, dev, disabled, gpu, out, t_start + budget_s, opts, write_meta, console)
    if stopped:
        meta["stopped"] = stopped
    elif opts.max_units is None:
        meta["retimed_spikes"] = _retime_spikes(out, plan, dev, disabled)
    missing = write_meta("complete")
    console.print(f"[ops] {n} units timed in {time.time() - t_start:.0f} s (self-checks {meta['selfcheck_s']} s); "
                  + (f"{len(missing)} missing ({stopped or 'failed'}): costmodel measure --engine ops --resume -o {out}" if missing
                     else f"complete: costmodel fit {out} -o profile.json"))
    return 0
