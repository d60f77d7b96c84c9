"""What docs/architecture.md says each extension recipe touches, and what a recipe test touched:
the files of the registries whose registration functions it called, and the home each created
module has by what it defines (a ServingMode subclass lives in costmodel/modes/<mode>.py, a Replica
subclass in simulate/engines/<mode>.py, a pass predictor in costmodel/stepcost/<name>.py)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"


def recipe_files(title: str, **placeholders: str) -> set[str]:
    """The files the doc's recipe "**<title>.**" names after "Files:", placeholders filled in."""
    text = DOC.read_text().split("## Extension recipes", 1)[1]
    para = re.search(rf"\*\*{re.escape(title)}\.\*\*(.*?)(?=\n\*\*|\Z)", text, re.S)
    assert para, f"docs/architecture.md has no recipe **{title}.**"
    files = re.search(r"Files:(.*?)\.(?:\s*\n|\s*$)", para.group(1), re.S)
    assert files, f"the recipe **{title}.** names no Files:"
    out = set()
    for f in re.findall(r"`([^`]+)`", files.group(1)):
        for k, v in placeholders.items():
            f = f.replace(f"<{k}>", v)
        out.add(f)
    return out


def registry_file(register_fn) -> str:
    """The file a registration line goes to: where the registration function is defined."""
    return Path(inspect.getsourcefile(register_fn)).resolve().relative_to(ROOT).as_posix()


def imported_packages(module) -> set[str]:
    """Top-level packages a module imports (to check a vocabulary module imports no stage)."""
    tree = ast.parse(Path(inspect.getsourcefile(module)).read_text())
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out |= {a.name.split(".")[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            out.add(n.module.split(".")[0])
    return out
