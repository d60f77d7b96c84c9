"""The compiled simulator (costmodel/native.py) is the pure-Python one, faster: the same numbers for
every mode, and a build older than its sources is never used."""

from __future__ import annotations

import importlib.machinery
import json
import math
import os
import subprocess
import sys

import pytest

import simulate.scheduler
from costmodel import native
from costmodel.native import NATIVE_MODULES, compiled_modules, source_hash, source_stat

# every mode, async on and off, and a KV cache small enough to preempt; diffusion with a budget of
# two canvases and a partial one (600 = 2 x 256 + 88), preempting
CASES = [("diffusion", 9.0, {}), ("ar", 30.0, {"async_scheduling": False}), ("mtp", 30.0, {}),
         ("ar", 40.0, {"kv_capacity_tokens": 12000}),  # in tokens: what a memory share leaves moves with the profile and memory model
         ("diffusion", 9.0, {"max_num_batched_tokens": 600, "max_num_seqs": 6, "kv_capacity_tokens": 3000})]
RUN = """
import dataclasses, json, sys
from costmodel.shipped import resolve_profile
from simulate.api import run_point
from simulate.engine import EngineConfig
import costmodel.native
out = {"compiled": costmodel.native.active(), "runs": []}
for mode, qps, eng in json.loads(sys.argv[1]):
    s = run_point(resolve_profile(None, "h200"), mode, qps, replicas=2, n_requests=400, seed=5, engine=EngineConfig(**eng)).summary
    out["runs"].append({k: v for k, v in dataclasses.asdict(s).items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
print(json.dumps(out))
"""


def _run(pure: bool) -> dict:
    env = {**os.environ, native.PURE_ENV: "1"} if pure else {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    res = subprocess.run([sys.executable, "-c", RUN, json.dumps(CASES)], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _close(a, b) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.skipif(not compiled_modules()[0], reason=f"the simulator is not compiled here ({compiled_modules()[1]}): {native.REBUILD}")
def test_compiled_and_pure_python_simulators_give_the_same_numbers():
    compiled, pure = _run(pure=False), _run(pure=True)
    assert compiled["compiled"] and not pure["compiled"]
    for (mode, _, _), c, p in zip(CASES, compiled["runs"], pure["runs"]):
        assert c["engine_steps"] > 500, mode
        assert [(k, c[k], p[k]) for k in c if not _close(c[k], p[k])] == [], mode
    assert compiled["runs"][3]["preemptions"] > 0 and compiled["runs"][4]["preemptions"] > 0


def test_this_process_uses_the_build_exactly_when_it_is_current():
    mods, why = compiled_modules()
    if os.environ.get(native.PURE_ENV):
        assert not native.active()
    else:
        assert native.active() == bool(mods), why
        assert simulate.scheduler.__file__.endswith(".py") != bool(mods)


def _fake_build(tmp_path, edit=lambda entries: None):
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]  # this interpreter's
    entries = {m: {"file": m.replace(".", "/") + suffix, "sha256": source_hash(m)} for m in NATIVE_MODULES}
    for e in entries.values():
        (tmp_path / e["file"]).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / e["file"]).write_bytes(b"")
    edit(entries)
    (tmp_path / native.MANIFEST).write_text(json.dumps({"modules": entries}))
    return tmp_path


def test_a_build_older_than_any_of_its_sources_is_not_used(tmp_path):
    assert len(compiled_modules(_fake_build(tmp_path / "current"))[0]) == len(NATIVE_MODULES)

    def edit(entries):
        entries["simulate.engines.ar"]["sha256"] = "0" * 64  # built from another ar.py / ar.pxd

    mods, why = compiled_modules(_fake_build(tmp_path / "stale", edit))
    assert mods == {} and why == "simulate.engines.ar's sources changed since the build"


def test_unchanged_sources_are_known_by_their_stat_without_hashing(tmp_path):
    def stale_hash_same_stat(entries):
        for m, e in entries.items():
            e["sha256"], e["stat"] = "0" * 64, source_stat(m)  # what the build saw, file by file

    assert len(compiled_modules(_fake_build(tmp_path / "by-stat", stale_hash_same_stat))[0]) == len(NATIVE_MODULES)

    def touched(entries):
        stale_hash_same_stat(entries)
        entries["simulate.engines.ar"]["stat"][0][2] -= 1  # ar.py touched since: its hash decides, and it differs

    assert compiled_modules(_fake_build(tmp_path / "touched", touched))[1] == "simulate.engines.ar's sources changed since the build"


def test_no_build_or_a_broken_one_runs_pure_python(tmp_path):
    assert compiled_modules(tmp_path) == ({}, "not built")
    (tmp_path / native.MANIFEST).write_text("{")
    assert compiled_modules(tmp_path)[1].endswith("is unreadable")


def test_status_says_which_simulator_runs():
    line = native.status()
    assert line.startswith("simulator: compiled") == native.active()
    assert "build_native" in line or native.active()


def test_the_compiled_loop_has_the_same_shape_as_the_python_one():
    """The .pxd files declare only what their .py defines (a rename in one and not the other fails
    the build; this says which)."""
    import re
    from pathlib import Path

    for mod in NATIVE_MODULES:
        base = Path(native.ROOT, *mod.split("."))
        if not base.with_suffix(".pxd").exists():
            continue
        py = base.with_suffix(".py").read_text()
        for name in re.findall(r"cpdef (?:[\w.]+\s+)?(\w+)\(", base.with_suffix(".pxd").read_text()):
            assert re.search(rf"def {name}\(", py), (mod, name)
        for name in re.findall(r"^cdef class (\w+)", base.with_suffix(".pxd").read_text(), re.M):
            assert re.search(rf"^class {name}\b", py, re.M), (mod, name)


def test_make_rebuilds_when_any_compiled_module_changes():
    """The Makefile's NATIVE_PY (what `make` watches) is NATIVE_MODULES' .py files: a module added to one is added to both."""
    import re
    from pathlib import Path

    text = Path(native.ROOT, "Makefile").read_text()
    listed = re.search(r"^NATIVE_PY := (.*?)\n(?!\t)", text, re.S | re.M).group(1).replace("\\", " ").split()
    assert listed == [m.replace(".", "/") + ".py" for m in NATIVE_MODULES]
