"""workers.start_methods beyond what its chapter runs: start-up measured for another process count
and one method alone, a forked child's change that stays its own, a forked child that sets one
thread finishing its operation, ranks started both ways, the CUDA demo's refusal without a GPU,
each demo's --help, and bad input."""

from __future__ import annotations

import os

import pytest
import torch

from helpers import assert_one_line_error, cli, cli_in_process, help_options, quiet_run


def test_startup_measures_each_process_of_the_chosen_methods_only():
    result = quiet_run("workers.start_methods", "startup", "--methods", "fork", "--processes", "4")
    costs = [e["t_end"] - e["t"] for e in result.events_named("start-up")]
    assert [e["method"] for e in result.events_named("start-up")] == ["fork"] * 4
    assert [e["process"] for e in result.events_named("start-up")] == [0, 1, 2, 3]
    assert all(0 < cost < 1 for cost in costs)  # a fork copies a parent that has torch already


def test_a_forked_childs_change_never_reaches_the_parent():
    result = quiet_run("workers.start_methods", "inherit", "--methods", "fork")
    assert "a value the parent set at run time" in result.lines_of(0)[0]
    after = result.events_named("after children")[0]["setting"]
    assert after == "a value the parent set at run time"


def test_a_forked_child_with_one_thread_finishes_whatever_the_first_did():
    result = quiet_run("workers.start_methods", "fork-thread-pool", "--deadlock-after", "2")
    ended = {e["child"]: e["verdict"] for e in result.events_named("thread pool")}
    assert ended["forked child, set_num_threads(1)"] == "finished"
    assert ended["forked child"] in {"finished", "hung"}
    assert ended["forked child, set_num_threads(2)"] in {"finished", "hung"}


def test_ranks_start_under_both_methods_each_rank_once():
    result = quiet_run("workers.start_methods", "ranks", "--processes", "2", "--timeout", "120")
    started = sorted((e["method"], e["rank"]) for e in result.events_named("start to running"))
    assert started == [("forkserver", 0), ("forkserver", 1), ("spawn", 0), ("spawn", 1)]
    assert all(e["t_end"] > e["t"] for e in result.events_named("start to running"))


ASK_THEN_FORK = """
import os, torch
torch.cuda.is_available()  # only asks; never creates a tensor on a GPU
pid = os.fork()
if pid == 0:
    try:
        torch.ones(1, device="cuda")
    except RuntimeError as error:
        print(str(error).splitlines()[0], flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.skipif(not torch.backends.cuda.is_built(), reason="a torch built without CUDA")
def test_asking_is_available_is_enough_to_keep_a_forked_child_off_cuda():
    """What the page's GPU section says of torch.cuda.is_available(): the child raises the
    re-initialise error, with or without a GPU (the count runs through CUDA's runtime)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"}
    completed = subprocess.run([sys.executable, "-c", ASK_THEN_FORK], capture_output=True,
                               text=True, timeout=120, env=env)
    assert "Cannot re-initialize CUDA in forked subprocess" in completed.stdout, completed


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_cuda_fork_without_a_gpu_says_so():
    assert_one_line_error(cli("workers.start_methods", "cuda-fork"), "needs a CUDA GPU")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_fork_fails_only_under_fork():
    result = quiet_run("workers.start_methods", "cuda-fork")
    assert "Cannot re-initialize CUDA in forked subprocess" in " ".join(result.lines_of(0))
    assert "CUDA works" in " ".join(result.lines_of(1))


@pytest.mark.parametrize(
    "demo, options",
    [
        ("startup", {"--methods", "--processes", "--forkserver-preload", "--events", "--timeout"}),
        ("fork-with-threads", {"--methods", "--deadlock-after", "--events", "--timeout"}),
        ("context", {"--events", "--timeout"}),
        ("fork-thread-pool", {"--deadlock-after", "--events", "--timeout"}),
        ("ranks", {"--processes", "--events", "--timeout"}),
    ],
)
def test_each_demo_documents_only_its_own_options(demo, options, capsys):
    completed = cli_in_process("workers.start_methods", demo, "--help", capsys=capsys)
    assert help_options(completed) == options


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["startup", "--methods", "teleport"], ["invalid choice: 'teleport'"]),
        (["startup", "--processes", "0"], ["must be at least 1"]),
        (["startup", "--processes", "65"], ["at most 64"]),
        (["fork-with-threads", "--deadlock-after", "0"], ["must be above 0"]),
        (["context", "--methods", "fork"], ["unrecognized arguments: --methods"]),
        (["ranks", "--processes", "0"], ["must be at least 1"]),
        (["fork-thread-pool", "--deadlock-after", "0"], ["must be above 0"]),
        (["nothing"], ["invalid choice: 'nothing'"]),
    ],
)
def test_bad_input_gets_one_clear_line(args, fragments, capsys):
    completed = cli_in_process("workers.start_methods", *args, capsys=capsys)
    assert_one_line_error(completed, *fragments)
