"""Workloads: when requests arrive, how long their prompts and outputs are, and which regime each
belongs to. A workload is a plain JSON file a user writes by hand; every field is optional.

    {
      "arrival": "poisson",                 // "poisson" | "constant" | {"process": "gamma", "cv": 3.0}
      "regime_mix": {"R1": 2, "R4": 1},     // weights, normalised; default: every regime of the profile equally
      "prompt_tokens": {"dist": "lognormal", "median": 512, "sigma": 0.6, "min": 16, "max": 4096},
      "output_tokens": "regime",            // "regime" (default) | a number | a distribution object
      "trace": "trace.csv",                 // optional: replay requests from a CSV or JSONL file
      "trace_time_scale": "qps",            // "qps" (default): rescale the trace to --qps | "recorded"
      "system_prompt": {"tokens": 1000, "apps": 4},  // optional: a shared system prompt per app (prefix caching)
      "sessions": {"turns": 5, "think_s": 20},       // optional: multi-turn chats (history grows turn by turn)
      "trace_hash_block_tokens": 512        // tokens per trace `hash_ids` entry (Mooncake's 512)
    }

Length distributions (`prompt_tokens`, `output_tokens`): a number (constant), or an object with
`dist` one of `constant` {value}, `lognormal` {median, sigma, min?, max?}, `uniform` {min, max}
(integers, inclusive), `empirical` {values, probs}. Draws are rounded to integers >= 1.

`output_tokens: "regime"` draws each request's output length from its regime's `content_length` in
the profile's commit statistics, so diffusion, AR and MTP produce the same tokens for the same
request (the seed fixes the workload independently of the mode and of the replica count).

Arrivals at rate `qps`: poisson (exponential gaps), constant (gaps 1/qps), gamma (gaps gamma
distributed with mean 1/qps and coefficient of variation `cv`: cv > 1 is burstier than Poisson;
`vllm bench serve --burstiness B` is gamma of shape B, cv = 1 / sqrt(B): `with_burstiness`).

Closed-loop clients (`concurrency` N, as `vllm bench serve --max-concurrency N`): at most N requests
are in flight; a request whose arrival time has come waits, in arrival order, until one finishes
and is sent then (sim.py runs the gate; `Requests.arrival_s` becomes the send times, what every
latency is measured from, as vllm bench measures them). Any arrival process above composes with
it; without a rate every request is ready at 0, so each finish sends the next request at once (N
clients, each sending its next request when its previous one finishes).

Trace replay: CSV with a header, or JSONL with one object per line. Columns: `arrival_s` (or
`timestamp_s` / `timestamp`: seconds, any origin; sorted and shifted to start at 0) and
`prompt_tokens` are required; `output_tokens` and `regime` are optional (drawn from the workload's
`output_tokens` / `regime_mix` where absent). A relative trace path is relative to the workload
file. `trace_time_scale: "qps"` stretches the timestamps so the mean rate equals the requested QPS
(keeping the trace's burstiness); `"recorded"` replays them as they are (then give no QPS). When
more requests or a longer duration are asked for than the trace holds, the trace repeats.

Shared prefixes (what vLLM's prefix cache hits: simulate/kvcache.py; the content is synthesised
deterministically from this description, simulate/prefix.py). `system_prompt`: every request opens
with its app's system prompt of `tokens` tokens (apps drawn uniformly from `apps`), then its own
message of `prompt_tokens`. `sessions`: arrivals start chats (at QPS / turns, so requests arrive at
QPS); each chat has `turns` turns, turn t+1 arriving an exponential think time (mean `think_s`)
after turn t arrived (open loop: the user does not wait for the reply); a turn's prompt is the
system prompt, every earlier turn's message and reply, and its new message of `prompt_tokens`.
A trace may carry `hash_ids` (Mooncake JSONL: `timestamp` in ms, `input_length`, `output_length`,
`hash_ids`, each naming `trace_hash_block_tokens` prompt tokens; a list longer than the prompt's
blocks is refused) or `session_id` (or `Session ID`, `conversation_id`) with an optional `turn`
(conversation logs; BurstGPT's `Timestamp`, `Request tokens`, `Response tokens` columns are read as
arrival_s, prompt_tokens, output_tokens): a turn's prompt repeats the previous turn's prompt and reply as far as it is long enough; turns out
of order in time are refused).
"""

from __future__ import annotations

import json
import math
import numbers
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from costmodel.errors import UserError
from costmodel.fields import APPS, GAMMA_CV, LENGTH_MEDIAN, LOGNORMAL_SIGMA, THINK_S, TOKENS, TRACE_SPAN_S, TURNS, WEIGHT, Field
from costmodel.jsonfile import read_csv, read_json
from costmodel.options import check_burstiness, check_concurrency, check_rate
from costmodel.schemas.profile import Profile
from costmodel.seeding import rng_for
from simulate import prefix as PX

if TYPE_CHECKING:
    import pandas as pd

ARRIVALS = ("poisson", "constant", "gamma")
# a closed loop with no rate and no --requests: at least this many requests per client (and DEFAULT_MIN_REQUESTS)
DEFAULT_CLOSED_PER_CLIENT = 10
DISTS = ("constant", "lognormal", "uniform", "empirical")
TIME_SCALES = ("qps", "recorded")
# Default prompt length (ASSUMED, stated in docs/simulator.md): chat prompts with a system prompt,
# a few hundred to a few thousand tokens.
DEFAULT_PROMPT = {"dist": "lognormal", "median": 512, "sigma": 0.6, "min": 16, "max": 4096}
# Defaults when neither --requests nor --duration is given: 300 s of arrivals, at least 1000 requests.
DEFAULT_DURATION_S = 300.0
DEFAULT_MIN_REQUESTS = 1000
# Memory bound of a run: the peak resident memory a point adds per request and per replica
# (benchmarks/bench_memory.py measures it: 0.5-1.6 KiB per request by mode at 200,000 requests, about
# 3.4 KiB per replica) rounded up; a run whose estimate exceeds the budget is refused before it
# allocates anything, so memory stays flat however long a run is asked for.
BYTES_PER_REQUEST = 2048
BYTES_PER_REPLICA = 4096
DEFAULT_MEMORY_BUDGET_GIB = 4.0
BUDGET_ENV = "COSTMODEL_MEMORY_BUDGET_GIB"
# RNG stream ids: each purpose draws from its own stream, so e.g. the output lengths of request i
# do not depend on the arrival process or on the mode.
STREAM_ARRIVAL, STREAM_PROMPT, STREAM_OUTPUT, STREAM_REGIME, STREAM_APP, STREAM_THINK = 1, 2, 3, 4, 5, 6
MOONCAKE_HASH_BLOCK = 512  # tokens per Mooncake hash_ids entry (the trace's block size)


