"""Reading user-supplied JSON files with one-line errors instead of tracebacks."""

from __future__ import annotations

import csv
import errno
import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:
    import pandas as pd

from costmodel.errors import UserError


def check_readable(path: str | Path, what: str) -> Path:
    """`path` as a Path, or one line for what is wrong with it: a symbolic link loop (reported as
    such, not as a missing file), a path that does not exist."""
    p = Path(path)
    if not p.exists():
        if p.is_symlink():
            try:
                p.resolve(strict=True)
            except RuntimeError:
                raise UserError(f"{what} {p} is a symbolic link loop", "point the link at a file") from None
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise UserError(f"{what} {p} is a symbolic link loop", "point the link at a file") from None
            raise UserError(f"{what} {p} is a link to a file that does not exist ({os.readlink(p)})", "point the link at a file")
        raise UserError(f"{what} {p} does not exist", "check the path")
    return p


def read_json(path: str | Path, what: str = "file") -> Any:
    p = check_readable(path, what)
    if p.is_dir():
        raise UserError(f"{what} {p} is a directory, not a JSON file", "pass the .json file inside it")
    try:
        return loads_unique(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"{what} {p} is not valid JSON (line {e.lineno}: {e.msg})", "fix or regenerate it") from None
    except DuplicateKey as e:
        raise UserError(f"{what} {p} gives the key {e.key!r} twice in one object", "keep one (JSON readers silently keep the last)") from None
    except UnicodeDecodeError:
        raise UserError(f"{what} {p} is not a UTF-8 text file", "pass a JSON file") from None
    except RecursionError:
        raise UserError(f"{what} {p} nests brackets deeper than a JSON reader follows", NESTING_FIX) from None


NESTING_FIX = "write it flat: no costmodel input nests more than a few levels"


class DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list) -> dict:
    out = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKey(k)
        out[k] = v
    return out


def loads_unique(text: str) -> Any:
    """json.loads refusing an object that gives one key twice (DuplicateKey) instead of keeping the last."""
    return json.loads(text, object_pairs_hook=_unique_pairs)


def csv_header(path: str | Path, what: str) -> list[str]:
    """A CSV file's header, read as the table readers will (a UTF-8 byte-order mark dropped), a
    column named twice refused with the line it repeats on: pandas would rename the second `qps.1`
    and read the first, silently."""
    p = check_readable(path, what)
    try:
        with open(p, encoding="utf-8-sig", newline="") as f:
            header = next(csv.reader(f), [])
    except UnicodeDecodeError as e:
        raise UserError(f"{what} {p} is not UTF-8 text (byte {e.start})", "save it as UTF-8 CSV") from None
    except csv.Error as e:
        raise UserError(f"{what} {p} line 1 is not CSV ({e})", "give a header line of column names") from None
    names = [h.strip() for h in header]
    twice = next((n for i, n in enumerate(names) if n and n in names[:i]), None)
    if twice is not None:
        raise UserError(f"{what} {p} line 1 names the column {twice!r} twice", "keep one column of each name (a reader would keep one silently)")
    return names


def read_csv(path: str | Path, what: str, **kw) -> "pd.DataFrame":
    """pandas.read_csv after csv_header's checks; a BOM is read as the encoding's, not as a column name's start."""
    import pandas as pd

    csv_header(path, what)
    return pd.read_csv(path, encoding="utf-8-sig", **kw)


def jsonable(x):
    """NaN/inf/pd.NA -> None, numpy scalars -> Python, recursively (what JSON can hold)."""
    t = type(x)
    if t is str or t is int or t is bool or x is None:  # most of a plan's ~50k values: answered before the checks below
        return x
    if t is float:
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if x is None or x is _pandas_na():
        return None
    np = sys.modules.get("numpy")  # where numpy is not loaded no value is a numpy scalar: reading JSON does not load it
    if np is not None and isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _pandas_na():
    """pandas' missing-value marker, where pandas is loaded (no value is one where it is not): JSON
    writing does not load the table library."""
    pd = sys.modules.get("pandas")
    return pd.NA if pd is not None else None


def records(df: "pd.DataFrame") -> list[dict]:
    """A DataFrame as JSON-able row dicts."""
    return [jsonable(r) for r in df.astype(object).to_dict("records")] if not df.empty else []
