"""Atomic file writes: a reader never sees a half-written file, and an interrupted write loses
nothing already on disk (write to a temp file in the same directory, fsync, rename)."""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from costmodel.errors import DiskFull, UserError


FIX = "choose a writable path you own (e.g. -o under your home or the working directory)"


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_output(path: str | os.PathLike, *, directory: bool = False, what: str = "-o", probe: bool = True) -> Path:
    """Refuse an output path that cannot be written, before any expensive work: a directory where a
    file is meant (or the reverse), a read-only file, or a location whose nearest existing folder
    is not a writable directory (read-only filesystem, /proc, another user's folder)."""
    path = Path(path)
    if path.exists():
        if directory and not path.is_dir():
            raise UserError(f"{what} {path} exists and is not a directory", "give a directory path")
        if not directory and path.is_dir():
            raise UserError(f"{what} {path} is a directory, not a file", f"name a file inside it or elsewhere, e.g. {path / 'out'}{_suffix_hint(path)}")
        if not directory and (not os.access(path, os.W_OK) or not path.stat().st_mode & 0o222):
            raise UserError(f"{what} {path} is read-only", "make it writable (chmod u+w) or choose another path")
    base = _nearest_existing(path if directory else path.parent)
    if not base.is_dir():
        raise UserError(f"{what} {path}: {base} is not a directory", "choose a path whose parent folders are directories")
    err = _probe(base) if probe else ""
    if err:
        raise UserError(f"{what} {path}: cannot create files in {base} ({err})", FIX)
    return path


def _suffix_hint(path: Path) -> str:
    return path.suffix or ".csv"


def creatable(folder: Path) -> str:
    """'' if a file can be created in `folder` (or its nearest existing parent), else why not."""
    return _probe(_nearest_existing(folder))


def _probe(folder: Path) -> str:
    """'' if a file can be created in `folder`, else why not: the only test that is right for root,
    read-only mounts and pseudo filesystems (/proc, /sys) alike."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".costmodel-probe.", dir=folder)
    except OSError as e:
        return e.strerror or e.__class__.__name__
    os.close(fd)
    os.unlink(tmp)
    return ""


@contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temp path beside `path`; on success it replaces `path` in one rename. Any OS error
    (read-only filesystem, permissions, disk full) becomes a one-line UserError naming `path`."""
    path = check_output(path, what="output", probe=False)  # mkstemp below is the probe
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix or ".tmp", dir=path.parent)
    except OSError as e:
        raise _unwritable(path, e) from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual file mode
        os.replace(tmp_path, path)
    except OSError as e:
        raise _unwritable(path, e) from None
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def _unwritable(path: Path, e: OSError) -> UserError:
    return os_failure(path, e)


DISK_FULL = {errno.ENOSPC: "no space left", errno.EDQUOT: "disk quota exceeded"}
_DISK_FULL_TEXT = {"No space left on device": errno.ENOSPC, "Disk quota exceeded": errno.EDQUOT}


def disk_full_errno(e: BaseException) -> int | None:
    """ENOSPC or EDQUOT when `e` is a full disk or quota (also as pyarrow words it, without an errno)."""
    code = getattr(e, "errno", None)
    if code in DISK_FULL:
        return code
    return next((c for text, c in _DISK_FULL_TEXT.items() if text in str(e)), None)


def _mount_of(path: Path) -> Path:
    p = _nearest_existing(path)
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def disk_full(path: Path, code: int) -> DiskFull:
    """The one line for a full filesystem or quota: where, and how much is free there."""
    mount = _mount_of(path)
    try:
        use = shutil.disk_usage(_nearest_existing(path))
        room = f"{_size(use.free)} free of {_size(use.total)}"
    except OSError:
        room = "free space unknown"
    return DiskFull(f"cannot write {path}: {DISK_FULL[code]} on the filesystem mounted at {mount} ({room})",
                    "free space there or write -o to another filesystem")


def os_failure(path: str | os.PathLike, e: OSError) -> UserError:
    """An OS error writing `path` as one line: a full disk or quota gets its own, naming where."""
    code = disk_full_errno(e)
    if code is not None:
        return disk_full(Path(path), code)
    return UserError(f"cannot write {path} ({e.strerror or e.__class__.__name__})", FIX)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
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
