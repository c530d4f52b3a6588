"""workers.init_methods beyond what its chapter runs: every route for world sizes the page does
not use, the file-backed store, --port honoured by the first job, a missing rank on the other
routes, the arrival demo's joins (one per order and repeat, each rank's span after the late
side's sleep), the no-backend demo on this machine, each demo's --help, and bad input."""

from __future__ import annotations

import os
import re
import socket

import pytest
import torch
from workers.ranks import free_port

from helpers import assert_one_line_error, cli_in_process, help_options, quiet_run


def joined(result) -> dict[tuple[str, int], dict]:
    return {(e["method"], e["rank"]): e for e in result.events_named("joined")}


@pytest.mark.parametrize("world_size, store", [(1, "file")])
def test_every_route_forms_a_working_group(world_size, store):
    port = str(free_port())
    result = quiet_run("workers.init_methods", "join", "--method", "env", "tcp", "file", "store",
                       "--store", store, "--world-size", str(world_size), "--port", port)
    records = joined(result)
    assert sorted(records) == [(m, r) for m in ["env", "file", "store", "tcp"]
                               for r in range(world_size)]
    # the all_reduce of the ranks reached every rank: 0 + 1 + ... + (n - 1)
    assert {record["sum"] for record in records.values()} == {sum(range(world_size))}
    # --port is the first job's; each later job got a fresh one
    assert records[("env", 0)]["listening"][0].endswith(f":{port}")
    assert not records[("tcp", 0)]["listening"][0].endswith(f":{port}")


def test_a_missing_rank_fails_within_the_timeout_on_the_other_routes():
    # whichever rank gives up first reports: the server (clients joined) or a client (wait)
    result = quiet_run("workers.init_methods", "missing-rank", "--method", "file", "store",
                       "--world-size", "3", "--timeout", "2", expect_returncode=1)
    ended = [line for line in result.lines_of("main") if "the job ended" in line]
    assert len(ended) == 2 and all(line.endswith("exit code 1") for line in ended)
    for line in ended:
        assert float(line.split("after ")[1].split(" s")[0]) < 2 + 6
    timeouts = re.findall(r"clients joined|[Ww]ait timeout", result.output)
    assert len(timeouts) >= 2  # one rank of each job reported its own timeout


@pytest.mark.parametrize(
    "demo, options",
    [
        ("join", {"--method", "--store", "--world-size", "--address", "--port", "--file",
                  "--events", "--timeout"}),
        ("arrival", {"--world-size", "--late", "--repeats", "--events", "--timeout"}),
        ("no-backend", {"--world-size", "--events", "--timeout"}),
        ("leftover-file", {"--file", "--events", "--timeout"}),
        ("pitfalls", {"--events", "--timeout"}),
    ],
)
def test_each_demo_documents_only_its_own_options(demo, options, capsys):
    completed = cli_in_process("workers.init_methods", demo, "--help", capsys=capsys)
    assert help_options(completed) == options


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["join", "--method", "carrier-pigeon"], ["invalid choice: 'carrier-pigeon'"]),
        (["join", "--world-size", "0"], ["--world-size", "must be at least 1"]),
        (["join", "--world-size", "65"], ["at most 64 ranks"]),
        (["arrival", "--world-size", "100"], ["at most 64 ranks"]),
        (["arrival", "--world-size", "1"], ["at least 2"]),
        (["arrival", "--late", "0"], ["--late", "must be above 0"]),
        (["join", "--port", "http"], ["--port", "expected a number from 1 to 65535"]),
        (["join", "--port", "70000"], ["--port", "expected a number from 1 to 65535"]),
        (["join", "--file", "/proc/no/store"], ["--file", "cannot create a file in /proc/no"]),
        (["missing-rank", "--world-size", "1"], ["at least 2"]),
        (["store", "--file", "x"], ["unrecognized arguments: --file"]),
        (["pitfalls", "--world-size", "3"], ["unrecognized arguments: --world-size"]),
        (["arrival", "--repeats", "0"], ["--repeats", "must be at least 1"]),
    ],
)
def test_bad_input_gets_one_clear_line(args, fragments, capsys):
    assert_one_line_error(cli_in_process("workers.init_methods", *args, capsys=capsys), *fragments)


def test_an_existing_rendezvous_file_is_refused(tmp_path, capsys):
    stale = tmp_path / "store"
    stale.write_text("left over")
    completed = cli_in_process("workers.init_methods", "join", "--method", "file",
                               "--file", str(stale), capsys=capsys)
    assert_one_line_error(completed, "already exists")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_folder_is_refused(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    completed = cli_in_process("workers.init_methods", "join", "--method", "file",
                               "--file", str(locked / "s"), capsys=capsys)
    assert_one_line_error(completed, "cannot create a file")


def test_unreachable_address_is_refused(capsys):
    # 192.0.2.0/24 is reserved for documentation: no machine has it, so nothing can bind it
    with socket.socket() as probe:
        try:
            probe.bind(("192.0.2.1", 0))
            pytest.skip("this machine has a documentation address")
        except OSError:
            pass
    completed = cli_in_process("workers.init_methods", "join", "--address", "192.0.2.1",
                               capsys=capsys)
    assert_one_line_error(completed, "--address", "cannot bind")


def test_the_arrival_demo_times_one_join_per_order_and_repeat():
    result = quiet_run("workers.init_methods", "arrival", "--world-size", "3", "--repeats", "2",
                       "--late", "0.2")
    jobs = {}
    for e in result.events_named("init_process_group"):
        jobs.setdefault((e["order"], e["job"]), {})[e["rank"]] = e
    # two joins per order, each by all three ranks, each on a port of its own
    assert sorted(order for order, _ in jobs) == ["rank 0 first"] * 2 + ["rank 0 last"] * 2
    assert all(sorted(ranks) == [0, 1, 2] for ranks in jobs.values())
    for (order, _), ranks in jobs.items():  # the late side called 0.2 s after the others
        early, late = (ranks[1], ranks[0]) if order == "rank 0 last" else (ranks[0], ranks[1])
        assert late["t"] - early["t"] >= 0.2 - 0.05


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only outcome")
def test_no_backend_on_a_cpu_machine_is_gloo_and_nccl_cannot_be_made():
    result = quiet_run("workers.init_methods", "no-backend", "--world-size", "2")
    seen = {(e["choice"], e["rank"]): e for e in result.events_named("by device")}
    for rank in (0, 1):
        assert seen["init_process_group()", rank]["config"] == "cpu:gloo"
        assert seen["init_process_group()", rank]["cpu"] == "1"
        assert seen["init_process_group(device_id=...)", rank]["device"] == "cpu:0"
        assert "error" in seen['init_process_group("cpu:gloo,cuda:nccl")', rank]
