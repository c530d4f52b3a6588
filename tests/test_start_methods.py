"""workers.start_methods: measured start-up, inheritance, guards, contexts, fork with threads."""

from __future__ import annotations

import statistics

import pytest
import torch
from conftest import assert_one_line_error, cli, quiet_run


def startup_costs(result) -> dict[str, list[float]]:
    costs: dict[str, list[float]] = {}
    for event in result.events_named("start-up"):
        costs.setdefault(event["method"], []).append(event["t_end"] - event["t"])
    return costs


def test_fork_starts_faster_than_spawn():
    costs = startup_costs(
        quiet_run(
            "workers.start_methods",
            "startup",
            "--methods",
            "fork",
            "spawn",
            "--processes",
            "2",
        )
    )
    assert set(costs) == {"fork", "spawn"} and all(
        len(values) == 2 for values in costs.values()
    )
    # spawn imports PyTorch in every child; fork copies a parent that already has it.
    assert statistics.median(costs["spawn"]) > 5 * statistics.median(costs["fork"])


def test_forkserver_preload_makes_later_starts_cheap():
    costs = startup_costs(
        quiet_run(
            "workers.start_methods",
            "startup",
            "--methods",
            "forkserver",
            "--processes",
            "3",
            "--forkserver-preload",
            "torch",
        )
    )
    first, *later = costs["forkserver, preload torch"]
    assert max(later) * 5 < first  # the first start pays for the server and its imports


def test_only_a_forked_child_sees_the_parents_change():
    result = quiet_run("workers.start_methods", "inherit")
    assert "a value the parent set at run time" in result.lines_of(0)[0]  # fork
    assert "the value written in the module's source" in result.lines_of(1)[0]  # spawn
    assert (
        "the value written in the module's source" in result.lines_of(2)[0]
    )  # forkserver


def test_missing_main_guard_fails_in_the_child():
    result = quiet_run(
        "workers.start_methods_unguarded", events=False, expect_returncode=1
    )
    assert "finished its bootstrapping phase" in result.output
    assert "the child exited with code 1" in result.output


def test_context_can_be_set_once():
    main = quiet_run("workers.start_methods", "context").lines_of("main")
    assert "nothing is set yet" in main[1]
    assert main[3].endswith("RuntimeError: context has already been set")
    assert main[4].endswith("-> 'forkserver'")


def test_fork_with_a_held_lock_deadlocks_only_under_fork():
    result = quiet_run(
        "workers.start_methods", "fork-with-threads", "--deadlock-after", "1"
    )
    verdicts = {event["method"]: event["event"] for event in result.events}
    assert verdicts == {
        "fork": "deadlocked",
        "spawn": "finished",
        "forkserver": "finished",
    }
    assert result.lines_of(0) == ["fork       child: taking LOCK ..."]  # never took it


def test_only_queue_starts_a_feeder_thread():
    main = quiet_run("workers.start_methods", "queue-threads").lines_of("main")
    assert "QueueFeederThread" not in main[1] and "QueueFeederThread" in main[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_cuda_fork_without_a_gpu_says_so():
    assert_one_line_error(cli("workers.start_methods", "cuda-fork"), "needs a CUDA GPU")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_fork_fails_only_under_fork():
    result = quiet_run("workers.start_methods", "cuda-fork")
    assert "Cannot re-initialize CUDA in forked subprocess" in " ".join(
        result.lines_of(0)
    )
    assert "CUDA works" in " ".join(result.lines_of(1))


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["startup", "--methods", "teleport"], ["invalid choice: 'teleport'"]),
        (["startup", "--processes", "0"], ["must be at least 1"]),
        (["fork-with-threads", "--deadlock-after", "0"], ["must be above 0"]),
        (["nothing"], ["invalid choice: 'nothing'"]),
    ],
)
def test_bad_input_gets_one_clear_line(args, fragments):
    assert_one_line_error(cli("workers.start_methods", *args), *fragments)
