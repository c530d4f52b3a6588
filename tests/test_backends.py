"""Which of the pages' runs change backend with the machine, and whether each is worded for both.

``--backend auto`` (a distributed worker's default) picks nccl when every rank can have a GPU
of its own. A run on a page that leaves the backend to ``auto`` runs gloo in CI and nccl on a
reader's box with enough GPUs, so its prose, asserts and timers must hold for both. This test
reads every ``run("workers.<chapter>", ...)`` on every page, parses its arguments with the
worker's own command line, and works out, with ``workers.job.backend_for``, the backend it
would get on a machine with 0, 1, 2, 4 and 8 GPUs, without any GPU here. A run whose backend
changes must be worded for both: its page reads the backend the run used (``.backends``).
"""

from __future__ import annotations

import ast
import importlib
import re

import pytest
from workers.job import backend_for

from helpers import ROOT

GPU_COUNTS = (0, 1, 2, 4, 8)
_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.S | re.M)
_UNKNOWN = "<computed>"  # an argument the page computes at run time (str(gpus), a path)


def page_runs():
    """(page, line, target variable, argv) for every run of a worker on every page."""
    found = []
    for page in sorted((ROOT / "book").glob("*.md")):
        text = page.read_text()
        for cell in _CELL.finditer(text):
            source = "\n".join("" if line.startswith(":") else line  # cell options
                               for line in cell.group(1).splitlines())
            first_line = text.count("\n", 0, cell.start(1)) + 1
            tree = ast.parse(source)
            targets = {id(node.value): node.targets[0] for node in ast.walk(tree)
                       if isinstance(node, ast.Assign)}
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "run"
                        and node.args and isinstance(node.args[0], ast.Constant)
                        and str(node.args[0].value).startswith("workers.")):
                    argv = [arg.value if isinstance(arg, ast.Constant) else _UNKNOWN
                            for arg in node.args]
                    target = targets.get(id(node))
                    name = ast.unparse(target) if target is not None else None
                    found.append((page.stem, first_line + node.lineno - 1, name, argv))
    return found


def backends_by_gpus(module: str, argv: list[str]) -> dict[int, str] | None:
    """The backend the run gets with each GPU count; None for a run without --backend."""
    for before, arg in zip(argv, argv[1:]):
        if before == "--backend" and arg != _UNKNOWN:  # asked for by name
            return {gpus: arg for gpus in GPU_COUNTS}
    path = ROOT.joinpath(*module.split("."))
    source = (path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).read_text()
    if "def command_line(" not in source:  # not a demo module: a mistake kept on purpose,
        return None                         # which runs its mistake when imported
    parser = importlib.import_module(module).command_line()
    known = [arg if arg != _UNKNOWN else "2" for arg in argv]
    args = parser.parse_args(known)
    requested = getattr(args, "backend", None)
    if requested is None:
        return None
    if requested != "auto":  # asked for by name: that backend, or one line saying it can't
        return {gpus: requested for gpus in GPU_COUNTS}
    world_size = max(getattr(args, "world_sizes", None) or [getattr(args, "world_size", 1)])
    unknown_size = any(before in ("--world-size", "--world-sizes") and arg == _UNKNOWN
                       for before, arg in zip(argv, argv[1:]))
    if unknown_size and requested == "auto":  # computed at run time: any choice is possible
        return {gpus: ("nccl" if gpus else "gloo") for gpus in GPU_COUNTS}
    return {gpus: backend_for(requested, world_size, gpus) for gpus in GPU_COUNTS}


RUNS = page_runs()


def test_the_pages_runs_were_found():
    assert len(RUNS) > 60 and {page for page, *_ in RUNS} >= {"collectives", "sharding"}


@pytest.mark.parametrize("page, line, name, argv", RUNS,
                         ids=[f"{page}:{line}" for page, line, *_ in RUNS])
def test_a_run_that_changes_backend_is_worded_for_both(page, line, name, argv):
    choices = backends_by_gpus(argv[0], argv[1:])
    if choices is None or len(set(choices.values())) == 1:
        return  # one backend on every machine: what the prose says of it holds everywhere
    table = ", ".join(f"{gpus} GPUs: {backend}" for gpus, backend in choices.items())
    text = (ROOT / "book" / f"{page}.md").read_text().replace('"', "'")  # as ast writes it
    assert name is not None and f"{name}.backends" in text, (
        f"book/{page}.md line {line}: {' '.join(argv)} runs {table}; ask for the backend the "
        "section teaches, or word the page for both from the run's .backends")


def test_the_choice_table_for_a_page_run():
    # what the test above computes, on one run: four ranks get nccl only with four GPUs
    assert backends_by_gpus("workers.collectives", ["ring", "--world-size", "4"]) == {
        0: "gloo", 1: "gloo", 2: "gloo", 4: "nccl", 8: "nccl"}
    assert set(backends_by_gpus("workers.collectives",
                                ["ring", "--world-size", "4", "--backend", "gloo"]).values()) \
        == {"gloo"}
    assert backends_by_gpus("workers.collectives", ["ring", "--world-size", "4", "--backend",
                                                     "nccl"]) == dict.fromkeys(GPU_COUNTS, "nccl")
    assert backend_for("nccl", 4, 2) is None  # the worker stops with one line instead
