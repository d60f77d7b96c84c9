"""Atomic file writes: a reader never sees a half-written file, and an interrupted write loses
nothing already on disk (write to a temp file in the same directory, fsync, rename)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


@contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temp path beside `path`; on success it replaces `path` in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix or ".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual file mode
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Strict JSON: NaN and infinities (e.g. a percentile with no finished request) become null."""
    return write_text(path, json.dumps(_finite(obj), indent=2, sort_keys=False, default=_json_default, allow_nan=False) + "\n")


def _finite(o: Any) -> Any:
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    if hasattr(o, "item") and not hasattr(o, "__len__"):  # numpy scalar
        return _finite(o.item())
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return _finite(dataclasses.asdict(o))
    return o


def write_parquet(path: str | os.PathLike, df) -> Path:
    with atomic_path(path, suffix=".parquet") as tmp:
        df.to_parquet(tmp, index=False)
    return Path(path)


def write_csv(path: str | os.PathLike, df) -> Path:
    with atomic_path(path, suffix=".csv") as tmp:
        df.to_csv(tmp, index=False)
    return Path(path)


def _json_default(o: Any):
    if dataclasses.is_dataclass(o):
        return dataclasses.asdict(o)
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
