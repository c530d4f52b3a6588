"""workers.collectives beyond what its chapter runs: every collective against its definition for
world sizes the page does not use (1, 3 and 8), under torchrun, p2p and the hand-made ring for
other sizes, each demo's --help, and bad input."""

from __future__ import annotations

import functools
import json
import operator
import os
import subprocess
import sys

import pytest
import torch
from workers.collectives import ones_mismatches
from workers.ranks import free_port

from helpers import assert_one_line_error, cli_in_process, help_options, quiet_run


def start(rank: int, n: int) -> list[float]:
    return [10.0 * (rank + 1) + i for i in range(n)]


def by_rank(result, name: str, **match) -> dict[int, dict]:
    records = [e for e in result.events_named(name)
               if all(e.get(k) == v for k, v in match.items())]
    return {e["rank"]: e for e in records}


def check_every_collective(result, n: int, roots=(0,)) -> None:
    """Each collective's result on every rank against its definition (those with a root from
    each root); a collective the backend refused must be refused on every rank (and the basic
    ones never are)."""
    x = {r: start(r, n) for r in range(n)}
    column_sums = [sum(x[r][i] for r in range(n)) for i in range(n)]
    expected = {
        "all_gather": lambda r: [v for s in range(n) for v in x[s]],
        "all_gather_single": lambda r: [v for s in range(n) for v in x[s]],
        "reduce_scatter": lambda r: [column_sums[r]],
        "reduce_scatter_single": lambda r: [column_sums[r]],
        "all_to_all": lambda r: [x[s][r] for s in range(n)],
        "all_to_all_single": lambda r: [x[s][r] for s in range(n)],
        # rank s sent s + 1 copies of its value for r, after a size exchange
        "all_to_all_uneven": lambda r: [x[s][r] for s in range(n) for _ in range(s + 1)],
        "all_reduce": lambda r: column_sums,
    }
    for name, definition in expected.items():
        records = by_rank(result, name)
        assert sorted(records) == list(range(n)), name
        if any(e["error"] for e in records.values()):
            assert all(e["error"] for e in records.values()), name
            assert name not in ("broadcast", "all_gather", "all_reduce",
                                "all_to_all_single"), records[0]["error"]
            continue
        for r in range(n):
            assert records[r]["after"] == definition(r), (name, r)
    for root in roots:
        assert all(e["after"] == x[root] for e in by_rank(result, "broadcast", root=root).values())
        assert all(e["after"] == [x[root][r]]
                   for r, e in by_rank(result, "scatter", root=root).items())
        for name, on_root in (("gather", [x[s][0] for s in range(n)]), ("reduce", column_sums)):
            records = by_rank(result, name, root=root)
            assert sorted(records) == list(range(n)), name
            assert records[root]["after"] == on_root, (name, root)
            assert all(e["after"] is None for r, e in records.items() if r != root), name
    floats = [start(r, n) for r in range(n)]
    ints = [[1 << r, r + 1] for r in range(n)]
    reduced = {
        "SUM": [sum(c) for c in zip(*floats)],
        "PRODUCT": [functools.reduce(operator.mul, c) for c in zip(*floats)],
        "MIN": [min(c) for c in zip(*floats)],
        "MAX": [max(c) for c in zip(*floats)],
        "AVG": [sum(c) / n for c in zip(*floats)],
        "BAND": [functools.reduce(operator.and_, c) for c in zip(*ints)],
        "BOR": [functools.reduce(operator.or_, c) for c in zip(*ints)],
        "BXOR": [functools.reduce(operator.xor, c) for c in zip(*ints)],
    }
    for op, values in reduced.items():
        records = by_rank(result, "all_reduce ops", op=op)
        assert sorted(records) == list(range(n))
        if op in ("SUM", "PRODUCT", "MIN", "MAX"):  # every backend has these
            assert all(e["error"] is None for e in records.values()), op
        for record in records.values():
            if record["error"]:  # the backend refused this op: every rank says so
                assert all(r["error"] for r in records.values()), op
            else:
                assert record["after"] == pytest.approx(values), op
    barrier = by_rank(result, "barrier")
    assert all(e["t_end"] >= max(b["t"] for b in barrier.values()) for e in barrier.values())
    # what each rank says it did is what it recorded: the count, and the tensor SUM gave
    recorded = [e for e in result.events if "t_end" in e]  # one span per operation
    for r, summary in by_rank(result, "summary").items():
        assert summary["operations"] == sum(1 for e in recorded if e["rank"] == r)
        assert summary["all_reduce_sum"] == reduced["SUM"]


