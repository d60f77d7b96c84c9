"""Model shapes: the numbers the roofline, the KV-cache budget and the harness need.

Sources: `config.json` of the public checkpoints as tabulated in
shared/reference/diffusiongemma.md (google/diffusiongemma-26B-A4B-it, google/gemma-4-26B-A4B-it).
The MTP assistant's shape is not published in that reference: `gemma4-26b-a4b-assistant` below is a
stated assumption (see `ASSISTANT_ASSUMPTION`), overridable with a config.json path.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from costmodel.errors import UserError
from costmodel.jsonfile import read_json

SOURCE_PUBLIC_CONFIG = (
    "config.json of google/diffusiongemma-26B-A4B-it and google/gemma-4-26B-A4B-it, "
    "as tabulated in shared/reference/diffusiongemma.md"
)
ASSISTANT_ASSUMPTION = (
    "assumed shape (no public config in the project's references): 4 dense layers, hidden 1024, "
    "MLP 4096, 8 query heads of dim 256 reading the target's KV (no K/V projections), "
    "full 262,144-token lm_head tied to its embedding, pre/post projections to the target's 2816"
)


@dataclass(frozen=True)
class ModelShape:
    """Architecture numbers of one model. Layer lists follow transformers' `layer_types`."""

    name: str
    family: str  # "diffusion_gemma" | "gemma4" | "gemma4_assistant"
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    global_head_dim: int
    num_global_key_value_heads: int
    attention_k_eq_v: bool
    intermediate_size: int
    vocab_size: int
    sliding_window: int
    layer_types: tuple[str, ...]
    num_experts: int = 0
    top_k_experts: int = 0
    moe_intermediate_size: int = 0
    canvas_length: int = 0  # diffusion only
    has_kv_projections: bool = True  # False for the MTP assistant (reads the target's KV)
    backbone_hidden_size: int = 0  # assistant only: width of the target it projects from/to
    final_logit_softcapping: float | None = 30.0
    published_params_b: float | None = None
    published_active_params_b: float | None = None
    source: str = SOURCE_PUBLIC_CONFIG
    text_config: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    # ---- derived counts (parameters, not bytes) -------------------------------------------------
    def _attn_params(self, layer_type: str) -> int:
        d = self.hidden_size
        if layer_type == "full_attention":
            hd, kv = self.global_head_dim, self.num_global_key_value_heads
            kv_mats = 1 if self.attention_k_eq_v else 2
        else:
            hd, kv = self.head_dim, self.num_key_value_heads
            kv_mats = 2
        q_o = 2 * d * self.num_attention_heads * hd
        k_v = kv_mats * d * kv * hd if self.has_kv_projections else 0
        return q_o + k_v

    @cached_property
    def dense_mlp_params_per_layer(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size if self.intermediate_size else 0

    @cached_property
    def expert_params(self) -> int:
        """Parameters of one expert (gate, up, down)."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    @cached_property
    def router_params_per_layer(self) -> int:
        return self.hidden_size * self.num_experts if self.num_experts else 0

    @cached_property
    def attention_params(self) -> int:
        return sum(self._attn_params(t) for t in self.layer_types)

    @cached_property
    def shared_body_params(self) -> int:
        """Parameters every token touches in the layer stack: attention, dense MLP, router, norms."""
        norms = self.num_hidden_layers * 6 * self.hidden_size
        proj = 3 * self.hidden_size * self.backbone_hidden_size if self.backbone_hidden_size else 0
        return (
            self.attention_params
            + self.num_hidden_layers * (self.dense_mlp_params_per_layer + self.router_params_per_layer)
            + norms
            + proj
            + self.self_conditioning_params
        )

    @cached_property
    def embedding_params(self) -> int:
        """Tied embedding / lm_head (vocab x hidden)."""
        return self.vocab_size * self.hidden_size

    @cached_property
    def total_params(self) -> int:
        return self.shared_body_params + self.num_hidden_layers * self.num_experts * self.expert_params + self.embedding_params

    @cached_property
    def active_params_per_token(self) -> int:
        """Body + top-k experts + lm_head: the per-token count model cards publish."""
        return self.shared_body_params + self.num_hidden_layers * self.top_k_experts * self.expert_params + self.embedding_params

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @cached_property
    def self_conditioning_params(self) -> int:
        """DiffusionGemma's decoder input MLP over the previous step's soft embeddings."""
        return 3 * self.hidden_size * self.intermediate_size if self.family == "diffusion_gemma" else 0

    def kv_elems_per_token_layer(self, layer_type: str) -> int:
        """KV-cache elements one token occupies in one layer (k_eq_v global layers store K only)."""
        if layer_type == "full_attention":
            return (1 if self.attention_k_eq_v else 2) * self.num_global_key_value_heads * self.global_head_dim
        return 2 * self.num_key_value_heads * self.head_dim

    def kv_bytes_per_token(self, kv_dtype_bytes: float) -> float:
        """KV-cache bytes one context token occupies across all layers this model writes."""
        if not self.has_kv_projections:
            return 0.0
        total = 0
        for t in self.layer_types:
            if t == "full_attention":
                total += (1 if self.attention_k_eq_v else 2) * self.num_global_key_value_heads * self.global_head_dim
            else:
                total += 2 * self.num_key_value_heads * self.head_dim
        return total * kv_dtype_bytes

    def with_overrides(self, **kw) -> "ModelShape":
        return dataclasses.replace(self, **kw)


def _layer_types(n: int, pattern: int = 6) -> tuple[str, ...]:
    return tuple("sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n))


def _from_text_config(name: str, family: str, tc: dict, **extra) -> ModelShape:
    """Build a shape from a transformers text config dict (the same keys as config.json)."""
    try:
        n = int(tc["num_hidden_layers"])
        shape = ModelShape(
            name=name,
            family=family,
            hidden_size=int(tc["hidden_size"]),
            num_hidden_layers=n,
            num_attention_heads=int(tc["num_attention_heads"]),
            num_key_value_heads=int(tc.get("num_key_value_heads", tc["num_attention_heads"])),
            head_dim=int(tc.get("head_dim", 256)),
            global_head_dim=int(tc.get("global_head_dim", tc.get("head_dim", 256))),
            num_global_key_value_heads=int(
                tc.get("num_global_key_value_heads") or tc.get("num_key_value_heads", tc["num_attention_heads"])
            ),
            attention_k_eq_v=bool(tc.get("attention_k_eq_v", False)),
            intermediate_size=int(tc.get("intermediate_size", 0)),
            vocab_size=int(tc.get("vocab_size", 262144)),
            sliding_window=int(tc.get("sliding_window", 1024)),
            layer_types=tuple(tc.get("layer_types") or _layer_types(n)),
            num_experts=int(tc.get("num_experts") or 0) if tc.get("enable_moe_block", True) else 0,
            top_k_experts=int(tc.get("top_k_experts") or 0),
            moe_intermediate_size=int(tc.get("moe_intermediate_size") or 0),
            text_config=dict(tc),
            **{"final_logit_softcapping": tc.get("final_logit_softcapping", 30.0), **extra},
        )
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"model config for {name!r} is missing or has a bad field ({e})", "pass a transformers config.json of the DiffusionGemma/Gemma-4 families") from None
    if len(shape.layer_types) != shape.num_hidden_layers:
        raise UserError(f"model config for {name!r}: layer_types has {len(shape.layer_types)} entries for {shape.num_hidden_layers} layers", "fix layer_types")
    return shape


# The text config shared by both 26B-A4B checkpoints (shared/examples/diffusiongemma_26b_a4b_text_config.json).
TEXT_26B_A4B = {
    "vocab_size": 262144,
    "hidden_size": 2816,
    "intermediate_size": 2112,
    "num_hidden_layers": 30,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 256,
    "global_head_dim": 512,
    "num_global_key_value_heads": 2,
    "attention_k_eq_v": True,
    "num_experts": 128,
    "top_k_experts": 8,
    "moe_intermediate_size": 704,
    "sliding_window": 1024,
    "max_position_embeddings": 262144,
    "final_logit_softcapping": 30.0,
    "use_bidirectional_attention": "vision",
}

# KV fields describe the target's cache that the assistant reads (it has no K/V projections).
ASSISTANT_TEXT = {
    "vocab_size": 262144,
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 256,
    "global_head_dim": 512,
    "num_global_key_value_heads": 2,
    "attention_k_eq_v": True,
    "sliding_window": 1024,
    "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
    "enable_moe_block": False,
}

# A tiny shape of each family for CPU tests: same structure (sliding + full layers, k_eq_v, MoE).
TINY_TEXT = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "global_head_dim": 64,
    "num_global_key_value_heads": 1,
    "attention_k_eq_v": True,
    "num_experts": 4,
    "top_k_experts": 2,
    "moe_intermediate_size": 32,
    "sliding_window": 64,
    "max_position_embeddings": 4096,
    "layer_types": ["sliding_attention", "full_attention"],
    "final_logit_softcapping": 30.0,
    "use_bidirectional_attention": "vision",
}
TINY_ASSISTANT_TEXT = {**ASSISTANT_TEXT, "vocab_size": 512, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                       "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "global_head_dim": 64,
                       "num_global_key_value_heads": 1, "layer_types": ["sliding_attention", "full_attention"]}


def _catalog() -> dict[str, ModelShape]:
    pub = dict(published_params_b=25.2, published_active_params_b=3.8)
    return {
        "diffusiongemma-26b-a4b": _from_text_config("diffusiongemma-26b-a4b", "diffusion_gemma", TEXT_26B_A4B, canvas_length=256, **pub),
        "gemma4-26b-a4b": _from_text_config("gemma4-26b-a4b", "gemma4", TEXT_26B_A4B, **pub),
        "gemma4-26b-a4b-assistant": _from_text_config(
            "gemma4-26b-a4b-assistant", "gemma4_assistant", ASSISTANT_TEXT,
            has_kv_projections=False, backbone_hidden_size=2816, source=ASSISTANT_ASSUMPTION, final_logit_softcapping=None,
        ),
        "tiny-diffusiongemma": _from_text_config("tiny-diffusiongemma", "diffusion_gemma", TINY_TEXT, canvas_length=32, source="test shape"),
        "tiny-gemma4": _from_text_config("tiny-gemma4", "gemma4", TINY_TEXT, source="test shape"),
        "tiny-gemma4-assistant": _from_text_config(
            "tiny-gemma4-assistant", "gemma4_assistant", TINY_ASSISTANT_TEXT,
            has_kv_projections=False, backbone_hidden_size=64, source="test shape", final_logit_softcapping=None,
        ),
    }


MODELS: dict[str, ModelShape] = _catalog()
# The assistant that drafts for each target in MTP mode.
ASSISTANT_FOR = {"gemma4-26b-a4b": "gemma4-26b-a4b-assistant", "tiny-gemma4": "tiny-gemma4-assistant"}
# The AR sibling of each diffusion model (same body), for mode comparisons.
AR_SIBLING = {"diffusiongemma-26b-a4b": "gemma4-26b-a4b", "tiny-diffusiongemma": "tiny-gemma4"}


def get_model(name_or_path: str) -> ModelShape:
    """A catalog name, or a path to a transformers config.json of these families."""
    if name_or_path in MODELS:
        return MODELS[name_or_path]
    p = Path(name_or_path)
    if p.suffix == ".json" or p.exists():
        return load_config_json(p)
    raise UserError(f"unknown model {name_or_path!r}", f"use one of {', '.join(MODELS)} or a path to a config.json")


def load_config_json(path: str | Path) -> ModelShape:
    """Read a transformers `config.json` (DiffusionGemma, Gemma-4, Gemma-4 assistant) into a shape."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    cfg = read_json(p, "model config")
    if not isinstance(cfg, dict):
        raise UserError(f"model config {p} is not a JSON object", "pass a transformers config.json")
    model_type = cfg.get("model_type", "")
    tc = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    name = cfg.get("_name_or_path") or p.parent.name or p.stem
    if model_type.startswith("diffusion_gemma"):  # transformers' DiffusionGemmaConfig (and a text config of it)
        return _from_text_config(name, "diffusion_gemma", tc, canvas_length=int(cfg.get("canvas_length", 256)), source=str(p))
    if "assistant" in model_type:
        return _from_text_config(
            name, "gemma4_assistant", tc, has_kv_projections=False,
            backbone_hidden_size=int(cfg.get("backbone_hidden_size", 0)), source=str(p), final_logit_softcapping=None,
        )
    if "gemma" in model_type or "num_hidden_layers" in tc:
        return _from_text_config(name, "gemma4", tc, source=str(p))
    raise UserError(f"model config {p} has model_type {model_type!r}", "pass a DiffusionGemma or Gemma-4 config.json")


def shape_to_dict(shape: ModelShape) -> dict:
    d = dataclasses.asdict(shape)
    d.pop("text_config", None)
    d["layer_types"] = list(shape.layer_types)
    return d


def dumps_text_config(shape: ModelShape) -> str:
    return json.dumps(shape.text_config)
