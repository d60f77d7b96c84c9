"""The command outputs README.md and docs/ quote, found and refreshed in one place.

A quote is a fenced `bash` block holding one `costmodel ...` command (continued lines joined) followed at once
by a plain fenced block: the lines the command prints (its last lines). tests/test_docs_figures.py runs every
quoted command and holds the quote to what it prints; after a change that moves an answer,

    python scripts/doc_quotes.py --refresh        # re-runs every quoted command, rewrites each quote in place

keeps as many of the command's last lines as the quote held.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
QUOTE = re.compile(r"(?P<fence>[ \t]*)```bash\n(?P<cmd>(?:(?!```).)*?)[ \t]*```[ \t]*\n[ \t]*```\n(?P<out>(?:(?!```).)*?)[ \t]*```", re.S)


@dataclass(frozen=True)
class Quote:
    doc: Path
    cmd: str
    quoted: str
    span: tuple[int, int]  # the plain block's text in the doc

    @property
    def lines(self) -> list[str]:
        return [ln.strip() for ln in self.quoted.splitlines() if ln.strip()]


def quotes(docs=DOCS) -> list[Quote]:
    out = []
    for doc in docs:
        for m in QUOTE.finditer(doc.read_text()):
            cmd = " ".join(ln.strip().rstrip("\\").strip() for ln in m["cmd"].strip().splitlines())
            if cmd.startswith("costmodel "):
                out.append(Quote(doc, cmd, m["out"], m.span("out")))
    return out


def run(cmd: str, timeout_s: float = 900) -> subprocess.CompletedProcess:
    """The quoted command as a user runs it from the repository root, its outputs in a scratch folder."""
    with tempfile.TemporaryDirectory(prefix="costmodel-doc-") as tmp:
        (Path(tmp) / "data").symlink_to(ROOT / "data")
        argv = [sys.executable, "-c", "import sys; from costmodel.cli import console_main; sys.exit(console_main())", *shlex.split(cmd)[1:]]
        return subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=timeout_s)


def refresh() -> None:
    for doc in DOCS:
        mine = [q for q in quotes((doc,))]
        text = doc.read_text()
        for q in reversed(mine):  # from the end, so earlier spans stay valid
            res = run(q.cmd)
            if res.returncode != 0:
                raise SystemExit(f"{doc.name}: `{q.cmd}` failed: {res.stderr.strip().splitlines()[-1:]}")
            printed = [ln for ln in res.stdout.splitlines() if ln.strip()][-len(q.lines):]
            indent = re.match(r"[ \t]*", q.quoted).group(0)
            text = text[:q.span[0]] + "".join(f"{indent}{ln.strip()}\n" for ln in printed) + text[q.span[1]:]
            print(f"{doc.name}: {q.cmd[:80]}", flush=True)
        doc.write_text(text)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refresh", action="store_true", help="re-run every quoted command and rewrite its quote")
    if ap.parse_args().refresh:
        refresh()
    else:
        for q in quotes():
            print(f"{q.doc.relative_to(ROOT)}: {q.cmd}")
