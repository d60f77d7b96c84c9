"""One rich console for every command: wide enough for tables when output is piped or logged, and
no `:name:` emoji codes (costmodel prints none; a path or a value with colons prints as given, and
rich's emoji table, ~4 ms to load, is not loaded)."""

from __future__ import annotations

import sys
from typing import Callable

from rich.console import Console


def make_console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else 160
    return Console(file=stream, width=width, emoji=False)


def progress_lines(console: Console) -> Callable[[str], None]:
    """A progress callback printing each line dim, as written: no markup read in it (a path or a value with
    brackets prints as given) and no highlighting (a tenth of a millisecond a line, not a millisecond: a plan
    prints some seventy while its workers wait on it)."""

    def say(line: str) -> None:
        console.print(line, style="dim", markup=False, highlight=False)

    return say
