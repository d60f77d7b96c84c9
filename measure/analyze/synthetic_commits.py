"""Synthetic commit traces with known answers: the tests' ground truth and a demo input for
`costmodel analyze` that needs no GPU.

Each regime spec fixes how content positions are first accepted (sequential, reversed,
block-sequential, random, or sequential with positional jitter), when the trailing EOS/pad positions
are accepted (first, last, never), how many re-noise events each canvas carries, the commit
entropy range and, optionally, an accuracy: a generation's latent quality u ~ U(0, 1) sets both its
commit entropy (higher u -> lower entropy -> higher confidence) and its correctness (correct when
u > 1 - accuracy, each label flipped with probability `label_noise`), so within a regime confidence
predicts correctness by construction.

The hook records it writes follow the run-directory schema: `accepted_positions` is the set
accepted at that call (every position accepted so far, minus the ones re-noised at that call),
`new_positions` the first acceptances, `renoised_positions` positions accepted before and re-noised
now (each is accepted again at the next call, so re-noise never changes the first-acceptance order).

    python -m measure.analyze.synthetic_commits RUNDIR   # a six-regime demo run, then: costmodel analyze RUNDIR -o OUT
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.modes import harness_modes
from costmodel.schemas.rundir import RunManifest, RunWriter

ORDERS = ("sequential", "reversed", "block", "random", "noisy")
PAD_WHEN = ("first", "last", "never")
EOS_TOKEN, PAD_TOKEN = 1, 0
PAD_ENTROPY_NATS = 1e-4


@dataclass(frozen=True)
class RegimeSpec:
    name: str
    order: str = "noisy"  # one of ORDERS
    content_lengths: tuple[int, int] = (150, 220)  # inclusive range, drawn per generation
    tokens_per_call: int = 1  # content positions first accepted per call (all orders but "block")
    block: int = 16  # positions per call for order "block" (the block-sequential control's ruler)
    jitter_positions: float = 20.0  # order "noisy": SD of the positional jitter before ranking
    pad: str = "first"  # when the trailing EOS/pad positions are accepted: one of PAD_WHEN
    pad_calls: int = 1  # pad "first": pads accepted right to left over this many calls before any content
    renoise_per_canvas: int = 0  # re-noise events injected into each canvas (distinct calls)
    entropy_nats: tuple[float, float] = (0.002, 0.012)  # commit entropy of the most / least confident generation
    accuracy: float | None = None  # fraction correct; None: the regime is not scored
    label_noise: float = 0.0  # probability that a correctness label is flipped
    canvas_positions: int = 256
    label: str = ""  # distinguishes two specs that share a regime name (goes into prompt and gen ids)

    def __post_init__(self):
        if self.order not in ORDERS or self.pad not in PAD_WHEN:
            raise ValueError(f"order must be one of {ORDERS}, pad one of {PAD_WHEN}")
        if min(self.tokens_per_call, self.block, self.pad_calls) < 1:
            raise ValueError("tokens_per_call, block and pad_calls must be >= 1")
        lo, hi = self.content_lengths
        if not (1 <= lo <= hi <= self.canvas_positions - 1):
            raise ValueError("content lengths must lie in [1, canvas_positions - 1] (room for the EOS)")


def content_first_calls(spec: RegimeSpec, length: int, rng: np.random.Generator) -> np.ndarray:
    """First-acceptance call of each content position 0..length-1 under the spec's order."""
    pos = np.arange(length)
    if spec.order == "block":
        return pos // spec.block
    if spec.order == "sequential":
        rank = pos
    elif spec.order == "reversed":
        rank = length - 1 - pos
    elif spec.order == "random":
        rank = rng.permutation(length)
    else:  # noisy
        rank = np.argsort(np.argsort(pos + rng.normal(0.0, spec.jitter_positions, length), kind="stable"), kind="stable")
    return rank // spec.tokens_per_call


def canvas_trace(spec: RegimeSpec, gen_id: str, length: int, entropy_base: float, rng: np.random.Generator) -> tuple[list[dict], dict]:
    """Commit rows and the generations row of one canvas."""
    first = content_first_calls(spec, length, rng)
    pads = np.arange(length, spec.canvas_positions)
    # first-acceptance call of each pad position (-1: never accepted)
    if spec.pad == "first":
        first = first + spec.pad_calls
        pad_first = (np.arange(pads.size)[::-1] * spec.pad_calls) // max(pads.size, 1)
    elif spec.pad == "last":
        pad_first = np.full(pads.size, int(first.max()) + 1)
    else:
        pad_first = np.full(pads.size, -1)
    n_calls = max(int(first.max()), int(pad_first.max(initial=-1))) + 1
    if spec.renoise_per_canvas > max(int(first.max()) - int(first.min()) - 1, 0):
        raise ValueError(f"{spec.name}: {spec.renoise_per_canvas} re-noise events need more calls with content than this canvas has")
    entropy = entropy_base * np.exp(rng.normal(0.0, 0.1, length))
    renoise_calls = np.arange(int(first.min()) + 1, int(first.max()))
    renoise_at = {int(c): None for c in rng.choice(renoise_calls, size=spec.renoise_per_canvas, replace=False)} if spec.renoise_per_canvas else {}
    for c in renoise_at:
        renoise_at[c] = int(rng.choice(np.flatnonzero(first < c)))
    rows = []
    for c in range(n_calls):
        acc = np.flatnonzero(first <= c)
        ren = [renoise_at[c]] if c in renoise_at else []
        acc = acc[~np.isin(acc, ren)]
        ent = np.where(first[acc] == c, entropy[acc], entropy[acc] * 0.5)
        pad_acc = pads[(pad_first >= 0) & (pad_first <= c)]
        acc = np.concatenate([acc, pad_acc])
        ent = np.concatenate([ent, np.full(pad_acc.size, PAD_ENTROPY_NATS)])
        new = np.flatnonzero(first == c).tolist() + pads[pad_first == c].tolist()
        rows.append({"gen_id": gen_id, "canvas": 0, "call": c, "cur_step": c, "accepted_positions": acc.tolist(), "accepted_entropy": ent.tolist(),
                     "new_positions": new, "renoised_positions": ren})
    tokens = np.concatenate([rng.integers(3, 262144, length), [EOS_TOKEN], np.full(spec.canvas_positions - length - 1, PAD_TOKEN)])
    gen = {"gen_id": gen_id, "canvas": 0, "steps": n_calls, "content_length": length, "final_tokens": tokens.astype(int).tolist(), "eos_positions": pads.tolist()}
    return rows, gen