@dataclass(frozen=True)
class LengthSpec:
    """A token-length distribution (see the module docstring)."""

    dist: str
    params: tuple = ()  # sorted (key, value) pairs, so the spec is hashable and picklable

    @property
    def p(self) -> dict:
        return dict(self.params)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        p = self.p
        if self.dist == "constant":
            x = np.full(n, float(p["value"]))
        elif self.dist == "lognormal":
            x = np.exp(np.log(p["median"]) + p["sigma"] * rng.standard_normal(n))
            x = np.clip(x, p.get("min", 1), p.get("max", np.inf))
        elif self.dist == "uniform":
            x = rng.integers(int(p["min"]), int(p["max"]) + 1, size=n).astype(float)
        else:  # empirical
            x = rng.choice(np.asarray(p["values"], float), size=n, p=np.asarray(p["probs"], float))
        return np.maximum(1, np.rint(x)).astype(np.int64)

    def describe(self) -> str:
        p = self.p
        if self.dist == "constant":
            return f"{p['value']:g}"
        if self.dist == "lognormal":
            return f"lognormal(median {p['median']:g}, sigma {p['sigma']:g})"
        if self.dist == "uniform":
            return f"uniform[{p['min']:g}, {p['max']:g}]"
        return f"empirical({len(p['values'])} values)"


@dataclass(frozen=True)
class SharedPrefix:
    """Prefix sharing of a synthetic workload: a system prompt per app, multi-turn sessions."""

    system_tokens: int = 0
    apps: int = 1
    turns: int = 1
    think_s: float = 0.0

    def describe(self) -> str:
        parts = [f"system prompt {self.system_tokens} tokens x {self.apps} app(s)"] if self.system_tokens else []
        if self.turns > 1:
            parts.append(f"sessions of {self.turns} turns, think {self.think_s:g} s")
        return ", ".join(parts)

    def prompt_bound(self, own_max: float, out_max: float) -> float:
        """The longest prompt: the system prompt, every earlier turn and reply, the last message."""
        return self.system_tokens + self.turns * own_max + (self.turns - 1) * out_max


@dataclass(frozen=True)
class Workload:
    """A parsed, validated workload. `output` None means: from each regime's content_length."""

    arrival: str = "poisson"
    cv: float = 1.0
    regime_mix: tuple = ()  # ((regime, weight), ...); () = every regime of the profile equally
    prompt: LengthSpec = field(default_factory=lambda: parse_length(DEFAULT_PROMPT, "prompt_tokens", "default"))
    output: LengthSpec | None = None
    trace: "Trace | None" = None
    trace_time_scale: str = "qps"
    source: str = "default"
    prefix: SharedPrefix | None = None  # shared system prompts / sessions (None: every prompt distinct)
    trace_hash_block_tokens: int = MOONCAKE_HASH_BLOCK

    @property
    def recorded_rate(self) -> bool:
        return self.trace is not None and self.trace_time_scale == "recorded"

    def describe(self, concurrency: int = 0, rate_limited: bool = True) -> str:
        """What the workload is; `concurrency` > 0: the arrivals gated by that many closed-loop
        clients (`rate_limited` False: with no rate, every request ready at once)."""
        loop = "closed loop (at most `concurrency` requests in flight, the next sent when one finishes), " if concurrency else ""
        if self.trace is not None:
            return f"{loop}trace {self.trace.path} ({len(self.trace.arrival_s)} requests, {self.trace_time_scale} time)"
        arr = f"gamma(cv {self.cv:g}, burstiness {1 / self.cv ** 2:.3g})" if self.arrival == "gamma" else self.arrival
        arr = f"{arr} arrivals" if rate_limited else "no rate limit"
        out = self.output.describe() if self.output else "per regime"
        pre = f"; {self.prefix.describe()}" if self.prefix else ""
        return f"{loop}{arr}; prompt {self.prompt.describe()}; output {out}{pre}"


@dataclass(frozen=True)
class Trace:
    path: str
    arrival_s: tuple  # shifted to start at 0, sorted
    prompt_tokens: tuple
    output_tokens: tuple | None  # None: the column is absent
    regime: tuple | None
    hash_ids: tuple | None = None  # per row: prefix-block hashes (Mooncake), or None
    session: tuple | None = None  # per row: session id (conversation logs), or None

    @property
    def recorded_qps(self) -> float:
        span = self.arrival_s[-1] - self.arrival_s[0] if len(self.arrival_s) > 1 else 0.0
        return (len(self.arrival_s) - 1) / span if span > 0 else 0.0


