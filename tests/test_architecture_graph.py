"""docs/architecture.md cannot drift from the code: its `deps` block (the arrows between the four
packages, their stage sub-packages and the chains above them, `pipeline`) must be exactly the import
graph that grimp (import-linter's graph builder) reads from the code. A failure prints the block as
the code has it."""

from __future__ import annotations

import re
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("costmodel", "measure", "simulate", "reports", "pipeline")
# the nodes of the picture, most specific first: a module belongs to the first that contains it
NODES = ("measure.cli", "measure.validate", "measure.fit", "measure.analyze", "measure", "simulate.cli", "simulate.plan", "simulate.sweep",
         "simulate.validate", "simulate", "reports.cli", "reports", "pipeline.cli", "pipeline", "costmodel")


def node_of(module: str) -> str:
    return next(n for n in NODES if module == n or module.startswith(n + "."))


def code_arrows() -> dict[str, set[str]]:
    graph = grimp.build_graph(*PACKAGES)
    arrows: dict[str, set[str]] = {}
    for m in graph.modules:
        a = node_of(m)
        for imported in graph.find_modules_directly_imported_by(m):
            b = node_of(imported)
            if a != b:
                arrows.setdefault(a, set()).add(b)
    return arrows


def doc_arrows(text: str) -> dict[str, set[str]]:
    block = re.search(r"```deps\n(.*?)```", text, re.S)
    assert block, f"{DOC} has no ```deps block"
    arrows = {}
    for line in block.group(1).strip().splitlines():
        src, _, dsts = line.partition("->")
        arrows[src.strip()] = {d.strip() for d in dsts.split(",") if d.strip()}
    return arrows


def render(arrows: dict[str, set[str]]) -> str:
    return "\n".join(f"{a} -> {', '.join(sorted(bs))}" for a, bs in sorted(arrows.items()))


def test_the_documented_package_arrows_are_the_import_graph():
    code, doc = code_arrows(), doc_arrows(DOC.read_text())
    assert doc == code, f"docs/architecture.md's deps block differs from the imports; the code has:\n```deps\n{render(code)}\n```"


def test_every_node_of_the_picture_is_a_package_of_the_code():
    graph = grimp.build_graph(*PACKAGES)
    assert all(n in graph.modules for n in NODES)
    assert set(doc_arrows(DOC.read_text())) <= set(NODES)


def test_no_arrow_runs_up_to_the_vocabulary_or_between_stages():
    """The vocabulary (its CLI's root group included) imports no stage, and a stage imports only itself
    and the vocabulary; what needs two stages is pipeline's, which imports them and which nothing imports."""
    for a, bs in code_arrows().items():
        for b in bs:
            top_a, top_b = a.split(".")[0], b.split(".")[0]
            if top_a == "pipeline":
                continue
            assert top_b in (top_a, "costmodel"), f"{a} imports {b}: " + ("the vocabulary imports no stage" if top_a == "costmodel" else "another stage")
