"""An engine's host overhead per step, fitted from recorded vLLM engine steps (the step term of
costmodel/stepcost/host_overhead.py).

Host work per step = the step's wall time minus its model time. The recorder has both: the gap
between the step's stats reaching the front-end (`gap_ms`) and the engine's model time
(`elapsed_ms`, --enable-logging-iteration-details). Single gaps are not used (the front-end
receives the engine's steps in bursts when it is busy); sums over blocks of BLOCK_STEPS
consecutive busy steps are: block host ms = sum over its steps of the term's linear function of
the composition, so the coefficients are an OLS of block sums on block sums of the composition
columns, kept >= 0 by dropping a negative one's column and refitting (active set). A fit whose
overhead would be negative (model times above wall times) is refused. Every HOLDOUT_EVERY-th block
is left out and predicted: the held-out MAPE of the blocks' wall time (model time + host term) and
of their host time."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from costmodel.errors import UserError
from costmodel.modes import ServingMode
from costmodel.stepcost.host_overhead import COEFS

BLOCK_STEPS = 16
HOLDOUT_EVERY = 5
MIN_BLOCKS = 6
MIN_STEPS = MIN_BLOCKS * BLOCK_STEPS  # busy steps with model time a host term needs
TOKEN_COLS = ("prefill_tokens", "decode_tokens", "denoise_tokens", "commit_tokens", "verify_tokens")
REQ_COLS = ("prefill_reqs", "decode_reqs", "denoise_reqs", "commit_reqs", "verify_reqs")


@dataclass
class HostFit:
    """One mode's host-overhead term and how well it holds."""

    mode: str
    coef: dict[str, float]
    n_steps: int
    n_blocks: int
    wall_heldout_mape_pct: float  # held-out blocks' wall time (model time + host term)
    host_heldout_mape_pct: float  # held-out blocks' host time
    mean_host_ms: float  # recorded, per busy step
    async_scheduling: bool
    source: str

    def record(self) -> dict:
        """The profile engine section's entry (costmodel/stepcost/host_overhead.py)."""
        return {"coef": {k: float(v) for k, v in self.coef.items()}, "async_scheduling": self.async_scheduling, "source": self.source,
                "n_steps": self.n_steps, "wall_heldout_mape_pct": round(self.wall_heldout_mape_pct, 3),
                "host_heldout_mape_pct": round(self.host_heldout_mape_pct, 3)}

    def describe(self) -> str:
        terms = " + ".join(f"{v:.4g} {k.replace('ms_per_', 'ms/').replace('ms', 'ms', 1)}" for k, v in self.coef.items() if v)
        return (f"{self.mode}: host overhead per step = {terms or '0 ms'} (mean recorded {self.mean_host_ms:.3g} ms over {self.n_steps} busy "
                f"steps); held-out ({self.n_blocks // HOLDOUT_EVERY} of {self.n_blocks} blocks of {BLOCK_STEPS} steps): wall-time MAPE "
                f"{self.wall_heldout_mape_pct:.2f}%, host-time MAPE {self.host_heldout_mape_pct:.2f}%")


# ---- the steps' composition and host time ----------------------------------------------------
def composition_frame(df: pd.DataFrame, serving: ServingMode) -> pd.DataFrame:
    """Per recorded step, the composition columns the host term multiplies (COEFS order)."""
    canvases = sum(df[f"{c}_reqs"] for c in ("denoise", "commit")) if serving.decodes_canvases else 0.0
    drafts = df["drafts_proposed"] if serving.side_kinds else 0.0
    return pd.DataFrame({"ms": 1.0, "ms_per_request": sum(df[c] for c in REQ_COLS), "ms_per_token": sum(df[c] for c in TOKEN_COLS),
                         "ms_per_draft_token": drafts, "ms_per_canvas": canvases}, index=df.index).astype(float)


