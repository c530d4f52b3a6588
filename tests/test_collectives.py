"""workers.collectives: every collective against its definition, p2p, the hand-made ring,
the bandwidth sweep, and bad input."""

from __future__ import annotations

import functools
import operator

import pytest
import torch
from conftest import assert_one_line_error, cli, quiet_run


def start(rank: int, n: int) -> list[float]:
    return [10.0 * (rank + 1) + i for i in range(n)]


def by_rank(result, name: str, **match) -> dict[int, dict]:
    records = [
        e
        for e in result.events_named(name)
        if all(e.get(k) == v for k, v in match.items())
    ]
    return {e["rank"]: e for e in records}


@pytest.fixture(scope="module", params=[2, 3, 4])
def run_collectives(request):
    n = request.param
    return n, quiet_run("workers.collectives", "collectives", "--world-size", str(n))


def test_tensor_collectives_match_their_definitions(run_collectives):
    n, result = run_collectives
    x = {r: start(r, n) for r in range(n)}
    column_sums = [sum(x[r][i] for r in range(n)) for i in range(n)]
    for r in range(n):
        assert by_rank(result, "broadcast")[r]["after"] == x[0]
        assert by_rank(result, "scatter")[r]["after"] == [x[0][r]]
        assert by_rank(result, "all_gather")[r]["after"] == [
            v for s in range(n) for v in x[s]
        ]
        assert by_rank(result, "all_gather_into_tensor")[r]["after"] == [
            v for s in range(n) for v in x[s]
        ]
        assert by_rank(result, "reduce_scatter")[r]["after"] == [column_sums[r]]
        assert by_rank(result, "all_to_all")[r]["after"] == [x[s][r] for s in range(n)]
        assert by_rank(result, "all_gather_object")[r]["after"] == [
            by_rank(result, "all_gather_object")[s]["before"] for s in range(n)
        ]
        assert by_rank(result, "broadcast_object_list")[r]["after"] == [
            {"lr": 0.1, "from": "rank 0"}
        ]
    assert by_rank(result, "gather")[0]["after"] == [x[s][0] for s in range(n)]
    assert by_rank(result, "reduce")[0]["after"] == column_sums


def test_all_reduce_with_every_op(run_collectives):
    n, result = run_collectives
    floats = [start(r, n) for r in range(n)]
    ints = [[1 << r, r + 1] for r in range(n)]
    expected = {
        "SUM": [sum(c) for c in zip(*floats)],
        "PRODUCT": [functools.reduce(operator.mul, c) for c in zip(*floats)],
        "MIN": [min(c) for c in zip(*floats)],
        "MAX": [max(c) for c in zip(*floats)],
        "AVG": [sum(c) / n for c in zip(*floats)],
        "BAND": [functools.reduce(operator.and_, c) for c in zip(*ints)],
        "BOR": [functools.reduce(operator.or_, c) for c in zip(*ints)],
        "BXOR": [functools.reduce(operator.xor, c) for c in zip(*ints)],
    }
    for op in ("SUM", "PRODUCT", "MIN", "MAX"):  # every backend has these
        assert all(
            e["error"] is None for e in by_rank(result, "all_reduce", op=op).values()
        )
    for op, values in expected.items():
        records = by_rank(result, "all_reduce", op=op)
        assert sorted(records) == list(range(n))
        for record in records.values():
            if record["error"]:  # the backend refused this op: every rank says so
                assert all(r["error"] for r in records.values()), op
            else:
                assert record["after"] == pytest.approx(values), op


def test_barrier_releases_every_rank_after_the_last_arrives(run_collectives):
    n, result = run_collectives
    barrier = by_rank(result, "barrier")
    last_arrival = max(e["t"] for e in barrier.values())
    assert all(e["t_end"] >= last_arrival for e in barrier.values())


@pytest.mark.parametrize("n", [2, 3])
def test_point_to_point(n):
    result = quiet_run("workers.collectives", "p2p", "--world-size", str(n))
    recv = by_rank(result, "recv")[1]
    assert (
        recv["value"] == 42 and recv["t_end"] - recv["t"] >= 0.4
    )  # recv blocked for the send
    swaps = by_rank(result, "isend/irecv")
    assert swaps[0]["got"] == 1 and swaps[1]["got"] == 0
    # the token went round the ring: rank r saw 1 + 2 + ... + r, rank 0 the full sum
    ring = by_rank(result, "ring pass")
    assert ring[0]["token"] == sum(range(n))
    assert all(ring[r]["token"] == sum(range(r + 1)) for r in range(1, n))


@pytest.mark.parametrize("n", [2, 3, 4])
def test_ring_by_hand_equals_all_reduce(n):
    result = quiet_run(
        "workers.collectives",
        "ring",
        "--world-size",
        str(n),
        "--numel",
        "100000",
        "--trials",
        "2",
    )
    checks = by_rank(result, "ring check")
    assert sorted(checks) == list(range(n)) and all(c["equal"] for c in checks.values())
    timings = {
        (e["rank"], e["implementation"]) for e in result.events_named("ring timing")
    }
    assert len(timings) == 2 * n


def test_bandwidth_sweep_reports_every_size():
    sizes = ["1024", "65536", "1048576"]
    result = quiet_run(
        "workers.collectives",
        "bandwidth",
        "--sizes",
        *sizes,
        "--warmup",
        "1",
        "--trials",
        "2",
    )
    rank0 = [e for e in result.events_named("bandwidth") if e["rank"] == 0]
    assert [e["size"] for e in rank0] == [int(s) for s in sizes]
    for e in rank0:
        assert e["algbw"] == pytest.approx(e["size"] / e["seconds"])
        assert e["busbw"] == pytest.approx(e["algbw"] * 2 * (2 - 1) / 2)
    assert result.events_named("memcpy")[0]["bandwidth"] > 0


def test_runs_under_torchrun():
    result = quiet_run(
        "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
        "-m", "workers.collectives", "collectives",
    )  # fmt: skip
    assert by_rank(result, "all_reduce", op="SUM")[2]["after"] == [60.0, 63.0, 66.0]


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="this machine has the GPUs")
def test_nccl_without_enough_gpus_says_so():
    assert_one_line_error(
        cli(
            "workers.collectives",
            "collectives",
            "--backend",
            "nccl",
            "--world-size",
            "2",
        ),
        "--backend nccl needs one GPU per rank",
    )


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["collectives", "--world-size", "1"], ["needs peers", "at least 2"]),
        (["collectives", "--world-size", "0"], ["must be at least 1"]),
        (["collectives", "--backend", "mpi"], ["invalid choice: 'mpi'"]),
        (["bandwidth", "--sizes", "1023"], ["multiples of 4"]),
        (["teleport"], ["invalid choice: 'teleport'"]),
    ],
)
def test_bad_input_gets_one_clear_line(args, fragments):
    assert_one_line_error(cli("workers.collectives", *args), *fragments)


def test_eight_ranks():
    result = quiet_run("workers.collectives", "collectives", "--world-size", "8")
    expected = [sum(10.0 * (r + 1) + i for r in range(8)) for i in range(8)]
    sums = by_rank(result, "all_reduce", op="SUM")
    assert sorted(sums) == list(range(8)) and all(
        e["after"] == expected for e in sums.values()
    )
    assert by_rank(result, "all_to_all")[7]["after"] == [
        10.0 * (s + 1) + 7 for s in range(8)
    ]
