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
"""

import math
import numbers

import numpy as np

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
# Philox4x64 gives four 64-bit words per counter value.
_WORDS_PER_COUNTER = 4
# Lemire's method maps 32-bit words, whose product with the bound fits in
# 64 bits: bounds up to 2**32 (more samples than any host holds).
_MAX_BOUND = 2**32


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


def _keys(entropy):
    """Philox keys of the main stream and of the redraws of rejected integers."""
    state = np.random.SeedSequence(entropy).generate_state(4, np.uint64)
    return state[:2], state[2:]


def _item_words(key, items, n_words):
    """Words ``0 .. n_words - 1`` of each item's window, of shape (len(items),
    n_words), dtype uint64; the layout is in the module docstring."""
    counters = -(-n_words // _WORDS_PER_COUNTER)
    width = counters * _WORDS_PER_COUNTER
    out = np.empty((items.shape[0], width), dtype=np.uint64)
    # One generator per run of consecutive ids: the engine's batches are one.
    bounds = [0, *(np.flatnonzero(np.diff(items) != 1) + 1), items.shape[0]]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if hi > lo:
            generator = np.random.Philox(key=key, counter=int(items[lo]) * counters)
            out[lo:hi] = generator.random_raw((hi - lo) * width).reshape(hi - lo, -1)
    return out[:, :n_words]


def _check_items(items):
    items = np.asarray(items, dtype=np.int64).reshape(-1)
    if items.size and items.min() < 0:
        raise ValueError(f"items must be >= 0, got {items[items < 0][0]}")
    return items


def _integers(entropy, items, bounds):
    """Uniform integers: column ``j`` in ``[0, bounds[j])``, one row per item.

    Lemire's multiply-shift on 32-bit words, with rejection: exactly uniform.
    Returns an int64 array of shape (len(items), len(bounds)).
    """
    bounds = np.asarray(bounds, dtype=np.uint64)
    if bounds.size and int(bounds.max()) > _MAX_BOUND:
        raise ValueError(
            f"at most {_MAX_BOUND} samples or groups can be resampled, got "
            f"{int(bounds.max())}"
        )
    main, redraw = _keys(entropy)
    n_draws = bounds.shape[0]
    words = _item_words(main, items, -(-n_draws // 2))
    # Little-endian 32-bit halves: the low half of each word first.
    halves = words.astype("<u8", copy=False).view("<u4")[:, :n_draws]
    product = halves * bounds
    # 2**32 mod m: low halves below it would favour some values.
    threshold = ((_MAX_BOUND - bounds) % bounds).astype(np.uint32)
    out = (product >> np.uint64(32)).astype(np.int64)
    rejected = product.astype(np.uint32) < threshold
    for row, j in zip(*np.nonzero(rejected)):
        out[row, j] = _redraw(redraw, int(items[row]), j, int(bounds[j]))
    return out


def _redraw(key, item, j, bound):
    """Draw ``j`` of ``item`` again, after a rejection (see _integers)."""
    generator = np.random.Philox(key=key, counter=(item << 128) + (int(j) << 64))
    threshold = (_MAX_BOUND - bound) % bound
    while True:
        word = int(generator.random_raw())
        for half in (word & (_MAX_BOUND - 1), word >> 32):
            product = half * bound
            if product % _MAX_BOUND >= threshold:
                return product >> 32


def _sorted_positions(keys):
    """Positions ``0 .. m - 1`` in the order of ``keys``, one row of keys per
    item: a uniform permutation per item for independent uniform keys.

    Each key's low bits are replaced by its position, so that one sort of
    the values (1.6x faster than a stable argsort) orders by the random high
    bits and breaks their ties by position.
    """
    n = keys.shape[1]
    low = np.uint64((1 << max(1, (n - 1).bit_length())) - 1)
    tagged = keys & ~low
    tagged |= np.arange(n, dtype=np.uint64)
    tagged.sort(axis=1)
    tagged &= low
    return tagged.view(np.int64)


def _row_counts(rows, lengths, n_samples):
    """How often each of ``0 .. n_samples - 1`` occurs in each replicate of
    ``rows``, the replicates' rows one after another (``lengths`` each)."""
    n_items = lengths.shape[0]
    offset = rows + n_samples * np.repeat(np.arange(n_items), lengths)
    counts = np.bincount(offset, minlength=n_items * n_samples)
    return counts.astype(np.int64, copy=False).reshape(n_items, n_samples)


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


