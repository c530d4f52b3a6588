"""The same training under mp.spawn, torchrun and a shell loop; a two-node torchrun job; the
old --local_rank failure; the Slurm script's syntax."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from conftest import ROOT, assert_one_line_error, cli, quiet_run

SHORT = ["--epochs", "1", "--steps-per-epoch", "10"]


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    folder = tmp_path_factory.mktemp("launchers")
    runs = {
        "spawn": ("workers.launchers", "spawn", "--world-size", "2"),
        "torchrun": ("torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                     "-m", "workers.ddp_mnist"),
        "shell": ("scripts/launch_local.sh", "2", "workers.ddp_mnist"),
    }  # fmt: skip
    results = {}
    for name, command in runs.items():
        path = folder / f"{name}.pt"
        result = quiet_run(*command, *SHORT, "--checkpoint", str(path),
                           env={"PYTHON": sys.executable})  # fmt: skip
        results[name] = (result, torch.load(path, weights_only=True))
    return results


def test_every_launcher_trains_the_same_weights(launched):
    reference = launched["spawn"][1]
    for name, (_, state) in launched.items():
        difference = max((state[k] - reference[k]).abs().max().item() for k in state)
        assert difference < 1e-6, name
    torch.manual_seed(0)
    from workers.mnist import MnistNet

    untrained = MnistNet().state_dict()  # and the weights did change
    assert (
        max((reference[k] - untrained[k]).abs().max().item() for k in reference) > 1e-3
    )


def test_what_each_launcher_sets(launched):
    def variables(name, rank):
        result = launched[name][0]
        return next(e["variables"] for e in result.events_named("environment") if e["rank"] == rank)  # fmt: skip

    for rank in (0, 1):
        assert variables("spawn", rank)["RANK"] is None  # the rank is an argument
        for name in ("torchrun", "shell"):
            seen = variables(name, rank)
            assert (seen["RANK"], seen["LOCAL_RANK"], seen["WORLD_SIZE"]) == (str(rank), str(rank), "2")  # fmt: skip
        torchrun = variables("torchrun", rank)
        assert torchrun["OMP_NUM_THREADS"] == "1" and torchrun["GROUP_RANK"] == "0"
        assert torchrun["TORCHELASTIC_RESTART_COUNT"] == "0"


def test_two_nodes_make_one_job_with_every_global_rank_once():
    result = quiet_run("workers.launchers", "two-nodes", "--nproc-per-node", "2", *SHORT,
                       timeout=120)  # fmt: skip
    placed = [(e["rank"], e["variables"]) for e in result.events_named("environment")]
    assert sorted(rank for rank, _ in placed) == [0, 1, 2, 3]
    nodes = {}
    for rank, variables in placed:
        assert variables["WORLD_SIZE"] == "4" and variables["RANK"] == str(rank)
        nodes.setdefault(variables["GROUP_RANK"], []).append(
            int(variables["LOCAL_RANK"])
        )
    assert {node: sorted(local) for node, local in nodes.items()} == {"0": [0, 1], "1": [0, 1]}  # fmt: skip


def test_a_failed_rank_under_spawn_stops_the_job():
    result = quiet_run("workers.launchers", "spawn", "--world-size", "2", *SHORT,
                       "--crash-rank", "1", "--crash-at-step", "3", expect_returncode=1)  # fmt: skip
    assert (
        "rank 1 raised RuntimeError: rank 1 crashed on purpose at step 3"
        in result.output
    )
    assert result.duration < 60


def test_the_old_local_rank_option_fails_under_the_new_launch():
    result = quiet_run("torch.distributed.launch", "--nproc-per-node", "2", "-m",
                       "workers.legacy_local_rank", events=False, expect_returncode=1)  # fmt: skip
    assert "unrecognized arguments: --local-rank=" in result.output
    fixed = quiet_run("torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
                      "workers.legacy_local_rank", "--migrated", events=False)  # fmt: skip
    assert sorted(fixed.ranks) == [0, 1]
    assert all("local rank" in fixed.lines_of(r)[0] for r in (0, 1))


@pytest.mark.parametrize(
    "script", ["scripts/launch_local.sh", "scripts/slurm_ddp_mnist.sbatch"]
)
def test_shell_scripts_parse(script):
    completed = subprocess.run(
        ["bash", "-n", script], cwd=ROOT, capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stderr


def test_shell_launcher_rejects_a_bad_process_count():
    completed = subprocess.run(["bash", "scripts/launch_local.sh", "two", "workers.ddp_mnist"],
                               cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert completed.returncode == 2 and "usage:" in completed.stderr


def test_bad_training_options_are_reported_by_the_worker():
    assert_one_line_error(
        cli("workers.launchers", "spawn", "--world-size", "3"), "does not split evenly"
    )
