"""workers.start_join beyond what its chapter runs: other process counts and start methods,
the parent's exit under fork, orphans of a SIGKILLed parent, the events file from a shell,
each demo's --help, and bad input."""

from __future__ import annotations

import json
import platform
import sys

import pytest

from helpers import assert_one_line_error, cli, cli_in_process, help_options, quiet_run


@pytest.mark.parametrize("processes, method", [(1, "fork"), (8, "forkserver")])
def test_join_orders_the_parent_after_every_child(processes, method):
    result = quiet_run("workers.start_join", "join", "--processes", str(processes),
                       "--step", "0.1", "--start-method", method)
    assert result.ranks == list(range(processes))
    finished = [line.t for line in result.lines if line.rank is not None
                and line.text == "finished"]
    assert len(finished) == processes
    last_main = [line for line in result.lines if line.source == "main"][-1]
    assert last_main.text.startswith("every child has exited") and last_main.t >= max(finished)
    assert [e["child"] for e in result.events_named("join()")] == list(range(processes))
    for event in result.events_named("child working"):  # child r works (processes - r) * step
        expected = 0.1 * (processes - event["rank"])
        assert expected <= event["t_end"] - event["t"] < expected + 1.0


def test_the_first_failure_stops_the_children_still_working():
    """The child that raises at once is the last started; the parent stops at it and stops
    the others, which never finish their 20 and 10 s of work."""
    result = quiet_run("workers.start_join", "first-failure", "--step", "10",
                       "--start-method", "fork", expect_returncode=1)
    said = [line.text for line in result.lines if line.source == "main"]
    assert said[-1].startswith("child 2 exited with code 1") and "[0, 1]" in said[-1], said
    assert not any(line.text == "finished" for line in result.lines)


def test_a_single_child_is_the_one_that_raises():
    """With one child, that child is the one that raises: code 1, and the parent names it."""
    result = quiet_run("workers.start_join", "first-failure", "--processes", "1",
                       "--start-method", "fork", expect_returncode=1)
    assert [line.text for line in result.lines if line.source == "main"][-1].startswith(
        "child 0 exited with code 1")


def test_exit_codes_one_for_an_exception_and_for_a_message():
    result = quiet_run("workers.start_join", "exit-codes", "--start-method", "fork")
    codes = {e["how"]: e["exitcode"] for e in result.events_named("exitcode")}
    assert codes == {"return": 0, "sys.exit(3)": 3, "uncaught exception": 1,
                     "terminate() by the parent": -15, 'sys.exit("a message")': 1}


def test_without_join_the_parent_process_outlives_its_forked_children():
    result = quiet_run("workers.start_join", "no-join", "--processes", "2", "--step", "0.2",
                       "--start-method", "fork")
    code_done = result.events_named("parent's code done")[0]["t"]
    exited = result.events_named("parent exited")[0]
    last_work = max(e["t_end"] for e in result.events_named("child working"))
    assert code_done < last_work <= exited["t"] and exited["code"] == 0


def test_children_of_a_killed_parent_live_on_until_stopped_by_pid():
    result = quiet_run("workers.start_join", "orphans", "--kill-parent", "KILL",
                       "--start-method", "fork")
    orphans = result.events_named("orphans")[0]
    assert orphans["code"] == -9 and not orphans["daemon"]
    assert orphans["alive"] == orphans["children"] and len(orphans["children"]) == 2
    assert result.lines_of("main")[-1] == "stopped them by pid; still running: []"


def test_threads_and_processes_do_the_same_work_one_worker_each():
    result = quiet_run("workers.start_join", "threads-or-processes", "--workers", "1",
                       "--millions", "0.5", "--repeats", "1")
    counted = result.events_named("counted")
    assert [e["kind"] for e in counted] == ["threads", "processes"]
    assert all(e["workers"] == 1 and 0 < e["cores"] < 1.2 for e in counted)
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()  # the worker runs this Python
    assert all(e["gil"] == gil and e["python"] == platform.python_version() for e in counted)
    assert result.lines_of("main")[0].startswith(f"Python {platform.python_version()}, ")


def test_events_file_from_a_shell_is_json_lines(tmp_events):
    completed = cli("workers.start_join", "join", "--processes", "2", "--step", "0.1",
                    "--events", str(tmp_events))
    assert completed.returncode == 0, completed.stderr
    records = [json.loads(line) for line in tmp_events.read_text().splitlines()]
    assert {record["event"] for record in records} == {"start()", "join()", "child working"}
    assert all({"rank", "t", "event"} <= record.keys() for record in records)


@pytest.mark.parametrize(
    "demo, options",
    [
        ("join", {"--processes", "--step", "--start-method", "--events", "--timeout"}),
        ("daemon", {"--processes", "--seconds", "--start-method", "--events", "--timeout"}),
        ("exit-codes", {"--start-method", "--events", "--timeout"}),
        ("first-failure", {"--processes", "--step", "--start-method", "--events",
                           "--timeout"}),
        ("no-join", {"--processes", "--step", "--start-method", "--events", "--timeout"}),
        ("threads-or-processes", {"--workers", "--millions", "--repeats", "--start-method",
                                  "--events", "--timeout"}),
        ("orphans", {"--daemon", "--kill-parent", "--start-method", "--events", "--timeout"}),
    ],
)
def test_each_demo_documents_only_its_own_options(demo, options, capsys):
    completed = cli_in_process("workers.start_join", demo, "--help", capsys=capsys)
    assert help_options(completed) == options


def test_help_from_a_shell_lists_the_demos():
    completed = cli("workers.start_join", "--help")
    assert completed.returncode == 0
    assert all(demo in completed.stdout for demo in ["join", "no-join", "daemon", "exit-codes",
                                                        "first-failure"])


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["join", "--processes", "0"], ["--processes", "must be at least 1, got 0"]),
        (["join", "--processes", "many"], ["--processes", "expected a whole number"]),
        (["join", "--processes", "65"], ["at most 64"]),
        (["join", "--step", "-1"], ["--step", "must be above 0"]),
        (["join", "--start-method", "teleport"], ["invalid choice: 'teleport'"]),
        (["exit-codes", "--step", "1"], ["unrecognized arguments: --step"]),
        (["orphans", "--kill-parent", "HUP"], ["invalid choice: 'HUP'"]),
        (["threads-or-processes", "--workers", "0"], ["must be at least 1"]),
        (["threads-or-processes", "--workers", "65"], ["at most 64"]),
        (["jion"], ["invalid choice: 'jion'"]),
        ([], ["required: DEMO"]),
        (["join", "--events", "/no/such/folder/events.jsonl"], ["cannot write the events file"]),
    ],
)
def test_bad_input_gets_one_clear_line(args, fragments, capsys):
    assert_one_line_error(cli_in_process("workers.start_join", *args, capsys=capsys), *fragments)


def test_bad_input_from_a_shell_has_no_traceback():
    assert_one_line_error(cli("workers.start_join", "join", "--processes", "0"), "--processes")
