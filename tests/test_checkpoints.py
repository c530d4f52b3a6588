"""workers.checkpoints beyond what its chapter runs: a checkpoint saved by 2 ranks loaded into
3, a load whose check must fail, an elastic restart that ends with exactly the weights of an
uninterrupted run, each demo's --help, and bad input."""

from __future__ import annotations

import shutil

import pytest
import torch
from workers.checkpoints import WHOLE_COPY

from helpers import assert_one_line_error, cli_in_process, help_options, quiet_run

# as the chapter runs it: the workers reach rank 0's store at 127.0.0.1, not at the address
# socket.getfqdn() resolves to
TORCHRUN = ("torch.distributed.run", "--standalone", "--local-addr", "127.0.0.1",
            "--nproc-per-node", "2")
SMALL = ("--width", "96", "--depth", "2")


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> str:
    """One checkpoint for the tests below: saved by 2 ranks, 2 layers of 96 features."""
    folder = str(tmp_path_factory.mktemp("checkpoints") / "checkpoint")
    quiet_run("workers.checkpoints", "save", "--world-size", "2", "--checkpoint", folder,
              *SMALL, "--steps", "2")
    return folder


def test_checkpoint_saved_by_two_ranks_loads_into_three(saved):
    loaded = quiet_run("workers.checkpoints", "load", "--world-size", "3", "--checkpoint",
                       saved, *SMALL)
    [check] = loaded.events_named("loaded")
    assert check == {**check, "world_size": 3, "tensors": 8, "different": 0}
    assert any(line.startswith("loaded into 3 ranks: 8 tensors") for line in loaded.lines_of(0))
    shares = sorted(e["local_bytes"] for e in loaded.events_named("shard"))
    assert shares == [4 * 2 * 32 * 96] * 3  # 96 rows of each weight, 32 per rank


def test_load_fails_when_the_weights_are_not_the_saved_ones(saved, tmp_path):
    folder = shutil.copytree(saved, tmp_path / "changed")
    whole = torch.load(folder / WHOLE_COPY)
    next(iter(whole["model"].values()))[0, 0] += 1e-6  # one weight, barely: it must notice
    torch.save(whole, folder / WHOLE_COPY)
    failed = quiet_run("workers.checkpoints", "load", "--world-size", "1", "--checkpoint",
                       str(folder), *SMALL, expect_returncode=1,
                       expect_output="1 of 8 tensors changed between save and load")
    [check] = failed.events_named("loaded")
    assert check["different"] == 1
    assert any(line.startswith("loaded into 1 rank: 8 tensors")  # one rank: singular
               for line in failed.lines_of(0)), failed.lines_of(0)


def test_an_elastic_restart_ends_like_an_uninterrupted_run(tmp_path):
    restarted, plain = tmp_path / "restarted", tmp_path / "plain"
    restarted.mkdir()
    plain.mkdir()
    elastic = ("-m", "workers.checkpoints", "elastic", "--steps", "12",
               "--checkpoint-every", "4")
    env = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}  # what the chapter says to set
    interrupted = quiet_run(*TORCHRUN, "--max-restarts", "1", *elastic, "--checkpoint-dir",
                            str(restarted), "--crash-at-step", "6", timeout=240, env=env)
    straight = quiet_run(*TORCHRUN, *elastic, "--checkpoint-dir", str(plain),
                         "--crash-at-step", "1000", timeout=240, env=env)
    assert [e["step"] for e in interrupted.events_named("resumed")] == [4, 4]
    finished = {(e["rank"], e["step"], e["attempt"])
                for e in interrupted.events_named("finished")}
    assert finished == {(0, 12, 1), (1, 12, 1)}
    assert {e["step"] for e in straight.events_named("finished")} == {12}
    a = torch.load(restarted / "final.pt", weights_only=True)
    b = torch.load(plain / "final.pt", weights_only=True)
    assert max((a[k] - b[k]).abs().max().item() for k in a) == 0  # no progress lost or changed


@pytest.mark.parametrize(
    "demo, options",
    [
        ("save", {"--width", "--depth", "--batch-size", "--steps", "--lr", "--checkpoint",
                  "--world-size", "--backend", "--events", "--timeout"}),
        ("elastic", {"--crash-at-step", "--steps", "--checkpoint-every", "--checkpoint-dir",
                     "--data-root", "--events", "--timeout"}),
    ],
)
def test_each_demo_documents_only_its_own_options(demo, options, capsys):
    completed = cli_in_process("workers.checkpoints", demo, "--help", capsys=capsys)
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
        completed = cli_in_process("workers.checkpoints", *args, capsys=capsys)
        assert_one_line_error(completed, fragment)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["save"], "the following arguments are required: --checkpoint"),
        (["load", "--checkpoint", "x", "--world-size", "65"], "at most 64 ranks"),
        (["elastic", "--checkpoint-dir", "/tmp"], "torchrun --max-restarts 1"),
        (["elastic"], "required: --checkpoint-dir"),
        (["elastic", "--checkpoint-dir", "/tmp", "--steps", "0"], "must be at least 1"),
    ],
)
def test_bad_input_gets_one_line(args, fragment, capsys):
    completed = cli_in_process("workers.checkpoints", *args, capsys=capsys)
    assert_one_line_error(completed, fragment)
