"""What a serving mode is: the contract every member of the mode registry fulfils.

A mode (diffusion, ar, mtp, ...) is one module that subclasses `ServingMode` and declares
- identity and display: `name`, `label`, `order` (tables and charts), `line_style` (charts);
- which model serves it: `model_family` (a catalog family) and whether an `assistant` drafts for it;
- its pass kinds (costmodel.roofline.PASS_KINDS) and their roles in an engine step:
  `prefill_kind` (prompt chunks), `group_kinds` (decode-phase groups, each a set of sequences that
  run one pass kind with the same query tokens per sequence in a step) and `side_kinds` (passes
  run over group 0's sequences before the joint forward, e.g. MTP's k draft passes);
- its random draws and KV accounting per request: `draw(profile, reqs, seed) -> ModeDraws`, and the
  profile parts they draw from (`parts`: `ProfilePart`s, e.g. diffusion's commit statistics, each a
  top-level key of the profile JSON that the part reads, checks and describes);
- how a static batch runs it to completion (transformers' `generate`, what `costmodel validate`
  serves): `static_batch_ms(cost, batch)` (simulate/static_batch.py);
- how one engine step is priced: `step_ms(cost, prefill, groups, draws)` over any number of
  groups, with `cost.pass_ms(segments)` pricing one forward (costmodel/stepcost.ModeCost; default:
  one forward pass, one weight read, over the prefill chunks and every group), and the passes beside
  the joint forward (`side_passes`, MTP's drafts: the step fits read them);
- the traits other stages ask instead of its name: `assistant`, `is_diffusion`, `canvas_sampler`,
  `decodes_canvases` (from its pass kinds), `harness` (the in-process program that measures it),
  `static_batch_requests`;
- how an engine's settings change its profile parts (`engine_view(profile, settings)`: diffusion's
  canvas and denoising budget, MTP's k), which simulate/engine.py applies;
- what a recorded vLLM engine says of it (`engine_phases`, `bench_counter_prefix`, `bench_model_hint`,
  `recorded_default`, `recorded_replay`, `runs_scheduler`): how the recording readers
  (costmodel/schemas/engine_trace.py, bench_result.py, simulate/engine_recorded.py) tell its runs apart
  and what the vLLM validation scores and replays (all optional; defaults fit an AR-like mode);
- what measure/ reads of it instead of its name (the "measurement" block: names and small data, the
  backends do the heavy work): vLLM on the tiny models (`vllm_served`, `vllm_model_dir`,
  `vllm_speculative_method`, `vllm_campaign_load`, `vllm_validation`), the checkpoint's
  `transformers_class`, and the shapes `costmodel profile project --compare` prints (`projection_compare`).
Its per-step progression on a replica is the simulator's: an engine registered under the mode's
name in simulate/engines (a `Replica` subclass, keeping the mode's own per-request progress in
`Request.state`), so this registry sits below every stage.

Registering a new mode is one module plus one line in costmodel/modes/__init__.py (and its engine,
one module plus one line in simulate/engines/__init__.py); every mode list, CLI choice, chart
style, table order and CSV row is derived from the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:  # annotations only: naming the modes (a CLI's --help) does not load numpy
    import numpy as np

from costmodel.roofline import Segment, get_pass_kind


class RequestArrays(Protocol):
    """The workload's requests as arrays (simulate.workload.Requests satisfies it)."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    regime_idx: np.ndarray
    regimes: tuple


@dataclass
class ModeDraws:
    """A mode's per-run draws and shapes: what its engine and its step price need.

    group_tokens: query tokens per sequence per step of each decode-phase group (`group_kinds`
    order); kv_need_tokens: KV tokens each request holds at its end (it must fit the cache alone);
    blocks: per-request canvases (diffusion) or None; price_key: what, besides the profile, makes
    two runs' step prices differ (the step-price cache key)."""

    group_tokens: tuple[int, ...]
    kv_need_tokens: np.ndarray
    blocks: np.ndarray | None = None
    price_key: tuple = ()
    side_passes: int = 0  # side passes (`side_kinds`) per step, e.g. MTP's k drafts


