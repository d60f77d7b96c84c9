"""The vocabulary imports no stage, and no stage another (issue 40, "no upward arrows"): pyproject.toml's
import-linter contracts say so for the whole `costmodel` package, its CLI included, with no exceptions,
and for the three stages' independence. The CLI reaches the stages only through its two registries of
"module:attribute" strings, imported when used: COMMANDS (a sub-command) and STEPS (another stage's
step a command calls by name); each entry must name a module of a package and resolve."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

from costmodel.cli import COMMANDS, HELP
from costmodel.cli.steps import STEPS, step

ROOT = Path(__file__).resolve().parents[1]
STAGES = {"measure", "simulate", "reports"}


def contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_the_whole_vocabulary_may_import_no_stage_without_exceptions():
    c = next(c for c in contracts() if c["type"] == "forbidden" and c["source_modules"] == ["costmodel"])
    assert set(c["forbidden_modules"]) == STAGES
    assert not c.get("ignore_imports") and not c.get("allow_indirect_imports")


def test_the_stages_are_independent():
    c = next(c for c in contracts() if c["type"] == "independence")
    assert set(c["modules"]) == STAGES and not c.get("ignore_imports")


def test_every_command_lives_in_a_package_and_resolves():
    assert list(HELP) == list(COMMANDS)
    for name, target in COMMANDS.items():
        module, attr = target.split(":")
        assert module.split(".")[0] in STAGES | {"costmodel"}, name
        assert module.split(".")[:2] in ([module.split(".")[0], "cli"],), f"{name}: a command lives in a package's cli/ ({module})"
        assert getattr(importlib.import_module(module), attr).name == name


def test_every_step_crosses_to_a_stage_resolves_and_says_what_it_does():
    for name, target in STEPS.items():
        assert target.split(".")[0] in STAGES, name
        fn = step(name)
        assert callable(fn) and (fn.__doc__ or "").strip(), f"step {name} ({target}) needs a docstring"
