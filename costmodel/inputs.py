"""The one table of every input a user gives: each CLI option of every command, and each field of a
workload, trace, load curve, fleet, sweep spec, price file, bench file, hardware file, environment
variable and profile, declared once with its kind, range and unit (a costmodel.fields.Field for a
number) and its scope (the commands, modes or companion options it applies to).

The command line is checked against it at the edge (costmodel/cli/edge.py) before any command runs:
an option repeated where it is not a list, a number outside its field, an option outside its scope -
each one line naming the option, the scope and the fix. tests/test_input_table.py fails for any
click option or schema field this table does not declare, and the fuzz suite draws its inputs from
it (every field at and past its bounds, every option out of scope), so a new input is checked and
fuzzed the day it is declared.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from costmodel import fields as F
from costmodel.fields import Field

KINDS = ("count", "real", "flag", "name", "list", "path", "text", "object")
SOURCES = ("option", "workload", "trace", "load curve", "fleet", "sweep spec", "price file", "bench file", "hardware file",
           "environment", "profile")


@dataclass(frozen=True)
class Scope:
    """Where an input applies within its commands: `applies(params, given)` is False outside it
    (`given(name)`: the option was given by the user, not defaulted); `text()` names the scope."""

    text: Callable[[], str]
    applies: Callable[[dict, Callable[[str], bool]], bool]
    fix: str = ""
    outside: Callable[[str], list[str]] = lambda tmp: []  # noqa: E731 - command-line words that put a run outside the scope (the fuzz suite's)


@dataclass(frozen=True)
class Input:
    name: str  # what the user writes: --seeds, arrival.cv, hardware.memory_gb
    kind: str  # one of KINDS
    source: str = "option"  # one of SOURCES
    field: Field | None = None  # a number's kind, range and unit
    commands: tuple[str, ...] = ("*",)  # options: the commands (as `profile roofline`) it is declared for
    scope: Scope | None = None
    unit: str = ""
    note: str = ""
    items: Field | None = None  # a list's count of items (each one a point, a search, a run)

    def checks(self, value):
        return value if self.field is None or value is None else self.field.check(value)


# ---- scopes ------------------------------------------------------------------------------------
def _mode_list(params: dict) -> list[str] | None:
    v = params.get("modes", params.get("mode"))
    if v is None:
        return None
    return [m.strip() for m in str(v).split(",") if m.strip()]


def modes_with(attr: str, what: str) -> Scope:
    """Applies when --mode is unset (the profile's or the file's modes) or names a mode whose registry
    entry has `attr` (costmodel.modes: `assistant` for MTP, `canvas_sampler` for diffusion)."""

    def names() -> list[str]:
        from costmodel.modes import all_modes
        return [m.name for m in all_modes() if getattr(m, attr, None)]

    def applies(params, given) -> bool:
        if params.get("all_"):
            return True
        modes = _mode_list(params)
        if modes is None:
            return True
        from costmodel.modes import mode_names
        if any(m not in mode_names() for m in modes):
            return True  # an unknown mode: the command names it
        return any(m in names() for m in modes)

    def outside(tmp: str) -> list[str]:
        from costmodel.modes import all_modes
        return ["--mode", next(m.name for m in all_modes() if not getattr(m, attr, None))]

    return Scope(lambda: f"--mode {' or '.join(names())} ({what})", applies, "drop it, or add such a mode to --mode", outside)


def with_option(name: str, flag: str) -> Scope:
    return Scope(lambda: flag, lambda params, given: given(name), f"add {flag}, or drop it")


def _prompt_pass(params, given) -> bool:
    kinds = params.get("kinds")
    if not kinds:
        return True
    from costmodel.roofline import PASS_KINDS
    names = [k.strip() for k in str(kinds).split(",")]
    return any(k not in PASS_KINDS or PASS_KINDS[k].query_tokens == "prompt" for k in names)


def _decode_kind(tmp: str) -> list[str]:
    from costmodel.roofline import PASS_KINDS
    return ["--pass-kind", next(k for k, v in PASS_KINDS.items() if v.query_tokens != "prompt")]


PROMPT_PASS = Scope(lambda: "--pass-kind with a prompt pass (prefill)", _prompt_pass, "drop --prompt, or add a prompt pass kind", _decode_kind)


def _not_gamma(params, given) -> bool:
    path = params.get("workload_path") or params.get("workload")
    if not path:
        return True
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return True  # the command's own reader names what is wrong with it
    arrival = doc.get("arrival") if isinstance(doc, dict) else None
    return not (isinstance(arrival, dict) and arrival.get("process") == "gamma")


def _gamma_workload(tmp: str) -> list[str]:
    p = Path(tmp) / "gamma-workload.json"
    p.write_text(json.dumps({"arrival": {"process": "gamma", "cv": 3}}))
    return ["--workload", str(p)]


NOT_GAMMA = Scope(lambda: "workloads without gamma arrivals (closed-loop clients replace the arrival process)", _not_gamma,
                  "drop --concurrency, or the workload's gamma arrival", _gamma_workload)

DIFFUSION = modes_with("canvas_sampler", "a canvas sampler")
MTP = modes_with("assistant", "a drafter")
DAY = with_option("load_curve", "--load-curve")


# ---- numbers the options take ------------------------------------------------------------------
SEED = Field("--seed", 0, 2**32 - 1, whole=True, example="0")
COUNT = Field("count", 1, 1e9, whole=True, example="8")
MAX_NUM_SEQS = Field("--max-num-seqs", 1, 1e5, whole=True, example="256")
BATCHED_TOKENS = Field("--max-num-batched-tokens", 1, 1e7, whole=True, unit="tokens", example="8192")
GPU_UTIL = Field("--gpu-memory-utilization", 0, 1, above=True, example="0.92")
CANVAS = Field("--canvas-length", 1, 65536, whole=True, unit="tokens", example="256")
DENOISE = Field("--max-denoising-steps", 1, 4096, whole=True, unit="steps", example="48")
SPEC_TOKENS = Field("--num-speculative-tokens", 1, 16, whole=True, unit="tokens", example="4",
                    why="MTP drafts at most 16 positions")
BLOCK = Field("--block-size", 16, 4096, whole=True, unit="tokens", example="16")
MODEL_LEN = Field("--max-model-len", 1, 262_144, whole=True, unit="tokens", example="32768",
                  why="the catalog models' context, max_position_embeddings")
REPLICAS = Field("--replicas", 1, 4096, whole=True, example="4", why="one simulated replica per GPU: 4,096 GPUs is a cluster, more a typo")
DURATION_S = Field("--duration", 0, 1e12, above=True, unit="s", example="300")
REQUESTS = Field("--requests", 1, 1e12, whole=True, example="1000")  # the run-size check bounds a run by its memory (COSTMODEL_MEMORY_BUDGET_GIB)
WARMUP = Field("--warmup", 0, 1, example="0.1")
JOBS = Field("--jobs", 1, 1024, whole=True, example="2")
BOOTSTRAP = Field("--bootstrap", 0, 100_000, whole=True, unit="draws", example="2000",
                  why="each draw resamples every generation: 100,000 is minutes, more is a typo")
EFFICIENCY = Field("--efficiency", 1e-3, 1, example="0.33", why="a share of the roofline the engine reaches: below 0.1% prices a pass in hours")
STARTUP_S = Field("--startup-s", 0, 3600, unit="s", example="60", why="a replica that takes longer than an hour to start never serves a day's peak")
LOAD_GB_PER_S = Field("--load-gb-per-s", 0, 1e4, above=True, unit="GB/s", example="2")
HEADROOM = Field("--autoscale-headroom", 0, 1, above=True, example="0.85")
SECONDS = Field("seconds", 0, 86400, above=True, unit="s", example="600")
PROMPT = Field("--prompt", 1, 1e6, whole=True, unit="tokens", example="1024")
CONTEXT = Field("--context", 0, 1e7, whole=True, unit="tokens", example="1024")
TOKENS_PER_SEQ = Field("--tokens", 1, 1e6, whole=True, unit="tokens", example="1")
SMALL_COUNT = Field("count", 1, 1e6, whole=True, example="8")
ZERO_COUNT = Field("count", 0, 1e6, whole=True, example="0")
RATE_0_1 = Field("rate", 0, 1, example="0.7")
FILL_ROOFLINE = Field("--fill-roofline", 1e-3, 1, example="0.33")
ARRIVAL_CV = Field("--arrival-cv", F.GAMMA_CV.lo, F.GAMMA_CV.hi, example="1")
LIST_POINTS = Field("values", 1, 1000, whole=True, example="5,20,50", why="each value is a point: in plan, a search per GPU and mode")
MS = Field("ms", 0, 3_600_000, whole=True, unit="ms", example="1000")  # 0: no telemetry


def _o(name: str, kind: str, commands: str = "*", fld: Field | None = None, scope: Scope | None = None, note: str = "",
       items: Field | None = None) -> Input:
    return Input(name, kind, "option", None if fld is None else fld.named(name), tuple(commands.split(";")), scope, note=note,
                 items=None if items is None else items.named(f"{name}'s values"))


PRICING = "simulate;plan;sweep;report"
OPTIONS: tuple[Input, ...] = (
    # shared by several commands
    _o("--hardware", "name"), _o("--hardware-file", "path"), _o("--precision", "name"), _o("--model", "name"),
    _o("--mode", "list"), _o("--modes", "list", "fit"), _o("-o", "path"), _o("--profile", "path"), _o("--seed", "count", "*", SEED),
    _o("--jobs", "count", "*", JOBS), _o("--scheduler", "text", "plan;sweep"), _o("--resume", "flag"), _o("--csv", "path"),
    _o("--draft-tokens", "count", "roofline;validate", Field("--draft-tokens", 1, 16, whole=True)),
    _o("--draft-tokens", "list", "measure", note="comma list of MTP k values"),
    _o("--workload", "path"), _o("--requests", "count", "simulate", REQUESTS), _o("--requests", "count", "measure;validate", SMALL_COUNT),
    _o("--duration", "real", "simulate;plan;measure", DURATION_S), _o("--qps", "list", note="rates, each checked by costmodel.options.check_rate", items=LIST_POINTS),
    _o("--slo", "text"), _o("--random-weights", "flag"), _o("--checkpoint", "path"), _o("--assistant-checkpoint", "path"),
    _o("--experts-implementation", "name"), _o("--device", "name"), _o("--engine", "name"), _o("--id", "text"),
    _o("--compare", "path"), _o("--warmup", "real", "simulate", WARMUP), _o("--warmup", "count", "measure", Field("--warmup", 0, 1e4, whole=True)),
    # engine settings (simulate, memory, compare-bench, measure, import-bench)
    _o("--max-num-seqs", "count", "*", MAX_NUM_SEQS), _o("--max-num-batched-tokens", "count", "*", BATCHED_TOKENS),
    _o("--gpu-memory-utilization", "real", "*", GPU_UTIL), _o("--max-model-len", "count", "memory", MODEL_LEN),
    _o("--block-size", "count", "*", BLOCK),
    _o("--canvas-length", "count", "simulate;memory;compare-bench;import-bench", CANVAS, DIFFUSION),
    _o("--canvas-length", "count", "measure", CANVAS),
    _o("--max-denoising-steps", "count", "simulate;compare-bench", DENOISE, DIFFUSION),
    _o("--max-denoising-steps", "count", "measure", DENOISE),
    _o("--num-speculative-tokens", "count", "simulate;memory;compare-bench", SPEC_TOKENS, MTP),
    _o("--async-scheduling", "flag"), _o("--prefix-caching", "flag", "simulate"), _o("--prefix-caching", "list", "plan"),
    _o("--engine-from", "path"), _o("--router", "name"),
    # simulate
    _o("--concurrency", "list", "simulate", scope=NOT_GAMMA, items=LIST_POINTS), _o("--concurrency", "count", "measure", Field("--concurrency", 1, 100_000, whole=True)),
    _o("--burstiness", "real", "simulate", note="costmodel.options.check_burstiness"),
    _o("--replicas", "count", "simulate", REPLICAS),
    # pricing (costmodel/cli/pricing_options.py)
    _o("--pricing", "name", PRICING), _o("--price", "list", PRICING, note="KEY=USD per GPU-hour, costmodel.fields.PRICE_USD_PER_GPU_HOUR"),
    _o("--price-file", "path", PRICING), _o("--term", "list", PRICING), _o("--onprem", "flag", PRICING),
    _o("--purchase-usd", "list", PRICING), _o("--electricity-usd-per-kwh", "real", PRICING, F.ELECTRICITY_USD_PER_KWH),
    _o("--amortisation-years", "real", PRICING, F.AMORTISATION_YEARS), _o("--pue", "real", PRICING, F.PUE), _o("--telemetry", "path", PRICING),
    # plan and its day
    _o("--seeds", "count", "plan", F.SEEDS), _o("--max-seeds", "count", "plan", F.MAX_SEEDS, with_option("seeds", "--seeds")),
    _o("--sensitivity", "flag", "plan"), _o("--max-replicas", "count", "plan", F.MAX_REPLICAS),
    _o("--refine-crossover", "count", "plan", F.REFINE_CROSSOVER),
    _o("--max-replications", "count", "plan", Field("--max-replications", 1, 1000, whole=True, why="each replication re-simulates a point")),
    _o("--load-curve", "text", "plan"), _o("--compress", "real", "plan", Field("--compress", 0, 1e6, above=True), DAY),
    _o("--fleet", "path", "plan", scope=DAY), _o("--every-fleet", "flag", "plan", scope=DAY), _o("--load-scale", "real", "plan", Field("--load-scale", 0, 1e4, above=True), DAY),
    _o("--autoscale-headroom", "real", "plan", HEADROOM, DAY), _o("--startup-s", "real", "plan", STARTUP_S, DAY),
    _o("--load-gb-per-s", "real", "plan", LOAD_GB_PER_S, DAY), _o("--max-requests", "count", "plan", F.MAX_REQUESTS, DAY),
    # sweep, report
    _o("--max-points", "count", "sweep", Field("--max-points", 1, 1e7, whole=True)),
    # roofline, memory, hardware, profile
    _o("--pass-kind", "list", "roofline"), _o("--batch", "list", "roofline"), _o("--sweep", "flag", "roofline"),
    _o("--tokens", "count", "roofline", TOKENS_PER_SEQ), _o("--prompt", "count", "roofline", PROMPT, PROMPT_PASS),
    _o("--context", "count", "roofline", CONTEXT), _o("--context", "list", "memory"), _o("--all", "flag", "memory"),
    _o("--detect", "flag", "hardware"), _o("--template", "flag", "hardware"),
    _o("--efficiency", "real", "profile roofline", EFFICIENCY), _o("--from", "path", "profile carry-term"),
    # analyze, import-bench, fit
    _o("--split", "name", "analyze"), _o("--bootstrap", "count", "analyze", BOOTSTRAP), _o("--commits", "path", "analyze"),
    _o("--generations", "path", "analyze"),
    _o("--campaign", "path", "fit"), _o("--commit-runs", "list", "fit"), _o("--prefer", "name", "fit"), _o("--mtp-metrics", "path", "fit"),
    _o("--heldout", "text", "fit"), _o("--time", "name", "fit"), _o("--repeats", "name", "fit"), _o("--pass-model", "name", "fit"),
    _o("--fill-roofline", "real", "fit", FILL_ROOFLINE), _o("--note", "text", "fit"), _o("--show-summaries", "flag", "fit"),
    _o("--compare-csv", "path", "fit"), _o("--host-overhead", "flag", "fit"), _o("--behaviour", "name", "fit"), _o("--calibrate", "path", "fit"),
    _o("--apply-to", "list", "fit"),
    # validate
    _o("--models", "path", "validate"), _o("--settings", "path", "validate"), _o("--rates", "list", "validate"),
    _o("--max-batch", "count", "validate", Field("--max-batch", 1, 1024, whole=True)), _o("--prompt-tokens", "list", "validate"),
    _o("--max-output-tokens", "count", "validate", Field("--max-output-tokens", 1, 1e6, whole=True)), _o("--ar-checkpoint", "path", "validate"),
    _o("--warmup-requests", "count", "validate", Field("--warmup-requests", 0, 1e5, whole=True)), _o("--score-only", "flag", "validate"),
    # measure (GPU harness, vLLM engine, endpoint)
    _o("--endpoint", "text", "measure"), _o("--gpus", "list", "measure"), _o("--setups", "list", "measure"), _o("--canvases", "list", "measure"), _o("--decode-batches", "list", "measure"),
    _o("--contexts", "list", "measure"), _o("--grid", "name", "measure"), _o("--no-timing-grid", "flag", "measure"),
    _o("--blocks", "count", "measure", SMALL_COUNT), _o("--decode-steps", "count", "measure", SMALL_COUNT),
    _o("--mtp-rounds", "count", "measure", SMALL_COUNT), _o("--mtp-acceptance-rate", "real", "measure", RATE_0_1),
    _o("--repeats", "count", "measure", SMALL_COUNT), _o("--replay", "path", "measure"), _o("--replay-regimes", "list", "measure"),
    _o("--probe-prompts-per-regime", "count", "measure", ZERO_COUNT), _o("--probe-seeds", "list", "measure"),
    _o("--probe-regimes", "list", "measure"), _o("--probe-split", "name", "measure"),
    _o("--hook-overhead-repeats", "count", "measure", ZERO_COUNT), _o("--profile-steps", "count", "measure", ZERO_COUNT),
    _o("--roofline-gpu", "name", "measure"), _o("--telemetry-interval-ms", "count", "measure", MS), _o("--vllm-settings", "path", "measure"),
    _o("--tiny-models", "path", "measure"), _o("--model-dir", "path", "measure"), _o("--budget-s", "real", "measure", SECONDS),
    _o("--arrivals", "name", "measure"), _o("--arrival-cv", "real", "measure", ARRIVAL_CV), _o("--prompts", "path", "measure"),
    _o("--regimes", "list", "measure"), _o("--max-tokens", "count", "measure", Field("--max-tokens", 1, 1e6, whole=True, unit="tokens")),
    _o("--metrics-url", "text", "measure"), _o("--metrics-interval", "real", "measure", Field("--metrics-interval", 0, 3600, above=True, unit="s")),
    _o("--api-key-env", "name", "measure"), _o("--timeout", "real", "measure", SECONDS), _o("--api", "name", "measure"),
    _o("--ignore-eos", "flag", "measure"), _o("--continuous-usage", "flag", "measure"),
)
# positional arguments: (command, name) -> kind
ARGUMENTS = {("import-bench", "files"): "path", ("analyze", "run"): "path", ("fit", "runs"): "path", ("profile show", "path"): "path",
             ("profile validate", "path"): "path", ("profile project", "path"): "path", ("profile carry-term", "path"): "path",
             ("sweep", "spec"): "path", ("report", "results"): "path", ("compare-bench", "files"): "path"}


def option(command: str, flag: str) -> Input | None:
    """The declaration of `flag` for `command` (a command's own first, then one shared by every command)."""
    own = [i for i in OPTIONS if i.name == flag and command in i.commands]
    if own:
        return own[0]
    shared = [i for i in OPTIONS if i.name == flag and "*" in i.commands]
    return shared[0] if shared else None


# ---- the fields of files and the environment -----------------------------------------------------
def _f(source: str, name: str, kind: str, fld: Field | None = None, note: str = "") -> Input:
    return Input(name, kind, source, None if fld is None else fld.named(name), note=note)


PROFILE_ROOTS = ("Profile",)  # the schema classes tests/test_input_table.py walks
FILE_FIELDS: tuple[Input, ...] = (
    # workload JSON (simulate/workload.py)
    *(_f("workload", n, k, fl) for n, k, fl in (
        ("arrival", "name", None), ("arrival.process", "name", None), ("arrival.cv", "real", F.GAMMA_CV), ("regime_mix", "object", F.WEIGHT),
        ("prompt_tokens", "object", F.TOKENS), ("output_tokens", "object", F.TOKENS), ("prompt_tokens.median", "real", F.LENGTH_MEDIAN),
        ("prompt_tokens.sigma", "real", F.LOGNORMAL_SIGMA), ("trace", "path", None), ("trace_time_scale", "name", None),
        ("description", "text", None), ("system_prompt.tokens", "count", F.TOKENS), ("system_prompt.apps", "count", F.APPS),
        ("sessions.turns", "count", F.TURNS), ("sessions.think_s", "real", F.THINK_S),
        ("trace_hash_block_tokens", "count", Field("trace_hash_block_tokens", 1, whole=True)))),
    # request traces (simulate/cluster/traces.py): one row per request, sorted by arrival
    *(_f("trace", n, k, fl) for n, k, fl in (
        ("arrival_s", "real", F.TRACE_SPAN_S), ("prompt_tokens", "count", F.TOKENS), ("output_tokens", "count", F.TOKENS),
        ("hash_ids", "list", None), ("session_id", "name", None), ("regime", "name", None))),
    # load curves (plan --load-curve): CSV time_s,qps or a preset
    *(_f("load curve", n, k, fl) for n, k, fl in (
        ("time_s", "real", Field("time_s", 0, 744 * 3600, unit="s")), ("qps", "real", Field("qps", 0, 1e9, unit="requests/s")),
        ("hours", "real", F.CURVE_HOURS), ("peak", "real", None), ("trough", "real", None), ("peak_hour", "real", F.PEAK_HOUR))),
    # fleet JSON (plan --fleet)
    *(_f("fleet", n, k, fl) for n, k, fl in (
        ("pools", "object", None), ("hardware", "name", None), ("mode", "name", None), ("min_replicas", "count", F.MAX_REPLICAS),
        ("max_replicas", "count", F.MAX_REPLICAS), ("price_usd_per_gpu_hour", "real", F.PRICE_USD_PER_GPU_HOUR), ("classes", "list", None))),
    # sweep spec (simulate/sweep/spec.py): kind/base/grid/points, each parameter as simulate's option
    *(_f("sweep spec", n, k, fl) for n, k, fl in (
        ("kind", "name", None), ("base", "object", None), ("grid", "object", None), ("points", "object", None), ("description", "text", None),
        ("hardware", "name", None), ("profile", "path", None), ("mode", "name", None), ("qps", "real", Field("qps", 1e-6, 1e9)),
        ("replicas", "count", REPLICAS), ("duration_s", "real", DURATION_S), ("n_requests", "count", REQUESTS), ("seed", "count", SEED),
        ("router", "name", None), ("warmup_frac", "real", WARMUP), ("workload", "object", None), ("slo", "text", None),
        ("max_replicas", "count", F.MAX_REPLICAS), ("price", "real", F.PRICE_USD_PER_GPU_HOUR), ("pricing", "name", None),
        ("max_num_seqs", "count", MAX_NUM_SEQS), ("max_num_batched_tokens", "count", BATCHED_TOKENS),
        ("gpu_memory_utilization", "real", GPU_UTIL), ("canvas_length", "count", CANVAS), ("max_denoising_steps", "count", DENOISE),
        ("num_speculative_tokens", "count", SPEC_TOKENS), ("block_size", "count", BLOCK), ("async_scheduling", "flag", None),
        ("enable_prefix_caching", "flag", None), ("entropy_bound", "real", Field("entropy_bound", 0, 1e3, above=True)),
        ("prefix_match_unit", "count", COUNT), ("kv_capacity_tokens", "count", COUNT), ("shape_bits", "count", Field("shape_bits", 0, 16, whole=True)))),
    # price file (--price-file): CSV hardware,price_usd_per_gpu_hour (a header and at least one row)
    _f("price file", "hardware", "name"), _f("price file", "price_usd_per_gpu_hour", "real", F.PRICE_USD_PER_GPU_HOUR),
    # bench file (vllm bench serve --save-result JSON, import-bench / compare-bench)
    *(_f("bench file", n, k, fl) for n, k, fl in (
        ("completed", "count", F.BENCH_PROMPTS), ("num_prompts", "count", F.BENCH_PROMPTS),
        ("request_rate", "real", None), ("burstiness", "real", None), ("max_concurrency", "count", None), ("duration", "real", None),
        ("input_lens", "list", F.TOKENS), ("output_lens", "list", F.TOKENS), ("ttfts", "list", None), ("itls", "list", None))),
    # hardware file (--hardware-file): the catalog's fields; an unknown one is refused
    *(_f("hardware file", n, k, fl) for n, k, fl in (
        ("name", "text", None), ("memory_gb", "real", F.HARDWARE_FIELDS["memory_gb"]),
        ("memory_bandwidth_tbps", "real", F.HARDWARE_FIELDS["memory_bandwidth_tbps"]), ("tflops", "object", F.HARDWARE_FIELDS["tflops"]),
        ("board_power_w", "real", F.HARDWARE_FIELDS["board_power_w"]), ("price_usd_per_gpu_hour", "real", F.HARDWARE_FIELDS["price_usd_per_gpu_hour"]),
        ("purchase_usd", "real", F.HARDWARE_FIELDS["purchase_usd"]), ("nvml_names", "list", None),
        ("l2_mb", "real", None), ("sms", "count", None), ("measured_memory_bandwidth_tbps", "real", None), ("measured_tflops", "object", None),
        ("measured_memory_gib", "real", None), ("sources", "object", None), ("architecture", "object", None), ("id", "name", None))),
    # environment
    _f("environment", "COSTMODEL_NO_PROGRESS", "flag"), _f("environment", "COSTMODEL_MEMORY_BUDGET_GIB", "real", Field("COSTMODEL_MEMORY_BUDGET_GIB", 0, 1e4, above=True)),
    _f("environment", "COSTMODEL_PURE_PYTHON", "flag"), _f("environment", "COSTMODEL_STEP_RECORD", "path"),
    _f("environment", "COSTMODEL_STEP_FLUSH", "count"), _f("environment", "COSTMODEL_SCHED_RECORD", "path"),
    _f("environment", "COSTMODEL_NATIVE_DIR", "path"), _f("environment", "COSTMODEL_VLLM_PYTHON", "path"),
)

# ---- the profile (costmodel/schemas/profile.py): every dataclass field, checked by Profile.validate --
# name: ClassName.field; the relations (memory that holds the weights, a pass above its roofline,
# commit statistics that produce the canvas) are Profile.validate's, named in RELATIONS.
COEF = Field("coef", -1e6, 1e6, unit="ms per feature unit", why="a step price above 1e6 ms per unit is a unit slip")
PROFILE_FIELDS: dict[str, Input] = {f"{c}.{n}": Input(f"{c}.{n}", k, "profile", None if fl is None else fl.named(f"{c}.{n}")) for c, n, k, fl in (
    ("Profile", "profile_id", "name", None), ("Profile", "hardware", "object", None), ("Profile", "precision", "name", None),
    ("Profile", "engine", "object", None), ("Profile", "modes", "object", None), ("Profile", "provenance", "object", None),
    ("Profile", "created_at", "text", None), ("Profile", "notes", "list", None), ("Profile", "schema_version", "count", None),
    ("Profile", "parts", "object", None), ("Profile", "heldout_error", "object", None),
    ("HeldoutError", "basis", "text", None), ("HeldoutError", "figures", "object", None),
    ("HeldoutFigure", "median_pct", "real", Field("median_pct", 0, 1e4, unit="%")), ("HeldoutFigure", "worst_pct", "real", Field("worst_pct", 0, 1e4, unit="%")),
    ("HeldoutFigure", "n_loads", "count", Field("n_loads", 1, 1e6, whole=True)),
    ("ModeProfile", "mode", "name", None), ("ModeProfile", "model", "name", None), ("ModeProfile", "assistant", "name", None),
    ("ModeProfile", "pass_models", "object", None), ("ModeProfile", "notes", "text", None),
    ("PassCostModel", "kind", "name", None), ("PassCostModel", "coef", "object", COEF), ("PassCostModel", "support", "object", None),
    ("PassCostModel", "diagnostics", "object", None), ("PassCostModel", "provenance", "object", None),
    ("PassCostModel", "median_x_roofline", "real", None), ("PassCostModel", "model_type", "name", None), ("PassCostModel", "table", "object", None),
    ("PassTable", "hardware", "name", None), ("PassTable", "precision", "name", None), ("PassTable", "seqs", "list", None),
    ("PassTable", "tokens_per_seq", "list", None), ("PassTable", "context_tokens", "list", None), ("PassTable", "ms", "list", None),
    ("PassTable", "token_m", "list", None), ("PassTable", "token_ms", "list", None), ("PassTable", "overhead_ms", "real", None),
    ("PassTable", "source", "text", None),
    ("FitDiagnostics", "n_obs", "count", None), ("FitDiagnostics", "r2", "real", None), ("FitDiagnostics", "mape_pct", "real", None),
    ("FitDiagnostics", "cv_mape_pct", "real", None), ("FitDiagnostics", "heldout_mape_pct", "real", None), ("FitDiagnostics", "summary", "text", None),
    ("Provenance", "kind", "name", None), ("Provenance", "source", "text", None), ("Provenance", "hardware", "name", None),
    ("Provenance", "date", "text", None), ("Provenance", "notes", "text", None),
    ("CommitStats", "regime", "name", None), ("CommitStats", "steps_per_canvas", "object", None),
    ("CommitStats", "tokens_per_call", "real", Field("tokens_per_call", 0, 65536, above=True, unit="tokens")),
    ("CommitStats", "content_length", "object", None), ("CommitStats", "renoise_per_generation", "real", Field("renoise_per_generation", 0, 1e6)),
    ("CommitStats", "commit_entropy_nats", "real", Field("commit_entropy_nats", 0, 1e3)), ("CommitStats", "provenance", "object", None),
    ("CommitStats", "description", "text", None),
    ("Distribution", "values", "list", Field("values", 0, 1e9)), ("Distribution", "probs", "list", Field("probs", 0, 1)),
    ("MtpAcceptance", "num_speculative_tokens", "count", SPEC_TOKENS), ("MtpAcceptance", "per_position", "list", Field("per_position", 0, 1)),
    ("MtpAcceptance", "provenance", "object", None),
    ("HardwareSpec", "id", "name", None), ("HardwareSpec", "name", "text", None),
    ("HardwareSpec", "memory_gb", "real", Field("memory_gb", 0, 1e5, above=True, unit="GB")),
    ("HardwareSpec", "memory_bandwidth_tbps", "real", Field("memory_bandwidth_tbps", 0, 1e3, above=True, unit="TB/s")),
    ("HardwareSpec", "tflops", "object", Field("tflops", 0, 1e6, above=True, unit="TFLOP/s")),
    ("HardwareSpec", "board_power_w", "real", None), ("HardwareSpec", "price_usd_per_gpu_hour", "real", F.PRICE_USD_PER_GPU_HOUR),
    ("HardwareSpec", "purchase_usd", "real", F.PURCHASE_USD), ("HardwareSpec", "nvml_names", "list", None), ("HardwareSpec", "l2_mb", "real", None),
    ("HardwareSpec", "sms", "count", None), ("HardwareSpec", "measured_memory_bandwidth_tbps", "real", None),
    ("HardwareSpec", "measured_tflops", "object", None), ("HardwareSpec", "measured_memory_gib", "real", None),
    ("HardwareSpec", "sources", "object", None), ("HardwareSpec", "architecture", "object", None),
    ("Architecture", "name", "name", None), ("Architecture", "compute_capability", "text", None), ("Architecture", "precisions", "list", None),
    ("Architecture", "cudagraph_max_tokens", "count", None), ("Architecture", "large_batch_defaults_min_gib", "real", None),
    ("Architecture", "sources", "object", None),
)}
# Relations between inputs, each checked where both sides are known (the test names the checker).
RELATIONS = {
    "block size a multiple of 16 on a GPU": "costmodel.engine_settings.check_vllm_rules",
    "max_model_len within the model's context": "costmodel.cli.memory.check_engine_limits",
    "memory that holds the weights": "costmodel.schemas.profile.check_physical",
    "profile hardware that is its catalog GPU's": "costmodel.schemas.profile.check_physical",
    "commit statistics that produce the canvas": "costmodel.schemas.profile.check_physical",
    "a pass model above its roofline": "costmodel.schemas.profile._check_above_roofline",
}


def fields_of(source: str) -> list[Input]:
    return [i for i in FILE_FIELDS if i.source == source]


def past_bounds(fld: Field) -> list:
    """Values just past a field's bounds (and the non-numbers every number refuses)."""
    out = [math.nan, "abc"]
    if math.isfinite(fld.lo):
        out.append(fld.lo - (1 if fld.whole else max(abs(fld.lo) * 0.5, 1e-3)) if not fld.above else fld.lo)
    if math.isfinite(fld.hi):
        out.append(fld.hi * 2 + 1)
    if fld.whole:
        out.append((fld.lo if math.isfinite(fld.lo) else 0) + 1.5)
    return out


def at_bounds(fld: Field) -> list:
    """Values at a field's bounds (accepted)."""
    out = []
    if math.isfinite(fld.lo) and not fld.above:
        out.append(int(fld.lo) if fld.whole else fld.lo)
    if math.isfinite(fld.hi):
        out.append(int(fld.hi) if fld.whole else fld.hi)
    return out


__all__ = ["ARGUMENTS", "FILE_FIELDS", "Input", "KINDS", "OPTIONS", "PROFILE_FIELDS", "RELATIONS", "Scope", "at_bounds", "fields_of", "option", "past_bounds"]
