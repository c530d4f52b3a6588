"""The code readers see: lint-clean, no tool pragmas, and imports that run one way.

The workers are shown on the pages as they are, so they are fitted to the page by hand (ruff's
E501 keeps every line within the page's width) instead of being formatted by a tool.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from helpers import ROOT

RUFF = str(Path(sys.executable).with_name("ruff"))
NOTEBOOK_SIDE = {"workers.runner", "workers.render"}  # what only a notebook or a test imports


def test_ruff_check():
    # --no-cache: a cache written under _ext/ would make the built book look stale
    completed = subprocess.run([RUFF, "check", "--no-cache", "workers", "tests", "_ext"],
                               cwd=ROOT, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_no_formatter_pragmas_anywhere():
    marker = "fmt: " + "skip"  # spelled apart, so this file does not contain it
    found = [str(path.relative_to(ROOT)) for path in ROOT.glob("[!.]*/**/*")
             if path.suffix in (".py", ".md") and "_build" not in path.parts
             and marker in path.read_text()]
    assert found == []


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_rank_side_code_never_imports_the_notebook_side():
    workers = {f"workers.{path.stem}": path for path in (ROOT / "workers").glob("*.py")}
    rank_side = {name: path for name, path in workers.items() if name not in NOTEBOOK_SIDE}
    offenders = {name: sorted(imports_of(path) & NOTEBOOK_SIDE)
                 for name, path in rank_side.items() if imports_of(path) & NOTEBOOK_SIDE}
    assert offenders == {}


def test_render_imports_nothing_from_the_runner():
    assert "workers.runner" not in imports_of(ROOT / "workers" / "render.py")
