"""The book's Slurm script under a real Slurm: scripts/local_slurm.sh starts a two-node
cluster on this machine (munged, slurmctld, two slurmd), and these tests submit to it a job
that fails, and a job that succeeds where the multi-node page does not already run one.
Submitting when no controller answers gets one line, and stopping the cluster leaves nothing
running. Skipped where Slurm is not installed or the tests do not run as root (CI installs
it and runs as root: see .ci/run)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from workers.runner import WorkerError

from helpers import ROOT, quiet_run

SCRIPT = "scripts/local_slurm.sh"
JOB = "scripts/slurm_ddp_mnist.sbatch"


def _why_not() -> str:
    check = subprocess.run(["bash", SCRIPT, "check"], cwd=ROOT, capture_output=True, text=True)
    return check.stdout.strip() if check.returncode else ""


pytestmark = pytest.mark.skipif(bool(_why_not()), reason=_why_not() or "ready")


@pytest.fixture
def cluster():
    """The environment for a cluster of the test's own: its own folder and ports, so it
    never meets the one a page build starts. Stopped at the end whatever happened. The
    folder is short (/tmp/slurm-XXXX): a node daemon's sockets live under it, and pytest's
    own folders are too deep for a socket's path."""
    folder = tempfile.mkdtemp(prefix="slurm-", dir="/tmp")
    env = {**os.environ, "LOCAL_SLURM_DIR": folder, "LOCAL_SLURM_PORT": "17100"}
    yield env
    subprocess.run(["bash", SCRIPT, "stop"], cwd=ROOT, env=env, capture_output=True)
    assert not _left_running(env)
    shutil.rmtree(folder, ignore_errors=True)


def test_a_folder_too_deep_for_slurms_sockets_is_refused_in_one_line(cluster):
    deep = f"{cluster['LOCAL_SLURM_DIR']}/{'d' * 60}"
    started = _sh("start", env={**cluster, "LOCAL_SLURM_DIR": deep})
    assert started.returncode == 1
    assert started.stderr.count("\n") == 1 and "108-byte limit" in started.stderr
    assert not os.path.exists(deep) and not _left_running(cluster)


def _left_running(env) -> list[str]:
    """Every process of the cluster still running: one of its daemons, or any process that
    was started with its SLURM_CONF (job steps and the tasks under them)."""
    conf = f"{env['LOCAL_SLURM_DIR']}/slurm.conf"
    left = []
    for process in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            if process.pid == os.getpid():
                continue
            mine = process.environ().get("SLURM_CONF") == conf or any(
                env["LOCAL_SLURM_DIR"] in part for part in process.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if mine:
            left.append(f"{process.pid} {' '.join(process.info['cmdline'] or [])}")
    return left


def _sh(*args, env, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", SCRIPT, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_a_failing_job_shows_its_error_and_fails(cluster):
    result = quiet_run(SCRIPT, "run", JOB, "--epochs", "0", env=cluster, events=False,
                       timeout=240, expect_returncode=1)
    # the worker's own line, from the agents of both nodes, then the job's end
    assert result.output.count("argument --epochs: must be at least 1") >= 2, result.output
    assert re.search(r"ended: FAILED, exit code [1-9]", result.lines[-1].text), result.output
    assert not _left_running(cluster)  # run started the cluster, and stopped it


def test_an_interrupted_run_leaves_nothing_running(cluster):
    """A notebook's timeout (SIGTERM to the run's group, SIGKILL 3 s later) in mid-job."""
    with pytest.raises(WorkerError, match="timed out"):
        quiet_run(SCRIPT, "run", JOB, "--epochs", "5", env=cluster, timeout=10)
    for _ in range(20):  # the killed processes are reaped
        if not _left_running(cluster):
            break
        time.sleep(0.25)
    assert not _left_running(cluster)


def test_no_controller_answers_in_one_line(cluster):
    started = _sh("start", env=cluster)
    assert started.returncode == 0, started.stderr
    assert "two nodes up" in started.stdout
    assert _sh("status", env=cluster).stdout.split().count("idle") == 2
    stopped = _sh("stop", env=cluster)
    assert "stopped" in stopped.stdout and not _left_running(cluster)
    env = {**cluster, "SLURM_CONF": f"{cluster['LOCAL_SLURM_DIR']}/slurm.conf"}
    for command in (["sbatch", "--wrap", "true"], ["bash", SCRIPT, "status"]):
        answer = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=30)
        assert answer.returncode != 0
        assert len(answer.stderr.strip().splitlines()) == 1, answer.stderr
        assert "controller" in answer.stderr


@pytest.mark.skipif("local_slurm.sh" in (ROOT / "book" / "multi_node.md").read_text(),
                    reason="the multi-node page runs this job in every build")
def test_the_book_script_runs_on_both_nodes(cluster):
    result = quiet_run(SCRIPT, "run", JOB, "--backend", "gloo", "--epochs", "1",
                       "--train-images", "400", env=cluster, timeout=180)
    assert "ended: COMPLETED, exit code 0:0" in result.lines[-1].text
    placed = {e["rank"]: (e["variables"]["SLURMD_NODENAME"], e["variables"]["GROUP_RANK"])
              for e in result.events_named("environment")}
    assert sorted(placed) == [0, 1, 2, 3]
    # two ranks on each node; the rendezvous made one of them node 0, the other node 1
    nodes = sorted(placed.values())
    assert [node for node, _ in nodes] == ["node1", "node1", "node2", "node2"]
    assert sorted({group for _, group in nodes}) == ["0", "1"]
    assert nodes[0][1] == nodes[1][1] != nodes[2][1] == nodes[3][1]
    assert any(line.startswith("rendezvous: c10d at 127.0.0.1:") for line in
               result.output.splitlines())


def test_check_says_why_in_one_line(tmp_path):
    """Without the packages (an empty PATH of commands), check says so in one line."""
    bin_dir = Path(tmp_path)
    for tool in ("bash", "dirname", "cat", "grep"):
        (bin_dir / tool).symlink_to(subprocess.check_output(["which", tool], text=True).strip())
    check = subprocess.run([str(bin_dir / "bash"), SCRIPT, "check"], cwd=ROOT,
                           env={"PATH": str(bin_dir)}, capture_output=True, text=True)
    assert check.returncode == 1
    assert check.stdout.strip().startswith("Slurm is not installed here")
