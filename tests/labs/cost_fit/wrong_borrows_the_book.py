"""Wrong: the book's own fit."""

from workers.cost_model import fit, terms


def fit_alpha_beta(timings):
    found = fit([(*terms(c, n), size, t) for c, n, size, t in timings])
    return found.alpha, found.beta
