"""Model directories of the catalog's full-size models that GPU vLLM serves with dummy weights
(`load_format="dummy"`: no download, random weights, the real architecture and shapes).

Written from the catalog (costmodel/models.py) as plain JSON in the form vLLM 0.26 reads with the
transformers it pins (5.13): Gemma-4 text configs with `head_dim` / `global_head_dim` /
`num_global_key_value_heads` as top-level fields (not the `per_layer_config` form transformers >= 5.17
saves), DiffusionGemma with a `vision_config` whose rope type 5.13 knows and the
`default_output_length` vLLM's multimodal profiling reads, and the MTP assistant as
`gemma4_assistant` (vLLM rewrites it to its Gemma4MTPModel). DiffusionGemma is multimodal in vLLM
and needs a tokenizer directory even for token-id prompts: the tiny byte-level BPE tokenizer
(measure/vllm/tiny_models.py) is written beside it; prompts keep their ids inside its vocabulary.

    dirs = write_model_dirs(Path("models/full"), shape)   # {"target": Path, "assistant": Path | None}
"""

from __future__ import annotations

import json
from pathlib import Path

from costmodel.models import ASSISTANT_FOR, ModelShape, get_model

from measure.vllm.tiny_models import BOI, BOS, END_OF_TURN, EOI, EOS, IMAGE, PAD  # the tiny tokenizer's special ids
PROMPT_ID_RANGE = (10, 500)  # token ids a prompt may use: inside the tiny tokenizer's 512 entries, no special token
PER_LAYER_INPUT_OFF = {"hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0}
ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0}}
# Gemma-4's vision tower at transformers' defaults (DiffusionGemma always builds one; text generation never runs it)
VISION = {"model_type": "gemma4_vision", "default_output_length": 280, "rope_parameters": {"rope_type": "default", "rope_theta": 100.0}}
# DiffusionGemma's published sampler (generation_config.json of the public checkpoint)
DIFFUSION_GENERATION = {"max_new_tokens": 256, "max_denoising_steps": 48,
                        "sampler_config": {"_cls_name": "EntropyBoundSamplerConfig", "entropy_bound": 0.1},
                        "t_min": 0.4, "t_max": 0.8, "stability_threshold": 1, "confidence_threshold": 0.005}


def text_config(shape: ModelShape) -> dict:
    """The shape's text config with every field vLLM 0.26's Gemma-4 code reads spelled out."""
    tc = {**shape.text_config, **PER_LAYER_INPUT_OFF}
    tc["layer_types"] = list(shape.layer_types)
    tc.setdefault("rope_parameters", ROPE)
    tc.setdefault("hidden_activation", "gelu_pytorch_tanh")
    tc.setdefault("rms_norm_eps", 1e-6)
    tc.setdefault("tie_word_embeddings", True)
    tc.setdefault("max_position_embeddings", 262144)
    tc["enable_moe_block"] = shape.is_moe
    tc.update(pad_token_id=PAD, eos_token_id=[EOS, END_OF_TURN], bos_token_id=BOS)
    return {**_gemma4_defaults(tc), **tc}


def _gemma4_defaults(tc: dict) -> dict:
    """Every field of the installed transformers' Gemma4TextConfig at its default: vLLM's
    DiffusionGemmaTextConfig is a bare PretrainedConfig and has no defaults of its own."""
    try:
        from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig
    except ImportError:
        return {}
    d = Gemma4TextConfig(**tc).to_dict()
    for k in ("model_type", "transformers_version", "architectures", "per_layer_config"):
        d.pop(k, None)
    return d


def config_json(shape: ModelShape) -> dict:
    """config.json of one catalog shape."""
    tc = text_config(shape)
    if shape.family == "diffusion_gemma":
        return {"architectures": ["DiffusionGemmaForBlockDiffusion"], "model_type": "diffusion_gemma", "text_config": tc,
                "vision_config": dict(VISION), "canvas_length": shape.canvas_length or 256, "image_token_id": IMAGE,
                "boi_token_id": BOI, "eoi_token_id": EOI, "pad_token_id": PAD, "eos_token_id": [EOS, END_OF_TURN], "bos_token_id": BOS,
                "tie_word_embeddings": True}
    if shape.family == "gemma4":
        return {"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", **tc}
    if shape.family == "gemma4_assistant":
        tc = {**tc, "num_kv_shared_layers": shape.num_hidden_layers, "model_type": "gemma4_text"}
        tc.pop("final_logit_softcapping", None)
        return {"architectures": ["Gemma4AssistantForCausalLM"], "model_type": "gemma4_assistant", "text_config": tc,
                "backbone_hidden_size": shape.backbone_hidden_size, "use_ordered_embeddings": False, "tie_word_embeddings": True}
    raise ValueError(f"model family {shape.family!r} has no vLLM config here")


def write_model_dir(out: Path, shape: ModelShape, with_tokenizer: bool) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config_json(shape), indent=1))
    gen = {"bos_token_id": BOS, "eos_token_id": [EOS, END_OF_TURN], "pad_token_id": PAD}
    if shape.family == "diffusion_gemma":
        gen.update(DIFFUSION_GENERATION)
    (out / "generation_config.json").write_text(json.dumps(gen, indent=1))
    (out / "costmodel_full_size.json").write_text(json.dumps({"shape": shape.name, "weights": "dummy (random, vLLM load_format=dummy)"}))
    if with_tokenizer:
        from measure.vllm.tiny_models import build_tokenizer  # the `tokenizers` package only

        build_tokenizer(out)
    return out


def write_model_dirs(root: Path, shape: ModelShape) -> dict[str, Path | None]:
    """The target's directory and, for a Gemma-4 target, its MTP assistant's."""
    root = Path(root)
    target = write_model_dir(root / shape.name, shape, with_tokenizer=shape.family == "diffusion_gemma")
    assistant = None
    if shape.name in ASSISTANT_FOR:
        a = get_model(ASSISTANT_FOR[shape.name])
        assistant = write_model_dir(root / a.name, a, with_tokenizer=False)
    return {"target": target, "assistant": assistant}
