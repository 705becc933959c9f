"""Variance partitioning: Venn regions of explained variance from subset scores.

Pure functions on a table of held-out scores, one row per non-empty subset
of the bands ``B = {0, ..., k-1}``, in the order of :func:`subsets`. Write
``f(U)`` for the score (held-out R^2) of the model on the bands of ``U``,
with ``f(∅) = 0``, and ``r_S`` for the variance shared by exactly the bands
of ``S`` (a region of the Venn diagram). If ``f(U)`` is the sum of the
regions that meet ``U``, then

    m(U) := f(B) - f(B \\ U) = sum of r_S over the non-empty S ⊆ U,

and Möbius inversion over the subsets gives every region:

    r_S = sum over T ⊆ S of (-1)^(|S| - |T|) m(T).

So the unique variance of band b is ``r_{b} = f(B) - f(B \\ {b})``, and for
two bands the shared part is ``r_{01} = f(0) + f(1) - f(01)``. Held-out
scores are not exactly additive: regions can come out negative (the
subset models overfit differently), and are returned as computed.
"""

import itertools
import numbers

import numpy as np

__all__ = ["subsets", "unique_variance", "venn_regions"]


def subsets(n_bands):
    """Every non-empty subset of ``range(n_bands)``, as sorted tuples.

    The order of every table of this module: by size, then lexicographic.

    Parameters
    ----------
    n_bands : int >= 1

    Returns
    -------
    list of tuple of int
        ``2**n_bands - 1`` subsets.

    Examples
    --------
    >>> from skbatch._ridge.partition import subsets
    >>> subsets(3)
    [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)]
    """
    n_bands = _check_n_bands(n_bands)
    return [
        subset
        for size in range(1, n_bands + 1)
        for subset in itertools.combinations(range(n_bands), size)
    ]


def venn_regions(scores, n_bands):
    """The Venn regions of explained variance, from the subsets' scores.

    Parameters
    ----------
    scores : array-like of shape (2**n_bands - 1, ...)
        ``f(U)`` of each non-empty subset ``U`` in the order of
        :func:`subsets`, for any trailing shape (targets).
    n_bands : int >= 1

    Returns
    -------
    regions : ndarray of the shape of ``scores``
        ``r_S`` of each subset ``S`` in the same order: the variance shared
        by exactly the bands of ``S`` (the module's docstring gives the
        formulas). The regions sum to ``f(B)``, the last score.

    Examples
    --------
    >>> from skbatch._ridge.partition import venn_regions
    >>> # f(0) = 0.3, f(1) = 0.5, f(01) = 0.6
    >>> venn_regions([0.3, 0.5, 0.6], 2).round(12).tolist()
    [0.1, 0.3, 0.2]
    """
    by_mask = _by_mask(scores, n_bands)
    full = (1 << n_bands) - 1
    # m(T) = f(B) - f(B \ T); f of the empty set is 0 (row 0).
    moments = by_mask[full] - by_mask[full ^ np.arange(full + 1)]
    # Möbius inversion over the subset lattice, one band at a time: after
    # band b, entry S holds the alternating sum over the T ⊆ S that differ
    # from S in bands 0..b only.
    for band in range(n_bands):
        bit = 1 << band
        has = (np.arange(full + 1) & bit) != 0
        moments[has] = moments[has] - moments[np.flatnonzero(has) ^ bit]
    return _in_order(moments, n_bands)


def unique_variance(scores, n_bands):
    """The variance each band explains alone: ``f(B) - f(B \\ {b})``.

    Parameters
    ----------
    scores : array-like of shape (2**n_bands - 1, ...)
        As for :func:`venn_regions`.
    n_bands : int >= 1

    Returns
    -------
    unique : ndarray of shape (n_bands, ...)
        Row b: the region of band b alone, ``regions[b]`` of
        :func:`venn_regions`.

    Examples
    --------
    >>> from skbatch._ridge.partition import unique_variance
    >>> unique_variance([0.3, 0.5, 0.6], 2).round(12).tolist()
    [0.1, 0.3]
    """
    by_mask = _by_mask(scores, n_bands)
    full = (1 << n_bands) - 1
    return np.stack([by_mask[full] - by_mask[full ^ (1 << b)] for b in range(n_bands)])


def _check_n_bands(n_bands):
    if (
        not isinstance(n_bands, numbers.Integral)
        or isinstance(n_bands, bool)
        or n_bands < 1
    ):
        raise ValueError(f"n_bands must be an int >= 1, got {n_bands!r}")
    return int(n_bands)


def _masks(n_bands):
    """The bit mask of each subset of :func:`subsets`, in its order."""
    return np.array([sum(1 << b for b in subset) for subset in subsets(n_bands)])


def _by_mask(scores, n_bands):
    """``scores`` as float64 indexed by bit mask, row 0 (the empty set) 0."""
    n_bands = _check_n_bands(n_bands)
    scores = np.asarray(scores, dtype=np.float64)
    expected = (1 << n_bands) - 1
    if scores.ndim == 0 or scores.shape[0] != expected:
        raise ValueError(
            f"scores must have one row per non-empty subset of {n_bands} band(s) "
            f"({expected}), got shape {scores.shape}"
        )
    by_mask = np.zeros((expected + 1, *scores.shape[1:]))
    by_mask[_masks(n_bands)] = scores
    return by_mask


def _in_order(by_mask, n_bands):
    """Rows of a table indexed by bit mask, in the order of :func:`subsets`."""
    return by_mask[_masks(n_bands)]
