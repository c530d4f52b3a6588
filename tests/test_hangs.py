"""workers.hangs: the diagnosis names the right rank, collective and line for every kind of
hang at 2, 3 and 4 ranks (a fast subset here, ten runs of each in test_hangs_ten_runs.py); it works
from outside on the worker's own job and on a torchrun agent; nothing the chapter starts
listens beyond loopback, and nothing is left afterwards; a refused ptrace, a missing py-spy
and bad input each get one line."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest
from workers import hangs
from workers.hangs import Entry, Frame, Process, Thread, first_disagreement, read_hang
from workers.ranks import free_port

from helpers import (
    ROOT,
    assert_one_line_error,
    cli_in_process,
    help_options,
    processes_marked,
    quiet_run,
)


def line_of(function, text: str, occurrence: int = 1) -> str:
    """``workers/hangs.py:N``: the line of ``function`` holding ``text`` (its n-th)."""
    lines, first = inspect.getsourcelines(function)
    found = [first + i for i, line in enumerate(lines) if text in line]
    return f"workers/hangs.py:{found[occurrence - 1]}"


def expected(kind: str) -> dict:
    """What the diagnosis must say of each kind: what it found, the collective the other
    ranks wait in and where they called it, and the culprit's collective and line."""
    return {
        "skip": dict(found="out of step", collective="all_reduce", culprit_op="barrier",
                     waiting_line=line_of(hangs.skip_collective, "dist.all_reduce(grad)"),
                     culprit_line=line_of(hangs.skip_collective, "dist.barrier()")),
        "order": dict(found="out of step", collective="all_reduce", culprit_op="broadcast",
                      waiting_line=line_of(hangs.different_order, "dist.all_reduce(grad)", 2),
                      culprit_line=line_of(hangs.different_order, "dist.broadcast(stop")),
        "stuck": dict(found="behind", collective="all_reduce", culprit_op=None,
                      waiting_line=line_of(hangs.stuck_in_python, "dist.all_reduce(batch)"),
                      culprit_line=line_of(hangs.stuck_in_python, "batches.get()")),
        "dead": dict(found="behind", collective="barrier", culprit_op=None,
                     waiting_line=line_of(hangs.died_unnoticed, "dist.barrier()"),
                     culprit_line=line_of(hangs.prefetch, "batches.put(")),
        "unwaited": dict(found="out of step", collective="barrier", culprit_op="all_reduce",
                         waiting_line=line_of(hangs.unwaited_work, "dist.barrier()"),
                         culprit_line=line_of(hangs.unwaited_work, "async_op=True")),
    }[kind]


def check_verdict(verdict: dict, kind: str, world_size: int, culprit: int) -> None:
    want = expected(kind)
    context = f"{kind} at {world_size} ranks, culprit {culprit}: {verdict['text']}"
    assert verdict["culprits"] == [culprit], context
    assert verdict["waiting"] == [r for r in range(world_size) if r != culprit], context
    for key in ("found", "collective", "culprit_op"):
        assert verdict[key] == want[key], context
    for key in ("waiting_line", "culprit_line"):
        assert verdict[key] and verdict[key].endswith(want[key]), context
    assert f"rank {culprit}" in verdict["text"] and want["culprit_line"] in verdict["text"]


def diagnose_every_kind(world_size: int, culprit: int, **options) -> list[dict]:
    """One run of ``every``: the verdict of each kind, in the order of KINDS."""
    result = quiet_run("workers.hangs", "every", "--world-size", str(world_size),
                       "--culprit", str(culprit), "--timeout", "40", timeout=150,
                       expect_output=f"{len(hangs.KINDS)} of {len(hangs.KINDS)} hangs "
                                     f"diagnosed", **options)
    verdicts = [event["verdict"] for event in result.events_named("diagnosis")]
    assert len(verdicts) == len(hangs.KINDS), result.tail()
    return verdicts


