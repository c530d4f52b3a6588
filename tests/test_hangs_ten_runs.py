"""The diagnosis of workers.hangs, ten runs of every kind of hang at 2, 3 and 4 ranks (slow;
a file of its own, so that pytest -n 2 --dist loadfile runs it beside test_hangs.py's other
tests instead of after them)."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pytest
from workers import hangs

from test_hangs import check_verdict, diagnose_every_kind


@pytest.mark.slow
@pytest.mark.repeats
@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_ten_runs_of_every_kind_at_each_world_size(world_size):
    chooser = random.Random(world_size)
    culprits = [1 if world_size == 2 else chooser.randrange(world_size) for _ in range(10)]
    # two jobs at a time: most of a run is waiting (for the hang to settle, for the dumps)
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda culprit: diagnose_every_kind(world_size, culprit),
                             culprits))
    for culprit, verdicts in zip(culprits, runs):
        for kind, verdict in zip(hangs.KINDS, verdicts):
            check_verdict(verdict, kind, world_size, culprit)
