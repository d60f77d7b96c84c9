"""A `vllm bench serve --save-result` JSON file, read and checked (the writer of its run directory,
kind "bench-import", is measure/endpoint/bench_import.py): one JSON object, or several on separate
lines with --append-result. `read_results` returns the checked result objects; `infer_mode` the
serving mode a file's counters imply (diffusion_* keys: DiffusionGemma; spec_decode_*: MTP; else the
model name), `settled_mode` the mode only where the file settles it (None: ask for --mode);
`canvas_from_counters` the canvas length a diffusion result's counters imply.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from costmodel.errors import UserError
from costmodel.fields import BENCH_PROMPTS
from costmodel.jsonfile import DuplicateKey, loads_unique
from costmodel.modes import all_modes, recorded_mode

BENCH_KIND = "bench-import"  # the manifest kind of its run directory
PCT_KEY = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
NUMERIC = ("duration", "completed", "failed", "num_prompts", "total_input_tokens", "total_output_tokens", "request_throughput",
           "output_throughput", "total_token_throughput", "burstiness", "max_output_tokens_per_s", "max_concurrent_requests",
           "spec_decode_acceptance_rate", "spec_decode_acceptance_length", "spec_decode_num_drafts", "spec_decode_draft_tokens",
           "spec_decode_accepted_tokens")
DETAIL = ("input_lens", "output_lens", "ttfts", "itls", "errors")


def read_results(path: Path) -> list[dict]:
    """The result objects of one file (one JSON document, or JSON lines)."""
    if not path.exists():
        raise UserError(f"bench result {path} does not exist", "pass the JSON file `vllm bench serve --save-result` wrote")
    if path.is_dir():
        raise UserError(f"bench result {path} is a directory", "pass the .json files inside it")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"bench result {path} is not UTF-8 text", "pass a `vllm bench serve --save-result` JSON file") from None
    if not text.strip():
        raise UserError(f"bench result {path} is empty", "pass a `vllm bench serve --save-result` JSON file")
    try:
        obj = loads_unique(text)  # a key given twice refused, never the last of two
        results = obj if isinstance(obj, list) else [obj]
    except DuplicateKey as e:
        raise UserError(f"bench result {path} gives the key {e.key!r} twice in one object", "keep one (JSON readers silently keep the last)") from None
    except json.JSONDecodeError:
        results = []  # --append-result writes one JSON object per line
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                results.append(loads_unique(line))
            except DuplicateKey as e:
                raise UserError(f"bench result {path} line {n} gives the key {e.key!r} twice", "keep one (JSON readers silently keep the last)") from None
            except json.JSONDecodeError as e:
                raise UserError(f"bench result {path} is not valid JSON (line {n}: {e.msg})", "pass the file `vllm bench serve --save-result` wrote, unedited") from None
    if not results:
        raise UserError(f"bench result {path} holds no result", "pass a `vllm bench serve --save-result` JSON file")
    for i, r in enumerate(results):
        validate(r, f"{path}" + (f" result {i}" if len(results) > 1 else ""))
    return results


def validate(r, where: str) -> None:
    if not isinstance(r, dict):
        raise UserError(f"bench result {where} is not a JSON object", "pass a `vllm bench serve --save-result` JSON file")
    missing = [k for k in ("duration", "completed") if k not in r]
    if missing:
        raise UserError(f"bench result {where} lacks {', '.join(missing)}", "it is not a `vllm bench serve --save-result` file")
    for k in NUMERIC:
        v = r.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and math.isnan(v))):
            raise UserError(f"bench result {where}: {k} is {v!r}, not a number", "regenerate the file with `vllm bench serve --save-result`")
        if v is not None and v < 0:
            raise UserError(f"bench result {where}: {k} is negative ({v})", "regenerate the file")
    for k in ("completed", "num_prompts"):  # bounded before any prompt is built (costmodel/inputs.py's bench file fields)
        if isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool):
            BENCH_PROMPTS.named(k).check(r[k], f"bench result {where}")
    if not r["duration"] > 0:
        raise UserError(f"bench result {where}: duration is {r['duration']}", "a result needs a positive duration")
    for k, v in r.items():
        if PCT_KEY.match(k) and v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise UserError(f"bench result {where}: {k} is {v!r}, not a number", "regenerate the file")
    rate = r.get("request_rate")
    if rate is not None and not (isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0) and rate != "inf":
        raise UserError(f"bench result {where}: request_rate is {rate!r}", 'expected a positive number or "inf"')
    if "model_id" in r and not isinstance(r["model_id"], str):
        raise UserError(f"bench result {where}: model_id is {r['model_id']!r}", "expected the served model's name")
    present = [k for k in DETAIL if k in r]
    if present:
        if not all(isinstance(r[k], list) for k in present):
            raise UserError(f"bench result {where}: {', '.join(k for k in present if not isinstance(r[k], list))} is not a list", "regenerate with --save-detailed")
        lens = {k: len(r[k]) for k in present}
        if len(set(lens.values())) > 1:
            raise UserError(f"bench result {where}: per-request arrays differ in length {lens}", "regenerate with --save-detailed")
        if "itls" in r and not all(isinstance(x, list) for x in r["itls"]):
            raise UserError(f"bench result {where}: itls is not a list of lists", "regenerate with --save-detailed")


def infer_mode(results: list[dict], model: str) -> str:
    """The mode whose counters (ServingMode.bench_counter_prefix) the results carry, else the one
    the model's name hints at (bench_model_hint), else the recordings' default mode."""
    keys = {k for r in results for k in r}
    by_counters = [m for m in all_modes() if m.bench_counter_prefix and any(k.startswith(m.bench_counter_prefix) for k in keys)]
    if by_counters:
        return by_counters[0].name
    return recorded_mode(lambda m: bool(m.bench_model_hint) and m.bench_model_hint in model.lower()).name


TRANSCRIBED_SERVER = ("costmodel_transcription", "server")  # a published figure's server settings (measure/endpoint/bench_import.py)
SIMULATED = "costmodel_simulation"  # a file `costmodel simulate -o` wrote (as_bench_result): the simulated point's mode, profile and engine


def settled_mode(results: list[dict], model: str) -> str | None:
    """The mode a file settles: a simulated point's own (costmodel_simulation), its counters (a mode's bench_counter_prefix keys), a transcribed
    figure's server settings (num_speculative_tokens: a drafting mode; a canvas: a diffusion mode),
    else a word in the model's name (bench_model_hint); None where they leave several modes, e.g. a
    Gemma-4 file without spec_decode_* keys: AR, or MTP whose server or writer saved no counters."""
    simulated = {(r.get(SIMULATED) or {}).get("mode") for r in results if isinstance(r.get(SIMULATED), dict)}
    if len(simulated) == 1 and simulated <= {m.name for m in all_modes()}:
        return simulated.pop()  # a file `costmodel simulate -o` wrote names its mode
    keys = {k for r in results for k in r}
    server = {k for r in results for k in (((r.get(TRANSCRIBED_SERVER[0]) or {}).get(TRANSCRIBED_SERVER[1])) or {})}
    signs = [m for m in all_modes() if (m.bench_counter_prefix and any(k.startswith(m.bench_counter_prefix) for k in keys))
             or (m.assistant and "num_speculative_tokens" in server)
             or (m.canvas_sampler and server & {"canvas_length", "max_denoising_steps"})
             or (m.bench_model_hint and m.bench_model_hint in model.lower())]
    return signs[0].name if signs else None


def as_bench_result(summary, requests) -> dict:
    """One simulated point (a PointSummary and its per-request rows, costmodel/schemas/results.py) as
    `vllm bench serve --save-result --save-detailed` writes a run, so that `costmodel compare-bench`
    (or any reader of vllm bench files) reads it back: every request in arrival order (one that did
    not finish is an error), the figures as vllm bench computes them over the finished requests
    (duration to the last finish; TPOT over requests of more than one token), and a
    `costmodel_simulation` section naming the mode, profile and engine settings."""
    import numpy as np  # the numeric library, where the figures are computed (issue 40)

    from costmodel.modes import get_mode

    rows = requests.sort_values("arrival_s", kind="mergesort")
    ok = rows["finished"].astype(bool).to_numpy()
    done = rows[ok]
    out = done["output_tokens"].to_numpy(float)
    ttft, e2e = done["ttft_ms"].to_numpy(float), done["e2e_ms"].to_numpy(float)
    duration = float(done["finish_s"].max()) if len(done) else float(summary.simulated_s)
    multi = out > 1
    tpot = (e2e - ttft)[multi] / (out[multi] - 1)

    def stats(name: str, x) -> dict:
        if not len(x):
            return {}
        p = np.percentile(x, [50, 90, 95, 99])
        return {f"mean_{name}_ms": float(np.mean(x)), f"median_{name}_ms": float(p[0]), f"std_{name}_ms": float(np.std(x)),
                **{f"p{q}_{name}_ms": float(v) for q, v in zip((90, 95, 99), p[1:])}}

    rate = summary.qps if math.isfinite(summary.qps) else "inf"
    gamma = re.search(r"burstiness ([0-9.e+-]+)", summary.workload or "")  # the workload's gamma arrivals (simulate/workload.py), else Poisson
    return {
        "date": "", "backend": "vllm", "label": f"costmodel simulate {summary.mode} {summary.qps:g} QPS"
        + (f" {summary.concurrency} clients" if summary.concurrency else ""),
        "model_id": get_mode(summary.mode).default_model, "num_prompts": int(len(rows)), "request_rate": rate,
        "burstiness": float(gamma.group(1)) if gamma else 1.0, "max_concurrency": int(summary.concurrency) or None,
        "duration": duration, "completed": int(ok.sum()), "failed": int((~ok).sum()),
        "total_input_tokens": int(done["prompt_tokens"].sum()), "total_output_tokens": int(out.sum()),
        "request_throughput": len(done) / duration, "output_throughput": float(out.sum()) / duration,
        "total_token_throughput": float(done["prompt_tokens"].sum() + out.sum()) / duration,
        "input_lens": [int(x) for x in rows["prompt_tokens"]], "output_lens": [int(x) if f else 0 for x, f in zip(rows["output_tokens"], ok)],
        "ttfts": [float(x) / 1000 if f else 0.0 for x, f in zip(rows["ttft_ms"], ok)],
        "errors": ["" if f else "unfinished when the simulation ended" for f in ok],
        **stats("ttft", ttft), **stats("tpot", tpot), **stats("e2el", e2e),
        SIMULATED: {"mode": summary.mode, "profile_id": summary.profile_id, "hardware": summary.hardware, "seed": summary.seed,
                    "replicas": summary.replicas, "workload": summary.workload, "engine_settings": summary.engine_settings},
    }


def unsettled_modes() -> list[str]:
    """The modes a file with no sign (settled_mode None) may be of: those no model name names."""
    return [m.name for m in all_modes() if not m.bench_model_hint]


def number(r: dict, k: str) -> float:
    """A result's numeric field as a float (NaN where absent or not a number)."""
    v = r.get(k)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def canvas_from_counters(r: dict) -> float | None:
    """The canvas length a diffusion result's counters imply (None without them). vLLM 0.32's
    benchmark (vllm/benchmarks/serve.py main: block_size = Δpositions / Δsteps, canvases =
    Δcommitted / block_size, diffusion_denoising_steps = Δsteps - canvases) saves positions P,
    committed tokens T and denoising steps D (commits excluded), so P = C (D + T / C): C = (P - T) / D.
    Files with the older counter names (diffusion_num_*) count positions per canvas, not per step:
    they carry no canvas length (None)."""
    if "diffusion_denoising_steps" not in r:
        return None
    den, pos, comm = number(r, "diffusion_denoising_steps"), number(r, "diffusion_canvas_positions"), number(r, "diffusion_committed_tokens")
    c = (pos - comm) / den if den and den > 0 and not math.isnan(pos) and not math.isnan(comm) else math.nan
    return float(round(c)) if math.isfinite(c) and c >= 1 else None
