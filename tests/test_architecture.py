"""The vocabulary imports no stage, and the contract that says so covers all of it: pyproject.toml's
import-linter contract lists the vocabulary's modules by name (so the CLI, which sits inside the
costmodel package on top of everything, needs no ignore list), and that list must name every
top-level module of costmodel but its CLI. A module added to costmodel and not to the list would
escape `lint-imports`."""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

import costmodel

ROOT = Path(__file__).resolve().parents[1]
CLI = "costmodel.cli"


def vocabulary_contract() -> dict:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c["type"] == "forbidden" and CLI in c["forbidden_modules"])


def test_the_vocabulary_contract_names_every_module_of_costmodel_but_its_cli():
    modules = {f"costmodel.{m.name}" for m in pkgutil.iter_modules(costmodel.__path__)} - {CLI}
    listed = set(vocabulary_contract()["source_modules"])
    assert modules - listed == set(), f"add to pyproject.toml's vocabulary contract: {sorted(modules - listed)}"
    assert listed - modules == set(), f"pyproject.toml's vocabulary contract names modules that do not exist: {sorted(listed - modules)}"


def test_the_vocabulary_may_import_no_stage():
    assert set(vocabulary_contract()["forbidden_modules"]) == {CLI, "measure", "simulate", "reports"}
