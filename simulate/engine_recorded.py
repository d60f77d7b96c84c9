"""The recorded-run layer of the engine settings (costmodel/engine_settings.py) from a recording on
disk: `costmodel simulate --engine-from PATH` runs the simulator with the settings a real server ran.

A recording is one of:
- a scheduler record (`*.jsonl` / `*.jsonl.gz`, measure/vllm/sched_recorder.py): its config line, what
  vLLM's scheduler enforced (max_num_seqs, token budget, canvas or k, block size, async scheduling);
- a run directory: its manifest's engine section (an engine-steps run records the server's settings;
  a bench import its canvas length, read from the bench file's counters);
- a `vllm bench serve --save-result` file: the canvas length its diffusion counters imply, MTP's k
  (draft tokens / drafts), and the server settings a transcribed published figure names
  (`costmodel_transcription.server`: data/published/).
Each is one server of one mode: `recorded_settings` says which.
"""

from __future__ import annotations

from pathlib import Path

from costmodel.engine_settings import EngineSettings, from_run_engine, from_scheduler_config, layered, setting_names
from costmodel.errors import UserError
from costmodel.modes import ServingMode, get_mode, recorded_mode
from costmodel.schemas.rundir import load_run
from costmodel.schemas.bench_result import canvas_from_counters, infer_mode, read_results
from costmodel.schemas.engine_trace import read_records


def recorded_settings(path: str | Path) -> tuple[str, EngineSettings]:
    """(the recording's mode, its engine settings as the recorded-run layer)."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"--engine-from {p} does not exist", "give a scheduler record (.jsonl.gz), a run directory or a bench JSON file")
    if p.is_dir():
        return _run_dir(p)
    if p.name.endswith((".jsonl", ".jsonl.gz")):
        config, _, _ = read_records(p)
        if not config:
            raise UserError(f"--engine-from {p} holds no scheduler config line", "record with measure/vllm/sched_recorder.py")
        serving = recorded_mode(lambda m: m.runs_scheduler(config))  # the mode whose engine the config line shows
        return serving.name, from_scheduler_config(config, serving, f"scheduler record {p.name}")
    return _bench(p)


def _run_dir(p: Path) -> tuple[str, EngineSettings]:
    run = load_run(p)
    m = run.manifest
    s = from_run_engine(m.engine, m.serving, f"recorded run: {p.name} manifest")
    canvas = (m.settings or {}).get("canvas_length") if isinstance(m.settings, dict) else None
    if m.serving.decodes_canvases and s.canvas_length is None and isinstance(canvas, int) and canvas >= 1:
        src = (m.settings or {}).get("canvas_length_source", "run settings")
        s = s.with_values(f"recorded run: {p.name} ({src})", canvas_length=canvas)
    return m.mode, s


def _bench(p: Path) -> tuple[str, EngineSettings]:
    results = read_results(p)
    model = next((r["model_id"] for r in results if isinstance(r.get("model_id"), str)), "")
    mode = infer_mode(results, model)
    s = bench_settings(results, get_mode(mode), p.name)
    if s is None:
        raise UserError(f"--engine-from {p}: the bench file's counters give no engine setting", "give the server's scheduler record or run directory")
    return mode, s


# a published figure transcribed into a bench file (data/published/) names its server's settings here
TRANSCRIPTION, TRANSCRIBED_SERVER = "costmodel_transcription", "server"


def bench_settings(results: list[dict], mode: ServingMode, name: str) -> EngineSettings | None:
    """The engine settings `vllm bench serve --save-result` results of one server imply (None: none):
    the canvas length its diffusion counters imply, MTP's k (draft tokens / drafts), over the settings
    a transcribed published figure names (`costmodel_transcription.server`, e.g. max_num_seqs,
    max_denoising_steps; keys that are not engine settings, such as max_model_len, are skipped)."""
    vals: dict = {}
    if mode.decodes_canvases:  # its counters imply the canvas length
        seen = {c for c in map(canvas_from_counters, results) if c is not None}
        if len(seen) == 1:
            vals["canvas_length"] = int(seen.pop())
    elif mode.assistant:  # its spec-decode counters imply k (draft tokens per draft)
        ks = {round(r["spec_decode_draft_tokens"] / r["spec_decode_num_drafts"]) for r in results
              if r.get("spec_decode_num_drafts") and r.get("spec_decode_draft_tokens")}
        if len(ks) == 1:
            vals["num_speculative_tokens"] = int(ks.pop())
    counters = EngineSettings.given(vals, f"recorded run: bench file {name} counters") if vals else None
    servers = [r[TRANSCRIPTION][TRANSCRIBED_SERVER] for r in results
               if isinstance(r.get(TRANSCRIPTION), dict) and isinstance(r[TRANSCRIPTION].get(TRANSCRIBED_SERVER), dict)]
    if not servers or any(s != servers[0] for s in servers):
        return counters
    names = set(setting_names()) - {"shape_bits"}
    given = EngineSettings.given({k: v for k, v in servers[0].items() if k in names}, f"recorded run: bench file {name} {TRANSCRIPTION}.{TRANSCRIBED_SERVER}")
    return given if counters is None else layered(counters, given)
