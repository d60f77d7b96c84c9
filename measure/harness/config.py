"""Validated settings of one harness run: `HarnessOptions` (the options as given) -> `parse_config`
-> `HarnessConfig` (torch-free, so every bad input is a one-line UserError before anything heavy
is imported).

Model source: `--random-weights` builds the catalog shape (or a config.json) at full size;
`--checkpoint PATH_OR_HUB_ID` loads real weights with from_pretrained. `--model` names the
catalog shape used for the roofline (and, with random weights, for the build); when `--model` is
neither a catalog name nor a config.json and no `--checkpoint` is given, `--model` is the checkpoint.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from costmodel.errors import UserError
from costmodel.models import ASSISTANT_FOR, MODELS, ModelShape, get_model
from costmodel.modes import ServingMode, get_mode, harness_modes, modes_of_family
from costmodel.options import parse_ints, parse_list
from measure.probes import REGIMES

# the registered modes (costmodel.modes) this in-process harness implements (diffusion.py, causal.py)
HARNESS_MODES = tuple(m.name for m in harness_modes())
ENGINES = ("eager", "compiled")
GRIDS = ("cross", "star")
PROBE_SPLITS = ("all", "exploratory", "confirmatory")
DEFAULT_MTP_ACCEPTANCE = 0.8  # vLLM benchmarks' synthetic per-token acceptance (costmodel.prior)


@dataclass(frozen=True)
class Cell:
    """One timing-grid cell: `batch` sequences (canvases per step for diffusion) with a prompt of
    `context` tokens; `draft_tokens` is k for MTP (0 otherwise)."""

    batch: int
    context: int
    draft_tokens: int = 0

    @property
    def label(self) -> str:
        return f"B{self.batch}-P{self.context}" + (f"-k{self.draft_tokens}" if self.draft_tokens else "")


@dataclass
class HarnessConfig:
    serving: ServingMode  # the mode measured (the registry's object: its pass kinds and traits); the manifest records its name
    model: str  # the manifest's model: catalog name or checkpoint id
    shape: ModelShape | None  # roofline / random-weights shape (None: taken from the checkpoint's config)
    assistant_shape: ModelShape | None
    weights: str  # "random" | "checkpoint"
    checkpoint: str | None
    assistant_checkpoint: str | None
    engine: str
    experts_implementation: str
    device: str | None
    out: Path
    resume: bool
    seed: int
    batches: list[int]
    contexts: list[int]
    grid: str
    timing_grid: bool
    blocks: int
    max_denoising_steps: int
    decode_steps: int
    draft_tokens: list[int]
    mtp_rounds: int
    mtp_acceptance_rate: float | None
    repeats: int
    warmup: int
    replay: str | None
    replay_regimes: list[str]
    probe_prompts_per_regime: int
    probe_seeds: list[int]
    probe_regimes: list[str]
    probe_split: str
    hook_overhead_repeats: int
    profile_steps: int
    roofline_gpu: str | None
    telemetry_interval_ms: int

    @property
    def mode(self) -> str:
        """The measured mode's name (what the run's manifest records)."""
        return self.serving.name

    @property
    def commit_source(self) -> str:
        """What the run's commit records are (costmodel.schemas.rundir.COMMIT_SOURCES)."""
        if self.serving.harness != "canvas":
            return "none"
        if self.replay:
            return "replay"
        return "random-weights" if self.weights == "random" else "model"

    def cells(self) -> list[Cell]:
        if not self.timing_grid:
            return []
        if self.grid == "cross":
            pairs = [(b, p) for b in self.batches for p in self.contexts]
        else:  # star: every batch at the first context, every context at the first batch
            pairs = [(b, self.contexts[0]) for b in self.batches] + [(self.batches[0], p) for p in self.contexts[1:]]
        ks = self.draft_tokens if self.serving.assistant else [0]
        return [Cell(b, p, k) for b, p in pairs for k in ks]

    def settings(self) -> dict:
        """The options as the manifest records them."""
        d = {"mode": self.mode}
        d.update({f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("serving", "shape", "assistant_shape", "out")})
        d["out"] = str(self.out)
        d["cells"] = [c.label for c in self.cells()]
        return d


