"""Group labels: the one check of them, and the rows of each group.

Groups are clusters for the cluster bootstrap, runs that a block never
crosses for the block bootstraps, and exchangeability blocks for the
permutations. Labels may come in any order; group ``g`` is the ``g``-th
label in sorted order, its rows taken in row order.
"""

import numbers

import numpy as np

__all__ = ["check_block_size", "check_groups", "group_codes", "group_rows"]


def _missing_labels(groups):
    """Where ``groups`` has no label: NaN or NaT, and in object arrays None or
    a value whose equality with itself is undefined (``pd.NA``)."""
    if groups.dtype.kind in "fc":
        return np.isnan(groups)
    if groups.dtype.kind in "mM":
        return np.isnat(groups)
    if groups.dtype.kind != "O":
        return np.zeros(groups.shape, dtype=bool)
    try:
        return np.not_equal(groups, groups).astype(bool) | np.equal(groups, None)
    except TypeError:
        pass
    # Label by label only when a comparison has no truth value: pd.NA's.
    missing = np.zeros(groups.shape, dtype=bool)
    for k, label in enumerate(groups.tolist()):
        try:
            missing[k] = label is None or bool(label != label)
        except TypeError:
            missing[k] = True
    return missing


def check_groups(groups, n_samples):
    """Groups as a 1-D array of one sortable label per sample, or None.

    The one check of group labels, for every estimator that takes them.

    Parameters
    ----------
    groups : array-like of shape (n_samples,) or None
        Group labels.
    n_samples : int
        Number of samples they label.

    Returns
    -------
    groups : ndarray of shape (n_samples,) or None

    Raises
    ------
    ValueError
        If ``groups`` is not 1-D with one label per sample, if a label is
        missing (NaN, NaT, None or ``pd.NA``: scikit-learn's group splitters
        refuse them too, and one group of every unlabelled row would join
        rows of different runs), or if the labels are not of one sortable
        kind.

    Examples
    --------
    >>> from skbatch.random import check_groups
    >>> check_groups([1, 1, 2], 3)
    array([1, 1, 2])
    >>> check_groups([1.0, float("nan"), 2.0], 3)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: groups must label every sample, got 1 missing labels ...
    """
    if groups is None:
        return None
    groups = np.asarray(groups)
    if groups.ndim != 1 or groups.shape[0] != n_samples:
        raise ValueError(
            f"groups must be 1-D with one label per sample ({n_samples}), got shape "
            f"{groups.shape}"
        )
    missing = np.flatnonzero(_missing_labels(groups))
    if missing.size:
        raise ValueError(
            f"groups must label every sample, got {missing.size} missing labels "
            f"(NaN, NaT, None or pd.NA), the first at row {missing[0]}; allowed "
            f"are ints, strings or other sortable labels of one kind"
        )
    try:
        np.unique(groups)
    except TypeError:
        kinds = sorted({type(label).__name__ for label in groups.tolist()})
        raise ValueError(
            f"groups must be labels of one sortable kind (ints or strings), got a "
            f"mix of {', '.join(kinds)}"
        ) from None
    return groups


def group_codes(groups, n_samples):
    """The group of each row, ``0 .. n_groups - 1`` in sorted label order."""
    _, codes = np.unique(check_groups(groups, n_samples), return_inverse=True)
    return codes


def group_rows(groups, n_samples):
    """Row indices of each group, in row order (the whole series without groups)."""
    if groups is None:
        return [np.arange(n_samples)]
    codes = group_codes(groups, n_samples)
    return [np.flatnonzero(codes == g) for g in range(codes.max() + 1)]


def check_block_size(block_size, members):
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
