"""Pass cost models: statsmodels WLS of measured milliseconds on roofline features, one per pass kind.

Method (what `costmodel fit` prints and stores in each model's diagnostics):
- observations: one row per shape (seqs, tokens_per_seq, context_tokens) holding the MEDIAN time
  over its repeats (`repeats="median"`, default), or every repeat (`repeats="all"`);
- features: the pass's roofline terms on the profile's GPU/precision (`memory_ms`, `compute_ms`,
  `roofline_ms`, `kv_ms`) plus optional shape terms (`seqs`, `context_ktokens`) and an intercept (`const`,
  per-pass overhead: kernel launches, host work);
- weights 1/ms^2, so the fit minimises squared RELATIVE error (times span ~1 to ~1000 ms);
- feature set: the first of `CANDIDATE_SETS` (preference order: with an intercept, fewest
  coefficients first) whose shape-grouped k-fold MAPE is within max(0.25 points, 10 %) of the best
  set's, among the sets that are
  (a) physical: roofline and shape slopes >= 0 (each adds time; a negative one would make
      projections unphysical), except `kv_ms` (the KV-cache share of `memory_ms`), which may lower
      the KV bytes' price down to zero, for engines whose attention streams the cache more
      efficiently than their MoE kernels stream weights; the intercept may be negative (time
      growing faster than the roofline terms across the shapes, e.g. per-expert kernel costs);
  (b) identified: the intercept and correction terms each >= 2 standard errors from zero;
  `FALLBACK_SETS` (a multiple of the roofline) when no candidate qualifies, or when the shapes span
  less than NARROW_SPAN in roofline time (one batch size, nearby contexts: an overhead and a
  roofline multiple cannot be told apart there, and the multiple extrapolates with the shape);
- held-out check: whole shapes left out of the fit (default: the largest batch; see `HeldoutSpec`),
  the chosen feature set refitted on the rest, MAPE on the left-out shapes;
- predictions are max(roofline_ms, linear), as `Profile.pass_ms` computes them, in every metric.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import statsmodels.api as sm

from costmodel.errors import UserError
from costmodel.schemas.profile import FitDiagnostics, PassCostModel, Provenance, features
from costmodel.roofline import Roofline, Segment

SHAPE_COLS = ("seqs", "tokens_per_seq", "context_tokens")
FEATURE_COLS = ("const", "roofline_ms", "memory_ms", "compute_ms", "kv_ms", "seqs_f", "tokens_f", "context_ktokens")
# Feature sets tried, in order of preference: with an intercept (`const`: the fixed per-pass
# overhead of kernel launches and host work) first, fewest coefficients first; then the same shapes
# without one, for data that do not identify an intercept. `roofline_ms` beside `compute_ms` (and
# `memory_ms`) is the partial-overlap model a*mem + b*comp + g*max(mem, comp). `FALLBACK_SETS` only
# when no candidate qualifies.
CANDIDATE_SETS: tuple[tuple[str, ...], ...] = (
    ("const",),  # overhead-bound: the time does not follow the shape (small eager passes)
    ("const", "roofline_ms"),
    ("const", "memory_ms", "compute_ms"),
    ("const", "compute_ms", "roofline_ms"),
    ("const", "memory_ms", "compute_ms", "roofline_ms"),
    ("const", "memory_ms", "compute_ms", "kv_ms"),
    ("const", "memory_ms", "compute_ms", "seqs"),
    ("const", "memory_ms", "compute_ms", "context_ktokens"),
    ("const", "memory_ms", "compute_ms", "roofline_ms", "kv_ms"),
    ("const", "memory_ms", "compute_ms", "kv_ms", "seqs"),
    ("const", "memory_ms", "compute_ms", "seqs", "context_ktokens"),
    ("roofline_ms",),
    ("memory_ms", "compute_ms"),
    ("compute_ms", "roofline_ms"),
    ("memory_ms", "compute_ms", "roofline_ms"),
    ("memory_ms", "compute_ms", "kv_ms"),
)
FALLBACK_SETS: tuple[tuple[str, ...], ...] = (("roofline_ms",),)
CV_FOLDS = 5
NARROW_SPAN = 1.5  # roofline max/min below which the shapes identify only a multiple of the roofline
MIN_T = 2.0  # |estimate / standard error| an intercept or correction term needs (see `identified`)
CORRECTION_TERMS = ("const", "kv_ms", "seqs", "tokens", "context_ktokens")
SELECT_TOL_POINTS = 0.25
SELECT_TOL_REL = 0.10
HELDOUT_TARGET_PCT = 5.0
HELDOUT_CHOICES = ("auto", "largest-batch", "largest-prompt", "largest-context", "each-shape", "none")


def shape_of(segments) -> dict[str, float]:
    """The keys `PassCostModel.support` records, for `PassCostModel.extrapolated(shape)`:
    seqs, tokens_per_seq, context_tokens (largest per sequence) and tokens (query tokens in the pass)."""
    segs = (segments,) if isinstance(segments, Segment) else tuple(segments)
    return {
        "seqs": float(sum(s.seqs for s in segs)),
        "tokens_per_seq": float(max(s.tokens for s in segs)),
        "context_tokens": float(max(s.context for s in segs)),
        "tokens": float(sum(s.seqs * s.tokens for s in segs)),
    }


def add_features(df: pd.DataFrame, roof: Roofline, kind: str) -> pd.DataFrame:
    """Roofline feature columns for every row of one pass kind (computed once per shape)."""
    cache: dict[tuple, dict] = {}
    rows = []
    for s, t, c in zip(df.seqs, df.tokens_per_seq, df.context_tokens):
        key = (int(s), int(t), int(c))
        if key not in cache:
            seg = (Segment(kind, *key).validate(),)
            f = features(roof.pass_cost(seg), seg)
            cache[key] = {"const": 1.0, "roofline_ms": f["roofline_ms"], "memory_ms": f["memory_ms"], "compute_ms": f["compute_ms"],
                          "kv_ms": f["kv_ms"], "seqs_f": f["seqs"], "tokens_f": f["tokens"], "context_ktokens": f["context_ktokens"]}
        rows.append(cache[key])
    out = df.reset_index(drop=True).copy()
    return pd.concat([out, pd.DataFrame(rows, columns=list(FEATURE_COLS))], axis=1)


def _cols(feats: tuple[str, ...]) -> list[str]:
    return [{"seqs": "seqs_f", "tokens": "tokens_f"}.get(f, f) for f in feats]


def aggregate(df: pd.DataFrame, repeats: str) -> pd.DataFrame:
    """Median ms per shape (`median`) or every repeat (`all`); adds `shape_id` and `n_repeats`."""
    df = df.copy()
    df["shape_id"] = df.groupby(list(SHAPE_COLS), sort=True).ngroup()
    if repeats == "all":
        df["n_repeats"] = df.groupby("shape_id")["ms"].transform("size")
        return df.reset_index(drop=True)
    if repeats != "median":
        raise UserError(f"--repeats {repeats!r} is unknown", "use median or all")
    g = df.groupby(["shape_id", *SHAPE_COLS], sort=True)
    out = g["ms"].agg(["median", "size"]).reset_index().rename(columns={"median": "ms", "size": "n_repeats"})
    return out


def _fit(df: pd.DataFrame, feats: tuple[str, ...]):
    X = pd.DataFrame(df[_cols(feats)].to_numpy(float), columns=list(feats))
    y = pd.Series(df["ms"].to_numpy(float), name="ms")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small-sample notes (e.g. the normality test below 8 observations)
        return sm.WLS(y, X, weights=1.0 / y.to_numpy() ** 2).fit()


def _predict(df: pd.DataFrame, feats: tuple[str, ...], coef: np.ndarray) -> np.ndarray:
    linear = df[_cols(feats)].to_numpy(float) @ np.asarray(coef, float)
    return np.maximum(df["roofline_ms"].to_numpy(float), linear)


def _coef_table(res) -> str:
    """statsmodels' coefficient table (estimates, standard errors, t, p, 95% interval)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the summary's normality test warns below 8 observations
        try:
            return res.summary().tables[1].as_text()
        except ValueError:  # a single observation: no residual statistics
            return "  ".join(f"{k} {v:.6g}" for k, v in res.params.items()) + f" (n={int(res.nobs)}: no standard errors)"


