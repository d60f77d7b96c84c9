"""Request classes: which pool of a mixed fleet takes a request (routing by class). A pool may
name the requests it takes by prompt and output length and by regime; each request goes to the
first pool (in the fleet's order) whose class admits it, a pool with no class taking any. E.g.
short interactive requests on DiffusionGemma H100s, long ones on MTP RTX 5090s:

    [PoolSpec("short", h100, "diffusion", takes=RequestClass(max_output_tokens=512)), PoolSpec("long", rtx5090, "mtp")]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.errors import UserError


@dataclass(frozen=True)
class RequestClass:
    max_prompt_tokens: int | None = None
    max_output_tokens: int | None = None
    regimes: tuple = ()  # () : any

    def admits(self, prompt: np.ndarray, output: np.ndarray, regime: np.ndarray) -> np.ndarray:
        ok = np.ones(len(prompt), bool)
        if self.max_prompt_tokens is not None:
            ok &= prompt <= self.max_prompt_tokens
        if self.max_output_tokens is not None:
            ok &= output <= self.max_output_tokens
        if self.regimes:
            ok &= np.isin(regime, list(self.regimes))
        return ok

    @property
    def text(self) -> str:
        parts = [f"prompt <= {self.max_prompt_tokens}" if self.max_prompt_tokens is not None else "",
                 f"output <= {self.max_output_tokens}" if self.max_output_tokens is not None else "",
                 f"regime in {'/'.join(self.regimes)}" if self.regimes else ""]
        return ", ".join(p for p in parts if p) or "any"


def assign(classes: list, reqs) -> np.ndarray:
    """The pool index of every request (first admitting pool; None class admits all)."""
    n = len(reqs)
    out = np.full(n, -1, np.int64)
    regime = np.asarray(reqs.regimes, dtype=object)[reqs.regime_idx] if n else np.array([], object)
    for k, c in enumerate(classes):
        free = out < 0
        ok = np.ones(n, bool) if c is None else c.admits(reqs.prompt_tokens, reqs.output_tokens, regime)
        out[free & ok] = k
    if (out < 0).any():
        i = int(np.argmax(out < 0))
        raise UserError(f"request {i} (prompt {reqs.prompt_tokens[i]}, output {reqs.output_tokens[i]} tokens) fits no pool's class",
                        "give the last pool no class, so it takes the rest")
    return out
