"""workers.failures: every scenario ends within its bound, with the expected message, and
leaves no process behind; the elastic restart ends where an uninterrupted run does."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_one_line_error, cli, is_running, quiet_run

from workers.runner import WorkerError

TORCHRUN = ("torch.distributed.run", "--standalone", "--nproc-per-node", "2")


def assert_nothing_left(result) -> None:
    pids = [e["pid"] for e in result.events_named("started")]
    assert pids, "no rank started"
    assert not [pid for pid in pids if is_running(pid)]


@pytest.mark.parametrize(
    "command, message",
    [
        (
            ("workers.failures", "crash", "--launcher", "process"),
            r"exit codes \[1, 1\]",
        ),
        (
            ("workers.failures", "crash", "--launcher", "spawn"),
            "the other ranks were stopped",
        ),
        ((*TORCHRUN, "-m", "workers.failures", "crash"), "ChildFailedError"),
    ],
)
def test_a_crashed_rank_ends_the_job(command, message):
    result = quiet_run(*command, expect_returncode=1, expect_output=message)
    crashed_at = result.events_named("crash")[0]["t"]
    assert result.ended - crashed_at < 20
    assert_nothing_left(result)


def test_torchrun_reports_the_recorded_exception():
    result = quiet_run(
        *TORCHRUN, "-m", "workers.failures", "crash", expect_returncode=1
    )
    assert (
        "rank 1 failed on purpose at step 10" in result.output
    )  # from @record's error file


@pytest.mark.parametrize(
    "args, message",
    [
        (["timeout"], "Timed out waiting 2000ms for recv operation to complete"),
        (
            ["timeout", "--monitored"],
            "Rank 1 failed to pass monitoredBarrier in 2000 ms",
        ),
        (["mismatch"], "Timed out waiting 2000ms"),
        (["uneven"], "after 5 steps, stuck for"),
    ],
)
def test_a_missing_or_mismatched_collective_times_out(args, message):
    result = quiet_run(
        "workers.failures", *args, expect_returncode=1, expect_output=message
    )
    assert result.duration < 20  # the 2-second timeout, plus starting two ranks
    assert_nothing_left(result)


def test_debug_mode_names_both_collectives_at_once():
    result = quiet_run("workers.failures", "mismatch", expect_returncode=1,
                       env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})  # fmt: skip
    errors = [e for e in result.events_named("mismatch")]
    assert errors and all(e["seconds"] < 1.5 for e in errors)
    assert (
        "OpType=ALLREDUCE" in errors[0]["error"]
        and "OpType=BROADCAST" in errors[0]["error"]
    )


def test_join_lets_uneven_ranks_finish():
    result = quiet_run("workers.failures", "uneven", "--join")
    assert sorted((e["rank"], e["steps"]) for e in result.events_named("uneven")) == [(0, 5), (1, 6)]  # fmt: skip


def test_an_elastic_restart_ends_like_an_uninterrupted_run(tmp_path):
    restarted, plain = tmp_path / "restarted", tmp_path / "plain"
    restarted.mkdir()
    plain.mkdir()
    elastic = (
        "-m",
        "workers.failures",
        "elastic",
        "--steps",
        "20",
        "--checkpoint-every",
        "5",
    )
    interrupted = quiet_run(*TORCHRUN, "--max-restarts", "1", *elastic, "--checkpoint-dir",
                            str(restarted), "--crash-at-step", "12", timeout=120)  # fmt: skip
    straight = quiet_run(*TORCHRUN, *elastic, "--checkpoint-dir", str(plain),
                         "--crash-at-step", "1000", timeout=120)  # fmt: skip
    assert [e["step"] for e in interrupted.events_named("resumed")] == [10, 10]
    finished = {
        (e["rank"], e["step"], e["attempt"])
        for e in interrupted.events_named("finished")
    }
    assert finished == {(0, 20, 1), (1, 20, 1)}
    assert {e["step"] for e in straight.events_named("finished")} == {20}
    a = torch.load(restarted / "final.pt", weights_only=True)
    b = torch.load(plain / "final.pt", weights_only=True)
    assert (
        max((a[k] - b[k]).abs().max().item() for k in a) == 0
    )  # no progress lost or changed


def test_the_runner_leaves_no_orphans_when_it_cuts_a_run_off():
    with pytest.raises(WorkerError) as cut:
        quiet_run("workers.failures", "orphans", "--timeout", "60", timeout=4)
    result = cut.value.result
    assert result.timed_out
    children = result.events_named("children")[0]["children"]
    assert len(children) == 2 and not [pid for pid in children if is_running(pid)]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["elastic"], "torchrun --max-restarts 1"),
        (["timeout", "--collective-timeout", "0"], "must be above 0"),
        (["crash", "--launcher", "ssh"], "invalid choice"),
    ],
)
def test_bad_input_gets_one_line(args, fragment):
    assert_one_line_error(cli("workers.failures", *args), fragment)