def mape_pct(y, pred) -> float:
    y, pred = np.asarray(y, float), np.asarray(pred, float)
    return float(100.0 * np.mean(np.abs(pred - y) / y))


def _estimable(df: pd.DataFrame, feats: tuple[str, ...]) -> bool:
    """Enough shapes and linearly independent, non-zero columns for this feature set."""
    n_shapes = df["shape_id"].nunique()
    if n_shapes < (len(feats) + 1 if len(feats) > 1 else 1):  # a single ratio is identified by one shape
        return False
    X = df[_cols(feats)].drop_duplicates().to_numpy(float)
    for f, col in zip(feats, X.T):
        if f != "const" and np.abs(col).max() == 0:
            return False
    scale = np.abs(X).max(axis=0)
    scale[scale == 0] = 1.0
    return np.linalg.matrix_rank(X / scale, tol=1e-8) == len(feats)


def physical(coef: dict[str, float]) -> bool:
    """Every roofline and shape term adds time: slopes >= 0, except `kv_ms`, an adjustment of the
    KV-cache bytes' price relative to `memory_ms`, which may be negative down to free KV bytes
    (memory_ms + kv_ms >= 0). The intercept may have either sign."""
    for f, c in coef.items():
        if f == "kv_ms":
            if c + coef.get("memory_ms", 0.0) < 0:
                return False
        elif f != "const" and c < 0:
            return False
    return True


