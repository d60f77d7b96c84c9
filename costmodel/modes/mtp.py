"""Multi-token prediction (Gemma-4 + its assistant): the prefill emits the first token; then each
engine step runs k draft passes of the assistant (sequential, one token each) and one verify pass
of k+1 tokens per sequence, emitting 1 + accepted drafts.

Draws: tokens emitted per verify step (1 + accepted drafts), from the distribution that
`MtpAcceptance.per_position` defines (drafts accepted = the leading run of successes), one region
of draws per request, fixed by the seed whatever the load, replica count or serving order."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from costmodel.errors import UserError
from costmodel.modes.base import ModeDraws, ProfilePart, ServingMode
from costmodel.roofline import Segment
from costmodel.records import Provenance
from costmodel.seeding import rng_for

if TYPE_CHECKING:  # annotations; each function that computes imports numpy (naming the modes does not load it)
    import numpy as np

STREAM_MTP, STREAM_MTP_EXTRA = 12, 13
# draws per request: enough verify steps for twice the expected count plus slack; a request that
# needs more (astronomically rare) extends its own region from a per-request stream.
MTP_REGION_FACTOR, MTP_REGION_SLACK = 2.0, 16


@dataclass
class MtpAcceptance:
    num_speculative_tokens: int
    per_position: list[float]  # P(draft i accepted | drafts < i accepted), i = 1..k
    provenance: Provenance

    @property
    def mean_acceptance_length(self) -> float:
        """Expected tokens emitted per verify step: 1 (bonus/correction) + expected accepted drafts."""
        total, p = 1.0, 1.0
        for a in self.per_position[: self.num_speculative_tokens]:
            p *= a
            total += p
        return total

    def sample_accepted(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Accepted draft tokens per verify step (0..k), n draws."""
        import numpy as np
        k = self.num_speculative_tokens
        u = rng.random((n, k))
        ok = u < np.asarray(self.per_position[:k])[None, :]
        # accepted = length of the leading run of successes
        return np.where(ok.all(axis=1), k, np.argmin(ok, axis=1))


class MtpAcceptancePart(ProfilePart):
    """The profile's `mtp_acceptance`: one MtpAcceptance, or None."""

    key = "mtp_acceptance"
    label = "acceptance"
    title = "MTP acceptance"
    fix = "add per-position acceptance with its provenance"

    def load(self, value) -> MtpAcceptance | None:
        if not value:
            return None
        return MtpAcceptance(int(value["num_speculative_tokens"]), [float(x) for x in value["per_position"]], Provenance(**value["provenance"]))

    def validate(self, value: MtpAcceptance | None, where: str) -> None:
        if value:
            if not (1 <= value.num_speculative_tokens <= len(value.per_position)) or any(not 0 <= p <= 1 for p in value.per_position):
                raise UserError(f"{where}: mtp_acceptance needs k >= 1 probabilities in [0, 1]", "fix per_position")
            value.provenance.validate(f"{where}: mtp_acceptance")

    def provenance_kinds(self, value: MtpAcceptance | None) -> list[str]:
        return [value.provenance.kind] if value else []

    def provenance_record(self, value: MtpAcceptance | None) -> dict | None:
        if value is None:
            return None
        return {**asdict(value.provenance), "num_speculative_tokens": value.num_speculative_tokens,
                "mean_acceptance_length": value.mean_acceptance_length}

    def provenance_items(self, record: dict) -> list[tuple[str, str]]:
        return [(record["kind"], "MTP acceptance")]

    def what_ifs(self) -> dict:
        """Per-position acceptance x f, capped at 0.99."""
        def scale(value, f: float) -> None:
            if value:
                value["per_position"] = [min(0.99, p * f) for p in value["per_position"]]
        return {"MTP acceptance": scale}


MTP_ACCEPTANCE = MtpAcceptancePart()


def mtp_tokens_pmf(per_position, k: int) -> np.ndarray:
    """P(tokens per verify step = 1 + j), j = 0..k: j drafts accepted then one rejected (or all k)."""
    import numpy as np
    a = np.asarray(per_position[:k], float)
    pmf = np.empty(k + 1)
    run = 1.0
    for j in range(k):
        pmf[j] = run * (1.0 - a[j])
        run *= a[j]
    pmf[k] = run
    return pmf


