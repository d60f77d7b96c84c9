"""Helpers shared by the harness tests (no tests here): run the harness's click options in-process (the same option
list `costmodel measure` composes) and build tiny models on the CPU."""

from __future__ import annotations

import click

COMMON = [
    click.option("--model", "model", default=None),
    click.option("--mode", default=None),
    click.option("-o", "--out", "out", required=True),
    click.option("--resume", is_flag=True),
    click.option("--seed", type=int, default=0),
    click.option("--endpoint", default=None),
]


def harness_command():
    from measure.cli.measure_harness import OPTIONS, run

    def measure(**opts):
        return run(opts)

    for opt in reversed(COMMON + OPTIONS):
        measure = opt(measure)
    return click.command()(measure)


def run_harness(*args: str) -> int:
    """Parse `args` like `costmodel measure` and run the harness (UserError propagates)."""
    import os

    os.environ.setdefault("COSTMODEL_NO_PROGRESS", "1")
    return harness_command().main(list(args), standalone_mode=False)


def tiny(name: str):
    import torch

    from costmodel.models import MODELS
    from measure.harness.build import build_random

    torch.manual_seed(0)
    return build_random(MODELS[name], "cpu", "grouped_mm", dtype=torch.float32)


def tiny_tokenizer(path, vocab_size: int = 512):
    """A word-level tokenizer with a one-line chat template, saved into a tiny checkpoint directory,
    so the probe path (chat template, decode, answer checks) runs on the CPU."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
    vocab.update({f"w{i}": i for i in range(4, vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>")
    fast.chat_template = "{% for m in messages %}<bos> {{ m['content'] }} {% endfor %}"
    fast.save_pretrained(path)
    return fast
