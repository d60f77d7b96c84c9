"""Reading user-supplied JSON files with one-line errors instead of tracebacks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from costmodel.errors import UserError


def read_json(path: str | Path, what: str = "file") -> Any:
    p = Path(path)
    if not p.exists():
        raise UserError(f"{what} {p} does not exist", "check the path")
    if p.is_dir():
        raise UserError(f"{what} {p} is a directory, not a JSON file", "pass the .json file inside it")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"{what} {p} is not valid JSON (line {e.lineno}: {e.msg})", "fix or regenerate it") from None
    except UnicodeDecodeError:
        raise UserError(f"{what} {p} is not a UTF-8 text file", "pass a JSON file") from None