class MtpDraws(ModeDraws):
    """Tokens per verify step for every request, as a cumulative count per request region."""

    def __init__(self, profile, reqs, seed: int):
        import numpy as np
        acc = profile.mtp_acceptance
        if acc is None:
            raise UserError(f"profile {profile.profile_id} has no mtp_acceptance", "use a profile with MTP acceptance for mode mtp")
        self.k = k = int(acc.num_speculative_tokens)
        self.mean_tokens = float(acc.mean_acceptance_length)
        super().__init__(group_tokens=(k + 1,), kv_need_tokens=reqs.prompt_tokens + reqs.output_tokens + k + 1,
                         price_key=(k,), side_passes=k)
        self.cdf = np.cumsum(mtp_tokens_pmf(acc.per_position, k))
        self.cdf[-1] = 1.0
        self.seed = seed
        recorded = (getattr(reqs, "recorded", None) or {}).get("tokens_per_step")
        need = np.maximum(np.asarray(reqs.output_tokens, dtype=np.int64) - 1, 0)
        if recorded is not None:  # an engine's own tokens per verify step, replayed (simulate/validate/vllm)
            self._replay(recorded, len(reqs.output_tokens))
            self._first_decode(need)
            return
        region = np.minimum(need, np.ceil(MTP_REGION_FACTOR * need / self.mean_tokens).astype(np.int64) + MTP_REGION_SLACK)
        starts = np.zeros(len(need) + 1, dtype=np.int64)
        np.cumsum(region, out=starts[1:])
        self.start = starts.tolist()
        self.csum = self._csum(rng_for(seed, STREAM_MTP), self.start[-1])
        self._first_decode(need, starts)

    def _csum(self, rng: np.random.Generator, n: int, chunk: int = 1 << 16) -> np.ndarray:
        """[0, running sums of n draws], drawn and summed a chunk at a time: the same numbers as one
        draw of n (the generator's stream is sequential), without an n-long array of uniforms."""
        import numpy as np
        csum = np.empty(n + 1, dtype=np.int64)
        csum[0] = 0
        for i in range(0, n, chunk):
            j = min(n, i + chunk)
            part = csum[i + 1:j + 1]
            np.cumsum(self._draw(rng, j - i), dtype=np.int64, out=part)
            part += csum[i]
        return csum

    def _first_decode(self, need: np.ndarray, starts: np.ndarray | None = None) -> None:
        """steps_for of every request's first decode phase (all of its output after the prefill's
        token, from the start of its region) in one vectorised search; -1 where the region runs
        out (steps_for extends it then). The one call per request that is not after a preemption.
        `starts`: self.start as an array, where the caller has it."""
        import numpy as np
        starts = np.asarray(self.start, dtype=np.int64) if starts is None else starts
        a = starts[:-1]
        target = self.csum[a] + need
        steps = np.searchsorted(self.csum, target, side="left") - a
        self.first_need = need.tolist()
        self.first_steps = np.where(self.csum[starts[1:]] >= target, steps, -1).tolist()

    def _replay(self, recorded, n: int) -> None:
        """One region per request holding its recorded tokens per verify step (exhausted regions
        extend from the request's own random stream, as drawn ones do)."""
        import numpy as np
        if len(recorded) != n:
            raise UserError(f"recorded tokens per verify step cover {len(recorded)} requests, the run has {n}", "replay the requests the record belongs to")
        lens = np.array([len(x) for x in recorded], dtype=np.int64)
        self.start = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=self.start[1:])
        self.start = self.start.tolist()
        draws = np.clip(np.array([int(t) for x in recorded for t in x], dtype=np.int64), 1, self.k + 1)
        if len(draws):
            self.mean_tokens = float(draws.mean())
        self.csum = np.zeros(len(draws) + 1, dtype=np.int64)
        np.cumsum(draws, dtype=np.int64, out=self.csum[1:])

    def _draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n draws of tokens per verify step: 1 + the cdf entries at or below a uniform u (the last,
        1.0, never is), i.e. 1 + searchsorted(cdf, u, "right") clipped to k, by k vectorised
        comparisons instead of a binary search per draw (the same numbers), as uint8 (summed into
        int64 by the callers)."""
        import numpy as np
        u = rng.random(n)
        out = np.ones(n, dtype=np.uint8)
        ge = np.empty(n, dtype=bool)
        for c in self.cdf[:self.k]:
            np.greater_equal(u, c, out=ge)
            out += ge.view(np.uint8)  # (its 0s and 1s added in place: no array made per comparison)
        return out

    def steps_for(self, r, tokens: int) -> int:
        """Verify steps from r's current position until `tokens` more tokens are emitted."""
        import numpy as np
        if r.mpos == 0 and r.cum is None and tokens == self.first_need[r.rid] and self.first_steps[r.rid] >= 0:
            return self.first_steps[r.rid]
        if r.cum is None:
            a = self.start[r.rid] + r.mpos
            target = int(self.csum[a]) + tokens
            if int(self.csum[self.start[r.rid + 1]]) >= target:
                return int(np.searchsorted(self.csum, target, side="left")) - a
            a0 = self.start[r.rid]
            r.cum = self.csum[a0:self.start[r.rid + 1] + 1] - self.csum[a0]
        cum = r.cum
        target = int(cum[r.mpos]) + tokens
        while int(cum[-1]) < target:  # region exhausted: extend from this request's own stream
            extra = self._draw(rng_for(self.seed, STREAM_MTP_EXTRA * 1_000_003 + r.rid * 7919 + len(cum)), max(16, tokens))
            cum = r.cum = np.concatenate([cum, cum[-1] + np.cumsum(extra, dtype=np.int64)])
        return int(np.searchsorted(cum, target, side="left")) - r.mpos

    def tokens_after(self, r, steps: int) -> int:
        """Tokens emitted by the next `steps` verify steps from r's current position."""
        if r.cum is None:
            a = self.start[r.rid] + r.mpos
            return int(self.csum[a + steps] - self.csum[a])
        return int(r.cum[r.mpos + steps] - r.cum[r.mpos])