def make_tables(specs: list[RegimeSpec], prompts: int = 10, seeds: int = 3, seed: int = 0, confirmatory_frac: float = 0.5) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(commits, generations) for every spec x prompt x seed; the last `confirmatory_frac` of each
    spec's prompts are the confirmatory split."""
    rng = np.random.default_rng(seed)
    commits, gens = [], []
    n_explore = prompts - int(round(prompts * confirmatory_frac))
    for spec in specs:
        lo_e, hi_e = spec.entropy_nats
        for p in range(prompts):
            prompt_id = f"{spec.name}{spec.label}-p{p:03d}"
            for s in range(seeds):
                gen_id = f"{prompt_id}-s{s}"
                length = int(rng.integers(spec.content_lengths[0], spec.content_lengths[1] + 1))
                u = rng.uniform()
                rows, gen = canvas_trace(spec, gen_id, length, hi_e - u * (hi_e - lo_e), rng)
                gen.update(regime=spec.name, prompt_id=prompt_id, seed=s, split="exploratory" if p < n_explore else "confirmatory")
                if spec.accuracy is not None:
                    correct = u > 1 - spec.accuracy
                    gen["correct"] = bool(correct != (rng.uniform() < spec.label_noise))
                commits.extend(rows)
                gens.append(gen)
    return pd.DataFrame(commits), pd.DataFrame(gens)


def write_run(path: str | Path, commits: pd.DataFrame, generations: pd.DataFrame, commit_source: str = "replay", weights: str = "checkpoint") -> Path:
    """Write the tables as a run directory (one unit per prompt) with `costmodel.schemas.rundir.RunWriter`.

    `commit_source` defaults to "replay": a synthetic trace is a constructed schedule, not the
    model's behaviour; tests pass "model" to exercise the report for a real-weights run."""
    prompts = list(dict.fromkeys(generations["prompt_id"]))
    mode = next(m for m in harness_modes() if m.harness == "canvas")  # commit traces are a canvas program's records
    manifest = RunManifest(run_id=f"synthetic-{Path(path).name}", kind="gpu", mode=mode.name, model="synthetic-commit-traces", weights=weights,
                           commit_source=commit_source, planned_units=prompts,
                           notes=["synthetic commit traces from measure.analyze.synthetic_commits (constructed with known answers), not a measurement"])
    with RunWriter(path, manifest) as w:
        for prompt in prompts:
            g = generations[generations["prompt_id"] == prompt]
            w.add("generations", g.to_dict("records"))
            w.add("commits", commits[commits["gen_id"].isin(set(g["gen_id"]))].to_dict("records"))
            w.finish_unit(prompt)
    return Path(path)


# A demo shaped loosely like the study's six regimes (orders and rates chosen by hand, not fitted);
# trailing pads are accepted right to left before any content, as the study's trap 1 describes.
_DEMO = [
    RegimeSpec("R1", "noisy", (150, 230), tokens_per_call=25, jitter_positions=45, renoise_per_canvas=2, accuracy=0.7, label_noise=0.15),
    RegimeSpec("R2", "noisy", (120, 220), tokens_per_call=23, jitter_positions=60, renoise_per_canvas=1, accuracy=0.6, label_noise=0.2),
    RegimeSpec("R3", "noisy", (100, 200), tokens_per_call=20, jitter_positions=30, renoise_per_canvas=1, accuracy=0.6, label_noise=0.2),
    RegimeSpec("R4", "noisy", (12, 40), tokens_per_call=6, jitter_positions=6, accuracy=0.95, label_noise=0.5, entropy_nats=(0.001, 0.004)),
    RegimeSpec("R5", "noisy", (150, 230), tokens_per_call=13, jitter_positions=40, renoise_per_canvas=3),
    RegimeSpec("R6", "random", (40, 120), tokens_per_call=9, accuracy=1.0),
]
DEMO_SPECS = [dataclasses.replace(s, pad_calls=6) for s in _DEMO]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m measure.analyze.synthetic_commits RUNDIR", file=sys.stderr)
        return 2
    commits, gens = make_tables(DEMO_SPECS, prompts=20, seeds=5, seed=0)
    path = write_run(args[0], commits, gens)
    print(f"wrote a synthetic (replay) run of {len(gens)} generations to {path}; next: costmodel analyze {path} -o {path}-analysis")
    return 0


if __name__ == "__main__":
    sys.exit(main())