@dataclass
class HarnessOptions:
    """The harness options as given (`costmodel measure` without --endpoint); None: not given, the
    default applies. `parse_config` checks every one of them."""

    out: str
    model: str | None = None
    mode: str | None = None
    resume: bool = False
    seed: int | None = None
    random_weights: bool = False
    checkpoint: str | None = None
    assistant_checkpoint: str | None = None
    engine: str | None = None
    experts_implementation: str | None = None
    device: str | None = None
    canvases: str | None = None
    decode_batches: str | None = None
    contexts: str | None = None
    grid: str | None = None
    no_timing_grid: bool = False
    blocks: int | None = None
    max_denoising_steps: int | None = None
    decode_steps: int | None = None
    draft_tokens: str | None = None
    mtp_rounds: int | None = None
    mtp_acceptance_rate: float | None = None
    repeats: int | None = None
    warmup: int | None = None
    replay: str | None = None
    replay_regimes: str | None = None
    probe_prompts_per_regime: int | None = None
    probe_seeds: str | None = None
    probe_regimes: str | None = None
    probe_split: str | None = None
    hook_overhead_repeats: int | None = None
    profile_steps: int | None = None
    roofline_gpu: str | None = None
    telemetry_interval_ms: int | None = None

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> HarnessOptions:
        """The harness's options out of every `costmodel measure` option (the endpoint's are not its)."""
        return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values})

    def get(self, key: str, default=None):
        v = getattr(self, key)
        return default if v is None else v


def _canvas(m: ServingMode) -> bool:
    return m.harness == "canvas"


def _causal(m: ServingMode) -> bool:
    return m.harness == "causal"


def _drafted(m: ServingMode) -> bool:
    return m.harness == "causal" and m.assistant


# Options that only some modes' harness programs use (costmodel.modes: ServingMode.harness, assistant):
# given anywhere else they would be ignored.
MODE_ONLY = {
    "canvases": _canvas, "blocks": _canvas, "max_denoising_steps": _canvas, "replay": _canvas, "hook_overhead_repeats": _canvas,
    "decode_batches": _causal, "decode_steps": lambda m: _causal(m) and not m.assistant,
    "draft_tokens": _drafted, "mtp_rounds": _drafted, "mtp_acceptance_rate": _drafted,
}
PROBE_ONLY = ("probe_seeds", "probe_regimes", "probe_split")


def _reject_unused(opts: HarnessOptions, mode: ServingMode) -> None:
    for key, uses in MODE_ONLY.items():
        if opts.get(key) is not None and not uses(mode):
            modes = [m.name for m in harness_modes() if uses(m)]
            raise UserError(f"--{key.replace('_', '-')} is not used by --mode {mode.name}", f"drop it (it applies to --mode {'/'.join(modes)})")
    if not opts.get("probe_prompts_per_regime"):
        for key in PROBE_ONLY:
            if opts.get(key) is not None:
                raise UserError(f"--{key.replace('_', '-')} is only used with --probe-prompts-per-regime", "add --probe-prompts-per-regime N or drop it")
    if opts.get("replay_regimes") is not None and opts.get("replay") is None:
        raise UserError("--replay-regimes is only used with --replay", "add --replay prior (or a run directory) or drop it")


@dataclass
class ModelSource:
    """Where the harness's model comes from: a catalog shape (roofline, random weights) and/or a checkpoint."""

    shape: ModelShape | None
    checkpoint: str | None
    weights: str  # "random" | "checkpoint"

    def manifest_model(self, model_opt: str | None) -> str:
        return self.shape.name if self.shape is not None and not self.checkpoint else (self.checkpoint or model_opt)


