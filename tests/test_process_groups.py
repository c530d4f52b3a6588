"""workers.process_groups beyond what its chapter runs: subgroups and rank translation for world
sizes the page does not use and under torchrun, a 6-rank mesh, a missing group on four ranks that
ends within its timeout and leaves nothing behind, the backend's threads under torchrun, a second
init_process_group refused, each demo's --help, and bad input."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch
import torch.distributed as dist
import workers.process_groups
from workers.job import Job
from workers.process_groups import subgroup_layout, thread_names
from workers.ranks import Events, free_port

from helpers import (
    assert_one_line_error,
    cli,
    cli_in_process,
    help_options,
    is_running,
    quiet_run,
)


def check_groups(result, n: int) -> None:
    layout = {"world": list(range(n)), **subgroup_layout(n)}
    records = result.events_named("member")
    assert len(records) == n * len(layout)  # every rank reported on every group
    for e in records:
        members = sorted(layout[e["group"]])  # new_group numbers its members in sorted order
        assert e["members"] == layout[e["group"]]
        if e["rank"] not in members:
            assert e["group_rank"] == -1
            continue
        assert e["group_rank"] == members.index(e["rank"])
        assert e["group_size"] == len(members)
        assert e["first_global"] == members[0]
        assert e["sum"] == sum(r + 1 for r in members)  # only the members took part
        assert e["broadcast"] == members[0]


@pytest.mark.parametrize("n", [5])
def test_subgroup_collectives_and_rank_translation(n):
    check_groups(quiet_run("workers.process_groups", "groups", "--world-size", str(n)), n)


def test_subgroups_under_torchrun():
    result = quiet_run("torch.distributed.run", "--standalone", "--nproc-per-node", "3",
                       "-m", "workers.process_groups", "groups")
    check_groups(result, 3)


def test_a_six_rank_mesh():
    result = quiet_run("workers.process_groups", "mesh", "--world-size", "6", "--timeout", "120")
    by_rank = {e["rank"]: e for e in result.events_named("mesh")}
    assert sorted(by_rank) == list(range(6))
    for rank, e in by_rank.items():
        assert e["coordinate"] == [rank // 2, rank % 2]
        assert e["tp"] == e["subgroup"] == [rank - rank % 2, rank - rank % 2 + 1]
        assert e["dp"] == [rank % 2, rank % 2 + 2, rank % 2 + 4]
        assert e["dp_sum"] == sum(r + 1 for r in e["dp"])


def test_split_group_makes_a_layout_in_one_call():
    """Five ranks: the even ones' group and the odd ones', each summing its members only; or,
    before PyTorch 2.15 (gloo could not split), the same refusal on every rank."""
    result = quiet_run("workers.process_groups", "split", "--world-size", "5", "--timeout", "120")
    by_rank = {e["rank"]: e for e in result.events_named("split")}
    assert sorted(by_rank) == list(range(5))
    if torch.__version__ < (2, 15) and result.backends == ["gloo"]:
        assert all("not safe to split" in e["error"] for e in by_rank.values())
        return
    for rank, e in by_rank.items():
        assert e["error"] is None and e["members"] == list(range(rank % 2, 5, 2))
        assert e["sum"] == sum(r + 1 for r in e["members"])


def test_a_rank_that_skips_new_group_ends_the_job_and_leaves_nothing(tmp_events):
    begin = time.time()
    completed = cli("workers.process_groups", "missing-group", "--world-size", "4",
                    "--events", str(tmp_events))
    assert completed.returncode == 1
    assert "DistStoreError: wait timeout after 1000ms" in completed.stdout
    assert "the other ranks were stopped" in completed.stdout
    assert time.time() - begin < 5 * 1 + 25  # gloo's connect gives up after 5 timeouts
    events = [json.loads(line) for line in tmp_events.read_text().splitlines()]
    pids = [e["pid"] for e in events if e["event"] == "started"]
    assert len(pids) == 4 and not [pid for pid in pids if is_running(pid)]
    worked = {e["rank"]: e["worked"] for e in events if e["event"] == "missing group"}
    assert worked == {0: False, 1: False, 2: False, 3: False}  # every rank reported


def test_the_backend_threads_and_an_async_all_reduce_under_torchrun():
    result = quiet_run("torch.distributed.run", "--standalone", "--nproc-per-node", "3",
                       "-m", "workers.process_groups", "threads", "--numel", "1024")
    by_rank = {e["rank"]: e for e in result.events_named("threads")}
    assert sorted(by_rank) == [0, 1, 2]
    for e in by_rank.values():
        assert e["before"] < e["after_init"] < e["after_group"]  # each group adds threads
        assert e["python_threads"] < e["after_group"]  # threading sees only its own
        assert e["value"] == 3 and e["work"] == "Work" and e["returned"] <= e["done"]


def test_init_process_group_twice_is_refused_until_destroyed():
    """What the chapter's Cleanup section says, in one process."""
    def init():
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}",
                                rank=0, world_size=1)

    init()
    try:
        with pytest.raises(ValueError, match="initialize the default process group twice"):
            init()
    finally:
        dist.destroy_process_group()
    init()  # after destroy_process_group the next job starts as if it were the first
    dist.destroy_process_group()


