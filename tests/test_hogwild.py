"""workers.hogwild: shared parameters, Hogwild accuracy, tensors through queues, the open-file
limit, oversubscription measured as a ratio, and bad input."""

from __future__ import annotations

import os

import pytest
import torch
from conftest import assert_one_line_error, cli, quiet_run


def test_parameters_are_shared_by_every_process():
    result = quiet_run("workers.hogwild", "shared", "--processes", "3")
    records = result.events_named("shared")
    assert len(records) == 4  # the parent and three children
    assert (
        len({e["inode"] for e in records}) == 1
    )  # one shared-memory file, mapped by all
    assert len({e["pid"] for e in records}) == 4
    for e in records:
        if e["rank"] != "main":  # each child saw every child's write
            assert e["seen"][:3] == [1.0, 2.0, 3.0]
    assert result.events_named("after")[0]["seen"][:3] == [1.0, 2.0, 3.0]


def test_hogwild_training_reaches_94_percent():
    result = quiet_run("workers.hogwild", "train", "--processes", "2", "--threads", "1")
    assert result.events_named("accuracy")[0]["accuracy"] >= 0.94
    trained = result.events_named("trained")
    assert sorted(e["rank"] for e in trained) == [0, 1]
    # the two processes really trained at the same time
    assert max(e["t"] for e in trained) < min(e["t_end"] for e in trained)


def test_queue_shares_instead_of_copying():
    result = quiet_run("workers.hogwild", "queue", "--items", "100")
    received = result.events_named("received")[0]
    assert received["value"] == 42 and received["shared"]
    assert result.events_named("sent")[0]["shared_after"]
    patterns = {(e["queue"], e["pattern"]) for e in result.events_named("transfer")}
    assert len(patterns) == 4  # every queue type and pattern delivered every tensor


def test_the_open_file_limit_breaks_file_descriptor_sharing_only():
    fd = quiet_run("workers.hogwild", "fd-limit", "--strategy", "file_descriptor",
                   "--nofile", "64", expect_returncode=1)  # fmt: skip
    failed = fd.events_named("fd-limit")[0]
    assert 0 < failed["received"] < 200
    assert "ancdata" in failed["error"] or "Too many open files" in failed["error"]
    fs = quiet_run(
        "workers.hogwild", "fd-limit", "--strategy", "file_system", "--nofile", "64"
    )
    kept = fs.events_named("fd-limit")[0]
    assert kept["received"] == 200 and kept["error"] is None


@pytest.mark.skipif(
    torch.get_num_threads() * 4 <= len(os.sched_getaffinity(0)),
    reason="4 processes with the default threads do not oversubscribe this machine",
)
def test_floor_rule_is_faster_than_the_oversubscribed_default():
    result = quiet_run(
        "workers.hogwild", "grid", "--grid-processes", "4", "--steps", "15"
    )
    rate = {e["setting"]: e["rate"] for e in result.events_named("grid")}
    # about 10x on a 2-core machine; 1.5x leaves room for a loaded one
    assert rate["floor(N/M)"] / rate["default"] > 1.5, rate


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_cuda_demo_without_a_gpu_says_so():
    assert_one_line_error(cli("workers.hogwild", "cuda"), "needs a GPU")


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["train", "--processes", "0"], "must be at least 1"),
        (["train", "--threads", "0"], "must be at least 1"),
        (["fd-limit", "--nofile", "8"], "too few files"),
        (["grid", "--grid-processes", "65"], "at most 64"),
        (["wrong"], "invalid choice"),
    ],
)
def test_bad_input_gets_one_line(args, fragment):
    assert_one_line_error(cli("workers.hogwild", *args), fragment)