def _model_source(opts: HarnessOptions) -> ModelSource:
    model_opt, checkpoint, random_weights = opts.model, opts.checkpoint, bool(opts.random_weights)
    if random_weights and checkpoint:
        raise UserError("--random-weights and --checkpoint both given", "choose one model source")
    if not model_opt and not checkpoint:
        raise UserError("no model given", "pass --model diffusiongemma-26b-a4b (or gemma4-26b-a4b) with --random-weights, or --checkpoint PATH_OR_HUB_ID")
    shape: ModelShape | None = None
    if model_opt:
        known = model_opt in MODELS or model_opt.endswith(".json") or (Path(model_opt).is_dir() and (Path(model_opt) / "config.json").exists())
        if known:
            shape = get_model(model_opt)
        elif not checkpoint and not random_weights:
            checkpoint = model_opt  # --model names a checkpoint (path or hub id)
        else:
            raise UserError(f"--model {model_opt!r} is not a catalog model or config.json",
                            f"use one of {', '.join(MODELS)} (the shape for the roofline), and --checkpoint for the weights")
    if not random_weights and not checkpoint:
        raise UserError(f"--model {model_opt} gives a shape but no weights", "add --random-weights (full-size random weights) or --checkpoint PATH_OR_HUB_ID")
    if random_weights and shape is None:
        raise UserError("--random-weights needs a model shape", "pass --model with a catalog name or a config.json path")
    return ModelSource(shape, checkpoint, "random" if random_weights else "checkpoint")


def _mode(opts: HarnessOptions, src: ModelSource) -> ServingMode:
    """--mode (default: from the shape's family), checked against the shape and the options given."""
    mode = opts.mode
    if mode is None:
        if src.shape is None:
            raise UserError("--mode is needed when the model comes from a checkpoint without --model", f"pass --mode {'|'.join(HARNESS_MODES)}")
        served = [m for m in modes_of_family(src.shape.family) if m.harness and not m.assistant]
        mode = served[0].name if served else ""
    if mode not in HARNESS_MODES:
        raise UserError(f"--mode {mode!r} is unknown", f"use one of {', '.join(HARNESS_MODES)}")
    serving = get_mode(mode)
    _reject_unused(opts, serving)
    if src.shape is not None and src.shape.family != serving.model_family:
        raise UserError(f"--mode {mode} needs a {serving.label} model ({serving.model_family}), and {src.shape.name} is {src.shape.family}",
                        "use " + " and ".join(f"--model {m.default_model} for {m.name}" for m in harness_modes()))
    return serving


def _assistant(opts: HarnessOptions, mode: ServingMode, src: ModelSource) -> ModelShape | None:
    """The MTP assistant's shape (None for other modes), with --assistant-checkpoint checked."""
    assistant_ckpt = opts.assistant_checkpoint
    drafted = [m.name for m in harness_modes() if _drafted(m)]
    if not _drafted(mode):
        if assistant_ckpt:
            raise UserError(f"--assistant-checkpoint is only used with --mode {'/'.join(drafted)}", f"drop it or pass --mode {drafted[0]}")
        return None
    if src.weights == "checkpoint" and not assistant_ckpt:
        raise UserError("--mode mtp with --checkpoint needs the drafter's weights", "pass --assistant-checkpoint PATH_OR_HUB_ID (e.g. google/gemma-4-26B-A4B-it-assistant)")
    if src.weights == "random":
        if assistant_ckpt:
            raise UserError("--assistant-checkpoint given with --random-weights", "drop it: random weights build the assistant from the catalog shape")
        if src.shape.name not in ASSISTANT_FOR:
            raise UserError(f"no MTP assistant shape is known for {src.shape.name}", f"use one of {', '.join(ASSISTANT_FOR)}")
    if src.shape is not None and src.shape.name in ASSISTANT_FOR:
        return get_model(ASSISTANT_FOR[src.shape.name])
    return None


def _ints(opts: HarnessOptions, key: str, minimum: int = 1) -> list[int] | None:
    return parse_ints(str(opts.get(key)), key.replace("_", "-"), minimum) if opts.get(key) is not None else None


def _pos_int(opts: HarnessOptions, key: str, default: int, minimum: int = 1) -> int:
    v = opts.get(key, default)
    if not isinstance(v, int) or v < minimum:
        raise UserError(f"--{key.replace('_', '-')} {v!r} must be an integer >= {minimum}", f"e.g. --{key.replace('_', '-')} {max(default, minimum)}")
    return v


