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
    with the same bits and finished with the same weights as every other group."""
    mine = ft.of_job(events, job)
    [killed] = [e for e in mine if e["event"] == "killed"]
    alone = [e for e in mine if e["event"].startswith("step, quorum of")
             and e["rank"] != killed["rank"] and e["participants"] == groups - 1]
    assert alone and min(e["t"] for e in alone) >= killed["t"] - 1, "nobody went on"
    healed = ft.healing(events, job)
    assert healed["rank"] == killed["rank"] and healed["sender"] != killed["rank"]
    assert healed["digest"] == healed["sent_digest"] == healed["loaded_digest"]
    assert healed["step"] > killed["step"]
    finished = [e for e in mine if e["event"] == "finished"]
    assert sorted(e["rank"] for e in finished) == list(range(groups))
    assert len({e["digest"] for e in finished}) == 1, finished
    assert {e["step"] for e in finished} == {steps}


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
                                "--repeats", "10", timeout=600)
    assert not left, left
    for repeat in range(1, 11):
        assert_went_on_and_came_back(events, f"torchft {repeat}", groups)


def test_healing_without_the_optimizer_state_is_caught():
    result = quiet_run("workers.fault_tolerance", "torchft", "--heal-model-only", *SMALL,
                       expect_returncode=1, expect_output="final weights differ")
    [healed] = result.events_named("healed")
    assert healed["momentum_buffers"] == 0 and healed["model_tensors"] == 4


@pytest.mark.slow
def test_the_plain_program_killed_by_hand_and_started_again_heals(tmp_path):
    with ListeningSockets(interval=0.2) as listening:
        _, events, left = run_alone(tmp_path, "by-hand", "--steps", "1500",
                                    "--kill-at-step", "200", "--timeout", "150", timeout=200)
    assert not left, left
    printed = [e for e in events if e["event"] == "printed"]
    [killed] = [e for e in events if e["event"] == "killed"]
    again = [e["step"] for e in printed if e["rank"] == 1 and e["incarnation"] == 1]
    assert again and again[0] > killed["step"], "group 1 did not heal when it came back"
    assert any(e["rank"] == 0 and e["participants"] == 1 for e in printed)
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