# At two ranks a mismatch is a tie, and the diagnosis takes rank 0's call as the rule: so
# there the culprit is rank 1. With more ranks, any rank, rank 0 included.
@pytest.mark.parametrize("world_size, culprit", [(2, 1), (3, 2), (4, 0)])
def test_every_kind_is_diagnosed_with_its_rank_collective_and_line(world_size, culprit):
    verdicts = diagnose_every_kind(world_size, culprit)
    for kind, verdict in zip(hangs.KINDS, verdicts):
        check_verdict(verdict, kind, world_size, culprit)


@pytest.mark.parametrize("kind, world_size, culprit", [
    ("skip", 2, 1), ("order", 4, 1), ("stuck", 3, 0), ("dead", 4, 3), ("unwaited", 3, 1)])
def test_each_kind_alone_is_diagnosed_and_stopped(kind, world_size, culprit):
    result = quiet_run("workers.hangs", kind, "--diagnose", "--world-size", str(world_size),
                       "--culprit", str(culprit), "--timeout", "40", timeout=120,
                       expect_output="every rank was stopped")
    [diagnosis] = result.events_named("diagnosis")
    check_verdict(diagnosis["verdict"], kind, world_size, culprit)


def start(command: list[str], **env) -> subprocess.Popen:
    """A job a reader starts in a first terminal: its own session, output kept."""
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**os.environ, **env})


def diagnose_from_outside(pid: int, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workers.hangs", "diagnose", str(pid),
                           *extra], cwd=ROOT, capture_output=True, text=True, timeout=120)


def wait_for_line(job: subprocess.Popen, text: str, seconds: float = 60) -> None:
    """Read the job's output until a line holds ``text`` (in a thread: never blocks)."""
    seen = threading.Event()

    def read() -> None:
        for line in job.stdout:
            if text in line:
                seen.set()

    threading.Thread(target=read, daemon=True).start()
    assert seen.wait(seconds), f"no line with {text!r} within {seconds} s"


def stop(job: subprocess.Popen) -> None:
    try:
        os.killpg(job.pid, 9)
    except ProcessLookupError:
        pass
    job.wait(timeout=10)


def test_diagnose_stops_a_worker_job_from_outside():
    job = start([sys.executable, "-m", "workers.hangs", "stuck", "--world-size", "3",
                 "--timeout", "60"])
    try:
        wait_for_line(job, "From a second terminal")
        tree = [job.pid, *(p.pid for p in psutil.Process(job.pid).children(recursive=True))]
        diagnosis = diagnose_from_outside(job.pid)
        assert diagnosis.returncode == 0, diagnosis.stdout + diagnosis.stderr
        assert "verdict: rank 2 is behind" in diagnosis.stdout, diagnosis.stdout
        assert expected("stuck")["culprit_line"] in diagnosis.stdout
        assert "processes, 0 left" in diagnosis.stdout, diagnosis.stdout
        job.wait(timeout=10)
        assert not [pid for pid in tree if psutil.pid_exists(pid)
                    and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    finally:
        stop(job)


def test_diagnose_a_torchrun_agent():
    job = start([sys.executable, "-m", "torch.distributed.run", "--standalone",
                 "--nproc-per-node", "3", "-m", "workers.hangs", "dead", "--culprit", "1",
                 "--timeout", "60"])
    try:
        deadline = time.time() + 60
        while len(psutil.Process(job.pid).children()) < 3 and time.time() < deadline:
            time.sleep(0.5)
        diagnosis = diagnose_from_outside(job.pid)
        assert diagnosis.returncode == 0, diagnosis.stdout + diagnosis.stderr
        assert "verdict: rank 1 is behind: ranks 0 and 2 wait in barrier" in diagnosis.stdout
        assert expected("dead")["culprit_line"] in diagnosis.stdout, diagnosis.stdout
        assert job.wait(timeout=15) is not None
    finally:
        stop(job)


def listening_beyond_loopback(marker: str) -> set[str]:
    found = set()
    for process in processes_marked(marker):
        try:
            for connection in process.net_connections(kind="inet"):
                if connection.status == psutil.CONN_LISTEN and \
                        connection.laddr.ip not in ("127.0.0.1", "::1"):
                    found.add(f"{process.pid} {' '.join(process.cmdline())[:80]} "
                              f"{connection.laddr.ip}:{connection.laddr.port}")
        except (psutil.Error, OSError):
            pass
    return found


def test_the_chapters_jobs_listen_on_loopback_only_and_leave_nothing():
    """What the page runs: every kind, and the plain program looked at from outside."""
    marker = f"HANGS_TEST={uuid.uuid4().hex}"
    found: set[str] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            found.update(listening_beyond_loopback(marker))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        env = dict([marker.split("=")])
        quiet_run("workers.hangs", "every", "--world-size", "2", "--debug-server",
                  timeout=150, env=env)
        quiet_run("workers.hangs", "second-terminal", timeout=150, env=env,
                  expect_output="verdict: rank 1 is behind")
    finally:
        done.set()
        watcher.join()
    assert found == set()
    assert processes_marked(marker) == []
    assert dead_ranks_error_files() == []  # the dead kind's culprit raised: its file is gone


def dead_ranks_error_files() -> list:
    """The files in which the dead kind's culprit left its exception for a launcher."""
    return [path for path in Path(tempfile.gettempdir()).glob("pytorch-errorfile-*.pickle")
            if b"the checkpoint was not saved" in path.read_bytes()]


def refusing_py_spy(tmp_path: Path) -> str:
    """A py-spy the kernel would refuse: it answers as py-spy 0.4.3 does without ptrace."""
    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\necho \"Permission Denied: Try running again with elevated "
                    "permissions by going 'sudo env \\\"PATH=\\$PATH\\\" !!'\" >&2\nexit 1\n")
    fake.chmod(0o755)
    return str(fake)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"),
                    reason="needs root, to run py-spy as another user")
