"""The pages a reader without root is most likely to trip on build for such a reader: the hangs
page (py-spy reads other processes), the launchers page and the multi-node page (whose Slurm
run needs root). Run as root, the test makes a user without it (useradd), gives that user a
copy of the clone, builds each page alone as that user, and reads the built pages for the
sentences a build without root glues. A stress test: minutes per page on two cores."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from html import unescape
from pathlib import Path

import pytest

from helpers import ROOT

USER = "bookreader"
PAGES = ("hangs", "launchers", "multi_node")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="needs root, to make a user without it"),
    pytest.mark.skipif(not shutil.which("useradd") or not shutil.which("su"),
                       reason="needs useradd and su"),
]


def as_user(command: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(["su", USER, "-c", command], capture_output=True, text=True,
                          timeout=timeout)


@contextmanager
def enterable_by_others(*paths: Path):
    """Let other users pass through every folder above ``paths`` for the block (the x bit
    for others, on the folders that lack it), then put each folder's mode back: the venv's
    interpreter may be a pyenv Python under /root, which is 700 on many machines, and a
    reader's own environment would be in a folder of their own."""
    folders = {folder for path in paths for target in (path, path.resolve())
               for folder in target.parents}
    opened = {}
    try:
        for folder in sorted(folders):
            mode = folder.stat().st_mode
            if not mode & stat.S_IXOTH:
                opened[folder] = stat.S_IMODE(mode)
                folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
        yield
    finally:
        for folder, mode in opened.items():
            folder.chmod(mode)


def users_python() -> Path:
    """This environment's Python, which the user must be able to run once the folders
    above it may be passed through."""
    own = Path(sys.executable)
    done = as_user(f"{own} -c 'import torch, jupyter_book'", timeout=120)
    if done.returncode != 0:
        pytest.skip(f"{USER} may not run {own} here ({done.stderr.strip()[-200:]}): let "
                    f"other users enter the folders that hold its interpreter")
    return own


def copy_of_the_clone(folder: Path) -> Path:
    """The working tree (tracked files and new ones, not what git ignores), with the data
    and Thebe the set-up fetched: the user's own clone, in a folder the user owns."""
    clone = folder / "clone"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    for fetched in ("data", "_vendor"):
        if (ROOT / fetched).is_dir():
            shutil.copytree(ROOT / fetched, clone / fetched, symlinks=True)
    return clone


@pytest.fixture(scope="module")
def built_as_user():
    if subprocess.run(["id", USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "-m", USER], check=True, timeout=60)
    folder = Path(tempfile.mkdtemp(prefix="unprivileged-", dir="/tmp"))  # /tmp: anyone's
    with enterable_by_others(Path(sys.executable), ROOT), _cleaned(folder):
        python = users_python()
        clone = copy_of_the_clone(folder)
        subprocess.run(["chown", "-R", f"{USER}:{USER}", str(folder)], check=True,
                       timeout=120)
        jupyter_book = python.with_name("jupyter-book")
        built = {}
        for page in PAGES:
            done = as_user(f"cd {clone} && PYTHONPATH={clone} {jupyter_book} build "
                           f"book/{page}.md", timeout=1200)
            html = clone / "_build" / "_page" / f"book-{page}" / "html" / f"{page}.html"
            built[page] = (done, html.read_text() if html.exists() else "")
        yield built


@contextmanager
def _cleaned(folder: Path):
    try:
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def text_of(html: str) -> str:
    """A page's words, quotes as typed (Sphinx curls them), one space between words."""
    text = unescape(re.sub(r"<[^>]+>", "", html))
    for curled, typed in (("\u2018", "'"), ("\u2019", "'"), ("\u201c", '"'),
                          ("\u201d", '"')):
        text = text.replace(curled, typed)
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("page", PAGES)
def test_each_page_builds_without_root(built_as_user, page):
    done, html = built_as_user[page]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "build succeeded" in done.stdout and html, done.stdout[-3000:]


def test_the_hangs_page_says_what_py_spy_could_read(built_as_user):
    """One of the sentences of what py-spy could read; without Yama, as here, the user's
    own ranks are readable, and with Yama's ptrace_scope=1 the book's still are."""
    from workers.verdicts import all_verdicts

    function, examples = all_verdicts()["workers.verdicts.hangs.stacks_here"]
    text = text_of(built_as_user["hangs"][1])
    said = [outcome for outcome, example in examples.items()
            if str(function(**example)) in text]
    assert len(said) == 1, said
    assert re.search(r"5 of 5 hangs diagnosed", text)


def test_the_multi_node_page_says_why_slurm_did_not_run(built_as_user):
    from workers.verdicts.multi_node import slurm_here

    text = text_of(built_as_user["multi_node"][1])
    installed = all(shutil.which(c) for c in ("munged", "slurmctld", "slurmd", "sbatch"))
    why = ("Slurm is installed, but a local cluster needs root (slurmd starts each job as "
           "its user)" if installed else "Slurm is not installed here")
    assert str(slurm_here(why)) in text
