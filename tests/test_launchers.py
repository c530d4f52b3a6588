"""workers.launchers and the launch scripts beyond what their chapter runs: a failed rank under
mp.spawn, the shell scripts' syntax and refusal of a bad count, each launcher's --help, and the
training worker's own checks."""

from __future__ import annotations

import subprocess

import pytest

from helpers import ROOT, assert_one_line_error, cli_in_process, help_options, quiet_run

SHORT = ["--epochs", "1", "--train-images", "200"]


def test_a_failed_rank_under_spawn_stops_the_job():
    result = quiet_run("workers.launchers", "spawn", "--world-size", "2", *SHORT,
                       "--crash-rank", "1", "--crash-at-step", "2", expect_returncode=1)
    assert "rank 1 raised RuntimeError: rank 1 crashed on purpose at step 2" in result.output
    assert "the other ranks were stopped" in result.output
    assert result.duration < 60


@pytest.mark.parametrize("script", ["scripts/launch_local.sh", "scripts/slurm_ddp_mnist.sbatch"])
def test_shell_scripts_parse(script):
    completed = subprocess.run(["bash", "-n", script], cwd=ROOT, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr


def test_the_shell_launcher_rejects_a_bad_process_count():
    completed = subprocess.run(["bash", "scripts/launch_local.sh", "two", "workers.ddp_mnist"],
                               cwd=ROOT, capture_output=True, text=True)
    assert completed.returncode == 2 and "usage:" in completed.stderr


@pytest.mark.parametrize(
    "launcher, options",
    [("spawn", {"--world-size", "--events", "--timeout"}),
     ("two-nodes", {"--nproc-per-node", "--events", "--timeout"})],
)
def test_each_launcher_documents_only_its_own_options(launcher, options, capsys):
    completed = cli_in_process("workers.launchers", launcher, "--help", capsys=capsys)
    assert help_options(completed) == options


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["spawn", "--world-size", "3"], "does not split evenly"),
        (["spawn", "--epochs", "0"], "must be at least 1"),
        (["two-nodes", "--nproc-per-node", "0"], "must be at least 1"),
        (["ssh"], "invalid choice: 'ssh'"),
    ],
)
def test_bad_options_are_reported_in_one_line(args, fragment, capsys):
    assert_one_line_error(cli_in_process("workers.launchers", *args, capsys=capsys), fragment)
