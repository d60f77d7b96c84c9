"""The harness's `costmodel measure` options and entry point. Torch-free at import time, so
`costmodel --help` and `costmodel measure --help` work without the measure extra."""

from __future__ import annotations

import click

from measure.harness.campaign import run_harness
from measure.harness.config import HarnessOptions

OPTIONS = [
    click.option("--random-weights", is_flag=True, help="Build the --model shape at full size with random bf16 weights on the GPU (timings only: no commit statistic is the model's)."),
    click.option("--checkpoint", default=None, help="Real weights: a checkpoint directory or hub id, loaded with from_pretrained (with its tokenizer)."),
    click.option("--assistant-checkpoint", default=None, help="MTP drafter weights (Gemma4AssistantForCausalLM) for --mode mtp with --checkpoint."),
    click.option("--engine", type=click.Choice(["eager", "compiled", "vllm"]), default=None,
                 help="vllm: a real vLLM engine on this machine, every engine step recorded (random weights; the tiny models on a CPU); "
                      "transformers' own models: eager (dynamic cache; the default) or compiled (static cache + torch.compile "
                      "reduce-overhead, CUDA graphs; ~2 min compile per shape at full size)."),
    click.option("--experts-implementation", default="grouped_mm", show_default=True, help="transformers MoE experts kernel: grouped_mm, batched_mm, eager, ..."),
    click.option("--device", default=None, help="torch device (default: cuda if available, else cpu)."),
    click.option("--canvases", default=None, help="Diffusion: canvases per denoising step (batch), comma list [default 1,2,4,8,16,32]."),
    click.option("--decode-batches", default=None, help="AR/MTP: sequences per step, comma list [default 1,4,16,64,256]."),
    click.option("--contexts", default=None, help="Prompt tokens (context) per sequence, comma list [default 1024]."),
    click.option("--grid", type=click.Choice(["cross", "star"]), default="cross", show_default=True,
                 help="cross: every batch x every context; star: every batch at the first context, every context at the first batch."),
    click.option("--no-timing-grid", is_flag=True, help="Skip the timing grid (probe generations only)."),
    click.option("--blocks", type=int, default=None, help="Diffusion: canvases (256-token blocks) per request [default 2]."),
    click.option("--max-denoising-steps", type=int, default=None, help="Diffusion: step budget per canvas [default 48, the checkpoint's]."),
    click.option("--decode-steps", type=int, default=None, help="AR: decode steps per timed generation [default 16]."),
    click.option("--draft-tokens", default=None, help="MTP: draft tokens per round k, comma list [default 1,2,4,8]."),
    click.option("--mtp-rounds", type=int, default=None, help="MTP: draft/verify rounds per timed generation [default 4]."),
    click.option("--mtp-acceptance-rate", type=float, default=None,
                 help="MTP with random weights: per-token acceptance drawn per round [default 0.8, vLLM's synthetic benchmark rate]."),
    click.option("--repeats", type=int, default=None, help="Timed generations per grid cell [default 3]."),
    click.option("--warmup", type=int, default=None, help="Untimed warm-up generations per grid cell (compilation happens here) [default 1]."),
    click.option("--replay", default=None, help="Diffusion: stop canvases after k_b steps drawn from 'prior' (published per-regime prior) or a measured RUN directory."),
    click.option("--replay-regimes", default=None, help="Regimes the replay schedule draws from, cycled over rows [default R1..R6]."),
    click.option("--probe-prompts-per-regime", type=int, default=None, help="Probe prompts per regime to generate with a checkpoint [default 0]."),
    click.option("--probe-seeds", default=None, help="Seeds per probe prompt [default 0,1,2,3,4]."),
    click.option("--probe-regimes", default=None, help="Probe regimes [default R1..R6]."),
    click.option("--probe-split", type=click.Choice(["all", "exploratory", "confirmatory"]), default=None,
                 help="Probe prompts of one half of the deterministic per-prompt split [default all]."),
    click.option("--hook-overhead-repeats", type=int, default=None, help="Diffusion: hooked/unhooked generate pairs timed at the first cell [default 5; 0 skips]."),
    click.option("--profile-steps", type=int, default=None, help="torch.profiler breakdown of N steps at the first cell [default 0: none]."),
    click.option("--roofline-gpu", default=None, help="GPU whose roofline the passes are compared with (catalog id or JSON) [default: the detected GPU]."),
    click.option("--telemetry-interval-ms", type=int, default=None, help="NVML sampling period [default 100; 0 disables]."),
]


def run(opts: dict) -> int:
    """Run the in-process harness with the parsed options (see `costmodel measure --help`)."""
    return run_harness(HarnessOptions.from_values(opts))