def test_a_refused_ptrace_leaves_the_recorders_or_one_line(tmp_path, monkeypatch):
    """The real py-spy, run as nobody against root's jobs: the kernel refuses it. The book's
    ranks serve their recorders, which the diagnosis reads alone; the plain program serves
    none, and the diagnosis says in one line what to do."""
    wrapper = tmp_path / "py-spy"
    wrapper.write_text(f"#!/bin/sh\nexec runuser -u nobody -- {hangs.py_spy()} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PY_SPY", str(wrapper))
    job = start([sys.executable, "-m", "workers.hangs", "skip", "--world-size", "2",
                 "--timeout", "60"])
    try:
        wait_for_line(job, "From a second terminal")
        read = diagnose_from_outside(job.pid)
        assert read.returncode == 0, read
        assert "py-spy was refused (ptrace): the diagnosis reads the flight recorders " \
               "alone" in read.stdout
        assert "verdict: rank 1 is out of step" in read.stdout, read.stdout
    finally:
        stop(job)
    program = start([sys.executable, "programs/hang.py"], MASTER_PORT=str(free_port()))
    try:
        wait_for_line(program, "[rank 1] pid")
        refused = diagnose_from_outside(program.pid, "--timeout", "3")
        assert_one_line_error(refused, "ptrace", "kernel.yama.ptrace_scope", "sudo",
                              "ancestors", "at 3 nothing helps")
    finally:
        stop(program)


def test_without_py_spy_every_kind_is_diagnosed_from_the_recorders(tmp_path):
    """py-spy refused (Yama's ptrace_scope, another user) or unable (a free-threaded
    Python): each rank is known by its recorder, and the recorders name every culprit."""
    result = quiet_run("workers.hangs", "every", "--timeout", "60", timeout=240,
                       env={"PY_SPY": refusing_py_spy(tmp_path)},
                       expect_output=f"{len(hangs.KINDS)} of {len(hangs.KINDS)} hangs "
                                     f"diagnosed")
    diagnoses = result.events_named("diagnosis")
    assert [d["unread"] for d in diagnoses] == [["refused"]] * len(hangs.KINDS)
    for kind, diagnosis in zip(hangs.KINDS, diagnoses):
        verdict = diagnosis["verdict"]
        assert verdict["culprits"] == [2] and verdict["waiting"] == [0, 1], (kind, verdict)
        assert verdict["found"] == expected(kind)["found"], (kind, verdict)
        assert verdict["waiting_line"].endswith(expected(kind)["waiting_line"]), verdict
    assert "py-spy was refused (ptrace): the diagnosis reads the flight recorders alone" \
        in result.output


