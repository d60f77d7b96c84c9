"""An output directory is one transaction: a command writes its whole output set into a sibling
staging folder and publishes it in one step, so a reader sees the old complete set or the new one,
never a mix, and a failed write (disk full, Ctrl-C) leaves the old set untouched.

    with publishing("out/sim", "simulate") as stage:     # lock, then a fresh .sim.costmodel-staging-*
        atomic.write_csv(stage / "summary.csv", df)      # ... every file of the set
    # on leaving: outputs.manifest.json (size + sha256 of each file) is written last, then the
    # staging folder and out/sim swap places in one rename (renameat2 RENAME_EXCHANGE)

- A lock file beside the directory (`.sim.costmodel-lock`, flock + the writer's pid) refuses a
  second writer of the same directory with one line; `claim()` takes it before a command's long
  work, so the second writer is refused at once, not after its simulations.
- Files of an earlier set (those its manifest lists, and any file named like a costmodel output)
  are not carried over: no stale `requests_*` frame sits beside a new summary. Anything else in the
  directory (a user's notes, a sweep's resumable `points/`) moves into the new set unchanged.
- Readers go through `read_set(dir, read)`: the directory is opened once and read through that
  handle after `verify` (a manifest that does not match its files is refused), and read again if
  it was replaced meanwhile. A directory without a manifest (written before this module) is read
  as before.
- The same for a group of files beside each other (`publishing_files`: a report's CSV and its
  dictionaries): staged together, then renamed into place only once every file is written.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import fcntl
import fnmatch
import hashlib
import json
import os
import shutil
import threading
import time
import uuid
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, TypeVar

from costmodel import atomic
from costmodel.errors import UserError

MANIFEST = "outputs.manifest.json"
MANIFEST_KIND = "costmodel-output-set"
LOCK_SUFFIX = ".costmodel-lock"
STAGING_MARK = ".costmodel-staging-"
OLD_MARK = ".costmodel-old-"
# files any costmodel command writes into an output directory: an earlier set's files, never carried into a new one
OWNED = {
    "simulate": ("requests_*.parquet", "summary.csv", "summary.json"),
    "plan": ("plan.csv", "plan.dictionary.csv", "plan.dictionary.md", "plan.json"),
    "day": ("day.csv", "day.dictionary.csv", "day.dictionary.md", "month.csv", "month.dictionary.csv", "month.dictionary.md", "day.json"),
    "sweep": ("results.parquet", "results.csv", "results.dictionary.csv", "results.dictionary.md"),
    "analyze": tuple(f"{t}.{ext}" for t in ("regimes", "bin_sweep", "auroc", "canvases", "generations", "hook_checks") for ext in ("csv", "parquet"))
    + ("bin_sweep.svg", "summary.md", "summary.html"),
}
_RENAME_EXCHANGE = 2
T = TypeVar("T")
_AT_FDCWD = -100


# ---- the lock ----------------------------------------------------------------------------------

@dataclass
class _Lock:
    path: Path
    fd: int
    thread: int
    pid: int  # a forked child inherits the table and the descriptor, never the ownership
    released: bool = False  # its descriptor is closed once: a later close could hit a descriptor reused since

    def mine(self) -> bool:
        return self.pid == os.getpid() and self.thread == threading.get_ident()


_HELD: dict[Path, _Lock] = {}  # target -> lock held by this process (claim / publishing)
_HELD_MUTEX = threading.Lock()


def _target(out: str | os.PathLike) -> Path:
    """The directory a set is published as: absolute, a symlinked directory replaced by its target."""
    p = Path(out).expanduser()
    return p.resolve() if p.is_symlink() else Path(os.path.abspath(p))


def _lock_path(target: Path) -> Path:
    return target.with_name(f".{target.name}{LOCK_SUFFIX}")


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text(encoding="utf-8") or "{}")
        return f"pid {int(info['pid'])}, `costmodel {info.get('command', '?')}` since {info.get('since', '?')}"
    except (OSError, ValueError, KeyError, TypeError):
        return "pid unknown"


def _acquire(target: Path, command: str, what: str) -> _Lock:
    """flock on the sibling lock file, non-blocking; the file names the holder for the refusal."""
    path = _lock_path(target)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise atomic.os_failure(path.parent, e) from None
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise atomic.os_failure(path, e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UserError(f"{what} {target} is being written by another costmodel process ({_holder(path)})",
                            f"wait for it to finish, or choose another {what}") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file as we opened it: lock the new one
    stamp = json.dumps({"pid": os.getpid(), "command": command, "since": time.strftime("%H:%M:%S UTC", time.gmtime())})
    try:
        os.ftruncate(fd, 0)
        os.write(fd, stamp.encode())
    except OSError:
        pass  # the lock holds without its note; a refused writer then reads "pid unknown"
    return _Lock(path, fd, threading.get_ident(), os.getpid())


def _release(lock: _Lock) -> None:
    """Remove the lock file and close its descriptor, once: `release_all` at the command's end and a
    `locked` block finalised later (a `hold` never closed, collected at exit) both reach here."""
    with _HELD_MUTEX:
        if lock.released:
            return
        lock.released = True
    try:
        lock.path.unlink()
    except OSError:
        pass
    os.close(lock.fd)


def claim(out: str | os.PathLike, command: str, what: str = "-o") -> Path:
    """Check `out` and take its lock for the rest of this command (released by `release_all`, or
    when the process ends): a second writer is refused before it starts any work."""
    atomic.check_output(out, directory=True, what=what)
    target = _target(out)
    _refuse_unsafe(target, what)
    refuse_foreign(target, command, what)
    with _HELD_MUTEX:
        held = _HELD.get(target)
    if held is not None and held.mine():
        return target
    lock = _acquire(target, command, what)
    with _HELD_MUTEX:
        _HELD[target] = lock
    atexit.register(release_all)  # a library caller that never calls release_all leaves no lock file behind
    return target


def release_all() -> None:
    """Release every lock `claim` took in this process (the CLI calls this as a command ends)."""
    with _HELD_MUTEX:
        locks = [lock for lock in _HELD.values() if lock.pid == os.getpid()]
        _HELD.clear()  # a forked child drops its parent's entries without touching the parent's lock files
    for lock in locks:
        _release(lock)


@contextmanager
def locked(out: str | os.PathLike, command: str, what: str = "-o", replaces: bool = True) -> Iterator[Path]:
    """The lock of `out` for the block; re-entrant within a thread (a claim, then the publishing).
    `replaces`: the writer will publish `out` whole (so never the working directory)."""
    target = _target(out)
    with _HELD_MUTEX:
        held = _HELD.get(target)
    if held is not None and held.mine():
        yield target
        return
    if replaces:
        _refuse_unsafe(target, what)
    lock = _acquire(target, command, what)
    with _HELD_MUTEX:
        _HELD[target] = lock
    try:
        yield target
    finally:
        with _HELD_MUTEX:
            if _HELD.get(target) is lock:
                del _HELD[target]
        _release(lock)


def hold(out: str | os.PathLike, command: str, what: str = "-o") -> Callable[[], None]:
    """Take the lock of `out` until the returned function is called (a writer that is not one
    block of code: a run directory written unit by unit, costmodel/schemas/rundir.py RunWriter)."""
    stack = ExitStack()
    stack.enter_context(locked(out, command, what, replaces=False))
    return stack.close


def _owned_files(d: Path) -> dict[str, list[str]]:
    """command -> the files in `d` named like its outputs (OWNED)."""
    names = [p.name for p in d.iterdir() if p.is_file()]
    return {cmd: found for cmd, pats in OWNED.items() if (found := sorted(n for n in names if any(fnmatch.fnmatch(n, p) for p in pats)))}


def refuse_foreign(target: Path, command: str, what: str = "-o") -> None:
    """A set that cannot be checked is not used: `target` holding another command's output set (its
    files would stay beside the new set's: a sweep's points/ beside a plan), or outputs without the
    manifest that checks them, is refused before any work, naming the fix. A sweep's points/ without
    results (a sweep interrupted before it published) is the sweep's to resume."""
    if not target.is_dir():
        return
    doc = _read_manifest(target)
    owned = _owned_files(target)
    if doc is None:
        if owned:
            cmd, files = next(iter(owned.items()))
            raise UserError(f"{what} {target} holds {cmd} outputs ({', '.join(files[:3])}) but no {MANIFEST}: a set that cannot be checked "
                            "is not replaced, resumed or read", f"delete {target}, or choose another {what}")
        if (target / "points").is_dir() and command != "sweep":
            raise UserError(f"{what} {target} holds a sweep's points/ (an unfinished sweep)", f"resume it with `costmodel sweep`, or choose another {what}")
        return
    prev = doc.get("command") if isinstance(doc, dict) and doc.get("kind") == MANIFEST_KIND else None
    if prev is None:
        raise UserError(f"{target / MANIFEST} is not a costmodel output manifest", f"delete {target}, or choose another {what}")
    if prev != command:
        raise UserError(f"{what} {target} holds a {prev} output set; a {command} set written there would leave its files beside its own",
                        f"choose another {what} (or delete {target})")


