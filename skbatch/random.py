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


def bootstrap_counts(entropy, items, n_samples, groups=None):
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
        Cluster labels: whole clusters are drawn with replacement and every
        row of a drawn cluster counts once per draw.

    Returns
    -------
    counts : ndarray of shape (len(items), n_samples), dtype int64
        Row ``k`` sums to ``n_samples`` (rows) or, with groups, to the
        number of rows in the drawn clusters.

    Examples
    --------
    >>> from skbatch.random import bootstrap_counts
    >>> bootstrap_counts(0, [0, 1], 5).sum(axis=1)
    array([5, 5])
    """
    items = np.asarray(items)
    counts = np.zeros((items.shape[0], n_samples), dtype=np.int64)
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


def permutation_indices(entropy, items, n_samples, groups=None):
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
        only, as in scikit-learn's ``permutation_test_score``.

    Returns
    -------
    indices : ndarray of shape (len(items), n_samples), dtype int64
        ``y[indices[k]]`` is the k-th permuted target.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch.random import permutation_indices
    >>> idx = permutation_indices(0, [3], 6, groups=[0, 0, 0, 1, 1, 1])
    >>> bool(np.all(np.sort(idx[0, :3]) == [0, 1, 2]))
    True
    """
    items = np.asarray(items)
    out = np.empty((items.shape[0], n_samples), dtype=np.int64)
    if groups is None:
        for row, item in enumerate(items):
            out[row] = item_rng(entropy, item).permutation(n_samples)
        return out
    codes = _group_codes(groups, n_samples)
    members = [np.flatnonzero(codes == g) for g in range(codes.max() + 1)]
    for row, item in enumerate(items):
        rng = item_rng(entropy, item)
        perm = np.arange(n_samples)
        for member in members:
            perm[member] = rng.permutation(member)
        out[row] = perm
    return out