def identified(res) -> bool:
    """The intercept and the correction terms (kv_ms, seqs, tokens, context_ktokens) each at least
    MIN_T standard errors from zero (no residual degrees of freedom: nothing to test). A term the
    data cannot pin down - e.g. an intercept beside a memory term that barely varies across the
    shapes - fits noise that a projection to another GPU would amplify. The roofline terms
    themselves (memory_ms, compute_ms, roofline_ms) need only be >= 0: a physically present but
    small term (compute in a decode step) is kept even when the shapes barely resolve it."""
    if res.df_resid <= 0:
        return True
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (np.abs(res.params) / res.bse).fillna(np.inf)
    return all(t[f] >= MIN_T for f in res.params.index if f in CORRECTION_TERMS)


def _folds(shape_ids: np.ndarray, k: int, seed: int) -> list[np.ndarray]:
    uniq = np.unique(shape_ids)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(uniq)
    return [perm[i::k] for i in range(k)]


def kfold_mape(df: pd.DataFrame, feats: tuple[str, ...], seed: int = 0, k: int = CV_FOLDS) -> float | None:
    """Shape-grouped k-fold MAPE (%), None when too few shapes for every fold to be fitted."""
    n_shapes = df["shape_id"].nunique()
    k = min(k, n_shapes)
    if k < 3:
        return None
    errs = []
    for test_ids in _folds(df["shape_id"].to_numpy(), k, seed):
        test = df["shape_id"].isin(test_ids)
        train = df[~test]
        if train["shape_id"].nunique() < len(feats) + 1 or not _estimable(train, feats):
            return None
        res = _fit(train, feats)
        pred = _predict(df[test], feats, res.params)
        errs.extend(np.abs(pred - df.loc[test, "ms"].to_numpy()) / df.loc[test, "ms"].to_numpy())
    return float(100.0 * np.mean(errs))