def _refuse_unsafe(target: Path, what: str) -> None:
    """Publishing replaces the directory whole, from a sibling folder: never the working directory,
    one of its parents or a mount point, and only where its parent folder takes new entries."""
    cwd = Path(os.getcwd())
    if target == cwd or target in cwd.parents or (target.exists() and os.path.ismount(target)):
        raise UserError(f"{what} {target} is the working directory, one of its parents or a mount point; "
                        "a command's outputs replace their directory as a whole", f"give a folder of its own, e.g. {what} {target / 'out'}")
    why = atomic.creatable(target.parent)
    if why:
        raise UserError(f"{what} {target}: its parent folder takes no new entries ({why}), and a command's outputs are staged beside "
                        "their directory and replace it whole", f"give a folder inside one you can write, e.g. {what} {target / 'run1'}")


# ---- publishing a directory ---------------------------------------------------------------------

def _clean_stale(target: Path) -> None:
    """Staging and old folders a killed writer left (we hold the lock: nobody else is using them).
    An old set whose writer died between its two renames (no exchange on that filesystem) goes back."""
    for p in target.parent.glob(f".{glob_escape(target.name)}{STAGING_MARK}*"):
        shutil.rmtree(p, ignore_errors=True)
    for p in sorted(target.parent.glob(f".{glob_escape(target.name)}{OLD_MARK}*"), key=lambda p: p.stat().st_mtime, reverse=True):
        if not target.exists():
            os.rename(p, target)
        else:
            shutil.rmtree(p, ignore_errors=True)


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[]" else c for c in name)


