"""Model construction: full-size random weights straight on the device, or a checkpoint through
`from_pretrained` (with its tokenizer).

Random weights are built from the costmodel shape catalog with transformers' own classes:
`DiffusionGemmaForBlockDiffusion`, `Gemma4ForCausalLM` (AR and MTP target) and
`Gemma4AssistantForCausalLM` (MTP drafter), constructed under `torch.device(device)` with bf16 as
the default dtype (about a second for 25B parameters on an H200: no host copy).

Two construction details, each checked by a test:
- `Gemma4TextConfig` defaults add per-layer-input embeddings (hidden_size_per_layer_input=256,
  vocab_size_per_layer_input=262144: +2.1B parameters, 27.3B in all). The public 26B-A4B text config
  has none, so the AR sibling is built with both set to 0: 25.23B parameters, the published 25.2B.
- transformers 5.23's `Gemma4TextConfig.kv_sharing_modes` returns no "store" layer when
  num_kv_shared_layers == 0 (the 26B target: nothing is shared inside it) and raises when every layer
  is shared (the assistant, which must share all of them). The target must store the last sliding
  and the last full layer's KV for the assistant (as the property's own comment says it should), so
  MTP models are constructed under `kv_sharing_fix()`, which applies that rule: no effect on
  the target's computation, and the assistant reads the target's KV as transformers intends.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from costmodel.errors import UserError
from costmodel.models import ModelShape, load_config_json

PER_LAYER_INPUT_OFF = {"hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0}
# DiffusionGemma always builds a Gemma-4 vision tower (text generation never runs it). Full-size
# shapes keep transformers' default (0.17B parameters, as in shared/examples); the tiny-* test shapes
# get a one-layer tower so that building them takes milliseconds.
TINY_VISION = {"model_type": "gemma4_vision", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
               "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8, "position_embedding_size": 64}


@dataclass
class LoadedModels:
    """What a harness run measures: the model, the MTP drafter, the tokenizer (checkpoints only)."""

    model: Any
    shape: ModelShape
    weights: str  # "random" | "checkpoint"
    source: str  # catalog shape name or checkpoint id
    params: int
    language_model_params: int = 0
    assistant: Any = None
    assistant_shape: ModelShape | None = None
    assistant_params: int = 0
    assistant_source: str | None = None
    tokenizer: Any = None
    build_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def describe(self) -> dict:
        d = {"weights": self.weights, "source": self.source, "params": self.params, "params_b": round(self.params / 1e9, 3),
             "language_model_params_b": round(self.language_model_params / 1e9, 3),
             "shape_params_b": round(self.shape.total_params / 1e9, 3), "build_s": round(self.build_s, 2),
             "model_class": type(self.model).__name__}
        if self.assistant is not None:
            d.update(assistant_source=self.assistant_source, assistant_params=self.assistant_params,
                     assistant_class=type(self.assistant).__name__)
        return d


def count_params(model) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def language_model_params(model) -> int:
    """Parameters outside the vision tower: DiffusionGemma always carries Gemma-4's vision tower and
    its projector (0.17B at the default vision config), which text generation never runs."""
    skip = {id(p) for name, mod in model.named_modules() if name.endswith(("vision_tower", "embed_vision")) for p in mod.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in skip)


def _fixed_kv_sharing_modes(cfg) -> list[str | None]:
    n, shared = cfg.num_hidden_layers, cfg.num_kv_shared_layers
    first = n - shared
    if first <= 0:
        return ["reuse"] * n  # an assistant: every layer reads the target's KV
    modes: list[str | None] = [None if i < first else "reuse" for i in range(n)]
    unshared = list(cfg.layer_types[:first])
    for t in set(cfg.layer_types):
        if t in unshared:
            modes[first - 1 - unshared[::-1].index(t)] = "store"
    return modes


@contextlib.contextmanager
def kv_sharing_fix():
    """Construct Gemma-4 models whose KV-sharing layout transformers 5.23 gets wrong (see module doc)."""
    from transformers.models.gemma4 import configuration_gemma4 as c

    cls = c.Gemma4TextConfig
    original = cls.__dict__["kv_sharing_modes"]
    cls.kv_sharing_modes = property(_fixed_kv_sharing_modes)
    try:
        yield
    finally:
        cls.kv_sharing_modes = original


def transformers_config(shape: ModelShape, experts_implementation: str):
    """The transformers config object for a catalog shape."""
    from transformers import DiffusionGemmaConfig, Gemma4AssistantConfig, Gemma4TextConfig

    tc = dict(shape.text_config)
    if shape.family == "diffusion_gemma":
        vision = dict(TINY_VISION) if shape.name.startswith("tiny-") else None
        cfg = DiffusionGemmaConfig(text_config=tc, vision_config=vision, canvas_length=shape.canvas_length or 256)
    elif shape.family == "gemma4":
        cfg = Gemma4TextConfig(**tc, enable_moe_block=shape.is_moe, **PER_LAYER_INPUT_OFF)
    elif shape.family == "gemma4_assistant":
        text = Gemma4TextConfig(**{**tc, **PER_LAYER_INPUT_OFF, "num_kv_shared_layers": int(tc["num_hidden_layers"])})
        cfg = Gemma4AssistantConfig(text_config=text, backbone_hidden_size=shape.backbone_hidden_size)
    else:
        raise UserError(f"model family {shape.family!r} has no transformers class here", "use a DiffusionGemma or Gemma-4 shape")
    if shape.is_moe:
        cfg._experts_implementation = experts_implementation
    return cfg


def model_class(shape: ModelShape):
    import transformers

    return {"diffusion_gemma": transformers.DiffusionGemmaForBlockDiffusion, "gemma4": transformers.Gemma4ForCausalLM,
            "gemma4_assistant": transformers.Gemma4AssistantForCausalLM}[shape.family]


# buffers whose construct-time value transformers' init_weights does not restore for every layer class
# (DiffusionGemma's encoder layers' layer_scalar: torch.ones(1) in __init__)
CONSTRUCT_TIME_BUFFERS = {"layer_scalar": 1.0}


def _materialize(model, device) -> int:
    """Give every meta parameter and buffer real (uninitialised) storage on `device`, once per
    distinct tensor: tied weights (DiffusionGemma's encoder and decoder share their layers and the
    embedding) stay one tensor. Returns the number of distinct tensors allocated."""
    import torch

    memo: dict[int, object] = {}
    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) not in memo:
                memo[id(p)] = torch.nn.Parameter(torch.empty(p.shape, dtype=p.dtype, device=device), requires_grad=p.requires_grad)
            mod._parameters[name] = memo[id(p)]
        for name, b in list(mod._buffers.items()):
            if b is None:
                continue
            if id(b) not in memo:
                memo[id(b)] = torch.empty(b.shape, dtype=b.dtype, device=device)
            mod._buffers[name] = memo[id(b)]
    return len(memo)


def build_random(shape: ModelShape, device: str, experts_implementation: str, dtype=None):
    """Full-size model with random bf16 weights, initialised on `device`.

    Built on the meta device first, so that nothing is allocated before transformers ties the
    weights (DiffusionGemma's encoder and decoder share 30 layers: constructing it directly on the
    GPU allocated both stacks, ~100 GB, and ran out of memory on an 80 GB H100 - issue 17 item 6);
    then every distinct tensor is materialised once on `device` and initialised by transformers'
    own `init_weights` (which also recomputes buffers such as the rotary frequencies)."""
    import torch

    dtype = dtype or torch.bfloat16
    cfg = transformers_config(shape, experts_implementation)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            model = model_class(shape)(cfg)
    except ValueError as e:
        if "experts" in str(e).lower():
            raise UserError(f"--experts-implementation {experts_implementation!r} is not available ({str(e)[:160]})",
                            "use grouped_mm, batched_mm or eager") from None
        raise
    finally:
        torch.set_default_dtype(prev)
    _materialize(model, device)
    for t in (*model.parameters(), *model.buffers(), *model.modules()):
        if getattr(t, "_is_hf_initialized", False):
            t._is_hf_initialized = False  # set while building on meta; everything must be initialised now
    with torch.no_grad():
        for b in model.buffers():
            if b.is_floating_point():
                b.fill_(float("nan"))  # poison: whatever init_weights leaves untouched shows up below
        model.init_weights()
        left = [n for n, b in model.named_buffers() if b.is_floating_point() and torch.isnan(b).any()]
        for n, b in model.named_buffers():
            if n in left and n.rsplit(".", 1)[-1] in CONSTRUCT_TIME_BUFFERS:
                b.fill_(CONSTRUCT_TIME_BUFFERS[n.rsplit(".", 1)[-1]])
                left.remove(n)
        if left:
            raise RuntimeError(f"buffers not initialised after building on the meta device: {left[:5]}")
    return model.eval()


def meta_param_count(shape: ModelShape) -> int:
    """Parameters of the model transformers builds for `shape`, counted on the meta device."""
    import torch

    ctx = kv_sharing_fix() if shape.family == "gemma4_assistant" else contextlib.nullcontext()
    with ctx, torch.device("meta"):
        model = model_class(shape)(transformers_config(shape, "eager"))
    return count_params(model)


def _shape_from_loaded(config, name: str) -> ModelShape:
    """A costmodel shape from a loaded transformers config (via its config.json form)."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "config.json"
        cfg = config.to_dict()
        cfg["_name_or_path"] = name
        p.write_text(json.dumps(cfg, default=str))
        return load_config_json(p)