@pytest.mark.parametrize("n", [1, 8])
def test_every_collective_matches_its_definition(n):
    roots = sorted({0, n // 2, n - 1})  # the page uses 0 and the last rank only
    result = quiet_run("workers.collectives", "collectives", "--world-size", str(n), "--roots",
                       *map(str, roots))
    check_every_collective(result, n, roots)


def test_every_collective_under_torchrun():
    result = quiet_run("torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                       "-m", "workers.collectives", "collectives")
    check_every_collective(result, 2)


@pytest.mark.parametrize("n", [5])
def test_point_to_point_and_the_token_ring(n):
    result = quiet_run("workers.collectives", "p2p", "--world-size", str(n))
    measured = by_rank(result, "p2p")
    # recv blocked for the send rank 0 made after 0.5 s; isend/irecv swapped the values
    assert measured[1]["received"] == 42 and measured[1]["recv_blocked"] >= 0.4
    if result.backends == ["gloo"]:  # gloo's send waits for rank 1's late recv
        assert measured[0]["send_blocked"] >= 0.4
    assert measured[0]["got"] == 1 and measured[1]["got"] == 0
    # the token went round the ring: rank r saw 1 + 2 + ... + r, rank 0 the full sum
    assert measured[0]["token"] == sum(range(n))
    assert all(measured[r]["token"] == sum(range(r + 1)) for r in range(1, n))


@pytest.mark.parametrize("n", [3])
def test_each_collective_on_ones_gives_its_definition(n):
    """The example on tensors of ones at a world size the page does not use: rank 0
    broadcasting 2 and scattering [1, ..., n], every output buffer starting at zeros."""
    result = quiet_run("workers.collectives", "ones", "--world-size", str(n))
    held = by_rank(result, "ones")
    assert ones_mismatches(held, n) == []
    assert held[1]["gather"] == {"before": None, "after": None}  # no buffer off the root


# Each rank of the run below makes the ones example once as it is and once with each
# collective replaced, on every rank, by a function that does nothing.
NO_OP_RANK = """
import json, os, sys
import torch, torch.distributed as dist
from workers.collectives import ones
rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=n)
for name in [None, "reduce", "all_reduce", "gather", "all_gather", "broadcast", "scatter"]:
    real = getattr(dist, name) if name else None
    if name:
        setattr(dist, name, lambda *args, **kwargs: None)
    held = ones(rank, n, torch.device("cpu"))
    if name:
        setattr(dist, name, real)
    print(json.dumps({"rank": rank, "replaced": name, "held": held}), flush=True)
dist.destroy_process_group()
"""


def test_the_ones_check_fails_when_a_collective_does_nothing():
    """The page's check of the ones example (``ones_mismatches``) can fail: with any one of
    its six collectives replaced by a no-op on every rank, it names that collective, and
    the same ranks, unpatched, pass it."""
    n, port = 2, free_port()
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "WORLD_SIZE": str(n)}
    ranks = [subprocess.Popen([sys.executable, "-c", NO_OP_RANK], env={**env, "RANK": str(r)},
                              stdout=subprocess.PIPE, text=True) for r in range(n)]
    try:
        outputs = [rank.communicate(timeout=120)[0] for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()
    assert [rank.returncode for rank in ranks] == [0] * n
    runs = {}  # replaced collective -> rank -> what it held
    for line in "".join(outputs).splitlines():
        record = json.loads(line)
        runs.setdefault(record["replaced"], {})[record["rank"]] = record["held"]
    assert ones_mismatches(runs.pop(None), n) == []
    assert len(runs) == 6
    for name, held in runs.items():
        wrong = ones_mismatches(held, n)
        assert wrong and all(f" {name} after" in line for line in wrong), (name, wrong)


@pytest.mark.parametrize("n", [3])
def test_ring_by_hand_equals_all_reduce(n):
    result = quiet_run("workers.collectives", "ring", "--world-size", str(n), "--numel", "1000",
                       "--trials", "1")
    checks = by_rank(result, "ring check")
    assert sorted(checks) == list(range(n)) and all(c["equal"] for c in checks.values())
    # the first half alone: rank r finished chunk (r + 1) % n, as the page's code says
    assert all(c["scattered"] and c["chunk"] == (r + 1) % n for r, c in checks.items())
    timings = result.events_named("ring timing")  # every trial is kept, for the spread
    assert len(timings) == 2 * n and all(len(e["seconds"]) == 1 for e in timings)


def test_the_bandwidth_demo_measures_two_reference_points_beside_it():
    """The copy on every rank at once and the plain TCP stream from rank 0 to rank 1, in the
    same run as gloo's all_reduce: every field there, every trial timed, the rates sane."""
    sizes, trials = [1024, 65536], 2
    result = quiet_run("workers.collectives", "bandwidth", "--world-size", "3", "--backend",
                       "gloo", "--sizes", *map(str, sizes), "--warmup", "1", "--trials",
                       str(trials))
    assert result.backends == ["gloo"]
    gloo = result.events_named("bandwidth")
    assert sorted((e["rank"], e["size"]) for e in gloo) == [(r, s) for r in range(3)
                                                             for s in sizes]
    copies = by_rank(result, "copy")
    assert sorted(copies) == [0, 1, 2]  # every rank copied, at the same time
    for e in copies.values():
        assert {"size", "seconds", "world_size", "threads", "device"} <= set(e), e
        assert (e["size"], e["world_size"], e["threads"], e["device"]) == (max(sizes), 3, 1,
                                                                            "cpu")
        assert len(e["seconds"]) == trials  # timed as many times as gloo
    streams = result.events_named("tcp")
    assert sorted((e["rank"], e["size"]) for e in streams) == [(r, s) for r in (0, 1)
                                                                for s in sizes]
    for e in [*copies.values(), *streams]:
        assert all(0 < seconds < 10 for seconds in e["seconds"]), e
        rates = [e["size"] / seconds for seconds in e["seconds"]]
        assert all(1e4 < rate < 1e13 for rate in rates), e  # 10 kB/s to 10 TB/s: sane
    assert all(len(e["seconds"]) == trials for e in [*gloo, *streams])


@pytest.mark.parametrize(
    "demo, options",
    [
        ("p2p", {"--world-size", "--backend", "--events", "--timeout"}),
        ("ring", {"--numel", "--trials", "--world-size", "--backend", "--events", "--timeout"}),
        ("bandwidth", {"--sizes", "--warmup", "--trials", "--world-size", "--backend",
                       "--events", "--timeout"}),
    ],
)
def test_each_demo_documents_only_its_own_options(demo, options, capsys):
    completed = cli_in_process("workers.collectives", demo, "--help", capsys=capsys)
    assert help_options(completed) == options


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["p2p", "--world-size", "1"], ["at least 2", "got 1"]),
        (["collectives", "--world-size", "0"], ["must be at least 1"]),
        (["collectives", "--world-size", "65"], ["at most 64 ranks"]),
        (["collectives", "--backend", "mpi"], ["invalid choice: 'mpi'"]),
        (["bandwidth", "--sizes", "1023"], ["multiples of 4"]),
        (["collectives", "--world-size", "2", "--roots", "2"], ["--roots", "0 to 1"]),
        (["p2p", "--numel", "5"], ["unrecognized arguments: --numel"]),
        (["teleport"], ["invalid choice: 'teleport'"]),
    ],
)
def test_bad_input_gets_one_clear_line(args, fragments, capsys):
    assert_one_line_error(cli_in_process("workers.collectives", *args, capsys=capsys), *fragments)


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="this machine has the GPUs")
def test_nccl_without_enough_gpus_says_so(capsys):
    completed = cli_in_process("workers.collectives", "collectives", "--backend", "nccl",
                               "--world-size", "2", capsys=capsys)
    assert_one_line_error(completed, "--backend nccl needs one GPU per rank")
