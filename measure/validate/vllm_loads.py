"""The settings of a vLLM validation: the engine settings each mode's server runs with, and the
loads sent to it (arrival process and cv, rate as a share of the fitted capacity, request counts,
prompt-length mix, output lengths) with the calibration recipe. `ValidationSettings.default()` is
the first committed set (data/validation/vllm-cpu); `load_settings(path)` reads another from a
JSON file (`costmodel validate --engine vllm --settings FILE`; keys below, anything left out is the
default set's), e.g.

    {"name": "b",
     "engine": {"max_num_batched_tokens": 256, "block_size": 64,
                "ar": {"max_num_seqs": 8}, "mtp": {"max_num_seqs": 8, "num_speculative_tokens": 3},
                "diffusion": {"max_num_seqs": 6, "canvas_length": 64, "max_denoising_steps": 5}},
     "outputs": {"diffusion": [64, 100, 160], "ar": [16, 40, 80], "mtp": [16, 40, 80]},
     "calibration": {"low_qps": {"diffusion": 0.4}, "requests": {"diffusion": 16},
                     "concurrency": {"diffusion": [[2, 8], [6, 14]]}},
     "loads": [{"name": "gamma5", "arrivals": "gamma", "cv": 5, "rate_frac": 0.5,
                "n_requests": {"ar": 40, "diffusion": 16}, "prompts": "mixed", "long_share": 0.25}]}

Default set's scored loads: Poisson at 25%, 55% and 85% of the capacity the calibration's fitted
profile predicts, one bursty load (gamma gaps, cv 3, at 55%) and one long-prompt load (prompts
longer than the token budget, so vLLM splits them into chunks: chunked prefill beside decoding
sequences). The calibration load is separate and never scored: a low Poisson rate (small batches),
then closed loops holding 2-8 (diffusion) or 4-16 (AR, MTP) requests in flight (steady batches of
every size the scored loads reach), over short and long prompts, so the step fit covers their shapes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from costmodel.engine_settings import EngineSettings, check_vllm_rules
from costmodel.errors import UserError
from costmodel.jsonfile import read_json
from costmodel.modes import ServingMode, all_modes

# the modes with a vLLM validation set-up (ServingMode.vllm_validation: each mode's own defaults below)
MODES = tuple(m.name for m in all_modes() if m.vllm_validation)
# the default set: a token budget small enough that long prompts are chunked beside decoding
# sequences (diffusion: 8 canvases of 32 = 256 tokens leave 256 for prefill chunks)
MAX_NUM_BATCHED_TOKENS = 512
MAX_MODEL_LEN = 2048
ENGINE_KEYS = ("max_num_seqs", "max_num_batched_tokens", "canvas_length", "max_denoising_steps", "num_speculative_tokens", "block_size",
               "async_scheduling", "enable_prefix_caching")
PROMPT_KINDS = ("short", "long", "mixed", "sysprompt", "sessions")
# prefix-sharing loads (prefix caching on): `sysprompt` - SYS_APPS apps, each a shared system prompt of
# SYS_WORDS words, then a distinct short question; `sessions` - multi-turn chats, each turn's prompt the
# whole history (opening, earlier questions and replies) plus a new question, sent turn by turn
SYS_APPS, SYS_WORDS = 3, 300
SESSION_TURNS, SESSION_OPEN_WORDS, SESSION_TURN_WORDS = 5, 60, (20, 50)


def cpu_placement() -> dict:
    """The engine's worker on the last CPU, the API server and the load generator on the others
    (on a 2-core machine one each), so front-end work does not stretch engine steps; {} on one CPU."""
    import os

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return {}
    return {"engine_cpus": str(cpus[-1]), "frontend_cpus": tuple(cpus[:-1])}


@dataclass(frozen=True)
class LoadSpec:
    """One load: `rate_frac` of the fitted capacity (calibration: `calib_qps`, requests/s per unit);
    `n_requests` per mode; `prompts` short | long | mixed (`long_share` of them long) | sysprompt |
    sessions (shared prefixes: see `write_prompts`)."""

    name: str
    arrivals: str  # poisson | gamma
    cv: float
    rate_frac: float | None
    n_requests: int | dict
    prompts: str  # short | long | mixed
    calib_qps: tuple[str, ...] = ()
    long_share: float = 0.25

    def to_dict(self) -> dict:
        return asdict(self)

    def requests_for(self, mode: str, cap: int | None = None) -> int:
        n = self.n_requests.get(mode, max(self.n_requests.values())) if isinstance(self.n_requests, dict) else self.n_requests
        return min(int(n), cap) if cap else int(n)


SCORED = (
    LoadSpec("poisson25", "poisson", 1.0, 0.25, 40, "short"),
    LoadSpec("poisson55", "poisson", 1.0, 0.55, 50, "short"),
    LoadSpec("poisson85", "poisson", 1.0, 0.85, 60, "short"),
    LoadSpec("bursty", "gamma", 3.0, 0.55, 50, "short"),
    LoadSpec("longprompt", "poisson", 1.0, 0.55, 40, "long"),
)
# per mode (ServingMode.vllm_validation): its engine settings (AR/MTP: 16 sequences, the API server and the
# load generator share the second core; see README), the calibration's low rate (requests/s, well below
# capacity on the 2-core machine), then all at once; output lengths (max_tokens, ignore_eos): diffusion
# 2-3 canvases of 32, AR/MTP 24-96 tokens
CALIB_LOW_QPS = {m.name: m.vllm_validation["low_qps"] for m in all_modes() if m.vllm_validation}
CALIB_REQUESTS = {m.name: m.vllm_validation["requests"] for m in all_modes() if m.vllm_validation}
OUTPUT_TOKENS = {m.name: m.vllm_validation["outputs"] for m in all_modes() if m.vllm_validation}
# diffusion steps run Triton's interpreter on a CPU (100-250 ms each): its loads are cut to this many requests
DIFFUSION_MAX_REQUESTS = 30
# then closed loops of c requests in flight (concurrency c, n requests): steady batches of every size
CALIB_CONCURRENCY = {m.name: m.vllm_validation["concurrency"] for m in all_modes() if m.vllm_validation}
WORDS = {"short": (6, 60), "long": (180, 450)}  # prompt words (about 1.3 tokens each with the tiny tokenizer)


@dataclass(frozen=True)
class ValidationSettings:
    """Everything a validation run sends and serves with (see the module docstring)."""

    name: str = "a"
    engine: dict = field(default_factory=lambda: {"max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
                                                  **{m.name: dict(m.vllm_validation["engine"]) for m in all_modes() if m.vllm_validation}})
    loads: tuple = SCORED
    outputs: dict = field(default_factory=lambda: {m: list(v) for m, v in OUTPUT_TOKENS.items()})
    calib_low_qps: dict = field(default_factory=lambda: dict(CALIB_LOW_QPS))
    calib_requests: dict = field(default_factory=lambda: dict(CALIB_REQUESTS))
    calib_concurrency: dict = field(default_factory=lambda: {m: [list(x) for x in v] for m, v in CALIB_CONCURRENCY.items()})
    diffusion_max_requests: int = DIFFUSION_MAX_REQUESTS
    words: dict = field(default_factory=lambda: {k: list(v) for k, v in WORDS.items()})

    @classmethod
    def default(cls) -> "ValidationSettings":
        return cls()

    def engine_for(self, mode: ServingMode) -> EngineSettings:
        """The server's settings for `mode` (top-level keys, then the mode's own), checked against
        vLLM's rules (a setting vLLM rewrites is rewritten the same way; one it refuses is refused)."""
        return self.checked(mode)[0]

    def checked(self, mode: ServingMode) -> tuple[EngineSettings, list[str]]:
        """engine_for and the one-line notes of vLLM's rewrites."""
        given = {k: v for k, v in self.engine.items() if k in ENGINE_KEYS}
        given.update(self.engine.get(mode.name, {}))
        # any canvas: the tiny DiffusionGemma is built at the canvas asked for (measure/vllm/tiny_models.py diffusion_dir)
        s = EngineSettings.given(given, "validation settings").for_mode(mode)
        return check_vllm_rules(s, mode, platform="cpu")

    def n_requests(self, spec: LoadSpec, mode: ServingMode) -> int:
        """A load's requests for the mode; a mode that decodes canvases (Triton's interpreter on a CPU) at most diffusion_max_requests."""
        return spec.requests_for(mode.name, self.diffusion_max_requests if mode.decodes_canvases else None)

    def calibration(self, mode: str) -> LoadSpec:
        return LoadSpec("calibration", "poisson", 1.0, None, int(self.calib_requests[mode]), "mixed", (f"{self.calib_low_qps[mode]:g}",))

    def budget(self, mode: ServingMode) -> int:
        return int(self.engine_for(mode).max_num_batched_tokens)

    def to_dict(self) -> dict:
        """The settings file's form: `load_settings` reads it back to the same settings."""
        return {"name": self.name, "engine": self.engine, "loads": [{k: v for k, v in x.to_dict().items() if k != "calib_qps"} for x in self.loads],
                "outputs": self.outputs, "calibration": {"low_qps": self.calib_low_qps, "requests": self.calib_requests,
                                                         "concurrency": self.calib_concurrency},
                "diffusion_max_requests": self.diffusion_max_requests, "words": self.words}


