"""Lab cost_fit (cost_model): fit one alpha and one beta to collectives timed on gloo.

The contract (labs/cost_fit.py), clause by clause, and the timings that check each:

- Each collective's own steps and share, as gloo runs it: every set mixes all four
  collectives, and one set holds only reduce-scatters and broadcasts, at 3, 5 and 6 ranks,
  with no noise: a ring reduce-scatter's counts (gloo all-reduces the whole input), or a
  broadcast's log2(N) without rounding up (or N - 1 steps, as a chain would), fits other
  values there.
- At any world size from 2: the sets span 2 to 8 ranks, the job's own at its world size.
- Least squares on relative errors: a set with noise (each time multiplied by a factor
  drawn around 1) and sizes from 1 KiB to 64 MiB, where a fit of the absolute errors, or
  weights of 1 / seconds instead of 1 / seconds squared, lands elsewhere.
- Every point counts once, in any order, repeats included: the noisy set holds three
  trials of each point, shuffled, and a quarter of its points twice to the last digit;
  averaging the trials first, keeping the fastest or one of each, or a set of the points,
  weighs the points otherwise.
- Within one part in a million, in double precision: a noise-free set whose answer is its
  own alpha and beta (to 1e-9), and every answer compared with the exact least squares one
  to 1e-6 (torch.linalg.lstsq in float32 lands far off on the noisy set, whose rows span
  nine orders of magnitude).
- Seconds and bytes per second, as floats, (alpha, beta) in that order: every answer; one
  in microseconds, in GB/s, 1 / beta instead of beta, or the two swapped is named, and
  values that are not Python floats (0-d tensors) are refused.
- Real timings: the job's ranks time each collective at three sizes (the slowest rank's
  time of each trial), and the function fits them with the rest.
- The standard library and torch only, not workers.cost_model: the modules imported while
  the function ran, and the imports of the reader's file (numpy among them).
"""

from __future__ import annotations

import copy
import math
import sys
import time

from workers.labs.harness import Finding

CHAPTER = "cost_model"
FUNCTION = "fit_alpha_beta"
ASKS = "fit one latency and one bandwidth to collectives timed on gloo"
REREAD = '"The idea", "What gloo runs" and "The book\'s worker" in the cost-model chapter'
PASSED = "fits the model's alpha and beta to every set of timings"
WORLD_SIZES = (2, 3)
GROUP = True  # the job's ranks time the collectives the function fits, with the rest
PRELOAD = ()
TIMEOUT = 20.0
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
EXACT = 1e-9  # the noise-free set: its own alpha and beta
RELATIVE = 1e-6  # every answer against the exact least squares one
REAL_SIZES = (4096, 65536, 1 << 20)
REAL_TRIALS = 2  # after one untimed call


def terms(collective: str, world_size: int) -> tuple[float, float]:
    """(steps, share) of gloo's algorithm in torch 2.15, as the chapter's table has them."""
    n = world_size
    if collective in ("all_reduce", "reduce_scatter"):  # a ring; gloo's reduce-scatter is
        return 2 * (n - 1), 2 * (n - 1) / n  # an all-reduce of the whole input
    if collective == "all_gather":
        return n - 1, (n - 1) / n
    rounds = math.ceil(math.log2(n))  # broadcast: a binomial tree, the whole tensor a round
    return rounds, rounds