class ServingMode:
    """Base of every serving mode; subclasses set the class attributes."""

    name: ClassVar[str]
    label: ClassVar[str]  # display name in tables and charts
    description: ClassVar[str] = ""  # one line for data dictionaries, e.g. "Gemma-4-26B-A4B autoregressive"
    order: ClassVar[int]  # position in tables and charts (ascending)
    line_style: ClassVar[tuple[str, str]] = ("-.", "d")  # matplotlib (linestyle, marker)
    model_family: ClassVar[str]  # costmodel.models family of the served model
    default_model: ClassVar[str]  # the catalog model served when none is named
    canvas_sampler: ClassVar[bool] = False  # holds fp32 [canvas, vocab] sampler buffers per running canvas (costmodel/memory.py)
    assistant: ClassVar[bool] = False  # an assistant model drafts for the target
    is_diffusion: ClassVar[bool] = False  # the subject of the crossover (where diffusion stops paying off)
    pass_kinds: ClassVar[tuple[str, ...]]  # every pass kind the mode runs (profile order)
    prefill_kind: ClassVar[str]
    group_kinds: ClassVar[tuple[str, ...]]
    side_kinds: ClassVar[tuple[str, ...]] = ()
    parts: ClassVar[tuple["ProfilePart", ...]] = ()  # the profile parts its draws use (registered with the mode)
    profile_parts: ClassVar[tuple[str, ...]] = ()  # their keys (set from `parts`)
    sim_cost_rank: ClassVar[int] = 9  # simulation cost per request, rank (0 = slowest): plan runs slow chains first
    # measurement hooks (measure/): the in-process harness program that times it, "canvas"
    # (measure/harness/diffusion.py: canvases, commit records) or "causal" (causal.py: prefill and
    # decode, with `assistant` the draft/verify rounds); None: the harness does not measure it
    harness: ClassVar[str | None] = None
    static_batch_requests: ClassVar[int | None] = None  # requests a static batch holds when fixed (transformers' assisted generation: 1)

    # ---- a recorded engine's account of the mode (costmodel/schemas/engine_trace.py, bench_result.py,
    # simulate/engine_recorded.py, simulate/validate/vllm/): how a vLLM recording shows which mode it
    # served and what it reports per mode. Kept together, apart from measure's backend attributes.
    engine_phases: ClassVar[tuple[str, ...]] = ("prefill", "decode")  # request phases the scheduler recorder's steps count (<phase>_reqs/_tokens), prefill first, then one per decode-phase group
    bench_counter_prefix: ClassVar[str | None] = None  # `vllm bench serve` result keys only its server reports (e.g. "spec_decode_")
    bench_model_hint: ClassVar[str | None] = None  # a word in the served model's name that names the mode when a bench file's counters do not
    recorded_default: ClassVar[bool] = False  # the mode of a recording that shows no other mode's signs (one mode sets it)
    recorded_replay: ClassVar[str | None] = None  # the engine trace's per-request column the simulator replays (a Requests.recorded key)

    def runs_scheduler(self, config: dict) -> bool:
        """Whether a scheduler recorder's config line (vLLM's scheduler class and settings) shows this
        mode's engine (False: no sign of it; the recorded_default mode is the one left)."""
        return False
    # ---- measurement (measure/): what its backends read of the mode instead of spelling its name ----
    # Names and small data only (no engine, torch or transformers is imported here): the backend does the work.
    # vLLM on the tiny models (measure/vllm, measure/validate): the served name, the tiny model directory
    # (measure/vllm/tiny_models.MODELS; a mode that decodes canvases serves `diffusion_dir(canvas)`), the
    # speculative method vLLM runs the assistant with, the campaign's load (measure/vllm/campaign.Load's
    # fields) and the validation's defaults (measure/validate/vllm_loads: the mode's own engine settings,
    # calibration low rate, requests and closed loops, output lengths). None / {}: no vLLM set-up here.
    vllm_served: ClassVar[str | None] = None
    vllm_model_dir: ClassVar[str | None] = None
    vllm_speculative_method: ClassVar[str | None] = None
    vllm_campaign_load: ClassVar[dict] = {}
    vllm_validation: ClassVar[dict] = {}
    # the model runner vLLM 0.26 serves the mode on: "v1" (vllm/v1/worker/gpu_model_runner.py) or "v2"
    # (vllm/v1/worker/gpu/model_runner.py, whose profile_cudagraph_memory returns 0: it reserves no CUDA-graph
    # memory from the KV budget, costmodel/memory.py); measure/vllm/gpu_run.py starts the engine on it
    vllm_model_runner: ClassVar[str] = "v1"
    # `costmodel profile project --compare` (measure/fit/projection.py): the (pass kind, seqs, tokens per
    # sequence, context) shapes a projection is compared at, the issue-17 target shapes and a few batches around them
    projection_compare: ClassVar[tuple[tuple[str, int, int, int], ...]] = ()
    # the served checkpoint's class in transformers (measure/harness/build.py; None: AutoModelForCausalLM)
    transformers_class: ClassVar[str | None] = None

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls.profile_parts = tuple(p.key for p in cls.parts)

    @property
    def decodes_canvases(self) -> bool:
        """Its decode-phase passes run a canvas per sequence (their kinds' query tokens), not tokens:
        a block-diffusion mode, timed per canvas and scheduled by vLLM's diffusion scheduler."""
        return any(get_pass_kind(k).query_tokens == "canvas" for k in self.group_kinds)

    # ---- engine memory (costmodel/memory.py) ---------------------------------------------------
    def kv_step_slots(self, k: int, canvas: int) -> int:
        """One new token's slot per step."""
        return 1

    def decode_query_tokens(self, k: int, canvas: int) -> int:
        """Query tokens a decoding request adds to a step's batch (AR: 1)."""
        return 1

    # ---- the profile as an engine runs it (simulate/engine.py engine_profile) ---------------------
    def engine_view(self, profile, settings) -> dict:
        """The changes (Profile field -> value) that make `profile` the one an engine with `settings`
        (costmodel.engine_settings.EngineSettings) runs for this mode: its own profile parts and engine
        settings under those settings. Default: none."""
        return {}

    # ---- draws and KV --------------------------------------------------------------------------
    def draw(self, profile, reqs: RequestArrays, seed: int) -> ModeDraws:
        """Default: one query token per sequence per group, KV = prompt + output."""
        return ModeDraws(group_tokens=(1,) * len(self.group_kinds), kv_need_tokens=reqs.prompt_tokens + reqs.output_tokens)

    # ---- step price ----------------------------------------------------------------------------
    def step_ms(self, cost, prefill: Segment | None, groups: tuple[Segment, ...], draws: ModeDraws) -> float:
        """Milliseconds of one engine step's passes: one forward (one weight read) over the prefill
        chunks and every non-empty group, priced by `cost` (the mode's costmodel.stepcost.ModeCost)."""
        segs = ((prefill,) if prefill is not None else ()) + tuple(g for g in groups if g.seqs)
        return cost.pass_ms(segs)

    def static_batch_ms(self, cost, batch: list) -> tuple[list[float], list[float], float]:
        """(first-output offsets, finish offsets, batch duration) in ms from the start of one static
        batch run to completion (simulate.static_batch.BatchRequest records, prompts padded to the
        longest), passes priced by `cost.pass_ms`. Default: one prefill, then one decode pass of
        group 0 per token until the batch's longest output (AR decoding)."""
        B = len(batch)
        P = max(r.prompt_tokens for r in batch)
        t = cost.pass_ms((Segment(self.prefill_kind, B, P, 0),))
        first, finish = [t] * B, [0.0] * B
        for i, r in enumerate(batch):
            if r.output_tokens <= 1:
                finish[i] = t
        for j in range(1, max(r.output_tokens for r in batch)):
            t += cost.pass_ms((Segment(self.group_kinds[0], B, 1, P + j - 1),))
            for i, r in enumerate(batch):
                if r.output_tokens == j + 1:
                    finish[i] = t
        return first, finish, t

    def side_passes(self, prefill: Segment | None, groups: tuple[Segment, ...], k: int) -> list[tuple[tuple[Segment, ...], int]]:
        """The passes run beside the joint forward of one engine step, as (segments of one pass,
        how many such passes), e.g. MTP's k draft passes; k: side passes per step (`ModeDraws.side_passes`)."""
        return []

    def batch_composition(self, prefill_seqs: float, group_seqs: tuple[float, ...]) -> dict[str, float]:
        """Mean sequences per engine step by pass kind (prefill, groups, then side passes, which
        run over group 0's sequences)."""
        comp = {self.prefill_kind: prefill_seqs}
        comp.update(zip(self.group_kinds, group_seqs))
        for kind in self.side_kinds:
            comp[kind] = group_seqs[0]
        return comp

    # ---- provenance ----------------------------------------------------------------------------
    def behaviour_provenance(self, profile) -> list[str]:
        """Where the profile parts the mode draws from come from, e.g. ["commit: published"]."""
        out = []
        for part in self.parts:
            kinds = part.provenance_kinds(getattr(profile, part.key))
            if kinds:
                out.append(f"{part.label}: {'+'.join(kinds)}")
        return out


