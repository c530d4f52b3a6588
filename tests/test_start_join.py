"""workers.start_join: ordering with and without join(), daemons, exit codes, bad input."""

from __future__ import annotations

import json

import pytest
from conftest import assert_one_line_error, cli, quiet_run


@pytest.mark.parametrize("processes", [1, 4])
def test_join_orders_the_parent_after_every_child(processes):
    result = quiet_run(
        "workers.start_join", "join", "--processes", str(processes), "--step", "0.2"
    )
    assert result.ranks == list(range(processes))
    finished = [
        line.t
        for line in result.lines
        if line.rank is not None and line.text == "finished"
    ]
    assert len(finished) == processes
    last_main = [line for line in result.lines if line.source == "main"][-1]
    assert last_main.text.startswith("every child has exited") and last_main.t >= max(
        finished
    )
    # one join() span per child, in order, and every child worked for (processes - rank) * step
    joins = result.events_named("join()")
    assert [event["child"] for event in joins] == list(range(processes))
    for event in result.events_named("child working"):
        expected = 0.2 * (processes - event["rank"])
        assert expected <= event["t_end"] - event["t"] < expected + 1.0


def test_without_join_the_parent_prints_first_and_python_still_waits():
    result = quiet_run(
        "workers.start_join", "no-join", "--processes", "2", "--step", "0.5"
    )
    assert result.lines[0].source == "main" and "comes first" in result.lines[0].text
    assert sorted(result.lines_of(0) + result.lines_of(1)).count("finished") == 2
    parent_done = result.events_named("parent's code done")[0]["t"]
    slowest_end = max(event["t_end"] for event in result.events_named("child working"))
    assert (
        slowest_end > parent_done + 0.5
    )  # the children outlived the parent's code ...
    assert (
        result.returncode == 0
    )  # ... and the interpreter waited for them before exiting


def test_daemon_children_are_terminated_when_the_parent_exits():
    result = quiet_run(
        "workers.start_join", "daemon", "--processes", "2", "--step", "5"
    )
    for rank in (0, 1):  # each child said it started, and never that it finished
        assert len(result.lines_of(rank)) == 1 and result.lines_of(rank)[0].startswith(
            "started"
        )
    assert result.events_named("child working") == []
    # the run ended before any child could have finished its work (rank 1: 5 s, rank 0: 10 s)
    started = {line.rank: line.t for line in result.lines if line.rank is not None}
    assert result.duration < min(started[rank] + 5 * (2 - rank) for rank in (0, 1))


def test_exit_codes():
    result = quiet_run("workers.start_join", "exit-codes")
    codes = {
        event["how"]: event["exitcode"] for event in result.events_named("exitcode")
    }
    assert codes == {
        "return": 0,
        "sys.exit(3)": 3,
        "uncaught exception": 1,
        "terminate() by the parent": -15,
    }
    assert "ValueError: rank 2 failed on purpose" in result.output


def test_events_file_is_json_lines(tmp_events):
    completed = cli(
        "workers.start_join",
        "join",
        "--processes",
        "2",
        "--step",
        "0.1",
        "--events",
        str(tmp_events),
    )
    assert completed.returncode == 0, completed.stderr
    records = [json.loads(line) for line in tmp_events.read_text().splitlines()]
    assert {record["event"] for record in records} == {
        "start()",
        "join()",
        "child working",
    }
    assert all({"rank", "t", "event"} <= record.keys() for record in records)


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["join", "--processes", "0"], ["--processes", "must be at least 1, got 0"]),
        (["join", "--processes", "many"], ["--processes", "expected a whole number"]),
        (["join", "--processes", "65"], ["at most 64"]),
        (["join", "--step", "-1"], ["--step", "must be above 0"]),
        (["join", "--start-method", "teleport"], ["invalid choice: 'teleport'"]),
        (["jion"], ["invalid choice: 'jion'"]),
        (
            ["join", "--events", "/no/such/folder/events.jsonl"],
            ["cannot write the events file"],
        ),
    ],
)
def test_bad_input_gets_one_clear_line(args, fragments):
    assert_one_line_error(cli("workers.start_join", *args), *fragments)


def test_help_documents_the_worker():
    completed = cli("workers.start_join", "--help")
    assert completed.returncode == 0
    for option in ("--processes", "--step", "--start-method", "--events", "--timeout"):
        assert option in completed.stdout
