"""The fault-tolerance chapter's three runs, each ten times over, two copies side by side (so
each shares the machine with the other, as the page's runs share CI's with the tests), and
every invariant the page asserts checked each time: that none of them depends on how fast a
run went. A file of its own, so that pytest -n 2 --dist loadfile runs it beside the others.

REPEATS=2 in the environment runs each twice instead (a quick look before the long run)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from workers import fault_tolerance as ft

from helpers import quiet_run

pytestmark = [pytest.mark.slow, pytest.mark.repeats,
              pytest.mark.skipif(ft.torchft_missing(imported=False) is not None,
                                 reason="torchft has no wheel for this Python")]
REPEATS = int(os.environ.get("REPEATS", "10"))
# the page's runs, with the page's options; --timeout well past the page's, for the load
BY_HAND = ("by-hand", "--steps", "400", "--kill-at-step", "200", "--no-start-again",
           "--timeout", "240")
COMPARE = ("compare", "--steps", "150", "--kill-at-step", "50", "--checkpoint-every", "20",
           "--rejoin-after", "25", "--heartbeat-timeout", "1.0", "--timeout", "240")
MODEL_ONLY = ("torchft", "--heal-model-only", "--steps", "80", "--kill-at-step", "10",
              "--rejoin-after", "10", "--timeout", "240")


def side_by_side(run_once) -> list:
    """``run_once()`` REPEATS times, two at a time."""
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda _: run_once(), range(REPEATS)))


def check_by_hand(events: list[dict]) -> None:
    printed = [e for e in events if e["event"] == "printed"]
    [killed] = [e for e in events if e["event"] == "killed"]
    assert killed["rank"] == 1 and killed["step"] >= 200
    group_0 = [e for e in printed if e["rank"] == 0]
    # group 0 went on to the end (a step it could not commit prints its count again)
    assert sorted({e["step"] for e in group_0}) == [100, 200, 300, 400]
    assert group_0[0]["participants"] == 2  # together until group 1's line of step 200
    assert not [e for e in printed if e["rank"] == 1 and e["incarnation"] == 1]


def check_compare(events: list[dict]) -> None:
    finals = {name: {e["digest"] for e in ft.of_job(events, name)
                     if e["event"] == "finished"} for name in ft.JOBS}
    assert len(finals["ddp"]) == 1 and finals["torchrun"] == finals["ddp"]
    assert finals["torchft-reference"] == finals["ddp"]
    assert len(finals["torchft"]) == 1 and finals["torchft"] != finals["ddp"], finals
    ended = {e["step"] for e in ft.of_job(events, "torchft") if e["event"] == "finished"}
    assert len(ended) == 1 and min(ended) >= 150
    torchrun, torchft = ft.recovery(events, "torchrun"), ft.recovery(events, "torchft")
    # each went on with the step the job had to do next, begun after the kill: torchrun's
    # from its checkpoint, torchft's the one group 0 was in when group 1 died
    assert torchrun["went_on_from"] == 40 and torchft["went_on_from"] == 50
    assert torchft["steps_lost"] == 0 and torchrun["steps_lost"] == 10
    [resumed] = {e["step"] for e in ft.of_job(events, "torchrun") if e["event"] == "resumed"}
    assert resumed == 40  # the checkpoint before the kill in step 50, every 20 steps
    heals = ft.heals(events)
    back, _ = ft.came_back(heals, events)
    assert back and all(h["rank"] == 1 and h["sender"] == 0 and h["step"] >= 75
                        for h in back)
    for heal in heals:  # a late first quorum or a missed commit heals a group too
        assert heal["sender"] not in (None, heal["rank"])
        assert heal["digest"] == heal["sent_digest"] == heal["loaded_digest"]
        assert heal["bytes"] == heal["sent_bytes"] and heal["momentum_buffers"] == 4


def check_model_only(events: list[dict]) -> None:
    heals = [e for e in events if e["event"] == "healed"]
    assert heals and all(e["momentum_buffers"] == 0 and e["model_tensors"] == 4
                         for e in heals)
    finals = [e for e in events if e["event"] == "finished"]
    assert len({e["digest"] for e in finals}) == 2 and len({e["step"] for e in finals}) == 1


@pytest.mark.parametrize("demo, check, expected", [
    (BY_HAND, check_by_hand, {}),
    (COMPARE, check_compare, {"timeout": 300}),
    (MODEL_ONLY, check_model_only,
     {"expect_returncode": 1, "expect_output": "final weights differ"}),
], ids=["by-hand", "compare", "heal-model-only"])
def test_the_chapter_runs_ten_times_two_at_a_time(demo, check, expected):
    runs = side_by_side(lambda: quiet_run("workers.fault_tolerance", *demo, **expected))
    for result in runs:
        check(result.events)