class MtpMode(ServingMode):
    name = "mtp"
    label = "MTP"
    description = "Gemma-4 with multi-token prediction"
    order = 2
    line_style = (":", "^")
    model_family = "gemma4"
    default_model = "gemma4-26b-a4b"
    assistant = True
    pass_kinds = ("prefill", "draft_step", "verify_step")
    prefill_kind = "prefill"
    group_kinds = ("verify_step",)
    side_kinds = ("draft_step",)
    parts = (MTP_ACCEPTANCE,)
    static_batch_requests = 1  # transformers' assisted generation serves one request at a time
    sim_cost_rank = 0  # each step price has three passes (verify, first and later drafts): the slowest per point
    harness = "causal"
    # a recorded engine's account of the mode (base.py)
    engine_phases = ("prefill", "verify")
    bench_counter_prefix = "spec_decode_"
    recorded_replay = "tokens_per_step"

    def runs_scheduler(self, config: dict) -> bool:
        """Speculative tokens configured."""
        return bool(config.get("num_spec_tokens"))

    # ---- measurement (measure/ reads these instead of the mode's name; base.py says what each is) ----
    vllm_served = "tiny-gemma4"
    vllm_model_dir = "ar"  # the AR target, the assistant drafting (tiny_models' "mtp-assistant")
    vllm_speculative_method = "mtp"
    vllm_model_runner = "v2"  # Gemma-4 MTP crashes at start-up on vLLM 0.26's V1 runner (vllm issue #48848)
    vllm_campaign_load = dict(qps="2,8,32", requests=24, max_tokens=64, bench_prompts=16, bench_rate=8.0, bench_input_len=32, bench_output_len=48)
    vllm_validation = dict(engine={"max_num_seqs": 16, "num_speculative_tokens": 2}, low_qps=1.5, requests=48, outputs=(24, 48, 64, 96),
                           concurrency=((4, 24), (8, 32), (16, 48)))
    projection_compare = (("verify_step", 1, 5, 1024), ("draft_step", 1, 1, 1024))

    def kv_step_slots(self, k: int, canvas: int) -> int:
        """vLLM's lookahead reserve for speculative decoding: 1 + 2k slots (v1/core/sched, spec decode)."""
        return 1 + 2 * k

    def decode_query_tokens(self, k: int, canvas: int) -> int:
        return 1 + k

    def draw(self, profile, reqs, seed: int) -> MtpDraws:
        return MtpDraws(profile, reqs, seed)

    def engine_view(self, profile, settings) -> dict:
        """The per-position acceptance for the engine's k drafts: fewer than measured, the first k
        positions; more, refused (acceptance past the measured positions cannot be derived)."""
        acc, k = getattr(profile, MTP_ACCEPTANCE.key), settings.num_speculative_tokens
        if acc is None or not k or k == acc.num_speculative_tokens:
            return {}
        k = int(k)
        if k > len(acc.per_position):
            raise UserError(f"num_speculative_tokens {k} ({settings.source('num_speculative_tokens')}): profile {profile.profile_id} measured "
                            f"acceptance for {len(acc.per_position)} draft positions only",
                            f"give --num-speculative-tokens <= {len(acc.per_position)}, or fit a profile from runs at k = {k}")
        return {MTP_ACCEPTANCE.key: replace(acc, num_speculative_tokens=k, per_position=list(acc.per_position[:k]))}

    def static_batch_ms(self, cost, batch: list) -> tuple[list[float], list[float], float]:
        """One request per batch (transformers' assisted generation): prefill, then per iteration k
        draft passes and one verify pass over k+1 tokens, emitting 1 + its recorded accepted drafts."""
        if len(batch) != self.static_batch_requests:
            raise UserError(f"{self.name} validation batches hold one request, got {len(batch)}", f"use --max-batch 1 for {self.name}")
        r = batch[0]
        draft, verify = self.side_kinds[0], self.group_kinds[0]
        t = first = cost.pass_ms((Segment(self.prefill_kind, 1, r.prompt_tokens, 0),))
        done, it, k = 1, 0, r.draft_tokens
        while done < r.output_tokens:
            ctx = r.prompt_tokens + done
            t += k * cost.pass_ms((Segment(draft, 1, 1, ctx),)) + cost.pass_ms((Segment(verify, 1, k + 1, ctx),))
            done += 1 + (r.accepted_per_iteration[it] if it < len(r.accepted_per_iteration) else 0)
            it += 1
        return [first], [t], t

    def step_ms(self, cost, prefill, groups, draws) -> float:
        """The assistant's draft passes (`draft_passes`), then one joint forward of the prefill chunks
        and the (k+1)-token verify pass."""
        ms = sum(n * cost.pass_ms(segs) for segs, n in draft_passes(prefill, groups[0], draws.side_passes))
        return ms + super().step_ms(cost, prefill, groups, draws)

    def side_passes(self, prefill, groups, k: int):
        return draft_passes(prefill, groups[0], k)


def draft_passes(prefill: Segment | None, verify: Segment, k: int) -> list[tuple[tuple[Segment, ...], int]]:
    """The assistant's passes in one MTP engine step, as (segments of one pass, how many such passes),
    following vLLM 0.32's speculator (vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py;
    V1's EAGLE proposer has the same shape): the first draft pass runs over every token the target ran
    in the step (k+1 per verifying sequence and every prefill-chunk token), then k-1 one-token passes
    over the sequences that draft (verifying ones and prefill chunks)."""
    if k <= 0 or not (verify.seqs or prefill is not None):
        return []
    kind = MtpMode.side_kinds[0]
    first = ((Segment(kind, verify.seqs, k + 1, verify.context),) if verify.seqs else ()) + \
        ((Segment(kind, prefill.seqs, prefill.tokens, prefill.context),) if prefill is not None else ())
    out = [(first, 1)]
    seqs = verify.seqs + (prefill.seqs if prefill is not None else 0)
    if k > 1:
        out.append(((Segment(kind, seqs, 1, verify.context if verify.seqs else 0),), k - 1))
    return out