@dataclass
class HeldoutSpec:
    """Which shapes the held-out check leaves out of the fit.

    auto: the largest batch if there are >= 2 batch sizes, else the largest prompt (tokens per
    sequence), else the largest context; largest-batch / largest-prompt / largest-context: that one;
    each-shape: leave each shape out in turn (mean over shapes); FIELD=VALUE[,FIELD=VALUE]: the shapes
    matching (fields seqs, tokens_per_seq, context_tokens); none: no held-out check."""

    how: str
    match: dict[str, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> "HeldoutSpec":
        text = (text or "auto").strip()
        if text in HELDOUT_CHOICES:
            return cls(text)
        match = {}
        for part in text.split(","):
            if "=" not in part:
                raise UserError(f"--heldout {text!r} is not understood",
                                f"use one of {', '.join(HELDOUT_CHOICES)} or FIELD=VALUE with FIELD in {', '.join(SHAPE_COLS)}")
            k, v = (x.strip() for x in part.split("=", 1))
            if k not in SHAPE_COLS:
                raise UserError(f"--heldout field {k!r} is unknown", f"use {', '.join(SHAPE_COLS)}")
            try:
                match[k] = int(v)
            except ValueError:
                raise UserError(f"--heldout {part!r}: {v!r} is not an integer", "e.g. --heldout seqs=64") from None
        return cls("match", match)

    def split(self, df: pd.DataFrame) -> tuple[pd.Series, str] | None:
        """(mask of left-out rows, description) or None when this spec leaves nothing out here."""
        if self.how == "match":
            mask = pd.Series(True, index=df.index)
            for k, v in self.match.items():
                mask &= df[k] == v
            desc = ",".join(f"{k}={v}" for k, v in self.match.items())
            return (mask, desc) if mask.any() and not mask.all() else None
        order = {"auto": ("seqs", "tokens_per_seq", "context_tokens"), "largest-batch": ("seqs",),
                 "largest-prompt": ("tokens_per_seq",), "largest-context": ("context_tokens",)}[self.how]
        for col in order:
            if df[col].nunique() >= 2:
                top = df[col].max()
                return df[col] == top, f"{col}={int(top)}"
        return None


def heldout_mape(df: pd.DataFrame, feats: tuple[str, ...], spec: HeldoutSpec) -> tuple[float | None, str]:
    """MAPE (%) on shapes left out of the fit, with a description of what was left out (or why not)."""
    if spec.how == "none":
        return None, "not run (--heldout none)"
    if spec.how == "each-shape":
        errs = []
        for sid in df["shape_id"].unique():
            test = df["shape_id"] == sid
            train = df[~test]
            if not _estimable(train, feats):
                return None, "too few shapes to leave each one out"
            pred = _predict(df[test], feats, _fit(train, feats).params)
            errs.extend(np.abs(pred - df.loc[test, "ms"].to_numpy()) / df.loc[test, "ms"].to_numpy())
        return float(100.0 * np.mean(errs)), f"each of {df['shape_id'].nunique()} shapes left out in turn"
    split = spec.split(df)
    if split is None:
        return None, "no shapes to leave out (a single value of the held-out field)"
    mask, desc = split
    train = df[~mask]
    if not _estimable(train, feats):
        return None, f"{desc}: too few shapes left to fit {len(feats)} coefficients"
    pred = _predict(df[mask], feats, _fit(train, feats).params)
    return mape_pct(df.loc[mask, "ms"], pred), f"{desc} left out ({int(df.loc[mask, 'shape_id'].nunique())} shapes)"


@dataclass
class PassFit:
    """One pass kind's fit: the stored model plus what `costmodel fit` prints."""

    model: PassCostModel
    n_rows: int  # timed passes used (after warm-up and bad rows were dropped)
    n_shapes: int
    features: tuple[str, ...]
    heldout_desc: str
    candidates: dict[str, float | None]  # feature set -> k-fold MAPE (None: not estimable / negative term)


def support_of(df: pd.DataFrame) -> dict[str, list[float]]:
    tokens = df["seqs"] * df["tokens_per_seq"]
    return {
        "seqs": [float(df["seqs"].min()), float(df["seqs"].max())],
        "tokens_per_seq": [float(df["tokens_per_seq"].min()), float(df["tokens_per_seq"].max())],
        "context_tokens": [float(df["context_tokens"].min()), float(df["context_tokens"].max())],
        "tokens": [float(tokens.min()), float(tokens.max())],
    }


@dataclass
class FeatureChoice:
    """The feature set a pass kind is fitted on, and every set tried (name -> k-fold MAPE, None: not estimable)."""

    features: tuple[str, ...]
    cv_mape: float | None
    candidates: dict[str, float | None]
    narrow: bool  # the shapes span < NARROW_SPAN x in roofline time: only a roofline multiple is fitted


def _eligible_sets(obs: pd.DataFrame, sets, seed: int, candidates: dict[str, float | None]) -> list[tuple[tuple[str, ...], float | None]]:
    """The feature sets that fit physically and identifiably, with their k-fold MAPE (recorded in `candidates`)."""
    ok = []
    for feats in sets:
        name = " + ".join(feats)
        candidates[name] = None
        if not _estimable(obs, feats):
            continue
        res = _fit(obs, feats)
        params = res.params
        if not np.all(np.isfinite(params)) or not physical(dict(params)) or not identified(res):
            continue
        candidates[name] = kfold_mape(obs, feats, seed)
        ok.append((feats, candidates[name]))
    return ok


def choose_features(obs: pd.DataFrame, kind: str, seed: int) -> FeatureChoice:
    """The simplest eligible feature set within the selection tolerance of the best k-fold MAPE."""
    candidates: dict[str, float | None] = {}
    narrow = obs["roofline_ms"].max() < NARROW_SPAN * obs["roofline_ms"].min()
    # shapes spanning a narrow range of roofline time (one batch size, nearby contexts) cannot tell an
    # overhead from a roofline multiple; the multiple extrapolates with the shape, so only it is fitted
    if narrow:
        eligible = _eligible_sets(obs, FALLBACK_SETS, seed, candidates)
    else:
        eligible = _eligible_sets(obs, CANDIDATE_SETS, seed, candidates) or _eligible_sets(obs, FALLBACK_SETS, seed, candidates)
    if not eligible:
        if not _estimable(obs, ("roofline_ms",)):
            raise UserError(f"{kind}: the timed passes have no usable roofline feature", "check the runs' pass shapes")
        eligible = [(("roofline_ms",), None)]
    with_cv = [(f, cv) for f, cv in eligible if cv is not None]
    if with_cv:
        best = min(cv for _, cv in with_cv)
        tol = max(SELECT_TOL_POINTS, SELECT_TOL_REL * best)
        chosen, cv_mape = next((f, cv) for f, cv in with_cv if cv <= best + tol)
    else:
        chosen, cv_mape = eligible[0]  # too few shapes for k-fold: the simplest set that qualifies
    return FeatureChoice(chosen, cv_mape, candidates, narrow)


def _fit_summary(res, obs: pd.DataFrame, choice: FeatureChoice, time_column: str, repeats: str, ho_desc: str) -> str:
    """The statsmodels summary `costmodel fit --show-summaries` prints for one pass kind."""
    tried = "; ".join(f"{k}: {'-' if v is None else f'{v:.2f}%'}" for k, v in choice.candidates.items())
    return (
        f"statsmodels WLS of {time_column} on {' + '.join(choice.features)}, weights 1/ms^2 (relative error); "
        f"{len(obs)} observations ({'median per shape' if repeats == 'median' else 'every repeat'}) over {int(obs['shape_id'].nunique())} shapes\n"
        f"{_coef_table(res)}\n"
        f"k-fold MAPE per feature set ('-': too few shapes or a negative slope): {tried}\n"
        f"held-out: {ho_desc}"
        + (f"\nthe shapes span < {NARROW_SPAN:g}x in roofline time: only a multiple of the roofline is identified" if choice.narrow else "")
    )


def fit_pass_kind(rows: pd.DataFrame, kind: str, roof: Roofline, provenance: Provenance, *, repeats: str = "median",
                  heldout: HeldoutSpec | None = None, seed: int = 0, time_column: str = "gpu_ms") -> PassFit:
    """Fit one pass kind. `rows`: pass_kind == kind, columns seqs, tokens_per_seq, context_tokens, ms."""
    heldout = heldout or HeldoutSpec("auto")
    if rows.empty:
        raise UserError(f"no timed {kind} passes to fit", "add runs that time this pass kind")
    obs = add_features(aggregate(rows[[*SHAPE_COLS, "ms"]], repeats), roof, kind)
    n_shapes = int(obs["shape_id"].nunique())
    choice = choose_features(obs, kind, seed)
    chosen = choice.features
    res = _fit(obs, chosen)
    coef = {f: float(c) for f, c in zip(chosen, res.params)}
    pred = _predict(obs, chosen, res.params)
    y = obs["ms"].to_numpy(float)
    sst = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - pred) ** 2)) / sst if len(y) > 1 and sst > 0 else None
    ho, ho_desc = heldout_mape(obs, chosen, heldout)
    model = PassCostModel(
        kind=kind,
        coef=coef,
        support=support_of(obs),
        diagnostics=FitDiagnostics(n_obs=int(len(obs)), r2=r2, mape_pct=mape_pct(y, pred), cv_mape_pct=choice.cv_mape,
                                   heldout_mape_pct=ho, summary=_fit_summary(res, obs, choice, time_column, repeats, ho_desc)),
        provenance=provenance,
        median_x_roofline=float(np.median(y / obs["roofline_ms"].to_numpy(float))),
    )
    return PassFit(model=model, n_rows=int(len(rows)), n_shapes=n_shapes, features=chosen, heldout_desc=ho_desc, candidates=choice.candidates)


def grid_median_x_roofline(pm: PassCostModel, roof: Roofline) -> float | None:
    """Median of predicted / roofline time over a grid spanning the model's support (projections
    keep no observations, so this stands in for the fit's median)."""
    sup = pm.support
    if not all(k in sup for k in SHAPE_COLS):
        return None

    def span(lo, hi, geometric):
        lo, hi = int(lo), int(hi)
        if lo == hi:
            return [lo]
        if geometric and lo >= 1:
            return sorted({int(round(x)) for x in np.geomspace(lo, hi, 5)})
        return sorted({int(round(x)) for x in np.linspace(lo, hi, 3)})

    ratios = []
    for s in span(*sup["seqs"], True):
        for t in span(*sup["tokens_per_seq"], True):
            for c in span(*sup["context_tokens"], False):
                seg = (Segment(pm.kind, max(s, 1), max(t, 1), max(c, 0)),)
                r = roof.pass_cost(seg)
                f = features(r, seg)
                ratios.append(max(r.roofline_ms, pm.linear_ms(f)) / r.roofline_ms)
    return float(np.median(ratios)) if ratios and all(math.isfinite(x) for x in ratios) else None