@dataclass
class Requests:
    """The requests of one run, as arrays (arrival order), independent of mode and replicas."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    regime_idx: np.ndarray
    regimes: tuple  # regime names, indexed by regime_idx
    window_s: float  # the arrival window: arrivals happen in [0, window_s]
    qps: float  # the offered rate (the requested QPS, or a recorded trace's own rate)
    # per-request behaviour an engine recorded, replayed instead of the mode's random draws
    # (simulate/validate/vllm): name -> one sequence per request, e.g. "steps_per_canvas" (diffusion: denoising
    # steps of each canvas), "tokens_per_step" (MTP: tokens emitted by each verify step)
    recorded: dict | None = None
    # per request its prompt content as segments ((id, tokens), ...: simulate/prefix.py), what its KV
    # blocks' hashes are made of for prefix caching; None: no two requests share content
    content: list | None = None
    # closed-loop clients: at most this many requests in flight, each later one sent when one finishes
    # (sim.py; arrival_s holds the times each becomes ready and, after the run, when it was sent); 0: open loop
    concurrency: int = 0

    def __len__(self) -> int:
        return len(self.arrival_s)


# ---- parsing -----------------------------------------------------------------------------------

PROB = Field("probs[]", 0, 1, example="0.5")


def _num(v, field: Field, what: str, where: str) -> float:
    """A workload number checked as its declared field (costmodel/fields.py), named as written."""
    if isinstance(v, str):  # "512" in a JSON file is a string, not a number
        raise UserError(f"{where}: {what} must be a number, got {v!r}", field.named(what)._fix())
    return float(field.named(what).check(v, where))


def parse_length(spec, what: str, where: str) -> LengthSpec:
    """A number or a distribution object -> LengthSpec (one-line errors naming the field)."""
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        return LengthSpec("constant", (("value", _num(spec, TOKENS, what, where)),))
    if not isinstance(spec, dict):
        raise UserError(f"{where}: {what} must be a number or an object with \"dist\", got {spec!r}", f"e.g. \"{what}\": {json.dumps(DEFAULT_PROMPT)}")
    dist = spec.get("dist")
    if dist not in DISTS:
        raise UserError(f"{where}: {what}.dist {dist!r} is unknown", f"use one of {', '.join(DISTS)}")
    allowed = {"constant": {"value"}, "lognormal": {"median", "sigma", "min", "max"}, "uniform": {"min", "max"},
               "empirical": {"values", "probs"}}[dist]
    extra = set(spec) - allowed - {"dist"}
    if extra:
        raise UserError(f"{where}: {what} ({dist}) has unknown field(s) {', '.join(sorted(extra))}", f"{dist} takes {', '.join(sorted(allowed))}")
    w = f"{what} ({dist})"
    if dist == "constant":
        if "value" not in spec:
            raise UserError(f"{where}: {w} needs \"value\"", "e.g. {\"dist\": \"constant\", \"value\": 256}")
        return LengthSpec(dist, (("value", _num(spec["value"], TOKENS, f"{what}.value", where)),))
    if dist == "lognormal":
        for k in ("median", "sigma"):
            if k not in spec:
                raise UserError(f"{where}: {w} needs \"{k}\"", "e.g. {\"dist\": \"lognormal\", \"median\": 512, \"sigma\": 0.6}")
        p = {"median": _num(spec["median"], LENGTH_MEDIAN, f"{what}.median", where),
             "sigma": _num(spec["sigma"], LOGNORMAL_SIGMA, f"{what}.sigma", where)}
        p["min"] = _num(spec.get("min", 1), TOKENS, f"{what}.min", where)
        p["max"] = _num(spec.get("max", TOKENS.hi), TOKENS, f"{what}.max", where)
        if p["min"] > p["max"]:
            raise UserError(f"{where}: {what}.min {p['min']:g} exceeds max {p['max']:g}", "swap them")
        return LengthSpec(dist, tuple(sorted(p.items())))
    if dist == "uniform":
        for k in ("min", "max"):
            if k not in spec:
                raise UserError(f"{where}: {w} needs \"{k}\"", "e.g. {\"dist\": \"uniform\", \"min\": 64, \"max\": 512}")
        lo, hi = _num(spec["min"], TOKENS, f"{what}.min", where), _num(spec["max"], TOKENS, f"{what}.max", where)
        if lo > hi:
            raise UserError(f"{where}: {what}.min {lo:g} exceeds max {hi:g}", "swap them")
        return LengthSpec(dist, (("max", hi), ("min", lo)))
    vals, probs = spec.get("values"), spec.get("probs")
    if not isinstance(vals, list) or not isinstance(probs, list) or not vals or len(vals) != len(probs):
        raise UserError(f"{where}: {w} needs equal-length, non-empty \"values\" and \"probs\" lists", "e.g. {\"dist\": \"empirical\", \"values\": [64, 512], \"probs\": [0.5, 0.5]}")
    v = tuple(_num(x, TOKENS, f"{what}.values[{i}]", where) for i, x in enumerate(vals))
    pr = tuple(_num(x, PROB, f"{what}.probs[{i}]", where) for i, x in enumerate(probs))
    if not math.isclose(sum(pr), 1.0, rel_tol=1e-6, abs_tol=1e-6):
        raise UserError(f"{where}: {what}.probs sum to {sum(pr):g}, not 1", "normalise them")
    return LengthSpec(dist, (("probs", pr), ("values", v)))


def parse_workload(d, where: str = "workload", base_dir: Path | None = None) -> Workload:
    """A workload JSON object -> Workload. Unknown fields are errors (a typo must not be ignored)."""
    if not isinstance(d, dict):
        raise UserError(f"{where} is not a JSON object", "write an object such as {\"arrival\": \"poisson\"}")
    known = {"arrival", "regime_mix", "prompt_tokens", "output_tokens", "trace", "trace_time_scale", "description", "system_prompt", "sessions",
             "trace_hash_block_tokens"}
    extra = set(d) - known
    if extra:
        raise UserError(f"{where} has unknown field(s) {', '.join(sorted(extra))}", f"fields are {', '.join(sorted(known))}")
    arrival, cv = d.get("arrival", "poisson"), 1.0
    if isinstance(arrival, dict):
        bad = set(arrival) - {"process", "cv"}
        if bad:
            raise UserError(f"{where}: arrival has unknown field(s) {', '.join(sorted(bad))}", "arrival takes process and cv")
        proc = arrival.get("process")
        if proc == "gamma":
            if "cv" not in arrival:
                raise UserError(f"{where}: gamma arrivals need \"cv\" (coefficient of variation of the gaps)", "e.g. {\"process\": \"gamma\", \"cv\": 3}")
            cv = _num(arrival["cv"], GAMMA_CV, "arrival.cv", where)
        elif "cv" in arrival:
            raise UserError(f"{where}: arrival.cv applies to gamma arrivals only, not {proc!r}", "drop cv or use \"process\": \"gamma\"")
        arrival = proc
    if arrival not in ARRIVALS:
        raise UserError(f"{where}: arrival {arrival!r} is unknown", f"use one of {', '.join(ARRIVALS)} (gamma as {{\"process\": \"gamma\", \"cv\": 3}})")
    if arrival == "gamma" and not isinstance(d.get("arrival"), dict):
        raise UserError(f"{where}: gamma arrivals need a cv", "write \"arrival\": {\"process\": \"gamma\", \"cv\": 3}")
    mix = d.get("regime_mix", {})
    if not isinstance(mix, dict):
        raise UserError(f"{where}: regime_mix must be an object of regime -> weight", "e.g. {\"R1\": 1, \"R4\": 2}")
    mix_t = tuple((str(k), _num(v, WEIGHT, f"regime_mix.{k}", where)) for k, v in mix.items())
    if mix_t and sum(w for _, w in mix_t) <= 0:
        raise UserError(f"{where}: regime_mix weights sum to 0", "give at least one positive weight")
    prompt = parse_length(d.get("prompt_tokens", DEFAULT_PROMPT), "prompt_tokens", where)
    out_spec = d.get("output_tokens", "regime")
    output = None if out_spec == "regime" else parse_length(out_spec, "output_tokens", where)
    scale = d.get("trace_time_scale", "qps")
    if scale not in TIME_SCALES:
        raise UserError(f"{where}: trace_time_scale {scale!r} is unknown", f"use one of {', '.join(TIME_SCALES)}")
    trace = None
    if d.get("trace") is not None:
        if not isinstance(d["trace"], str):
            raise UserError(f"{where}: trace must be a file path string", "e.g. \"trace\": \"requests.csv\"")
        tp = Path(d["trace"])
        if not tp.is_absolute() and base_dir is not None:
            tp = base_dir / tp
        trace = load_trace(tp)
    elif "trace_time_scale" in d:
        raise UserError(f"{where}: trace_time_scale is set but there is no trace", "add \"trace\" or drop trace_time_scale")
    prefix = _parse_prefix(d, where, trace is not None)
    hb = d.get("trace_hash_block_tokens", MOONCAKE_HASH_BLOCK)
    if isinstance(hb, bool) or not isinstance(hb, int) or hb < 1:
        raise UserError(f"{where}: trace_hash_block_tokens {hb!r} must be an integer >= 1", "Mooncake traces name blocks of 512 tokens")
    if trace is not None and trace.hash_ids is not None:
        _check_hash_lists(trace, hb, where)
    return Workload(arrival=arrival, cv=cv, regime_mix=mix_t, prompt=prompt, output=output, trace=trace,
                    trace_time_scale=scale, source=where, prefix=prefix, trace_hash_block_tokens=hb)


def _parse_prefix(d: dict, where: str, has_trace: bool) -> SharedPrefix | None:
    """system_prompt {tokens, apps} and sessions {turns, think_s} -> SharedPrefix (None: neither)."""
    sp, ss = d.get("system_prompt"), d.get("sessions")
    if sp is None and ss is None:
        return None
    if has_trace:
        raise UserError(f"{where}: system_prompt and sessions describe synthetic requests, not a trace",
                        "give the trace hash_ids or session_id columns instead")
    vals = {}
    fields = {"tokens": TOKENS, "apps": APPS, "turns": TURNS, "think_s": THINK_S}
    for name, obj, keys in (("system_prompt", sp, {"tokens": 1, "apps": 1}), ("sessions", ss, {"turns": 1, "think_s": 0})):
        if obj is None:
            continue
        if not isinstance(obj, dict) or set(obj) - set(keys):
            raise UserError(f"{where}: {name} must be an object with {' and '.join(keys)}", f"e.g. \"{name}\": {json.dumps({k: 4 for k in keys})}")
        for k in keys:
            v = obj.get(k, 1 if k in ("apps", "turns") else None)
            if v is None:
                raise UserError(f"{where}: {name}.{k} is missing", f"e.g. \"{name}\": {json.dumps({k: 4 for k in keys})}")
            vals[k] = _num(v, fields[k], f"{name}.{k}", where)
    return SharedPrefix(system_tokens=int(vals.get("tokens", 0)), apps=int(vals.get("apps", 1)), turns=int(vals.get("turns", 1)),
                        think_s=float(vals.get("think_s", 0.0)))


def _check_hash_lists(tr: "Trace", block: int, where: str) -> None:
    """A row's hash_ids may name at most ceil(prompt / block) blocks."""
    for i, (h, p) in enumerate(zip(tr.hash_ids, tr.prompt_tokens)):
        if h is not None and len(h) > -(-p // block):
            raise UserError(f"{where}: trace {tr.path} request {i + 1} (in arrival order) has {len(h)} hash_ids for {p} prompt tokens, more "
                            f"than its {-(-p // block)} blocks of {block} tokens", "fix the trace, or set trace_hash_block_tokens to its block size")


def load_workload(path: str | Path) -> Workload:
    p = Path(path)
    return parse_workload(read_json(p, "workload"), f"workload {p}", p.parent)


def _plain(v):
    """A cell as Python (0, not np.int64(0)) for an error message."""
    return v.item() if isinstance(v, np.generic) else v


def load_trace(path: Path) -> Trace:
    """Read a CSV/JSONL request trace (columns in the module docstring) with one-line errors."""
    import pandas as pd  # the table library, where a trace table is read (issue 40: a command imports what it runs)

    where = f"trace {path}"
    if not path.exists():
        raise UserError(f"{where} does not exist", "check the path (relative paths are relative to the workload file)")
    suffix = path.suffix.lower()
    try:
        if suffix in (".jsonl", ".ndjson"):
            df = pd.read_json(path, lines=True)
        elif suffix == ".csv":
            df = read_csv(path, "trace")  # a column named twice refused, a BOM read as UTF-8's
        else:
            raise UserError(f"{where} is neither .csv nor .jsonl", "give the trace a .csv or .jsonl name")
    except UserError:
        raise
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise UserError(f"{where} could not be parsed ({str(e).splitlines()[0] if str(e) else e.__class__.__name__})", "fix the file") from None
    if len(df) == 0:
        raise UserError(f"{where} holds no requests", "give at least one row")
    if "Request tokens" in df.columns and "prompt_tokens" not in df.columns:  # BurstGPT: Timestamp in s
        df = df.rename(columns={"Timestamp": "arrival_s", "Request tokens": "prompt_tokens", "Response tokens": "output_tokens"})
    for alias in ("Session ID", "conversation_id"):
        if alias in df.columns and "session_id" not in df.columns:
            df = df.rename(columns={alias: "session_id"})
    if "input_length" in df.columns and "prompt_tokens" not in df.columns:  # Mooncake: timestamp in ms
        df = df.rename(columns={"input_length": "prompt_tokens", "output_length": "output_tokens"})
        if "timestamp" in df.columns:
            df = df.assign(arrival_s=pd.to_numeric(df["timestamp"], errors="coerce") / 1e3).drop(columns=["timestamp"])
    tcol = next((c for c in ("arrival_s", "timestamp_s", "timestamp") if c in df.columns), None)
    if tcol is None or "prompt_tokens" not in df.columns:
        raise UserError(f"{where} lacks column(s) {'arrival_s' if tcol is None else ''}{' prompt_tokens' if 'prompt_tokens' not in df.columns else ''}".replace("  ", " "),
                        "columns: arrival_s (or timestamp_s), prompt_tokens, optional output_tokens and regime")

    def ints(col):
        x = pd.to_numeric(df[col], errors="coerce").to_numpy(float)
        bad = ~np.isfinite(x) | (x < 1) | (x != np.round(x))
        if bad.any():
            i = int(np.argmax(bad))
            raise UserError(f"{where}: row {i + 1} has {col} {_plain(df[col].iloc[i])!r}, not an integer >= 1", "fix the trace")
        return tuple(int(v) for v in x)

    t = pd.to_numeric(df[tcol], errors="coerce").to_numpy(float)
    if not np.isfinite(t).all():
        i = int(np.argmax(~np.isfinite(t)))
        raise UserError(f"{where}: row {i + 1} has {tcol} {_plain(df[tcol].iloc[i])!r}, not a number of seconds", "fix the trace")
    _check_span(t, tcol, where)
    _check_sorted(t, tcol, where)
    order = np.argsort(t, kind="stable")
    take = lambda tup: tuple(tup[i] for i in order)  # noqa: E731
    prompt = take(ints("prompt_tokens"))
    out = take(ints("output_tokens")) if "output_tokens" in df.columns else None
    reg = take(tuple(str(v) for v in df["regime"])) if "regime" in df.columns else None
    ts = t[order] - t[order][0]
    hashes = take(_hash_lists(df, where)) if "hash_ids" in df.columns else None
    session = take(tuple(str(v) for v in df["session_id"])) if "session_id" in df.columns else None
    if session is not None and "turn" in df.columns:
        _check_turn_order(session, take(ints("turn")), where)
    return Trace(str(path), tuple(float(v) for v in ts), prompt, out, reg, hashes, session)


def _check_sorted(t: np.ndarray, col: str, where: str) -> None:
    """Never sorted silently: a trace out of order is a trace edited by hand or joined wrongly."""
    back = np.flatnonzero(np.diff(t) < 0)
    if len(back):
        i = int(back[0])
        raise UserError(f"{where}: row {i + 2} ({col} {t[i + 1]:g}) is before row {i + 1} ({t[i]:g}): the trace is not sorted by arrival",
                        f"sort it by {col}")


def _check_span(t: np.ndarray, col: str, where: str) -> None:
    """A trace's first to last timestamp within TRACE_SPAN_S (a typo of exponents, not a trace)."""
    span = float(t.max() - t.min()) if len(t) else 0.0
    if not span <= TRACE_SPAN_S.hi:
        med = float(np.median(t))
        i = int(np.argmax(t)) if t.max() - med >= med - t.min() else int(np.argmin(t))
        raise UserError(f"{where}: {col} spans {span:.3g} s (row {i + 1}: {_plain(t[i]):g}), above {TRACE_SPAN_S.hi / 86400:g} days "
                        f"({TRACE_SPAN_S.why})", f"fix row {i + 1}'s {col} (seconds; a Mooncake timestamp is in ms)")


def _hash_lists(df: "pd.DataFrame", where: str) -> tuple:
    """The hash_ids column: per row a list of integers >= 0 (or empty / missing)."""
    out = []
    for i, v in enumerate(df["hash_ids"]):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out.append(())
            continue
        if isinstance(v, str):
            try:
                v = json.loads(v)
            except json.JSONDecodeError:
                v = None
        ok = isinstance(v, list) and all(isinstance(h, numbers.Integral) and not isinstance(h, bool) and 0 <= h < (1 << 36) for h in v)
        if not ok:
            raise UserError(f"{where}: row {i + 1} has hash_ids {_plain(df['hash_ids'].iloc[i])!r}, not a list of integers in [0, 2**36)",
                            "fix the trace (Mooncake: \"hash_ids\": [46, 47, 48])")
        out.append(tuple(int(h) for h in v))
    return tuple(out)


def _check_turn_order(session: tuple, turn: tuple, where: str) -> None:
    """Within a session the turns must come in time order."""
    last: dict = {}
    for i, (s, t) in enumerate(zip(session, turn)):
        if s in last and t <= last[s][0]:
            raise UserError(f"{where}: session {s!r} has turn {t} at request {i + 1} (in time order) after turn {last[s][0]} at request "
                            f"{last[s][1] + 1}: turns out of order", "fix the timestamps or the turn numbers")
        last[s] = (t, i)


# ---- requests a replica cannot serve -----------------------------------------------------------
# An unclipped lognormal length is bounded by its 1 - 1e-6 quantile (z = 4.75): a workload whose
# draws pass the limit more often than that is refused, not simulated with requests vLLM would reject.
LOGNORMAL_Z = 4.753


def length_bound(spec: LengthSpec) -> float:
    """The longest length `spec` draws (a lognormal with no max: its 1 - 1e-6 quantile, clipped)."""
    p = spec.p
    if spec.dist == "constant":
        return p["value"]
    if spec.dist in ("uniform",):
        return p["max"]
    if spec.dist == "empirical":
        return max(p["values"])
    return max(p.get("min", 1), min(p.get("max", math.inf), p["median"] * math.exp(LOGNORMAL_Z * p["sigma"])))


def _output_bound(profile: Profile, wl: Workload) -> tuple[float, str]:
    if wl.output is not None:
        return length_bound(wl.output), f"output_tokens {wl.output.describe()}"
    lengths = [max(cs.content_length.values) for cs in profile.regimes.values()]
    return (max(lengths), "output_tokens of the profile's regimes") if lengths else (0.0, "")


def check_fits(profile: Profile, wl: Workload | None, limit_tokens: int, why: str, mode: str) -> None:
    """Refuse a workload with a request longer (prompt + output) than one replica serves: a trace row
    by row, a distribution by its largest draw. `why` names the limit (costmodel.memory.request_limit)."""
    wl = wl or Workload()
    out_max, out_what = _output_bound(profile, wl)
    fix = f"keep prompt + output <= {limit_tokens:,} tokens"
    if wl.trace is not None:
        prompt = np.asarray(wl.trace.prompt_tokens, float)
        out = np.asarray(wl.trace.output_tokens, float) if wl.trace.output_tokens is not None else np.full(len(prompt), out_max)
        total = prompt + out
        if total.max() > limit_tokens:
            i = int(np.argmax(total > limit_tokens))
            raise UserError(f"{wl.source}: trace {wl.trace.path} request {i + 1} (in arrival order) has prompt_tokens {int(prompt[i]):,} + "
                            f"output_tokens {int(out[i]):,} = {int(total[i]):,}, above {why} ({mode})", f"{fix}: shorten or drop it")
        return
    p_max = length_bound(wl.prompt)
    if wl.prefix is not None:
        p_max = wl.prefix.prompt_bound(p_max, out_max)
    if p_max + out_max > limit_tokens:
        raise UserError(f"{wl.source}: requests reach prompt_tokens {p_max:,.0f} ({wl.prompt.describe()}) + {out_max:,.0f} "
                        f"({out_what}) = {p_max + out_max:,.0f} tokens, above {why} ({mode})",
                        f"{fix}: lower the lengths or give the distributions a \"max\"")


# ---- drawing a run's requests -------------------------------------------------------------------

def _regime_names(profile: Profile, workload: Workload) -> tuple[tuple, np.ndarray]:
    known = tuple(sorted(profile.regimes))
    if workload.regime_mix:
        names = tuple(r for r, _ in workload.regime_mix)
        for r in names:
            if r not in profile.regimes:
                raise UserError(f"{workload.source}: regime_mix names regime {r!r}, which profile {profile.profile_id} lacks",
                                f"use {', '.join(known) or 'no regimes (the profile has no commit_stats)'}")
        w = np.array([w for _, w in workload.regime_mix], float)
        return names, w / w.sum()
    if not known:
        return ("-",), np.array([1.0])
    return known, np.full(len(known), 1.0 / len(known))


def _gaps(workload: Workload, rng: np.random.Generator, n: int) -> np.ndarray:
    """n inter-arrival gaps at rate 1 (scaled by 1/qps later, so QPS only stretches time)."""
    if workload.arrival == "poisson":
        return rng.standard_exponential(n)
    if workload.arrival == "constant":
        return np.ones(n)
    shape = 1.0 / workload.cv ** 2
    return rng.standard_gamma(shape, n) / shape


def with_burstiness(workload: Workload | None, burstiness: float, where: str = "--burstiness") -> Workload:
    """The workload with `vllm bench serve --burstiness B` arrivals: gamma gaps of shape B, mean 1/qps
    (cv = 1 / sqrt(B)); B = 1 is Poisson (drawn as the poisson process, so its arrivals are those of
    the default workload). Refused over a workload that sets its own arrival process or replays a trace."""
    wl = workload or Workload()
    b = check_burstiness(burstiness, where)
    if wl.trace is not None:
        raise UserError(f"{where} shapes drawn arrival gaps, but {wl.source} replays a trace", f"drop {where} (the trace's times are its own)")
    if wl.arrival != "poisson":
        raise UserError(f"{where} {b:g} and {wl.source}'s arrival {wl.arrival!r} both set the arrival process", f"give one: drop {where} or the workload's \"arrival\"")
    if b == 1.0:
        return wl
    return replace(wl, arrival="gamma", cv=1.0 / math.sqrt(b))


def build_requests(profile: Profile, workload: Workload | None, qps: float | None, *, n_requests: int | None = None,
                   duration_s: float | None = None, seed: int = 0, concurrency: int | None = None) -> Requests:
    """Draw the run's requests. Exactly one of n_requests / duration_s may be given; with neither,
    DEFAULT_DURATION_S of arrivals (at least DEFAULT_MIN_REQUESTS requests), or a trace once.
    `concurrency` N: closed-loop clients, at most N in flight (module docstring); with qps None every
    request is ready at 0 (no rate limit) and the run is n_requests long (default: at least
    DEFAULT_CLOSED_PER_CLIENT per client and DEFAULT_MIN_REQUESTS)."""
    wl = workload or Workload()
    _check_length(n_requests, duration_s)
    cap = check_concurrency(concurrency) if concurrency is not None else 0
    unlimited = unlimited_closed_loop(wl, qps, cap, duration_s)
    check_run_size(expected_requests(wl, qps, n_requests, duration_s, concurrency))
    qps = math.inf if unlimited else _rate(wl, qps)
    names, probs = _regime_names(profile, wl)
    tidx = sess = None
    if unlimited:
        arr = np.zeros(int(n_requests) if n_requests is not None else closed_default_requests(cap))
        prompt, out_tr, reg_tr = wl.prompt.sample(rng_for(seed, STREAM_PROMPT), len(arr)), None, None
    elif wl.trace is not None:
        arr, prompt, out_tr, reg_tr, tidx = _trace_arrays(wl, qps, n_requests, duration_s, seed)
    else:
        if n_requests is None and duration_s is None:
            duration_s = max(DEFAULT_DURATION_S, DEFAULT_MIN_REQUESTS / qps)
        if wl.prefix is not None and wl.prefix.turns > 1:
            arr, sess = _session_arrivals(wl, qps, n_requests, duration_s, seed)
        else:
            arr = _arrivals(wl, qps, n_requests, duration_s, seed)
        prompt, out_tr, reg_tr = wl.prompt.sample(rng_for(seed, STREAM_PROMPT), len(arr)), None, None
    n = len(arr)
    if reg_tr is not None:
        names, regime_idx = _trace_regimes(profile, wl, names, reg_tr)
    else:
        regime_idx = rng_for(seed, STREAM_REGIME).choice(len(names), size=n, p=probs).astype(np.int64)
    output = _outputs(profile, wl, out_tr, names, regime_idx, seed)
    window = float(duration_s) if duration_s is not None else float(arr[-1]) if n else 0.0
    prompt = np.asarray(prompt, np.int64)
    content = _content(wl, prompt, output, tidx, sess, seed)
    return Requests(np.asarray(arr, float), prompt, output, regime_idx, names, window, qps, content=content, concurrency=cap)


def given_requests(profile: Profile, prompt_tokens, output_tokens, *, arrival_s=None, qps: float | None = None, burstiness: float = 1.0,
                   concurrency: int = 0, seed: int = 0, where: str = "the load") -> Requests:
    """Requests of given lengths, in send order (a benchmark's, simulate/compare.py), each of a regime
    drawn as build_requests draws them (every regime of the profile equally). Their arrivals: given
    (`arrival_s`, seconds, non-decreasing), or at `qps` as vllm bench serve draws them (gamma gaps of
    shape `burstiness` and mean 1/qps, scaled so the last arrives at n / qps: get_request in
    vllm/benchmarks/serve.py), or none (qps None: every request ready at 0, for closed-loop clients).
    `concurrency` N > 0: at most N in flight (closed loop)."""
    prompt = _lengths(prompt_tokens, "prompt_tokens", where)
    output = _lengths(output_tokens, "output_tokens", where)
    n = len(prompt)
    if len(output) != n:
        raise UserError(f"{where} gives {n} prompt lengths and {len(output)} output lengths", "give one of each per request")
    cap = check_concurrency(concurrency, f"{where}: concurrency") if concurrency else 0
    if arrival_s is not None:
        arr = np.asarray(arrival_s, float)
        if len(arr) != n or not np.isfinite(arr).all() or (arr < 0).any() or (np.diff(arr) < 0).any():
            raise UserError(f"{where}: arrival_s must be {n} non-decreasing times >= 0 s, one per request", "give the send times in order")
        span = arr[-1] - arr[0] if n > 1 else 0.0
        rate = (n - 1) / span if span > 0 else math.inf
    elif qps is not None:
        rate = check_rate(qps, f"{where}: rate")
        gaps = _gaps(with_burstiness(None, burstiness, f"{where}: burstiness"), rng_for(seed, STREAM_ARRIVAL), n)
        arr = np.cumsum(gaps)
        arr = arr * (n / rate / arr[-1]) if arr[-1] > 0 else arr
    elif cap:
        arr, rate = np.zeros(n), math.inf
    else:
        raise UserError(f"{where} has neither arrival times, a rate nor closed-loop clients", "give arrival_s, qps or concurrency")
    wl = Workload(source=where)
    names, probs = _regime_names(profile, wl)
    regime_idx = rng_for(seed, STREAM_REGIME).choice(len(names), size=n, p=probs).astype(np.int64)
    return Requests(arr, prompt, output, regime_idx, names, float(arr[-1]), rate, concurrency=cap)


def _lengths(values, what: str, where: str) -> np.ndarray:
    try:
        x = np.asarray(values, float).ravel() if not isinstance(values, (str, bytes)) else np.array([np.nan])
    except (TypeError, ValueError):
        x = np.array([np.nan])
    if len(x) == 0 or not np.isfinite(x).all() or (x < 1).any() or (x != np.round(x)).any():
        raise UserError(f"{where}: {what} must be whole numbers >= 1, one per request (at least one)", "fix the lengths")
    return x.astype(np.int64)


def closed_default_requests(concurrency: int) -> int:
    """Requests of a closed loop with no rate and no --requests."""
    return max(DEFAULT_MIN_REQUESTS, DEFAULT_CLOSED_PER_CLIENT * int(concurrency))


def unlimited_closed_loop(wl: Workload, qps, cap: int, duration_s) -> bool:
    """Whether this is a closed loop with no rate limit (every request ready at 0); its inputs checked."""
    if not cap or qps is not None or wl.recorded_rate:
        return False
    if duration_s is not None:
        raise UserError(f"a closed loop with no rate runs a number of requests, not a duration ({duration_s:g} s)",
                        "give --requests N instead of --duration, or a rate with --qps")
    if wl.trace is not None:
        raise UserError(f"{wl.source} rescales its trace to a QPS, and none is given", "give --qps, or set \"trace_time_scale\": \"recorded\"")
    if wl.prefix is not None and wl.prefix.turns > 1:
        raise UserError(f"{wl.source}: sessions start at a rate (QPS / turns), and none is given", "give --qps with --concurrency")
    return True


def _session_arrivals(wl: Workload, qps: float, n_requests, duration_s, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sessions start by the arrival process at qps / turns; turn t+1 arrives an exponential think
    time after turn t. Returns (arrival times, session index per request), in arrival order."""
    turns, think = wl.prefix.turns, wl.prefix.think_s
    n_sess = -(-int(n_requests) // turns) if n_requests is not None else None
    starts = _arrivals(wl, qps / turns, n_sess, duration_s, seed)
    gaps = rng_for(seed, STREAM_THINK).exponential(think, (len(starts), turns - 1)) if think > 0 else np.zeros((len(starts), turns - 1))
    times = starts[:, None] + np.concatenate([np.zeros((len(starts), 1)), np.cumsum(gaps, axis=1)], axis=1)
    sess = np.repeat(np.arange(len(starts)), turns)
    t = times.ravel()
    order = np.argsort(t, kind="stable")
    t, sess = t[order], sess[order]
    keep = np.arange(len(t)) < int(n_requests) if n_requests is not None else t <= duration_s
    return t[keep], sess[keep]


def _content(wl: Workload, prompt: np.ndarray, output: np.ndarray, tidx, sess, seed: int) -> list | None:
    """Each request's prompt content (simulate/prefix.py), or None when no two requests share any;
    for sessions and system prompts `prompt` is updated in place to the whole prompt's length."""
    n = len(prompt)
    tr = wl.trace
    if tr is not None:
        if tr.hash_ids is not None:
            hb = wl.trace_hash_block_tokens
            return [PX.trace_content(i, int(prompt[i]), int(output[i]), tr.hash_ids[tidx[i]], hb) for i in range(n)]
        if tr.session is not None:
            return _trace_sessions(tr, prompt, output, tidx)
        return None
    pre = wl.prefix
    if pre is None:
        return None
    apps = rng_for(seed, STREAM_APP).integers(0, pre.apps, n) if pre.system_tokens else None
    if sess is None:
        prompt += pre.system_tokens
        return PX.PlainContent(apps, pre.system_tokens, prompt, output)  # each request's segments made when it arrives
    content: list = [None] * n
    for s_id in np.unique(sess):
        idx = np.nonzero(sess == s_id)[0].tolist()
        system = (int(apps[idx[0]]), pre.system_tokens) if apps is not None else None
        turns = PX.session_turns(idx, prompt[idx].tolist(), output[idx].tolist(), system)
        for i, (segs, p) in turns.items():
            content[i] = segs
            prompt[i] = p
    return content


def _trace_sessions(tr: Trace, prompt: np.ndarray, output: np.ndarray, tidx) -> list:
    """A conversation log: each request's prompt repeats its session's previous turn (prompt and
    reply) as far as it is long enough (simulate/prefix.py history_content)."""
    prev: dict = {}
    content = []
    for i in range(len(prompt)):
        key = tr.session[tidx[i]]
        segs = PX.history_content(i, int(prompt[i]), int(output[i]), prev.get(key))
        prev[key] = segs
        content.append(segs)
    return content


def memory_budget_bytes() -> float:
    """The run-size budget: DEFAULT_MEMORY_BUDGET_GIB, or COSTMODEL_MEMORY_BUDGET_GIB when set."""
    raw = os.environ.get(BUDGET_ENV)
    if raw is None:
        return DEFAULT_MEMORY_BUDGET_GIB * 2**30
    try:
        gib = float(raw)
    except ValueError:
        gib = math.nan
    if not (math.isfinite(gib) and gib > 0):
        raise UserError(f"{BUDGET_ENV}={raw!r} is not a positive number of GiB", f"unset it or give e.g. {BUDGET_ENV}=16")
    return gib * 2**30


def expected_requests(workload: Workload | None, qps: float | None, n_requests: int | None = None, duration_s: float | None = None,
                      concurrency: int | None = None) -> float:
    """How many requests a point will draw, computed before drawing any (a float: it may be huge)."""
    wl = workload or Workload()
    if n_requests is not None:
        return float(n_requests)
    if concurrency and qps is None and not wl.recorded_rate:
        return float(closed_default_requests(concurrency))
    rate = _rate(wl, qps)
    if wl.trace is not None:
        if duration_s is None:
            return float(len(wl.trace.arrival_s))
        return (duration_s * rate + 1) * 1.05  # a rescaled trace keeps its mean rate; margin for its last gap
    window = duration_s if duration_s is not None else max(DEFAULT_DURATION_S, DEFAULT_MIN_REQUESTS / rate)
    return rate * window * 1.1 + 64  # the arrival draw's own chunk size (see _arrivals)


CLI_SIZE_KNOBS = "fewer --requests, a shorter --duration or a lower --qps"


def fits_budget(requests: float, replicas: int = 1) -> bool:
    """Whether a run of `requests` on `replicas` is within the memory budget (check_run_size's test)."""
    return requests * BYTES_PER_REQUEST + replicas * BYTES_PER_REPLICA <= memory_budget_bytes()


def check_run_size(requests: float, replicas: int = 1, what: str = "this point", knobs: str = CLI_SIZE_KNOBS, repeat: bool = True) -> None:
    """Refuse a run whose memory estimate exceeds the budget, naming the limit and how to split it
    (`knobs`: the settings that shrink it, in the user's terms: CLI options, or a sweep spec's keys;
    `repeat`: whether repeating the smaller run with other seeds makes up for it, as for a point)."""
    need = requests * BYTES_PER_REQUEST + replicas * BYTES_PER_REPLICA
    budget = memory_budget_bytes()
    if need <= budget:
        return
    cap = int((budget - replicas * BYTES_PER_REPLICA) // BYTES_PER_REQUEST)
    split = (f"at most {cap:,} requests per run ({knobs}){', repeated with different seeds' if repeat else ''}"
             if cap >= 1000 else f"at most {int(budget // BYTES_PER_REPLICA) // 2:,} replicas per run")
    raise UserError(
        f"{what} would simulate about {requests:,.0f} requests on {replicas:,} replica(s), needing about {need / 2**30:,.1f} GiB, "
        f"above the {budget / 2**30:g} GiB memory budget ({BYTES_PER_REQUEST // 1024} KiB per request, {BYTES_PER_REPLICA // 1024} KiB per replica)",
        f"split the run: {split}; or raise {BUDGET_ENV} on a machine with more memory")


def _check_length(n_requests, duration_s) -> None:
    if n_requests is not None and duration_s is not None:
        raise UserError("give either a number of requests or a duration, not both", "drop --requests or --duration")
    if n_requests is not None and (isinstance(n_requests, bool) or int(n_requests) != n_requests or n_requests < 1):
        raise UserError(f"number of requests {n_requests!r} must be an integer >= 1", "e.g. --requests 2000")
    if duration_s is not None and not (isinstance(duration_s, (int, float)) and math.isfinite(duration_s) and duration_s > 0):
        raise UserError(f"duration {duration_s!r} s must be a positive number", "e.g. --duration 600")


def _rate(wl: Workload, qps) -> float:
    """The offered rate: the given QPS, or a trace's recorded rate."""
    if wl.recorded_rate:
        if qps is not None:
            raise UserError(f"{wl.source} replays its trace at the recorded rate, so a QPS ({qps:g}) would be ignored",
                            "drop --qps, or set \"trace_time_scale\": \"qps\" to rescale the trace")
        qps = wl.trace.recorded_qps
        if qps <= 0:
            raise UserError(f"{wl.source}: the trace spans no time, so it has no recorded rate", "give it timestamps that differ")
    elif qps is None:
        raise UserError("QPS is missing", "e.g. --qps 1,2,4")
    return check_rate(float(qps) if isinstance(qps, numbers.Real) and not isinstance(qps, bool) else qps, "QPS")


def _arrivals(wl: Workload, qps: float, n_requests: int | None, duration_s: float | None, seed: int) -> np.ndarray:
    """Arrival times of the workload's process: n_requests of them, or all within duration_s."""
    rng = rng_for(seed, STREAM_ARRIVAL)
    if n_requests is not None:
        return np.cumsum(_gaps(wl, rng, int(n_requests))) / qps
    chunks, t, want = [], 0.0, int(qps * duration_s * 1.1) + 64
    while t <= duration_s:
        c = t + np.cumsum(_gaps(wl, rng, want)) / qps
        chunks.append(c)
        t = c[-1]
    arr = np.concatenate(chunks)
    arr = arr[arr <= duration_s]
    if len(arr) == 0:
        raise UserError(f"no request arrives in {duration_s:g} s at {qps:g} QPS", "give a longer --duration or a higher --qps")
    return arr


def _trace_regimes(profile: Profile, wl: Workload, names: tuple, reg_tr) -> tuple[tuple, np.ndarray]:
    """Regime indices of a trace's named regimes (names the mix lacks are appended)."""
    lookup = {r: i for i, r in enumerate(names)}
    missing = sorted({r for r in reg_tr if r not in profile.regimes})
    if missing and profile.regimes:
        raise UserError(f"{wl.source}: the trace names regime(s) {', '.join(missing[:5])} that profile {profile.profile_id} lacks",
                        f"use {', '.join(sorted(profile.regimes))}")
    for r in sorted(set(reg_tr)):
        if r not in lookup:
            lookup[r] = len(names)
            names = names + (r,)
    return names, np.array([lookup[r] for r in reg_tr], dtype=np.int64)


def _outputs(profile: Profile, wl: Workload, out_tr, names: tuple, regime_idx: np.ndarray, seed: int) -> np.ndarray:
    """Output lengths: the trace's, the workload's distribution, or the regimes' content lengths."""
    n = len(regime_idx)
    if out_tr is not None:
        return np.asarray(out_tr, dtype=np.int64)
    if wl.output is not None:
        return wl.output.sample(rng_for(seed, STREAM_OUTPUT), n)
    if not profile.regimes:
        raise UserError(f"profile {profile.profile_id} has no commit_stats, so output lengths cannot come from regimes",
                        "give \"output_tokens\" in the workload file")
    output = np.empty(n, dtype=np.int64)
    u = rng_for(seed, STREAM_OUTPUT).random(n)
    for i, r in enumerate(names):
        sel = regime_idx == i
        if sel.any():
            _check_content_lengths(profile, r)
            output[sel] = _quantile(profile.regimes[r].content_length, u[sel])
    return output


def _check_content_lengths(profile: Profile, regime: str) -> None:
    """Output lengths drawn from a regime's content_length must be whole counts >= 1: a generation
    of 0 content tokens (or 2.5) would be simulated as another length, silently."""
    vals = np.asarray(profile.regimes[regime].content_length.values, float)
    bad = (vals < 1) | (vals != np.round(vals))
    if bad.any():
        raise UserError(f"profile {profile.profile_id}: commit_stats.{regime}.content_length has the value {vals[bad][0]:g}, not a whole number of "
                        "output tokens >= 1 (a request cannot be that long)", "drop those generations from the regime, or give \"output_tokens\" "
                        "in a workload file")


def _quantile(dist, u: np.ndarray) -> np.ndarray:
    """Inverse CDF of a discrete Distribution at uniforms u (vectorised)."""
    vals = np.asarray(dist.values, float)
    order = np.argsort(vals)
    cdf = np.cumsum(np.asarray(dist.probs, float)[order])
    cdf[-1] = 1.0
    idx = np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)
    return np.rint(vals[order][idx]).astype(np.int64)


def _trace_arrays(wl: Workload, qps: float, n_requests, duration_s, seed):
    tr = wl.trace
    t = np.asarray(tr.arrival_s, float)
    m = len(t)
    scale = 1.0 if wl.trace_time_scale == "recorded" else (tr.recorded_qps / qps if tr.recorded_qps > 0 else 1.0 / qps)
    t = t * scale
    period = (t[-1] + (t[-1] / (m - 1) if m > 1 else 1.0 / qps))  # one pass of the trace, plus a mean gap
    if period <= 0:  # every request at one instant: a pass of m requests every m / qps s keeps the mean rate
        period = m / qps
    if n_requests is not None:
        n = int(n_requests)
    elif duration_s is not None:
        n = None
    else:
        n = m
    reps = (math.ceil(n / m) if n is not None else math.floor(duration_s / period) + 1)
    idx = np.tile(np.arange(m), reps)
    arr = t[idx] + np.repeat(np.arange(reps) * period, m)
    if n is not None:
        idx, arr = idx[:n], arr[:n]
    else:
        keep = arr <= duration_s
        idx, arr = idx[keep], arr[keep]
        if len(arr) == 0:
            raise UserError(f"no trace request arrives in {duration_s:g} s", "give a longer --duration")
    prompt = np.asarray(tr.prompt_tokens, np.int64)[idx]
    out = np.asarray(tr.output_tokens, np.int64)[idx] if tr.output_tokens is not None else None
    reg = [tr.regime[i] for i in idx] if tr.regime is not None else None
    return arr, prompt, out, reg, idx
