"""Per-item random streams.

Item ``i`` (a bootstrap replicate, a permutation) draws from its own stream,
``SeedSequence(entropy, spawn_key=(i,))``, where ``entropy`` comes from the
estimator's ``random_state`` alone. Indices are generated per batch on the
host. Hence the same ``random_state`` gives the same result for any batch
size, budget, OOM split, ``n_jobs``, joblib backend and device.
"""

import numbers

import numpy as np

__all__ = [
    "PERMUTATION_TYPES",
    "bootstrap_counts",
    "item_rng",
    "permutation_indices",
    "resolve_entropy",
]

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


def _group_codes(groups, n_samples):
    groups = np.asarray(groups)
    if groups.ndim != 1 or groups.shape[0] != n_samples:
        raise ValueError(
            f"groups must be 1-D with one label per sample ({n_samples}), got shape "
            f"{groups.shape}"
        )
    _, codes = np.unique(groups, return_inverse=True)
    return codes


def _group_rows(groups, n_samples):
    """Row indices of each group, in row order (the whole series without groups)."""
    if groups is None:
        return [np.arange(n_samples)]
    codes = _group_codes(groups, n_samples)
    return [np.flatnonzero(codes == g) for g in range(codes.max() + 1)]


def _check_block_size(block_size, members):
    """Validate ``block_size`` against the smallest group it must fit in."""
    if not isinstance(block_size, numbers.Integral) or isinstance(block_size, bool):
        raise ValueError(
            f"block_size must be an int >= 1, got {type(block_size).__name__}: "
            f"{block_size!r}"
        )
    if block_size < 1:
        raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
    smallest = min(len(rows) for rows in members)
    if block_size > smallest:
        where = (
            f"n_samples={smallest}"
            if len(members) == 1
            else f"the smallest group has {smallest} rows"
        )
        raise ValueError(
            f"block_size must be at most the size of every group, got "
            f"block_size={block_size!r} but {where}"
        )
    return int(block_size)


def _n_blocks(n_samples, block_size):
    """Blocks per moving-block replicate: n_samples / block_size rounded half up."""
    return max(1, (2 * n_samples + block_size) // (2 * block_size))


def bootstrap_counts(entropy, items, n_samples, groups=None, *, block_size=None):
    """How often each sample is drawn in each bootstrap replicate.

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
        Moving-block bootstrap: a replicate is made of ``round(n_samples /
        block_size)`` whole blocks (half rounded up, at least one), each
        ``block_size`` consecutive rows of one group, whose start is drawn
        uniformly with replacement among all valid start positions, pooled
        over groups. A replicate thus has ``block_size * n_blocks`` rows,
        within ``block_size / 2`` of ``n_samples``.

    Returns
    -------
    counts : ndarray of shape (len(items), n_samples), dtype int64
        Row ``k`` sums to ``n_samples`` (rows), to the number of rows in the
        drawn clusters (groups), or to ``block_size`` times the number of
        blocks (``block_size``).

    Raises
    ------
    ValueError
        If ``groups`` does not label each sample, or ``block_size`` is not an
        int >= 1 or is larger than a group (or than ``n_samples``).

    Examples
    --------
    >>> from skbatch.random import bootstrap_counts
    >>> bootstrap_counts(0, [0, 1], 5).sum(axis=1)
    array([5, 5])
    >>> bootstrap_counts(0, [0, 1], 10, block_size=3).sum(axis=1)
    array([9, 9])
    """
    items = np.asarray(items)
    counts = np.zeros((items.shape[0], n_samples), dtype=np.int64)
    if block_size is not None:
        members = _group_rows(groups, n_samples)
        block_size = _check_block_size(block_size, members)
        # One row per valid start: the rows of the block starting there.
        blocks = np.concatenate(
            [
                np.lib.stride_tricks.sliding_window_view(rows, block_size)
                for rows in members
            ]
        )
        n_blocks = _n_blocks(n_samples, block_size)
        for row, item in enumerate(items):
            starts = item_rng(entropy, item).integers(0, len(blocks), size=n_blocks)
            counts[row] = np.bincount(blocks[starts].ravel(), minlength=n_samples)
        return counts
    if groups is None:
        for row, item in enumerate(items):
            draws = item_rng(entropy, item).integers(0, n_samples, size=n_samples)
            counts[row] = np.bincount(draws, minlength=n_samples)
        return counts
    codes = _group_codes(groups, n_samples)
    n_groups = codes.max() + 1
    for row, item in enumerate(items):
        draws = item_rng(entropy, item).integers(0, n_groups, size=n_groups)
        counts[row] = np.bincount(draws, minlength=n_groups)[codes]
    return counts


# What ``permutation_indices(permutation_type=...)`` accepts.
PERMUTATION_TYPES = ("shuffle", "circular_shift", "block_shuffle")


def _check_permutation_type(permutation_type, block_size):
    if permutation_type not in PERMUTATION_TYPES:
        raise ValueError(
            f"permutation_type must be one of {PERMUTATION_TYPES}, got "
            f"{permutation_type!r}"
        )
    if permutation_type == "block_shuffle" and block_size is None:
        raise ValueError(
            "permutation_type='block_shuffle' needs block_size, an int >= 1, got "
            "block_size=None"
        )
    if permutation_type != "block_shuffle" and block_size is not None:
        raise ValueError(
            f"block_size is only used with permutation_type='block_shuffle', got "
            f"block_size={block_size!r} with permutation_type={permutation_type!r}"
        )


def permutation_indices(
    entropy,
    items,
    n_samples,
    groups=None,
    *,
    permutation_type="shuffle",
    block_size=None,
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
    """
    _check_permutation_type(permutation_type, block_size)
    items = np.asarray(items)
    out = np.empty((items.shape[0], n_samples), dtype=np.int64)
    if permutation_type == "shuffle" and groups is None:
        for row, item in enumerate(items):
            out[row] = item_rng(entropy, item).permutation(n_samples)
        return out
    members = _group_rows(groups, n_samples)
    if permutation_type == "block_shuffle":
        block_size = _check_block_size(block_size, members)
        blocks = [
            np.array_split(rows, range(block_size, len(rows), block_size))
            for rows in members
        ]
    for row, item in enumerate(items):
        rng = item_rng(entropy, item)
        perm = np.arange(n_samples)
        for g, rows in enumerate(members):
            if permutation_type == "shuffle":
                perm[rows] = rng.permutation(rows)
            elif permutation_type == "circular_shift":
                offset = rng.integers(len(rows))
                perm[rows] = np.roll(rows, -offset)
            else:
                order = rng.permutation(len(blocks[g]))
                perm[rows] = np.concatenate([blocks[g][b] for b in order])
        out[row] = perm
    return out
