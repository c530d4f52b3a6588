"""What the Hogwild page says about its timings, accuracies and throughputs: each depends on
the machine (its cores, what else runs on it), so every comparison is worded here, one
sentence per outcome."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from workers.verdicts import NOISE, Verdict, close, meet_as_shown, order, ratio, verdict


@verdict(
    faster=dict(one=[0.61, 0.64, 0.66], hog=[0.40, 0.42, 0.45]),
    slower=dict(one=[0.40, 0.42, 0.45], hog=[0.61, 0.64, 0.66]),
    inside=dict(one=[0.41, 0.44, 0.50], hog=[0.40, 0.46, 0.52]),
    faster_just=dict(one=[1.003, 1.05, 1.10], hog=[0.95, 0.98, 1.001]),
    slower_just=dict(one=[0.95, 0.98, 1.001], hog=[1.003, 1.05, 1.10]),
)
def hogwild_speed(one: Sequence[float], hog: Sequence[float]) -> Verdict:
    """Seconds for the same number of updates: one process against the Hogwild processes,
    every repeat of each."""
    where = order(hog, one)
    low, high = (min(one) / max(hog), max(one) / min(hog)) if where == "lower" else (
        min(hog) / max(one), max(hog) / min(one))
    if where != "inside" and (f"{low:.1f}" == "1.0"  # ranges the page prints as meeting
                              or meet_as_shown(hog, one, lambda x: f"{x:.2f}")):
        faster = "faster" if where == "lower" else "slower"
        return Verdict(f"{faster}_just", f"Hogwild was {faster} in every repeat, though "
                                         "the closest repeats only just: "
                                         f"{low:.2f} to {high:.2f} times as "
                                         + ("fast" if where == "lower" else "long"))
    if where == "lower":
        return Verdict("faster", f"Hogwild was faster, {min(one) / max(hog):.1f} to "
                                 f"{max(one) / min(hog):.1f} times, beyond the spread of "
                                 "the repeats")
    if where == "higher":
        return Verdict("slower", f"Hogwild was slower, {min(hog) / max(one):.1f} to "
                                 f"{max(hog) / min(one):.1f} times as long, beyond the "
                                 "spread of the repeats")
    return Verdict("inside", f"Hogwild was no faster: the repeats overlap, {NOISE}")


@verdict(
    overlap=dict(one=[91.8, 92.1, 92.4], hog=[91.5, 92.0, 92.6]),
    lower=dict(one=[92.1, 92.3, 92.4], hog=[88.9, 89.6, 90.4]),
    higher=dict(one=[88.9, 89.6, 90.4], hog=[92.1, 92.3, 92.4]),
    just=dict(one=[92.14, 92.14, 92.14], hog=[89.4, 90.6, 92.06]),
)
def hogwild_accuracy(one: Sequence[float], hog: Sequence[float]) -> Verdict:
    """Test accuracy (%) after the same number of updates: one process against Hogwild."""
    where = order(hog, one)
    if where != "inside" and meet_as_shown(hog, one, lambda x: f"{x:.1f}"):
        return Verdict("just", f"Hogwild's {'lower' if where == 'lower' else 'higher'}, "
                               "but only just: the printed ranges meet")
    if where == "lower":
        return Verdict("lower", "Hogwild's lower, beyond the spread. Stale updates are one "
                                "cause; each process's own batch order and momentum are "
                                "others, which this run does not separate")
    if where == "higher":
        return Verdict("higher", "Hogwild's higher, beyond the spread: its processes draw "
                                 "their own batches and keep their own momentum, and this "
                                 "run does not say which helped")
    return Verdict("overlap", "the ranges overlap: lost and stale updates, and the "
                              "processes' own batch orders and momentum, cost nothing "
                              "measurable here")


@verdict(
    more=dict(queue="Queue", new=[310.0, 330.0, 350.0], reused=[900.0, 950.0, 990.0]),
    fewer=dict(queue="SimpleQueue", new=[900.0, 950.0, 990.0],
               reused=[310.0, 330.0, 350.0]),
    inside=dict(queue="Queue", new=[310.0, 330.0, 350.0], reused=[320.0, 340.0, 360.0]),
)
def queue_reuse(queue: str, new: Sequence[float], reused: Sequence[float]) -> Verdict:
    """Tensors per second through one kind of queue: a new tensor each time against buffers
    sent back and reused, every repeat of each."""
    where = order(reused, new)
    if where == "higher":
        # ratio() says one decimal: never "1.0 times", which is said as "slightly more"
        times = ratio(statistics.median(reused), statistics.median(new))
        times = "slightly more" if times == "1.0 times" else f"{times} as many"
        return Verdict("more", f"through a {queue}, reusing buffers moved {times} "
                               "tensors per second, beyond the spread of the repeats")
    if where == "lower":
        return Verdict("fewer", f"through a {queue}, reusing buffers moved fewer tensors "
                                "per second, beyond the spread of the repeats")
    return Verdict("inside", f"through a {queue} the two patterns' repeats overlap, "
                             f"{NOISE}")


@verdict(
    pays=dict(outcomes=["more", "more"]),
    costs=dict(outcomes=["fewer", "fewer"]),
    mixed=dict(outcomes=["more", "inside"]),
    no_difference=dict(outcomes=["inside", "inside"]),
)
def reuse_advice(outcomes: Sequence[str]) -> Verdict:
    """What the Summary advises about sending buffers back, from the ``queue_reuse``
    outcomes of the queues measured (one per kind of queue)."""
    if all(outcome == "more" for outcome in outcomes):
        return Verdict("pays", "here, sending a pool of buffers back and forth moved more "
                               "tensors per second through every queue than a new tensor "
                               "each time: reuse buffers")
    if all(outcome == "fewer" for outcome in outcomes):
        return Verdict("costs", "here, a new tensor each time moved more tensors per "
                                "second than buffers sent back, through every queue: a "
                                "returned buffer is a second send, with a second "
                                "descriptor to pass, and that cost more than the copy it "
                                "saves; reuse pays only where the copy is the larger cost, "
                                "so measure before you choose")
    if all(outcome == "inside" for outcome in outcomes):
        return Verdict("no_difference", "here, sending buffers back made no difference "
                                        "beyond the spread of the repeats through any "
                                        "queue: measure on your own machine before you "
                                        "choose")
    return Verdict("mixed", "here, sending buffers back did not win through every queue "
                            "(a returned buffer is a second send, with a second descriptor "
                            "to pass): measure before you choose")


def _rates(rates: Sequence[float]) -> str:
    return f"{statistics.median(rates):,.0f} ({min(rates):,.0f} to {max(rates):,.0f})"


def _threads(count: int) -> str:
    return "1 thread" if count == 1 else f"{count} threads"


# What sets the intra-op pool's size before PyTorch's own default. Which wins where both
# are set depends on the wheel: with MKL, MKL's count (mkl_get_max_threads, MKL_NUM_THREADS
# first; init_num_threads, aten/src/ATen/ParallelOpenMP.cpp); without, OMP_NUM_THREADS
# (intraop_default_num_threads, ParallelCommon.cpp). The verdicts name the one the count
# shows.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


@verdict(
    pytorch=dict(count=2, environ={}),
    pytorch_one=dict(count=1, environ={"PATH": "/usr/bin"}),
    set=dict(count=4, environ={"OMP_NUM_THREADS": "4"}),
    set_both=dict(count=2, environ={"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}),
    set_one_of_two=dict(count=2, environ={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "2"}),
    not_taken=dict(count=2, environ={"OMP_NUM_THREADS": "4"}),
    not_taken_both=dict(count=2, environ={"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "8"}),
)
def thread_default(count: int, environ: Mapping[str, str]) -> Verdict:
    """The thread count a process starts with here (``torch.get_num_threads()``), as a noun
    phrase that names who chose it: PyTorch, or the variable of this build's environment
    whose count it took (which of two wins depends on the wheel), or PyTorch where the
    variables asked for another count (this wheel's MKL keeps to the physical cores)."""
    chosen = [f"{name}={environ[name]}" for name in THREAD_VARIABLES if environ.get(name)]
    taken = [f"{name}={environ[name]}" for name in THREAD_VARIABLES
             if environ.get(name) and environ[name].strip() == str(count)]
    if chosen and not taken:
        if len(chosen) == 2:
            return Verdict("not_taken_both", f"the {_threads(count)} PyTorch took, where "
                                             f"{chosen[0]} and {chosen[1]} in this build's "
                                             f"environment asked for other counts")
        return Verdict("not_taken", f"the {_threads(count)} PyTorch took, where "
                                    f"{chosen[0]} in this build's environment asked for "
                                    f"{chosen[0].split('=', 1)[1]}")
    if len(taken) == 2:
        return Verdict("set_both", f"the {_threads(count)} that {chosen[0]} and "
                                   f"{chosen[1]} in this build's environment set")
    if len(chosen) == 2:
        other = next(name for name in chosen if name not in taken)
        return Verdict("set_one_of_two", f"the {_threads(count)} that {taken[0]} in this "
                                         f"build's environment set, over {other}")
    if chosen:
        return Verdict("set", f"the {_threads(count)} that {chosen[0]} in this build's "
                              f"environment sets")
    if count == 1:
        return Verdict("pytorch_one", "PyTorch's default of 1 thread")
    return Verdict("pytorch", f"PyTorch's default of {count} threads")


@verdict(
    lowered=dict(pinned=1, default=2, environ={}),
    one_cpu=dict(pinned=1, default=1, environ={}),
    machine=dict(pinned=72, default=72, environ={}),
    set=dict(pinned=1, default=1, environ={"OMP_NUM_THREADS": "1"}),
    set_differs=dict(pinned=1, default=2, environ={"OMP_NUM_THREADS": "4"}),
)
def cpu_set_default(pinned: int, default: int, environ: Mapping[str, str]) -> Verdict:
    """What the interpreter started on one CPU (``taskset -c``) took as its thread count,
    against this process's: whether a CPU set lowers the default here. A sentence, in
    Markdown (the commands as code: Sphinx would curl their dashes)."""
    chosen = [f"{name}={environ[name]}" for name in THREAD_VARIABLES if environ.get(name)]
    if chosen:
        verb = "is" if len(chosen) == 1 else "are"
        named = f"`{'` and `'.join(chosen)}` {verb} set in the environment"
        if pinned == default:
            return Verdict("set", f"Here {named}, so the CPU set changed nothing: the "
                                  f"pinned interpreter took {_threads(pinned)}, as this "
                                  f"one did.")
        return Verdict("set_differs", f"Here {named}, yet the pinned interpreter took "
                                      f"{_threads(pinned)} where this one took {default}.")
    if pinned == default == 1:
        return Verdict("one_cpu", "This process may use one CPU only, so the test says "
                                  "nothing: pinned to one CPU or not, the interpreter took "
                                  "1 thread.")
    if pinned == 1:
        return Verdict("lowered", f"On this build's wheel a CPU set (`taskset`, Slurm's "
                                  f"CPU binding, `docker --cpuset-cpus`) lowers the "
                                  f"default: "
                                  f"the pinned interpreter took 1 thread where this one "
                                  f"took {default}.")
    return Verdict("machine", f"On this build's wheel a CPU set does not lower the "
                              f"default: the interpreter pinned to one CPU still took "
                              f"{_threads(pinned)}. Without MKL (the Linux aarch64 wheels, "
                              f"for one) PyTorch counts the machine's cores with cpuinfo "
                              f"(`TaskThreadPoolBase::defaultNumThreads`), not the CPUs "
                              f"the set allows, so a job pinned to a few CPUs needs "
                              f"`torch.set_num_threads` or `OMP_NUM_THREADS` of its own.")


_GRID = dict(processes=4, cores=2, default_threads=2, rule=1,
             default_named="PyTorch's default of 2 threads")


@verdict(
    same=dict(processes=4, cores=2, default_threads=1, rule=1, rule_rates=[900.0, 950.0],
              default_named="PyTorch's default of 1 thread",
              default_rates=[900.0, 950.0], busy_default=1.9, busy_rule=1.9,
              switches_default=40.0, switches_rule=40.0),
    spare=dict(processes=4, cores=16, default_threads=1, rule=4,
               default_named="the 1 thread that OMP_NUM_THREADS=1 in this build's "
                             "environment sets",
               rule_rates=[5100.0, 5200.0, 5300.0], default_rates=[2000.0, 2100.0, 2200.0],
               busy_default=3.9, busy_rule=14.8, switches_default=36.0,
               switches_rule=40.0),
    busy=dict(**_GRID, rule_rates=[3800.0, 3900.0, 4000.0],
              default_rates=[300.0, 320.0, 350.0], busy_default=1.0, busy_rule=1.0,
              switches_default=252.0, switches_rule=40.0,
              alone_default=[130.0, 133.0, 657.0], alone_one=[1412.0, 2289.0, 2519.0]),
    faster_kept_many=dict(**_GRID, rule_rates=[3800.0, 3900.0, 4000.0],
                          default_rates=[300.0, 320.0, 350.0], busy_default=1.95,
                          busy_rule=1.90, switches_default=252.0, switches_rule=40.0),
    faster_kept_few=dict(**_GRID, rule_rates=[3800.0, 3900.0, 4000.0],
                         default_rates=[300.0, 320.0, 350.0], busy_default=1.95,
                         busy_rule=1.90, switches_default=48.0, switches_rule=40.0),
    faster_short_many=dict(**_GRID, rule_rates=[3800.0, 3900.0, 4000.0],
                           default_rates=[300.0, 320.0, 350.0], busy_default=1.1,
                           busy_rule=1.90, switches_default=252.0, switches_rule=40.0),
    faster_short_few=dict(**_GRID, rule_rates=[3800.0, 3900.0, 4000.0],
                          default_rates=[300.0, 320.0, 350.0], busy_default=1.1,
                          busy_rule=1.90, switches_default=32.0, switches_rule=40.0),
    faster_kept_none=dict(**_GRID, rule_rates=[3800.0, 3900.0, 4000.0],
                          default_rates=[300.0, 320.0, 350.0], busy_default=1.95,
                          busy_rule=1.90, switches_default=180.0, switches_rule=0.0),
    faster_short_none=dict(**_GRID, rule_rates=[3800.0, 3900.0, 4000.0],
                           default_rates=[300.0, 320.0, 350.0], busy_default=1.1,
                           busy_rule=1.90, switches_default=180.0, switches_rule=0.0),
    inside=dict(processes=4, cores=16, default_threads=16, rule=4,
                default_named="PyTorch's default of 16 threads",
                rule_rates=[9000.0, 9500.0, 9900.0], default_rates=[8900.0, 9400.0, 9800.0],
                busy_default=15.5, busy_rule=15.0, switches_default=80.0,
                switches_rule=40.0),
    slower=dict(processes=4, cores=16, default_threads=16, rule=4,
                default_named="PyTorch's default of 16 threads",
                rule_rates=[8000.0, 8100.0, 8200.0], default_rates=[9000.0, 9100.0, 9200.0],
                busy_default=15.5, busy_rule=15.0, switches_default=80.0,
                switches_rule=40.0),
)
def oversubscription(processes: int, cores: int, default_threads: int, rule: int,
                     default_named: str, rule_rates: Sequence[float],
                     default_rates: Sequence[float], busy_default: float, busy_rule: float,
                     switches_default: float, switches_rule: float,
                     alone_default: Sequence[float] = (),
                     alone_one: Sequence[float] = ()) -> Verdict:
    """``processes`` processes with the default threads (``default_named``: the phrase
    ``thread_default`` gives) against the rule's max(1, cores // processes): images per
    second in every repeat of each, the medians of CPU time over wall time (cores kept
    busy) and of context switches per second (the rule's runs may have none at all: a
    one-thread process with a core to itself). ``alone_default`` and ``alone_one``: one
    process's images per second with the default and with 1 thread, the control: where one
    process is slower with the default's threads, something else held the cores, and no
    gap between M processes' runs is theirs alone. A clause after "against the rule:", no
    final stop."""
    if default_threads == rule:
        return Verdict("same", f"no difference: the default ({default_named}) is already "
                               f"the rule's {_threads(rule)} per process")
    if processes * default_threads <= cores:
        return Verdict("spare", f"no oversubscription to remove: the default puts "
                                f"{processes} x {default_threads} threads on {cores} "
                                f"cores, and the rule's {_threads(rule)} per process "
                                f"gave "
                                f"{_rates(rule_rates)} images/s against the default's "
                                f"{_rates(default_rates)}")
    if default_threads > 1 and alone_default and alone_one and \
            order(alone_one, alone_default) == "higher":
        return Verdict("busy", f"no verdict from this run: even one process, which nothing "
                               f"oversubscribes, was slower with {default_named} than "
                               f"with 1 thread ({_rates(alone_default)} against "
                               f"{_rates(alone_one)} images/s): other work held this "
                               f"machine's cores while it ran, or this small model runs "
                               f"slower on the default's threads even alone; either way "
                               f"the gap between "
                               f"{processes} processes' runs ({_rates(default_rates)} "
                               f"with the default, {_rates(rule_rates)} with the rule) is "
                               f"not theirs alone")
    where = order(rule_rates, default_rates)
    if where == "inside":
        return Verdict("inside", "the rule's throughput overlaps the default's in the "
                                 f"repeats, {NOISE}: this run shows no cost of "
                                 "oversubscription")
    if where == "lower":
        return Verdict("slower", "the rule gave less throughput than the default, "
                                 "beyond the spread of the repeats: this run shows no cost "
                                 "of oversubscription")
    high, low = statistics.median(rule_rates), statistics.median(default_rates)
    # ratio() says one decimal: never "1.0 times", where close() says it in percent
    gain = (f"{100 * (high / low - 1):.2g}% more throughput than" if close(high, low)
            else f"{ratio(high, low)} the throughput of")
    if busy_default >= 0.8 * busy_rule:
        cpu, cpu_outcome = (f"did not lack CPU time: they kept {busy_default:.2f} cores "
                            f"busy against {busy_rule:.2f} with the rule. Their threads "
                            "spent their time"), "kept"
    else:
        cpu, cpu_outcome = (f"kept fewer cores busy ({busy_default:.2f} against "
                            f"{busy_rule:.2f} with the rule): part of the loss was time "
                            "their threads did not run at all. When they ran, they spent "
                            "much of it"), "short"
    if switches_rule == 0 and switches_default > 0:
        switched, switch_outcome = ("and being switched in and out: the switches/s tab "
                                    f"counts {switches_default:,.0f} context switches per "
                                    "second, where the rule's runs had none at all"), "none"
    elif switches_default > 1.5 * switches_rule:
        switched, switch_outcome = ("and being switched in and out: the switches/s tab "
                                    f"counts {switches_default / switches_rule:.1f} times "
                                    "as many context switches per second as with the "
                                    "rule"), "many"
    else:
        switched, switch_outcome = ("while the context switches per second (the last tab: "
                                    f"{switches_default:,.0f} against {switches_rule:,.0f} "
                                    "with the rule, not 1.5 times as many) are too few to "
                                    "account for the loss: a spinning thread keeps its "
                                    "core until the scheduler's time slice ends"), "few"
    return Verdict(f"faster_{cpu_outcome}_{switch_outcome}",
                   f"the rule gave {gain} the default, beyond the "
                   "spread of the repeats. The figure's CPU/wall tab, CPU time over wall "
                   "time (the dashed line is every core busy), shows that the "
                   f"oversubscribed runs {cpu} waiting for each other instead of computing "
                   f"(OpenMP threads spin before they sleep), {switched}")


_SPLIT = dict(processes=2, threads=1, default_named="PyTorch's default of 2 threads")
_MORE = dict(split_rates=[5600.0, 5900.0, 6100.0], one_rates=[3600.0, 3700.0, 4000.0])
_FEWER = dict(split_rates=[3600.0, 3700.0, 4000.0], one_rates=[5600.0, 5900.0, 6100.0])
_OVERLAP = dict(split_rates=[3500.0, 5900.0, 6100.0], one_rates=[3600.0, 3700.0, 4000.0])


@verdict(
    more_same=dict(**_SPLIT, **_MORE, train="faster"),
    more_differs=dict(**_SPLIT, **_MORE, train="inside"),
    fewer_same=dict(**_SPLIT, **_FEWER, train="slower"),
    fewer_differs=dict(**_SPLIT, **_FEWER, train="inside"),
    overlap_same=dict(**_SPLIT, **_OVERLAP, train="inside"),
    overlap_differs=dict(**_SPLIT, **_OVERLAP, train="faster"),
)
def split_cores(processes: int, threads: int, default_named: str,
                split_rates: Sequence[float], one_rates: Sequence[float],
                train: str) -> Verdict:
    """The oversubscription grid's answer to "do several processes with a share of the
    threads each get more out of the cores than one process with all of them?": images per
    second in every repeat of ``processes`` processes x ``threads`` threads against one
    process with the default (``default_named``: the phrase ``thread_default`` gives), and
    whether it agrees with the ``train`` demo's
    ``hogwild_speed`` outcome ("faster", "slower" or "inside").
    A clause, no final stop."""
    head = (f"in the grid, {processes} processes with {_threads(threads)} each gave "
            f"{_rates(split_rates)} images/s, one process with {default_named} gave "
            f"{_rates(one_rates)}: ")
    where = order(split_rates, one_rates)
    answer, expected = {
        "higher": ("more, beyond the spread of the repeats", "faster"),
        "lower": ("less, beyond the spread of the repeats", "slower"),
        "inside": (f"the ranges overlap, {NOISE}", "inside"),
    }[where]
    if where != "inside" and meet_as_shown(split_rates, one_rates, lambda r: f"{r:,.0f}"):
        answer = answer.replace("beyond", "only just beyond")  # the printed ranges meet
    name = {"higher": "more", "lower": "fewer", "inside": "overlap"}[where]
    if train == expected:
        return Verdict(f"{name}_same", f"{head}{answer}, the answer the train demo gave")
    return Verdict(f"{name}_differs",
                   f"{head}{answer}. That is not the answer the train demo gave: the two "
                   "runs differ (the grid gives each process a few steps of plain SGD on "
                   "batches drawn beforehand; the demo splits a fixed number of updates "
                   "between the processes, with momentum, drawing batches and recording "
                   "losses as it goes), and this build does not say which difference "
                   "decides; measure your own job")