@pytest.mark.parametrize(
    "demo, options",
    [
        ("groups", {"--world-size", "--backend", "--events", "--timeout"}),
        ("missing-group", {"--group-timeout", "--local-sync", "--world-size", "--backend",
                           "--events", "--timeout"}),
        ("threads", {"--numel", "--world-size", "--backend", "--events", "--timeout"}),
    ],
)
def test_each_demo_documents_only_its_own_options(demo, options, capsys):
    completed = cli_in_process("workers.process_groups", demo, "--help", capsys=capsys)
    assert help_options(completed) == options


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["groups", "--world-size", "1"], "at least 2"),
        (["missing-group", "--world-size", "2"], "at least 3"),
        (["mesh", "--world-size", "5"], "must be even"),
        (["threads", "--numel", "0"], "must be at least 1"),
        (["groups", "--numel", "2"], "unrecognized arguments: --numel"),
        (["overlap"], "invalid choice: 'overlap'"),
        (["backends", "--world-size", "2", "--local-sync"], "unrecognized arguments"),
        (["groups", "--world-size", "64", "--backend", "nccl"], "needs one GPU per rank"),
    ],
)
def test_bad_input_gets_one_line(args, fragment, capsys):
    assert_one_line_error(cli_in_process("workers.process_groups", *args, capsys=capsys), fragment)


def test_thread_names_leave_out_the_threads_python_started():
    """From Python 3.14 on, ``Thread.start`` gives the operating system the thread's name
    (CPython gh-59705), so the book's own threads would show up among the backend's. The
    name is set here as 3.14 sets it, by the thread itself, through /proc (Linux's comm)."""
    named, done = threading.Event(), threading.Event()

    def python_thread():
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write("stop-with-launc")  # what 3.14 gives a thread named stop-with-launcher
        named.set()
        done.wait(10)

    thread = threading.Thread(target=python_thread, name="stop-with-launcher")
    thread.start()
    try:
        assert named.wait(10)
        with open(f"/proc/self/task/{thread.native_id}/comm") as comm:
            assert comm.read().strip() == "stop-with-launc"  # the OS has the name
        assert "stop-with-launc" not in thread_names()
    finally:
        done.set()
        thread.join(10)


@pytest.mark.parametrize("devices, ranks, tried", [(1, 2, False), (2, 2, True), (4, 2, True),
                                                   (None, 2, True), (1, 1, True)])
def test_no_backend_is_tried_only_where_every_rank_can_have_a_device(
        devices, ranks, tried, monkeypatch, tmp_path):
    """Told no backend on a machine with an accelerator, init_process_group sets up its
    backend alone, and nccl gives rank r the GPU r % GPUs at once (BackendConfig and
    _nccl2_device, torch/distributed/distributed_c10d.py): with fewer GPUs than ranks two
    ranks would share one, which NCCL refuses, and the job would end. The accelerator and
    its device count are faked; the probe itself is replaced by a recorder."""
    accelerator = None if devices is None else torch.device("cuda")
    monkeypatch.setattr(torch.accelerator, "current_accelerator",
                        lambda check_available=False: accelerator)
    monkeypatch.setattr(torch.accelerator, "device_count", lambda: devices or 0)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    called = []
    monkeypatch.setattr(workers.process_groups, "no_backend_given",
                        lambda rank, job, events: called.append(rank))
    job = Job(world_size=ranks, backend="gloo", init_method="tcp://127.0.0.1:1",
              timeout=5, started_as_rank=False)
    events = Events(str(tmp_path / "events.jsonl"))
    workers.process_groups.no_backend_where_it_can(0, job, events)
    assert called == ([0] if tried else [])
    if not tried:
        [skipped] = [json.loads(line) for line in (tmp_path / "events.jsonl").open()]
        assert skipped["event"] == "no backend" and skipped["skipped"] is True
        assert (skipped["accelerator"], skipped["backend"]) == ("cuda", "nccl")
        assert (skipped["devices"], skipped["ranks"]) == (devices, ranks)
