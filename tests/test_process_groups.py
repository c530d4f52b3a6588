"""workers.process_groups: subgroup collectives and rank translation, meshes, the backend
table, overlap measured against blocking, cleanup, and bad input."""

from __future__ import annotations

import json
import time

import pytest
from conftest import assert_one_line_error, cli, is_running, quiet_run

from workers.process_groups import subgroup_layout


@pytest.mark.parametrize("n", [2, 3, 4])
def test_subgroup_collectives_and_rank_translation(n):
    result = quiet_run("workers.process_groups", "groups", "--world-size", str(n))
    layout = {"world": list(range(n)), **subgroup_layout(n)}
    records = result.events_named("member")
    assert len(records) == n * len(layout)  # every rank reported on every group
    for e in records:
        members = layout[e["group"]]
        assert e["members"] == members
        if e["rank"] not in members:
            assert e["group_rank"] == -1
            continue
        assert e["group_rank"] == members.index(e["rank"])
        assert e["group_size"] == len(members)
        assert e["first_global"] == members[0]
        assert e["sum"] == sum(r + 1 for r in members)  # only the members took part
        assert e["broadcast"] == members[0]


def test_a_rank_that_skips_new_group_ends_the_job_within_the_timeout(tmp_events):
    begin = time.time()
    completed = cli("workers.process_groups", "missing-group", "--world-size", "3",
                    "--timeout", "2", "--events", str(tmp_events))  # fmt: skip
    seconds = time.time() - begin
    assert completed.returncode == 1
    assert "DistStoreError: wait timeout after 2000ms" in completed.stdout
    assert "the other ranks were stopped" in completed.stdout
    assert seconds < 2 + 20  # its own timeout, plus starting three ranks
    events = [json.loads(line) for line in tmp_events.read_text().splitlines()]
    pids = [e["pid"] for e in events if e["event"] == "started"]
    assert len(pids) == 3 and not [pid for pid in pids if is_running(pid)]


def test_device_mesh_rows_and_columns():
    result = quiet_run("workers.process_groups", "mesh", "--world-size", "4")
    by_rank = {e["rank"]: e for e in result.events_named("mesh")}
    assert sorted(by_rank) == [0, 1, 2, 3]
    for rank, e in by_rank.items():
        assert e["coordinate"] == [rank // 2, rank % 2]
        assert e["tp"] == e["subgroup"] == [rank - rank % 2, rank - rank % 2 + 1]
        assert e["dp"] == [rank % 2, rank % 2 + 2]
        assert e["tp_sum"] == sum(r + 1 for r in e["tp"])
        assert e["dp_sum"] == sum(r + 1 for r in e["dp"])


def test_backend_table_is_measured_on_every_rank():
    result = quiet_run("workers.process_groups", "backends", "--world-size", "2")
    built = result.events_named("available")[0]["built"]
    assert built["gloo"] is True
    support = result.events_named("support")
    gloo_cpu = {(e["rank"], e["op"]): e["error"] for e in support
                if e["backend"] == "gloo" and e["device"] == "cpu"}  # fmt: skip
    for op in ["send/recv", "broadcast", "all_reduce", "all_gather", "barrier"]:
        assert gloo_cpu[(0, op)] is None and gloo_cpu[(1, op)] is None, op
    dtypes = result.events_named("dtype")
    for dtype in {e["dtype"] for e in dtypes}:  # both ranks saw the same outcome
        outcomes = {e["error"] is None for e in dtypes
                    if e["dtype"] == dtype and e["backend"] == "gloo" and e["device"] == "cpu"}  # fmt: skip
        assert len(outcomes) == 1, dtype
    assert any(e["dtype"] == "float32" and e["error"] is None for e in dtypes)


def test_overlapped_all_reduce_is_faster_than_blocking():
    result = quiet_run("workers.process_groups", "overlap", "--world-size", "2")
    step = {}
    for e in result.events_named("step time"):
        step.setdefault(e["mode"], []).append(e["seconds"])
    ratio = max(step["overlapped"]) / max(step["blocking"])
    # about 0.7 on an idle 2-core machine; 0.9 leaves room for a loaded one
    assert ratio < 0.9, step
    # the recorded step shows the all_reduces running while the rank computed
    spans = [
        e for e in result.events if e.get("mode") == "overlapped" and e["rank"] == 0
    ]
    computing = [e for e in spans if e["event"] == "compute"]
    sending = [e for e in spans if e["event"] == "all_reduce"]
    assert any(s["t"] < c["t"] < s["t_end"] for s in sending for c in computing)


def test_destroy_process_group_lets_a_second_job_start():
    clean = quiet_run("workers.process_groups", "cleanup", "--world-size", "2")
    assert [e["value"] for e in clean.events_named("second job")] == [4.0, 4.0]
    leaky = quiet_run("workers.process_groups", "cleanup", "--world-size", "2", "--no-destroy",
                      expect_returncode=1)  # fmt: skip
    errors = {e["error"] for e in leaky.events_named("second job")}
    assert errors == {"trying to initialize the default process group twice!"}


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["groups", "--world-size", "1"], "at least 2"),
        (["missing-group", "--world-size", "2"], "at least 3"),
        (["mesh", "--world-size", "6"], None),
        (["mesh", "--world-size", "5"], "must be even"),
        (["overlap", "--buckets", "0"], "must be at least 1"),
        (
            ["groups", "--world-size", "64", "--backend", "nccl"],
            "needs one GPU per rank",
        ),
    ],
)
def test_bad_input_gets_one_line(args, fragment):
    completed = cli("workers.process_groups", *args)
    if fragment is None:  # a valid layout: it runs
        assert completed.returncode == 0, completed.stderr
    else:
        assert_one_line_error(completed, fragment)
