"""Validated settings of one harness run, parsed from the CLI options (torch-free, so every bad
input is a one-line UserError before anything heavy is imported).

Model source: `--random-weights` builds the catalog shape (or a config.json) at full size;
`--checkpoint PATH_OR_HUB_ID` loads real weights with from_pretrained. `--model` names the
catalog shape used for the roofline (and, with random weights, for the build); when `--model` is
neither a catalog name nor a config.json and no `--checkpoint` is given, `--model` is the checkpoint.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from costmodel.errors import UserError
from costmodel.models import ASSISTANT_FOR, MODELS, ModelShape, get_model
from costmodel.options import parse_ints, parse_list
from measure.probes import REGIMES

# the registered modes (costmodel.modes) this in-process harness implements (diffusion.py, causal.py)
HARNESS_MODES = ("diffusion", "ar", "mtp")
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
    mode: str
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
    def commit_source(self) -> str:
        """What the run's commit records are (costmodel.schemas.rundir.COMMIT_SOURCES)."""
        if self.mode != "diffusion":
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
        ks = self.draft_tokens if self.mode == "mtp" else [0]
        return [Cell(b, p, k) for b, p in pairs for k in ks]

    def settings(self) -> dict:
        """The options as the manifest records them."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("shape", "assistant_shape", "out")}
        d["out"] = str(self.out)
        d["cells"] = [c.label for c in self.cells()]
        return d


def _opt(opts: dict, key: str, default=None):
    v = opts.get(key)
    return default if v is None else v


# Options that only one mode (or one feature) uses: given anywhere else they would be ignored.
MODE_ONLY = {
    "canvases": ("diffusion",), "blocks": ("diffusion",), "max_denoising_steps": ("diffusion",), "replay": ("diffusion",),
    "hook_overhead_repeats": ("diffusion",), "decode_batches": ("ar", "mtp"), "decode_steps": ("ar",),
    "draft_tokens": ("mtp",), "mtp_rounds": ("mtp",), "mtp_acceptance_rate": ("mtp",),
}
PROBE_ONLY = ("probe_seeds", "probe_regimes", "probe_split")


def _reject_unused(opts: dict, mode: str) -> None:
    for key, modes in MODE_ONLY.items():
        if opts.get(key) is not None and mode not in modes:
            raise UserError(f"--{key.replace('_', '-')} is not used by --mode {mode}", f"drop it (it applies to --mode {'/'.join(modes)})")
    if not opts.get("probe_prompts_per_regime"):
        for key in PROBE_ONLY:
            if opts.get(key) is not None:
                raise UserError(f"--{key.replace('_', '-')} is only used with --probe-prompts-per-regime", "add --probe-prompts-per-regime N or drop it")
    if opts.get("replay_regimes") is not None and opts.get("replay") is None:
        raise UserError("--replay-regimes is only used with --replay", "add --replay prior (or a run directory) or drop it")


def parse_config(opts: dict) -> HarnessConfig:
    """Every harness option checked; raises UserError naming the bad input and the fix."""
    model_opt = opts.get("model")
    checkpoint = opts.get("checkpoint")
    random_weights = bool(opts.get("random_weights"))
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
    weights = "random" if random_weights else "checkpoint"

    mode = opts.get("mode")
    if mode is None:
        if shape is None:
            raise UserError("--mode is needed when the model comes from a checkpoint without --model", "pass --mode diffusion|ar|mtp")
        mode = "diffusion" if shape.family == "diffusion_gemma" else "ar"
    if mode not in HARNESS_MODES:
        raise UserError(f"--mode {mode!r} is unknown", f"use one of {', '.join(HARNESS_MODES)}")
    _reject_unused(opts, mode)
    if shape is not None:
        want = "diffusion_gemma" if mode == "diffusion" else "gemma4"
        if shape.family != want:
            raise UserError(f"--mode {mode} needs a {'DiffusionGemma' if mode == 'diffusion' else 'Gemma-4 (AR)'} model, and {shape.name} is {shape.family}",
                            "use --model diffusiongemma-26b-a4b for diffusion and --model gemma4-26b-a4b for ar/mtp")

    assistant_ckpt = opts.get("assistant_checkpoint")
    assistant_shape = None
    if mode == "mtp":
        if weights == "checkpoint" and not assistant_ckpt:
            raise UserError("--mode mtp with --checkpoint needs the drafter's weights", "pass --assistant-checkpoint PATH_OR_HUB_ID (e.g. google/gemma-4-26B-A4B-it-assistant)")
        if weights == "random":
            if assistant_ckpt:
                raise UserError("--assistant-checkpoint given with --random-weights", "drop it: random weights build the assistant from the catalog shape")
            if shape.name not in ASSISTANT_FOR:
                raise UserError(f"no MTP assistant shape is known for {shape.name}", f"use one of {', '.join(ASSISTANT_FOR)}")
        if shape is not None and shape.name in ASSISTANT_FOR:
            assistant_shape = get_model(ASSISTANT_FOR[shape.name])
    elif assistant_ckpt:
        raise UserError("--assistant-checkpoint is only used with --mode mtp", "drop it or pass --mode mtp")

    engine = _opt(opts, "engine", "eager")
    if engine not in ENGINES:
        raise UserError(f"--engine {engine!r} is unknown", f"use one of {', '.join(ENGINES)}")

    def ints(key, minimum=1):
        return parse_ints(str(opts[key]), key.replace("_", "-"), minimum) if opts.get(key) is not None else None

    batches = ints("canvases") if mode == "diffusion" else ints("decode_batches")
    batches = batches or ([1, 2, 4, 8, 16, 32] if mode == "diffusion" else [1, 4, 16, 64, 256])
    contexts = ints("contexts") or [1024]
    draft_tokens = ints("draft_tokens") or [1, 2, 4, 8]
    if mode == "mtp" and max(draft_tokens) > 16:
        raise UserError(f"--draft-tokens {max(draft_tokens)} is above 16", "MTP drafts 1 to 8 tokens per round in practice; give values 1..16")

    def pos_int(key, default, minimum=1):
        v = _opt(opts, key, default)
        if not isinstance(v, int) or v < minimum:
            raise UserError(f"--{key.replace('_', '-')} {v!r} must be an integer >= {minimum}", f"e.g. --{key.replace('_', '-')} {max(default, minimum)}")
        return v

    blocks = pos_int("blocks", 2)
    max_steps = pos_int("max_denoising_steps", 48)
    decode_steps = pos_int("decode_steps", 16)
    mtp_rounds = pos_int("mtp_rounds", 4)
    repeats = pos_int("repeats", 3)
    warmup = pos_int("warmup", 1, 0)
    hook_reps = pos_int("hook_overhead_repeats", 5 if mode == "diffusion" else 0, 0)
    profile_steps = pos_int("profile_steps", 0, 0)
    telemetry_ms = pos_int("telemetry_interval_ms", 100, 0)
    if engine == "compiled" and warmup < 1:
        raise UserError("--engine compiled with --warmup 0 would time the compilation", "use --warmup 1 or more")

    rate = opts.get("mtp_acceptance_rate")
    if rate is not None:
        if weights == "checkpoint":
            raise UserError("--mtp-acceptance-rate given with a checkpoint", "a checkpoint's acceptance is measured (greedy verification); drop the option")
        if not (0.0 <= float(rate) <= 1.0):
            raise UserError(f"--mtp-acceptance-rate {rate} is outside 0..1", "e.g. --mtp-acceptance-rate 0.8 (vLLM's synthetic default)")
        rate = float(rate)
    elif mode == "mtp" and weights == "random":
        rate = DEFAULT_MTP_ACCEPTANCE

    replay = opts.get("replay")
    replay_regimes = parse_list(str(_opt(opts, "replay_regimes", ",".join(REGIMES))), "replay-regimes")
    if replay is not None:
        if replay != "prior" and not (Path(replay) / "manifest.json").exists():
            raise UserError(f"--replay {replay!r} is neither 'prior' nor a run directory", "pass --replay prior or the -o directory of a measured diffusion run")
    bad = [r for r in replay_regimes if r not in REGIMES]
    if bad:
        raise UserError(f"--replay-regimes has unknown regime(s) {', '.join(bad)}", f"use some of {', '.join(REGIMES)}")

    probes_n = pos_int("probe_prompts_per_regime", 0, 0)
    probe_seeds = parse_ints(str(_opt(opts, "probe_seeds", "0,1,2,3,4")), "probe-seeds", 0)
    probe_regimes = parse_list(str(_opt(opts, "probe_regimes", ",".join(REGIMES))), "probe-regimes")
    bad = [r for r in probe_regimes if r not in REGIMES]
    if bad:
        raise UserError(f"--probe-regimes has unknown regime(s) {', '.join(bad)}", f"use some of {', '.join(REGIMES)}")
    probe_split = _opt(opts, "probe_split", "all")
    if probe_split not in PROBE_SPLITS:
        raise UserError(f"--probe-split {probe_split!r} is unknown", f"use one of {', '.join(PROBE_SPLITS)}")
    if probes_n:
        if mode == "ar":
            raise UserError("probe prompts measure diffusion commits or MTP acceptance", "use --mode diffusion or --mode mtp for --probe-prompts-per-regime")
        if weights == "random":
            raise UserError("probe prompts need the checkpoint's tokenizer and weights", "pass --checkpoint, or drop --probe-prompts-per-regime for a random-weights timing run")
        if replay:
            raise UserError("--replay with probe prompts would replace the model's own commits", "run probes without --replay")
        if engine == "compiled" and mode == "mtp":
            raise UserError("--engine compiled cannot measure MTP acceptance exactly (static sliding-window KV is not rolled back)", "use --engine eager for probe runs")
    if mode == "mtp" and engine == "compiled" and weights == "checkpoint":
        raise UserError("--engine compiled for MTP is timing-only (rejected drafts stay in the static sliding-window KV)", "use --engine eager with a checkpoint")

    timing_grid = not opts.get("no_timing_grid")
    if not timing_grid and not probes_n:
        raise UserError("--no-timing-grid leaves nothing to measure", "add --probe-prompts-per-regime N or drop --no-timing-grid")
    grid = _opt(opts, "grid", "cross")
    if grid not in GRIDS:
        raise UserError(f"--grid {grid!r} is unknown", f"use one of {', '.join(GRIDS)}")
    device = opts.get("device")
    if device is not None and device != "cpu" and not device.startswith("cuda"):
        raise UserError(f"--device {device!r} is not a torch device", "use cuda, cuda:N or cpu")

    return HarnessConfig(
        mode=mode, model=(shape.name if shape is not None and not checkpoint else (checkpoint or model_opt)), shape=shape,
        assistant_shape=assistant_shape, weights=weights, checkpoint=checkpoint, assistant_checkpoint=assistant_ckpt,
        engine=engine, experts_implementation=_opt(opts, "experts_implementation", "grouped_mm"), device=device,
        out=Path(opts["out"]), resume=bool(opts.get("resume")), seed=int(_opt(opts, "seed", 0)),
        batches=batches, contexts=contexts, grid=grid, timing_grid=timing_grid, blocks=blocks, max_denoising_steps=max_steps,
        decode_steps=decode_steps, draft_tokens=draft_tokens, mtp_rounds=mtp_rounds, mtp_acceptance_rate=rate,
        repeats=repeats, warmup=warmup, replay=replay, replay_regimes=replay_regimes, probe_prompts_per_regime=probes_n,
        probe_seeds=probe_seeds, probe_regimes=probe_regimes, probe_split=probe_split, hook_overhead_repeats=hook_reps,
        profile_steps=profile_steps, roofline_gpu=opts.get("roofline_gpu"), telemetry_interval_ms=telemetry_ms,
    )
