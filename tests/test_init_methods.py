"""workers.init_methods: every route for several world sizes, the store, and the failures."""

from __future__ import annotations

import os
import socket
import time

import pytest
from conftest import assert_one_line_error, cli, quiet_run

from workers.runner import free_port

ROUTES = [
    ("env", "tcp"),
    ("tcp", "tcp"),
    ("file", "tcp"),
    ("store", "tcp"),
    ("store", "file"),
]


def joined(result) -> dict[tuple[str, int], dict]:
    return {
        (e["method"], e["rank"]): e for e in result.events_named("init_process_group")
    }


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("method, store", ROUTES)
def test_every_route_forms_a_working_group(method, store, world_size):
    result = quiet_run(
        "workers.init_methods", "join", "--method", method, "--store", store,
        "--world-size", str(world_size),
    )  # fmt: skip
    records = joined(result)
    assert sorted(rank for _, rank in records) == list(range(world_size))
    # the all_reduce of the ranks reached every rank: 0 + 1 + ... + (n - 1)
    assert {record["sum"] for record in records.values()} == {sum(range(world_size))}
    if method == "env":
        for (_, rank), record in records.items():
            assert record["env"]["RANK"] == str(rank)
            assert record["env"]["WORLD_SIZE"] == str(world_size)


def test_explicit_tcp_store_listens_on_loopback_only():
    result = quiet_run("workers.init_methods", "join", "--method", "env", "store")
    listening = {
        m: e["listening"] for (m, rank), e in joined(result).items() if rank == 0
    }
    assert listening["store"] and all(
        a.startswith("127.0.0.1:") for a in listening["store"]
    )
    assert listening[
        "env"
    ]  # PyTorch's own server: on every interface, as the page shows


def test_store_operations_agree_across_ranks():
    result = quiet_run("workers.init_methods", "store", "--world-size", "4")
    records = result.events_named("store")
    assert sorted(r["arrived"] for r in records) == [1, 2, 3, 4]  # add() is atomic
    assert len({r["leader"] for r in records}) == 1  # compare_set elected one leader
    for rank in range(4):
        lines = " ".join(result.lines_of(rank))
        assert "check(['leader']), check(['nobody']) -> (True, False)" in lines
        assert "job-a status 'training', job-b status 'evaluating'" in lines


def test_a_missing_rank_fails_within_the_timeout():
    begin = time.time()
    result = quiet_run(
        "workers.init_methods", "missing-rank", "--world-size", "2", "--timeout", "3",
        expect_returncode=1,
    )  # fmt: skip
    assert time.time() - begin < 3 + 10
    assert "1/2 clients joined" in result.output
    assert "the other ranks were stopped" in result.output


def test_a_port_in_use_gets_the_real_error():
    result = quiet_run("workers.init_methods", "port-in-use", expect_returncode=1)
    assert "EADDRINUSE" in result.output or "address already in use" in result.output
    assert result.duration < 30


def test_a_leftover_file_stays_and_a_fresh_one_works():
    result = quiet_run("workers.init_methods", "leftover-file", "--timeout", "5")
    main = result.lines_of("main")
    assert "after job 1: the file exists: True" in main
    # Job 2 reuses the stale file: it may fail (a dead rank's address, or a timeout) or win
    # the race; either way it ends, and a failure is reported by the launcher in one line.
    second = next(text for text in main if text.startswith("job 2 exited"))
    if second.endswith("1"):
        assert any("exited with" in text or "still running" in text for text in main)
    job3 = result.events_named("init_process_group")[-2:]  # events are sorted by time
    assert {e["sum"] for e in job3} == {1} and result.returncode == 0


def test_benchmark_covers_every_route_and_size():
    result = quiet_run(
        "workers.init_methods",
        "benchmark",
        "--world-sizes",
        "1",
        "3",
        "--methods",
        "env",
        "file",
    )
    sizes = {}
    for e in result.events_named("init_process_group"):
        sizes.setdefault((e["method"], e["world_size"]), set()).add(e["rank"])
    assert sizes == {
        ("env", 1): {0},
        ("env", 3): {0, 1, 2},
        ("file", 1): {0},
        ("file", 3): {0, 1, 2},
    }


def test_runs_under_torchrun():
    result = quiet_run(
        "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "-m", "workers.init_methods", "join",
    )  # fmt: skip
    records = joined(result)
    assert sorted(rank for _, rank in records) == [0, 1]
    assert {r["env"]["LOCAL_RANK"] for r in records.values()} == {"0", "1"}
    assert {r["sum"] for r in records.values()} == {1}


def test_the_first_job_uses_the_given_port():
    port = str(free_port())
    result = quiet_run(
        "workers.init_methods", "join", "--method", "env", "tcp", "--port", port
    )
    listening = [
        e["listening"]
        for e in result.events_named("init_process_group")
        if e["listening"]
    ]
    assert listening[0][0].endswith(f":{port}")
    assert not listening[1][0].endswith(f":{port}")  # the next job got a fresh one


def test_eight_ranks():
    result = quiet_run(
        "workers.init_methods", "join", "--method", "tcp", "--world-size", "8"
    )
    assert {r["sum"] for r in joined(result).values()} == {28}


def test_existing_rendezvous_file_is_refused(tmp_path):
    stale = tmp_path / "store"
    stale.write_text("left over")
    assert_one_line_error(
        cli("workers.init_methods", "join", "--method", "file", "--file", str(stale)),
        "already exists",
    )


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["join", "--method", "carrier-pigeon"], ["invalid choice: 'carrier-pigeon'"]),
        (["join", "--world-size", "0"], ["--world-size", "must be at least 1"]),
        (["join", "--port", "http"], ["--port", "expected a number from 1 to 65535"]),
        (["join", "--port", "70000"], ["--port", "expected a number from 1 to 65535"]),
        (
            ["join", "--file", "/proc/no/store"],
            ["--file", "cannot create a file in /proc/no"],
        ),
        (["missing-rank", "--world-size", "1"], ["at least 2"]),
    ],
)
def test_bad_input_gets_one_clear_line(args, fragments):
    assert_one_line_error(cli("workers.init_methods", *args), *fragments)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_folder_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert_one_line_error(
        cli(
            "workers.init_methods",
            "join",
            "--method",
            "file",
            "--file",
            str(locked / "s"),
        ),
        "cannot create a file",
    )


def test_unreachable_address_is_refused():
    # 192.0.2.0/24 is reserved for documentation: no machine has it, so nothing can bind it
    with socket.socket() as probe:
        try:
            probe.bind(("192.0.2.1", 0))
            pytest.skip("this machine has a documentation address")
        except OSError:
            pass
    assert_one_line_error(
        cli("workers.init_methods", "join", "--address", "192.0.2.1"),
        "--address",
        "cannot bind",
    )
