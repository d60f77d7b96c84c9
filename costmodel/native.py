"""The hot modules compiled with Cython, used when present and current: the simulator's event loop and
engines, and the step pricer it calls on every new step shape (costmodel's roofline and stepcost).

The .py files stay the source of truth and run as they are without a compiler. `python -m
simulate.build_native` (simulate/build_native.py; run by `make run` and `make test`) compiles NATIVE_MODULES, each with the
typed declarations of its augmenting .pxd file beside it where it has one (cdef classes, typed attributes, locals
and signatures: Cython's pure-Python mode), into build/native/, with a manifest of the sources' hashes.
`import costmodel` installs the finder (costmodel/__init__.py: the pricer's modules are imported long before
the simulator's, by every command), and the compiled modules are used only when every one of them was built
from the sources as they are now: edit one .py or .pxd and the whole set falls back to Python (the compiled
modules share cdef types, so it is all or nothing) with one warning naming the rebuild command.
COSTMODEL_PURE_PYTHON=1 always runs the .py files. Both paths give the same results (tests/test_native.py).
This module names the stage's modules it compiles as strings: it imports none of them.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the modules compiled, in dependency order (cimported cdef types first)
NATIVE_MODULES = (
    "costmodel.roofline",
    "costmodel.stepcost.linear",
    "costmodel.stepcost.engine_step",
    "costmodel.stepcost.host_overhead",
    "costmodel.stepcost.resolved",
    "simulate.request",
    "simulate.kvcache",
    "simulate.metrics",
    "simulate.scheduler",
    "simulate.engines.ar",
    "simulate.engines.mtp",
    "simulate.engines.diffusion",
    "simulate.steptime",
    "simulate.sim",
)
MANIFEST = "manifest.json"
PURE_ENV = "COSTMODEL_PURE_PYTHON"
DIR_ENV = "COSTMODEL_NATIVE_DIR"
REBUILD = "python -m simulate.build_native (or make native)"


def native_dir() -> Path:
    return Path(os.environ.get(DIR_ENV) or ROOT / "build" / "native")


def sources(module: str, root: Path = ROOT) -> list[Path]:
    base = root.joinpath(*module.split("."))
    return [p for p in (base.with_suffix(".py"), base.with_suffix(".pxd")) if p.exists()]


def source_hash(module: str, root: Path = ROOT) -> str:
    """sha256 of a module's .py and .pxd as they are now."""
    import hashlib  # (here, not at start-up: only a check of a build hashes)

    h = hashlib.sha256()
    for p in sources(module, root):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def source_stat(module: str, root: Path = ROOT) -> list:
    """(name, size, mtime_ns) of a module's .py and .pxd: unchanged files are known by their stat, so a start-up
    hashes sources only when one was touched (hashlib's import alone cost a one-request run ~10 ms)."""
    return [[p.name, st.st_size, st.st_mtime_ns] for p in sources(module, root) for st in (p.stat(),)]


def compiled_modules(build: Path | None = None, root: Path = ROOT) -> tuple[dict[str, Path], str]:
    """({module: compiled file}, why not) for the build in `build`: every NATIVE_MODULES entry built
    for this interpreter from the current sources, or ({}, the reason)."""
    build = native_dir() if build is None else build
    man = build / MANIFEST
    if not man.exists():
        return {}, "not built"
    import json

    try:
        entries = json.loads(man.read_text())["modules"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}, f"{man} is unreadable"
    out = {}
    for mod in NATIVE_MODULES:
        e = entries.get(mod)
        if not isinstance(e, dict):
            return {}, f"{mod} is missing from the build"
        path = build / e.get("file", "")
        if not any(path.name.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES) or not path.is_file():
            return {}, f"{mod} was built for another Python or is missing"
        if e.get("stat") != source_stat(mod, root) and e.get("sha256") != source_hash(mod, root):
            return {}, f"{mod}'s sources changed since the build"
        out[mod] = path
    return out, ""


class NativeFinder:
    """Imports the modules of a current build from their compiled files (a meta path finder: `find_spec` is
    all the import system asks of one; importlib.abc's base class would cost the start-up its import)."""

    def __init__(self, modules: dict[str, Path]):
        self.modules = modules

    def find_spec(self, name, path=None, target=None):
        so = self.modules.get(name)
        if so is None:
            return None
        return importlib.util.spec_from_file_location(name, so)


_STATE = {"installed": False, "why": "not installed"}


def install() -> None:
    """Put a NativeFinder first on sys.meta_path when a current build exists (once per process)."""
    if _STATE["installed"]:
        return
    _STATE["installed"] = True
    if os.environ.get(PURE_ENV):
        _STATE["why"] = f"{PURE_ENV} is set"
        return
    mods, why = compiled_modules()
    _STATE["why"] = why
    if not mods:
        return
    if any(m in sys.modules for m in mods):  # imported before the finder: keep one copy of each type
        _STATE["why"] = "imported before the finder"
        return
    sys.meta_path.insert(0, NativeFinder(mods))


def warn_if_stale() -> None:
    """One warning per process when a build exists but cannot be used (the simulator calls this as
    a point starts: importing the package, e.g. to rebuild, stays quiet)."""
    why = _STATE["why"]
    if why and why not in ("not built", f"{PURE_ENV} is set") and not _STATE.get("warned"):
        _STATE["warned"] = True
        warnings.warn(f"the compiled simulator is not used ({why}); the pure-Python one runs, about 4x slower: rebuild with {REBUILD}",
                      stacklevel=3)


def active() -> bool:
    """True when the compiled modules run (all or none of them do: the first of them tells)."""
    mod = sys.modules.get(NATIVE_MODULES[0])
    return mod is not None and not str(getattr(mod, "__file__", "")).endswith(".py")


def status() -> str:
    """One line: which simulator runs and why (benchmarks print it)."""
    import costmodel.roofline  # noqa: F401  (NATIVE_MODULES[0], imported through the finder, if installed)

    if active():
        return f"simulator: compiled (Cython, {native_dir()})"
    return f"simulator: pure Python ({_STATE['why']}; {REBUILD} compiles it)"
