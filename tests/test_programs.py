"""The plain programs in programs/: what a reader copies, so they are held to what a reader would
write. Each is 12 to 54 lines, imports only PyTorch, torchvision, torchft (the fault-tolerance
chapter's library) and the standard library (nothing of the book's), has a ``__main__`` guard,
runs with ``python FILE`` from a clone and exits 0 within a minute, and runs under torchrun too
when it is distributed.
Every chapter includes one whole and shows its run from the build."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from workers.ranks import free_port

from helpers import ROOT, chapters

PROGRAMS = sorted((ROOT / "programs").glob("*.py"))
ALLOWED = {"torch", "torchvision", "torchft"} | set(sys.stdlib_module_names)
INCLUDED_WHOLE = re.compile(  # a literalinclude of a program with no :pyobject: or :lines:
    r"```\{literalinclude\} \.\./programs/(\w+\.py)\n(?!:(pyobject|lines):)")
SECONDS = 60
# Programs a reader runs beside something else, shown run by a worker that does that too: the
# one that hangs on purpose (exits only at its own timeout, with an error), looked at while it
# hangs and then stopped; torchft's replica group, one of two, beside a lighthouse, one killed
# and started again. The page's hidden cells assert what the run showed. Here, the run a page
# must show for each.
RUN_BY_A_WORKER = {"hang.py": "python -m workers.hangs second-terminal",
                   "torchft_train.py": "python -m workers.fault_tolerance by-hand"}


def is_distributed(program: Path) -> bool:
    return "init_process_group" in program.read_text()


def imported_modules(program: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(program.read_text())):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules.add(node.module.split(".")[0])
    return modules


def test_every_program_is_on_a_page():
    """No program a reader would never meet: each is included whole by some chapter (a
    chapter may reuse another's, as the launchers page runs the data-parallel program)."""
    assert PROGRAMS
    included = {file for name in chapters()
                for file, _ in INCLUDED_WHOLE.findall((ROOT / "book" / f"{name}.md").read_text())}
    assert [p.name for p in PROGRAMS if p.name not in included] == []


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda path: path.name)
def test_a_program_is_what_a_reader_would_write(program):
    lines = program.read_text().splitlines()
    assert 12 <= len(lines) <= 54, f"{len(lines)} lines"
    assert imported_modules(program) <= ALLOWED, imported_modules(program) - ALLOWED
    assert 'if __name__ == "__main__":' in program.read_text()


def shown_on_a_page(program: Path) -> bool:
    """Whether a chapter includes the program whole and runs it: the book's build then runs
    it with ``python`` (run("programs/NAME.py")), and the test below reads that run."""
    for name in chapters():
        source = (ROOT / "book" / f"{name}.md").read_text()
        included = [file for file, _ in INCLUDED_WHOLE.findall(source)]
        if program.name in included and f'run("programs/{program.name}"' in source:
            return True
    return False


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda path: path.name)
def test_a_program_runs_as_a_reader_runs_it(program):
    """Under torchrun when it is distributed; with ``python programs/NAME.py`` from the
    clone's root when no page runs it that way already (the build does, where one does)."""
    if program.name in RUN_BY_A_WORKER:
        pytest.skip(f"its page runs it with {RUN_BY_A_WORKER[program.name]} (read below)")
    commands = []
    if not shown_on_a_page(program):
        commands.append([sys.executable, str(program.relative_to(ROOT))])
    if is_distributed(program):
        commands.append([sys.executable, "-m", "torch.distributed.run", "--standalone",
                         "--nproc-per-node", "2", str(program.relative_to(ROOT))])
    if not commands:
        pytest.skip("its page runs it with python in every build; it is not distributed")
    env = {**os.environ, "MASTER_PORT": str(free_port())}  # not the default 29500, which
    for command in commands:  # another job on this machine may be using at the same time
        started = time.time()
        completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                                   timeout=SECONDS + 30, env=env)
        took = time.time() - started
        assert completed.returncode == 0, (command, completed.stdout[-2000:],
                                           completed.stderr[-3000:])
        assert took < SECONDS, f"{' '.join(command[1:])} took {took:.0f} s"
        assert re.search(r"^\[(main|rank \d+)\] ", completed.stdout, re.MULTILINE)


def test_every_chapter_includes_a_program_whole():
    missing = []
    for name in chapters():
        source = (ROOT / "book" / f"{name}.md").read_text()
        included = INCLUDED_WHOLE.findall(source)
        if not included:
            missing.append(name)
        for file, _ in included:
            assert (ROOT / "programs" / file).is_file(), (name, file)
    assert missing == []


@pytest.mark.parametrize("chapter", chapters())
def test_the_page_shows_its_programs_run_from_this_build(built_book, chapter):
    soup = BeautifulSoup((built_book.html / "book" / f"{chapter}.html").read_text(),
                         "html.parser")
    heads = [head.get_text(" ", strip=True) for head in soup.select(".rank-output-head")]
    source = (ROOT / "book" / f"{chapter}.md").read_text()
    for file, _ in INCLUDED_WHOLE.findall(source):
        shown_as = RUN_BY_A_WORKER.get(file, f"programs/{file}")
        runs = [head for head in heads if shown_as in head]
        assert runs, f"{chapter} includes programs/{file} but shows no run of it"
        ended = [re.search(r"exit code 0 after ([\d.]+) s", head) for head in runs]
        assert any(ended), runs
        assert min(float(m.group(1)) for m in ended if m) < SECONDS, runs


def test_the_pipeline_program_refuses_more_ranks_than_layers(tmp_path):
    """A rank without layers would have no stage (an empty Sequential returns its input,
    which has nothing to backward): one line and a non-zero exit, before any rank starts."""
    program = ROOT / "programs" / "pipeline_by_hand.py"
    env = {**os.environ, "WORLD_SIZE": "5", "RANK": "0"}
    done = subprocess.run([sys.executable, program], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=SECONDS)
    assert done.returncode == 1, done
    assert done.stderr.strip() == "5 ranks but 4 layers: every rank needs one at least", done
