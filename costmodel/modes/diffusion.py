"""Block diffusion (DiffusionGemma-26B-A4B), vLLM's DiffusionGemma data path: after its prefill, a
request denoises its canvas for k steps (one denoise forward of 256 query tokens per engine step),
then the next engine step is its commit pass (encoder_commit, 256 tokens, writes the canvas's KV)
whose end emits the canvas's tokens (256, the last canvas the remainder): k+1 engine steps per
canvas, the last one included. Its first output is the end of the first commit. Requests are not
synchronised: one engine step mixes prefill chunks, denoising canvases and commits in one forward.

Draws: `k` (denoising steps) for every canvas. A canvas holding x content tokens takes the
steps_per_canvas quantile at x's quantile under the regime's per-canvas content distribution (a
randomised probability-integral transform: u = F(x-) + v * P(x), v uniform). So a longer canvas
takes more steps (the commit-order study: accept-calls "track content length"), and when lengths
follow the regime's content_length, k's marginal is exactly steps_per_canvas."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from costmodel.errors import UserError
from costmodel.modes.base import ModeDraws, ProfilePart, ServingMode
from costmodel.records import Distribution, Provenance
from costmodel.roofline import Segment
from costmodel.seeding import rng_for

if TYPE_CHECKING:  # annotations; each function that computes imports numpy (naming the modes does not load it)
    import numpy as np

STREAM_CANVAS_STEPS = 11
CANVAS_DEFAULT = 256  # tokens per canvas of a model whose shape names none


@dataclass
class CommitStats:
    """How a regime's canvases converge: what the simulator draws per block."""

    regime: str
    steps_per_canvas: Distribution  # accept-calls (denoising steps) per canvas, k_b
    tokens_per_call: float  # content tokens committed per accept-call
    content_length: Distribution  # content tokens per generation (EOS/pad excluded)
    renoise_per_generation: float
    commit_entropy_nats: float | None
    provenance: Provenance
    description: str = ""


class CommitStatsPart(ProfilePart):
    """The profile's `commit_stats`: regime -> CommitStats."""

    key = "commit_stats"
    label = "commit"
    title = "commit statistics"
    fix = "include commit statistics per regime: the published prior or a measured run"
    defines_regimes = True  # every mode's output lengths per regime are the regimes' content lengths

    def empty(self) -> dict:
        return {}

    def load(self, value) -> dict[str, CommitStats]:
        return {r: CommitStats(
            regime=c["regime"],
            steps_per_canvas=Distribution(**c["steps_per_canvas"]),
            tokens_per_call=float(c["tokens_per_call"]),
            content_length=Distribution(**c["content_length"]),
            renoise_per_generation=float(c["renoise_per_generation"]),
            commit_entropy_nats=c.get("commit_entropy_nats"),
            provenance=Provenance(**c["provenance"]),
            description=c.get("description", ""),
        ) for r, c in (value or {}).items()}

    def validate(self, value: dict[str, CommitStats], where: str) -> None:
        for r, c in value.items():
            c.steps_per_canvas.validate(f"{where}: commit_stats.{r}.steps_per_canvas")
            c.content_length.validate(f"{where}: commit_stats.{r}.content_length")
            if min(c.steps_per_canvas.values) < 1:
                raise UserError(f"{where}: commit_stats.{r} has fewer than 1 step per canvas", "regenerate the profile")
            c.provenance.validate(f"{where}: commit_stats.{r}")

    def provenance_kinds(self, value: dict[str, CommitStats]) -> list[str]:
        return sorted({c.provenance.kind for c in value.values()})

    def provenance_record(self, value: dict[str, CommitStats]) -> dict:
        return {r: {**asdict(c.provenance), "tokens_per_call": c.tokens_per_call, "description": c.description} for r, c in value.items()}

    def provenance_items(self, record: dict) -> list[tuple[str, str]]:
        return [(d["kind"], f"commit statistics {r}") for r, d in record.items()]

    def what_ifs(self) -> dict:
        """Steps per canvas and output (content) length per regime, each value x f (at least 1)."""
        return {"steps per canvas": _scaled("steps_per_canvas"), "output length": _scaled("content_length")}