def test_the_plain_program_without_py_spy_shows_faulthandler_and_is_stopped(tmp_path):
    result = quiet_run("workers.hangs", "second-terminal", "--timeout", "150", timeout=240,
                       env={"PY_SPY": refusing_py_spy(tmp_path)})
    [looked] = result.events_named("looked")
    assert looked["stacks"] == "refused"
    assert "Permission Denied" in result.output
    handled = [line for line in result.output.splitlines() if "hang.py\", line" in line]
    assert len(handled) == 2, result.tail()
    assert "serves no flight recorder to read instead" in result.output
    assert re.search(r"stopped the job: \d+ processes, 0 left", result.output), result.tail()


def test_a_free_threaded_python_is_not_given_to_py_spy(monkeypatch):
    """3.14t is not at hand: its property, faked. Neither the build's flag nor the GIL's
    state may let py-spy near it, and the diagnosis then reads the recorders alone."""
    monkeypatch.setenv("PY_SPY", "/nonexistent/py-spy")  # reached, it would raise
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    assert hangs.free_threaded()
    assert hangs.stacks_unreadable(os.getpid()) == "free-threaded"
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: True, raising=False)
    assert not hangs.free_threaded()
    monkeypatch.setattr(hangs.sysconfig, "get_config_var",
                        lambda name: 1 if name == "Py_GIL_DISABLED" else None)
    assert hangs.free_threaded()
    unread: set = set()
    assert hangs.rank_stacks(os.getpid(), unread) == {} and unread <= {"free-threaded"}


def test_each_rank_lets_its_user_trace_it(monkeypatch):
    """Yama is not at hand (this machine has none, and a prctl value cannot be read back):
    the call is checked as made, with Yama's constants from <linux/prctl.h>."""
    import ctypes

    calls = []

    class Libc:
        def prctl(self, *args):
            calls.append([getattr(a, "value", a) for a in args])
            return 0

    monkeypatch.setattr(ctypes, "CDLL", lambda *a, **k: Libc())
    assert hangs.allow_tracers()
    assert calls == [[0x59616D61, 2**64 - 1, 0, 0, 0]]  # PR_SET_PTRACER, PR_SET_PTRACER_ANY
    assert "allow_tracers()" in inspect.getsource(hangs.rank_main)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert not hangs.allow_tracers() and len(calls) == 1


def test_the_real_prctl_is_harmless_where_yama_is_absent():
    """Without Yama the kernel refuses the option (EINVAL) and nothing else happens; with
    it, the kernel takes it. Either way the caller goes on."""
    took = hangs.allow_tracers()
    assert took == Path("/proc/sys/kernel/yama/ptrace_scope").exists()


def test_a_missing_py_spy_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("PY_SPY", "/nonexistent/py-spy")
    job = start([sys.executable, "-m", "workers.hangs", "skip", "--world-size", "2",
                 "--timeout", "60"])
    try:
        wait_for_line(job, "From a second terminal")
        completed = cli_in_process("workers.hangs", "diagnose", str(job.pid), capsys=capsys)
        assert_one_line_error(completed, "pip install py-spy==0.4.3")
    finally:
        stop(job)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["diagnose", "999999999"], "no process 999999999"),
        (["diagnose", "PID"], "PID must be a process id"),
        (["skip", "--culprit", "3"], "--culprit must be a rank of the job, 0 to 2"),
        (["order", "--world-size", "1"], "at least 2"),
        (["every", "--diagnose"], "unrecognized arguments: --diagnose"),
        (["wedged"], "invalid choice: 'wedged'"),
    ],
)
def test_bad_input_gets_one_line(args, fragment, capsys):
    assert_one_line_error(cli_in_process("workers.hangs", *args, capsys=capsys), fragment)


