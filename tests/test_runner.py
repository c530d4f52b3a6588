"""The runner and launch(): timeouts kill the whole process group, Ctrl-C at any moment
stops a run and leaves nothing behind, concurrent runs get their own ports, and failures
surface with the worker's own message."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest
from workers.runner import WorkerError

from helpers import ROOT, is_running, processes_marked, quiet_run

TESTS = str(Path(__file__).resolve().parent)
PID = re.compile(r"started \(pid (\d+)\)")

# The process a reader runs a chapter in: a notebook kernel or a terminal, where Ctrl-C raises
# KeyboardInterrupt. Its handler is set explicitly because a process started in the background
# by a non-interactive shell (as CI may be) inherits SIGINT *ignored*, and then Python installs
# no handler at all: Ctrl-C would do nothing, which is not the case under test.
CALLER = """
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
from workers.runner import run
print("ready", flush=True)
run("workers.start_join", "join", "--processes", "2", "--step", "30", timeout=120, stream=False)
"""


def child_pids(lines: list[str]) -> list[int]:
    return [int(match.group(1)) for line in lines for match in [PID.search(line)] if match]


def test_timeout_kills_the_whole_process_group():
    # Two children that would work for 60 s; the run may take 6 s in all. Forked children
    # start at once, so both are running at the timeout even on a busy machine.
    with pytest.raises(WorkerError, match="timed out after 6 s") as caught:
        quiet_run("workers.start_join", "join", "--processes", "2", "--step", "30",
                  "--start-method", "fork", timeout=6)
    result = caught.value.result
    assert result.timed_out and result.returncode is None
    pids = child_pids(result.output.splitlines())
    assert len(pids) == 2, result.output  # both children had started before the kill
    time.sleep(0.5)
    assert [pid for pid in pids if is_running(pid)] == []
    assert result.duration < 6 + 5  # the timeout plus the SIGTERM grace, no more


@pytest.mark.slow
def test_ctrl_c_at_any_moment_stops_the_run_and_leaves_nothing():
    """20 interrupts in a row, spread over a run's life, while two other runs load both cores.

    The first ones land while the caller starts the worker (Popen), later ones while the worker
    starts its children, and while they work; every other time Ctrl-C is
    pressed twice, the second landing while the run is being cleaned up. Every time the caller must
    end within seconds, and no process it started may survive: every descendant inherits a
    marker in its environment, and none may be found alive afterwards.
    """
    busy, stop = [], threading.Event()

    def keep_busy():  # ranks importing torch, then adding and sending 8 MB tensors
        while not stop.is_set():
            busy.append(quiet_run("workers.collectives", "ring", "--world-size", "2",
                                  "--numel", "2000000", "--trials", "10", timeout=60))

    loads = [threading.Thread(target=keep_busy) for _ in range(2)]
    for load in loads:
        load.start()
    outcomes = []
    try:
        for interruption in range(20):
            outcomes.append(interrupt_once(0.1 * interruption, twice=interruption % 2 == 1))
    finally:
        stop.set()
        for load in loads:
            load.join(timeout=120)
    assert len(busy) >= 2  # the machine was busy with other runs the whole time
    assert all(ended < 10 for ended, _ in outcomes), outcomes
    # the spread reached every stage: nothing started yet, and children running
    assert min(alive for _, alive in outcomes) <= 2  # the caller and a worker still starting
    assert sum(alive >= 4 for _, alive in outcomes) >= 3  # caller, worker and both children


def interrupt_once(delay: float, twice: bool) -> tuple[float, int]:
    """Start a run in a fresh caller, Ctrl-C it after ``delay`` s (``twice``: again 0.2 s later);
    return the seconds it took to end and how many of its processes were alive at the Ctrl-C."""
    marker = f"BOOK_INTERRUPT_TEST={uuid.uuid4().hex}"
    name, value = marker.split("=")
    scratch = tempfile.mkdtemp(prefix="interrupt-")  # the run's temporary files go here
    caller = subprocess.Popen(
        [sys.executable, "-c", CALLER], cwd=ROOT,
        env={**os.environ, name: value, "TMPDIR": scratch}, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert caller.stdout.readline().strip() == "ready"
        time.sleep(delay)
        alive = len(processes_marked(marker))
        signalled = time.time()
        caller.send_signal(signal.SIGINT)
        if twice:
            time.sleep(0.2)
            if caller.poll() is None:
                caller.send_signal(signal.SIGINT)
        caller.wait(timeout=15)
        ended = time.time() - signalled
        assert caller.returncode != 0  # the KeyboardInterrupt went on up after the clean-up
        deadline = time.time() + 2
        while processes_marked(marker) and time.time() < deadline:  # reaping takes a moment
            time.sleep(0.1)
        left = processes_marked(marker)
        assert left == [], f"after a Ctrl-C at {delay:.2f} s: {[p.cmdline() for p in left]}"
        assert os.listdir(scratch) == [], f"after a Ctrl-C at {delay:.2f} s: files left"
        return ended, alive
    finally:
        for process in processes_marked(marker):  # the test failed: leave nothing behind
            process.kill()
        shutil.rmtree(scratch, ignore_errors=True)


def test_two_runs_at_once_get_different_ports():
    results = {}

    def one(name):
        results[name] = quiet_run("echo_env", "1.5", events=False, env={"PYTHONPATH": TESTS})

    threads = [threading.Thread(target=one, args=(name,)) for name in ("a", "b")]
    begin = time.time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    a, b = (results[name].lines_of("main") for name in ("a", "b"))
    assert len(a) == len(b) == 1 and a[0].startswith("MASTER_ADDR=127.0.0.1 MASTER_PORT=")
    assert a != b  # each worker was given its own port in its environment
    # they ran at the same time: together they took less than one after the other would
    wall = time.time() - begin
    assert wall < results["a"].duration + results["b"].duration


def test_a_failing_child_surfaces_its_message():
    with pytest.raises(WorkerError) as caught:
        quiet_run("workers.start_join", "fail")
    message = str(caught.value)
    assert "exited with code 1, expected 0" in message
    assert "ValueError: rank 2 failed on purpose" in message  # the child's own traceback line


def test_a_child_is_not_forced_into_colour(monkeypatch):
    # a Jupyter kernel sets FORCE_COLOR; Python 3.13 then colours a traceback down a pipe
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("CLICOLOR_FORCE", "1")
    result = quiet_run("echo_env", "0", events=False, env={"PYTHONPATH": TESTS})
    assert "FORCE_COLOR=None" in result.output
    asked = quiet_run("echo_env", "0", events=False,
                      env={"PYTHONPATH": TESTS, "FORCE_COLOR": "1"})
    assert "FORCE_COLOR=1" in asked.output  # a run that asks for it keeps it


def test_a_build_inside_a_launched_job_does_not_hand_its_rank_on(monkeypatch):
    # a Kubeflow pod or a shell torchrun opened sets RANK: the book's runs must not inherit it
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    result = quiet_run("echo_env", "0", events=False, env={"PYTHONPATH": TESTS})
    assert "RANK=None TORCHELASTIC_RUN_ID=None" in result.output
    asked = quiet_run("echo_env", "0", events=False, env={"PYTHONPATH": TESTS, "RANK": "1"})
    assert "RANK=1" in asked.output  # a run that asks for one keeps it


def test_a_child_of_the_kernel_writes_without_forced_colour(monkeypatch):
    from workers.runner import capture_child_output

    monkeypatch.setenv("FORCE_COLOR", "1")
    with capture_child_output() as said:
        subprocess.run([sys.executable, "-c", "import os, sys; "
                        "print(os.environ.get('FORCE_COLOR')); sys.exit('a child failed')"])
    assert said.text.splitlines() == ["None", "a child failed"]
    assert os.environ["FORCE_COLOR"] == "1"  # the kernel's own setting is back


def test_an_expected_failure_is_checked_exactly():
    result = quiet_run("workers.start_join", "fail", expect_returncode=1,
                       expect_output=r"rank 2 failed on purpose")
    assert result.returncode == 1
    with pytest.raises(WorkerError, match="expected output matching"):
        quiet_run("workers.start_join", "fail", expect_returncode=1,
                  expect_output=r"no such message")


def test_lines_are_sorted_by_rank_and_events_are_read_back():
    result = quiet_run("workers.start_join", "join", "--processes", "2", "--step", "0.2")
    assert result.ranks == [0, 1]
    assert result.lines_of(0)[-1] == "finished" and result.lines_of(1)[-1] == "finished"
    assert result.lines_of("main")[-1].startswith("every child has exited")
    assert {event["rank"] for event in result.events} == {"main", 0, 1}
    times = [event["t"] for event in result.events]
    assert times == sorted(times)


def test_each_run_is_logged_with_its_time_when_asked(tmp_path, monkeypatch):
    log = tmp_path / "runs.jsonl"
    monkeypatch.setenv("BOOK_RUN_LOG", str(log))
    joined = quiet_run("workers.start_join", "join", "--processes", "2", "--step", "0.2")
    with pytest.raises(WorkerError):
        quiet_run("workers.start_join", "fail")
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [entry["command"][:3] for entry in logged] == [
        ["-m", "workers.start_join", "join"], ["-m", "workers.start_join", "fail"]]
    assert logged[0]["seconds"] == round(joined.duration, 2) > 0.2
    assert logged[1]["seconds"] > 0


@pytest.mark.parametrize("moment", ["while its ranks start", "while they train"])
def test_ctrl_c_to_a_worker_alone_stops_its_ranks(moment):
    """SIGINT to the worker's main process only (as ``timeout -s INT`` or ``kill -INT`` send
    it): launch() stops every rank, says so in one line and exits 130. A rank stuck in C++
    (a collective, a rendezvous) cannot run Python's SIGINT handler, so only this saves it."""
    marker = f"BOOK_INTERRUPT_TEST={uuid.uuid4().hex}"
    name, value = marker.split("=")
    worker = subprocess.Popen(
        [sys.executable, "-m", "workers.ddp_mnist", "ddp", "--epochs", "100",
         "--train-images", "400"],
        cwd=ROOT, env={**os.environ, name: value}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # not inherited ignored
    )
    wanted = "[main] 2 ranks" if moment == "while its ranks start" else "[rank 0] epoch 0"
    try:
        lines = []
        for line in worker.stdout:
            lines.append(line.rstrip())
            if line.startswith(wanted):
                break
        assert lines and lines[-1].startswith(wanted), lines
        deadline = time.time() + 30
        while not a_rank_of(marker) and time.time() < deadline:  # launch() is starting
            time.sleep(0.05)  # the ranks: the line above came just before it
        assert a_rank_of(marker), "no rank started within 30 s"
        worker.send_signal(signal.SIGINT)
        rest, _ = worker.communicate(timeout=30)
        assert worker.returncode == 130, rest
        assert rest.splitlines()[-1] == "[main] interrupted: every rank was stopped", rest
        assert "Traceback" not in rest
        assert processes_marked(marker) == []
    finally:
        for process in processes_marked(marker):
            process.kill()


