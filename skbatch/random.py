"""Per-item random streams.

Item ``i`` (a bootstrap replicate, a permutation) draws from its own stream,
which depends on the entropy from the estimator's ``random_state`` and on
``i`` alone. Indices are generated per batch on the host. Hence the same
``random_state`` gives the same result for any batch size, budget, OOM
split, ``n_jobs``, joblib backend and device. Every estimator's
``random_state`` defaults to :data:`DEFAULT_RANDOM_STATE` (0), so a rerun
gives the same numbers; ``None`` draws fresh entropy every fit.

Stream layout
-------------
The streams are windows of one counter-based generator,
:class:`numpy.random.Philox` (Philox4x64-10), whose 128-bit key is the first
two 64-bit words of ``SeedSequence(entropy).generate_state(4, uint64)``.
Each counter value gives four 64-bit words. A call that needs ``L`` words
per item gives item ``i`` the ``4 * ceil(L / 4)`` words that start at counter
``i * ceil(L / 4)``, so a batch of consecutive items is one contiguous run of
the generator, drawn in one call. ``L`` depends on the scheme and the sizes
(below), never on the batch.

- Uniform integers in ``[0, m)`` (``m <= 2**32``): draw ``j`` of an item is
  the low (``j`` even) or high (``j`` odd) 32-bit half of its word
  ``j // 2``, mapped by Lemire's multiply-shift with rejection, which has no
  modulo bias. A rejected draw (probability below ``m / 2**32``) is redrawn
  from the 32-bit halves, low then high, of a second Philox keyed by the
  last two words of the state above, at counter ``i * 2**128 + j * 2**64``.
- Uniform permutations of ``m`` elements: one 64-bit word per element, the
  elements sorted by its high ``64 - b`` bits, ``b`` the bit length of
  ``m - 1``, ties going by position. A tie has probability below
  ``m**2 / 2**(65 - b)`` (2e-10 for ``m = 2000``, 4e-5 for ``m = 10**5``).

Per scheme, for ``n`` samples:

- :func:`bootstrap_rows`: ``n`` integers in ``[0, n)`` (rows); one per
  group in ``[0, n_groups)`` (clusters); ``n_blocks`` block starts
  (``block_size``, moving blocks); per group of ``m`` rows, ``ceil(m /
  block_size)`` block starts in ``[0, m)``, the groups in group order
  (circular blocks); one start in ``[0, m)`` per row, then one integer in
  ``[0, block_size)`` per row, 0 starting a new block (stationary blocks).
  A replicate's rows follow its draws in order (the layout is in
  :func:`bootstrap_rows`); :func:`bootstrap_counts` counts these rows and
  draws nothing of its own.
- :func:`permutation_indices`: ``n`` words, of which each group sorts its
  own rows' (``"shuffle"``); one integer per group in ``[0, group size)``
  (``"circular_shift"``); one word per block, the blocks of each group in
  group order (``"block_shuffle"``); none with ``exact=True``, where item
  ``i`` is decoded from ``i`` alone (the enumeration of
  :func:`count_permutations`).

:func:`item_rng` gives an independent :class:`numpy.random.Generator` per
item for other uses; the functions above do not use it.

The schemes themselves are small classes of ``skbatch/_resampling``, one
per name behind a registry (its ``registry.py``); the functions above build
the scheme their parameters name and draw through it, and the stream layout
is implemented in its ``streams.py``.
"""

import numbers

import numpy as np

from ._resampling.groups import check_groups
from ._resampling.registry import (
    BLOCK_SCHEMES,
    PERMUTATION_TYPES,
    bootstrap_scheme,
    check_block_scheme,
    permutation_scheme,
    scheme,
)
from ._resampling.registry import check_permutation_type as _check_permutation_type
from ._resampling.streams import check_items as _check_items

__all__ = [
    "DEFAULT_RANDOM_STATE",
    "BLOCK_SCHEMES",
    "PERMUTATION_TYPES",
    "bootstrap_counts",
    "bootstrap_rows",
    "check_groups",
    "count_permutations",
    "item_rng",
    "permutation_indices",
    "resolve_entropy",
]

