"""Lab ring (collectives): a ring all-reduce from isend and irecv.

Every rank starts from a tensor of whole numbers of its own (so any order of additions
gives the same sum, exactly), and must end with the sum dist.all_reduce gives. The
traffic is the lesson: a ring sends 2(N-1) messages of 1/N of the tensor per rank, to one
neighbour, and receives them from the other. Whole tensors sent round the ring give the
right sum at N/2 times the traffic, and fail here. So does a ring that gets the right sum
by luck: one that changes a chunk its isend is still sending, or receives into a buffer
an earlier isend or irecv still uses, before wait() (the checker compares what each send
used before and at its wait, and the addresses of every buffer in flight). The chunk
length and the values are random.

The contract (labs/ring.py), clause by clause, and what checks each:

- Every rank's tensor holds the element-wise sum, exactly: compared with dist.all_reduce of
  the same start, whole numbers so any order of additions is exact.
- In place: the tensor given is a view into a longer one, and the result is read through
  another view taken before the call; rebinding ``tensor.data`` fails, and so does writing
  beside the tensor.
- Lengths are a positive multiple of N, from one element a chunk up: one element a chunk
  at 2 ranks, drawn from the seed at 3, two elements a chunk or more at 5.
- 2(N-1) messages of 1/N of the tensor per rank: every send counted, with its bytes.
- To one neighbour, from the other, either way round: the peers of the sends, and the real
  sender of each receive (a receive that names no source counts the rank it came from).
- Nothing in flight is touched before wait(): each send's tensor compared at its wait,
  every buffer's addresses against the Works still in flight, every Work followed; an
  irecv's buffer holds NaN until its wait() lands the data, so a read before shows.
- isend, irecv, send, recv or batch_isend_irecv only: every collective, by any name, fails.
- World sizes 2, 3 and 5.
"""

from __future__ import annotations

from workers.labs.harness import (
    POINT_TO_POINT,
    Finding,
    all_reduced_in_place,
    forbidden_finding,
    in_place_finding,
    integer_values,
    list_of,
    wait_findings,
)

CHAPTER = "collectives"
FUNCTION = "ring_all_reduce"
ASKS = "a ring all-reduce from isend/irecv: 2(N-1) messages of 1/N of the tensor per rank"
REREAD = '"A ring all-reduce by hand" in the collectives chapter'
PASSED = "is a ring all-reduce"
WORLD_SIZES = (2, 3, 5)  # the page runs 4 ranks
GROUP = True
PRELOAD = ()
TIMEOUT = 6.0


def setup(world_size: int, rng) -> dict:
    # one element a chunk at 2 ranks (the smallest tensor the lab allows); from one to a
    # few at 3, and two or more at 5, so that a chunk split in two messages shows
    low, high = {2: (1, 1), 5: (2, 6)}.get(world_size, (1, 6))
    return {"numel": rng.randint(low, high) * world_size, "seed": rng.randrange(1_000_000)}


def describe(world_size: int, given: dict) -> str:
    return f", {given['numel']} elements"


def start_values(rank: int, given: dict):
    return integer_values(given["seed"] + rank, given["numel"])


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    return all_reduced_in_place(rank, given["seed"], given["numel"], solution, calls)


def judge(world_size: int, outcome, given: dict) -> list:
    forbidden = forbidden_finding(outcome, POINT_TO_POINT, "a ring by hand uses only "
                                  "isend and irecv (or send and recv), no collective")
    if forbidden:
        return [forbidden]
    waits = wait_findings(outcome)
    if any(not finding.held for finding in waits):  # the cause of any wrong sum
        return waits
    findings = [result_finding(world_size, outcome, given)]
    findings += traffic_findings(world_size, outcome)
    return findings + waits


def result_finding(world_size: int, outcome, given: dict) -> Finding:
    import torch

    for rank, result in sorted(outcome.results.items()):
        got, expected = result["result"], result["expected"]
        placed = in_place_finding(rank, result, start_values(rank, given))
        if placed:
            return placed
        if torch.equal(got, expected):
            continue
        if torch.allclose(got * world_size, expected):
            return Finding(False, f"rank {rank} holds the mean, not the sum: the ring sums "
                                  f"(do not divide by the world size)")
        wrong = [i for i, (a, b) in enumerate(zip(got.chunk(world_size),
                                                  expected.chunk(world_size)))
                 if not torch.equal(a, b)]
        chunks = f"chunk{'s' * (len(wrong) > 1)} {list_of(wrong)} of {world_size}"
        if torch.isnan(got).any():
            return Finding(False, f"rank {rank} holds NaN in {chunks}: it read a buffer "
                                  f"that an irecv was still receiving into, before that "
                                  f"Work's wait() returned (the data may land at any "
                                  f"moment until then; the checker lands it at wait(), "
                                  f"and leaves NaN before)")
        return Finding(False, f"rank {rank} holds a wrong sum in {chunks}: a chunk index "
                              f"is off; check which chunk each step sends, adds to, and "
                              f"copies")
    return Finding(True, "every rank holds the sum that dist.all_reduce gives")


def traffic_findings(world_size: int, outcome) -> list:
    n = world_size
    expected_fraction, expected_messages = 2 * (n - 1) / n, 2 * (n - 1)
    for rank, result in sorted(outcome.results.items()):
        sends = [c for c in result["calls"] if c["name"] in ("isend", "send")]
        receives = [c for c in result["calls"] if c["name"] in ("irecv", "recv")]
        fraction = sum(c["sent"] for c in sends) / result["bytes"]
        said = (f"rank {rank} sent {fraction:.2f} of the tensor in {len(sends)} "
                f"message{'s' * (len(sends) != 1)}; "
                f"a ring sends 2(N-1)/N = {expected_fraction:.2f} of it in 2(N-1) = "
                f"{expected_messages} messages of 1/N each")
        if sends and max(c["sent"] for c in sends) >= result["bytes"]:
            return [Finding(False, f"{said}: whole tensors went round the ring; send one "
                                   f"chunk of 1/N per step")]
        if abs(fraction - expected_fraction) <= 1e-9 and len(sends) > expected_messages:
            return [Finding(False, f"{said}: the right bytes in more messages than a ring "
                                   f"sends, each one a latency more; send each chunk in "
                                   f"one message")]
        if len(sends) != expected_messages or abs(fraction - expected_fraction) > 1e-9:
            return [Finding(False, said)]
        right, left = (rank + 1) % n, (rank - 1) % n
        to = {c["peer"] for c in sends}
        came = {c["peer"] for c in receives}
        if not (to == {right} and came == {left} or to == {left} and came == {right}):
            return [Finding(False, f"rank {rank} sent to {list_of(sorted(to, key=str))} "
                                   f"and received from "
                                   f"{list_of(sorted(came, key=str))}: in a "
                                   f"ring each rank sends to one neighbour only, and "
                                   f"receives from the other")]
    return [Finding(True, f"each rank sent {expected_fraction:.2f} of the tensor in "
                          f"{expected_messages} messages to one neighbour (a ring: "
                          f"2(N-1)/N in 2(N-1))")]
