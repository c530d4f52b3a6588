"""Every outcome of every verdict a page can glue, rendered from numbers other machines might
measure: a sentence never seen on the 2 cores that build the book in CI is still true and well
formed. ``workers.verdicts`` refuses an outcome a function did not declare, and this test
renders each declared one from its example, so every sentence a page can show is rendered here.
"""

from __future__ import annotations

import re

import pytest
from workers.verdicts import REGISTRY, Verdict, all_verdicts, faster, order, verdict

VERDICTS = all_verdicts()
CASES = [(name, outcome) for name, (_, examples) in sorted(VERDICTS.items())
         for outcome in examples]


def test_every_chapter_that_measures_has_verdicts():
    chapters = {name.split(".")[2] for name in VERDICTS if name.count(".") > 2}
    assert chapters, "no chapter registers a verdict"


@pytest.mark.parametrize("name, outcome", CASES, ids=[f"{n.split('.', 2)[2]}:{o}"
                                                       for n, o in CASES])
def test_every_outcome_renders_a_well_formed_sentence(name, outcome):
    function, examples = VERDICTS[name]
    result = function(**examples[outcome])
    assert isinstance(result, Verdict) and result.outcome == outcome, result
    text = str(result)
    assert text.strip() == text and len(text) > 10, text
    assert not re.search(r"[{}]|\bnan\b|\binf\b|None|  |\.\.(?!\.)", text), text
    assert text.count("(") == text.count(")"), text
    same_twice = r"(?<![\d.,])(\d[\d,.]*\d|\d) to \1(?![\d,]|\.\d)"  # "1.17 to 1.17"
    assert not re.search(same_twice, text), text


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_every_function_gives_each_declared_outcome_a_sentence_of_its_own(name):
    function, examples = VERDICTS[name]
    texts = {str(function(**kwargs)) for kwargs in examples.values()}
    assert len(texts) == len(examples), f"{name}: two outcomes share a sentence"


def test_an_undeclared_outcome_is_refused():
    @verdict(yes=dict(x=1))
    def undeclared(x):
        return Verdict("yes" if x else "no", "a sentence for the page")

    try:
        assert str(undeclared(1)) == "a sentence for the page"
        with pytest.raises(ValueError, match="does not declare"):
            undeclared(0)
    finally:
        REGISTRY.pop(f"{undeclared.__module__}.{undeclared.__qualname__}")


def test_order_is_inside_whenever_the_ranges_touch():
    assert order([1, 2], [3, 4]) == "lower" and order([3, 4], [1, 2]) == "higher"
    assert order([1, 3], [3, 4]) == "inside" and order([1, 5], [2, 3]) == "inside"
    assert faster([1, 3], [3, 4], "a", "b", "it").outcome == "inside"


def test_several_unhealthy_ranks_are_named_as_a_list():
    from workers.verdicts.hangs import health_check

    sick = '{"healthy":false,"unhealthy_backends":["gloo"]}'
    answers = {"0": '{"healthy":true,"unhealthy_backends":[]}', "1": sick, "2": sick,
               "10": sick}
    assert str(health_check(answers)) == ("c10d_health_check called ranks 1, 2 and 10 "
                                          "unhealthy while the job hung")
    assert "called rank 1 unhealthy" in str(health_check({"0": sick.replace("false", "true"),
                                                          "1": sick}))


def test_the_oversubscription_verdict_takes_runs_without_a_context_switch():
    """On an idle 4- to 7-core box the rule at 4 processes is one thread per process with a
    core to itself, whose few steps may see no context switch at all: no division by it."""
    from workers.verdicts.hogwild import oversubscription

    common = dict(processes=4, cores=2, default_threads=2, rule=1,
                  default_named="PyTorch's default of 2 threads",
                  rule_rates=[3800.0, 3900.0], default_rates=[300.0, 320.0],
                  busy_default=1.95, busy_rule=1.9)
    none = oversubscription(**common, switches_default=120.0, switches_rule=0.0)
    assert none.outcome == "faster_kept_none" and "none at all" in str(none)
    both = oversubscription(**common, switches_default=0.0, switches_rule=0.0)
    assert both.outcome == "faster_kept_few" and "0 against 0 with the rule" in str(both)


def test_the_default_thread_count_names_who_set_it():
    from workers.verdicts.hogwild import thread_default

    assert str(thread_default(1, {})) == "PyTorch's default of 1 thread"
    assert str(thread_default(8, {"OMP_NUM_THREADS": "8"})) == (
        "the 8 threads that OMP_NUM_THREADS=8 in this build's environment sets")
    assert "PyTorch" not in str(thread_default(1, {"MKL_NUM_THREADS": "1"}))
    # a wheel that keeps to its cores does not take a larger count: PyTorch chose
    assert str(thread_default(2, {"OMP_NUM_THREADS": "4"})).startswith("the 2 threads PyTorch")