@contextmanager
def publishing(out: str | os.PathLike, command: str, keep: Iterable[str] = (), what: str = "-o") -> Iterator[Path]:
    """Yield a staging folder; on success its files become `out` in one step (see the module doc).
    `keep`: names in `out` that carry over even if a command owns them (a sweep's points/)."""
    atomic.check_output(out, directory=True, what=what)
    refuse_foreign(_target(out), command, what)
    with locked(out, command, what) as target:

        def publish(stage: Path) -> None:
            _write_manifest(stage, command)
            _publish(stage, target, set(keep))

        with _staging(target, publish, target) as stage:
            yield stage


@contextmanager
def _staging(target: Path, publish: Callable[[Path], None], named: Path) -> Iterator[Path]:
    """Yield a fresh staging folder beside `target` (a killed writer's left first cleaned: the
    caller holds the lock); `publish(stage)` once the body succeeds; the folder is removed either
    way. A UserError names `named` (what the user asked for), never the staging folder."""
    _clean_stale(target)
    stage = target.with_name(f".{target.name}{STAGING_MARK}{os.getpid()}-{uuid.uuid4().hex[:6]}")
    try:
        stage.mkdir(parents=True)
    except OSError as e:
        raise atomic.os_failure(target, e) from None
    try:
        yield stage
        publish(stage)
    except UserError as e:
        raise _renamed(e, stage, named) from None
    except OSError as e:
        raise atomic.os_failure(target, e) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _renamed(e: UserError, stage: Path, target: Path) -> UserError:
    """The error of a staged write, naming the output directory (not the staging folder)."""
    what = str(e.what).replace(str(stage), str(target))
    keep = " (it keeps its previous outputs)" if target.exists() else ""
    return type(e)(f"{what}; nothing was published to {target}{keep}", e.fix)


