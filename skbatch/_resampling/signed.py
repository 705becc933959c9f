"""Resamples of any ``permutation_type`` as signed row codes.

``PermutationScorer`` and its ridge problems take one representation of a
resample of ``y``: an int64 code per row, ``r`` for ``+y[r]`` and ``~r`` for
``-y[r]``. The permutation schemes' rows are codes as they are; sign flips
(:mod:`.sign_flip`) code the flipped rows. This module dispatches on
``permutation_type`` between :mod:`skbatch.random`'s permutations and the
sign flips, and checks the type.
"""

from .registry import (
    PERMUTATION_TYPES,
    check_permutation_type,
    permutation_scheme,
    scheme,
)
from .sign_flip import SIGN_FLIP, count_sign_flips
from .streams import check_items

__all__ = [
    "RESAMPLING_TYPES",
    "check_resampling_type",
    "count_resamples",
    "signed_rows",
]

# What ``PermutationScorer(permutation_type=...)`` accepts.
RESAMPLING_TYPES = (*PERMUTATION_TYPES, SIGN_FLIP)


def check_resampling_type(permutation_type, block_size):
    """Refuse an unknown ``permutation_type``, or ``block_size`` where the
    scheme does not take it.

    Raises
    ------
    ValueError
        Naming the value received and those allowed.

    Examples
    --------
    >>> from skbatch._resampling.signed import check_resampling_type
    >>> check_resampling_type("sign_flip", None)
    >>> check_resampling_type("sign_flip", 5)
    Traceback (most recent call last):
    ...
    ValueError: block_size is only used with permutation_type='block_shuffle', ...
    """
    if not isinstance(permutation_type, str) or permutation_type not in (
        RESAMPLING_TYPES
    ):
        raise ValueError(
            f"permutation_type must be one of {RESAMPLING_TYPES}, got "
            f"{permutation_type!r}"
        )
    if permutation_type == SIGN_FLIP:
        if block_size is not None:
            raise ValueError(
                f"block_size is only used with permutation_type='block_shuffle', "
                f"got block_size={block_size!r} with permutation_type='sign_flip' "
                f"(which flips rows, or whole groups when groups are given: pass "
                f"the runs or subjects as groups)"
            )
        return
    check_permutation_type(permutation_type, block_size)


def signed_rows(
    entropy,
    items,
    n_samples,
    groups=None,
    *,
    permutation_type="shuffle",
    block_size=None,
    exact=False,
):
    """Each item's resampled rows as signed row codes, for any scheme.

    ``r`` stands for ``+y[r]``, ``~r`` (``-r - 1``) for ``-y[r]``: the row
    permutations of :func:`skbatch.random.permutation_indices` as they are
    (every code non-negative), or for ``permutation_type="sign_flip"`` row
    ``j`` itself with the sign of :func:`sign_flips`.

    Parameters
    ----------
    entropy, items, n_samples, groups, block_size, exact
        As for :func:`skbatch.random.permutation_indices`.
    permutation_type : {"shuffle", "circular_shift", "block_shuffle", \
"sign_flip"}

    Returns
    -------
    codes : ndarray of shape (len(items), n_samples), dtype int64

    Examples
    --------
    >>> from skbatch._resampling.signed import signed_rows
    >>> signed_rows(0, [1], 3, permutation_type="sign_flip", exact=True)
    array([[-1,  1,  2]])
    """
    check_resampling_type(permutation_type, block_size)
    if permutation_type != SIGN_FLIP:
        drawn = permutation_scheme(
            n_samples,
            groups,
            permutation_type=permutation_type,
            block_size=block_size,
            exact=exact,
        )
        return drawn.rows(entropy, check_items(items))
    return scheme(SIGN_FLIP, n_samples, groups, exact=exact).rows(entropy, items)


def count_resamples(
    n_samples, groups=None, *, permutation_type="shuffle", block_size=None, limit=None
):
    """Distinct resamples of any scheme: :func:`count_sign_flips` or
    :func:`skbatch.random.count_permutations`.

    Examples
    --------
    >>> from skbatch._resampling.signed import count_resamples
    >>> count_resamples(3, permutation_type="sign_flip"), count_resamples(3)
    (8, 6)
    """
    check_resampling_type(permutation_type, block_size)
    if permutation_type == SIGN_FLIP:
        return count_sign_flips(n_samples, groups, limit=limit)
    counted = permutation_scheme(
        n_samples, groups, permutation_type=permutation_type, block_size=block_size
    )
    return counted.n_distinct(limit)
