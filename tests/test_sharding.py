"""workers.sharding beyond what its chapter runs: three ranks and a width that does not split
evenly (padding), a checkpoint saved by 2 ranks and loaded into 3, a load whose check must
fail, the compare demo under torchrun, each demo's --help, and bad input."""

from __future__ import annotations

import math
import shutil

import pytest
import torch
from workers.sharding import WHOLE_COPY, storage_bytes

from helpers import assert_one_line_error, cli_in_process, help_options, quiet_run

WIDTH, DEPTH = 100, 3  # 10,000 weights per layer: three ranks need padding
PSI = WIDTH * WIDTH * DEPTH
KINDS = ["parameters", "gradients", "optimizer state"]


def test_a_view_costs_no_bytes_of_its_own():
    whole = torch.zeros(10)
    assert storage_bytes([whole, whole[:5], whole.view(2, 5), None]) == 40
    assert storage_bytes([whole, torch.zeros(3)]) == 52


def test_three_ranks_hold_and_send_what_the_formulas_say_with_padding():
    result = quiet_run("workers.sharding", "compare", "--world-size", "3", "--width",
                       str(WIDTH), "--depth", str(DEPTH), "--steps", "3", "--backend", "gloo")
    records = {(e["rank"], e["name"]): e for e in result.events_named("strategy")}
    assert {rank for rank, _ in records} == {0, 1, 2} and len(records) == 18
    part = DEPTH * math.ceil(WIDTH * WIDTH / 3)  # elements of a rank's part, padded
    expected = {"DDP": (4 * PSI, 4 * PSI, 8 * PSI),  # ZeRO-1, -2: weights in padded buffers
                "ZeRO-1": (4 * 3 * part, 4 * PSI, 8 * part),
                "ZeRO-2": (4 * 3 * part, 4 * part, 8 * part),
                "ZeRO-3": (4 * part, 4 * part, 8 * part)}
    ring = 2 / 3 * 4  # bytes a ring sends per element, for one transfer, on 3 ranks
    for (rank, name), e in records.items():
        if name in expected:
            assert tuple(e[kind] for kind in KINDS) == expected[name], (rank, name)
        else:  # FSDP2 splits each weight's 100 rows 34, 34, 32, in storage padded to 34
            assert e["parameters"] == 4 * DEPTH * 34 * WIDTH, (rank, name)
        assert e["largest_weight_difference"] < 1e-5, (rank, name)
        assert e["losses"] == pytest.approx(records[(rank, "DDP")]["losses"], rel=1e-5)
        if name == "DDP":
            assert e["counted_bytes"] == pytest.approx(2 * ring * PSI)
        elif name in ("ZeRO-1", "ZeRO-2"):  # a reduce-scatter and an all-gather, padded
            assert e["counted_bytes"] == pytest.approx(2 * ring * 3 * part)
        elif name == "ZeRO-3":
            assert e["counted_bytes"] == pytest.approx(3 * ring * 3 * part)
        else:
            assert e["counted_bytes"] is None
        assert e["written_bytes"] > 0


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> str:
    """One checkpoint for the tests below: saved by 2 ranks, 2 layers of 96 features."""
    folder = str(tmp_path_factory.mktemp("sharding") / "checkpoint")
    quiet_run("workers.sharding", "save", "--world-size", "2", "--checkpoint", folder,
              "--width", "96", "--depth", "2", "--steps", "2")
    return folder


def test_checkpoint_saved_by_two_ranks_loads_into_three(saved):
    loaded = quiet_run("workers.sharding", "load", "--world-size", "3", "--checkpoint",
                       saved, "--width", "96", "--depth", "2")
    [check] = loaded.events_named("loaded")
    assert check == {**check, "world_size": 3, "tensors": 8, "different": 0}
    shares = sorted(e["local_bytes"] for e in loaded.events_named("shard"))
    assert shares == [4 * 2 * 32 * 96] * 3  # 96 rows of each weight, 32 per rank


def test_load_fails_when_the_weights_are_not_the_saved_ones(saved, tmp_path):
    folder = shutil.copytree(saved, tmp_path / "changed")
    whole = torch.load(folder / WHOLE_COPY)
    next(iter(whole["model"].values()))[0, 0] += 1e-6  # one weight, barely: it must notice
    torch.save(whole, folder / WHOLE_COPY)
    failed = quiet_run("workers.sharding", "load", "--checkpoint", str(folder), "--width",
                       "96", "--depth", "2", expect_returncode=1,
                       expect_output="1 of 8 tensors changed between save and load")
    [check] = failed.events_named("loaded")
    assert check["different"] == 1


def test_compare_under_torchrun_gives_every_rank_ddps_weights():
    result = quiet_run("torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                       "-m", "workers.sharding", "compare", "--strategies", "zero2", "fsdp2",
                       "--width", "64", "--depth", "2", "--steps", "2")
    records = {(e["rank"], e["strategy"]): e for e in result.events_named("strategy")}
    assert set(records) == {(r, s) for r in (0, 1) for s in ("ddp", "zero2", "fsdp2")}
    assert max(e["largest_weight_difference"] for e in records.values()) < 1e-5


@pytest.mark.parametrize(
    "demo, options",
    [
        ("compare", {"--width", "--depth", "--batch-size", "--steps", "--lr", "--strategies",
                     "--world-size", "--backend", "--events", "--timeout"}),
        ("save", {"--width", "--depth", "--batch-size", "--steps", "--lr", "--checkpoint",
                  "--world-size", "--backend", "--events", "--timeout"}),
        ("offload", {"--width", "--depth", "--batch-size", "--steps", "--lr",
                     "--world-size", "--backend", "--events", "--timeout"}),
    ],
)
def test_each_demo_documents_only_its_own_options(demo, options, capsys):
    completed = cli_in_process("workers.sharding", demo, "--help", capsys=capsys)
    assert help_options(completed) == options


def test_bad_checkpoints_get_one_line(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        (["load", "--checkpoint", str(tmp_path / "nowhere")], "no checkpoint in"),
        (["save", "--checkpoint", "/proc/no/such/folder"], "cannot write the checkpoint"),
        (["load", "--checkpoint", str(empty)], "save one first"),
    ]
    for args, fragment in cases:
        completed = cli_in_process("workers.sharding", *args, capsys=capsys)
        assert_one_line_error(completed, fragment)


def test_a_checkpoint_of_another_shape_is_refused_in_one_line(saved, capsys):
    completed = cli_in_process("workers.sharding", "load", "--checkpoint", saved,
                               "--width", "64", capsys=capsys)
    assert_one_line_error(completed, "holds 2 layers of 96 features",
                          "--depth 2 --width 96")


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["compare", "--strategies", "zero4"], "invalid choice: 'zero4'"),
        (["compare", "--world-size", "0"], "must be at least 1"),
        (["compare", "--steps", "none"], "expected a whole number"),
        (["compare", "--lr", "0"], "must be above 0"),
        (["compare", "--checkpoint", "x"], "unrecognized arguments: --checkpoint"),
        (["save"], "the following arguments are required: --checkpoint"),
        (["offload", "--world-size", "65"], "at most 64 ranks"),
        (["zero"], "invalid choice: 'zero'"),
    ],
)
def test_bad_input_gets_one_line(args, fragment, capsys):
    completed = cli_in_process("workers.sharding", *args, capsys=capsys)
    assert_one_line_error(completed, fragment)
