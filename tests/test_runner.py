"""The runner: timeouts kill the whole process group, interrupts leave nothing behind,
concurrent runs get their own ports, and failures surface with the worker's own message."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, is_running, quiet_run

from workers.runner import WorkerError

TESTS = str(Path(__file__).resolve().parent)
PID = re.compile(r"started \(pid (\d+)\)")


def child_pids(lines: list[str]) -> list[int]:
    return [
        int(match.group(1)) for line in lines for match in [PID.search(line)] if match
    ]


def test_timeout_kills_the_whole_process_group():
    # Two children that would work for 60 s; the run may take 6 s in all.
    with pytest.raises(WorkerError, match="timed out after 6 s") as caught:
        quiet_run(
            "workers.start_join", "join", "--processes", "2", "--step", "30", timeout=6
        )
    result = caught.value.result
    assert result.timed_out and result.returncode is None
    pids = child_pids(result.output.splitlines())
    assert len(pids) == 2, result.output  # both children had started before the kill
    time.sleep(0.5)
    assert [pid for pid in pids if is_running(pid)] == []
    assert result.duration < 6 + 5  # the timeout plus the SIGTERM grace, no more


def test_interrupt_cleans_up_every_process():
    """Ctrl-C (SIGINT) in the process that called run() must take the worker's children with it."""
    script = (
        "from workers.runner import run\n"
        "run('workers.start_join', 'join', '--processes', '2', '--step', '30', timeout=120)\n"
    )
    caller = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    seen, pids = [], []
    deadline = time.time() + 60
    while len(pids) < 2 and time.time() < deadline:
        line = caller.stdout.readline()
        if not line:
            break
        seen.append(line)
        pids = child_pids(seen)
    assert len(pids) == 2, seen
    caller.send_signal(signal.SIGINT)
    caller.wait(timeout=20)
    assert caller.returncode != 0  # the KeyboardInterrupt went on up after the clean-up
    time.sleep(0.5)
    assert [pid for pid in pids if is_running(pid)] == []


def test_two_runs_at_once_get_different_ports():
    results = {}

    def one(name):
        results[name] = quiet_run(
            "echo_env", "1.5", events=False, env={"PYTHONPATH": TESTS}
        )

    threads = [threading.Thread(target=one, args=(name,)) for name in ("a", "b")]
    begin = time.time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    a, b = results["a"], results["b"]
    assert a.port != b.port
    # each worker really was given its own port in its environment
    assert a.lines_of("main") == [f"MASTER_ADDR=127.0.0.1 MASTER_PORT={a.port}"]
    assert b.lines_of("main") == [f"MASTER_ADDR=127.0.0.1 MASTER_PORT={b.port}"]
    # they ran at the same time: together they took less than one after the other would
    wall = time.time() - begin
    assert wall < a.duration + b.duration


def test_a_failing_child_surfaces_its_message():
    with pytest.raises(WorkerError) as caught:
        quiet_run("workers.start_join", "fail")
    message = str(caught.value)
    assert "exited with code 1, expected 0" in message
    assert (
        "ValueError: rank 2 failed on purpose" in message
    )  # the child's own traceback line


def test_an_expected_failure_is_checked_exactly():
    result = quiet_run(
        "workers.start_join",
        "fail",
        expect_returncode=1,
        expect_output=r"rank 2 failed on purpose",
    )
    assert result.returncode == 1
    with pytest.raises(WorkerError, match="expected output matching"):
        quiet_run(
            "workers.start_join",
            "fail",
            expect_returncode=1,
            expect_output=r"no such message",
        )


def test_lines_are_sorted_by_rank_and_events_are_read_back():
    result = quiet_run(
        "workers.start_join", "join", "--processes", "2", "--step", "0.2"
    )
    assert result.ranks == [0, 1]
    assert result.lines_of(0)[-1] == "finished" and result.lines_of(1)[-1] == "finished"
    assert result.lines_of("main")[-1].startswith("every child has exited")
    assert {event["rank"] for event in result.events} == {"main", 0, 1}
    assert [event["t"] for event in result.events] == sorted(
        event["t"] for event in result.events
    )
