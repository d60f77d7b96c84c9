"""simulate.parallel.Beside: a call run in a forked child while the caller goes on (plan writes its files
while it prints its tables), with the call's own value or exception."""

import os
import subprocess
import sys
import textwrap

import pytest

from costmodel.errors import UserError
from simulate.parallel import Beside


def _pid_and(x):
    return os.getpid(), x


def _refuse():
    raise UserError("disk /out is full", "free space or choose another -o")


def test_the_call_returns_its_value():
    _, got = Beside(_pid_and, [1, 2]).result()
    assert got == [1, 2]


def test_the_calls_exception_is_raised_by_result():
    job = Beside(_refuse)
    with pytest.raises(UserError, match="disk /out is full"):
        job.result()


def test_a_child_killed_before_answering_is_an_error_not_a_hang():
    code = textwrap.dedent("""
        import os
        from simulate.parallel import Beside
        try:
            Beside(lambda: os.kill(os.getpid(), 9)).result()
        except RuntimeError as e:
            print(e)
    """)  # a process of one thread, so that Beside forks (pytest's workers may run others)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == "the process writing beside this one ended with code -9\n"


def test_it_forks_in_a_single_threaded_process_and_runs_here_beside_a_thread():
    code = textwrap.dedent("""
        import os, threading
        from simulate.parallel import Beside
        pid = lambda: os.getpid()
        print(Beside(pid).result() != os.getpid())
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        print(Beside(pid).result() == os.getpid())
        stop.set()
        t.join()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True"]


def test_nothing_printed_before_it_is_printed_twice():
    code = textwrap.dedent("""
        import sys
        from simulate.parallel import Beside
        sys.stdout.write("tables")  # unflushed when the child forks
        Beside(len, "abc").result()
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == "tables"
