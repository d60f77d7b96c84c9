"""The one console (costmodel/console.py): progress lines print as written, dim on a terminal."""

import io

from rich.console import Console

from costmodel.console import progress_lines


def test_a_progress_line_prints_as_written_brackets_and_all():
    out = io.StringIO()
    say = progress_lines(Console(file=out, width=160))
    say("h200/ar: replicas per QPS 5->1 [--load-curve] [bold]x[/bold] (2 points, 4 simulations, 0.1 s)")
    assert out.getvalue() == "h200/ar: replicas per QPS 5->1 [--load-curve] [bold]x[/bold] (2 points, 4 simulations, 0.1 s)\n"


def test_on_a_terminal_a_progress_line_is_dim_and_not_highlighted():
    out = io.StringIO()
    say = progress_lines(Console(file=out, width=160, force_terminal=True, color_system="standard"))
    say("5 QPS")
    assert out.getvalue() == "\x1b[2m5 QPS\x1b[0m\n"
