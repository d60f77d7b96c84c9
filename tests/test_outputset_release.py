"""A lock is released once (costmodel/outputset.py `_release`): a run directory's writer that is never
closed (`hold`) and the command's `release_all` at its end both reach the lock, and the process ends
without `Exception ignored ... OSError: [Errno 9] Bad file descriptor` (issue 49)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_hold_never_closed_ends_the_process_quietly(tmp_path):
    code = ("import sys\nfrom costmodel import outputset\n"
            "unlock = outputset.hold(sys.argv[1], 'measure')\n"  # kept alive until the interpreter collects it
            "outputset.release_all()\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0
    assert out.stderr == ""
    assert not list(tmp_path.glob(".*costmodel-lock"))  # the lock file went with the first release


def test_releasing_twice_closes_the_descriptor_once(tmp_path):
    from costmodel import outputset

    unlock = outputset.hold(tmp_path / "run", "measure")
    outputset.release_all()
    unlock()  # the hold's own release after release_all: nothing left to close
    assert not list(tmp_path.glob(".*costmodel-lock"))
