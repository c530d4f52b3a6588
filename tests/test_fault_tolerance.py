"""workers.fault_tolerance beyond what its chapter runs: one replica group killed in the middle
of training, once in the fast loop and ten times at two and at three groups in the slow one,
each time asserting that the others went on, that the killed group came back with exactly the
others' weights, and that no process of the job was left; nothing listening beyond the
loopback while the job runs; the plain program killed by hand and started again; the elastic
demo under torchrun's default shared store; each demo's --help; and bad input. (compare, the
chapter's run, is asserted on its page.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from workers import fault_tolerance as ft
from workers.fault_tolerance import ListeningSockets

from helpers import (
    ROOT,
    assert_one_line_error,
    cli_in_process,
    help_options,
    processes_marked,
    quiet_run,
)

pytestmark = pytest.mark.skipif(ft.torchft_missing() is not None,
                                reason="torchft has no wheel for this Python")
TORCHRUN = ("torch.distributed.run", "--standalone", "--nproc-per-node", "2")
SMALL = ("--steps", "100", "--kill-at-step", "20", "--rejoin-after", "10")


def run_alone(tmp_path, *args: str, timeout: float = 240) -> tuple[int, list[dict], list]:
    """``python -m workers.fault_tolerance ARGS`` as a reader starts it, with nothing around
    it to clean up after it: its exit code, its events, and any process of it still alive
    right after it exited."""
    marker = f"FAULT_TOLERANCE_TEST={uuid.uuid4().hex}"
    events = tmp_path / f"events-{uuid.uuid4().hex}.jsonl"
    name, _, value = marker.partition("=")
    completed = subprocess.run(
        [sys.executable, "-m", "workers.fault_tolerance", *args, "--events", str(events)],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, name: value})
    left = processes_marked(marker)
    for _ in range(20):  # a process that is ending may take a moment to be gone
        if not left:
            break
        time.sleep(0.1)
        left = processes_marked(marker)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed.returncode, ft.read_events(str(events)), left


def assert_went_on_and_came_back(events: list[dict], job: str, groups: int,
                                 steps: int = 100) -> None:
    """The others committed steps without the killed group, which healed from one of them
    (as often as it fell behind) with the same bits, and every group finished at the same
    step, ``steps`` or past it, with the same weights."""
    mine = ft.of_job(events, job)
    [killed] = [e for e in mine if e["event"] == "killed"]
    alone = [e for e in mine if e["event"].startswith("step, quorum of")
             and e["rank"] != killed["rank"] and e["participants"] == groups - 1]
    assert alone and min(e["t"] for e in alone) >= killed["t"] - 1, "nobody went on"
    heals = ft.heals(events, job)
    back, _ = ft.came_back(heals, events, job)
    assert back, "the killed group never healed"
    # a group that asked for its first quorum late, or missed a commit, heals too (seen
    # under load): every heal is from a peer, bit for bit
    for heal in heals:
        assert heal["sender"] not in (None, heal["rank"])
        assert heal["digest"] == heal["sent_digest"] == heal["loaded_digest"]
    finished = [e for e in mine if e["event"] == "finished"]
    assert sorted(e["rank"] for e in finished) == list(range(groups))
    assert len({e["digest"] for e in finished}) == 1, finished
    [final] = {e["step"] for e in finished}
    assert final >= steps


def test_a_killed_group_comes_back_with_the_same_weights_and_nothing_listens_beyond_loopback(
        tmp_path):
    with ListeningSockets(interval=0.2) as listening:
        _, events, left = run_alone(tmp_path, "torchft", *SMALL)
    assert not left, left
    assert_went_on_and_came_back(events, "torchft", groups=2)
    assert listening.error or listening.found
    assert not listening.elsewhere(), listening.elsewhere()


@pytest.mark.slow
@pytest.mark.repeats
@pytest.mark.parametrize("groups", [2, 3])
def test_a_group_killed_ten_times_over(tmp_path, groups):
    _, events, left = run_alone(tmp_path, "torchft", "--groups", str(groups), *SMALL,
                                "--repeats", "10", "--timeout", "240", timeout=600)
    assert not left, left
    for repeat in range(1, 11):
        assert_went_on_and_came_back(events, f"torchft {repeat}", groups)


def test_healing_without_the_optimizer_state_is_caught():
    result = quiet_run("workers.fault_tolerance", "torchft", "--heal-model-only", *SMALL,
                       expect_returncode=1, expect_output="final weights differ")
    healed = result.events_named("healed")
    assert healed and all(e["momentum_buffers"] == 0 and e["model_tensors"] == 4
                          for e in healed)


@pytest.mark.slow
def test_the_plain_program_killed_by_hand_and_started_again_heals(tmp_path):
    with ListeningSockets(interval=0.2) as listening:
        _, events, left = run_alone(tmp_path, "by-hand", "--steps", "1500",
                                    "--kill-at-step", "200", "--timeout", "150", timeout=200)
    assert not left, left
    printed = [e for e in events if e["event"] == "printed"]
    [killed] = [e for e in events if e["event"] == "killed"]
    again = [e for e in printed if e["rank"] == 1 and e["incarnation"] == 1]
    group_0 = [e for e in printed if e["rank"] == 0]
    assert again, "group 1, started again, printed nothing"
    # the plain program stops at its step count: group 1 heals if group 0 is still there
    # when it asks for its first quorum (it cannot form one alone while group 0 lives), and
    # trains alone from step 0 if group 0 had finished first, as on a slow machine
    if again[0]["step"] <= killed["step"]:
        assert group_0[-1]["step"] == 1500 and group_0[-1]["t"] < again[0]["t"], (
            "group 1 did not heal, though group 0 was still training")
    assert any(e["participants"] == 1 for e in group_0)
    assert not listening.elsewhere(), listening.elsewhere()


@pytest.mark.slow
def test_elastic_restarts_from_its_checkpoint_under_torchrun(tmp_path):
    """As compare starts it: each rendezvous round with a store of its own (the checkpoints
    chapter says why)."""
    restarted = quiet_run(*TORCHRUN, "--max-restarts", "1", "-m", "workers.fault_tolerance",
                          "elastic", "--steps", "40", "--kill-at-step", "15",
                          "--checkpoint-every", "10", "--checkpoint-dir", str(tmp_path),
                          timeout=180, env={**os.environ,
                                            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})
    assert [e["step"] for e in restarted.events_named("resumed")] == [10, 10]
    assert {e["step"] for e in restarted.events_named("finished")} == {40}


@pytest.mark.parametrize(
    "demo, options",
    [
        ("torchft", {"--steps", "--kill-at-step", "--groups", "--no-kill",
                     "--heal-model-only", "--repeats", "--rejoin-after", "--width",
                     "--heartbeat-timeout", "--collective-timeout", "--events", "--timeout"}),
        ("elastic", {"--steps", "--kill-at-step", "--checkpoint-every", "--checkpoint-dir",
                     "--width", "--events", "--timeout"}),
        ("compare", {"--steps", "--kill-at-step", "--rejoin-after", "--checkpoint-every",
                     "--width", "--heartbeat-timeout", "--collective-timeout", "--events",
                     "--timeout"}),
        ("by-hand", {"--steps", "--kill-at-step", "--no-start-again", "--heartbeat-timeout",
                     "--events", "--timeout"}),
    ],
)
def test_each_demo_documents_only_its_own_options(demo, options, capsys):
    completed = cli_in_process("workers.fault_tolerance", demo, "--help", capsys=capsys)
    assert help_options(completed) == options


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["torchft", "--groups", "1"], "--groups must be at least 2"),
        (["torchft", "--steps", "20"], "--kill-at-step must be a step of the run"),
        (["torchft", "--kill-at-step", "190"], "the others must still train"),
        (["torchft", "--heartbeat-timeout", "0"], "must be above 0"),
        (["compare", "--rejoin-after", "0"], "must be at least 1"),
        (["by-hand", "--kill-at-step", "0"], "--kill-at-step must be a step of the run"),
        (["elastic", "--checkpoint-dir", "/tmp"], "torchrun --nproc-per-node 2"),
        (["elastic"], "required: --checkpoint-dir"),
        (["torchft", "--events", "/proc/no/such/file"], "cannot write the events file"),
    ],
)
def test_bad_input_gets_one_line(args, fragment, capsys):
    completed = cli_in_process("workers.fault_tolerance", *args, capsys=capsys)
    assert_one_line_error(completed, fragment)


def test_the_timeline_makes_one_bar_of_each_run_of_steps():
    events = [{"rank": 0, "t": i, "t_end": i + 1, "event": name, "job": "torchft",
               "step": step, "step_after": step + 1}
              for i, (name, step) in enumerate([("step, quorum of 2", 0),
                                                ("step, quorum of 2", 1),
                                                ("step not committed", 2),
                                                ("step, quorum of 1", 2),
                                                ("step, quorum of 1", 3)])]
    bars = ft.timeline_events(events, "torchft")
    assert [(b["event"], b["first step"], b["last step"]) for b in bars] == [
        ("step, quorum of 2", 0, 1), ("step not committed", 2, 2),
        ("step, quorum of 1", 2, 3)]


def test_the_events_say_what_each_job_read_back(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps({"rank": 0, "t": 2.0, "event": "b"}) + "\n"
                    + json.dumps({"rank": 1, "t": 1.0, "event": "a"}) + "\n\n")
    assert [e["event"] for e in ft.read_events(str(path))] == ["a", "b"]


def test_a_step_under_way_when_the_kill_came_is_not_going_on(tmp_path):
    """Rank 0's step 24 began before the kill and ended after it: the job went on with the
    first step begun after the kill, and step 24, done before and again, was lost."""
    def step(rank, number, began, ended, attempt):
        return {"rank": rank, "t": began, "t_end": ended, "event": "step", "job": "torchrun",
                "step": number, "attempt": attempt}

    events = [step(0, 23, 9.0, 9.9, 0), step(0, 24, 9.9, 10.01, 0),
              {"rank": 1, "t": 10.0, "event": "killed", "job": "torchrun", "step": 25},
              {"rank": 0, "t": 14.0, "event": "resumed", "job": "torchrun", "step": 20},
              *[step(0, n, 14.0 + n - 20, 15.0 + n - 20, 1) for n in range(20, 27)]]
    job = ft.recovery(events, "torchrun")
    assert job["seconds_to_go_on"] == 5.0  # step 20 again, begun at 14.0, ended at 15.0
    assert job["went_on_from"] == 20 and job["steps_lost"] == 2  # 23 and 24, both begun before
    assert job["seconds_past_kill_step"] == 10.0  # step 25 again, ended at 20.0


def test_a_group_that_heals_twice_is_reported_not_a_crash():
    def event(rank, t, name, step, **fields):
        return {"rank": rank, "t": t, "event": name, "job": "torchft", "step": step,
                **fields}

    def committed(rank, t, step):
        return event(rank, t, "step, quorum of 2", step, t_end=t + 0.1, committed=True,
                     participants=2, step_after=step + 1)

    state = {"digest": "d", "loaded_digest": "d", "bytes": 10}
    events = [event(0, 1.0, "sent", 30, digest="d", bytes=10),
              event(1, 1.1, "healed", 30, **state),
              committed(1, 1.2, 31), committed(1, 1.3, 32),
              event(0, 2.0, "sent", 40, digest="d", bytes=10),
              event(1, 2.1, "healed", 40, **state),
              *[committed(1, 2.2 + i / 10, 41 + i) for i in range(5)]]
    heals = ft.heals(events)
    assert [(h["step"], h["sender"], h["steps_after"]) for h in heals] == [
        (30, 0, 2), (40, 0, 5)]


def test_without_torchft_the_worker_says_so_in_one_line(monkeypatch, capsys):
    import importlib.util

    from helpers import cli_in_process as in_process

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "torchft" else real(name, *args))
    missing = ft.torchft_missing(imported=False)
    assert missing.startswith("torchft is not installed for this Python")
    assert "x86_64 Linux only" in missing
    completed = in_process("workers.fault_tolerance", "by-hand", capsys=capsys)
    assert completed.returncode != 0
    assert completed.stderr.strip().splitlines()[-1].endswith(missing.split(": ", 1)[1])


def test_the_comparison_without_torchft_checks_only_the_torchrun_side(capfd):
    def job(name, digest, killed=False):
        steps = [{"rank": 0, "t": float(n), "t_end": n + 0.5, "event": "step", "job": name,
                  "step": n, "attempt": int(killed and n >= 2)} for n in range(4)]
        found = [{"rank": r, "t": 9.0, "event": "finished", "job": name, "digest": digest}
                 for r in (0, 1)]
        kill = [{"rank": 1, "t": 1.9, "event": "killed", "job": name, "step": 2}]
        return steps + found + (kill if killed else [])

    assert ft.report(job("ddp", "a") + job("torchrun", "a", killed=True), False) == 0
    assert ft.report(job("ddp", "a") + job("torchrun", "b", killed=True), False) == 1
    assert "torchrun's restarted job ended with other weights" in capfd.readouterr().out


def test_gloo_listens_on_the_loopback_where_the_hostname_does_not_resolve(monkeypatch):
    import socket

    def unresolvable(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unresolvable)
    assert ft.gloo_default_address() is None


def test_gloo_takes_the_first_address_of_the_hostname_it_can_bind(monkeypatch):
    import socket

    # an address of no interface here (TEST-NET-1) cannot be bound; the loopback can
    found = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.2.1", 0)),
             (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0))]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: found)
    assert ft.gloo_default_address() == "127.0.0.1"
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: found[:1])
    assert ft.gloo_default_address() is None