def _scaled(field: str):
    def scale(value, f: float) -> None:
        for cs in (value or {}).values():
            cs[field]["values"] = [max(1.0, round(v * f)) for v in cs[field]["values"]]
    return scale


COMMIT_STATS = CommitStatsPart()


def canvas_length(profile) -> int:
    """The canvas the engine serves: the profile's engine section (the engine's own setting; the
    simulator's view of a profile under other settings, simulate/engine.py engine_profile), else
    the model's (vLLM's default)."""
    profile.mode(DiffusionMode.name)
    c = profile.engine.get("canvas_length") if isinstance(profile.engine, dict) else None
    return int(c) if isinstance(c, int) and not isinstance(c, bool) and c >= 1 else int(profile.resolved().models["diffusion"].canvas_length or 256)


def canvas_content_distribution(content_length, C: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-canvas content (values, probs) implied by per-generation content lengths: a generation of
    L tokens fills L // C canvases and leaves L % C in its last."""
    import numpy as np
    acc: dict[int, float] = {}
    for L, p in zip(content_length.values, content_length.probs):
        L = int(round(L))
        full, rem = divmod(max(L, 1), C)
        if full:
            acc[C] = acc.get(C, 0.0) + p * full
        if rem:
            acc[rem] = acc.get(rem, 0.0) + p
    vals = np.array(sorted(acc), dtype=np.int64)
    probs = np.array([acc[v] for v in vals], float)
    return vals, probs / probs.sum()


_CANVAS_CDF: dict = {}  # (id of a content-length distribution, canvas) -> (it, values, probs, CDF): a plan draws thousands of runs from one


def _canvas_cdf(content_length, C: int) -> tuple:
    """canvas_content_distribution and its CDF, computed once per distribution object and canvas."""
    import numpy as np
    hit = _CANVAS_CDF.get((id(content_length), C))
    if hit is None or hit[0] is not content_length:
        if len(_CANVAS_CDF) >= 256:
            _CANVAS_CDF.clear()
        vals, probs = canvas_content_distribution(content_length, C)
        hit = _CANVAS_CDF[(id(content_length), C)] = (content_length, vals, probs, np.cumsum(probs))
    return hit[1:]


def _coupled_steps(cs, C: int, content: np.ndarray, v: np.ndarray) -> np.ndarray:
    import numpy as np
    cvals, cprobs, ccdf = _canvas_cdf(cs.content_length, C)
    below = np.searchsorted(cvals, content, side="left")  # values < x
    f_minus = np.where(below > 0, ccdf[np.maximum(below - 1, 0)], 0.0)
    at = (below < len(cvals)) & (cvals[np.minimum(below, len(cvals) - 1)] == content)
    p_x = np.where(at, cprobs[np.minimum(below, len(cvals) - 1)], 0.0)
    u = np.clip(f_minus + v * p_x, 0.0, 1.0)
    svals = np.asarray(cs.steps_per_canvas.values, float)
    order = np.argsort(svals)
    scdf = np.cumsum(np.asarray(cs.steps_per_canvas.probs, float)[order])
    scdf[-1] = 1.0
    idx = np.minimum(np.searchsorted(scdf, u, side="left"), len(scdf) - 1)
    return np.maximum(1, np.rint(svals[order][idx])).astype(np.int64)


def replayed_steps(recorded, blocks: np.ndarray) -> list[int]:
    """Denoising steps of every canvas from an engine's record (one list per request); a request
    recorded with fewer canvases than its output needs (cut off) repeats its last count."""
    if len(recorded) != len(blocks):
        raise UserError(f"recorded steps per canvas cover {len(recorded)} requests, the run has {len(blocks)}", "replay the requests the record belongs to")
    ks: list[int] = []
    for steps, b in zip(recorded, blocks.tolist()):
        steps = [max(1, int(x)) for x in steps][:b] or [1]
        ks.extend(steps + [steps[-1]] * (b - len(steps)))
    return ks


class DiffusionDraws(ModeDraws):
    """k for every canvas of every request: `k[kofs[rid] + b]` for canvas b of request rid;
    `blocks_list[rid]` canvases drawn (output // canvas, or the engine's own count when replayed: a
    request served partly in partial canvases runs more; simulate/engines/diffusion.py)."""

    def __init__(self, profile, reqs, seed: int):
        import numpy as np
        self.canvas = C = canvas_length(profile)
        out = reqs.output_tokens
        blocks = np.maximum(1, -(-out // C))
        # KV a request holds at its end: prompt + every committed canvas
        super().__init__(group_tokens=(C, C), kv_need_tokens=reqs.prompt_tokens + C * blocks, blocks=blocks, price_key=(C,))
        ofs = np.zeros(len(out) + 1, dtype=np.int64)
        np.cumsum(blocks, out=ofs[1:])
        total = int(ofs[-1])
        # content of each canvas: C for full canvases, the remainder for the last
        b_idx = np.arange(total) - np.repeat(ofs[:-1], blocks)
        last = b_idx == np.repeat(blocks - 1, blocks)
        content = np.where(last, np.repeat(out - C * (blocks - 1), blocks), C)
        recorded = (getattr(reqs, "recorded", None) or {}).get("steps_per_canvas")
        if recorded is not None:  # an engine's own steps per canvas, replayed (simulate/validate/vllm)
            # every canvas the engine ran: more than output // canvas where some were partial (cut to the budget left)
            drawn = np.maximum(blocks, [len(x) for x in recorded]) if len(recorded) == len(blocks) else blocks
            self.k = replayed_steps(recorded, drawn)
            kofs = np.zeros(len(out) + 1, dtype=np.int64)
            np.cumsum(drawn, out=kofs[1:])
            self.kofs = kofs[:-1].tolist()
            self.blocks_list = drawn.tolist()
            return
        regime = np.repeat(reqs.regime_idx, blocks)
        v = rng_for(seed, STREAM_CANVAS_STEPS).random(total)
        ks = np.empty(total, dtype=np.int64)
        for i, name in enumerate(reqs.regimes):
            sel = regime == i
            if not sel.any():
                continue
            cs = profile.commit_stats.get(name)
            if cs is None:
                raise UserError(f"regime {name!r} has no commit statistics in profile {profile.profile_id}",
                                f"use one of {', '.join(sorted(profile.commit_stats))}")
            ks[sel] = _coupled_steps(cs, C, content[sel], v[sel])
        self.k = ks.tolist()
        self.kofs = ofs[:-1].tolist()
        self.blocks_list = blocks.tolist()


def _clip_commit_stats(stats: dict, max_steps: int | None) -> dict | None:
    """Each regime's steps per canvas with values above `max_steps` moved to it; None when none is."""
    if not max_steps or not stats or all(max(cs.steps_per_canvas.values) <= max_steps for cs in stats.values()):
        return None
    out = {}
    for name, cs in stats.items():
        acc: dict[float, float] = {}
        for v, p in zip(cs.steps_per_canvas.values, cs.steps_per_canvas.probs):
            v = float(min(v, max_steps))
            acc[v] = acc.get(v, 0.0) + p
        vals = sorted(acc)
        out[name] = replace(cs, steps_per_canvas=Distribution(vals, [acc[v] for v in vals]))
    return out


class DiffusionMode(ServingMode):
    name = "diffusion"
    label = "DiffusionGemma"
    description = "DiffusionGemma-26B-A4B block diffusion"
    order = 0
    line_style = ("-", "o")
    model_family = "diffusion_gemma"
    default_model = "diffusiongemma-26b-a4b"
    canvas_sampler = True
    is_diffusion = True
    pass_kinds = ("encoder_prefill", "denoise_step", "encoder_commit")
    prefill_kind = "encoder_prefill"
    group_kinds = ("denoise_step", "encoder_commit")
    parts = (COMMIT_STATS,)
    sim_cost_rank = 1
    harness = "canvas"
    # a recorded engine's account of the mode (base.py)
    engine_phases = ("prefill", "denoise", "commit")
    bench_counter_prefix = "diffusion_"
    bench_model_hint = "diffusion"
    recorded_replay = "steps_per_canvas"

    def runs_scheduler(self, config: dict) -> bool:
        """vLLM's diffusion scheduler class."""
        return "Diffusion" in str(config.get("scheduler", ""))

    # ---- measurement (measure/ reads these instead of the mode's name; base.py says what each is) ----
    vllm_served = "tiny-diffusiongemma"
    vllm_model_runner = "v2"  # vLLM 0.26 serves DiffusionGemma only on Model Runner V2
    # diffusion steps run Triton kernels in the interpreter on a CPU (100-400 ms each): fewer, shorter requests
    vllm_campaign_load = dict(qps="0.5,3", requests=10, max_tokens=96, bench_prompts=8, bench_rate=2.0, bench_input_len=24, bench_output_len=64)
    # 2-3 canvases of 32 per request; closed loops of 2-8 canvases in flight
    vllm_validation = dict(engine={"canvas_length": 32}, low_qps=0.5, requests=24, outputs=(48, 64, 96),
                           concurrency=((2, 10), (4, 16), (8, 24)))
    transformers_class = "DiffusionGemmaForBlockDiffusion"
    projection_compare = (("denoise_step", 1, 256, 1024), ("denoise_step", 8, 256, 1024), ("encoder_commit", 1, 256, 1024),
                          ("encoder_prefill", 1, 1024, 0))

    def kv_step_slots(self, k: int, canvas: int) -> int:
        """The active canvas holds its slots from its first denoising step."""
        return canvas

    def decode_query_tokens(self, k: int, canvas: int) -> int:
        return canvas

    def draw(self, profile, reqs, seed: int) -> DiffusionDraws:
        return DiffusionDraws(profile, reqs, seed)

    def engine_view(self, profile, settings) -> dict:
        """The engine's canvas (where it is not the profile's) and every canvas's denoising steps
        clipped at max_denoising_steps (clipping the steps-per-canvas distribution clips every draw)."""
        changes = {}
        eng = profile.engine if isinstance(profile.engine, dict) else {}
        c = settings.canvas_length
        own = eng.get("canvas_length") or profile.resolved().models[self.name].canvas_length or 256
        if c and c != own and settings.source("canvas_length") in ("CLI", "CLI or spec"):  # never the statistics of another canvas, silently
            raise UserError(f"canvas_length {c} is not the {own}-token canvas profile {profile.profile_id}'s commit statistics were recorded on: "
                            "its steps per canvas would be reused for another canvas", f"drop --canvas-length (canvas_length in a spec), or fit a "
                            f"profile from commits recorded at canvas_length {c} (costmodel measure --canvas-length {c}, costmodel fit)")
        if c and c != own:
            changes["engine"] = {**eng, "canvas_length": int(c)}
        clipped = _clip_commit_stats(getattr(profile, COMMIT_STATS.key), settings.max_denoising_steps)
        if clipped is not None:
            changes[COMMIT_STATS.key] = clipped
        return changes

    def static_batch_ms(self, cost, batch: list) -> tuple[list[float], list[float], float]:
        """prefill(B, P); per canvas c: a commit before every canvas after the first, then the
        batch's most denoising steps (its loop runs until every row stopped); every row runs the
        batch's longest canvas count. First output: the end of canvas 0; finish: of its last."""
        B = len(batch)
        P = max(r.prompt_tokens for r in batch)
        C = cost.roofline.model.canvas_length or CANVAS_DEFAULT
        prefill, denoise, commit = self.prefill_kind, *self.group_kinds
        first, finish = [0.0] * B, [0.0] * B
        t = cost.pass_ms((Segment(prefill, B, P, 0),))
        blocks = [max(1, math.ceil(r.output_tokens / C)) for r in batch]
        for c in range(max(blocks)):
            ctx = P + C * c
            if c > 0:
                t += cost.pass_ms((Segment(commit, B, C, ctx - C),))
            steps = max(r.steps_per_canvas[c] if c < len(r.steps_per_canvas) else r.steps_per_canvas[-1] for r in batch)
            t += steps * cost.pass_ms((Segment(denoise, B, C, ctx),))
            for i in range(B):
                if c == 0:
                    first[i] = t
                if c == blocks[i] - 1:
                    finish[i] = t
        return first, finish, t
