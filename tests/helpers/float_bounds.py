"""Rounding-error bounds for the tests that compare a float32 result with one computed in another
order (a float64 reference, another batching or chunking, another kernel): the tolerance is
derived from the sizes involved, so it holds on any processor, whatever order its vector width,
BLAS blocking or thread count gives a sum. (A test that needs bit-identity runs the same order
twice and compares exactly; one that compares to a float64 computation from the same float32
inputs allows float64 rounding only.)

The textbook bounds (N. J. Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 2002):
every operation is exact times ``1 + delta`` with ``|delta| <= u``, the unit roundoff (2^-24 in
float32, 2^-53 in float64); a product of ``n`` such factors or their inverses is ``1 + theta_n``
with ``|theta_n| <= gamma_n = n u / (1 - n u)`` (Lemma 3.1), and ``gamma_j + gamma_k + gamma_j
gamma_k <= gamma_{j+k}`` (Lemma 3.3). Hence, in any order of the additions (a fused multiply-add
only drops roundings):

* a sum of ``n`` terms: ``|fl(sum x_i) - sum x_i| <= gamma_{n-1} sum |x_i|`` (sec. 4.2, eq. 4.4);
* a dot product of length ``n``: ``|fl(x . y) - x . y| <= gamma_n |x| . |y|`` (sec. 3.1, eq. 3.5).
"""

from __future__ import annotations

import numpy as np

U32 = 2.0**-24
U64 = 2.0**-53


def gamma(n: int, u: float = U32) -> float:
    """``gamma_n = n u / (1 - n u)``: the relative error of ``n`` roundings (Higham, Lemma 3.1)."""
    if n * u >= 1:
        raise ValueError(f"gamma_{n} is unbounded for u = {u}")
    return n * u / (1 - n * u)


def cosine_bound(width: int, roundings: int = 0) -> float:
    """Absolute error of a float32 cosine of two rows of ``width`` features computed as
    ``condensation.cosine.unit_rows`` then a dot product (``cosine_matrices``, the accumulators):
    the squared norm (``width`` roundings, positive terms), its square root and the division
    leave each unit-row entry within ``gamma_{width+2}`` relatively; the dot product adds
    ``gamma_width``; so ``|error| <= gamma_{3 width + 4} |x| . |y| <= gamma_{3 width + 4}`` (unit
    rows, Cauchy-Schwarz); the clamp to [-1, 1] only moves a value towards the exact one.
    ``roundings``: roundings of each input entry before (a float64 hidden state cast to float32:
    1), each adding 2 to a row's count (the entry and its norm)."""
    return gamma(3 * width + 4 + 4 * roundings)


def mean_cosine_bound(width: int, count: int, roundings: int = 0) -> float:
    """Absolute error of a mean of ``count`` float32 cosines (``cosine_bound``) summed in float64,
    against the exact mean: the float64 sum and division add ``gamma_count(u64)``, and so does a
    float64 reference's own sum, with its float64 cosines' ``gamma_{3 width + 4}(u64)``. Two
    float32 computations of one mean in different orders differ by at most twice this."""
    return cosine_bound(width, roundings) + gamma(3 * width + 4, U64) + 2 * gamma(count, U64)


def histogram_tolerance(values, bound: float, bins: int = 128) -> np.ndarray:
    """Per bin of a density histogram over [-1, 1], how far two computations of the cosines
    ``values`` (a float64 computation stands for the exact ones), each within ``bound`` of them,
    may differ: a value within ``bound`` of an inner edge may fall on either side of it, moving
    each bin beside the edge by one count, ``bins / (2 * values.size)`` of density. Values
    farther from every edge fall in the same bin in any order (cosines are clamped to [-1, 1],
    and the outer edges close their bins)."""
    values = np.asarray(values, dtype=np.float64).ravel()
    position = (values + 1.0) * bins / 2  # in bin widths: inner edges at 1 .. bins - 1
    edge = np.clip(np.round(position), 1, bins - 1).astype(int)
    near = edge[np.abs(position - edge) <= bound * bins / 2]
    moves = np.bincount(near - 1, minlength=bins) + np.bincount(near, minlength=bins)  # the bins below and above
    return moves * bins / (2 * values.size)


LOGGED_REL = 2e-7
"""Relative tolerance for values read back from ``log.csv``, which writes 8 significant digits
(``%.8g``): each logged value is within half a unit of its 8th digit, 5e-8 of itself, so a logged
value and the one it rounds differ by <= 5e-8, and a logged sum of positive terms and the sum of
its logged terms (``loss = ce + weight * aux``) by <= 1e-7; doubled, since ``pytest.approx`` takes
the rounded value as the reference. A wrong column or weight moves a loss by far more."""
