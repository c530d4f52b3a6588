"""Wrong: fits set(timings): identical trials kept once."""

import math


def counts(collective, n):
    """(steps, share) of what gloo runs (torch 2.15)."""
    if collective in ("all_reduce", "reduce_scatter"):  # gloo's reduce-scatter all-reduces
        return 2 * (n - 1), 2 * (n - 1) / n
    if collective == "all_gather":
        return n - 1, (n - 1) / n
    rounds = math.ceil(math.log2(n))  # broadcast: a binomial tree
    return rounds, rounds


def fit_alpha_beta(timings):
    # each point's row divided by its time: (steps/t) alpha + (share n/t) (1/beta) = 1
    rows = []
    for collective, world_size, nbytes, seconds in set(timings):
        steps, share = counts(collective, world_size)
        rows.append((steps / seconds, share * nbytes / seconds))
    aa = sum(a * a for a, _ in rows)
    ab = sum(a * b for a, b in rows)
    bb = sum(b * b for _, b in rows)
    ay = sum(a for a, _ in rows)
    by = sum(b for _, b in rows)
    det = aa * bb - ab * ab
    alpha = (bb * ay - ab * by) / det
    per_byte = (aa * by - ab * ay) / det
    return alpha, 1 / per_byte
