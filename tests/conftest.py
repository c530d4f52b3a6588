"""Shared helpers for the tests: quiet runs, plain CLI calls, and process liveness."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from workers.runner import run

ROOT = Path(__file__).resolve().parent.parent
JUPYTER_BOOK = str(Path(sys.executable).with_name("jupyter-book"))


def quiet_run(module: str, *args: str, **options):
    """The runner, without streaming to the test's stdout."""
    return run(module, *args, stream=False, **options)


def cli(module: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``python -m module args`` exactly as a reader would from a shell."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def is_running(pid: int) -> bool:
    """True while ``pid`` is a live process (a zombie waiting to be reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_one_line_error(
    completed: subprocess.CompletedProcess, *fragments: str
) -> None:
    """A reader's mistake: non-zero exit, one line on stderr naming the problem, no traceback."""
    assert completed.returncode == 2, completed
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert "Traceback" not in completed.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def tmp_events(tmp_path):
    return tmp_path / "events.jsonl"


def build(source: Path, output: Path) -> tuple[subprocess.CompletedProcess, float]:
    """The README's strict build: every notebook executed, warnings are errors."""
    start = time.time()
    completed = subprocess.run(
        [
            JUPYTER_BOOK,
            "build",
            str(source),
            "--all",
            "-n",
            "-W",
            "--keep-going",
            "--path-output",
            str(output),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    return completed, time.time() - start


@pytest.fixture(scope="session")
def built_book(tmp_path_factory):
    output = tmp_path_factory.mktemp("book")
    import_before = torch_import_seconds()
    completed, seconds = build(ROOT, output)
    log = completed.stdout + completed.stderr
    assert completed.returncode == 0, log[-5000:]
    print(f"book built in {seconds:.1f} s")
    return output / "_build" / "html", log, max(import_before, torch_import_seconds())


def torch_import_seconds() -> float:
    """How long ``import torch`` takes right now: the unit most of a chapter's time is made of."""
    start = time.time()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, timeout=120)
    return time.time() - start
