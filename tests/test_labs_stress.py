"""The labs' verdicts do not depend on luck: ten runs of one solution with one seed give one
verdict, for the labs where timing, threads or a hang could make them differ (a barrier's
late rank, Hogwild's racing processes, a deadlock stopped by the checker, a hook run by DDP's
backward). Slow (about a minute): tests/test_labs.py keeps one such check in the fast loop.
"""

from __future__ import annotations

import pytest
from workers.labs import check
from workers.labs.harness import start_forkserver

from test_labs import SEED, SOLUTIONS, normalized, ranks_left

pytestmark = [pytest.mark.slow, pytest.mark.repeats]

# lab, solution, the world sizes it runs at, a fragment of the verdict every run must give
CASES = [
    ("barrier", "wrong_sleeps", (2,), "slept 0.50 s (time.sleep)"),
    ("barrier", "reference", (3,), "PASSED"),
    ("hogwild", "wrong_reversed", (4,), "reverse order"),
    ("hogwild", "reference", (4,), "PASSED"),
    ("ring", "wrong_deadlock", (3,), "every rank was waiting to receive"),
    ("uneven", "wrong_empty_returns_early", (3,), "without joining the all_reduce"),
    ("comm_hook", "wrong_spins_until_done", (2,), "waited inside itself"),
    ("zero1", "wrong_whole_parameters", (2,), "of the Adam state ("),
]


@pytest.mark.parametrize("lab, solution, sizes, said", CASES)
def test_ten_runs_of_one_seed_give_one_verdict(lab, solution, sizes, said):
    start_forkserver()
    verdicts = set()
    for _ in range(10):
        verdict = check(lab, SOLUTIONS / lab / f"{solution}.py", world_sizes=sizes,
                        seed=SEED)
        assert said in " ".join(str(verdict).split()), str(verdict)
        verdicts.add(normalized(verdict))
    assert len(verdicts) == 1, verdicts
    assert ranks_left() == []
