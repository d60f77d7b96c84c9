"""Prometheus `/metrics` of a vLLM server: scrape before, during and after a load; derive the
server-side statistics from counter deltas (after - before) and gauge samples (during).

Metric names (vLLM; counters are exposed with a `_total` suffix, both spellings are accepted):
- DiffusionGemma: vllm:diffusion_num_denoising_steps (engine steps of diffusion requests, the
  commit step of every canvas counted among them), vllm:diffusion_num_canvas_positions (vLLM 0.32,
  as a running server shows: canvas_length per diffusion engine step), vllm:diffusion_num_committed_tokens
  (tokens committed/emitted). Derived (`diffusion_canvases`): canvases = Δcommitted / canvas_length
  (as `vllm bench serve` computes it; Δpositions / canvas_length for counters that add a canvas
  once); steps_per_canvas = Δsteps / canvases (k + 1:
  k denoising passes + 1 commit step); denoise_steps_per_canvas = steps_per_canvas - 1;
  committed_tokens_per_step = Δcommitted / Δsteps.
- MTP: vllm:spec_decode_num_drafts, _num_draft_tokens, _num_accepted_tokens,
  _num_accepted_tokens_per_pos{position=i}. Derived: acceptance_rate = Δaccepted / Δdraft_tokens
  (a fraction; `vllm bench serve` prints it x100), mean_acceptance_length = 1 + Δaccepted / Δdrafts,
  per_position_rates[i] = Δaccepted_per_pos[i] / Δdrafts, draft_tokens_per_step = Δdraft_tokens / Δdrafts.
- Gauges sampled during the load: vllm:num_requests_running, vllm:num_requests_waiting (queue
  length), vllm:kv_cache_usage_perc (a fraction, 1 = full; older vLLM: vllm:gpu_cache_usage_perc).

When the server labels series with `model_name`, only the served model's series count; series
of one metric are otherwise summed (several engines / data-parallel ranks). A counter that went
down (server restart) makes its delta unknown (None), never negative.

During a load the scraper only fetches the text (async I/O, no parsing), so that it cannot delay
request dispatch; the texts are parsed after the load.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from measure.endpoint.failures import classify
from measure.engine_mode import engine_mode

DG_STEPS = "vllm:diffusion_num_denoising_steps"
DG_POSITIONS = "vllm:diffusion_num_canvas_positions"
DG_COMMITTED = "vllm:diffusion_num_committed_tokens"
SD_DRAFTS = "vllm:spec_decode_num_drafts"
SD_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SD_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
SD_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PROMPT_TOKENS = "vllm:prompt_tokens"
GENERATION_TOKENS = "vllm:generation_tokens"
PREEMPTIONS = "vllm:num_preemptions"
DURING_METRICS = (DG_STEPS, DG_POSITIONS, DG_COMMITTED, SD_DRAFTS, SD_DRAFT_TOKENS, SD_ACCEPTED, RUNNING, WAITING, *KV_USAGE, GENERATION_TOKENS)


@dataclass(frozen=True)
class Sample:
    name: str  # canonical: a counter's `_total` suffix removed
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass
class Snapshot:
    """One scrape. `t_s` is relative to the load's t0 (negative before it)."""

    t_s: float
    phase: str  # before | during | after
    ok: bool
    error: str | None = None
    text: str | None = None  # raw exposition, parsed lazily
    _samples: list[Sample] | None = field(default=None, repr=False)

    @property
    def samples(self) -> list[Sample]:
        if self._samples is None:
            self._samples, err = parse_exposition(self.text or "") if self.ok else ([], None)
            if err:
                self.ok, self.error = False, err
        return self._samples


def parse_exposition(text: str) -> tuple[list[Sample], str | None]:
    """Parse Prometheus text; keep vllm:* samples. Returns (samples, error or None)."""
    out: list[Sample] = []
    try:
        for fam in text_string_to_metric_families(text):
            if not fam.name.startswith("vllm:"):
                continue
            for s in fam.samples:
                name = s.name
                if fam.type == "counter" and name.endswith("_total"):
                    name = name[: -len("_total")]
                elif fam.type == "counter" and name.endswith("_created"):
                    continue
                if name.endswith("_created"):
                    continue
                out.append(Sample(name, tuple(sorted(s.labels.items())), float(s.value)))
    except Exception as e:  # the parser raises ValueError and others on bad input
        return out, f"unparseable exposition ({type(e).__name__}: {str(e)[:80]})"
    return out, None