def _group_codes(groups, n_samples):
    _, codes = np.unique(check_groups(groups, n_samples), return_inverse=True)
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


# What ``bootstrap_counts(block_scheme=...)`` accepts.
BLOCK_SCHEMES = ("moving", "circular", "stationary")


def check_block_scheme(block_scheme, block_size):
    """Refuse an unknown ``block_scheme``, or one other than "moving" without
    ``block_size``."""
    if not isinstance(block_scheme, str) or block_scheme not in BLOCK_SCHEMES:
        raise ValueError(
            f"block_scheme must be one of {BLOCK_SCHEMES}, got {block_scheme!r} "
            f"(with block_size={block_size!r})"
        )
    if block_scheme != "moving" and block_size is None:
        raise ValueError(
            f"block_scheme={block_scheme!r} needs block_size, got block_size=None; "
            f"set block_size, or leave block_scheme='moving' for the iid bootstrap"
        )


def _moving_rows(entropy, items, members, n_samples, block_size):
    """Rows of moving-block replicates, block after block (today's layout)."""
    # One row per valid start: the rows of the block starting there.
    blocks = np.concatenate(
        [np.lib.stride_tricks.sliding_window_view(rows, block_size) for rows in members]
    )
    n_blocks = _n_blocks(n_samples, block_size)
    starts = _integers(entropy, items, np.full(n_blocks, len(blocks)))
    return blocks[starts].reshape(len(items), n_blocks * block_size)