def _check_load(d: dict, path) -> LoadSpec:
    keys = set(LoadSpec.__dataclass_fields__) - {"calib_qps"}
    bad = set(d) - keys
    if bad or "name" not in d:
        raise UserError(f"validation settings {path}: a load {d!r} has {'unknown key(s) ' + ', '.join(sorted(bad)) if bad else 'no name'}",
                        f"a load's keys are {', '.join(sorted(keys))}")
    spec = LoadSpec(**{"arrivals": "poisson", "cv": 1.0, "rate_frac": 0.5, "n_requests": 30, "prompts": "short", **d})
    ok = (spec.arrivals in ("poisson", "gamma") and spec.cv > 0 and spec.rate_frac is not None and 0 < spec.rate_frac <= 2
          and spec.prompts in PROMPT_KINDS and 0 <= spec.long_share <= 1)
    counts = spec.n_requests.values() if isinstance(spec.n_requests, dict) else [spec.n_requests]
    if not ok or not all(isinstance(n, int) and n >= 2 for n in counts):
        raise UserError(f"validation settings {path}: load {spec.name!r} is out of range",
                        f"arrivals poisson|gamma, cv > 0, 0 < rate_frac <= 2, prompts {'|'.join(PROMPT_KINDS)}, n_requests >= 2")
    return spec


