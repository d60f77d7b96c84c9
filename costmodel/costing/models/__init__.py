"""The registry of pricing models (`--pricing NAME`). Adding one is a module subclassing
`PricingModel` (models/base.py) and one `register(...)` line below; tests/test_pricing_models.py
shows a model added from a test."""

from __future__ import annotations

from costmodel.errors import UserError
from costmodel.costing.models.base import PricingModel, Rate, Terms
from costmodel.costing.models.on_demand import OnDemand
from costmodel.costing.models.onprem import OnPrem
from costmodel.costing.models.reserved import Reserved
from costmodel.costing.models.spot import Spot

_REGISTRY: dict[str, PricingModel] = {}
DEFAULT_MODEL = "on-demand"


def register(model: PricingModel) -> PricingModel:
    _REGISTRY[model.name] = model
    return model


def get_model(name: str) -> PricingModel:
    if name not in _REGISTRY:
        raise UserError(f"--pricing {name!r} is not a pricing model", f"use one of {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def model_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


register(OnDemand())
register(Reserved(1))
register(Reserved(3))
register(Spot())
register(OnPrem())

__all__ = ["DEFAULT_MODEL", "PricingModel", "Rate", "Terms", "get_model", "model_names", "register"]