def _circular_rows(entropy, items, members, n_samples, block_size):
    """Rows of circular-block replicates, at the positions of each group's rows."""
    n_blocks = [-(-len(rows) // block_size) for rows in members]
    bounds = np.repeat([len(rows) for rows in members], n_blocks)
    starts = _integers(entropy, items, bounds)
    out = np.empty((len(items), n_samples), dtype=np.int64)
    first = 0
    for rows, count in zip(members, n_blocks):
        positions = np.arange(len(rows))
        # Position p of the group reads block p // block_size at offset
        # p % block_size from its start, wrapping around the group's end; the
        # last block is cut at the group's length.
        block_starts = starts[:, first + positions // block_size]
        out[:, rows] = rows[(block_starts + positions % block_size) % len(rows)]
        first += count
    return out


def _stationary_rows(entropy, items, members, n_samples, block_size):
    """Rows of stationary-bootstrap replicates, at each group's rows' positions.

    As arch's ``StationaryBootstrap``: each row of a group starts a new
    block with probability ``1 / block_size`` (its draw in ``[0,
    block_size)`` is 0; a group's first row always does), at a start drawn
    uniformly among the group's rows; otherwise it reads the row after the
    previous one, wrapping around the group's end. Block lengths are thus
    geometric with mean ``block_size``, cut at the group's end.
    """
    sizes = np.zeros(n_samples, dtype=np.int64)
    for rows in members:
        sizes[rows] = len(rows)
    draws = _integers(
        entropy, items, np.concatenate([sizes, np.full(n_samples, block_size)])
    )
    starts, renew = draws[:, :n_samples], draws[:, n_samples:] == 0
    out = np.empty((len(items), n_samples), dtype=np.int64)
    for rows in members:
        positions = np.arange(len(rows))
        new = renew[:, rows]
        new[:, 0] = True
        # The position where each position's block started.
        began = np.maximum.accumulate(np.where(new, positions, 0), axis=1)
        block_starts = np.take_along_axis(starts[:, rows], began, axis=1)
        out[:, rows] = rows[(block_starts + positions - began) % len(rows)]
    return out


_BLOCK_ROWS = {
    "moving": _moving_rows,
    "circular": _circular_rows,
    "stationary": _stationary_rows,
}


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
    members = _group_rows(groups, n_samples)
    block_size = _check_block_size(block_size, members)
    return _BLOCK_ROWS[block_scheme](entropy, items, members, n_samples, block_size)


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
    rows, lengths = _drawn_rows(
        entropy, items, n_samples, groups, block_size, block_scheme
    )
    return _row_counts(rows, lengths, n_samples)


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
    rows, lengths = _drawn_rows(
        entropy, items, n_samples, groups, block_size, block_scheme
    )
    return np.split(rows, np.cumsum(lengths)[:-1]) if lengths.size else []


def _drawn_rows(entropy, items, n_samples, groups, block_size, block_scheme):
    """``(rows, lengths)``: the rows of each replicate in drawn order (see
    :func:`bootstrap_rows`), the replicates one after another, ``lengths[k]``
    rows for item ``k``."""
    check_block_scheme(block_scheme, block_size)
    items = _check_items(items)
    if block_size is not None:
        drawn = block_rows(
            entropy,
            items,
            n_samples,
            groups,
            block_size=block_size,
            block_scheme=block_scheme,
        )
    elif groups is None:
        drawn = _integers(entropy, items, np.full(n_samples, n_samples))
    else:
        return _cluster_rows(entropy, items, _group_codes(groups, n_samples))
    return drawn.ravel(), np.full(items.shape[0], drawn.shape[1])


def _cluster_rows(entropy, items, codes):
    """Rows of cluster-bootstrap replicates: one draw in ``[0, n_groups)`` per
    group, the drawn groups' rows one after another (see _drawn_rows)."""
    n_groups = codes.max() + 1
    draws = _integers(entropy, items, np.full(n_groups, n_groups)).ravel()
    members = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes, minlength=n_groups)
    firsts = np.cumsum(sizes) - sizes
    taken = sizes[draws]
    # Output position p of a group placed at ``placed`` reads
    # ``members[first + p - placed]``.
    placed = np.cumsum(taken) - taken
    shift = np.repeat(firsts[draws] - placed, taken)
    rows = members[shift + np.arange(shift.shape[0])]
    return rows, taken.reshape(items.shape[0], n_groups).sum(axis=1)


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
    members = _group_rows(groups, n_samples)
    if permutation_type == "block_shuffle":
        block_size = _check_block_size(block_size, members)
    if exact:
        return _enumerated(items, members, n_samples, permutation_type, block_size)
    out = np.empty((items.shape[0], n_samples), dtype=np.int64)
    if permutation_type == "shuffle":
        keys = _item_words(_keys(entropy)[0], items, n_samples)
        if groups is None:
            return _sorted_positions(keys)
        for rows in members:
            out[:, rows] = rows[_sorted_positions(keys[:, rows])]
    elif permutation_type == "circular_shift":
        offsets = _integers(entropy, items, [len(rows) for rows in members])
        for g, rows in enumerate(members):
            positions = np.arange(len(rows)) + offsets[:, g : g + 1]
            out[:, rows] = rows[positions % len(rows)]
    else:
        n_blocks = [-(-len(rows) // block_size) for rows in members]
        keys = _item_words(_keys(entropy)[0], items, sum(n_blocks))
        first = 0
        for rows, count in zip(members, n_blocks):
            out[:, rows] = _block_shuffled(
                keys[:, first : first + count], rows, block_size
            )
            first += count
    return out


def _block_shuffled(keys, rows, block_size):
    """``rows`` cut into blocks of ``block_size`` (the last may be shorter), the
    blocks in the order of ``keys``, one row of keys per item."""
    order = np.argsort(keys, axis=1, kind="stable")
    return _blocks_in_order(order, rows, block_size)


def _blocks_in_order(order, rows, block_size):
    """``rows`` cut into blocks of ``block_size`` (the last may be shorter),
    block ``order[k, j]`` placed j-th in row k."""
    starts = np.arange(0, len(rows), block_size)
    lengths = np.diff([*starts, len(rows)])
    taken = lengths[order]
    # Output position j in a block moved from ``start`` to ``placed`` reads
    # row ``j + start - placed``.
    placed = np.cumsum(taken, axis=1) - taken
    shift = np.repeat((starts[order] - placed).ravel(), taken.ravel())
    return rows[shift.reshape(len(order), len(rows)) + np.arange(len(rows))]


def _capped_product(factors, cap):
    """The product of ``factors`` (Python ints), or None once it exceeds ``cap``."""
    product = 1
    for factor in factors:
        product *= factor
        if product > cap:
            return None
    return product


def _scheme_counts(members, permutation_type, block_size, cap):
    """Per group, its distinct permutations under the scheme, or None once the
    product over groups exceeds ``cap``.

    Rotations of ``m`` rows are ``m`` distinct permutations, orders of ``m``
    rows ``m!``, orders of ``k`` blocks ``k!``: blocks are disjoint sets of
    rows, so two orders of them never give the same rows, whatever their
    sizes.
    """
    if permutation_type == "circular_shift":
        sizes = [len(rows) for rows in members]
        return sizes if _capped_product(sizes, cap) is not None else None
    if permutation_type == "shuffle":
        sizes = [len(rows) for rows in members]
    else:
        sizes = [-(-len(rows) // block_size) for rows in members]
    counts = []
    for size in sizes:
        # Every factor is at least 1: m! exceeds the cap as soon as a
        # partial product of it does.
        count = _capped_product(range(2, size + 1), cap)
        if count is None:
            return None
        counts.append(count)
    return counts if _capped_product(counts, cap) is not None else None


# Enumerated permutations are numbered by int64 item ids.
_MAX_ENUMERATED = np.iinfo(np.int64).max


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
    members = _group_rows(groups, n_samples)
    if permutation_type == "block_shuffle":
        block_size = _check_block_size(block_size, members)
    cap = _MAX_ENUMERATED if limit is None else min(int(limit), _MAX_ENUMERATED)
    counts = _scheme_counts(members, permutation_type, block_size, cap)
    return None if counts is None else _capped_product(counts, cap)


def _unranked(ranks, m):
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


def _enumerated(items, members, n_samples, permutation_type, block_size):
    """Permutation ``items`` of the scheme's enumeration (see
    :func:`permutation_indices`, ``exact=True``)."""
    counts = _scheme_counts(members, permutation_type, block_size, _MAX_ENUMERATED)
    total = None if counts is None else _capped_product(counts, _MAX_ENUMERATED)
    if total is None or (items.size and items.max() >= total):
        raise ValueError(
            f"exact=True enumerates the {total or 'more than 2**63'} distinct "
            f"permutations of permutation_type={permutation_type!r}: items must "
            f"be below that, got {int(items.max()) if items.size else None}"
        )
    out = np.empty((items.shape[0], n_samples), dtype=np.int64)
    rest = items.copy()
    for rows, count in zip(members, counts):
        rest, digit = np.divmod(rest, count)
        if permutation_type == "circular_shift":
            positions = (np.arange(len(rows)) + digit[:, None]) % len(rows)
            out[:, rows] = rows[positions]
        elif permutation_type == "shuffle":
            out[:, rows] = rows[_unranked(digit, len(rows))]
        else:
            order = _unranked(digit, -(-len(rows) // block_size))
            out[:, rows] = _blocks_in_order(order, rows, block_size)
    return out