class ProfilePart:
    """A part of the profile a mode draws its behaviour from, beside the pass models: one top-level
    key of the profile JSON (and attribute of costmodel.schemas.profile.Profile). The mode module
    that owns it subclasses this and lists an instance in its `parts`."""

    key: ClassVar[str]  # JSON key and Profile attribute, e.g. "commit_stats"
    label: ClassVar[str]  # short label in provenance texts, e.g. "commit"
    title: ClassVar[str] = ""  # what reports call it, e.g. "commit statistics" ("": the label)
    fix: ClassVar[str]  # how to supply it, for a profile whose mode needs it and lacks it
    defines_regimes: ClassVar[bool] = False  # its value is the profile's workload regimes, regime -> records with a content_length (Profile.regimes)

    def empty(self) -> Any:
        """What a profile without the part holds."""
        return None

    def prior(self) -> Any:
        """The part's published value, what a profile with no measurement of it carries (`costmodel
        profile roofline`); `empty()` where none is published."""
        return self.empty()

    def load(self, value: Any) -> Any:
        """The part's records from its JSON value (None or absent: `empty()`); KeyError, TypeError or
        ValueError on a malformed value (the profile reader turns them into one UserError)."""
        raise NotImplementedError

    def validate(self, value: Any, where: str) -> None:
        """Refuse (UserError) a malformed part."""

    def provenance_kinds(self, value: Any) -> list[str]:
        """Sorted provenance kinds of the part's records ([] when the profile lacks it)."""
        raise NotImplementedError

    def provenance_record(self, value: Any) -> Any:
        """What a profile's provenance account (costmodel/schemas/provenance.py) says of the part,
        JSON-able; None leaves it out."""
        return None

    def provenance_items(self, record: Any) -> list[tuple[str, str]]:
        """(provenance kind, what) of each entry of a provenance_record, e.g. ("published", "MTP acceptance")."""
        return []

    def what_ifs(self) -> dict[str, Any]:
        """Plan's sensitivity edits of the part (simulate/plan/sensitivity.py): name -> fn(value, f),
        which scales one quantity of the part's JSON value by f in place (value: the profile
        document's entry for `key`, possibly None or absent). Default: none."""
        return {}

    def bases(self, record: Any) -> set[str]:
        """The provenance kinds a provenance_record rests on (reports' "rests on" line)."""
        return {kind for kind, _ in self.provenance_items(record)}