@dataclass
class GridCounts:
    """The timing grid and the repeat counts of a harness run."""

    batches: list[int]
    contexts: list[int]
    draft_tokens: list[int]
    blocks: int
    max_denoising_steps: int
    decode_steps: int
    mtp_rounds: int
    repeats: int
    warmup: int
    hook_overhead_repeats: int
    profile_steps: int
    telemetry_interval_ms: int


def _grid_counts(opts: HarnessOptions, mode: ServingMode, engine: str) -> GridCounts:
    canvas = _canvas(mode)
    batches = _ints(opts, "canvases") if canvas else _ints(opts, "decode_batches")
    batches = batches or ([1, 2, 4, 8, 16, 32] if canvas else [1, 4, 16, 64, 256])
    contexts = _ints(opts, "contexts") or [1024]
    draft_tokens = _ints(opts, "draft_tokens") or [1, 2, 4, 8]
    if _drafted(mode) and max(draft_tokens) > 16:
        raise UserError(f"--draft-tokens {max(draft_tokens)} is above 16", "MTP drafts 1 to 8 tokens per round in practice; give values 1..16")
    counts = GridCounts(
        batches, contexts, draft_tokens, blocks=_pos_int(opts, "blocks", 2), max_denoising_steps=_pos_int(opts, "max_denoising_steps", 48),
        decode_steps=_pos_int(opts, "decode_steps", 16), mtp_rounds=_pos_int(opts, "mtp_rounds", 4), repeats=_pos_int(opts, "repeats", 3),
        warmup=_pos_int(opts, "warmup", 1, 0), hook_overhead_repeats=_pos_int(opts, "hook_overhead_repeats", 5 if canvas else 0, 0),
        profile_steps=_pos_int(opts, "profile_steps", 0, 0), telemetry_interval_ms=_pos_int(opts, "telemetry_interval_ms", 100, 0))
    if engine == "compiled" and counts.warmup < 1:
        raise UserError("--engine compiled with --warmup 0 would time the compilation", "use --warmup 1 or more")
    return counts


def _acceptance_rate(opts: HarnessOptions, mode: ServingMode, weights: str) -> float | None:
    rate = opts.mtp_acceptance_rate
    if rate is not None:
        if weights == "checkpoint":
            raise UserError("--mtp-acceptance-rate given with a checkpoint", "a checkpoint's acceptance is measured (greedy verification); drop the option")
        if not (0.0 <= float(rate) <= 1.0):
            raise UserError(f"--mtp-acceptance-rate {rate} is outside 0..1", "e.g. --mtp-acceptance-rate 0.8 (vLLM's synthetic default)")
        return float(rate)
    return DEFAULT_MTP_ACCEPTANCE if _drafted(mode) and weights == "random" else None


def _regimes(opts: HarnessOptions, key: str) -> list[str]:
    regimes = parse_list(str(opts.get(key, ",".join(REGIMES))), key.replace("_", "-"))
    bad = [r for r in regimes if r not in REGIMES]
    if bad:
        raise UserError(f"--{key.replace('_', '-')} has unknown regime(s) {', '.join(bad)}", f"use some of {', '.join(REGIMES)}")
    return regimes


@dataclass
class Probing:
    """Commit replay and probe-prompt settings of a harness run."""

    replay: str | None
    replay_regimes: list[str]
    prompts_per_regime: int
    seeds: list[int]
    regimes: list[str]
    split: str


