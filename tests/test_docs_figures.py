"""Every command output that README.md and docs/ quote is what the command prints today
(scripts/doc_quotes.py finds the quotes and refreshes them): a figure no command prints has no place in the
docs (issue 48), and a new quote is checked the day it is written."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from doc_quotes import ROOT, quotes, run  # noqa: E402

QUOTES = quotes()


def squash(text: str) -> str:
    return " ".join(text.split())


def test_the_readme_quotes_its_answers():
    assert len([q for q in QUOTES if q.doc.name == "README.md"]) >= 4


@pytest.mark.parametrize("q", QUOTES, ids=[f"{q.doc.relative_to(ROOT)}:{q.cmd[:70]}" for q in QUOTES])
def test_a_quoted_output_is_what_the_command_prints(q):
    res = run(q.cmd)
    assert res.returncode == 0, f"{q.doc.name}: `{q.cmd}` failed: {res.stderr[-2000:]}"
    printed = squash(res.stdout)
    for line in q.lines:
        assert squash(line) in printed, (f"{q.doc.name}: `{q.cmd}` no longer prints:\n{line}\n(python scripts/doc_quotes.py --refresh "
                                         f"rewrites the quotes)\n--- it printed (end):\n{res.stdout[-3000:]}")