def test_each_command_documents_its_options(capsys):
    kind = help_options(cli_in_process("workers.hangs", "skip", "--help", capsys=capsys))
    assert kind == {"--world-size", "--culprit", "--diagnose", "--save-dumps",
                    "--debug-server", "--events", "--timeout"}
    diagnose = help_options(cli_in_process("workers.hangs", "diagnose", "--help",
                                           capsys=capsys))
    assert diagnose == {"--no-stop", "--save-dumps", "--debug-server", "--events",
                        "--timeout"}


# --- the verdict, on recorders and stacks made by hand --------------------------------------

HERE = "/home/reader/train.py"


def entry(seq: int, op: str, line: int, retired: bool = True, group: str = "0") -> Entry:
    frames = [Frame(op, "/venv/lib/python3.11/site-packages/torch/distributed/"
                        "distributed_c10d.py", 4000), Frame("train", HERE, line)]
    return Entry(seq, group, op, [[4]], "scheduled", retired, frames)


def process(rank: int, line: int, op: str | None) -> Process:
    frames = [Frame("train", HERE, line), Frame("<module>", HERE, 99)]
    if op:
        frames.insert(0, Frame(op, "/venv/lib/python3.11/site-packages/torch/distributed/"
                                   "distributed_c10d.py", 4000))
    return Process(1000 + rank, rank, [Thread("MainThread", frames)])


def test_a_full_ring_buffer_is_compared_where_every_rank_still_has_entries():
    # rank 0 kept #3-#6, rank 1 #5-#6 and rank 2 #4-#5: only #5 and #6 can be compared
    recorders = {0: [entry(s, "all_reduce", 10) for s in range(3, 7)],
                 1: [entry(s, "all_reduce", 10) for s in range(5, 7)],
                 2: [entry(s, "all_reduce", 10) for s in range(4, 6)]}
    seq, here = first_disagreement(recorders)
    assert seq == 6 and here[2] is None
    processes = {0: process(0, 10, "all_reduce"), 1: process(1, 10, "all_reduce"),
                 2: process(2, 12, None)}
    verdict = read_hang(processes, recorders)
    assert (verdict.found, verdict.culprits, verdict.collective) == ("behind", [2],
                                                                      "all_reduce")
    assert verdict.culprit_line == f"{HERE}:12"


@pytest.mark.parametrize("start", [1, 3])
def test_calls_are_counted_only_while_every_recorder_holds_its_first(start):
    """Rank 2 skipped one all_reduce and waits in the barrier: the verdict counts each
    rank's all_reduce calls, but only where the recorders still start at #1 (a full ring
    buffer keeps the last entries, and a count of those is no count of the calls)."""
    recorders = {rank: [entry(s, "all_reduce", 10) for s in range(start, 6)]
                 for rank in (0, 1)}
    recorders[2] = [entry(s, "all_reduce", 10) for s in range(start, 5)] + [
        entry(5, "barrier", 12, retired=False)]
    processes = {0: process(0, 10, "all_reduce"), 1: process(1, 10, "all_reduce"),
                 2: process(2, 12, "barrier")}
    verdict = read_hang(processes, recorders)
    assert (verdict.found, verdict.culprits) == ("out of step", [2])
    counted = "rank 2 called all_reduce 4 times, ranks 0 and 1 5 times"
    assert (counted in verdict.text) == (start == 1), verdict.text
    assert bool(re.search(r"\d times", verdict.text)) == (start == 1), verdict.text


