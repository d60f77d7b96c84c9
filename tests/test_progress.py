"""Long work shows a progress bar; short work never pays for one (costmodel/progress.py)."""
import io
import sys
import time

from rich.console import Console

from costmodel.progress import deferred_progress


def _console():
    return Console(file=io.StringIO(), force_terminal=True, width=80)


def test_work_done_before_the_delay_draws_nothing_and_imports_no_bar(monkeypatch):
    monkeypatch.delenv("COSTMODEL_NO_PROGRESS", raising=False)
    monkeypatch.delitem(sys.modules, "rich.progress", raising=False)
    con = _console()
    with deferred_progress(con, "simulating", delay_s=60) as update:
        update(1, 1, "ar @ 1 QPS done")
    assert con.file.getvalue() == "" and "rich.progress" not in sys.modules


def test_work_longer_than_the_delay_shows_what_was_done_so_far(monkeypatch):
    monkeypatch.delenv("COSTMODEL_NO_PROGRESS", raising=False)
    con = _console()
    with deferred_progress(con, "simulating", delay_s=0.01) as update:
        update(2, 5, "ar @ 4 QPS done")
        for _ in range(200):  # the timer thread shows the bar with the updates made before it
            if "2/5" in con.file.getvalue():
                break
            time.sleep(0.01)
    assert "simulating" in con.file.getvalue() and "2/5" in con.file.getvalue()


def test_output_to_a_log_or_a_pipe_draws_no_bar(monkeypatch):
    monkeypatch.delenv("COSTMODEL_NO_PROGRESS", raising=False)
    log = Console(file=io.StringIO(), force_terminal=False, width=80)
    with deferred_progress(log, "simulating", delay_s=0) as update:
        assert update is None


def test_no_progress_env_turns_it_off(monkeypatch):
    monkeypatch.setenv("COSTMODEL_NO_PROGRESS", "1")
    with deferred_progress(_console(), "simulating") as update:
        assert update is None
