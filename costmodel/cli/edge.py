"""The edge of every command: its command line checked against the table of inputs
(costmodel/inputs.py) before the command runs, by one mechanism for every command and mode.

- an option given twice where it is not a list is refused naming both values (click keeps the last);
- a number outside its declared field is refused with the field's line (costmodel/fields.py);
- an option outside its scope (a mode, a companion option, a workload it does not apply to) is
  refused naming the scope.

`guard(command, path)` wraps a click command (and a group's sub-commands) once; the root group
(costmodel/cli/__init__.py) guards each command it loads, so command modules declare nothing twice.
"""

from __future__ import annotations

import functools

import click
from click.core import ParameterSource

from costmodel.errors import UserError
from costmodel.inputs import option

GIVEN = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT, ParameterSource.PROMPT)


def _flags(cmd: click.Command) -> dict[str, click.Option]:
    out = {}
    for p in cmd.params:
        if isinstance(p, click.Option):
            for o in (*p.opts, *p.secondary_opts):
                out[o] = p
    return out


def refuse_repeated(cmd: click.Command, path: str, args: list[str]) -> None:
    """An option that takes one value given twice (`--seed 1 --seed 2`): refused, never last-wins."""
    flags = _flags(cmd)
    seen: dict[str, tuple[str, str]] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            break
        name, eq, inline = a.partition("=") if a.startswith("--") else (a, "", "")
        p = flags.get(name)
        i += 1
        if p is None or p.multiple or p.count or p.name in ("help", "version"):
            if p is not None and not p.is_flag and not eq:
                i += 1
            continue
        value = inline if eq else ("" if p.is_flag else (args[i] if i < len(args) else ""))
        if not p.is_flag and not eq:
            i += 1
        if p.name in seen:
            first_flag, first = seen[p.name]
            shown = f"{first_flag} {first}".strip() + " and " + f"{name} {value}".strip()
            raise UserError(f"costmodel {path}: {max(p.opts, key=len)} is given twice ({shown})",
                            "give it once (a repeated option is never resolved by keeping the last)")
        seen[p.name] = (name, value)


def check_params(cmd: click.Command, path: str, ctx: click.Context) -> None:
    """Every given option within its declared field and scope (costmodel/inputs.py)."""
    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) in GIVEN

    for p in cmd.params:
        if not isinstance(p, click.Option) or not given(p.name):
            continue
        decl = next((d for d in (option(path, o) for o in p.opts) if d is not None), None)
        if decl is None:
            continue
        flag = decl.name
        value = ctx.params.get(p.name)
        if decl.field is not None and value is not None and not isinstance(value, bool) and isinstance(value, (int, float)):
            decl.field.check(value)
        n = len(value.split(",")) if decl.items is not None and isinstance(value, str) else 0
        if n > decl.items.hi if decl.items is not None else False:
            raise UserError(f"{decl.name} lists {n:,} values, above the bound of {decl.items.hi:,.0f} ({decl.items.why})",
                            f"give at most {decl.items.hi:,.0f}, or split the run")
        if decl.scope is not None and not decl.scope.applies(ctx.params, given):
            raise UserError(f"{flag} applies to {decl.scope.text()} only", decl.scope.fix)


def guard(cmd: click.Command, path: str) -> click.Command:
    """`cmd` checked at its edge (once; a group's sub-commands each under their own path)."""
    if getattr(cmd, "_edge_guarded", False):
        return cmd
    cmd._edge_guarded = True
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            guard(sub, f"{path} {name}")
    parse = cmd.parse_args

    def parse_args(ctx, args):
        refuse_repeated(cmd, path, list(args))
        return parse(ctx, args)

    cmd.parse_args = parse_args
    if cmd.callback is not None:
        inner = cmd.callback

        @functools.wraps(inner)
        def callback(*a, **kw):
            check_params(cmd, path, click.get_current_context())
            return inner(*a, **kw)

        cmd.callback = callback
    return cmd
