"""One rich console for every command: wide enough for tables when output is piped or logged, and
no `:name:` emoji codes (costmodel prints none; a path or a value with colons prints as given, and
rich's emoji table, ~4 ms to load, is not loaded)."""

from __future__ import annotations

import sys

from rich.console import Console


def make_console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else 160
    return Console(file=stream, width=width, emoji=False)