# The ``random_state`` default of every skbatch estimator: reproducible by
# default, as ``permutation_test_score``, so a rerun of a script gives the same
# p-values and intervals; ``random_state=None`` asks for fresh draws every fit.
DEFAULT_RANDOM_STATE = 0
# Entropy drawn from a RandomState / Generator: 128 bits, as SeedSequence
# itself draws from the OS.
_ENTROPY_WORDS = 4


def resolve_entropy(random_state):
    """Root entropy of all item streams, fixed once per fit.

    Parameters
    ----------
    random_state : None, int, numpy.random.RandomState or Generator
        None draws fresh entropy from the OS; an int >= 0 is used as is; a
        RandomState or Generator is advanced to draw the entropy.

    Returns
    -------
    int
        Entropy for :class:`numpy.random.SeedSequence`.

    Examples
    --------
    >>> from skbatch.random import resolve_entropy
    >>> resolve_entropy(42)
    42
    """
    if random_state is None:
        return np.random.SeedSequence().entropy
    if isinstance(random_state, numbers.Integral) and not isinstance(
        random_state, bool
    ):
        if random_state < 0:
            raise ValueError(f"random_state must be >= 0, got {random_state!r}")
        return int(random_state)
    if isinstance(random_state, np.random.RandomState):
        words = random_state.randint(0, 2**32, size=_ENTROPY_WORDS, dtype=np.uint64)
    elif isinstance(random_state, np.random.Generator):
        words = random_state.integers(0, 2**32, size=_ENTROPY_WORDS, dtype=np.uint64)
    else:
        raise TypeError(
            "random_state must be None, an int, a numpy RandomState or Generator, "
            f"got {type(random_state).__name__}: {random_state!r}"
        )
    return sum(int(w) << (32 * k) for k, w in enumerate(words))


def item_rng(entropy, item):
    """The generator of one item: depends on ``entropy`` and ``item`` only.

    Examples
    --------
    >>> from skbatch.random import item_rng
    >>> bool(item_rng(0, 5).integers(100) == item_rng(0, 5).integers(100))
    True
    """
    return np.random.default_rng(
        np.random.SeedSequence(entropy, spawn_key=(int(item),))
    )


def block_rows(
    entropy, items, n_samples, groups=None, *, block_size, block_scheme="moving"
):
    """The rows each block-bootstrap replicate draws, of shape (len(items), m).

    For "moving", the rows block after block, ``m = block_size * n_blocks``;
    for "circular" and "stationary", ``m = n_samples`` and column ``j`` is
    the row drawn in place of row ``j``, so that each group keeps its
    length. See :func:`bootstrap_counts`.
    """
    check_block_scheme(block_scheme, block_size)
    items = _check_items(items)
    drawn = scheme(block_scheme, n_samples, groups, block_size=block_size)
    return drawn.rows(entropy, items)