def _select(samples: list[Sample], name: str, model: str | None) -> list[Sample]:
    rows = [s for s in samples if s.name == name]
    if model is not None:
        mine = [s for s in rows if dict(s.labels).get("model_name") == model]
        if mine:
            return mine
        if any("model_name" in dict(s.labels) for s in rows):
            return []  # only other models' series
    return rows


def value(snap: Snapshot, name: str | tuple[str, ...], model: str | None = None) -> float | None:
    """Sum of a metric's series (None if absent). A tuple tries names in order."""
    for n in (name,) if isinstance(name, str) else name:
        rows = _select(snap.samples, n, model)
        if rows:
            return sum(s.value for s in rows)
    return None


def by_label(snap: Snapshot, name: str, label: str, model: str | None = None) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in _select(snap.samples, name, model):
        key = dict(s.labels).get(label)
        if key is not None:
            out[key] = out.get(key, 0.0) + s.value
    return out


@dataclass
class DiffusionServerStats:
    denoising_steps: float  # Δ engine steps, commit steps included
    canvas_positions: float
    committed_tokens: float
    canvas_length: int
    canvases: float | None  # Δpositions / canvas_length
    steps_per_canvas: float | None  # k + 1
    denoise_steps_per_canvas: float | None  # k
    committed_tokens_per_step: float | None
    committed_tokens_per_canvas: float | None


@dataclass
class SpecDecodeServerStats:
    num_drafts: float
    num_draft_tokens: float
    num_accepted_tokens: float
    acceptance_rate: float | None  # fraction of draft tokens accepted
    mean_acceptance_length: float | None  # 1 + accepted / drafts
    draft_tokens_per_step: float | None  # k
    per_position_rates: list[float]  # accepted at position i / drafts


@dataclass
class GaugeStats:
    mean: float
    max: float
    n: int


@dataclass
class ServerStats:
    """What /metrics says about one load window (before -> after)."""

    scrapes_ok: int
    scrapes_failed: int
    first_error: str | None
    diffusion: DiffusionServerStats | None
    spec_decode: SpecDecodeServerStats | None
    running: GaugeStats | None
    waiting: GaugeStats | None
    kv_cache_usage: GaugeStats | None  # fraction
    prompt_tokens: float | None
    generation_tokens: float | None
    preemptions: float | None
    counter_resets: list[str]

    @property
    def mode_hint(self) -> str | None:
        if self.diffusion is not None and self.diffusion.denoising_steps > 0:
            return engine_mode(canvases=True).name
        if self.spec_decode is not None and self.spec_decode.num_drafts > 0:
            return engine_mode(speculative=True).name
        return None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def diffusion_canvases(steps: float | None, positions: float | None, committed: float | None, canvas_length: int) -> float | None:
    """Canvases behind counter deltas. vLLM 0.32 (seen on a running server) adds the canvas length to
    vllm:diffusion_num_canvas_positions on EVERY diffusion engine step (commit steps included), so
    Δpositions = Δsteps x canvas length and canvases = Δcommitted / canvas length (as `vllm bench serve`
    computes them: a last canvas cut short by max_tokens or EOS counts as a fraction, so k is slightly
    overstated then). Counters that add the canvas length once per canvas give canvases = Δpositions /
    canvas length."""
    if positions is None or not steps:
        return None
    if abs(positions / steps - canvas_length) < 0.5:  # per-step positions (vLLM 0.32)
        return _ratio(committed, canvas_length) if committed else None
    return _ratio(positions, canvas_length)