def published(paths: Iterable[Path], stage: Path, out: str | os.PathLike) -> list[Path]:
    """Paths written into `stage`, as they are named once published to `out`."""
    return [Path(out) / Path(p).relative_to(stage) for p in paths]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)


def _write_manifest(stage: Path, command: str) -> None:
    files = {f: {"bytes": (stage / f).stat().st_size, "sha256": _sha256(stage / f)} for f in _files(stage)}
    atomic.write_json(stage / MANIFEST, {"kind": MANIFEST_KIND, "version": 1, "command": command, "pid": os.getpid(),
                                         "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "files": files})
    fd = os.open(stage, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _owned(name: str, old_files: set[str]) -> bool:
    return name in old_files or name == MANIFEST or any(fnmatch.fnmatch(name, pat) for pats in OWNED.values() for pat in pats)


def _publish(stage: Path, target: Path, keep: set[str]) -> None:
    if not target.exists():
        os.rename(stage, target)
        return
    old = _read_manifest(target)
    old_top = {f.split("/")[0] for f in (old or {}).get("files", {})} if isinstance(old, dict) else set()
    new_top = {p.name for p in stage.iterdir()}
    carried = [p.name for p in target.iterdir() if p.name not in new_top and (p.name in keep or not _owned(p.name, old_top))]
    moved = []
    try:
        for name in carried:
            os.rename(target / name, stage / name)
            moved.append(name)
        gone = _swap(stage, target)
    except BaseException:  # an OS error or Ctrl-C before the swap: the carried entries go back, the old set stays as it was
        for name in moved:
            os.rename(stage / name, target / name)
        raise
    shutil.rmtree(gone, ignore_errors=True)


def _swap(stage: Path, target: Path) -> Path:
    """Exchange the two folders in one rename; where the kernel or filesystem cannot, two renames
    (a reader then sees no directory for an instant, never a mix). Returns where the old set is."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.renameat2(_AT_FDCWD, os.fsencode(stage), _AT_FDCWD, os.fsencode(target), _RENAME_EXCHANGE)
        err = ctypes.get_errno() if rc != 0 else 0
    except (AttributeError, OSError):
        rc, err = -1, errno.ENOSYS
    if rc == 0:
        return stage
    if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        raise OSError(err, os.strerror(err), str(target))
    old = target.with_name(f".{target.name}{OLD_MARK}{os.getpid()}-{uuid.uuid4().hex[:6]}")
    os.rename(target, old)
    try:
        os.rename(stage, target)
    except BaseException:
        os.rename(old, target)
        raise
    return old


# ---- readers ------------------------------------------------------------------------------------

def _read_manifest(d: Path):
    try:
        return json.loads((d / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError):
        return {}


def written_by(d: str | os.PathLike) -> str | None:
    """The command whose output set `d` holds, as its manifest says (None: no readable manifest)."""
    doc = _read_manifest(Path(d))
    return doc.get("command") if isinstance(doc, dict) and doc.get("kind") == MANIFEST_KIND else None


def verify(d: str | os.PathLike, rerun: str = "re-run the command that wrote it") -> bool:
    """Refuse a directory whose manifest does not match its files (a mixed or damaged set).
    False when it has no manifest (written before output sets had one); True when it matches."""
    d = Path(d)
    doc = _read_manifest(d)
    if doc is None:
        owned = _owned_files(d) if d.is_dir() else {}
        if owned:  # outputs whose manifest was deleted: an edited plan.json would be read as written
            cmd, files = next(iter(owned.items()))
            raise UserError(f"{d} holds {cmd} outputs ({', '.join(files[:3])}) but no {MANIFEST}: they cannot be checked, so they are not read", rerun)
        return False
    files = doc.get("files") if isinstance(doc, dict) and doc.get("kind") == MANIFEST_KIND else None
    if not isinstance(files, dict):
        raise UserError(f"{d / MANIFEST} is not a costmodel output manifest", f"{rerun} (or delete {d})")
    for name, want in files.items():
        p = d / name
        problem = _mismatch(p, want)
        if problem:
            raise UserError(f"{d} does not match its manifest: {name} {problem} (a mixed or damaged output set)", rerun)
    # a file named like any command's output that the manifest does not list (a summary.csv beside a
    # sweep's table would make the directory read as another kind of set): publishing never carries one
    extra = [p.name for p in d.iterdir() if p.is_file() and p.name not in files and p.name != MANIFEST
             and any(fnmatch.fnmatch(p.name, pat) for pats in OWNED.values() for pat in pats)]
    if extra:
        raise UserError(f"{d} holds {', '.join(sorted(extra)[:3])} beside its output set, not in its manifest", rerun)
    return True


def read_set(d: str | os.PathLike, read: Callable[[Path], T], rerun: str = "re-run the command that wrote it") -> T:
    """`read(root)` on one version of the set in `d`: the directory is opened once and every file is
    read through that handle (root = /proc/self/fd/N on Linux), after its manifest is checked, so a
    set published meanwhile cannot mix into this read. A set replaced while it was read (the path
    names another directory by the end: its files may have been removed under the read) is read
    again, as the set now there. Errors name `d`, not the handle."""
    d = Path(d)
    for _ in range(READ_ATTEMPTS):
        try:
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return _plain_read(d, read, rerun)  # not a directory we can open: the reader's own errors
        try:
            root = Path(f"/proc/self/fd/{fd}")
            if not root.is_dir():
                return _plain_read(d, read, rerun)
            try:
                verify(root, rerun)
                result = read(root)
            except Exception as e:  # noqa: BLE001 - whatever a reader makes of files removed under it
                if _replaced(d, fd):
                    continue
                if isinstance(e, UserError):  # the handle is ours: the user named d, in the line and in its fix
                    raise type(e)(str(e.what).replace(str(root), str(d)), e.fix and str(e.fix).replace(str(root), str(d))) from None
                raise
            if not _replaced(d, fd):
                return result
        finally:
            os.close(fd)
    raise UserError(f"{d} was replaced {READ_ATTEMPTS} times while being read", "read it again once its writer has finished")


READ_ATTEMPTS = 5


def _replaced(d: Path, fd: int) -> bool:
    try:
        return os.stat(d).st_ino != os.fstat(fd).st_ino
    except OSError:
        return True


def _plain_read(d: Path, read, rerun: str):
    if d.is_dir():
        verify(d, rerun)
    return read(d)


def _mismatch(p: Path, want) -> str:
    if not isinstance(want, dict):
        return "has no size and checksum"
    try:
        size = p.stat().st_size
    except OSError:
        return "is missing"
    if size != want.get("bytes"):
        return f"has {size} bytes, not {want.get('bytes')}"
    if _sha256(p) != want.get("sha256"):
        return "changed since it was written"
    return ""


# ---- a group of files beside each other (a report) ----------------------------------------------

@contextmanager
def publishing_files(out_file: str | os.PathLike, command: str, what: str = "-o") -> Iterator[Path]:
    """Yield a staging folder for files that land beside `out_file` (it and its companions, named
    as they will be); they are moved into place, `out_file` last, only once every one is written."""
    target = _target(out_file)
    with locked(target, command, what):

        def publish(stage: Path) -> None:
            names = sorted((p.name for p in stage.iterdir()), key=lambda n: n == target.name)
            for name in names:
                os.replace(stage / name, target.parent / name)

        with _staging(target, publish, target.parent) as stage:
            yield stage
