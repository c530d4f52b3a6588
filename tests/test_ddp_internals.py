"""workers.ddp_internals beyond what its chapter runs: three ranks accumulating gradients and laying
out buckets, the overlap demo under torchrun, one rank, each demo's --help, and bad input."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from workers.ddp_internals import AUTOCAST, register_hook, synced_statistics
from workers.job import wrap
from workers.mnist import MnistNet
from workers.ranks import free_port

from helpers import assert_one_line_error, cli_in_process, help_options, quiet_run

SMALL = ("--width", "128", "--depth", "3", "--steps", "2")


def test_no_sync_saves_all_but_one_round_for_three_ranks():
    result = quiet_run("workers.ddp_internals", "no-sync", "--world-size", "3",
                       "--micro-batches", "3", "--dtype", "float64", *SMALL)
    steps = {(e["rank"], e["variant"]): e for e in result.events_named("accumulation")}
    assert {rank for rank, _ in steps} == {0, 1, 2}
    for rank in range(3):
        once = steps[(rank, "no_sync()")]["all_reduces"]
        assert once >= 1
        assert steps[(rank, "all-reduce every micro-batch")]["all_reduces"] == 3 * once
        assert steps[(rank, "one batch k times larger")]["all_reduces"] == once
    differences = [e["largest_difference"] for e in result.events_named("weights")]
    assert len(differences) == 9 and max(differences) < 1e-9  # float64: rounding only


def test_overlap_under_torchrun_reports_the_slowest_rank_on_every_rank():
    result = quiet_run("torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                       "-m", "workers.ddp_internals", "overlap", "--small-count", "4",
                       "--large-count", "2", "--large-mib", "1", "--trials", "3")
    runs = {(e["rank"], e["messages"]): e for e in result.events_named("overlap")}
    assert sorted(runs) == [(0, "large"), (0, "small"), (1, "large"), (1, "small")]
    for messages in ["small", "large"]:
        ours, theirs = runs[(0, messages)], runs[(1, messages)]
        assert set(ours["seconds"]) == {"compute alone", "all-reduce alone", "blocking",
                                        "overlapped"}
        assert ours["seconds"] == theirs["seconds"]  # all_reduce(MAX): one value, known to all
        assert all(len(times) == 3 and min(times) > 0 for times in ours["seconds"].values())
        assert ours["repeats"] >= 1 and len(ours["cpu_share"]) == 3


def test_three_ranks_send_the_last_layer_first_and_alone_by_default():
    result = quiet_run("workers.ddp_internals", "buckets", "--world-size", "3", "--width", "512",
                       "--depth", "3", "--steps", "1", "--caps", "default", "25")
    sizes = {}
    for e in result.events_named("bucket"):
        if e["rank"] == 2:
            sizes.setdefault((e["cap_mb"], e["step"]), []).append((e["t"], e["parameters"]))
    for cap in ["default", 25]:
        assert len(sizes[(cap, 0)]) == 1  # step 0: one bucket, whatever the cap
    later = [names for _, names in sorted(sizes[("default", 2)])]
    # the first bucket closes once it holds 1 MiB: the last layer, alone, sent first
    assert sorted(later[0]) == ["layers.4.bias", "layers.4.weight"]
    assert len(later) == 2 and len(sizes[(25, 2)]) == 1


def test_three_ranks_all_reduce_each_hooks_dtype_and_float32_under_autocast():
    result = quiet_run("workers.ddp_internals", "compression", "--world-size", "3",
                       "--batch-size", "60", "--train-images", "600", "--backend", "gloo",
                       env={"CUDA_VISIBLE_DEVICES": ""})
    ran = {(e["rank"], e["hook"]): e for e in result.events_named("hook") if not e["error"]}
    for rank in range(3):
        assert ran[(rank, "allreduce (the default)")]["all_reduced"] == ["torch.float32"]
        assert ran[(rank, "fp16_compress_hook")]["all_reduced"] == ["torch.float16"]
        cast = ran[(rank, AUTOCAST)]
        assert cast["outputs"] == ["torch.bfloat16"]
        assert cast["gradients"] == cast["all_reduced"] == ["torch.float32"]
        assert cast["bytes_per_step"] == ran[(rank, "allreduce (the default)")]["bytes_per_step"]


def test_one_rank_keeps_every_bucket_and_statistic_to_itself():
    result = quiet_run("workers.ddp_internals", "options", "--world-size", "1", *SMALL)
    [stats] = result.events_named("batch statistics")
    assert stats["own_mean"] == pytest.approx(stats["synced_mean"], abs=1e-5)
    assert stats["synced_mean"] == pytest.approx(stats["whole_batch_mean"], abs=1e-5)
    options = {(e["option"], e["model"]): e["error"] for e in result.events_named("option")}
    assert len(options) == 8
    assert options[("find_unused_parameters=True", "TowerWithUnusedLayer")] is None
    assert options[("static_graph=True", "TowerWithUnusedLayer")] is None


@pytest.mark.parametrize(
    "demo, options",
    [
        ("buckets", {"--width", "--depth", "--batch-size", "--steps", "--caps",
                     "--world-size", "--backend", "--events", "--timeout"}),
        ("overlap", {"--small-kib", "--small-count", "--large-mib", "--large-count", "--size",
                     "--trials", "--world-size", "--backend", "--events", "--timeout"}),
        ("no-sync", {"--width", "--depth", "--batch-size", "--steps", "--micro-batches",
                     "--dtype", "--world-size", "--backend", "--events", "--timeout"}),
        ("compression", {"--epochs", "--batch-size", "--lr", "--train-images",
                         "--powersgd-ranks",
                         "--data-root",
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
        (["buckets", "--caps", "defaults"], "expected a whole number"),
        (["overlap", "--trials", "0"], "must be at least 1"),
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
            register_hook(ddp, "powerSGD_hook, from step 2")
        del ddp
    finally:
        dist.destroy_process_group()


def test_synced_statistics_combines_ranks_of_different_batch_sizes(monkeypatch):
    # SyncBatchNorm all-gathers each rank's mean, spread and count because the counts may
    # differ: two ranks of 3 and 7 rows, their gathered statistics combined, must give the
    # mean and (biased) variance of all 10 rows
    generator = torch.Generator().manual_seed(0)
    shares = [torch.randn(3, 4, generator=generator, dtype=torch.float64) + 2,
              torch.randn(7, 4, generator=generator, dtype=torch.float64)]
    mine = {}

    def all_gather(outputs, tensor):
        mine.setdefault("sent", tensor)
        for rank, share in enumerate(shares):  # what each rank would send
            count = torch.tensor([len(share)], dtype=share.dtype)
            outputs[rank].copy_(torch.cat([share.mean(0), share.var(0, unbiased=False),
                                           count]))

    monkeypatch.setattr(dist, "all_gather", all_gather)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    mean, variance = synced_statistics(shares[0])
    whole = torch.cat(shares)
    assert torch.allclose(mean, whole.mean(0), rtol=0, atol=1e-12)
    assert torch.allclose(variance, whole.var(0, unbiased=False), rtol=0, atol=1e-12)
    assert mine["sent"][-1].item() == 3  # this rank's count travels with its statistics