def a_rank_of(marker: str) -> bool:
    """Whether a rank of the marked worker exists: a child of its forkserver. (The forkserver
    itself proves nothing: ``python -m workers.<chapter>`` starts it before launch() begins.)"""
    for process in processes_marked(marker):
        try:
            parent = process.parent()
            if parent is not None and "forkserver" in " ".join(parent.cmdline()):
                return True
        except psutil.Error:  # it ended meanwhile
            pass
    return False


def test_a_chapter_starts_its_forkserver_early_and_leaves_nothing_when_refused(tmp_path):
    """``python -m workers.<chapter>`` starts the forkserver before the chapter imports
    torch (workers/__init__.py); a demo that exits at once, here on bad input, stops it,
    even while the forkserver still imports what the chapter's ranks need (torch._dynamo)."""
    marker = f"BOOK_EARLY_TEST={uuid.uuid4().hex}"
    name, value = marker.split("=")
    output = tmp_path / "output.txt"  # a file, not a pipe: the server would hold a pipe open
    with open(output, "w") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "workers.ddp_internals", "options", "--world-size", "0"],
            cwd=ROOT, env={**os.environ, name: value}, stdout=sink, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.time() + 10
        while not any("forkserver" in " ".join(p.cmdline()) for p in processes_marked(marker)):
            assert worker.poll() is None, "the worker exited before any forkserver appeared"
            assert time.time() < deadline, "no forkserver within 10 s"
            time.sleep(0.02)
        assert worker.wait(timeout=30) == 2
        # multiprocessing's resource tracker leaves a moment after the worker, by itself; the
        # forkserver, unless stopped, would go on importing for a second or two more
        deadline = time.time() + 1
        while processes_marked(marker) and time.time() < deadline:
            time.sleep(0.05)
        assert [" ".join(p.cmdline()) for p in processes_marked(marker)] == []
        assert "must be at least 1" in output.read_text()
    finally:
        worker.kill()
        for process in processes_marked(marker):
            process.kill()
