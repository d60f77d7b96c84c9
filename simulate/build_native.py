"""Compile the hot modules with Cython: the simulator's and the step pricer's it calls (costmodel/native.py
says which and how they are used).

    python -m simulate.build_native [--out DIR] [--jobs N] [--if-possible]
    python -m simulate.build_native --status
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from costmodel.native import MANIFEST, NATIVE_MODULES, ROOT, native_dir, source_hash, source_stat, sources, status

# Python's semantics kept: true division, Python integer division and modulo, bounds and None
# checks; annotations are documentation here, the .pxd files carry the C types
DIRECTIVES = {"language_level": 3, "annotation_typing": False, "binding": True}


def build(out: Path | None = None, jobs: int = 2, quiet: bool = False) -> Path:
    """Compile NATIVE_MODULES into `out` (default build/native) and write its manifest last, so an
    interrupted build leaves the previous one in force or none. Needs Cython and a C compiler."""
    try:
        from Cython.Build import cythonize  # optional: only building needs it
    except ImportError:
        raise SystemExit("error: Cython is not installed; pip install 'cython>=3' (or: pip install -e '.[native]')") from None
    import tempfile

    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    out = native_dir() if out is None else out
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)  # the old build is no longer current once we start
    hashes = {m: source_hash(m) for m in NATIVE_MODULES}
    stats = {m: source_stat(m) for m in NATIVE_MODULES}  # taken with the hashes: a source edited during the build is seen
    with tempfile.TemporaryDirectory(prefix="costmodel-native-") as tmp:
        exts = [Extension(m, [str(sources(m)[0].relative_to(ROOT))]) for m in NATIVE_MODULES]
        cwd = os.getcwd()
        os.chdir(ROOT)  # Cython finds the cimported .pxd files by package path from here
        try:
            exts = cythonize(exts, build_dir=tmp, compiler_directives=DIRECTIVES, quiet=quiet, nthreads=jobs, force=True)
            dist = Distribution({"ext_modules": exts})
            cmd = build_ext(dist)
            cmd.build_lib, cmd.build_temp, cmd.parallel = str(out), tmp, jobs
            cmd.ensure_finalized()
            cmd.run()
            files = {e.name: Path(cmd.get_ext_fullpath(e.name)).resolve().relative_to(out.resolve()) for e in exts}
        finally:
            os.chdir(cwd)
    import Cython

    manifest = {"cython": Cython.__version__, "python": sys.version.split()[0],
                "modules": {m: {"file": str(files[m]), "sha256": hashes[m], "stat": stats[m]} for m in NATIVE_MODULES}}
    tmpman = out / (MANIFEST + ".tmp")
    tmpman.write_text(json.dumps(manifest, indent=1))
    tmpman.replace(out / MANIFEST)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m simulate.build_native", description="Compile the simulator's hot modules with Cython.")
    ap.add_argument("--status", action="store_true", help="say which simulator runs (compiled or pure Python) and why")
    ap.add_argument("--out", type=Path, default=None, help=f"build directory (default {native_dir()})")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--if-possible", action="store_true", help="a missing Cython or C compiler is a note, not an error (make's default)")
    a = ap.parse_args(argv)
    if a.status:
        print(status())
        return 0
    try:
        out = build(a.out, a.jobs, quiet=True)
    except (SystemExit, Exception) as e:  # noqa: BLE001 - a build failure is reported as one line
        msg = str(e).removeprefix("error: ") or type(e).__name__
        if a.if_possible:
            print(f"note: the simulator stays pure Python (about 4x slower): {msg.splitlines()[0]}", file=sys.stderr)
            return 0
        print(f"error: the native build failed: {msg.splitlines()[0]}; install Cython and a C compiler, or run pure Python", file=sys.stderr)
        return 2
    print(f"compiled {len(NATIVE_MODULES)} modules (the simulator and its step pricer) into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
