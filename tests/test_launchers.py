"""workers.launchers and the launch scripts beyond what their chapter runs: the shell launcher
stopping a job when a rank fails, the scripts' syntax and refusal of a bad count, a world size
of 3 under torchrun, each demo's --help, and bad input."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from helpers import ROOT, assert_one_line_error, cli_in_process, help_options, quiet_run


def test_the_shell_launcher_stops_the_others_when_a_rank_fails(tmp_path):
    program = tmp_path / "one_fails.py"
    program.write_text(
        "import os, sys, time\n"
        "print(f\"[rank {os.environ['RANK']}] started\", flush=True)\n"
        "sys.exit(3) if os.environ['RANK'] == '1' else time.sleep(60)\n")
    started = time.time()
    completed = subprocess.run(["bash", "scripts/launch_local.sh", "2", str(program)],
                               cwd=ROOT, capture_output=True, text=True, timeout=60,
                               env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    assert completed.returncode == 3, completed.stderr
    assert "a rank exited with code 3; stopping the others" in completed.stderr
    assert time.time() - started < 30  # rank 0 was killed, not waited for (it sleeps 60 s)


@pytest.mark.parametrize("script", ["scripts/launch_local.sh", "scripts/slurm_ddp_mnist.sbatch"])
def test_shell_scripts_parse(script):
    completed = subprocess.run(["bash", "-n", script], cwd=ROOT, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr


def test_the_shell_launcher_rejects_a_bad_process_count():
    completed = subprocess.run(["bash", "scripts/launch_local.sh", "two", "workers.ddp_mnist"],
                               cwd=ROOT, capture_output=True, text=True)
    assert completed.returncode == 2 and "usage:" in completed.stderr


def test_three_ranks_under_torchrun_see_the_contract():
    result = quiet_run("torch.distributed.run", "--standalone", "--nproc-per-node", "3",
                       "-m", "workers.launchers", "environments")
    seen = {e["rank"]: e["variables"] for e in result.events_named("environment")}
    assert sorted(seen) == [0, 1, 2]
    for rank, variables in seen.items():
        assert (variables["RANK"], variables["LOCAL_RANK"]) == (str(rank), str(rank))
        assert variables["WORLD_SIZE"] == variables["LOCAL_WORLD_SIZE"] == "3"


@pytest.mark.parametrize(
    "demo, options",
    [("environments", {"--nproc", "--events", "--timeout"})],
)
def test_each_demo_documents_only_its_own_options(demo, options, capsys):
    completed = cli_in_process("workers.launchers", demo, "--help", capsys=capsys)
    assert help_options(completed) == options


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["environments", "--nproc", "0"], "must be at least 1"),
        (["two-nodes"], "invalid choice: 'two-nodes'"),  # workers.multi_node's now
        (["ssh"], "invalid choice: 'ssh'"),
    ],
)
def test_bad_options_are_reported_in_one_line(args, fragment, capsys):
    assert_one_line_error(cli_in_process("workers.launchers", *args, capsys=capsys), fragment)