# What a wrong solution may have used instead: its counts, and the chapter's word on them.
MISCOUNTED = {
    "a ring reduce-scatter's counts for reduce_scatter, N - 1 steps and (N - 1)/N of the "
    "bytes (gloo all-reduces the whole input)":
        lambda c, n: (n - 1, (n - 1) / n) if c == "reduce_scatter" else terms(c, n),
    "log2(N) for broadcast, not rounded up (a tree's rounds are whole)":
        lambda c, n: (math.log2(n),) * 2 if c == "broadcast" else terms(c, n),
    "N - 1 steps for broadcast, as a chain would take (gloo's is a binomial tree)":
        lambda c, n: (n - 1,) * 2 if c == "broadcast" else terms(c, n),
    "log2(N) rounded down for broadcast (a tree's rounds are log2(N) rounded up)":
        lambda c, n: (math.floor(math.log2(n)),) * 2 if c == "broadcast" else terms(c, n),
    "a broadcast's bytes counted once, not once a round (each round sends the whole "
    "tensor)": lambda c, n: (terms(c, n)[0], 1.0) if c == "broadcast" else terms(c, n),
    "2(N - 1) steps for all_gather (its two halves of a part travel in one step's "
    "time: N - 1 steps)":
        lambda c, n: (2 * (n - 1), (n - 1) / n) if c == "all_gather" else terms(c, n),
    "an all_gather's nbytes taken as one rank's part (nbytes is the whole output)":
        lambda c, n: (n - 1, n - 1) if c == "all_gather" else terms(c, n),
    "the whole of n bytes for every collective, not its share":
        lambda c, n: (terms(c, n)[0], 1.0),
    "one step for every collective, not its steps":
        lambda c, n: (1.0, terms(c, n)[1]),
    "the ring all-reduce's counts for every collective":
        lambda c, n: terms("all_reduce", n),
}


def least_squares(timings, counts=terms, weigh=lambda nbytes, seconds: seconds ** -2
                  ) -> tuple[float, float]:
    """(alpha, beta) minimising the sum of weigh(nbytes, seconds) * (predicted - seconds)
    ** 2: the default is the contract's relative errors."""
    aa = ab = bb = ay = by = 0.0
    for collective, world_size, nbytes, seconds in timings:
        steps, share = counts(collective, world_size)
        w = weigh(nbytes, seconds)
        a, b = steps, share * nbytes
        aa, ab, bb = aa + w * a * a, ab + w * a * b, bb + w * b * b
        ay, by = ay + w * a * seconds, by + w * b * seconds
    det = aa * bb - ab * ab
    alpha, per_byte = (bb * ay - ab * by) / det, (aa * by - ab * ay) / det
    return alpha, 1 / per_byte


def averaged(timings) -> list:
    """One point per (collective, world size, size): the mean of its trials."""
    trials: dict = {}
    for collective, world_size, nbytes, seconds in timings:
        trials.setdefault((collective, world_size, nbytes), []).append(seconds)
    return [(*key, sum(times) / len(times)) for key, times in trials.items()]


def first_of_each(timings) -> list:
    kept: dict = {}
    for collective, world_size, nbytes, seconds in timings:
        kept.setdefault((collective, world_size, nbytes), seconds)
    return [(*key, seconds) for key, seconds in kept.items()]


def fastest_of_each(timings) -> list:
    kept: dict = {}
    for collective, world_size, nbytes, seconds in timings:
        key = (collective, world_size, nbytes)
        kept[key] = min(kept.get(key, math.inf), seconds)
    return [(*key, seconds) for key, seconds in kept.items()]


def modelled(rng, collectives, world_sizes, sizes, trials: int, noise: float) -> tuple:
    """Timings the model itself makes from an alpha and a beta drawn from ``rng``, each
    time multiplied by exp(noise * a normal draw); the points shuffled."""
    alpha = rng.uniform(20e-6, 200e-6)
    beta = rng.uniform(0.5e9, 20e9)
    timings = []
    for collective in collectives:
        for world_size in world_sizes:
            steps, share = terms(collective, world_size)
            for nbytes in sizes:
                nbytes = nbytes // (4 * world_size) * 4 * world_size  # whole floats each
                for _ in range(trials):
                    factor = math.exp(noise * rng.gauss(0.0, 1.0))
                    timings.append((collective, world_size, nbytes,
                                    (steps * alpha + share * nbytes / beta) * factor))
    rng.shuffle(timings)
    return timings, (alpha, beta)