def load_settings(path: str | Path | None) -> ValidationSettings:
    """The settings in a JSON file (None: the default set); every key checked, one line per error."""
    if path is None:
        return ValidationSettings.default()
    d = read_json(path, "validation settings")
    if not isinstance(d, dict):
        raise UserError(f"validation settings {path} is not a JSON object", "see measure/validate/vllm_loads.py for the keys")
    base = ValidationSettings.default()
    known = {"name", "engine", "loads", "outputs", "calibration", "diffusion_max_requests", "words"}
    bad = set(d) - known
    if bad:
        raise UserError(f"validation settings {path}: unknown key(s) {', '.join(sorted(bad))}", f"keys are {', '.join(sorted(known))}")
    over: dict = {}
    if "name" in d:
        over["name"] = str(d["name"])
    if "engine" in d:
        eng = d["engine"]
        if not isinstance(eng, dict) or set(eng) - set(ENGINE_KEYS) - set(MODES):
            raise UserError(f"validation settings {path}: engine keys are {', '.join(ENGINE_KEYS)} and per mode {', '.join(MODES)}",
                            "e.g. {\"max_num_batched_tokens\": 256, \"diffusion\": {\"canvas_length\": 64}}")
        top = {k: v for k, v in eng.items() if k not in MODES}
        merged = {**base.engine, **top}
        for m in MODES:  # a key given for every mode replaces the default set's per-mode value too
            merged[m] = {**{k: v for k, v in base.engine.get(m, {}).items() if k not in top}, **eng.get(m, {})}
        over["engine"] = merged  # anything left out is the default set's
    if "loads" in d:
        over["loads"] = tuple(_check_load(x, path) for x in d["loads"])
    for key in ("outputs", "words"):
        if key in d:
            over[key] = {**getattr(base, key), **d[key]}
    cal = d.get("calibration", {})
    for key, attr in (("low_qps", "calib_low_qps"), ("requests", "calib_requests"), ("concurrency", "calib_concurrency")):
        if key in cal:
            over[attr] = {**getattr(base, attr), **cal[key]}
    if "diffusion_max_requests" in d:
        over["diffusion_max_requests"] = int(d["diffusion_max_requests"])
    s = replace(base, **over)
    for m in (x for x in all_modes() if x.name in MODES):
        s.engine_for(m)  # refuses what vLLM refuses, now rather than after a server start
    return s


