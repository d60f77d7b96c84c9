"""A progress bar that appears only once the work has run for DELAY_S, and only on a terminal: a command that
finishes sooner, or writes to a log or a pipe, pays neither rich.progress's import nor its refresh thread (a
one-request `simulate` spent a tenth of its start-up drawing a bar nobody saw), and long work at a terminal still
shows its progress."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

DELAY_S = 0.5
NO_PROGRESS_ENV = "COSTMODEL_NO_PROGRESS"


class DeferredBar:
    """rich's Progress behind a timer: updates before it shows are kept and replayed when it does."""

    def __init__(self, console, label: str, delay_s: float = DELAY_S):
        self.console, self.label = console, label
        self.done, self.total, self.description = 0, None, ""
        self.bar, self.task, self.closed = None, None, False
        self.lock = threading.Lock()
        self.timer = threading.Timer(delay_s, self.show)
        self.timer.daemon = True

    def show(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with self.lock:
            if self.closed:
                return
            self.bar = Progress(TextColumn(self.label), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                                TimeElapsedColumn(), console=self.console, transient=True)
            self.task = self.bar.add_task(self.description, total=self.total, completed=self.done)
            self.bar.start()

    def update(self, done: int, total: int | None, description: str = "") -> None:
        with self.lock:
            self.done, self.total, self.description = done, total, description
            if self.bar is not None:
                self.bar.update(self.task, total=total, completed=done, description=description)

    def close(self) -> None:
        self.timer.cancel()
        with self.lock:
            self.closed = True
            if self.bar is not None:
                self.bar.stop()


@contextmanager
def deferred_progress(console, label: str, delay_s: float = DELAY_S):
    """`update(done, total, description)` for the body; None with COSTMODEL_NO_PROGRESS set or where `console`
    is not a terminal (no one watches a bar in a log)."""
    if os.environ.get(NO_PROGRESS_ENV) or not console.is_terminal:
        yield None
        return
    bar = DeferredBar(console, label, delay_s)
    bar.timer.start()
    try:
        yield bar.update
    finally:
        bar.close()