def setup(world_size: int, rng) -> dict:
    sets = []
    timings, truth = modelled(rng, COLLECTIVES, (2, world_size + 2), [4 ** k for k in
                              range(5, 13)], 1, 0.0)
    sets.append({"story": f"every collective at 2 and {world_size + 2} ranks, 1 KiB to "
                          f"16 MiB, no noise", "timings": timings, "truth": truth})
    timings, _ = modelled(rng, COLLECTIVES, range(2, 9), [4 ** k for k in range(5, 14)],
                          3, 0.25)
    timings += rng.sample(timings, len(timings) // 4)  # some twice, to the last digit
    rng.shuffle(timings)
    sets.append({"story": "every collective at 2 to 8 ranks, 1 KiB to 64 MiB, three "
                          "trials each with noise, some of them twice", "timings": timings,
                 "truth": None})
    timings, truth = modelled(rng, ("reduce_scatter", "broadcast"), (3, 5, 6),
                              [4 ** k for k in range(6, 12)], 1, 0.0)
    sets.append({"story": "reduce_scatter and broadcast at 3, 5 and 6 ranks, no noise",
                 "timings": timings, "truth": truth})
    return {"sets": sets}


def describe(world_size: int, given: dict) -> str:
    return (f", {len(given['sets'])} sets of timings and this job's own "
            f"({len(COLLECTIVES) * len(REAL_SIZES) * REAL_TRIALS} calls)")


def one_call(collective: str, whole, part) -> None:
    import torch.distributed as dist

    if collective == "all_reduce":
        dist.all_reduce(whole)
    elif collective == "reduce_scatter":  # the flat forms' names since 2.13, or 2.11's
        (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(
            part, whole)
    elif collective == "all_gather":
        (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(
            whole, part)
    else:
        dist.broadcast(whole, src=0)


def timed_here(world_size: int) -> list:
    """Every collective at REAL_SIZES on this job's ranks: each trial's slowest rank's
    seconds, after a barrier, on every rank alike."""
    import random

    import torch
    import torch.distributed as dist

    timings = []
    for collective in COLLECTIVES:
        for nbytes in REAL_SIZES:
            numel = nbytes // (4 * world_size) * world_size
            whole, part = torch.ones(numel), torch.ones(numel // world_size)
            one_call(collective, whole, part)  # gloo's first call at a size is slower
            for _ in range(REAL_TRIALS):
                dist.barrier()
                begin = time.perf_counter()
                one_call(collective, whole, part)
                seconds = torch.tensor([time.perf_counter() - begin], dtype=torch.float64)
                dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
                timings.append((collective, world_size, numel * 4, seconds.item()))
    random.Random(world_size).shuffle(timings)
    return timings


def on_rank(rank: int, world_size: int, solution, calls, given: dict) -> dict:
    """Every rank times the collectives; rank 0 asks the reader's function about each set,
    this job's timings last."""
    here = timed_here(world_size)
    if rank != 0:
        return {}
    answers = []
    for timings in [s["timings"] for s in given["sets"]] + [here]:
        try:
            with calls.reader():
                answers.append(solution(copy.deepcopy(timings)))
        except NotImplementedError:
            raise  # the stub: refused as every lab refuses it
        except Exception as error:  # noqa: BLE001 (the reader's mistake, said per set)
            from workers.labs.hung_rank import raised_at

            answers.append({"raised": raised_at(error, solution)})
    borrowed = sorted(name for name in sys.modules if name == "workers.cost_model")
    return {"answers": answers, "here": here, "borrowed": borrowed,
            "imported": imported(solution.__code__.co_filename)}


def imported(path: str) -> list[str]:
    """The modules the reader's file imports that the contract does not allow: neither
    the standard library nor torch."""
    import ast

    try:
        tree = ast.parse(open(path).read())
    except (OSError, SyntaxError):
        return []
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return sorted(name for name in names if name.partition(".")[0] not in
                  (*sys.stdlib_module_names, "torch", "__future__"))


def number_pair(answer) -> tuple[float, float] | None:
    try:
        alpha, beta = answer
    except (TypeError, ValueError):
        return None
    if not all(isinstance(value, float) for value in (alpha, beta)):
        return None
    return alpha, beta


def not_floats(answer) -> str:
    """What the answer holds instead of two floats, or ''."""
    try:
        kinds = [type(value) for value in answer]
    except TypeError:
        return ""
    others = sorted({f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins.")
                     for kind in kinds if not issubclass(kind, float)})
    return f"{' and '.join(others)} values" if len(kinds) == 2 and others else ""


def close(got: float, want: float, within: float) -> bool:
    return math.isfinite(got) and abs(got - want) <= within * abs(want)


def shown(alpha: float, beta: float) -> str:
    return f"alpha {alpha * 1e6:.6g} µs and beta {beta / 1e9:.6g} GB/s"


def judge(world_size: int, outcome, given: dict) -> list:
    result = outcome.results[0]
    if result["borrowed"] or "workers.cost_model" in result["imported"]:
        return [Finding(False, "your function imported workers.cost_model: the fit is the "
                               "lab, write it yourself")]
    if result["imported"]:
        return [Finding(False, f"your file imports {', '.join(result['imported'])}: the "
                               f"contract allows the standard library and torch")]
    sets = given["sets"] + [{"story": f"this job's own timings at {world_size} ranks",
                             "timings": result["here"], "truth": None}]
    findings = []
    for case, answer in zip(sets, result["answers"]):
        story = case["story"]
        if isinstance(answer, dict) and "raised" in answer:
            findings.append(Finding(False, f"{story}: your function raised "
                                           f"{answer['raised']}"))
            continue
        got = number_pair(answer)
        if got is None:
            kinds = not_floats(answer)
            said = f"you returned {kinds}" if kinds else f"you returned {answer!r}"
            findings.append(Finding(False, f"{story}: {said}: return (alpha, beta), two "
                                           f"Python floats (a tensor's .item() is one)"))
            continue
        want = least_squares(case["timings"])
        if case["truth"] is not None:  # the exact answer is the set's own alpha and beta
            assert all(close(w, t, EXACT) for w, t in zip(want, case["truth"])), case
        if all(close(g, w, RELATIVE) for g, w in zip(got, want)):
            findings.append(Finding(True, f"{story}: {shown(*got)}"))
            continue
        findings.append(Finding(False, f"{story}: you returned {shown(*got)}, the least "
                                       f"squares answer is {shown(*want)}"
                                       f"{hint(case['timings'], got, want)}"))
    return findings


def hint(timings, got, want) -> str:
    """What a wrong answer suggests the function did."""
    alpha, beta = got
    units = {"alpha in microseconds": (want[0] * 1e6, want[1]),
             "beta in GB/s": (want[0], want[1] / 1e9),
             "1 / beta (seconds per byte) where beta goes": (want[0], 1 / want[1]),
             "beta first, then alpha": (want[1], want[0])}
    for said, pair in units.items():
        if all(close(g, w, RELATIVE) for g, w in zip(got, pair)):
            return f"; that is {said}: return alpha in seconds, beta in bytes per second"
    fits = {"each absolute error weighed alike (the largest times decide the fit)":
            least_squares(timings, weigh=lambda nbytes, seconds: 1.0),
            "each error divided by the square root of its time, not by the time":
            least_squares(timings, weigh=lambda nbytes, seconds: 1 / seconds),
            "each error divided by its bytes, not by its time (a relative error is one "
            "of the time)": least_squares(timings, weigh=lambda nbytes, seconds:
                                          nbytes ** -2),
            "each point's fastest trial alone (each trial is a point)":
            least_squares(fastest_of_each(timings)),
            "identical points kept once, as a set keeps them (each counts)":
            least_squares(list(set(timings))),
            "one point for each collective, world size and size, the mean of its trials "
            "(each trial is a point)": least_squares(averaged(timings)),
            "one trial of each point, the others dropped (each trial is a point)":
            least_squares(first_of_each(timings))}
    fits.update({said: least_squares(timings, counts)
                 for said, counts in MISCOUNTED.items()})
    for said, pair in fits.items():
        if all(close(g, w, 1e-4) for g, w in zip(got, pair)):
            return f"; that is the fit with {said}"
    if all(close(g, w, 1e-2) for g, w in zip(got, in_float32(timings))):
        return ("; that is what float32 gives: compute in double precision (a tensor made "
                "from a list is float32 unless told)")
    if all(close(g, w, 1e-3) for g, w in zip(got, want)):
        return ("; within 0.1% but not one part in a million: float32, or a solve stopped "
                "early")
    return ""


def in_float32(timings) -> tuple[float, float]:
    """The contract's fit by torch.linalg.lstsq on float32 tensors: where float32 lands."""
    import torch

    rows = [(terms(c, n)[0] / t, terms(c, n)[1] * size / t) for c, n, size, t in timings]
    alpha, per_byte = torch.linalg.lstsq(torch.tensor(rows), torch.ones(len(rows), 1)
                                         ).solution[:, 0].tolist()
    return alpha, 1 / per_byte if per_byte else math.inf
