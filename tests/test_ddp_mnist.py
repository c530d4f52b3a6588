"""workers.ddp_mnist beyond what its chapter runs: the partitioner against DistributedSampler,
the three modes equal for four ranks, the mistakes for another world size, a rank killed
mid-training, each demo's --help, and bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from torch.utils.data.distributed import DistributedSampler
from workers.ddp_mnist import epoch_order, shard
from workers.job import share_cores
from workers.mnist import MnistNet
from workers.ranks import physical_cores

from helpers import ROOT, assert_one_line_error, cli_in_process, help_options, is_running, quiet_run


@pytest.mark.parametrize("size, world_size", [(4000, 2), (4000, 4), (10, 3), (7, 1)])
def test_shards_are_disjoint_and_match_the_distributed_sampler(size, world_size):
    order = epoch_order(size, seed=0, epoch=3)
    shards = [shard(order, r, world_size) for r in range(world_size)]
    assert sorted(i for s in shards for i in s) == list(range(size))
    if size % world_size == 0:  # then DistributedSampler draws exactly the same shards
        for r in range(world_size):
            sampler = DistributedSampler(range(size), num_replicas=world_size, rank=r, seed=0)
            sampler.set_epoch(3)
            assert list(sampler) == shards[r]


def test_one_process_by_hand_and_ddp_agree_for_four_ranks(tmp_path):
    # float64: in float32, training can amplify rounding past any fixed tolerance (the page)
    result = quiet_run("workers.ddp_mnist", "compare", "--world-size", "4", "--dtype",
                       "float64", "--train-images", "400", "--checkpoint-dir", str(tmp_path))
    weights = {mode: torch.load(tmp_path / f"{mode}-float64.pt", weights_only=True)
               for mode in ["single", "manual", "ddp"]}

    def largest(a: dict, b: dict) -> float:
        return max((a[k] - b[k]).abs().max().item() for k in a)

    assert weights["ddp"]["fc.weight"].dtype == torch.float64
    assert largest(weights["single"], weights["manual"]) < 1e-9
    assert largest(weights["single"], weights["ddp"]) < 1e-9
    torch.manual_seed(0)
    assert largest(MnistNet().state_dict(), weights["single"]) > 1e-2  # training moved them
    steps = {(e["mode"], e["rank"]) for e in result.events_named("step")}
    on_cpu = result.backends[0] == "gloo"  # the one process then runs again on one thread
    single = {("single", 0), ("one_thread", 0)} if on_cpu else {("single", 0)}
    assert steps == single | {(m, r) for m in ("manual", "ddp") for r in range(4)}
    threads = {e["mode"]: e["threads"] for e in result.events_named("environment")}
    if on_cpu:
        assert threads["one_thread"] == 1 and threads["single"] == physical_cores()
    accuracies = {e["accuracy"] for e in result.events_named("epoch") if e["mode"] == "ddp"}
    assert len(accuracies) == 1  # every rank reports the one shared model's accuracy


def test_the_mistakes_for_four_ranks_and_an_even_split():
    result = quiet_run("workers.ddp_mnist", "mistakes", "--world-size", "4",
                       "--test-images", "1000")
    padding = next(e for e in result.events_named("mistake") if e["mistake"] == "padding")
    assert padding["seen"] == 1000 and padding["twice"] == []  # 1000 = 4 x 250: no padding
    orders = {(e["set_epoch"], e["epoch"]): e["first"] for e in result.events_named("order")}
    assert orders[True, 1] != orders[True, 0] == orders[False, 0] == orders[False, 1]


def test_killing_one_rank_ends_the_whole_job(tmp_events):
    command = [sys.executable, "-m", "workers.ddp_mnist", "ddp", "--epochs", "50",
               "--timeout", "30", "--events", str(tmp_events)]
    job = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        deadline = time.time() + 60
        events = []
        while not any(e["event"] == "step" and e["rank"] == 1 for e in events):
            assert time.time() < deadline, "training never started"
            time.sleep(0.2)
            text = tmp_events.read_text() if tmp_events.exists() else ""
            events = [json.loads(line) for line in text.splitlines()]
        pids = {e["rank"]: e["pid"] for e in events if e["event"] == "environment"}
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
    "demo, options",
    [
        ("single", {"--epochs", "--batch-size", "--lr", "--seed", "--dtype", "--data-root",
                    "--download", "--train-images", "--checkpoint", "--events", "--timeout"}),
        ("mistakes", {"--world-size", "--test-images", "--seed", "--events", "--timeout"}),
    ],
)
def test_each_demo_documents_only_its_own_options(demo, options, capsys):
    completed = cli_in_process("workers.ddp_mnist", demo, "--help", capsys=capsys)
    assert help_options(completed) == options


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["ddp", "--world-size", "3"], "does not split evenly over 3 ranks"),
        (["manual", "--world-size", "1"], "at least 2"),
        (["ddp", "--checkpoint", "/no/such/folder/model.pt"], "no such folder"),
        (["compare", "--checkpoint-dir", "/no/such/folder"], "no such folder"),
        (["compare"], "required: --checkpoint-dir"),
        (["single", "--world-size", "2"], "unrecognized arguments: --world-size"),
        (["ddp", "--lr", "-1"], "must be above 0"),
        (["compare", "--dtype", "float16", "--checkpoint-dir", "."], "invalid choice: 'float16'"),
        (["ddp", "--mode", "ddp"], "unrecognized arguments: --mode"),
        (["mistakes", "--world-size", "0"], "must be at least 1"),
    ],
)
def test_bad_input_gets_one_line(args, fragment, capsys):
    assert_one_line_error(cli_in_process("workers.ddp_mnist", *args, capsys=capsys), fragment)


@pytest.mark.parametrize("omp, local_world_size, expected", [
    (None, None, lambda cores: max(1, cores // 2)),  # two ranks share the cores
    (None, "1", lambda cores: cores),  # a launcher started one rank on this machine
    ("3", None, lambda cores: 3),  # OMP_NUM_THREADS, torchrun's or the reader's, is kept
])
def test_each_rank_takes_its_share_of_the_cores(omp, local_world_size, expected, monkeypatch):
    for name, value in [("OMP_NUM_THREADS", omp), ("LOCAL_WORLD_SIZE", local_world_size)]:
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    before = torch.get_num_threads()
    torch.set_num_threads(3)  # as OMP_NUM_THREADS=3 would have set it at start-up
    try:
        share_cores(world_size=2)
        assert torch.get_num_threads() == expected(len(os.sched_getaffinity(0)))
    finally:
        torch.set_num_threads(before)
