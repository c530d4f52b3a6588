"""workers.multi_node beyond what its chapter runs: two torchrun agents with one rank each (the
page gives each two), each demo's --help, and bad input. The page runs both demos and the
Slurm job in every build; tests/test_slurm.py submits more to Slurm."""

from __future__ import annotations

import pytest

from helpers import assert_one_line_error, cli_in_process, help_options, quiet_run


def test_two_agents_with_one_rank_each_make_one_job_of_two():
    result = quiet_run("workers.multi_node", "two-nodes", "--nproc-per-node", "1",
                       "--timeout", "120", timeout=150)
    placed = sorted((e["rank"], v["GROUP_RANK"], v["LOCAL_RANK"], v["WORLD_SIZE"])
                    for e in result.events_named("environment") for v in [e["variables"]])
    assert [rank for rank, *_ in placed] == [0, 1]
    assert {group for _, group, _, _ in placed} == {"0", "1"}  # one rank on each node
    assert all(local == "0" and world == "2" for _, _, local, world in placed)
    for rank in (0, 1):
        assert result.lines_of(rank)[-1].endswith("all_reduce of ones 2")


@pytest.mark.parametrize(
    "demo, options",
    [("two-nodes", {"--nproc-per-node", "--events", "--timeout"}),
     ("spawn-nodes", {"--nproc-per-node", "--events", "--timeout"})],
)
def test_each_demo_documents_only_its_own_options(demo, options, capsys):
    completed = cli_in_process("workers.multi_node", demo, "--help", capsys=capsys)
    assert help_options(completed) == options


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["two-nodes", "--nproc-per-node", "0"], "must be at least 1"),
        (["spawn-nodes", "--epochs", "1"], "unrecognized arguments: --epochs"),
        (["spawn-nodes", "programs/no_such_program.py"], "no program programs/no_such_program"),
        (["environments"], "invalid choice: 'environments'"),  # workers.launchers' demo
    ],
)
def test_bad_options_are_reported_in_one_line(args, fragment, capsys):
    assert_one_line_error(cli_in_process("workers.multi_node", *args, capsys=capsys), fragment)


@pytest.mark.parametrize("events", [None, "events.jsonl"])
def test_the_shown_torchrun_command_names_the_demo_with_or_without_events(events, monkeypatch):
    """The command a reader sees ends with the module and the demo, whatever book options
    (--timeout, --events) follow it in the command that runs."""
    import argparse

    from workers import multi_node

    seen = {}
    monkeypatch.setattr(multi_node, "run_nodes",
                        lambda commands, timeout, shown=None: seen.update(
                            shown=shown, command=commands[0]) or 0)
    args = argparse.Namespace(nproc_per_node=2, timeout=120.0, events=events)
    assert multi_node.two_nodes(args) == 0
    assert seen["shown"][0] == "--nnodes"
    assert seen["shown"][-3:] == ["-m", "workers.multi_node", "two-nodes"]
    assert ("--events" in seen["command"]) == (events is not None)


def test_the_highlighted_lines_of_the_program_are_the_ones_the_page_describes():
    """The page points at the listing's highlighted lines by what they do: the rank and the
    world size, the `for option ...` line, and the two `os.environ.setdefault` lines."""
    import re
    from pathlib import Path

    page = Path("book/multi_node.md").read_text()
    spec = re.search(r"literalinclude\} \.\./programs/ddp_mnist\.py\n:emphasize-lines: (.+)",
                     page).group(1)
    numbers = [n for part in spec.split(",") for a, _, b in [part.strip().partition("-")]
               for n in range(int(a), int(b or a) + 1)]
    lines = Path("programs/ddp_mnist.py").read_text().splitlines()
    highlighted = [lines[n - 1].strip() for n in numbers]
    assert highlighted[0].startswith("rank = ") and highlighted[1].startswith("world_size = ")
    assert highlighted[2].startswith("for option, default in")
    assert [line.split("(")[0] for line in highlighted[3:]] == ["os.environ.setdefault"] * 2