def derive(before: Snapshot, after: Snapshot, during: list[Snapshot], model: str | None, canvas_length: int = 256) -> ServerStats:
    """Counter deltas and gauge summaries of one load window."""
    snaps = [before, *during, after]
    for s in snaps:
        s.samples  # parse now: an unparseable text marks its scrape failed
    ok = [s for s in snaps if s.ok]
    resets: list[str] = []

    def d(name: str) -> float | None:
        if not (before.ok and after.ok):
            return None
        a, b = value(after, name, model), value(before, name, model)
        if a is None:
            return None
        if b is not None and a < b:
            resets.append(name)
            return None
        return a - (b or 0.0)

    diffusion = None
    steps, positions, committed = d(DG_STEPS), d(DG_POSITIONS), d(DG_COMMITTED)
    if steps is not None:
        canvases = diffusion_canvases(steps, positions, committed, canvas_length)
        spc = _ratio(steps, canvases)
        diffusion = DiffusionServerStats(
            denoising_steps=steps, canvas_positions=positions or 0.0, committed_tokens=committed or 0.0, canvas_length=canvas_length,
            canvases=canvases, steps_per_canvas=spc, denoise_steps_per_canvas=spc - 1 if spc is not None else None,
            committed_tokens_per_step=_ratio(committed, steps), committed_tokens_per_canvas=_ratio(committed, canvases),
        )
    spec = None
    drafts, dtoks, acc = d(SD_DRAFTS), d(SD_DRAFT_TOKENS), d(SD_ACCEPTED)
    if drafts is not None:
        per_pos: list[float] = []
        if before.ok and after.ok and drafts:
            pa, pb = by_label(after, SD_PER_POS, "position", model), by_label(before, SD_PER_POS, "position", model)
            for pos in sorted(pa, key=lambda p: int(p) if p.isdigit() else 1 << 30):
                dv = pa[pos] - pb.get(pos, 0.0)
                per_pos.append(dv / drafts if dv >= 0 else math.nan)
        spec = SpecDecodeServerStats(
            num_drafts=drafts, num_draft_tokens=dtoks or 0.0, num_accepted_tokens=acc or 0.0,
            acceptance_rate=_ratio(acc, dtoks), mean_acceptance_length=1 + acc / drafts if drafts and acc is not None else None,
            draft_tokens_per_step=_ratio(dtoks, drafts), per_position_rates=per_pos,
        )

    def gauge(name) -> GaugeStats | None:
        vals = [v for s in during if s.ok for v in [value(s, name, model)] if v is not None]
        if not vals:
            vals = [v for s in (before, after) if s.ok for v in [value(s, name, model)] if v is not None]
        if not vals:
            return None
        return GaugeStats(mean=sum(vals) / len(vals), max=max(vals), n=len(vals))

    failed = [s for s in snaps if not s.ok]
    return ServerStats(
        scrapes_ok=len(ok), scrapes_failed=len(failed), first_error=failed[0].error if failed else None,
        diffusion=diffusion, spec_decode=spec, running=gauge(RUNNING), waiting=gauge(WAITING), kv_cache_usage=gauge(KV_USAGE),
        prompt_tokens=d(PROMPT_TOKENS), generation_tokens=d(GENERATION_TOKENS), preemptions=d(PREEMPTIONS), counter_resets=resets,
    )


class Scraper:
    """Fetches /metrics with its own HTTP client (never the load's connection pool)."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, timeout_s: float = 10.0, secrets: tuple[str, ...] = ()):
        self.url = url
        self._http = httpx.AsyncClient(timeout=timeout_s, headers=headers or {}, trust_env=False)
        self._secrets = secrets
        self.during: list[Snapshot] = []

    async def scrape(self, phase: str, t_s: float) -> Snapshot:
        try:
            r = await self._http.get(self.url)
            if r.status_code != 200:
                return Snapshot(t_s, phase, False, f"HTTP {r.status_code} from {self.url}")
            return Snapshot(t_s, phase, True, text=r.text)
        except Exception as e:  # noqa: BLE001 - an unreachable /metrics is recorded, not fatal
            reason, detail, _ = classify(e, self._secrets)
            return Snapshot(t_s, phase, False, f"{reason}: {detail}")

    async def poll(self, t0: float, interval_s: float) -> None:
        """Scrape every `interval_s` until cancelled (fetch only; parsing happens later)."""
        loop = asyncio.get_running_loop()
        nxt = loop.time()
        while True:
            self.during.append(await self.scrape("during", loop.time() - t0))
            nxt += interval_s
            await asyncio.sleep(max(0.0, nxt - loop.time()))

    async def aclose(self) -> None:
        await self._http.aclose()


def snapshot_rows(snap: Snapshot, keep: tuple[str, ...] | None = None) -> list[dict]:
    """Rows of the run's `server_metrics` table (one per sample; a failed scrape -> one row)."""
    samples = snap.samples  # parses; an unparseable text marks the scrape failed
    if not snap.ok:
        return [{"t_s": snap.t_s, "phase": snap.phase, "metric": "", "labels": "{}", "value": math.nan, "error": snap.error}]
    return [{"t_s": snap.t_s, "phase": snap.phase, "metric": s.name, "labels": json.dumps(dict(s.labels), sort_keys=True), "value": s.value, "error": None}
            for s in samples if keep is None or s.name in keep]