def busy_steps(df: pd.DataFrame) -> pd.DataFrame:
    """Steps that ran tokens while the engine had work before them (their gap is engine time), in order."""
    df = df.sort_values("step").reset_index(drop=True)
    tokens = sum(df[c] for c in TOKEN_COLS)
    busy_before = (df["running"] + df["waiting"]).shift(1).fillna(0) > 0
    gap = pd.to_numeric(df["gap_ms"], errors="coerce")
    return df[(tokens > 0) & busy_before & gap.notna()].reset_index(drop=True)


def blocks_of(n: int) -> np.ndarray:
    return np.arange(n) // BLOCK_STEPS


def nonneg_ols(X: np.ndarray, y: np.ndarray, cols: list[str]) -> dict[str, float]:
    """OLS with every coefficient >= 0: a negative one's column dropped, the rest refitted."""
    keep = list(range(X.shape[1]))
    while keep:
        beta, *_ = np.linalg.lstsq(X[:, keep], y, rcond=None)
        if (beta >= 0).all():
            out = dict.fromkeys(cols, 0.0)
            out.update({cols[j]: float(b) for j, b in zip(keep, beta)})
            return out
        keep.pop(int(np.argmin(beta)))
    return dict.fromkeys(cols, 0.0)


def mape(pred: np.ndarray, y: np.ndarray) -> float:
    ok = y > 0
    return float(np.mean(np.abs(pred[ok] - y[ok]) / y[ok]) * 100) if ok.any() else float("nan")


def fit_host(df: pd.DataFrame, mode: ServingMode, where: str, model_ms: np.ndarray | None = None, async_scheduling: bool = False,
             source: str = "") -> HostFit:
    """The host term of `mode` from busy recorded steps `df` (with model time `elapsed_ms`, or
    `model_ms` given: the profile's calibrated forward price of each step)."""
    el = pd.to_numeric(df["elapsed_ms"], errors="coerce").to_numpy(float) if model_ms is None else np.asarray(model_ms, float)
    ok = np.isfinite(el)
    df, el = df[ok].reset_index(drop=True), el[ok]
    gap = df["gap_ms"].to_numpy(float)
    blocks = blocks_of(len(df))
    nb = int(blocks.max()) + 1 if len(df) else 0
    if nb < MIN_BLOCKS:
        raise UserError(f"{where}: {len(df)} busy steps with model time are {nb} blocks of {BLOCK_STEPS}; the host overhead needs {MIN_BLOCKS}",
                        f"record at least {MIN_BLOCKS * BLOCK_STEPS} busy steps (with --enable-logging-iteration-details)")
    comp = composition_frame(df, mode)
    cols = [c for c in COEFS if c == "ms" or comp[c].std() > 0]
    Xb = comp[cols].groupby(blocks).sum().to_numpy()
    hb = pd.Series(gap - el).groupby(blocks).sum().to_numpy()
    wb = pd.Series(gap).groupby(blocks).sum().to_numpy()
    mean_host = float(hb.sum() / len(df))
    if mean_host < 0:
        raise UserError(f"{where}: the host overhead would be negative ({mean_host:.3g} ms per step: model time above the wall time)",
                        "check the run's model time (elapsed_ms) and the profile's GPU; a wall time below the priced forward "
                        "means the profile is slower than this engine")
    held = np.arange(nb) % HOLDOUT_EVERY == HOLDOUT_EVERY - 1
    coef_tr = nonneg_ols(Xb[~held], hb[~held], cols)
    pred_h = Xb[held] @ np.array([coef_tr[c] for c in cols])
    el_b = pd.Series(el).groupby(blocks).sum().to_numpy()
    coef = nonneg_ols(Xb, hb, cols)
    return HostFit(mode.name, {c: coef.get(c, 0.0) for c in COEFS}, len(df), nb, mape(el_b[held] + pred_h, wb[held]), mape(pred_h, hb[held]),
                   mean_host, async_scheduling, source)


