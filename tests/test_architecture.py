"""The vocabulary imports no stage, no stage another, and what needs two stages chains them in one
visible layer (issue 51, "a house without hidden doors"): pyproject.toml's import-linter contracts
say so for the whole `costmodel` package, its CLI included, the three stages' independence and the
`pipeline` layer above them, with no exceptions. The CLI reaches the stages only through COMMANDS,
"module:attribute" strings imported when a command runs; no registry of named cross-stage steps is
left (a step of another stage is an import the contracts see, from pipeline/)."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

from costmodel.cli import COMMANDS, HELP

ROOT = Path(__file__).resolve().parents[1]
STAGES = {"measure", "simulate", "reports"}
CHAINS = "pipeline"


def contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_no_contract_has_exceptions():
    for c in contracts():
        assert not c.get("ignore_imports") and not c.get("allow_indirect_imports"), c["name"]


def test_the_whole_vocabulary_may_import_no_stage_and_no_chain():
    c = next(c for c in contracts() if c["type"] == "forbidden" and c["source_modules"] == ["costmodel"])
    assert set(c["forbidden_modules"]) == STAGES | {CHAINS}


def test_the_stages_are_independent():
    c = next(c for c in contracts() if c["type"] == "independence")
    assert set(c["modules"]) == STAGES


def test_the_chains_sit_above_the_stages_and_nothing_imports_them():
    c = next(c for c in contracts() if c["type"] == "layers" and c["layers"][0] == CHAINS)
    assert c["layers"] == [CHAINS, " | ".join(sorted(STAGES, key=["measure", "simulate", "reports"].index)), "costmodel"]


def test_every_command_lives_in_a_package_and_resolves():
    assert list(HELP) == list(COMMANDS)
    for name, target in COMMANDS.items():
        module, attr = target.split(":")
        assert module.split(".")[0] in STAGES | {"costmodel", CHAINS}, name
        assert module.split(".")[:2] in ([module.split(".")[0], "cli"],), f"{name}: a command lives in a package's cli/ ({module})"
        assert getattr(importlib.import_module(module), attr).name == name


def test_a_chained_command_is_one_that_needs_two_stages():
    """Only fit and validate chain stages; every other command lives in the one stage it needs."""
    chained = {name for name, target in COMMANDS.items() if target.startswith(CHAINS + ".")}
    assert chained == {"fit", "validate"}


def test_no_named_step_registry_is_left():
    assert not (ROOT / "costmodel" / "cli" / "steps.py").exists()
    for pkg in (*STAGES, "costmodel", CHAINS):
        for path in (ROOT / pkg).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            assert "cli import steps" not in text and "steps.call(" not in text, f"{path}: a step called by name"
