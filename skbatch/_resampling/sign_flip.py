"""Sign flips: one-sample resampling of rows symmetric about 0.

Under the null hypothesis that the rows of ``y`` are symmetric about 0
(per-subject effect maps whose mean map is tested against 0), multiplying
the rows by any vector of signs leaves the distribution of ``y`` unchanged.
A resample multiplies the rows by a sign vector ``s`` in ``{-1, +1}**n``;
with ``groups``, every row of a group shares one sign (whole runs or
subjects flipped together, which keeps the dependence within a group).
This is the one-sample case of :func:`scipy.stats.permutation_test` with
``permutation_type="samples"``, of MNE's ``permutation_t_test`` and of
nilearn's ``permuted_ols`` sign swaps.

Stream layout: item ``i`` draws one integer in ``[0, 2)`` per unit (a row,
or a group in the order of its sorted labels) from its own window of the
counter-based generator (``streams.integers``), 1
meaning a flip; with ``exact=True`` nothing is drawn and unit ``u`` of
item ``i`` is flipped when bit ``u`` of ``i`` is set, so item 0 is the
identity and the ``2**n_units`` items are every sign vector once.

Resampled targets travel as *signed rows*: an int64 code per row, ``r``
for ``+y[r]`` and ``~r`` (``-r - 1``) for ``-y[r]``, so that the
permutation schemes' row indices (all codes non-negative) and sign flips
share one representation (:func:`skbatch._resampling.signed.signed_rows`,
:func:`split_signed_rows`).
"""

import numpy as np

from .base import Scheme
from .groups import group_codes
from .registry import register
from .streams import check_items, integers

__all__ = [
    "SIGN_FLIP",
    "SignFlip",
    "count_sign_flips",
    "sign_flips",
    "split_signed_rows",
]

SIGN_FLIP = "sign_flip"
# Enumerated sign vectors are numbered by int64 item ids: 2**62 is the
# largest power of two below the largest int64.
_MAX_ENUMERATED_UNITS = 62


def _units(n_samples, groups):
    """``(codes, n_units)``: the unit of each row (a row, or its group)."""
    if groups is None:
        return np.arange(n_samples), n_samples
    codes = group_codes(groups, n_samples)
    return codes, int(codes.max()) + 1


def count_sign_flips(n_samples, groups=None, *, limit=None):
    """How many distinct sign vectors the scheme can produce: ``2**n_units``.

    Parameters
    ----------
    n_samples : int
        Number of samples.
    groups : array-like of shape (n_samples,) or None
        One sign per group when given, else one per row.
    limit : int or None, default=None
        Stop counting above this; None counts up to ``2**62``.

    Returns
    -------
    count : int or None
        None when the count exceeds ``limit`` (or ``2**62``).

    Examples
    --------
    >>> from skbatch._resampling.sign_flip import count_sign_flips
    >>> count_sign_flips(6, [0, 0, 1, 1, 2, 2])
    8
    >>> count_sign_flips(100, limit=10**6) is None
    True
    """
    _, n_units = _units(n_samples, groups)
    if n_units > _MAX_ENUMERATED_UNITS:
        return None
    count = 2**n_units
    return None if limit is not None and count > int(limit) else count


def sign_flips(entropy, items, n_samples, groups=None, *, exact=False):
    """One sign vector per item.

    Parameters
    ----------
    entropy : int
        From :func:`skbatch.random.resolve_entropy`.
    items : array-like of int
        Resample ids.
    n_samples : int
        Number of samples.
    groups : array-like of shape (n_samples,) or None
        Rows of a group share one sign; without groups, one sign per row.
    exact : bool, default=False
        Enumerate instead of drawing: unit ``u`` (a row, or the ``u``-th
        group in sorted label order) of item ``i`` is flipped when bit ``u``
        of ``i`` is set; item 0 is the identity. Items must be below
        :func:`count_sign_flips`.

    Returns
    -------
    signs : ndarray of shape (len(items), n_samples), dtype int8
        ``signs[k, :, None] * y`` is the k-th resampled target.

    Raises
    ------
    ValueError
        If ``groups`` does not label each sample, an item is negative, or
        with ``exact`` an item is not below the count.

    Examples
    --------
    >>> from skbatch._resampling.sign_flip import sign_flips
    >>> sign_flips(0, [0, 1, 2, 3], 4, groups=[0, 0, 1, 1], exact=True)
    array([[ 1,  1,  1,  1],
           [-1, -1,  1,  1],
           [ 1,  1, -1, -1],
           [-1, -1, -1, -1]], dtype=int8)
    >>> signs = sign_flips(7, [5], 10)
    >>> bool((sign_flips(7, [4, 5, 6], 10)[1] == signs[0]).all())
    True
    """
    items = check_items(items)
    codes, n_units = _units(n_samples, groups)
    if exact:
        total = count_sign_flips(n_samples, groups)
        if total is None or (items.size and items.max() >= total):
            raise ValueError(
                f"exact=True enumerates the {total or 'more than 2**62'} sign "
                f"vectors of {n_units} units: items must be below that, got "
                f"{int(items.max()) if items.size else None}"
            )
        flips = (items[:, None] >> np.arange(n_units, dtype=np.int64)) & 1
    else:
        flips = integers(entropy, items, np.full(n_units, 2))
    signs = (1 - 2 * flips).astype(np.int8)
    return signs[:, codes]


def split_signed_rows(codes):
    """``(rows, signs)`` of signed row codes (:func:`signed_rows`); ``signs``
    (int8, +1 or -1) is None when every code is non-negative.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._resampling.sign_flip import split_signed_rows
    >>> split_signed_rows(np.array([[-1, 1, 2]]))
    (array([[0, 1, 2]]), array([[-1,  1,  1]], dtype=int8))
    """
    codes = np.asarray(codes)
    negative = codes < 0
    if not negative.any():
        return codes, None
    rows = np.where(negative, ~codes, codes)
    return rows, np.where(negative, -1, 1).astype(np.int8)


@register("sign_flip")
class SignFlip(Scheme):
    """Sign flips of rows, or of whole groups: :func:`sign_flips` as a scheme.

    Its :meth:`rows` are signed row codes (``~r`` for ``-y[r]``), which
    :func:`split_signed_rows` splits into rows and signs; counting them is
    meaningless, so a linear bootstrap path cannot take it.

    Examples
    --------
    >>> from skbatch._resampling.registry import scheme
    >>> scheme("sign_flip", 4, [0, 0, 1, 1], exact=True).rows(0, [2])
    array([[ 0,  1, -3, -4]])
    """

    def __init__(self, n_samples, groups=None, *, exact=False):
        super().__init__(n_samples, groups)
        self.exact = exact
        _units(n_samples, groups)  # checks the labels before any draw

    def signs(self, entropy, items):
        """Each item's signs, of shape (len(items), n_samples), int8."""
        return sign_flips(entropy, items, self.n_samples, self.groups, exact=self.exact)

    def rows(self, entropy, items):
        rows = np.arange(self.n_samples, dtype=np.int64)
        return np.where(self.signs(entropy, items) > 0, rows, ~rows)

    def counts(self, entropy, items):
        raise TypeError("sign flips multiply rows by signs; they have no counts")

    def n_distinct(self, cap=None):
        """``2**n_units``, or None above ``cap``."""
        return count_sign_flips(self.n_samples, self.groups, limit=cap)
