"""Wrong: the right fit by numpy.linalg.lstsq; the contract allows the standard library and
torch."""

import math

import numpy as np


def fit_alpha_beta(timings):
    rows = []
    for collective, n, nbytes, seconds in timings:
        if collective == "broadcast":
            steps = share = math.ceil(math.log2(n))
        elif collective == "all_gather":
            steps, share = n - 1, (n - 1) / n
        else:
            steps, share = 2 * (n - 1), 2 * (n - 1) / n
        rows.append([steps / seconds, share * nbytes / seconds])
    solution = np.linalg.lstsq(np.array(rows), np.ones(len(rows)), rcond=None)[0]
    return float(solution[0]), float(1 / solution[1])
