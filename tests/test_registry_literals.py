"""The registries cannot be bypassed: no code names a serving mode, a GPU or a pass kind by a string
literal outside the registry or catalog that defines it. Code that needs to know something about a
mode asks the mode (costmodel/modes: its pass kinds, parts, traits and hooks), about a pass kind its
`PassKind` (costmodel/roofline.py), about a GPU its catalog entry (costmodel/hardware.py,
costmodel/data/hardware.json), so a new member is one module and one line.

What is scanned: every module of the four installed packages (costmodel, measure, simulate,
reports); docstrings are text and are skipped, tests and docs are not code. A literal is a string
constant equal to a registered name ("mtp", "h200", "decode_step", ...).

ALLOWED is what is left to convert: each entry names a file (or a folder, ending in "/", counted
together), the most literals it may hold and why they are still there. It only shrinks: an entry
over its count fails (a new literal), an entry whose files are clean fails (drop it). It is empty:
only the registries (HOMES) spell the names they define."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from costmodel.hardware import catalog
from costmodel.modes import mode_names
from costmodel.roofline import PASS_KINDS

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("costmodel", "measure", "simulate", "reports")

# where each kind of name is defined (and may be spelled out): registry or catalog
HOMES = {
    "mode": ("costmodel/modes/",),
    "pass kind": ("costmodel/modes/", "costmodel/roofline.py"),
    "gpu": ("costmodel/hardware.py", "costmodel/data/"),
}

# file -> (most literals, why they remain): none remain outside the registries
ALLOWED: dict[str, tuple[int, str]] = {}


def registered_names() -> dict[str, str]:
    return {**{m: "mode" for m in mode_names()}, **{k: "pass kind" for k in PASS_KINDS}, **{g: "gpu" for g in catalog()}}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def literals(text: str, rel: str, names: dict[str, str]) -> list[tuple[int, str, str]]:
    """(line, name, what) of every registered name spelled as a string constant in a module's text
    (not in docstrings, not where the name's registry lives: `rel` is its path in the repository)."""
    tree = ast.parse(text, rel)
    docs = _docstrings(tree)
    return [(n.lineno, n.value, names[n.value]) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs and n.value in names
            and not rel.startswith(HOMES[names[n.value]])]


def scan() -> dict[str, list]:
    names = registered_names()
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            hits = literals(path.read_text(), path.relative_to(ROOT).as_posix(), names)
            if hits:
                found[path.relative_to(ROOT).as_posix()] = hits
    return found


def entry_of(path: str) -> str:
    """The ALLOWED entry that covers a file: its own, else its folder's, else the file."""
    return path if path in ALLOWED else next((d for d in ALLOWED if d.endswith("/") and path.startswith(d)), path)


def by_entry(found: dict[str, list]) -> dict[str, list]:
    out: dict[str, list] = {}
    for f, hits in found.items():
        out.setdefault(entry_of(f), []).extend((f, *h) for h in hits)
    return out


def test_no_registry_name_is_spelled_out_outside_its_registry():
    found = by_entry(scan())
    over = {e: hits for e, hits in found.items() if len(hits) > ALLOWED.get(e, (0, ""))[0]}
    assert not over, "registered names spelled as literals (ask the registry: costmodel.modes, PassKind, the GPU catalog):\n" + "\n".join(
        f"{f}:{line}: {what} {name!r}" for hits in over.values() for f, line, name, what in hits)


def test_the_allowlist_only_names_files_that_still_need_it():
    found = by_entry(scan())
    stale = [e for e in ALLOWED if e not in found]
    assert not stale, f"these files hold no registered literal any more: drop them from ALLOWED: {stale}"


def test_the_check_sees_a_literal_and_spares_docstrings_and_the_registry():
    names = registered_names()
    text = '"""mtp in a docstring is text."""\nMODE = "mtp"\nKIND = f"{MODE}_x"\n'
    assert [(n, w) for _, n, w in literals(text, "measure/x.py", names)] == [("mtp", "mode")]
    assert literals('MODE = "mtp"\n', "costmodel/modes/x.py", names) == []
    assert [w for _, _, w in literals('GPU = "h200"\n', "costmodel/modes/x.py", names)] == ["gpu"]


@pytest.mark.parametrize("what", sorted(HOMES))
def test_every_kind_of_name_has_members(what):
    assert what in set(registered_names().values())
