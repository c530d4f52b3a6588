"""What a page says about a measurement that depends on the machine that built it.

A page is built on 2 CPU cores in CI and on a reader's 16-core box with GPUs; a time, a
bandwidth, a ratio, which of two is faster or a float32 drift can come out either way. So a
page never asserts such an observation: it hands the numbers it measured to a function
here, which returns a ``Verdict``, one of the outcomes the function declares, each worded as
a true sentence, and glues its text into the prose.

Every function that words a verdict is registered with ``@verdict(...)``, with an example
input for each outcome it can give (numbers another machine might measure), and
``tests/test_verdicts.py`` renders every outcome of every one of them. A function that
returns an outcome it did not declare raises, so an untested sentence cannot reach a page.

The chapters' own verdicts live in ``workers/verdicts/<chapter>.py``; the wording shared by
all of them, what "inside the spread" means and how it is said, lives here only.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    """One outcome of a comparison, and the sentence (or clause) a page glues for it."""

    outcome: str
    text: str

    def __str__(self) -> str:
        return self.text

    def __format__(self, spec: str) -> str:
        return format(self.text, spec)


REGISTRY: dict[str, tuple[Callable[..., Verdict], dict[str, dict]]] = {}


def verdict(**examples: dict) -> Callable:
    """Register a function that words a verdict: ``outcome=dict(keyword arguments)`` for
    each outcome it can give, with inputs that give that outcome."""

    def register(function: Callable[..., Verdict]) -> Callable[..., Verdict]:
        name = f"{function.__module__}.{function.__qualname__}"

        @functools.wraps(function)
        def checked(*args, **kwargs) -> Verdict:
            result = function(*args, **kwargs)
            if not isinstance(result, Verdict) or result.outcome not in examples:
                raise ValueError(f"{name} gave an outcome it does not declare: {result!r}")
            return result

        REGISTRY[name] = (checked, examples)
        return checked

    return register


def all_verdicts() -> dict[str, tuple[Callable[..., Verdict], dict[str, dict]]]:
    """Every registered verdict function, after importing every chapter's module here."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return dict(REGISTRY)


# ---- the one home of "inside the spread" -------------------------------------------------

NOISE = "inside the spread of the repeats, so the difference is noise"


def spread(samples: Sequence[float]) -> float:
    """How far apart the repeats of one measurement landed: largest minus smallest."""
    return max(samples) - min(samples)


def order(a: Sequence[float], b: Sequence[float]) -> str:
    """Where the repeats of ``a`` stand against those of ``b``: ``"lower"`` when every one
    of ``a`` is below every one of ``b``, ``"higher"`` the other way round, ``"inside"``
    when their ranges overlap (the difference is inside the spread)."""
    if max(a) < min(b):
        return "lower"
    if min(a) > max(b):
        return "higher"
    return "inside"


def meet_as_shown(a: Sequence[float], b: Sequence[float],
                  shown: Callable[[float], str]) -> bool:
    """True when the two ranges meet as the page prints them: the largest of one and the
    smallest of the other, through ``shown`` (the page's rounding), read the same, in
    either order. ``order`` may still find them apart; the sentence must then say "just",
    or a reader sees a gap claimed that the printed ranges do not show."""
    return shown(max(a)) == shown(min(b)) or shown(max(b)) == shown(min(a))


def beyond(difference: float, spread_: float) -> bool:
    """True when a difference between two medians is larger than the repeats' spread."""
    return abs(difference) > spread_


def ratio(larger: float, smaller: float) -> str:
    """``"3.1 times"``: how many times one positive figure is the other, as text."""
    return f"{larger / smaller:.1f} times" if smaller > 0 else "far more than"


def close(larger: float, smaller: float) -> bool:
    """True when one positive time is less than 1.05 times another: one decimal of their
    ratio would read "1.0 times", so the difference is said in percent instead."""
    return smaller > 0 and larger / smaller < 1.05


def as_long(larger: float, smaller: float) -> str:
    """``"3.1 times as long"``, or when the two are ``close``, ``"3.3% longer"``: how much
    longer one positive time is than another, as text that follows "took"."""
    if smaller <= 0:
        return "far longer"
    if not close(larger, smaller):
        return f"{ratio(larger, smaller)} as long"
    percent = 100 * (larger / smaller - 1)
    return f"{percent:.2g}% longer" if percent >= 0.1 else "less than 0.1% longer"


@verdict(
    lower=dict(a=[10.0, 11.0, 12.0], b=[30.0, 31.0, 29.0], a_name="fork", b_name="spawn",
               what="a start"),
    lower_close=dict(a=[10.0, 10.1, 10.2], b=[10.4, 10.5, 10.6], a_name="fork",
                     b_name="spawn", what="a start"),
    higher=dict(a=[30.0, 31.0], b=[10.0, 12.0], a_name="fork", b_name="spawn",
                what="a start"),
    higher_close=dict(a=[10.4, 10.6], b=[10.0, 10.2], a_name="fork", b_name="spawn",
                      what="a start"),
    inside=dict(a=[10.0, 20.0], b=[12.0, 18.0], a_name="fork", b_name="spawn",
                what="a start"),
)
def faster(a: Sequence[float], b: Sequence[float], a_name: str, b_name: str,
           what: str) -> Verdict:
    """Which of two timed things took less time, with every repeat of each (any unit)."""
    where = order(a, b)
    ma, mb = statistics.median(a), statistics.median(b)
    if where == "lower":
        return Verdict("lower_close" if close(mb, ma) else "lower",
                       f"{what} took less time with {a_name} than with {b_name} in every "
                       f"repeat ({b_name} took {as_long(mb, ma)})")
    if where == "higher":
        return Verdict("higher_close" if close(ma, mb) else "higher",
                       f"{what} took less time with {b_name} than with {a_name} in every "
                       f"repeat ({a_name} took {as_long(ma, mb)})")
    return Verdict("inside", f"the repeats of {what} with {a_name} and with {b_name} "
                             f"overlap (medians {ma:.3g} and {mb:.3g}): this run cannot "
                             f"tell them apart, {NOISE}")


def counted(count: int, noun: str) -> str:
    """``1 step``, ``3 steps``, ``0 batches``: a count with its noun, singular or plural."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun}{'es' if noun.endswith(('ch', 'sh', 's', 'x')) else 's'}"


def ranks_named(ranks: Sequence[int]) -> str:
    """``rank 2``, ``ranks 1 and 2``, ``ranks 0, 1 and 3``."""
    listed = [str(rank) for rank in sorted(ranks)]
    if len(listed) == 1:
        return f"rank {listed[0]}"
    return f"ranks {', '.join(listed[:-1])} and {listed[-1]}"