def _from_pretrained(cls, ckpt: str, device, experts_implementation: str | None):
    """Weights straight to `device` with accelerate's device_map when it is installed, else loaded on
    the host and moved. `experts_implementation` None: a dense model (the MTP assistant)."""
    import importlib.util

    import torch

    kw = dict(dtype=torch.bfloat16)
    direct = importlib.util.find_spec("accelerate") is not None
    if direct:
        kw["device_map"] = str(device)
    if experts_implementation is not None:
        kw["experts_implementation"] = experts_implementation
    try:
        model = cls.from_pretrained(ckpt, **kw)
        return (model if direct else model.to(device)).eval()
    except OSError as e:
        raise UserError(f"checkpoint {ckpt!r} could not be loaded ({str(e).splitlines()[0][:200]})",
                        "pass a local directory with config.json and weights, or a hub id you can download") from None
    except (ValueError, TypeError) as e:
        if "experts" in str(e).lower():
            raise UserError(f"--experts-implementation {experts_implementation!r} does not suit {ckpt} ({str(e)[:160]})",
                            "use grouped_mm, batched_mm or eager") from None
        raise


def load_models(cfg, device: str) -> LoadedModels:
    """Build or load everything `cfg` (HarnessConfig) measures."""
    import transformers

    t0 = time.perf_counter()
    fix = kv_sharing_fix() if cfg.serving.assistant else contextlib.nullcontext()
    notes: list[str] = []
    with fix:
        if cfg.weights == "random":
            model = build_random(cfg.shape, device, cfg.experts_implementation)
            shape, source, tokenizer = cfg.shape, cfg.shape.name, None
            notes.append(f"random bf16 weights built on {device} from the catalog shape {shape.name} ({shape.source})")
            if shape.family == "gemma4":
                notes.append("Gemma4TextConfig built with hidden_size_per_layer_input=0 and vocab_size_per_layer_input=0 (the public 26B-A4B text config has no per-layer inputs)")
        else:
            cls = getattr(transformers, cfg.serving.transformers_class or "AutoModelForCausalLM")
            model = _from_pretrained(cls, cfg.checkpoint, device, cfg.experts_implementation)
            shape = cfg.shape or _shape_from_loaded(model.config, cfg.checkpoint)
            source = cfg.checkpoint
            tokenizer = _load_tokenizer(cfg.checkpoint)
            notes.append(f"checkpoint {cfg.checkpoint} loaded with from_pretrained (bf16)")
        assistant = assistant_shape = None
        assistant_source = None
        if cfg.serving.assistant:
            if cfg.weights == "random":
                assistant_shape = cfg.assistant_shape
                assistant = build_random(assistant_shape, device, cfg.experts_implementation)
                assistant_source = assistant_shape.name
                notes.append(f"MTP assistant: random weights, {assistant_shape.source}")
            else:
                assistant = _from_pretrained(transformers.AutoModelForCausalLM, cfg.assistant_checkpoint, device, None)
                assistant_shape = cfg.assistant_shape or _shape_from_loaded(assistant.config, cfg.assistant_checkpoint)
                assistant_source = cfg.assistant_checkpoint
            if not type(assistant).__name__.startswith(("Gemma4Assistant", "Gemma4UnifiedAssistant")):
                raise UserError(f"the MTP drafter is a {type(assistant).__name__}", "pass a Gemma-4 assistant checkpoint (Gemma4AssistantForCausalLM)")
            notes.append("MTP models constructed under kv_sharing_fix (transformers 5.23 kv_sharing_modes: target stores its last sliding/full KV, assistant reuses every layer)")
    loaded = LoadedModels(model=model, shape=shape, weights=cfg.weights, source=source, params=count_params(model),
                          language_model_params=language_model_params(model),
                          assistant=assistant, assistant_shape=assistant_shape, assistant_source=assistant_source,
                          assistant_params=count_params(assistant) if assistant is not None else 0, tokenizer=tokenizer,
                          build_s=time.perf_counter() - t0, notes=notes)
    return loaded


def _load_tokenizer(ckpt: str):
    """The checkpoint's tokenizer (the processor's, for multimodal checkpoints), or None."""
    from transformers import AutoProcessor, AutoTokenizer

    for loader in (AutoTokenizer, AutoProcessor):
        try:
            tok = loader.from_pretrained(ckpt)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        return getattr(tok, "tokenizer", tok)
    return None
