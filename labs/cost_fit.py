"""Lab: fit the cost model to measured collectives (chapter: Predict, then measure).

Check it with:  python -m workers.labs check cost_fit
"""


def fit_alpha_beta(timings: list) -> tuple:
    """Fit one latency alpha and one bandwidth beta to collectives timed on gloo.

    Arguments: ``timings``, a list of ``(collective, world_size, nbytes, seconds)``
    tuples: one call of ``collective`` (``"all_reduce"``, ``"reduce_scatter"``,
    ``"all_gather"`` or ``"broadcast"``, the middle two standing for
    ``reduce_scatter_single`` and ``all_gather_single``) at ``world_size`` ranks (2 or
    more) over ``nbytes`` bytes (the whole tensor: a reduce-scatter's input, an
    all-gather's output) took ``seconds``. Points come in any order, and the same
    collective, world size and size may come several times (several trials): every tuple
    counts, repeats included, even two identical to the last digit.

    The model: a call costs ``steps * alpha + share * nbytes / beta``, with the steps and
    the share of the bytes of the algorithm gloo runs for that collective at that world
    size in torch 2.15 (the chapter's table "What gloo runs").

    Fit by least squares on relative errors: the alpha and beta that make the sum, over
    every point, of ``(predicted / seconds - 1) ** 2`` smallest. That is a linear least
    squares problem in ``alpha`` and ``1 / beta``, whose answer is unique: the checker
    compares yours to it within one part in a million, so compute in double precision
    (Python's floats are; a torch tensor made from a list is float32 unless told).

    Returns: ``(alpha, beta)``, two floats: alpha in seconds, beta in bytes per second.

    May use: the Python standard library and torch. Not the book's workers.cost_model
    (its fit is the answer, not yours).
    """
    raise NotImplementedError("write fit_alpha_beta, then run: "
                              "python -m workers.labs check cost_fit")
