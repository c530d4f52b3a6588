"""What the tests share: quiet runs, command lines run in process or as a reader would, process
liveness, and the book's chapter list (read from ``_toc.yml``, the one place it is written)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import psutil
import yaml
from workers.runner import run

ROOT = Path(__file__).resolve().parent.parent


def chapters() -> list[str]:
    """The chapters in the order of ``_toc.yml``: the pages that have a worker module."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    names = [entry["file"].removeprefix("book/") for entry in toc["chapters"]]
    return [name for name in names if (ROOT / "workers" / f"{name}.py").exists()]


def quiet_run(module: str, *args: str, **options):
    """The runner, without streaming to the test's stdout; three minutes unless the test
    says otherwise (a run of 31 s alone took over 60 s in CI, beside the torch 2.11 check)."""
    options.setdefault("timeout", 180)
    return run(module, *args, stream=False, **options)


def cli(module: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``python -m module args`` exactly as a reader would from a shell."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )


def cli_in_process(module: str, *args: str, capsys) -> subprocess.CompletedProcess:
    """``module.main(args)`` in this process: the same parser and checks as ``python -m``,
    without paying for a new interpreter and a torch import per case."""
    main = importlib.import_module(module).main
    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as stop:
        code = stop.code
    captured = capsys.readouterr()
    return subprocess.CompletedProcess([module, *args], code, captured.out, captured.err)


def assert_one_line_error(completed: subprocess.CompletedProcess, *fragments: str) -> None:
    """A reader's mistake: exit code 2, one line on stderr naming the problem, no traceback."""
    assert completed.returncode == 2, completed
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert "Traceback" not in completed.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def help_options(completed: subprocess.CompletedProcess) -> set[str]:
    """The long options a ``--help`` text lists."""
    assert completed.returncode == 0, completed.stderr
    return set(re.findall(r"(--[a-z][a-z-]*)", completed.stdout)) - {"--help"}


def is_running(pid: int) -> bool:
    """True while ``pid`` is a live process (a zombie waiting to be reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def processes_marked(marker: str) -> list[psutil.Process]:
    """Live processes whose environment holds ``marker`` (inherited by every descendant)."""
    found = []
    for process in psutil.process_iter():
        try:
            name, _, value = marker.partition("=")
            if process.environ().get(name) == value and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found
