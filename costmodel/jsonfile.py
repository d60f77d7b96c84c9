"""Reading user-supplied JSON files with one-line errors instead of tracebacks."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

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


def jsonable(x):
    """NaN/inf/pd.NA -> None, numpy scalars -> Python, recursively (what JSON can hold)."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if x is pd.NA or x is None:
        return None
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def records(df: pd.DataFrame) -> list[dict]:
    """A DataFrame as JSON-able row dicts."""
    return [jsonable(r) for r in df.astype(object).to_dict("records")] if not df.empty else []
