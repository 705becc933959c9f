"""Exact enumeration: every distinct permutation of a scheme, once each.

Item ``i`` is decoded from ``i`` alone, whatever the entropy: it is read in
the mixed radix of the groups' counts of distinct orders (the first group's
digit varies fastest), and each group's digit is decoded by the permutation
scheme enumerated (:meth:`~skbatch._resampling.permutations.GroupPermutation.ranked`):
an offset, or the lexicographic rank of an order of rows or of blocks.
"""

import math

import numpy as np

from .base import Scheme
from .registry import register, scheme
from .streams import check_items

__all__ = ["MAX_ENUMERATED", "Exact", "capped_product", "unranked"]

# Enumerated permutations are numbered by int64 item ids.
MAX_ENUMERATED = np.iinfo(np.int64).max


def capped_product(factors, cap):
    """The product of ``factors`` (Python ints), or None once it exceeds ``cap``."""
    product = 1
    for factor in factors:
        product *= factor
        if product > cap:
            return None
    return product


def unranked(ranks, m):
    """The permutation of ``0 .. m - 1`` of each lexicographic rank (< m!)."""
    out = np.empty((ranks.shape[0], m), dtype=np.int64)
    remaining = np.broadcast_to(np.arange(m), (ranks.shape[0], m))
    rest = ranks.copy()
    every = np.arange(ranks.shape[0])
    for k in range(m):
        place, rest = np.divmod(rest, math.factorial(m - 1 - k))
        out[:, k] = remaining[every, place]
        kept = np.arange(m - k)[None, :] != place[:, None]
        remaining = remaining[kept].reshape(ranks.shape[0], m - k - 1)
    return out


@register("exact")
class Exact(Scheme):
    """Permutation ``i`` of the enumeration of scheme ``permutation_type``.

    Item 0 is the identity; items must be below the scheme's
    :meth:`n_distinct`.

    Examples
    --------
    >>> from skbatch._resampling.enumeration import Exact
    >>> Exact(3, permutation_type="circular_shift").rows(0, [0, 1, 2])
    array([[0, 1, 2],
           [1, 2, 0],
           [2, 0, 1]])
    """

    def __init__(self, n_samples, groups=None, *, permutation_type, block_size=None):
        super().__init__(n_samples, groups)
        self.permutation_type = permutation_type
        self.permutation = scheme(
            permutation_type, n_samples, groups, block_size=block_size
        )

    def n_distinct(self, cap=None):
        """The enumerated scheme's :meth:`n_distinct`."""
        return self.permutation.n_distinct(cap)

    def rows(self, entropy, items):
        items = check_items(items)
        permutation = self.permutation
        counts = permutation.group_counts(MAX_ENUMERATED)
        total = None if counts is None else capped_product(counts, MAX_ENUMERATED)
        if total is None or (items.size and items.max() >= total):
            raise ValueError(
                f"exact=True enumerates the {total or 'more than 2**63'} distinct "
                f"permutations of permutation_type={self.permutation_type!r}: items "
                f"must be below that, got {int(items.max()) if items.size else None}"
            )
        out = np.empty((items.shape[0], self.n_samples), dtype=np.int64)
        rest = items.copy()
        for rows, count in zip(permutation.members, counts):
            rest, digit = np.divmod(rest, count)
            out[:, rows] = permutation.ranked(rows, digit)
        return out