def test_two_ranks_behind_and_a_tie():
    recorders = {r: [entry(1, "all_reduce", 10)] for r in range(4)}
    for r in (0, 1):
        recorders[r].append(entry(2, "barrier", 11, retired=False))
    verdict = read_hang({r: process(r, 11 if r < 2 else 20, "barrier" if r < 2 else None)
                         for r in range(4)}, recorders)
    assert verdict.culprits == [2, 3] and "ranks 2 and 3 are behind" in verdict.text
    tie = {0: [entry(1, "all_reduce", 10, False)], 1: [entry(1, "broadcast", 12, False)]}
    verdict = read_hang({0: process(0, 10, "all_reduce"), 1: process(1, 12, "broadcast")},
                        tie)
    assert verdict.culprits == [1] and "rank 0's call is taken as the rule" in verdict.text
    # three calls at five ranks, two, two and one: rank 0 alone, so rank 1's call rules
    ops = {0: "gather", 1: "broadcast", 2: "all_reduce", 3: "broadcast", 4: "all_reduce"}
    three = {r: [entry(1, op, 10 + r, False)] for r, op in ops.items()}
    verdict = read_hang({r: process(r, 10 + r, op) for r, op in ops.items()}, three)
    assert verdict.culprits == [0, 2, 4]
    assert "2 calls tie, 2 ranks each: the call of rank 1, the lowest" in verdict.text
    assert "rank 0 called gather" in verdict.text and "rank 2 called all_reduce" in verdict.text
    # three calls at three ranks, one each: ranks 1 and 2 out of step, each its own way
    ops = {0: "all_reduce", 1: "broadcast", 2: "barrier"}
    three = {r: [entry(1, op, 10 + r, False)] for r, op in ops.items()}
    verdict = read_hang({r: process(r, 10 + r, op) for r, op in ops.items()}, three)
    assert verdict.culprits == [1, 2] and "3 calls tie, 1 rank each" in verdict.text
    assert "rank 1 called broadcast" in verdict.text and "rank 2 called barrier" in verdict.text
    assert "as many ranks each way" not in verdict.text


def test_a_scatter_whose_source_passed_more_tensors_is_no_disagreement():
    recorders = {r: [entry(1, "scatter", 10), entry(2, "all_reduce", 11, False)]
                 for r in range(3)}
    recorders[0][0].sizes = [[4], [4], [4]]  # the source passes the list it hands out
    recorders[2].pop()  # rank 2 skipped the all_reduce
    seq, here = first_disagreement(recorders)
    assert seq == 2 and here[2] is None


def test_the_same_collective_with_other_sizes_names_the_minority_by_its_sizes():
    """One rank all-reduces a tensor of another shape: the ops agree, the sizes do not."""
    recorders = {r: [entry(1, "all_reduce", 10, retired=False)] for r in range(3)}
    recorders[2][0].sizes = [[8]]
    verdict = read_hang({r: process(r, 10, "all_reduce") for r in range(3)}, recorders)
    assert (verdict.found, verdict.culprits, verdict.waiting) == ("out of step", [2], [0, 1])
    assert "is all_reduce of sizes [[8]]" in verdict.text
    assert "called all_reduce of sizes [[4]]" in verdict.text


def test_a_collective_every_rank_finished_with_other_sizes_is_no_disagreement():
    """An all_to_all_single with uneven splits, finished on every rank, then an all_reduce
    rank 2 never calls: rank 2 is behind at #2, not out of step at #1."""
    recorders = {r: [entry(1, "all_to_all", 10)] for r in range(3)}
    for rank, size in enumerate((3, 6, 9)):
        recorders[rank][0].sizes = [[size]]
    for rank in (0, 1):
        recorders[rank].append(entry(2, "all_reduce", 11, retired=False))
    processes = {0: process(0, 11, "all_reduce"), 1: process(1, 11, "all_reduce"),
                 2: process(2, 12, None)}
    verdict = read_hang(processes, recorders)
    assert (verdict.found, verdict.culprits, verdict.seq) == ("behind", [2], 2), verdict.text
    # the same sizes apart while a rank still waits in it: out of step, as before
    recorders[2][0].retired = False
    assert first_disagreement(recorders)[0] == 1