def _words(n: int, corpus: list[str], start: int) -> str:
    words = " ".join(corpus).split()
    return " ".join(words[(start + i) % len(words)] for i in range(n))


def _shared_rows(kind: str, corpus: list[str], n: int, outs: list) -> list[dict]:
    """Prompts that share prefixes, in the order they are meant to be sent. `sysprompt`: request i
    is app i % SYS_APPS's system prompt then its own question. `sessions`: ceil(n / SESSION_TURNS)
    chats sent round-robin by turn (every chat's turn 1, then every chat's turn 2, ...); a turn's
    prompt is the chat's opening and every earlier question and reply (replies synthesised from
    the corpus: the client does not send the model's own output back) plus its new question."""
    rows = []
    if kind == "sysprompt":
        for i in range(n):
            app = i % SYS_APPS
            text = f"System prompt of app {app}: " + _words(SYS_WORDS, corpus, 5000 + app * 977) + f" Question {i}: " + _words(8 + (i * 7) % 30, corpus, i * 41)
            rows.append({"prompt": text, "prompt_id": f"a{app}q{i:02d}", "regime": "R1", "max_tokens": outs[i % len(outs)]})
        return rows
    chats = -(-n // SESSION_TURNS)
    lo, hi = SESSION_TURN_WORDS
    for i in range(n):
        c, turn = i % chats, i // chats
        text = f"Chat {c}: " + _words(SESSION_OPEN_WORDS, corpus, 9000 + c * 613)
        for t in range(turn + 1):
            text += f" User: " + _words(lo + (c * 13 + t * 7) % (hi - lo), corpus, c * 211 + t * 59)
            if t < turn:
                text += " Assistant: " + _words(hi, corpus, 7000 + c * 97 + t * 31)
        rows.append({"prompt": text, "prompt_id": f"c{c}t{turn}", "regime": "R1", "max_tokens": outs[i % len(outs)]})
    return rows


def sent_in_order(rows: list[dict], send_seed: int) -> list[dict]:
    """The file order that makes the endpoint load generator send `rows` in the order given: it
    sends request i the file's row permutation(n)[i] (measure/endpoint/loadtest.py plan_requests,
    a generator seeded with its seed + 1)."""
    import numpy as np

    order = np.random.default_rng(send_seed + 1).permutation(len(rows))
    out: list = [None] * len(rows)
    for i, row in enumerate(rows):
        out[order[i]] = row
    return out


def write_prompts(path: Path, kind: str, mode: str, corpus: list[str], n: int = 24, tag: str = "",
                  settings: ValidationSettings | None = None, long_share: float = 0.25, send_seed: int | None = None) -> Path:
    """A JSONL prompts file of `n` prompts, one per request: short prompts of 6-60 words, long ones
    of 180-450 words (about 500-1350 tokens of the tiny tokenizer; the settings' `words` ranges),
    `long_share` of a mixed load long, all distinct (no two share a prefix); or, for `sysprompt`
    and `sessions`, prompts that share prefixes (`_shared_rows`), laid out so that the load
    generator seeded with `send_seed` sends them in their order. Each has its max_tokens from the
    settings' output lengths."""
    s = settings or ValidationSettings.default()
    outs = s.outputs[mode]
    if kind in ("sysprompt", "sessions"):
        rows = _shared_rows(kind, corpus, n, outs)
        rows = sent_in_order(rows, send_seed) if send_seed is not None else rows
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path
    (s_lo, s_hi), (l_lo, l_hi) = s.words["short"], s.words["long"]
    every = max(1, round(1 / long_share)) if long_share > 0 else 0
    rows = []
    for i in range(n):
        long = kind == "long" or (kind == "mixed" and every and i % every == every - 1)
        words = l_lo + (i * 53) % (l_hi - l_lo) if long else s_lo + (i * 11) % (s_hi - s_lo + 1)
        rows.append({"prompt": f"[{kind}{tag} {i}] " + _words(words, corpus, i * 37 + len(tag) * 1009), "prompt_id": f"{kind[0]}{i:02d}", "regime": "R1",
                     "max_tokens": outs[i % len(outs)]})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