def bootstrap_counts(
    entropy, items, n_samples, groups=None, *, block_size=None, block_scheme="moving"
):
    """How often each sample is drawn in each bootstrap replicate.

    The rows of :func:`bootstrap_rows`, counted: the weights of a fit that
    does not depend on the order of its rows.

    Parameters
    ----------
    entropy : int
        From :func:`resolve_entropy`.
    items : array-like of int
        Replicate ids.
    n_samples : int
        Number of samples (rows).
    groups : array-like of shape (n_samples,) or None
        Without ``block_size``: cluster labels; whole clusters are drawn with
        replacement and every row of a drawn cluster counts once per draw.
        With ``block_size``: a block never crosses a group boundary (runs of
        a time series). Labels may come in any order; a group's rows are
        consecutive in row order.
    block_size : int >= 1 or None
        Block bootstrap with blocks of ``block_size`` consecutive rows of one
        group (the mean length, for "stationary"); at most the size of the
        smallest group.
    block_scheme : {"moving", "circular", "stationary"}, default="moving"
        How blocks are drawn, with ``block_size``:

        - ``"moving"``: a replicate is made of ``round(n_samples /
          block_size)`` whole blocks (half rounded up, at least one), whose
          starts are drawn uniformly with replacement among all valid start
          positions, pooled over groups. A replicate thus has ``block_size *
          n_blocks`` rows, within ``block_size / 2`` of ``n_samples``.
        - ``"circular"`` (arch's ``CircularBlockBootstrap``): each group of
          ``m`` rows is replaced by ``ceil(m / block_size)`` blocks whose
          starts are drawn uniformly among its ``m`` rows, a block wrapping
          around the end of its group to its first row; the last block is
          cut so that the group keeps ``m`` rows.
        - ``"stationary"`` (Politis and Romano's, arch's
          ``StationaryBootstrap``): as "circular", but block lengths are
          geometric with mean ``block_size``: each row after a group's first
          starts a new block with probability ``1 / block_size``.

        Other than "moving" needs ``block_size``.

    Returns
    -------
    counts : ndarray of shape (len(items), n_samples), dtype int64
        Row ``k`` sums to ``n_samples`` (rows, circular and stationary
        blocks), to the number of rows in the drawn clusters (groups), or to
        ``block_size`` times the number of blocks (moving blocks).

    Raises
    ------
    ValueError
        If ``groups`` does not label each sample, ``block_size`` is not an
        int >= 1 or is larger than a group (or than ``n_samples``), or
        ``block_scheme`` is unknown or other than "moving" without
        ``block_size``.

    Examples
    --------
    >>> from skbatch.random import bootstrap_counts
    >>> bootstrap_counts(0, [0, 1], 5).sum(axis=1)
    array([5, 5])
    >>> bootstrap_counts(0, [0, 1], 10, block_size=3).sum(axis=1)
    array([9, 9])
    >>> bootstrap_counts(0, [0, 1], 10, block_size=3, block_scheme="circular").sum(
    ...     axis=1
    ... )
    array([10, 10])
    """
    check_block_scheme(block_scheme, block_size)
    items = _check_items(items)
    drawn = bootstrap_scheme(
        n_samples, groups, block_size=block_size, block_scheme=block_scheme
    )
    return drawn.counts(entropy, items)


def bootstrap_rows(
    entropy, items, n_samples, groups=None, *, block_size=None, block_scheme="moving"
):
    """The rows of each bootstrap replicate, in the order they are drawn.

    The one representation of a resample: :func:`bootstrap_counts` counts
    these rows, and a refit reads them in this order, as scikit-learn's
    ``resample`` and arch's bootstraps hand out their indices.

    Parameters
    ----------
    entropy, items, n_samples, groups, block_size, block_scheme
        As for :func:`bootstrap_counts`.

    Returns
    -------
    rows : list of ndarray of dtype int64, one per item
        In draw order:

        - rows (neither ``groups`` nor ``block_size``): the ``n_samples``
          draws, in the order drawn;
        - clusters (``groups`` alone): the drawn clusters one after another
          in the order drawn, each cluster's rows in their order in the data;
        - ``"moving"`` blocks: the blocks one after another in the order
          drawn, each block's rows consecutive;
        - ``"circular"`` and ``"stationary"`` blocks: position ``j`` holds the
          row drawn in place of row ``j``, so each group keeps its place and
          length, its blocks in the order drawn.

    Raises
    ------
    ValueError
        As :func:`bootstrap_counts`.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch.random import bootstrap_counts, bootstrap_rows
    >>> rows = bootstrap_rows(0, [0, 1], 10, block_size=3)
    >>> [np.diff(r.reshape(-1, 3), axis=1).tolist() == [[1, 1]] * 3 for r in rows]
    [True, True]
    >>> counts = bootstrap_counts(0, [0, 1], 10, block_size=3)
    >>> bool((np.bincount(rows[1], minlength=10) == counts[1]).all())
    True
    """
    check_block_scheme(block_scheme, block_size)
    items = _check_items(items)
    drawn = bootstrap_scheme(
        n_samples, groups, block_size=block_size, block_scheme=block_scheme
    )
    return list(drawn.rows(entropy, items))