def test_ranges_that_meet_as_printed_are_told_apart_only_just():
    # apart by order(), yet the page prints them touching: 0.3412 and 0.3414 both read 0.34
    from workers.verdicts import meet_as_shown
    from workers.verdicts.pipelines import against_gpipe, bubble_shrinks
    from workers.verdicts.sharding import reshard_timing

    two = lambda v: f"{v:.2f}"  # noqa: E731
    assert order([0.28, 0.3412], [0.3414, 0.37]) == "lower"
    assert meet_as_shown([0.28, 0.3412], [0.3414, 0.37], two)
    assert not meet_as_shown([0.28, 0.33], [0.3414, 0.37], two)
    touching = [against_gpipe([0.28, 0.33, 0.3412], [0.3414, 0.37, 0.37]),
                against_gpipe([0.3414, 0.37], [0.28, 0.3412]),
                bubble_shrinks(1, 8, [0.5514, 0.6], [0.38, 0.5512]),
                reshard_timing([40.0, 49.8], [50.1, 55.0]),
                reshard_timing([55.4, 60.0], [50.0, 55.3])]
    assert all("only just" in str(v) for v in touching), touching
    apart = [against_gpipe([0.28, 0.30], [0.34, 0.37]), bubble_shrinks(1, 8, [0.55], [0.40]),
             reshard_timing([40.0, 45.0], [50.0, 55.0])]
    assert not any("just" in str(v) for v in apart), apart


def test_counts_and_rank_lists_read_as_english():
    from workers.verdicts import counted, ranks_named
    from workers.verdicts.fault_tolerance import healed
    from workers.verdicts.hangs import fr_trace_blame

    assert [counted(n, "step") for n in (0, 1, 2)] == ["0 steps", "1 step", "2 steps"]
    assert ranks_named([2]) == "rank 2" and ranks_named([3, 0, 1]) == "ranks 0, 1 and 3"
    assert "committed 1 step of its own" in healed([148], [1], 150).text
    assert "blamed ranks 0 and 2, and the diagnosis blamed rank 1" in fr_trace_blame(
        [0, 2], [1], [0, 2, 3]).text
    assert "named no culprit rank; the diagnosis blamed rank 1" in fr_trace_blame(
        [], [1], [0, 2]).text  # fr_trace printed no "Culprit rank" line


def test_times_a_few_percent_apart_are_told_in_percent_not_as_one_times():
    # one decimal of 1.03 reads "1.0 times as long", which contradicts "beyond the spread"
    from workers.verdicts.ddp_mnist import per_step
    from workers.verdicts.sharding import reshard_timing

    close = [per_step([3.00, 3.01, 3.02, 3.03], [3.10, 3.11, 3.12, 3.13], "one", "DDP"),
             reshard_timing([153.0, 154.0, 155.0], [149.0, 150.0, 151.0]),
             faster([10.4, 10.6], [10.0, 10.2], "fork", "spawn", "a start")]
    assert not any("1.0 times" in str(v) for v in close), close
    assert all(re.search(r"took \d[\d.]*% longer", str(v)) for v in close), close
    assert "took 1.5 times as long" in str(reshard_timing([75.0, 76.0], [50.0, 51.0]))
    from workers.verdicts.ddp_internals import cap_times
    from workers.verdicts.start_methods import spawn_against_fork, spawn_without_torch

    more = [cap_times([1, "unset"], [8, 2], [[0.0205, 0.0206], [0.0200, 0.0201]]),
            spawn_against_fork([30.0, 30.1, 30.2], [31.0, 31.1, 31.2]),
            spawn_without_torch(500.0, [510.0, 511.0, 512.0]),
            spawn_against_fork([0.1, 0.2, 0.3], [30.0, 31.0, 32.0])]
    assert not any(re.search(r"\b1\.0 times|than as", str(v)) for v in more), more
    assert "2.5% longer than the fastest" in str(more[0]), more[0]


def test_every_ratio_a_verdict_says_is_kept_from_reading_one_times():
    """The kind of mistake behind "1.0 times ... beyond their spreads": ``ratio`` rounds to
    one decimal, so each verdict that calls it says why it cannot read "1.0 times" there."""
    from pathlib import Path

    import workers.verdicts

    folder = Path(workers.verdicts.__file__).parent
    for path in sorted(folder.glob("*.py")):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if "ratio(" in line and "def ratio" not in line and path.name != "__init__.py":
                above = "".join(lines[max(0, number - 2):number + 1])
                assert 'never "1.0 times"' in above, f"{path.name}:{number + 1}: {line}"


def test_one_core_is_said_in_the_singular():
    from workers.verdicts.collectives import ring_against_library

    verdict = ring_against_library([40.0, 42.0, 45.0], [20.0, 22.0, 25.0], ranks=4, cores=1)
    assert "this machine's 1 core to share" in verdict.text, verdict.text


def test_one_disturbed_block_does_not_hide_a_step_several_times_as_long():
    from workers.verdicts.fault_tolerance import healthy_step

    # reading 49's shape: DDP's ranges reach torchft's through one slow block
    said = healthy_step([0.00170, 0.00179, 0.00180, 0.00175, 0.0090],
                        [0.0086, 0.00863, 0.0087, 0.0085, 0.0089])
    assert said.outcome == "costlier" and "4.8 times as long" in said.text, said
