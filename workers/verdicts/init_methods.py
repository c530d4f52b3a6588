"""What the finding-each-other page says about its rendezvous benchmark: whether the time
grows with the world size, whether the routes differ beyond their spread, whether a run
stalled, and whether the largest job's ranks had a core each."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from workers.verdicts import NOISE, Verdict, beyond, order, verdict

WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven",
         8: "eight", 9: "nine", 10: "ten", 12: "twelve"}


def said(number: int) -> str:
    """A small count as the text says it: ``"eight"``; a larger one in figures."""
    return WORDS.get(number, str(number))


@verdict(
    higher=dict(small=[10.1, 9.6, 9.8], large=[74.4, 74.5, 74.7], pooled_small=10.0,
                pooled_large=74.5, small_size=2, large_size=8),
    lower=dict(small=[40.0, 45.0, 42.0], large=[20.0, 22.0, 21.0], pooled_small=42.0,
               pooled_large=21.0, small_size=2, large_size=8),
    inside=dict(small=[4.0, 9.0, 5.0], large=[6.0, 5.5, 7.0], pooled_small=5.2,
                pooled_large=6.1, small_size=2, large_size=8),
)
def grows(small: Sequence[float], large: Sequence[float], pooled_small: float,
          pooled_large: float, small_size: int, large_size: int) -> Verdict:
    """Rendezvous times (ms) at two world sizes: ``small`` and ``large`` hold, per repeat,
    the median over the routes; ``pooled_*`` the median of every run at that size."""
    repeats = said(len(small))
    runs = (f"over all the runs at each size, the median went from {pooled_small:,.0f} to "
            f"{pooled_large:,.0f} ms")
    where = order(large, small)
    if where == "higher":
        return Verdict("higher", f"It grows with the world size: in each of the {repeats} "
                                 "repeats, the routes' median was higher at "
                                 f"{said(large_size)} ranks than at {said(small_size)} "
                                 f"({runs}): more ranks to count in, and the backend "
                                 "connects every pair.")
    if where == "lower":
        pairs = large_size * (large_size - 1) // 2
        return Verdict("lower", f"Here it did not grow with the world size: in each of the "
                                f"{repeats} repeats, the routes' median was lower at "
                                f"{said(large_size)} ranks than at {said(small_size)} "
                                f"({runs}), though {said(large_size)} ranks have more to "
                                f"count in and {pairs} pairs to connect.")
    return Verdict("inside", f"Whether it grows with the world size, this run cannot tell: "
                             f"{runs}, but the routes' medians of the {repeats} repeats at "
                             f"{said(small_size)} and {said(large_size)} ranks overlap, "
                             f"{NOISE}.")


@verdict(
    inside=dict(gap=3.0, spread=305.0, size=2),
    beyond=dict(gap=12.0, spread=4.0, size=8),
)
def routes_apart(gap: float, spread: float, size: int) -> Verdict:
    """How far apart the routes' medians landed at one world size (ms), against the widest
    spread of one route's repeats."""
    if beyond(gap, spread):
        return Verdict("beyond", f"by {gap:,.0f} ms at {said(size)} ranks, more than the "
                                 f"{spread:,.0f} ms that one route's runs spread over")
    return Verdict("inside", f"by {gap:,.0f} ms at {said(size)} ranks, inside the "
                             f"{spread:,.0f} ms that one route's runs spread over")


@verdict(
    stalled=dict(slowest={2: 315.0, 8: 5090.0}, pooled={2: 10.0, 8: 74.5}),
    stalled_once=dict(slowest={2: 15.0, 8: 5090.0}, pooled={2: 10.0, 8: 74.5}),
    none=dict(slowest={2: 15.0, 8: 90.0}, pooled={2: 10.0, 8: 74.5}),
)
def stalls(slowest: Mapping[int, float], pooled: Mapping[int, float]) -> Verdict:
    """The slowest run (ms) at each world size against the median of all runs there: ten
    times the median or more is a stall."""
    stalled = [f"{slowest[size]:,.0f} ms at {said(size)} ranks" for size in sorted(slowest)
               if slowest[size] >= 10 * pooled[size]]
    if not stalled:
        return Verdict("none", "No run took ten times the median or more.")
    outcome = "stalled" if len(stalled) > 1 else "stalled_once"
    return Verdict(outcome, f"The slowest run took {' and '.join(stalled)}, ten times the "
                            "median or more: now and then a rendezvous stalls, and the "
                            "spread includes it.")


@verdict(
    shared=dict(cores=2, ranks=8),
    own=dict(cores=16, ranks=8),
)
def core_each(cores: int, ranks: int) -> Verdict:
    """Whether the ranks of the largest job could each have a core of this machine."""
    if cores < ranks:
        return Verdict("shared", f"{said(ranks).capitalize()} ranks on this machine's "
                                 f"{cores} cores were oversubscribed: each waited for a "
                                 "core, which is part of the time measured.")
    return Verdict("own", f"With {cores} cores here, each of the {said(ranks)} ranks could "
                          "have a core of its own.")