def permutation_indices(
    entropy,
    items,
    n_samples,
    groups=None,
    *,
    permutation_type="shuffle",
    block_size=None,
    exact=False,
):
    """One permutation of the samples per item.

    Parameters
    ----------
    entropy : int
        From :func:`resolve_entropy`.
    items : array-like of int
        Permutation ids.
    n_samples : int
        Number of samples.
    groups : array-like of shape (n_samples,) or None
        Exchangeability blocks: samples are permuted within their group
        only, as in scikit-learn's ``permutation_test_score``. Labels may come
        in any order; a group's rows are taken in row order.
    permutation_type : {"shuffle", "circular_shift", "block_shuffle"}
        How the rows of each group (of all samples without groups) move:

        - ``"shuffle"``: a uniform random permutation.
        - ``"circular_shift"``: a rotation by an offset drawn uniformly from
          ``0, ..., m - 1`` for a group of ``m`` rows (0, the identity, is a
          draw like any other); it keeps the autocorrelation of the rows.
        - ``"block_shuffle"``: the group is cut in row order into contiguous
          blocks of ``block_size`` rows (the last one may be shorter), whose
          order is permuted uniformly.
    block_size : int >= 1 or None
        Rows per block; required by, and only allowed with,
        ``"block_shuffle"``. At most the size of the smallest group.
    exact : bool, default=False
        Enumerate instead of drawing: item ``i`` is the ``i``-th of the
        :func:`count_permutations` distinct permutations of the scheme, in a
        fixed order whatever ``entropy``, item 0 the identity. Item ``i``
        is read in the mixed radix of the groups' counts (the first group's
        digit varies fastest), and each group's digit is its offset
        (``"circular_shift"``) or the lexicographic rank of its rows' order
        (``"shuffle"``) or of its blocks' order (``"block_shuffle"``).
        Items must be below that count.

    Returns
    -------
    indices : ndarray of shape (len(items), n_samples), dtype int64
        ``y[indices[k]]`` is the k-th permuted target.

    Raises
    ------
    ValueError
        If ``permutation_type`` is unknown, ``block_size`` is missing, not
        allowed, not an int >= 1 or larger than a group, or ``groups`` does not
        label each sample.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch.random import permutation_indices
    >>> idx = permutation_indices(0, [3], 6, groups=[0, 0, 0, 1, 1, 1])
    >>> bool(np.all(np.sort(idx[0, :3]) == [0, 1, 2]))
    True
    >>> idx = permutation_indices(0, [3], 5, permutation_type="circular_shift")
    >>> bool(np.all(np.diff(idx[0]) % 5 == 1))
    True

    Every rotation of 3 rows, once each:

    >>> permutation_indices(0, [0, 1, 2], 3, permutation_type="circular_shift",
    ...                     exact=True)
    array([[0, 1, 2],
           [1, 2, 0],
           [2, 0, 1]])
    """
    _check_permutation_type(permutation_type, block_size)
    items = _check_items(items)
    drawn = permutation_scheme(
        n_samples,
        groups,
        permutation_type=permutation_type,
        block_size=block_size,
        exact=exact,
    )
    return drawn.rows(entropy, items)


def count_permutations(
    n_samples,
    groups=None,
    *,
    permutation_type="shuffle",
    block_size=None,
    limit=None,
):
    """How many distinct permutations a scheme can produce.

    The product over groups (the whole series without groups) of ``m``
    rotations of a group of ``m`` rows (``"circular_shift"``), ``m!``
    orders of its rows (``"shuffle"``), or ``k!`` orders of its ``k``
    blocks (``"block_shuffle"``, the last block possibly shorter). When it
    is at most the number of permutations asked for,
    :func:`permutation_indices` with ``exact=True`` enumerates them all.

    Parameters
    ----------
    n_samples, groups, permutation_type, block_size
        As for :func:`permutation_indices`.
    limit : int or None, default=None
        Stop counting above this (a shuffle of 10,000 rows has a count of
        35,660 digits); None counts up to the largest int64.

    Returns
    -------
    count : int or None
        None when the count exceeds ``limit``.

    Examples
    --------
    >>> from skbatch.random import count_permutations
    >>> count_permutations(6, [0, 0, 0, 1, 1, 1], permutation_type="circular_shift")
    9
    >>> count_permutations(4)
    24
    >>> count_permutations(1000, limit=10**6) is None
    True
    """
    _check_permutation_type(permutation_type, block_size)
    enumerated = permutation_scheme(
        n_samples, groups, permutation_type=permutation_type, block_size=block_size
    )
    return enumerated.n_distinct(limit)
