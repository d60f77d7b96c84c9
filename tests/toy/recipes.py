"""Extension recipes followed by editing files: copy the package tree to a temporary directory,
make exactly the edits a recipe of docs/architecture.md names (new modules, lines added to
registries and catalogs), and run the CLI there in a subprocess. What the edits changed is read back
from the copy, so a recipe test can hold the doc's "Files:" line to what it took."""

from __future__ import annotations

import ast
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
TOY = Path(__file__).resolve().parent
PACKAGES = ("costmodel", "measure", "simulate", "reports", "pipeline")
GENERATED = {"docs/metrics.md": "costmodel.schemas.dictionary"}  # generated doc -> the module whose output it is
# one process runs a session of commands (the copy's imports are paid once): python code, then each `costmodel ARGS`
SESSION = """
import json, sys
from costmodel.cli import main
exec(sys.argv[1])
for args in json.loads(sys.argv[2]):
    print("$ costmodel", *args, flush=True)
    code = main(args)
    if code:
        sys.exit(f"costmodel {' '.join(args)} exited {code}")
"""


@dataclass(frozen=True)
class Edit:
    """`lines` added to `path`: after the last line matching `after`, before the first matching
    `before`, or (neither) as a new file."""

    path: str
    lines: tuple[str, ...]
    after: str | None = None
    before: str | None = None

    def apply(self, root: Path) -> None:
        target = root / self.path
        if self.after is None and self.before is None:
            assert not target.exists(), f"{self.path} exists: a recipe's new file must be new"
            target.write_text("\n".join(self.lines) + "\n")
            return
        text = target.read_text().split("\n")
        if self.after is not None:
            at = max(i for i, line in enumerate(text) if re.search(self.after, line)) + 1
        else:
            at = next(i for i, line in enumerate(text) if re.search(self.before, line))
        text[at:at] = self.lines
        target.write_text("\n".join(text))


def new_file(path: str, source: Path) -> Edit:
    """A new module of the tree, `source` as it is (a toy under tests/toy)."""
    return Edit(path, tuple(source.read_text().rstrip("\n").split("\n")))


class Tree:
    """A copy of the package tree (pure Python: the compiled simulator is not copied) to edit and run."""

    def __init__(self, root: Path):
        self.root = root
        self.work = root.parent / "work"
        self.work.mkdir(exist_ok=True)
        # __pycache__ comes along (copy2 keeps the sources' mtimes, so bytecode of an unedited module stays valid)
        for pkg in PACKAGES:
            shutil.copytree(ROOT / pkg, root / pkg, ignore=shutil.ignore_patterns("*.so", "*.c", "*.html"))
        shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
        for doc in GENERATED:  # generated docs a recipe regenerates, and the tests that hold them current
            (root / doc).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / doc, root / doc)
        self.before = snapshot(root)

    def edit(self, edits: tuple[Edit, ...]) -> dict[str, str | int]:
        """Make the edits; what they changed: {path: "new" or lines added} (a recipe removes no line)."""
        for e in edits:
            e.apply(self.root)
        after = snapshot(self.root)
        changed: dict[str, str | int] = {}
        for path, text in after.items():
            if path not in self.before:
                changed[path] = "new"
            elif text != self.before[path]:
                diff = list(difflib.ndiff(self.before[path].splitlines(), text.splitlines()))
                assert not [d for d in diff if d.startswith("- ")], f"{path}: a recipe adds lines, it removes none"
                changed[path] = sum(d.startswith("+ ") for d in diff)
        return changed

    def session(self, *commands: tuple[str, ...], setup: str = "") -> str:
        """Python `setup`, then `costmodel ARGS` for each command, in one process on the copy; stdout,
        or the failure with stderr."""
        env = {**os.environ, "PYTHONPATH": str(self.root), "COSTMODEL_PURE_PYTHON": "1", "COLUMNS": "200"}
        p = subprocess.run([sys.executable, "-c", SESSION, setup, json.dumps([list(c) for c in commands])], cwd=self.work, env=env,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, f"the session failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
        return p.stdout


    def regenerate(self, doc: str) -> str | None:
        """`python -m <its generator> > doc` on the copy, as the recipe says: "regenerated" where it changed, else None."""
        env = {**os.environ, "PYTHONPATH": str(self.root), "COSTMODEL_PURE_PYTHON": "1"}
        p = subprocess.run([sys.executable, "-m", GENERATED[doc]], cwd=self.root, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-2000:]
        target = self.root / doc
        was = target.read_text()
        target.write_text(p.stdout)
        return "regenerated" if p.stdout != was else None

    def pytest(self, *node_ids: str) -> str:
        """The repository's own tests `node_ids` (with tests/conftest.py) run on the copy, as they run on the tree."""
        tests = self.root / "tests"
        tests.mkdir(exist_ok=True)
        for f in {"tests/conftest.py", *(n.split("::")[0] for n in node_ids)}:
            shutil.copy2(ROOT / f, self.root / f)
        env = {**os.environ, "PYTHONPATH": str(self.root), "COSTMODEL_PURE_PYTHON": "1"}
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *node_ids], cwd=self.root, env=env,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, f"the tree's own tests failed on the copy:\n{p.stdout[-3000:]}\n{p.stderr[-2000:]}"
        return p.stdout


def snapshot(root: Path) -> dict[str, str]:
    """Every source and data file of the tree by relative path (bytecode left out)."""
    return {p.relative_to(root).as_posix(): p.read_text(errors="replace") for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def recipe_edits(title: str, **placeholders: str) -> dict[str, str | int | None]:
    """What the doc's recipe "**<title>.**" names after "Files:": {path: "new", lines added, or None
    where the doc gives no count}, placeholders filled in."""
    text = DOC.read_text().split("## Extension recipes", 1)[1]
    para = re.search(rf"\*\*{re.escape(title)}\.\*\*(.*?)(?=\n\*\*|\Z)", text, re.S)
    assert para, f"docs/architecture.md has no recipe **{title}.**"
    files = re.search(r"Files:(.*?)\.(?:\s*\n|\s*$)", para.group(1), re.S)
    assert files, f"the recipe **{title}.** names no Files:"
    out: dict[str, str | int | None] = {}
    for path, count in re.findall(r"`([^`]+)`(?:\s*\(([^)]*)\))?", files.group(1)):
        for k, v in placeholders.items():
            path = path.replace(f"<{k}>", v)
        n = re.match(r"\+?(\d+) lines?", count)
        out[path] = "new" if count == "new" else "regenerated" if count.startswith("regenerated") else int(n.group(1)) if n else None
    return out


def recipe_files(title: str, **placeholders: str) -> set[str]:
    """The files the doc's recipe "**<title>.**" names after "Files:"."""
    return set(recipe_edits(title, **placeholders))


def registry_file(register_fn) -> str:
    """The file a registration line goes to: where the registration function is defined (its module's .py, also
    where that module runs compiled: costmodel/native.py)."""
    return Path(*register_fn.__module__.split(".")).with_suffix(".py").as_posix()


def imported_packages(source: Path) -> set[str]:
    """Top-level packages a module imports (to check a vocabulary module imports no stage)."""
    out = set()
    for n in ast.walk(ast.parse(source.read_text())):
        if isinstance(n, ast.Import):
            out |= {a.name.split(".")[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            out.add(n.module.split(".")[0])
    return out
