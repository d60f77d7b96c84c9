"""Records every artefact schema and every mode's profile part share: where a number came from
(`Provenance`) and a discrete distribution (`Distribution`). Below costmodel/modes, so a mode's
own profile part (costmodel/modes/<mode>.py) is made of them without importing the profile."""

from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass


from costmodel.errors import UserError

if TYPE_CHECKING:  # annotations; the functions that compute import numpy (a CLI's --help does not load it)
    import numpy as np

PROVENANCE_KINDS = ("measured", "projected", "published", "roofline", "endpoint")


@dataclass
class Provenance:
    kind: str  # one of PROVENANCE_KINDS
    source: str  # run ids, "projected from <profile id>", a citation, or "roofline / efficiency 0.5"
    hardware: str | None = None
    date: str | None = None
    notes: str = ""

    def validate(self, where: str) -> None:
        if self.kind not in PROVENANCE_KINDS:
            raise UserError(f"{where}: provenance kind {self.kind!r} is unknown", f"use one of {', '.join(PROVENANCE_KINDS)}")


@dataclass
class Distribution:
    """A discrete distribution: values with probabilities (empirical, or a discretised prior)."""

    values: list[float]
    probs: list[float]

    def validate(self, where: str) -> None:
        if not self.values or len(self.values) != len(self.probs):
            raise UserError(f"{where}: distribution needs equal, non-empty values and probs", "regenerate the profile")
        if any(p < 0 for p in self.probs) or not math.isclose(sum(self.probs), 1.0, rel_tol=1e-6, abs_tol=1e-6):
            raise UserError(f"{where}: distribution probs must be >= 0 and sum to 1", "regenerate the profile")

    @property
    def mean(self) -> float:
        import numpy as np
        return float(np.dot(self.values, self.probs))

    def quantile(self, q: float) -> float:
        import numpy as np
        order = np.argsort(self.values)
        cdf = np.cumsum(np.asarray(self.probs)[order])
        return float(np.asarray(self.values)[order][min(np.searchsorted(cdf, q - 1e-12), len(cdf) - 1)])

    def sample(self, rng: np.random.Generator, n: int | None = None):
        import numpy as np
        return rng.choice(np.asarray(self.values), size=n, p=np.asarray(self.probs))

    @classmethod
    def constant(cls, v: float) -> "Distribution":
        return cls([float(v)], [1.0])

    @classmethod
    def from_samples(cls, xs) -> "Distribution":
        import numpy as np
        vals, counts = np.unique(np.asarray(xs, dtype=float), return_counts=True)
        return cls(vals.tolist(), (counts / counts.sum()).tolist())
