"""Fixtures, and the marker scheme that makes the fast loop real.

A test that needs the built book asks for ``built_book`` (or ``site``) and is marked ``book``
by that alone, so ``pytest -m "not book"`` runs everything else in a minute or two.

``built_book`` inspects the build in ``_build/`` that the README's set-up command made, when
``_build/build-record.json`` says it succeeded after the last change to any source of the
book; only a missing, failed or stale build is built again (with the same command). So in CI,
where the set-up command has just built the book, every chapter executes exactly once.
"""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import ROOT

JUPYTER_BOOK = str(Path(sys.executable).with_name("jupyter-book"))
BOOK_SOURCES = ["book", "workers", "programs", "scripts", "_ext", "_static", "_config.yml",
                "_toc.yml"]


def pytest_collection_modifyitems(items):
    for item in items:
        if "built_book" in item.fixturenames:
            item.add_marker(pytest.mark.book)


def build(source: Path, output: Path | None = None) -> subprocess.CompletedProcess:
    """The README's strict build: every notebook executed, warnings are errors."""
    command = [JUPYTER_BOOK, "build", str(source), "--all", "-n", "-W", "--keep-going"]
    if output is not None:
        command += ["--path-output", str(output)]
    return subprocess.run(command, capture_output=True, text=True, timeout=1800)


def newest_source_change() -> tuple[float, str]:
    """The latest modification time among the book's sources, and which file it was.

    Sources are the files git tracks or would track: what the build itself writes beside them
    (the checkpoints a page saves in book/, ``*.pt``) is ignored by git, and is not a change.
    Without git, every file but caches counts."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             "-z", "--", *BOOK_SOURCES], cwd=ROOT, capture_output=True,
                            text=True)
    if listed.returncode == 0:
        candidates = [ROOT / name for name in listed.stdout.split("\0") if name]
    else:
        candidates = []
        for name in BOOK_SOURCES:
            path = ROOT / name
            candidates += [path] if path.is_file() else path.rglob("*")
    newest = (0.0, "")
    for file in candidates:
        relative = file.relative_to(ROOT)
        caches = [part for part in relative.parts if part == "__pycache__" or part[0] == "."]
        if file.is_file() and not caches:  # (.ruff_cache, .ipynb_checkpoints, ...)
            newest = max(newest, (file.stat().st_mtime, str(relative)))
    return newest


def usable_record(build_dir: Path) -> tuple[dict | None, str]:
    """The build record if ``build_dir`` holds a clean build of the current sources."""
    path = build_dir / "build-record.json"
    if not path.exists():
        return None, "no build record"
    record = json.loads(path.read_text())
    changed_at, changed = newest_source_change()
    if record["error"] or record["warnings"]:
        return None, f"the last build failed ({record['error'] or record['warnings']} warnings)"
    if not all(page["succeeded"] for page in record["executed"].values()):
        return None, "a page failed to execute"
    if record["started"] < changed_at:
        return None, f"{changed} changed after the last build started"
    return record, "up to date"


@dataclass
class BuiltBook:
    html: Path
    record: dict  # see _ext/build_record.py


@pytest.fixture(scope="session")
def built_book() -> BuiltBook:
    build_dir = ROOT / "_build"
    build_dir.mkdir(exist_ok=True)
    # With pytest -n 2 each worker process has its own session: one builds, the other waits.
    with open(build_dir / ".build-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record, why = usable_record(build_dir)
        if record is None:
            print(f"building the book: {why}")
            started = time.time()
            completed = build(ROOT)
            assert completed.returncode == 0, (completed.stdout + completed.stderr)[-5000:]
            print(f"built in {time.time() - started:.0f} s")
            record, why = usable_record(build_dir)
            assert record is not None, why
    return BuiltBook(build_dir / "html", record)


@pytest.fixture
def tmp_events(tmp_path):
    return tmp_path / "events.jsonl"
