"""workers.ddp_mnist: shards, the equivalence of one process, hand-written averaging and DDP,
set_epoch, the checkpoint round trip, a killed rank, the classic mistakes, and bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import ROOT, assert_one_line_error, cli, is_running, quiet_run
from torch.utils.data.distributed import DistributedSampler

from workers.ddp_mnist import epoch_order, shard
from workers.mnist import MnistNet

QUICK = ["--epochs", "1", "--steps-per-epoch", "15"]


@pytest.mark.parametrize("size, world_size", [(4000, 2), (4000, 4), (10, 3), (7, 1)])
def test_shards_are_disjoint_and_cover_the_data(size, world_size):
    order = epoch_order(size, seed=0, epoch=3)
    shards = [shard(order, r, world_size) for r in range(world_size)]
    assert sorted(i for s in shards for i in s) == list(range(size))
    if size % world_size == 0:  # then DistributedSampler draws exactly the same shards
        for r in range(world_size):
            sampler = DistributedSampler(
                range(size), num_replicas=world_size, rank=r, seed=0
            )
            sampler.set_epoch(3)
            assert list(sampler) == shards[r]


@pytest.fixture(scope="module")
def three_modes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("modes")
    results = {}
    for mode, extra in [("single", []), ("manual", ["--world-size", "2"]),
                        ("ddp", ["--world-size", "2"])]:  # fmt: skip
        path = str(folder / f"{mode}.pt")
        results[mode] = (
            quiet_run("workers.ddp_mnist", "--mode", mode, *extra, *QUICK, "--checkpoint", path),
            torch.load(path, weights_only=True),
        )  # fmt: skip
    return results


def largest_difference(a: dict, b: dict) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_one_process_by_hand_and_ddp_end_with_the_same_weights(three_modes):
    weights = {mode: state for mode, (_, state) in three_modes.items()}
    assert largest_difference(weights["single"], weights["manual"]) < 1e-4
    assert largest_difference(weights["single"], weights["ddp"]) < 1e-4
    torch.manual_seed(0)
    initial = MnistNet().state_dict()
    # and training really moved them: the agreement is not that of untouched weights
    assert largest_difference(initial, weights["single"]) > 1e-2


def test_checkpoint_round_trip(three_modes):
    result, state = three_modes["ddp"]
    records = result.events_named("checkpoint")
    assert sorted(e["rank"] for e in records) == [0, 1]
    assert all(e["largest_difference"] == 0 for e in records)
    assert not any(key.startswith("module.") for key in state)
    model = MnistNet()
    model.load_state_dict(state)  # strict: every key matches a plain model
    assert largest_difference(model.state_dict(), state) == 0


def test_every_rank_reports_the_same_test_accuracy(three_modes):
    result, _ = three_modes["ddp"]
    accuracies = {e["rank"]: e["accuracy"] for e in result.events_named("epoch")}
    assert accuracies[0] == accuracies[1] and 0.1 < accuracies[0] <= 1


def first_samples(result) -> dict[int, list[int]]:
    return {
        e["epoch"]: e["first"] for e in result.events_named("order") if e["rank"] == 0
    }


def test_set_epoch_changes_the_order_and_forgetting_it_does_not():
    args = ["--epochs", "2", "--steps-per-epoch", "1"]
    right = first_samples(quiet_run("workers.ddp_mnist", *args))
    wrong = first_samples(
        quiet_run("workers.ddp_mnist", *args, "--mistake", "no-set-epoch")
    )
    assert right[0] != right[1]
    assert wrong[0] == wrong[1] == right[0]


def test_killing_one_rank_ends_the_whole_job(tmp_events):
    command = [sys.executable, "-m", "workers.ddp_mnist", "--epochs", "50",
               "--timeout", "30", "--events", str(tmp_events)]  # fmt: skip
    job = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                           start_new_session=True)  # fmt: skip
    try:
        deadline = time.time() + 60
        events = []
        while not any(e["event"] == "step" and e["rank"] == 1 for e in events):
            assert time.time() < deadline, "training never started"
            time.sleep(0.2)
            text = tmp_events.read_text() if tmp_events.exists() else ""
            events = [json.loads(line) for line in text.splitlines()]
        pids = {e["rank"]: e["pid"] for e in events if e["event"] == "started"}
        killed_at = time.time()
        os.kill(pids[1], signal.SIGKILL)
        output, _ = job.communicate(timeout=30)
        stopped_after = time.time() - killed_at
    finally:
        if job.poll() is None:  # the test failed: leave nothing behind
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 1
    assert "rank 1 exited with signal SIGKILL; the other ranks were stopped" in output
    assert stopped_after < 30  # well within the job's timeout
    assert not [pid for pid in pids.values() if is_running(pid)]


@pytest.mark.parametrize(
    "mistake, message",
    [
        (
            "unused-parameter",
            "Expected to have finished reduction in the prior iteration",
        ),
        ("device-ids-on-cpu", "device_ids and output_device arguments only work"),
    ],
)
def test_classic_ddp_mistakes_fail_with_their_message(mistake, message):
    result = quiet_run("workers.ddp_mnist", "--mistake", mistake, "--epochs", "1",
                       "--steps-per-epoch", "3", expect_returncode=1)  # fmt: skip
    last = result.lines_of("main")[-1]
    assert message in last and "the other ranks were stopped" in last


def test_find_unused_parameters_is_the_fix():
    result = quiet_run("workers.ddp_mnist", "--mistake", "unused-parameter",
                       "--find-unused-parameters", "--epochs", "1", "--steps-per-epoch", "3")  # fmt: skip
    assert [e["steps"] for e in result.events_named("epoch")] == [3, 3]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--world-size", "3"], "does not split evenly over 3 ranks"),
        (["--mode", "manual", "--world-size", "1"], "at least 2"),
        (["--checkpoint", "/no/such/folder/model.pt"], "its folder does not exist"),
        (["--mode", "single", "--mistake", "no-set-epoch"], "use it with --mode ddp"),
        (["--lr", "-1"], "must be above 0"),
    ],
)
def test_bad_input_gets_one_line(args, fragment):
    assert_one_line_error(cli("workers.ddp_mnist", *args), fragment)
