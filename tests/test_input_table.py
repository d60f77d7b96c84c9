"""The table of inputs (costmodel/inputs.py) declares every click option of every command and every
field of the profile schema; a new option or field fails here until it is declared (kind, range,
unit, scope), and from then on the edge checks it and the fuzz suite draws from it."""

from __future__ import annotations

import dataclasses
import importlib
import typing

import click
import pytest

from costmodel import inputs
from costmodel.cli import COMMANDS


def _commands():
    def walk(cmd, path):
        yield path, cmd
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from walk(sub, f"{path} {name}")

    for name, target in COMMANDS.items():
        module, attr = target.split(":")
        yield from walk(getattr(importlib.import_module(module), attr), name)


def test_every_option_of_every_command_is_declared():
    missing = []
    for path, cmd in _commands():
        for p in cmd.params:
            if isinstance(p, click.Option) and p.name not in ("help", "version"):
                if not any(inputs.option(path, o) for o in p.opts):
                    missing.append(f"costmodel {path} {'/'.join(p.opts)}")
            elif isinstance(p, click.Argument) and (path, p.name) not in inputs.ARGUMENTS:
                missing.append(f"costmodel {path} argument {p.name}")
    assert not missing, "declare these in costmodel/inputs.py: " + ", ".join(missing)


def test_every_declaration_has_a_kind_and_a_numbers_field():
    for i in (*inputs.OPTIONS, *inputs.FILE_FIELDS, *inputs.PROFILE_FIELDS.values()):
        assert i.kind in inputs.KINDS and i.source in inputs.SOURCES, i
        if i.field is not None:
            assert i.field.lo <= i.field.hi, i


def _schema_fields(cls, seen) -> set[str]:
    if not isinstance(cls, type) or cls.__name__ in seen or not dataclasses.is_dataclass(cls):
        return set()
    seen.add(cls.__name__)
    hints = typing.get_type_hints(cls)
    out = set()
    for f in dataclasses.fields(cls):
        out.add(f"{cls.__name__}.{f.name}")
        for t in _leaf_types(hints.get(f.name)):
            out |= _schema_fields(t, seen)
    return out


def _leaf_types(t):
    if t is None:
        return []
    args = typing.get_args(t)
    return [t] if not args else [x for a in args for x in _leaf_types(a)]


def test_every_profile_schema_field_is_declared():
    from costmodel.hardware import HardwareSpec
    from costmodel.modes import profile_parts
    from costmodel.schemas.profile import Profile

    seen: set[str] = set()
    names = _schema_fields(Profile, seen) | _schema_fields(HardwareSpec, seen)
    for part in profile_parts():  # each registered part's records (commit statistics, MTP acceptance)
        for rec in _part_records(part):
            names |= _schema_fields(rec, seen)
    missing = sorted(n for n in names if n not in inputs.PROFILE_FIELDS)
    assert not missing, f"declare these profile fields in costmodel/inputs.py PROFILE_FIELDS: {missing}"


def _part_records(part) -> list[type]:
    hints = typing.get_type_hints(type(part).load)
    return [t for t in _leaf_types(hints.get("return")) if dataclasses.is_dataclass(t)]


def test_the_sweep_specs_parameters_are_declared():
    from simulate.sweep.spec import PARAMS

    declared = {i.name for i in inputs.fields_of("sweep spec")}
    assert set(PARAMS) <= declared, set(PARAMS) - declared


@pytest.mark.parametrize("decl", [i for i in inputs.OPTIONS if i.field is not None], ids=lambda i: f"{i.commands[0]}{i.name}")
def test_each_numeric_field_accepts_its_bounds_and_refuses_past_them(decl):
    from costmodel.errors import UserError

    for v in inputs.at_bounds(decl.field):
        decl.field.check(v)
    for v in inputs.past_bounds(decl.field):
        with pytest.raises(UserError, match=decl.name):
            decl.field.check(v)


def test_the_relations_name_their_checkers():
    for what, where in inputs.RELATIONS.items():
        module, _, name = where.rpartition(".")
        assert hasattr(importlib.import_module(module), name), (what, where)
