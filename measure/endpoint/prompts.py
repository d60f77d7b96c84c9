"""Prompts for an endpoint load: a file (JSONL or text) or the project's probe suite.

JSONL: one JSON object per line with "prompt" (text) or "messages" (chat messages), optional
"prompt_id" (or "id"), "regime" and "max_tokens"; a line may also be a bare JSON string.
Any other file: one prompt per non-empty line. Without --prompts the probe suite
(`measure.probes.load_suite()`, objects with .regime .prompt_id .prompt) is used.
`--regimes a,b` keeps prompts whose regime is listed (case-insensitive).
"""

from __future__ import annotations

import json
from pathlib import Path

from costmodel.errors import UserError
from measure.endpoint.client import PromptItem
from measure.probes import load_suite


def load_prompts(path: str | None, regimes: list[str] | None) -> list[PromptItem]:
    items = _from_file(Path(path)) if path else _from_suite()
    if regimes:
        want = {r.lower() for r in regimes}
        kept = [i for i in items if i.regime is not None and i.regime.lower() in want]
        if not kept:
            have = sorted({i.regime for i in items if i.regime is not None})
            raise UserError(f"--regimes {','.join(regimes)} matches no prompt", f"the prompts have regimes {', '.join(have) or '(none)'}")
        items = kept
    return items


def _from_suite() -> list[PromptItem]:
    items = [PromptItem(prompt_id=str(p.prompt_id), prompt=str(p.prompt), regime=str(p.regime)) for p in load_suite()]
    if not items:
        raise UserError("the probe suite is empty", "pass --prompts FILE")
    return items


def _from_file(p: Path) -> list[PromptItem]:
    if not p.exists():
        raise UserError(f"--prompts {p} does not exist", "pass a JSONL file or a text file with one prompt per line")
    if p.is_dir():
        raise UserError(f"--prompts {p} is a directory", "pass a JSONL file or a text file with one prompt per line")
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise UserError(f"--prompts {p} is not UTF-8 text", "pass a JSONL or text file") from None
    items: list[PromptItem] = []
    jsonl = p.suffix.lower() in (".jsonl", ".ndjson", ".json")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if not jsonl:
            items.append(PromptItem(prompt_id=f"{p.stem}-{n}", prompt=line))
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise UserError(f"--prompts {p} line {n} is not JSON ({e.args[0][:60]})", "write one JSON object per line") from None
        items.append(_item(obj, p, n))
    if not items:
        raise UserError(f"--prompts {p} holds no prompts", "add at least one prompt")
    return items


def _item(obj, p: Path, n: int) -> PromptItem:
    where = f"--prompts {p} line {n}"
    if isinstance(obj, str):
        return PromptItem(prompt_id=f"{p.stem}-{n}", prompt=obj)
    if not isinstance(obj, dict):
        raise UserError(f"{where} is not an object or a string", 'write {"prompt": "..."} or {"messages": [...]}')
    prompt, messages = obj.get("prompt"), obj.get("messages")
    if prompt is None and messages is None:
        raise UserError(f"{where} has neither 'prompt' nor 'messages'", 'write {"prompt": "..."} or {"messages": [{"role": "user", "content": "..."}]}')
    if prompt is not None and not isinstance(prompt, str):
        raise UserError(f"{where}: 'prompt' is not a string", "give the prompt text")
    if messages is not None and not (isinstance(messages, list) and messages and all(isinstance(m, dict) and "role" in m and "content" in m for m in messages)):
        raise UserError(f"{where}: 'messages' is not a list of {{role, content}} objects", 'e.g. [{"role": "user", "content": "..."}]')
    mt = obj.get("max_tokens")
    if mt is not None and (not isinstance(mt, int) or isinstance(mt, bool) or mt < 1):
        raise UserError(f"{where}: max_tokens {mt!r} is not a positive integer", "give an integer >= 1 or drop it")
    regime = obj.get("regime")
    return PromptItem(prompt_id=str(obj.get("prompt_id", obj.get("id", f"{p.stem}-{n}"))), prompt=prompt,
                      messages=tuple(messages) if messages else None, regime=str(regime) if regime is not None else None, max_tokens=mt)
