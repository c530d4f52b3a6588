"""The demo list of scripts/check_demos.py (what the torch-version check runs) is complete and
right: it names every subcommand of every worker, every command a reader is told to type
parses, and every demo the list holds is also run by some page of the built book (or by a
test), so the pinned torch runs each one in the same CI run as the oldest supported torch.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import shlex
import subprocess
import sys

import pytest
from bs4 import BeautifulSoup

from helpers import ROOT, chapters

spec = importlib.util.spec_from_file_location("check_demos", ROOT / "scripts/check_demos.py")
check_demos = sys.modules["check_demos"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_demos)
worker_and_demo = check_demos.worker_and_demo

# Demos that no page runs, and the test that runs them instead.
RUN_BY_TESTS = {
    ("workers.ddp_mnist", "single"): "test_one_process_by_hand_and_ddp_agree_for_four_ranks",
    ("workers.ddp_mnist", "manual"): "test_one_process_by_hand_and_ddp_agree_for_four_ranks",
    # the hangs page runs every kind in one command (every); the tests run each alone, and
    # diagnose from a second process
    **{("workers.hangs", kind): "test_each_kind_alone_is_diagnosed_and_stopped"
       for kind in ("skip", "order", "stuck", "dead", "unwaited")},
    ("workers.hangs", "diagnose"): "test_diagnose_stops_a_worker_job_from_outside",
    # the fault-tolerance page's compare runs it under torchrun, inside its own run
    ("workers.fault_tolerance", "elastic"):
        "test_elastic_restarts_from_its_checkpoint_under_torchrun",
}


def subcommands(module: str) -> list[str]:
    parser = importlib.import_module(module).command_line()
    [choices] = [action.choices for action in parser._actions
                 if isinstance(action, argparse._SubParsersAction)]
    return sorted(choices)


def test_the_list_names_every_demo_of_every_worker():
    listed = {demo.worker_and_demo for demo in check_demos.DEMOS}
    listed |= {(demo.module, demo.first[0]) for demo in check_demos.DEMOS if demo.first}
    for chapter in chapters():
        module = f"workers.{chapter}"
        missing = [name for name in subcommands(module) if (module, name) not in listed]
        assert not missing, f"{module}: {missing} are not in scripts/check_demos.py"
    for demo in check_demos.DEMOS:  # and names none that do not exist
        module, name = demo.worker_and_demo
        if name:
            assert name in subcommands(module), demo.command()


def reader_commands() -> list[tuple[str, list[str]]]:
    """Every ``python -m workers.x ...`` a page, the README, a script or a worker's help
    tells a reader to type (with ``torchrun``/``-m torch.distributed.run`` or the shell
    launcher in front), as (where, the worker's arguments)."""
    files = [*ROOT.glob("book/*.md"), ROOT / "README.md", *ROOT.glob("scripts/*"),
             *ROOT.glob("workers/*.py")]
    pattern = re.compile(r"(?:python -m |-m |launch_local\.sh \S+ )workers\.(\w+)"
                         r"((?: +[^\s`\"')|;&#(][^\s`\"')|;&]*)*)")
    found = []
    for file in files:
        text = re.sub(r"\\+\n\s*", " ", file.read_text())  # shell line continuations
        for match in pattern.finditer(text):
            args = shlex.split(match.group(2).replace("<GPUs>", "2"))
            if args and args != ["..."]:
                found.append((f"{file.relative_to(ROOT)}: {match.group(0).strip()}",
                              [match.group(1), *args]))
    return found


@pytest.mark.parametrize("where, command", reader_commands(), ids=lambda x: str(x)[:60])
def test_every_command_a_reader_is_shown_parses(where, command, capsys):
    module, *args = command
    try:
        args, rest = importlib.import_module(f"workers.{module}").command_line() \
            .parse_known_args(args)
        assert not rest, f"{where}: unrecognized arguments {rest}"
    except SystemExit as stop:
        assert stop.code == 0, f"{where}: {capsys.readouterr().err.strip()}"


def test_reader_commands_are_found():
    """The pattern above really finds the book's commands (a test of the test)."""
    demos = {worker_and_demo(["python", "-m", f"workers.{c[0]}", *c[1:]])
             for _, c in reader_commands()}
    assert ("workers.checkpoints", "elastic") in demos  # written over several lines
    assert ("workers.ddp_mnist", "ddp") in demos
    assert len(demos) > 40


def commands_run_by_pages(html_dir) -> set[tuple[str, str]]:
    ran = set()
    for html in html_dir.glob("book/*.html"):
        soup = BeautifulSoup(html.read_text(), "html.parser")
        for code in soup.select(".rank-output-head code"):
            ran.add(worker_and_demo(shlex.split(code.get_text())))
    return ran


def test_every_demo_runs_with_the_pinned_torch_in_the_book(built_book):
    ran = commands_run_by_pages(built_book.html)
    assert ("workers.checkpoints", "elastic") in ran
    tests = "".join(path.read_text() for path in (ROOT / "tests").glob("test_*.py"))
    for demo in check_demos.DEMOS:
        if demo.gpus:
            continue  # run by the pages only on a machine with GPUs
        key = demo.worker_and_demo
        if key in RUN_BY_TESTS:
            assert f"def {RUN_BY_TESTS[key]}(" in tests
        else:
            assert key in ran, f"no page runs {demo.command()}"


def test_the_version_check_rejects_bad_versions_in_one_line():
    completed = subprocess.run(["bash", "scripts/check_torch_versions.sh", "2.11"],
                               cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert completed.returncode == 2
    assert completed.stderr.strip().startswith("usage: ")
    assert len(completed.stderr.strip().splitlines()) == 1


def test_check_demos_rejects_an_unknown_chapter(capsys):
    with pytest.raises(SystemExit) as stop:
        check_demos.main(["--only", "nonsense"])
    assert stop.value.code == 2
    assert "invalid choice: 'nonsense'" in capsys.readouterr().err