def _probing(opts: HarnessOptions, mode: ServingMode, weights: str, engine: str) -> Probing:
    replay = opts.replay
    replay_regimes = parse_list(str(opts.get("replay_regimes", ",".join(REGIMES))), "replay-regimes")
    if replay is not None:
        if replay != "prior" and not (Path(replay) / "manifest.json").exists():
            raise UserError(f"--replay {replay!r} is neither 'prior' nor a run directory", "pass --replay prior or the -o directory of a measured diffusion run")
    bad = [r for r in replay_regimes if r not in REGIMES]
    if bad:
        raise UserError(f"--replay-regimes has unknown regime(s) {', '.join(bad)}", f"use some of {', '.join(REGIMES)}")
    probes_n = _pos_int(opts, "probe_prompts_per_regime", 0, 0)
    probe_seeds = parse_ints(str(opts.get("probe_seeds", "0,1,2,3,4")), "probe-seeds", 0)
    probe_regimes = _regimes(opts, "probe_regimes")
    probe_split = opts.get("probe_split", "all")
    if probe_split not in PROBE_SPLITS:
        raise UserError(f"--probe-split {probe_split!r} is unknown", f"use one of {', '.join(PROBE_SPLITS)}")
    if probes_n:
        if not mode.parts:
            probed = [m.name for m in harness_modes() if m.parts]
            raise UserError("probe prompts measure what a mode's profile part draws from (diffusion commits, MTP acceptance)",
                            f"use --mode {' or --mode '.join(probed)} for --probe-prompts-per-regime")
        if weights == "random":
            raise UserError("probe prompts need the checkpoint's tokenizer and weights", "pass --checkpoint, or drop --probe-prompts-per-regime for a random-weights timing run")
        if replay:
            raise UserError("--replay with probe prompts would replace the model's own commits", "run probes without --replay")
        if engine == "compiled" and _drafted(mode):
            raise UserError("--engine compiled cannot measure MTP acceptance exactly (static sliding-window KV is not rolled back)", "use --engine eager for probe runs")
    return Probing(replay, replay_regimes, probes_n, probe_seeds, probe_regimes, probe_split)


def parse_config(opts: HarnessOptions) -> HarnessConfig:
    """Every harness option checked; raises UserError naming the bad input and the fix."""
    src = _model_source(opts)
    mode = _mode(opts, src)  # the name resolved once: everything below takes the mode
    assistant_shape = _assistant(opts, mode, src)
    engine = opts.get("engine", "eager")
    if engine not in ENGINES:
        raise UserError(f"--engine {engine!r} is unknown", f"use one of {', '.join(ENGINES)}")
    counts = _grid_counts(opts, mode, engine)
    rate = _acceptance_rate(opts, mode, src.weights)
    probing = _probing(opts, mode, src.weights, engine)
    if _drafted(mode) and engine == "compiled" and src.weights == "checkpoint":
        raise UserError("--engine compiled for MTP is timing-only (rejected drafts stay in the static sliding-window KV)", "use --engine eager with a checkpoint")
    timing_grid = not opts.no_timing_grid
    if not timing_grid and not probing.prompts_per_regime:
        raise UserError("--no-timing-grid leaves nothing to measure", "add --probe-prompts-per-regime N or drop --no-timing-grid")
    grid = opts.get("grid", "cross")
    if grid not in GRIDS:
        raise UserError(f"--grid {grid!r} is unknown", f"use one of {', '.join(GRIDS)}")
    device = opts.device
    if device is not None and device != "cpu" and not device.startswith("cuda"):
        raise UserError(f"--device {device!r} is not a torch device", "use cuda, cuda:N or cpu")
    return HarnessConfig(
        serving=mode, model=src.manifest_model(opts.model), shape=src.shape, assistant_shape=assistant_shape, weights=src.weights,
        checkpoint=src.checkpoint, assistant_checkpoint=opts.assistant_checkpoint, engine=engine,
        experts_implementation=opts.get("experts_implementation", "grouped_mm"), device=device,
        out=Path(opts.out), resume=bool(opts.resume), seed=int(opts.get("seed", 0)),
        batches=counts.batches, contexts=counts.contexts, grid=grid, timing_grid=timing_grid, blocks=counts.blocks,
        max_denoising_steps=counts.max_denoising_steps, decode_steps=counts.decode_steps, draft_tokens=counts.draft_tokens,
        mtp_rounds=counts.mtp_rounds, mtp_acceptance_rate=rate, repeats=counts.repeats, warmup=counts.warmup, replay=probing.replay,
        replay_regimes=probing.replay_regimes, probe_prompts_per_regime=probing.prompts_per_regime, probe_seeds=probing.seeds,
        probe_regimes=probing.regimes, probe_split=probing.split, hook_overhead_repeats=counts.hook_overhead_repeats,
        profile_steps=counts.profile_steps, roofline_gpu=opts.roofline_gpu, telemetry_interval_ms=counts.telemetry_interval_ms,
    )
