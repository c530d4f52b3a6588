"""The code the chapters show is formatted and lint-clean (settings in pyproject.toml)."""

import subprocess
import sys
from pathlib import Path

from conftest import ROOT

RUFF = str(Path(sys.executable).with_name("ruff"))


def test_ruff_check():
    completed = subprocess.run(
        [RUFF, "check", "workers", "tests"], cwd=ROOT, capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_ruff_format():
    completed = subprocess.run(
        [RUFF, "format", "--check", "workers", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