def test_without_recorders_the_stacks_still_find_the_rank_outside_the_collectives():
    processes = {0: process(0, 10, "all_reduce"), 1: process(1, 20, None)}
    verdict = read_hang(processes, {0: None, 1: None})
    assert verdict.found == "behind" and verdict.culprits == [1]
    assert "from the stacks alone" in verdict.text
    every = read_hang({0: process(0, 10, "all_reduce"), 1: process(1, 10, "all_reduce")},
                      {0: None, 1: None})
    assert every.found == "no recorder" and every.culprits == []
    # every recorder read, and they agree: the stacks decide, and say why
    agree = {r: [entry(1, "all_reduce", 10)] for r in range(2)}
    verdict = read_hang(processes, agree)
    assert verdict.found == "behind" and verdict.culprits == [1]
    assert "agree on the default group's collectives" in verdict.text
    assert "no flight recorder served" not in verdict.text
    every = read_hang({0: process(0, 10, "all_reduce"), 1: process(1, 10, "all_reduce")},
                      agree)
    assert every.found == "recorders agree" and "without the flight" not in every.text
    # every recorder read and empty (an nccl job's, read as gloo's): no claim of agreement
    empty = read_hang({0: process(0, 10, "all_reduce"), 1: process(1, 10, "all_reduce")},
                      {0: [], 1: []})
    assert empty.found == "recorders empty"
    assert "are empty: no rank recorded a collective" in empty.text
    assert "agree" not in empty.text


def test_a_gloo_dump_is_mended_for_fr_trace():
    dump = {"pg_config": {"": {"name": "", "desc": "", "ranks": "[0, 1]"}},
            "entries": [{"process_group": ("0", "default_pg")}]}
    mended = hangs.mend_gloo_dump(dump)
    assert mended["pg_config"] == {"0": {"name": "0", "desc": "default_pg",
                                         "ranks": "[0, 1]"}}
    assert "" in dump["pg_config"]  # the dump itself is left as it was


def test_the_main_thread_is_found_by_its_kernel_id_when_py_spy_reads_no_names():
    """py-spy 0.4.3 reads no thread names on recent CPython 3.14: the main thread's kernel
    id is the pid, so the dead kind's rank still reads as one that ended its main thread."""
    shutdown = Frame("_shutdown", "/usr/lib/python3.14/threading.py", 1500)
    worker = [Frame("prefetch", HERE, 120),
              Frame("run", "/usr/lib/python3.14/threading.py", 990)]
    main, other = Thread("?", [shutdown], 1002), Thread("?", worker, 1003)
    dead = Process(1002, 2, [other, main])
    assert dead.main is main
    text = hangs.where_is("rank 2", dead)
    assert text.startswith("rank 2's main thread has left the program and waits in "
                           "threading._shutdown") and "for a thread," in text
    named = Process(1002, 2, [Thread("prefetch", worker), Thread("MainThread", [shutdown])])
    assert "its thread 'prefetch'" in hangs.where_is("rank 2", named)
    assert hangs.signature(dead) == sorted([("?", [("_shutdown", 1500)]),
                                            ("?", [("prefetch", 120), ("run", 990)])])


RANK_THAT_SERVES = """
import torch, torch.distributed as dist
from workers.hangs import serve_dumps
store = dist.TCPStore("127.0.0.1", 0, 1, True, use_libuv=True)
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
serve_dumps()
dist.all_reduce(torch.ones(2))
dist.destroy_process_group()
print("end of script", flush=True)
"""


def test_a_rank_that_serves_its_recorder_ends_normally():
    """serve_dumps is offered for copying into the reader's ranks: a rank that ran it and
    then finished must end with 0 (a handler nested in serve_dumps crashed it at exit)."""
    done = subprocess.run([sys.executable, "-c", RANK_THAT_SERVES], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).parents[1])
    assert "end of script" in done.stdout, done.stderr[-2000:]
    assert done.returncode == 0, done.stderr[-2000:]
