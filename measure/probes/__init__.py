"""The probe suite: six regimes of prompts written for this project (one JSONL file per regime),
with a reference answer or a validity check where the regime is scorable.

Regimes follow the commit-order study's six (shared/reference/diffusiongemma.md): R1 math word
problems, R2 code function completion, R3 short programs, R4 short factual recall, R5 open-ended
instructions (not scorable), R6 constrained JSON. Each line: regime, prompt_id, prompt, reference,
check. Checks (`check_answer`):
- number: the last number in the answer equals `value`;
- python_def: the answer (code fences stripped) parses as Python and defines a function `name`
  (a validity check: the code is never executed);
- contains_any: one of `answers` occurs as a whole word/phrase, case-insensitive;
- json_object: the answer is one JSON object holding every key of `keys` with the stated type;
- none: not scorable (check_answer returns None).

The exploratory/confirmatory split is a property of the prompt: sha256(prompt_id) decides, so it
is the same on every machine and for every seed.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from importlib import resources

from costmodel.errors import UserError

REGIMES = ("R1", "R2", "R3", "R4", "R5", "R6")
REGIME_TASKS = {
    "R1": "math word problems",
    "R2": "code, function completion",
    "R3": "code, short programs",
    "R4": "short factual recall",
    "R5": "open-ended instructions",
    "R6": "constrained JSON",
}
SPLITS = ("exploratory", "confirmatory")
CHECK_KINDS = ("number", "python_def", "contains_any", "json_object", "none")
JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict}


@dataclass(frozen=True)
class Probe:
    regime: str
    prompt_id: str
    prompt: str
    reference: str | None
    check: dict = field(hash=False, compare=False)
    split: str = "exploratory"

    @property
    def scorable(self) -> bool:
        return self.check.get("kind", "none") != "none"


def split_of(prompt_id: str) -> str:
    """Deterministic 50/50 split by prompt (never by seed: a prompt's seeds stay together)."""
    return SPLITS[int(hashlib.sha256(prompt_id.encode()).hexdigest(), 16) % 2]


def load_suite(regimes: list[str] | tuple[str, ...] | None = None) -> list[Probe]:
    """Every probe of the given regimes (default all six), in file order."""
    wanted = list(regimes or REGIMES)
    bad = [r for r in wanted if r not in REGIMES]
    if bad:
        raise UserError(f"unknown probe regime(s) {', '.join(bad)}", f"use some of {', '.join(REGIMES)}")
    probes: list[Probe] = []
    for reg in wanted:
        text = resources.files("measure.probes").joinpath(f"{reg.lower()}.jsonl").read_text(encoding="utf-8")
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                p = Probe(regime=d["regime"], prompt_id=d["prompt_id"], prompt=d["prompt"], reference=d.get("reference"),
                          check=dict(d["check"]), split=split_of(d["prompt_id"]))
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise UserError(f"probe file {reg.lower()}.jsonl line {n} is malformed ({e})", "restore the file from the repository") from None
            if p.regime != reg or p.check.get("kind") not in CHECK_KINDS:
                raise UserError(f"probe {p.prompt_id} in {reg.lower()}.jsonl has regime {p.regime!r} / check {p.check.get('kind')!r}",
                                f"regime must be {reg} and check one of {', '.join(CHECK_KINDS)}")
            probes.append(p)
    ids = [p.prompt_id for p in probes]
    if len(set(ids)) != len(ids):
        raise UserError("the probe suite has duplicate prompt ids", "restore the probe files from the repository")
    return probes


_FENCE = re.compile(r"```[a-zA-Z0-9_+-]*\n(.*?)(?:```|$)", re.S)
_NUMBER = re.compile(r"-?\d[\d,]*\.?\d*")


def strip_fences(text: str) -> str:
    """The content of the first fenced code block, or the text itself when there is none."""
    m = _FENCE.search(text)
    return m.group(1) if m else text


def last_number(text: str) -> float | None:
    nums = [n.replace(",", "").rstrip(".") for n in _NUMBER.findall(text)]
    for n in reversed(nums):
        try:
            return float(n)
        except ValueError:
            continue
    return None


def _json_object(text: str) -> dict | None:
    body = strip_fences(text).strip()
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        obj = json.loads(body[start:end + 1])
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def check_answer(probe: Probe, text: str) -> bool | None:
    """Score one generated answer: True/False where the regime is scorable, None where it is not."""
    kind = probe.check.get("kind", "none")
    if kind == "none":
        return None
    if kind == "number":
        got = last_number(text)
        want = float(probe.check["value"])
        return got is not None and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)
    if kind == "python_def":
        try:
            tree = ast.parse(strip_fences(text))
        except (SyntaxError, ValueError):
            return False
        return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == probe.check["name"] for n in ast.walk(tree))
    if kind == "contains_any":
        low = text.lower()
        return any(re.search(r"(?<![a-z0-9])" + re.escape(a.lower()) + r"(?![a-z0-9])", low) for a in probe.check["answers"])
    if kind == "json_object":
        obj = _json_object(text)
        if obj is None:
            return False
        for key, typ in probe.check["keys"].items():
            if key not in obj:
                return False
            v = obj[key]
            if typ in ("integer", "number") and isinstance(v, bool):
                return False
            if not isinstance(v, JSON_TYPES[typ]):
                return False
        return True
    raise UserError(f"probe {probe.prompt_id} has unknown check kind {kind!r}", f"use one of {', '.join(CHECK_KINDS)}")
