"""workers.hogwild beyond what its chapter runs: Hogwild with three processes against one,
each demo's --help, and bad input. (Queues, the open-file limit and oversubscription are run
and asserted by the chapter itself, on every build.)"""

from __future__ import annotations

import pytest
import torch

from helpers import assert_one_line_error, cli_in_process, help_options, quiet_run


def test_three_processes_train_one_shared_model_at_the_same_time():
    result = quiet_run("workers.hogwild", "train", "--processes", "3", "--threads", "1",
                       "--steps", "15", "--repeats", "1", timeout=120)
    # 10% is chance. Lock-free updates are not reproducible, and on a loaded machine a process
    # that was descheduled applies stale gradients, so the bar says "it learned", not "as well".
    scores = {e["processes"]: e["accuracy"] for e in result.events_named("accuracy")}
    assert set(scores) == {1, 3} and min(scores.values()) >= 0.3
    trained = result.events_named("trained")
    hogwild = [e for e in trained if e["processes"] == 3]
    assert sorted(e["rank"] for e in hogwild) == [0, 1, 2]
    assert max(e["t"] for e in hogwild) < min(e["t_end"] for e in hogwild)  # they overlapped
    assert len({e["pid"] for e in hogwild}) == 3
    # the same number of updates: 45 steps in one process, 15 in each of three
    losses = result.events_named("loss")
    assert max(e["step"] for e in losses if e["processes"] == 1) == 40
    assert max(e["step"] for e in losses if e["processes"] == 3) == 10


@pytest.mark.parametrize(
    "demo, options",
    [
        ("train", {"--processes", "--threads", "--steps", "--lr", "--seed", "--repeats",
                   "--batch-size", "--data-root", "--events", "--timeout"}),
        ("grid", {"--grid-processes", "--steps", "--repeats", "--batch-size", "--data-root",
                  "--events", "--timeout"}),
        ("fd-limit", {"--strategies", "--nofile", "--count", "--events", "--timeout"}),
        ("threads", {"--events", "--timeout"}),
    ],
)
def test_each_demo_documents_only_its_own_options(demo, options, capsys):
    completed = cli_in_process("workers.hogwild", demo, "--help", capsys=capsys)
    assert help_options(completed) == options


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_the_cuda_demo_without_a_gpu_says_so(capsys):
    assert_one_line_error(cli_in_process("workers.hogwild", "cuda", capsys=capsys), "needs a GPU")


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["train", "--processes", "0"], "must be at least 1"),
        (["train", "--threads", "0"], "must be at least 1"),
        (["train", "--lr", "0"], "must be above 0"),
        (["train", "--steps", "0"], "must be at least 1"),
        (["grid", "--repeats", "0"], "must be at least 1"),
        (["train", "--processes", "65"], "at most 64"),
        (["fd-limit", "--nofile", "8"], "too few files"),
        (["grid", "--grid-processes", "65"], "at most 64"),
        (["queue", "--threads", "2"], "unrecognized arguments: --threads"),
        (["wrong"], "invalid choice"),
    ],
)
def test_bad_input_gets_one_line(args, fragment, capsys):
    assert_one_line_error(cli_in_process("workers.hogwild", *args, capsys=capsys), fragment)


def test_the_grid_verdict_never_says_one_times_and_heeds_its_control():
    from workers.verdicts.hogwild import oversubscription

    grid = dict(processes=4, cores=16, default_threads=16, rule=4,
                default_named="PyTorch's default of 16 threads", busy_default=3.9,
                busy_rule=3.9, switches_default=200.0, switches_rule=40.0)
    small = oversubscription(**grid, rule_rates=[1040.0, 1045.0, 1050.0],
                             default_rates=[1000.0, 1002.0, 1004.0])
    assert "4.3% more throughput than the default" in str(small)
    assert "1.0 times" not in str(small)
    # one process slower with the default's threads than with one: the cores were busy
    busy = oversubscription(**grid, rule_rates=[3800.0, 3900.0], default_rates=[300.0, 320.0],
                            alone_default=[130.0, 650.0], alone_one=[1400.0, 2500.0])
    assert busy.outcome == "busy" and "is not theirs alone" in str(busy)
    assert str(busy).startswith("no verdict from this run")
