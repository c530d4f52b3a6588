"""workers.ddp_internals beyond what its chapter runs: three ranks accumulating gradients, a demo
under torchrun and on one rank, each demo's --help, and bad input."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from workers.ddp_internals import powersgd
from workers.job import wrap
from workers.mnist import MnistNet
from workers.ranks import free_port

from helpers import assert_one_line_error, cli_in_process, help_options, quiet_run

SMALL = ("--width", "128", "--depth", "3", "--steps", "2")


def test_no_sync_saves_all_but_one_round_for_three_ranks():
    result = quiet_run("workers.ddp_internals", "no-sync", "--world-size", "3",
                       "--micro-batches", "3", *SMALL)
    steps = {(e["rank"], e["variant"]): e for e in result.events_named("accumulation")}
    assert {rank for rank, _ in steps} == {0, 1, 2}
    for rank in range(3):
        once = steps[(rank, "no_sync()")]["all_reduces"]
        assert once >= 1
        assert steps[(rank, "all-reduce every micro-batch")]["all_reduces"] == 3 * once
        assert steps[(rank, "one batch k times larger")]["all_reduces"] == once
    differences = [e["largest_difference"] for e in result.events_named("weights")]
    assert len(differences) == 9 and max(differences) < 1e-5


def test_overlap_under_torchrun_reports_the_slowest_rank_on_every_rank():
    result = quiet_run("torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                       "-m", "workers.ddp_internals", "overlap", *SMALL)
    timings = {}
    for e in result.events_named("overlap"):
        timings.setdefault(e["variant"], {})[e["rank"]] = e["seconds"]
    assert set(timings) == {"DDP", "backward, then one all-reduce", "compute alone",
                            "all-reduce alone"}
    for variant, by_rank in timings.items():  # all_reduce(MAX): one value, known to all
        assert set(by_rank) == {0, 1} and by_rank[0] == by_rank[1] > 0, variant


def test_one_rank_keeps_every_bucket_and_statistic_to_itself():
    result = quiet_run("workers.ddp_internals", "options", "--world-size", "1", *SMALL)
    [stats] = result.events_named("batch statistics")
    assert stats["own_mean"] == pytest.approx(stats["synced_mean"], abs=1e-5)
    assert stats["synced_mean"] == pytest.approx(stats["whole_batch_mean"], abs=1e-5)
    options = {(e["option"], e["model"]): e["error"] for e in result.events_named("option")}
    assert len(options) == 8
    assert options[("find_unused_parameters=True", "TowerWithUnusedLayer")] is None


@pytest.mark.parametrize(
    "demo, options",
    [
        ("buckets", {"--width", "--depth", "--batch-size", "--steps", "--caps",
                     "--world-size", "--backend", "--events", "--timeout"}),
        ("no-sync", {"--width", "--depth", "--batch-size", "--steps", "--micro-batches",
                     "--world-size", "--backend", "--events", "--timeout"}),
        ("compression", {"--epochs", "--batch-size", "--lr", "--data-root",
                         "--world-size", "--backend", "--events", "--timeout"}),
        ("compile", {"--width", "--depth", "--batch-size", "--steps", "--compiler",
                     "--world-size", "--backend", "--events", "--timeout"}),
    ],
)
def test_each_demo_documents_only_its_own_options(demo, options, capsys):
    completed = cli_in_process("workers.ddp_internals", demo, "--help", capsys=capsys)
    assert help_options(completed) == options


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["buckets", "--caps", "0"], "must be at least 1"),
        (["overlap", "--caps", "1"], "unrecognized arguments: --caps"),
        (["no-sync", "--micro-batches", "two"], "expected a whole number"),
        (["compression", "--batch-size", "63"], "does not split evenly over 2 ranks"),
        (["compression", "--width", "8"], "unrecognized arguments: --width"),
        (["compile", "--compiler", "no-such-backend"], "not a torch.compile backend"),
        (["options", "--world-size", "65"], "at most 64 ranks"),
        (["ring"], "invalid choice: 'ring'"),
    ],
)
def test_bad_input_gets_one_line(args, fragment, capsys):
    completed = cli_in_process("workers.ddp_internals", *args, capsys=capsys)
    assert_one_line_error(completed, fragment)


def test_powersgd_on_cpu_gradients_with_a_gpu_visible_says_how_to_avoid_it(monkeypatch):
    # torch's powerSGD_hook calls torch.cuda.synchronize(device) whenever CUDA is available,
    # which fails for CPU gradients (seen on a one-GPU machine, where two ranks use gloo)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}",
                            rank=0, world_size=1)
    try:
        ddp = wrap(MnistNet(), torch.device("cpu"))
        with pytest.raises(RuntimeError, match="CUDA_VISIBLE_DEVICES= to hide the GPUs"):
            powersgd(ddp)
        del ddp
    finally:
        dist.destroy_process_group()
