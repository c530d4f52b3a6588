"""Right, written another way: the model divided by each point's steps, a straight line in
n * share / steps whose intercept is alpha, weighed by (steps / t) squared; bit_length for
the tree's rounds."""

from fractions import Fraction


def fit_alpha_beta(timings):
    sw = sx = sy = sxx = sxy = 0.0
    for name, n, size, t in timings:
        if name == "broadcast":
            rounds = (n - 1).bit_length()  # ceil(log2 n), in whole numbers
            steps, share = rounds, Fraction(rounds)
        elif name == "all_gather":
            steps, share = n - 1, Fraction(n - 1, n)
        else:
            steps, share = 2 * (n - 1), Fraction(2 * (n - 1), n)
        x = float(share * size / steps)  # bytes per step
        y = t / steps
        w = (steps / t) ** 2
        sw += w
        sx += w * x
        sy += w * y
        sxx += w * x * x
        sxy += w * x * y
    per_byte = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
    alpha = (sy - per_byte * sx) / sw
    return alpha, 1 / per_byte
