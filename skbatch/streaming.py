"""Streaming reducers for bootstrap and permutation replicates.

Replicates arrive in batches, possibly from different workers. The
accumulators here keep only what the final statistics need (running moments,
percentile tails, exceedance counts), so memory does not grow with the number
of replicates, and partial accumulators merge in any order.
"""

import math
import numbers

import numpy as np

from ._backends.side_by_side import cpu_workers, map_threads
from ._kernels.rules import (
    adjust_pvalues,
    bh_adjusted,
    check_alternative,
    family_extreme,
    maxstat_pvalue,
    permutation_pvalue,
    reaches,
    sides,
    threshold,
)
from .backend import Backend

__all__ = [
    "BCaAccumulator",
    "BootstrapAccumulator",
    "OrderStatistics",
    "PermutationCounter",
    "bca_acceleration",
    "describe_nan",
    "fdr_adjusted",
]

# Replicates are folded into the percentile tails at least this many at a
# time: enough to amortise the selection over short tails, few enough that the
# pending block stays far smaller than storing every replicate. Longer tails
# (2k > FOLD_EVERY) are folded every 2k replicates, so that each replicate
# costs at most two rows of selection whatever B (see _fold_size).
FOLD_EVERY = 64

# A fold of at most this many rows sorts them, which puts both tails in place
# in one pass; a larger one selects each tail with np.partition. numpy's
# vectorised sort of 76 rows (B=200) took 0.6x the time of the two partitions
# it replaces; sorting was still faster at 1004 rows (B=10,000) and slower
# from about 2000 (benchmarks/RESULTS.md).
SORT_MAX_ROWS = 1024

# Deviations from a block's mean are squared a slice of rows of about this
# size at a time: a temporary as large as the block is mapped afresh on every
# update, and its page faults made the update twice as slow.
DEVIATION_SLICE_BYTES = 2**20

# The update that completes the replicates, and the interval, run once no
# batch computes any more: shapes of at least this many elements are then
# split between threads (see _in_parts).
PARALLEL_MIN_ELEMENTS = 2**14

# Float64 arrays of an accumulator's shape that BootstrapAccumulator's update
# or interval holds at once beside what it retains: the block's mean and M2,
# the deviation of one replicate and Chan's update of them; the two bounds,
# numpy's interpolation of one (three arrays, two float64 rows read from
# float32 tails) and the open side of a one-sided interval. The interval
# measured 6 with float64 tails, 8 with float32 ones (numpy's buffers
# included), when the update's pending block and deviations are free.
TRANSIENT_ARRAYS = 8
# numpy's ufunc buffers: np.getbufsize() (8192) float64 values for each of
# two operands cast or broadcast, per thread.
UFUNC_BUFFER_BYTES = 2 * 8192 * 8
# Copies of a batch's ids that BootstrapAccumulator.update makes to store its
# replicates (the ids, np.unique's sorted copy and its flags).
ID_COPIES = 4
# The Python objects of a BootstrapAccumulator and of its calls (array
# headers, the threads of _in_parts): 5 KB measured at shape 1.
ACCUMULATOR_OVERHEAD = 8 * 1024

# Float64 arrays per target that PermutationCounter holds beside what it
# retains, whatever the batch: the moments' update (the batch's mean and M2,
# Chan's update of them, numpy's buffers) or the p-values and their
# adjustment (sorted copies, ranks, running minimum). Measured 8 with
# batches of one permutation, whose own temporaries are among them.
COUNTER_TRANSIENT_ARRAYS = 10

_INTERVAL_METHODS = ("percentile", "basic")
_FLOAT_BYTES = np.dtype(np.float64).itemsize
_COUNT_BYTES = np.dtype(np.int64).itemsize
_BOOL_BYTES = np.dtype(bool).itemsize

# Why an element's interval bounds or standard error are NaN, as the
# accumulators' ``nan_reasons`` list them, most basic first: an element is
# explained by the first reason that holds for it (see describe_nan).
NAN_REPLICATE = "a replicate is NaN"
NAN_ESTIMATE = "the estimate is NaN"
EQUAL_REPLICATES = "every replicate is equal"
ONE_SIDED_REPLICATES = "every replicate lies on one side of the estimate"
UNDEFINED_ACCELERATION = "the jackknife acceleration is 0/0 or NaN"
# What each reason means for the user, once per message.
_NAN_HINTS = {
    NAN_REPLICATE: (
        "A NaN replicate is a resample whose fit gave NaN (return_samples=True "
        "keeps them); np.percentile and scipy.stats.bootstrap give NaN too."
    ),
    NAN_ESTIMATE: "A NaN estimate is a fit on all data that gave NaN.",
    EQUAL_REPLICATES: (
        "BCa is undefined for a degenerate (constant) bootstrap distribution: "
        "z0 or the acceleration is not finite. scipy.stats.bootstrap("
        "method='BCa') gives NaN there and warns, and so does skbatch, for "
        "comparable numbers; ci_method='percentile' gives the exact interval "
        "[c, c] of a constant c."
    ),
    ONE_SIDED_REPLICATES: (
        "BCa is then undefined (z0 infinite), as in scipy.stats.bootstrap("
        "method='BCa'); ci_method='percentile' is defined."
    ),
    UNDEFINED_ACCELERATION: (
        "BCa is then undefined (every leave-one-out estimate equal, or NaN), "
        "as in scipy.stats.bootstrap(method='BCa'); ci_method='percentile' is "
        "defined."
    ),
}


def _check_n_total(n_total, minimum):
    if not isinstance(n_total, numbers.Integral) or n_total < minimum:
        raise ValueError(f"n_total must be an integer >= {minimum}, got {n_total!r}")


def _check_room(n_seen, n_new, n_total):
    if n_seen + n_new > n_total:
        raise ValueError(
            f"n_total={n_total} replicates were announced, but {n_seen + n_new} "
            f"were received ({n_seen} before this call, {n_new} now)"
        )


def _replicates(samples):
    """A batch of replicates as the accumulators read it: float32 as it is,
    anything else as float64. A float64 copy of a float32 batch would double
    what the batched paths charge per replicate for it
    (BootstrapRidgeProblem.nbytes in skbatch/_ridge/problems.py)."""
    samples = np.asarray(samples)
    if samples.dtype != np.float32:
        samples = np.asarray(samples, dtype=np.float64)
    return samples


def _admit(accumulator, samples, ids):
    """The number of replicates in ``samples``, once checked against the
    ``shape`` and room of ``accumulator`` and stored at rows ``ids`` when it
    keeps them (the first steps of every accumulator's ``update``)."""
    shape = accumulator.shape
    if samples.ndim != 1 + len(shape) or samples.shape[1:] != shape:
        raise ValueError(
            f"samples must have shape (m, *{shape}) to match shape="
            f"{shape}, got {samples.shape}"
        )
    n_new = len(samples)
    n_seen, n_total = accumulator.n_seen, accumulator.n_total
    _check_room(n_seen, n_new, n_total)
    if accumulator._store is not None:
        accumulator._store.put(samples, _check_ids(ids, n_new, n_seen, n_total))
    return n_new


def _check_complete(n_seen, n_total):
    if n_seen != n_total:
        raise ValueError(
            f"all n_total={n_total} replicates are needed, {n_seen} were seen"
        )


def _check_ids(ids, n_new, n_seen, n_total):
    if ids is None:
        return np.arange(n_seen, n_seen + n_new)
    ids = np.asarray(ids)
    if ids.shape != (n_new,) or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            f"ids must be an integer array of shape ({n_new},), got dtype "
            f"{ids.dtype} and shape {ids.shape}"
        )
    if n_new and (ids.min() < 0 or ids.max() >= n_total):
        raise ValueError(
            f"ids must be in [0, n_total={n_total}), got values from {ids.min()} "
            f"to {ids.max()}"
        )
    return ids


def _check_method(method):
    if not isinstance(method, str) or method not in _INTERVAL_METHODS:
        raise ValueError(f"method must be one of {_INTERVAL_METHODS}, got {method!r}")


def _quantiles_read(alternative, method="percentile"):
    """Which quantiles of the replicates an interval reads: (lower, upper).

    A two-sided interval reads both. A one-sided percentile interval reads
    the quantile of its finite bound ("less": the upper one); "basic"
    reflects it around the estimate, so its finite bound is read from the
    other quantile ("less": ``2 * estimate - lower``).
    """
    if alternative == "two-sided":
        return True, True
    upper = (alternative == "less") == (method == "percentile")
    return not upper, upper


def _percentile_plan(n_total, confidence_level, sides=(True, True)):
    """Where np.percentile reads the interval bounds, and the tail sizes.

    Returns the two virtual indexes into the sorted replicates (lower and
    upper quantile) and ``(k_low, k_high)``, the number of smallest and of
    largest replicates that contain every order statistic the linear
    interpolation of the quantiles in ``sides`` reads (0 for a side not
    read). Two-sided: the ``(1 -+ c) / 2`` quantiles, one k for both tails.
    One-sided (a single side): the ``1 - c`` and ``c`` quantiles, as scipy's
    ``bootstrap`` reads them (its alpha not halved).
    """
    # The same arithmetic as np.percentile(x, [100 * (1 - c) / 2, ...]), so
    # the bounds round as numpy's do rather than a few ulps away; in double
    # precision whatever the level's type (a numpy float16 rounds to 1e-3).
    confidence_level = float(confidence_level)
    if all(sides):
        levels = [100 * (1 - confidence_level) / 2, 100 * (1 + confidence_level) / 2]
    else:
        levels = [100 * (1 - confidence_level), 100 * confidence_level]
    quantiles = np.true_divide(levels, 100)
    virtual_indexes = (n_total - 1) * quantiles
    lower_prev, upper_prev = np.floor(virtual_indexes).astype(int)
    # The lower bound reads order statistics lower_prev and lower_prev + 1,
    # the upper bound upper_prev and upper_prev + 1, both capped at n_total - 1.
    if all(sides):
        k = int(min(max(lower_prev + 2, n_total - upper_prev), n_total))
        return virtual_indexes, (k, k)
    k_low = int(min(lower_prev + 2, n_total)) if sides[0] else 0
    k_high = int(min(n_total - upper_prev, n_total)) if sides[1] else 0
    return virtual_indexes, (k_low, k_high)


def _one_sided(lower, upper, alternative):
    """The bounds with the open side of a one-sided interval at -inf or inf,
    whatever the replicates (NaN ones included), as scipy's ``bootstrap``;
    that side may be given as None."""
    if alternative == "less":
        lower = np.full(np.shape(upper), -np.inf)
    elif alternative == "greater":
        upper = np.full(np.shape(lower), np.inf)
    return lower, upper


def _fold_size(n_kept):
    """Pending replicates that trigger a fold into tails of ``n_kept`` rows.

    A fold selects the tails (2k rows, two-sided) from themselves and the
    pending rows; folding every FOLD_EVERY replicates would cost B * 2k /
    FOLD_EVERY rows in all, quadratic in B since k grows with B. Waiting for
    as many pending rows as the tails hold bounds it by 2 * B, for a pending
    block no larger than the tails.
    """
    return max(FOLD_EVERY, n_kept)


def _select_tails(rows, tails):
    """Order ``rows`` in place so that its first rows hold the tails.

    ``tails`` is ``(k_low, k_high)``: along axis 0, rows [0, k_low) become
    the k_low smallest and rows [k_low, k_low + k_high) the k_high largest,
    per element (a one-sided interval keeps one tail, the other 0); rows
    beyond are left in any order. Returns the number of rows that hold the
    tails, ``min(len(rows), k_low + k_high)``: with no more rows than that,
    every row is kept as it is.
    """
    k_low, k_high = tails
    n_kept = k_low + k_high
    n_rows = len(rows)
    if n_rows <= n_kept:
        return n_rows
    # NaNs sort last, but their elements are masked by _nan anyway.
    if n_rows <= SORT_MAX_ROWS:
        rows.sort(axis=0)
    else:
        if k_low:
            rows.partition(k_low - 1, axis=0)
        if k_high:
            rows[k_low:].partition(n_rows - n_kept, axis=0)
    # The largest k_high move down by the gap between the tails, a gap at a
    # time: overlapping slices would be copied through a temporary.
    gap = n_rows - n_kept
    for start in range(k_low, n_kept, gap):
        stop = min(start + gap, n_kept)
        rows[start:stop] = rows[start + gap : stop + gap]
    return n_kept


def _in_parts(fn, shape, split):
    """``fn(part)`` over the elements of ``shape``; the first part's result.

    With ``split``, parts are slices of the shape's first axis, one per
    thread of numpy's BLAS, run side by side by
    :func:`skbatch._backends.side_by_side.map_threads`, when the shape holds at least
    ``PARALLEL_MIN_ELEMENTS``.
    Every element's arithmetic is the same in whichever part it falls, so
    the results are too.
    """
    n_parts = _n_parts(shape) if split else 1
    if n_parts <= 1:
        return fn(())
    bounds = np.linspace(0, shape[0], n_parts + 1).astype(int)
    parts = [(slice(lo, hi),) for lo, hi in zip(bounds[:-1], bounds[1:])]
    return map_threads(fn, parts, Backend("numpy"))[0]


def _n_parts(shape):
    """The parts :func:`_in_parts` splits ``shape`` into when it may split."""
    if not shape or math.prod(shape) < PARALLEL_MIN_ELEMENTS:
        return 1
    return max(1, min(cpu_workers(Backend("numpy")), shape[0]))


def _row64(ordered, i):
    """Row ``i`` of ``ordered`` in float64: a copy only of float32 rows."""
    return np.asarray(ordered[i], dtype=np.float64)


def _lerp(a, b, t):
    # numpy's _lerp, switching formula at t >= 0.5, so results agree bitwise.
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


class _RunningMoments:
    """Count, mean and M2 (sum of squared deviations), merged with Chan's update.

    Chan, Golub and LeVeque (1979): blocks are summarised by their own mean
    and M2, then combined pairwise, which is as stable as Welford's update
    without a Python loop per replicate.
    """

    def __init__(self, shape):
        self.count = 0
        self.mean = np.zeros(shape)
        self.m2 = np.zeros(shape)

    def update(self, block, part=()):
        """Fold ``block`` into the elements ``part`` (an index into the shape).

        The count is left to :meth:`advance`, once every part of the same
        replicates is in.
        """
        block_mean = block.mean(axis=0, dtype=np.float64)
        m2 = np.zeros_like(block_mean)
        step = max(1, DEVIATION_SLICE_BYTES // max(block_mean.nbytes, 1))
        if step == 1:
            # One replicate at a time, in place: three passes over a row that
            # stays in cache, no temporary made per row.
            deviation = np.empty_like(block_mean)
            for row in block:
                np.subtract(row, block_mean, out=deviation, dtype=np.float64)
                np.multiply(deviation, deviation, out=deviation)
                m2 += deviation
        else:
            # One slice's buffer, written in place: a fresh result per slice
            # came with numpy's buffers of its size, twice the slice in all.
            buffer = np.empty((min(step, len(block)), *block_mean.shape))
            for start in range(0, len(block), step):
                rows = block[start : start + step]
                deviations = buffer[: len(rows)]
                # In float64 whatever the block: numpy 1.x computes a float32
                # array minus a float64 scalar (shape ()) in float32.
                np.subtract(rows, block_mean, out=deviations, dtype=np.float64)
                np.square(deviations, out=deviations)
                m2 += deviations.sum(axis=0)
        self._combine(len(block), block_mean, m2, part)

    def advance(self, count):
        self.count += count

    def merge(self, other):
        self._combine(other.count, other.mean, other.m2, ())
        self.advance(other.count)

    def _combine(self, count, mean, m2, part):
        if count == 0:
            return
        total = self.count + count
        delta = mean - self.mean[part]
        self.mean[part] += delta * (count / total)
        self.m2[part] += m2 + delta**2 * (self.count * count / total)

    def current_mean(self):
        return self.mean.copy() if self.count else np.full(self.mean.shape, np.nan)

    def variance(self):
        if self.count < 2:
            return np.full(self.m2.shape, np.nan)
        return self.m2 / (self.count - 1)


class _RowStore:
    """Every replicate kept in full, the i-th of a batch at row ``ids[i]``."""

    def __init__(self, n_total, row_shape):
        # NaN marks rows not received yet, should the array be read early.
        self.rows = np.full((n_total, *row_shape), np.nan)
        self.filled = np.zeros(n_total, dtype=bool)

    def put(self, values, ids):
        if np.unique(ids).size != ids.size or self.filled[ids].any():
            raise ValueError(f"ids must not repeat a stored replicate, got {ids}")
        self.rows[ids] = values
        self.filled[ids] = True

    def merge(self, other):
        both = np.flatnonzero(self.filled & other.filled)
        if both.size:
            raise ValueError(
                f"ids must differ between merged accumulators, both stored "
                f"replicates {both[:10]}; pass ids to update when the "
                f"replicates are split"
            )
        self.rows[other.filled] = other.rows[other.filled]
        self.filled |= other.filled


def _check_same(name, mine, theirs):
    if mine != theirs:
        raise ValueError(
            f"cannot merge accumulators with different {name}: {mine!r} and {theirs!r}"
        )


class BootstrapAccumulator:
    """Running mean, standard deviation and exact percentile interval.

    Bootstrap replicates of an array-valued statistic are folded in as they
    arrive. Per element it keeps the Welford/Chan mean and M2 and the k
    smallest and k largest replicates, where k is the smallest count that
    contains the order statistics ``np.percentile`` interpolates between:
    ``ceil((B - 1) * (1 - c) / 2) + 1`` (26 for B=1000, c=0.95), one more when
    that position falls exactly on an integer. Memory is 2k + max(2k, 64)
    replicates per element, not B, unless ``keep_samples=True``: replicates
    are folded into the tails every max(2k, 64).

    A one-sided interval (``alternative="less"`` or ``"greater"``, as
    ``scipy.stats.bootstrap`` defines it) reads one quantile, at level
    ``1 - c`` or ``c``: it keeps only the tail that holds it, of
    ``ceil((B - 1) (1 - c)) + 1`` replicates (51 for B=1000, c=0.95), and
    none of the other, folded every max(k, 64).

    Parameters
    ----------
    shape : int or tuple of int
        Shape of one replicate.
    n_total : int
        Number of replicates B that will be received, at least 2.
    confidence_level : float, default=0.95
        Coverage c of the interval, in the open interval (0, 1).
    keep_samples : bool, default=False
        Also keep every replicate, in :attr:`samples`.
    alternative : {"two-sided", "less", "greater"}, default="two-sided"
        The interval :meth:`interval` gives: two-sided, ``(-inf, upper]`` or
        ``[lower, inf)``, the finite bound at level ``c`` (not ``(1 + c) /
        2``), as ``scipy.stats.bootstrap(alternative=...)``.
    method : {"percentile", "basic"}, default="percentile"
        The interval's method, which decides the tail a one-sided interval
        keeps (a "basic" upper bound reflects the lower quantile); the
        default of :meth:`interval`.

    Attributes
    ----------
    n_seen : int
        Number of replicates received so far, merged ones included.
    samples : ndarray of shape (n_total, *shape) or None
        Every replicate, the i-th of each :meth:`update` at row ``ids[i]``
        (rows not received yet are NaN); None unless ``keep_samples=True``.

    Notes
    -----
    An element with any NaN replicate has NaN mean, std and interval bounds,
    as with ``np.percentile``; :meth:`nan_reasons` and :func:`describe_nan`
    say which and why, for a warning. The moments and intervals are computed in
    float64. The tails keep float32 replicates as they are (every float32 is
    a float64, so the order statistics are the same values), in half the
    memory and with a faster selection, until a replicate of another type
    arrives; other replicates are converted to float64.

    The update that completes the n_total replicates, and the interval,
    split the elements between the threads of numpy's BLAS, called from the
    main thread (no batch of replicates computes any more by then): the
    same values, 1.4x (update) and 2.5x (interval) faster on two cores for a
    statistic of a million elements (benchmarks/RESULTS.md).

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch.streaming import BootstrapAccumulator
    >>> replicates = np.random.default_rng(0).normal(size=(1000, 3))
    >>> first = BootstrapAccumulator((3,), n_total=1000).update(replicates[:400])
    >>> rest = BootstrapAccumulator((3,), n_total=1000).update(replicates[400:])
    >>> lower, upper = rest.merge(first).interval()
    >>> bool(np.allclose(lower, np.percentile(replicates, 2.5, axis=0)))
    True
    >>> bool(np.allclose(rest.std, replicates.std(axis=0, ddof=1)))
    True

    A one-sided 95% upper bound is the 95th percentile:

    >>> less = BootstrapAccumulator((3,), 1000, alternative="less")
    >>> lower, upper = less.update(replicates).interval()
    >>> bool(np.all(lower == -np.inf))
    True
    >>> bool(np.allclose(upper, np.percentile(replicates, 95, axis=0)))
    True
    """

    def __init__(
        self,
        shape,
        n_total,
        confidence_level=0.95,
        *,
        keep_samples=False,
        alternative="two-sided",
        method="percentile",
    ):
        _check_n_total(n_total, minimum=2)
        if not 0 < confidence_level < 1:
            raise ValueError(
                f"confidence_level must be in the open interval (0, 1), got "
                f"{confidence_level!r}"
            )
        check_alternative(alternative)
        _check_method(method)
        self.shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
        self.n_total = n_total
        self.confidence_level = confidence_level
        self.keep_samples = keep_samples
        self.alternative = alternative
        self.method = method
        self.n_seen = 0
        self._reads = _quantiles_read(alternative, method)
        self._virtual_indexes, self._tails = _percentile_plan(
            n_total, confidence_level, self._reads
        )
        self._fold_size = _fold_size(sum(self._tails))
        self._moments = _RunningMoments(self.shape)
        # Rows [0, n_tail) hold both tails (every replicate while there are no
        # more than 2k), the next n_pending rows the replicates not folded in
        # yet, so folding selects in place without a copy. Made by the first
        # update, in the replicates' type.
        self._rows = None
        self._n_tail = 0
        self._n_pending = 0
        self._nan = np.zeros(self.shape, dtype=bool)
        self._store = _RowStore(n_total, self.shape) if keep_samples else None

    @staticmethod
    def nbytes_needed(
        shape,
        n_total,
        confidence_level=0.95,
        *,
        keep_samples=False,
        alternative="two-sided",
        method="percentile",
    ):
        """Bytes an accumulator with these parameters reaches at its peak.

        What it retains: mean, M2, the tails kept (both, or one for a
        one-sided interval) with the pending block (in float64, their
        largest type), the NaN mask, and the samples when kept. And what
        :meth:`update` and :meth:`interval` hold beside it at their peak:
        the NaN flags of a pending block, a slice of squared deviations
        (at most ``DEVIATION_SLICE_BYTES`` per thread of the update that
        completes the replicates) with numpy's buffers, and
        ``TRANSIENT_ARRAYS`` float64 arrays of `shape` (the block's moments;
        the bounds, their interpolation, reflection and open side); the
        tails are sorted in place. For the memory preflight before any work:
        an upper bound of the peak of updates with float32 or float64
        replicates (others are first converted to float64, a copy of the
        batch) and of the interval, for either method; a :meth:`merge` holds
        both accumulators' tails at once on top.

        Parameters
        ----------
        shape, n_total, confidence_level, keep_samples, alternative, method
            As for the constructor.

        Returns
        -------
        nbytes : int
        """
        shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
        size = math.prod(shape)
        reads = _quantiles_read(alternative, method)
        fold = _fold_size(sum(_percentile_plan(n_total, confidence_level, reads)[1]))
        nbytes = BootstrapAccumulator._nbytes_retained(
            shape, n_total, confidence_level, keep_samples, alternative, method
        )
        if keep_samples:
            # The rows of a batch, checked for repeats: n_total at most.
            nbytes += ID_COPIES * n_total * _COUNT_BYTES
        n_parts = _n_parts(shape)
        # A pending block holds at most fold replicates, and no more than come.
        block = min(fold, n_total) * size * _FLOAT_BYTES
        deviations = min(block, n_parts * DEVIATION_SLICE_BYTES)
        buffers = min(2 * block, n_parts * UFUNC_BUFFER_BYTES)
        flags = fold * size * _BOOL_BYTES
        arrays = TRANSIENT_ARRAYS * size * _FLOAT_BYTES
        return nbytes + deviations + buffers + flags + arrays + ACCUMULATOR_OVERHEAD

    @staticmethod
    def _nbytes_retained(
        shape,
        n_total,
        confidence_level=0.95,
        keep_samples=False,
        alternative="two-sided",
        method="percentile",
    ):
        """The part of :meth:`nbytes_needed` that an accumulator keeps between
        calls: what its first update leaves allocated."""
        size = shape if isinstance(shape, numbers.Integral) else math.prod(shape)
        reads = _quantiles_read(alternative, method)
        n_kept = sum(_percentile_plan(n_total, confidence_level, reads)[1])
        tails = (n_kept + _fold_size(n_kept)) * _FLOAT_BYTES
        nbytes = size * (2 * _FLOAT_BYTES + tails + _BOOL_BYTES)
        if keep_samples:
            nbytes += n_total * (size * _FLOAT_BYTES + _BOOL_BYTES)
        return nbytes

    def update(self, samples, ids=None):
        """Fold in a batch of replicates.

        Parameters
        ----------
        samples : array-like of shape (m, *shape)
            m replicates.
        ids : array-like of int of shape (m,), default=None
            Row of :attr:`samples` for each replicate; only used when
            ``keep_samples=True``. None numbers them from :attr:`n_seen` on,
            which is only right when a single accumulator sees every replicate:
            pass ids when the replicates are split across accumulators.

        Returns
        -------
        self : BootstrapAccumulator
        """
        samples = _replicates(samples)
        n_new = _admit(self, samples, ids)
        self._hold(samples.dtype)
        last = self.n_seen + n_new == self.n_total
        start = 0
        while start < n_new:
            # Blocks end where the pending buffer fills, bounding temporaries.
            stop = min(n_new, start + self._fold_size - self._n_pending)
            self._push(samples[start:stop], split=last)
            start = stop
        self.n_seen += n_new
        return self

    def _hold(self, dtype):
        """Make the tails' buffer hold replicates of ``dtype`` (float32 or 64)."""
        if self._rows is None:
            self._rows = np.empty(
                (sum(self._tails) + self._fold_size, *self.shape), dtype
            )
        elif self._rows.dtype != np.result_type(self._rows, dtype):
            self._rows = self._rows.astype(np.float64)

    def _push(self, block, split=False):
        start = self._n_tail + self._n_pending
        stop = start + len(block)
        fold = self._n_pending + len(block) == self._fold_size

        def push_part(part):
            piece = block[(slice(None), *part)]
            self._moments.update(piece, part)
            self._nan[part] |= np.isnan(piece).any(axis=0)
            rows = self._rows[(slice(0, stop), *part)]
            rows[start:] = piece
            return _select_tails(rows, self._tails) if fold else None

        tails = _in_parts(push_part, self.shape, split)
        self._moments.advance(len(block))
        self._n_pending += len(block)
        if fold:
            self._n_tail = tails
            self._n_pending = 0

    def _fold(self):
        if self._rows is None:
            return
        n_rows = self._n_tail + self._n_pending
        self._n_tail = _select_tails(self._rows[:n_rows], self._tails)
        self._n_pending = 0

    def merge(self, other):
        """Add the replicates seen by another accumulator.

        Parameters
        ----------
        other : BootstrapAccumulator
            Built with the same shape, n_total, confidence_level,
            keep_samples, alternative and method, and having seen other
            replicates than this one.

        Returns
        -------
        self : BootstrapAccumulator
        """
        names = ["shape", "n_total", "confidence_level", "keep_samples", "alternative"]
        if self.alternative != "two-sided":
            # The method decides which tail a one-sided interval keeps.
            names.append("method")
        for name in names:
            _check_same(name, getattr(self, name), getattr(other, name))
        _check_room(self.n_seen, other.n_seen, self.n_total)
        if self._store is not None:
            self._store.merge(other._store)
        if other._rows is not None:
            self._hold(other._rows.dtype)
            self._fold()
            other._fold()
            both = np.concatenate(
                [self._rows[: self._n_tail], other._rows[: other._n_tail]]
            )
            self._n_tail = _select_tails(both, self._tails)
            self._rows[: self._n_tail] = both[: self._n_tail]
        self._moments.merge(other._moments)
        self._nan |= other._nan
        self.n_seen += other.n_seen
        return self

    @property
    def mean(self):
        """ndarray of shape `shape`: mean of the replicates seen."""
        return self._moments.current_mean()

    @property
    def variance(self):
        """ndarray of shape `shape`: variance (ddof=1) of the replicates seen."""
        return self._moments.variance()

    @property
    def std(self):
        """ndarray of shape `shape`: standard deviation (ddof=1)."""
        return np.sqrt(self.variance)

    @property
    def samples(self):
        """ndarray of shape (n_total, *shape) or None: replicate i at row ids[i]."""
        return None if self._store is None else self._store.rows

    def interval(self, method=None, estimate=None):
        """Bootstrap confidence interval, once all n_total replicates are in.

        Parameters
        ----------
        method : {"percentile", "basic"} or None, default=None
            "percentile" gives ``np.percentile(replicates, [100 * (1 - c) / 2,
            100 * (1 + c) / 2], axis=0)``; "basic" reflects it around
            ``estimate``: ``(2 * estimate - upper, 2 * estimate - lower)``.
            One-sided, the finite bound is read at ``100 * c`` ("less") or
            ``100 * (1 - c)`` ("greater") before the reflection, the other
            is -inf ("less") or inf ("greater"), as in
            ``scipy.stats.bootstrap``. None: the constructor's ``method``;
            a one-sided accumulator gives only that one.
        estimate : array-like of shape `shape`, default=None
            Statistic on the original data; required by "basic", ignored by
            "percentile".

        Returns
        -------
        lower, upper : ndarray of shape `shape`
        """
        method = self.method if method is None else method
        _check_method(method)
        if method == "basic" and estimate is None:
            raise ValueError("estimate is required for method='basic', got None")
        if _quantiles_read(self.alternative, method) != self._reads:
            raise ValueError(
                f"method={method!r} with alternative={self.alternative!r} reads "
                f"the other tail than the one this accumulator keeps (built "
                f"with method={self.method!r}); build it with method={method!r}"
            )
        _check_complete(self.n_seen, self.n_total)
        n_rows = self._n_tail + self._n_pending
        last = self.n_total - 1
        lower_index, upper_index = self._virtual_indexes
        lower_prev, upper_prev = int(lower_index), int(upper_index)
        read_lower, read_upper = self._reads
        lower, upper = np.full(self.shape, -np.inf), np.full(self.shape, np.inf)

        def bounds(part):
            rows = self._rows[(slice(0, n_rows), *part)]
            n_tail = _select_tails(rows, self._tails)
            # ordered[i] is order statistic i for i < k_low, ordered[-1 - j]
            # order statistic B-1-j for j < k_high: the tails, or every
            # replicate if B <= k_low + k_high. Sorted in place (the tails
            # stay the tails), not in a copy of them that nbytes_needed would
            # have to charge; the rows read are interpolated in float64, as
            # np.percentile does float64 replicates.
            ordered = rows[:n_tail]
            ordered.sort(axis=0)
            smallest, largest = ordered, ordered[::-1]
            if read_lower:
                lower[part] = _lerp(
                    _row64(smallest, lower_prev),
                    _row64(smallest, min(lower_prev + 1, last)),
                    lower_index - lower_prev,
                )
            if read_upper:
                upper[part] = _lerp(
                    _row64(largest, last - upper_prev),
                    _row64(largest, last - min(upper_prev + 1, last)),
                    upper_index - upper_prev,
                )
            return n_tail

        # The pending replicates are folded in, as the tails' selection does.
        self._n_tail = _in_parts(bounds, self.shape, split=True)
        self._n_pending = 0
        # In place, as the reflection below: every array of shape `shape`
        # made here is one that nbytes_needed charges.
        lower[self._nan] = np.nan
        upper[self._nan] = np.nan
        if method == "basic":
            twice = 2 * np.asarray(estimate, dtype=np.float64)
            lower, upper = (
                np.subtract(twice, upper, out=upper),
                np.subtract(twice, lower, out=lower),
            )
            # Freed before the open side of a one-sided interval is made.
            del twice
        return _one_sided(lower, upper, self.alternative)

    def nan_reasons(self, estimate=None):
        """Why elements of :attr:`std` and :meth:`interval` may be NaN.

        Parameters
        ----------
        estimate : array-like of shape `shape`, default=None
            The estimate a "basic" interval reflects around.

        Returns
        -------
        list of (str, ndarray of bool)
            Reasons in order, each with the elements it holds for; see
            :func:`describe_nan`.
        """
        reasons = [(NAN_REPLICATE, self._nan.copy())]
        if estimate is not None:
            estimate = np.broadcast_to(np.asarray(estimate, np.float64), self.shape)
            reasons.append((NAN_ESTIMATE, np.isnan(estimate)))
        return reasons


# BCa intervals ------------------------------------------------------------------

# Pass 1 of a BCa interval that does not keep every replicate sorts each
# block of BCA_FOLD replicates per element (in place) and keeps every
# BCA_SPACING-th: B / BCA_SPACING values per element, whose ranks among all
# replicates are known to within (BCA_SPACING - 1) per block. The second pass
# then keeps, per bound, about 2 (BCA_SPACING - 1) B / BCA_FOLD + 3
# BCA_SPACING values, and BCA_SLICE more while it selects. 64 and 4, for
# B=1000: 314 values per element in the first pass, about 2 x (108 + 32) in
# the second, where the replicates are 1000.
BCA_FOLD = 64
BCA_SPACING = 4
# The second pass folds incoming replicates into its windows this many at a
# time: a selection over (window + BCA_SLICE) rows per BCA_SLICE replicates.
BCA_SLICE = 32
# BCaAccumulator.update folds a batch in this many replicates at a time: its
# transients are then at most this many rows of flags and deviations per
# element (about 100 bytes), within what building the second pass holds
# (skbatch/_engine/preflight.py's BCA_TEMPORARY_BYTES), where whole batches of 64
# held 660 bytes per element.
BCA_UPDATE_ROWS = 8


def bca_acceleration(sum1, sum2, sum3, n_units):
    """BCa acceleration from the jackknife, as scipy's ``bootstrap`` computes it.

    ``a = sum d^3 / (6 (sum d^2)^(3/2))`` with ``d_i`` the mean of the
    leave-one-out estimates minus the i-th. Takes the power sums ``sum_i
    u_i^k`` (k = 1, 2, 3) of ``u_i = theta_(-i) - theta``, centred here: any
    shift ``theta`` gives the same ``d``, and one close to the estimates
    keeps the sums' digits. NaN where every ``d_i`` is 0.

    Parameters
    ----------
    sum1, sum2, sum3 : ndarray
        Power sums over the ``n_units`` leave-one-out fits.
    n_units : int

    Returns
    -------
    acceleration : ndarray

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch.streaming import bca_acceleration
    >>> u = np.array([0.0, 0.0, 3.0])  # d = [1, 1, -2]: -6 / (6 * 6**1.5)
    >>> float(bca_acceleration(u.sum(), (u**2).sum(), (u**3).sum(), 3).round(4))
    -0.068
    """
    mean = sum1 / n_units
    square = sum2 - n_units * mean**2
    # sum (mean - u_i)^3 = -(sum u^3 - 3 mean sum u^2 + 2 n mean^3)
    cube = -(sum3 - 3 * mean * sum2 + 2 * n_units * mean**3)
    with np.errstate(divide="ignore", invalid="ignore"):
        return cube / (6 * np.maximum(square, 0) ** 1.5)


def bca_levels(
    below, ties, n_total, acceleration, confidence_level, alternative="two-sided"
):
    """Levels ``(alpha_1, alpha_2)`` at which a BCa interval reads the replicates.

    scipy's ``_bca_interval``: ``z0 = ndtri(share of replicates below the
    estimate, ties counted half)``, ``alpha_i = ndtr(z0 + (z0 + z) / (1 - a
    (z0 + z)))`` for ``z = ndtri((1 - c) / 2)`` and its opposite, or
    ``z = ndtri(1 - c)`` for a one-sided ``alternative`` (scipy's alpha is
    not halved then; "less" reads only alpha_2, "greater" only alpha_1).
    NaN where z0 or ``a`` is not finite (every replicate on one side, or no
    jackknife spread), as scipy's interval then is.
    """
    from scipy.special import ndtr, ndtri

    share = (2 * below + ties) / (2 * n_total)
    z0 = ndtri(share)
    alpha = 1 - float(confidence_level)
    if alternative == "two-sided":
        alpha /= 2
    z_alpha = float(ndtri(alpha))
    levels = []
    with np.errstate(divide="ignore", invalid="ignore"):
        for z in (z_alpha, -z_alpha):
            shifted = z0 + z
            level = ndtr(z0 + shifted / (1 - acceleration * shifted))
            levels.append(np.where(np.isfinite(z0), level, np.nan))
    return tuple(levels)


def _order_positions(levels, n_total):
    """Order statistics a level reads (previous, following), the fraction
    between them, and where the level is defined."""
    virtual = (n_total - 1) * levels
    valid = np.isfinite(virtual)
    virtual = np.where(valid, virtual, 0.0)
    previous = np.floor(virtual).astype(np.int64)
    following = np.minimum(previous + 1, n_total - 1)
    return previous, following, virtual - previous, valid


def _lerp_array(a, b, t):
    # numpy's _lerp, elementwise: the percentile method's arithmetic.
    diff = b - a
    return np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)


def _read_levels(ordered, levels, n_total):
    """Interpolated order statistics of sorted replicates at per-element levels."""
    previous, following, fraction, valid = _order_positions(levels, n_total)
    lower = np.take_along_axis(ordered, previous[None], axis=0)[0]
    upper = np.take_along_axis(ordered, following[None], axis=0)[0]
    return np.where(valid, _lerp_array(lower, upper, fraction), np.nan)


class BCaAccumulator:
    """First pass of a BCa interval: moments, counts around the estimate, and
    what the exact interval needs.

    Keeps the running mean and variance (as :class:`BootstrapAccumulator`)
    and counts, per element, the replicates below and equal to ``estimate``
    (for z0). The levels of the interval differ per element and are known
    only once every replicate is in, so the order statistics they read come
    either from every replicate, kept (``keep_samples=True``), or from a
    second pass over the same replicates: this pass then keeps a summary,
    every ``BCA_SPACING``-th value of each sorted block of ``BCA_FOLD``
    replicates, and :meth:`second_pass` turns it, with the acceleration,
    into an :class:`OrderStatistics` reducer that keeps, per bound, only the
    replicates between two pivots that bracket the order statistics sought.

    Parameters
    ----------
    shape : int or tuple of int
    n_total : int
    confidence_level : float
    estimate : array-like of shape `shape`
        The statistic on all data.
    keep_samples : bool, default=False
        Keep every replicate (one pass) instead of the summary (two passes).
    alternative : {"two-sided", "less", "greater"}, default="two-sided"
        As for :class:`BootstrapAccumulator`: a one-sided interval reads one
        level (see :func:`bca_levels`), so the second pass keeps the
        replicates of one bound only; the other bound is -inf or inf.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch.streaming import BCaAccumulator
    >>> replicates = np.random.default_rng(0).gamma(2.0, size=(500, 2))
    >>> acc = BCaAccumulator((2,), 500, 0.9, estimate=[2.0, 2.0])
    >>> second = acc.update(replicates).second_pass(np.array([0.05, 0.0]))
    >>> lower, upper = acc.interval(second.update(replicates))
    >>> bool(np.all(lower < upper))
    True
    """

    def __init__(
        self,
        shape,
        n_total,
        confidence_level,
        estimate,
        *,
        keep_samples=False,
        alternative="two-sided",
    ):
        _check_n_total(n_total, minimum=2)
        check_alternative(alternative)
        self.shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
        self.n_total = n_total
        self.confidence_level = confidence_level
        self.keep_samples = keep_samples
        self.alternative = alternative
        # BCa reads the replicates' own quantiles, as the percentile method.
        self._reads = _quantiles_read(alternative)
        self.n_seen = 0
        self.estimate = np.broadcast_to(
            np.asarray(estimate, dtype=np.float64), self.shape
        ).copy()
        self.below = np.zeros(self.shape, dtype=np.int64)
        self.ties = np.zeros(self.shape, dtype=np.int64)
        self._moments = _RunningMoments(self.shape)
        self._nan = np.zeros(self.shape, dtype=bool)
        self._store = _RowStore(n_total, self.shape) if keep_samples else None
        self._pending = None
        self._n_pending = 0
        # Rows of each fold's summary, in one array: at most B // BCA_SPACING.
        self._summary = None
        self._n_summary = 0
        self._n_folds = 0
        self.acceleration = None

    @staticmethod
    def nbytes_needed(shape, n_total, confidence_level=0.95, *, keep_samples=False):
        """Bytes the first pass retains at most: moments, counts, NaN mask,
        and the samples (``keep_samples``) or the pending block and the
        summary."""
        size = shape if isinstance(shape, numbers.Integral) else math.prod(shape)
        nbytes = size * (3 * _FLOAT_BYTES + 2 * _COUNT_BYTES + _BOOL_BYTES)
        if keep_samples:
            nbytes += n_total * (size * _FLOAT_BYTES + _BOOL_BYTES)
        else:
            # The pending block and the summary.
            nbytes += size * _FLOAT_BYTES * (BCA_FOLD + n_total // BCA_SPACING)
        return nbytes

    @property
    def mean(self):
        """ndarray of shape `shape`: mean of the replicates seen."""
        return self._moments.current_mean()

    @property
    def std(self):
        """ndarray of shape `shape`: standard deviation (ddof=1)."""
        return np.sqrt(self._moments.variance())

    @property
    def samples(self):
        """ndarray of shape (n_total, *shape) or None: replicate i at row ids[i]."""
        return None if self._store is None else self._store.rows

    def update(self, samples, ids=None):
        """Fold in a batch of replicates (see :meth:`BootstrapAccumulator.update`)."""
        # Every use below widens a float32 batch exactly (the moments in
        # float64, the stores in float64).
        samples = _replicates(samples)
        n_new = _admit(self, samples, ids)
        # Not a 0-d array: numpy 1.x would round a 0-d float64 estimate to
        # float32 to compare it with float32 samples (value-based casting).
        estimate = self.estimate[None]
        # BCA_UPDATE_ROWS replicates at a time: what the update holds beside
        # the accumulator (the comparisons' and NaN flags, the deviations)
        # is then a few arrays of `shape`, whatever the batch, which
        # nbytes_needed can charge without knowing the batch.
        for start in range(0, n_new, BCA_UPDATE_ROWS):
            rows = samples[start : start + BCA_UPDATE_ROWS]
            self._moments.update(rows)
            self._moments.advance(len(rows))
            self._nan |= np.isnan(rows).any(axis=0)
            self.below += (rows < estimate).sum(axis=0)
            self.ties += (rows == estimate).sum(axis=0)
        start = 0
        while self._store is None and start < n_new:
            if self._pending is None:
                self._pending = np.empty((BCA_FOLD, *self.shape))
            stop = min(n_new, start + BCA_FOLD - self._n_pending)
            self._pending[self._n_pending : self._n_pending + stop - start] = samples[
                start:stop
            ]
            self._n_pending += stop - start
            if self._n_pending == BCA_FOLD:
                self._fold()
            start = stop
        self.n_seen += n_new
        return self

    def _fold(self):
        if not self._n_pending:
            return
        block = self._pending[: self._n_pending]
        block.sort(axis=0)
        self._add_summary(block[BCA_SPACING - 1 :: BCA_SPACING])
        self._n_folds += 1
        self._n_pending = 0

    def _add_summary(self, rows):
        if self._summary is None:
            self._summary = np.empty((self.n_total // BCA_SPACING, *self.shape))
        self._summary[self._n_summary : self._n_summary + len(rows)] = rows
        self._n_summary += len(rows)

    def merge(self, other):
        """Add the replicates another accumulator saw (same parameters)."""
        for name in (
            "shape",
            "n_total",
            "confidence_level",
            "keep_samples",
            "alternative",
        ):
            _check_same(name, getattr(self, name), getattr(other, name))
        _check_room(self.n_seen, other.n_seen, self.n_total)
        if self._store is not None:
            self._store.merge(other._store)
        self._moments.merge(other._moments)
        self._nan |= other._nan
        self.below += other.below
        self.ties += other.ties
        # A partial block is a block of its own: the rank bound holds for any
        # block size.
        other._fold()
        if other._n_summary:
            self._add_summary(other._summary[: other._n_summary])
        self._n_folds += other._n_folds
        self.n_seen += other.n_seen
        return self

    def levels(self, acceleration):
        """Per-element levels ``(alpha_1, alpha_2)``, once every replicate is in."""
        _check_complete(self.n_seen, self.n_total)
        acceleration = np.broadcast_to(
            np.asarray(acceleration, dtype=np.float64), self.shape
        )
        return bca_levels(
            self.below,
            self.ties,
            self.n_total,
            acceleration,
            self.confidence_level,
            self.alternative,
        )

    def second_pass(self, acceleration):
        """The reducer of the second pass, or None when every replicate is kept.

        Parameters
        ----------
        acceleration : array-like of shape `shape`
            From :func:`bca_acceleration`.

        Returns
        -------
        OrderStatistics or None
            Feed it the same replicates again, then pass it to
            :meth:`interval`.
        """
        levels = self.levels(acceleration)
        self.acceleration = np.broadcast_to(acceleration, self.shape)
        if self.keep_samples:
            return None
        self._fold()
        self._pending = None
        summary = (
            self._summary[: self._n_summary]
            if self._n_summary
            else np.empty((0, *self.shape))
        )
        summary.sort(axis=0)
        self._summary = None
        # Values of the summary have a rank known to within ``slack``.
        slack = (BCA_SPACING - 1) * self._n_folds
        bounds = []
        for level in self._read(levels):
            previous, following, fraction, valid = _order_positions(level, self.n_total)
            pivots = _pivots(
                summary, previous, following, valid & ~self._nan, slack, self.n_total
            )
            bounds.append(
                dict(pivots, previous=previous, following=following, fraction=fraction)
            )
        del summary
        return OrderStatistics(self.shape, self.n_total, bounds)

    def interval(self, second=None, *, overwrite_samples=False):
        """``(lower, upper)`` BCa bounds, from the kept samples or ``second``.

        Parameters
        ----------
        second : OrderStatistics or None
            What :meth:`second_pass` returned, fed every replicate again.
        overwrite_samples : bool, default=False
            Sort the kept samples in place (2.4x faster than a sorted copy,
            and no copy's memory), leaving :attr:`samples` sorted per element
            rather than in replicate order.
        """
        if self.acceleration is None:
            raise ValueError("second_pass(acceleration) must be called first")
        levels = self._read(self.levels(self.acceleration))
        if second is None:
            if not self.keep_samples:
                raise ValueError(
                    "second must be the second pass's OrderStatistics when "
                    "keep_samples=False, got None"
                )
            bounds = [np.empty(self.shape) for _ in levels]

            def read(part):
                ordered = self.samples[(slice(None), *part)]
                if overwrite_samples:
                    ordered.sort(axis=0)
                else:
                    ordered = np.sort(ordered, axis=0)
                for bound, level in zip(bounds, levels):
                    bound[part] = _read_levels(ordered, level[part], self.n_total)

            _in_parts(read, self.shape, split=True)
        else:
            bounds = second.values()
        values = [np.where(self._nan, np.nan, bound) for bound in bounds]
        lower = values.pop(0) if self._reads[0] else None
        upper = values.pop(0) if self._reads[1] else None
        return _one_sided(lower, upper, self.alternative)

    def _read(self, levels):
        """The levels of the bounds that the interval reads: both, or the
        finite one of a one-sided interval."""
        return [level for level, read in zip(levels, self._reads) if read]

    def nan_reasons(self, estimate=None):
        """Why elements of :attr:`std` and :meth:`interval` may be NaN.

        The conditions under which scipy's ``bootstrap(method="BCa")`` gives
        a NaN bound: a NaN replicate; z0 infinite (a NaN estimate, or every
        replicate on one side of it); the acceleration 0/0 or NaN. A constant
        distribution, named as such, is one of the last two.

        Parameters
        ----------
        estimate : ignored
            The estimate given to the constructor is used.

        Returns
        -------
        list of (str, ndarray of bool)
            Reasons in order, each with the elements it holds for; see
            :func:`describe_nan`. Call after :meth:`second_pass`.
        """
        if self.acceleration is None:
            raise ValueError("second_pass(acceleration) must be called first")
        return [
            (NAN_REPLICATE, self._nan.copy()),
            (NAN_ESTIMATE, np.isnan(self.estimate)),
            (EQUAL_REPLICATES, self._moments.variance() == 0),
            (
                ONE_SIDED_REPLICATES,
                (self.below + self.ties == 0) | (self.below == self.n_total),
            ),
            (UNDEFINED_ACCELERATION, ~np.isfinite(self.acceleration)),
        ]


def _pivots(summary, previous, following, valid, slack, n_total):
    """Per element, two values bracketing order statistics ``previous`` and
    ``following``, and how many replicates lie between them at most.

    ``summary`` (sorted along axis 0) holds every ``BCA_SPACING``-th value of
    sorted blocks, so that, for any value v, the replicates below v number
    between ``BCA_SPACING`` times the summary's values below v and that
    plus ``slack`` (and likewise at or below v).
    """
    n_kept = summary.shape[0]
    shape = previous.shape
    if not n_kept:
        # Fewer replicates than BCA_SPACING: no pivots, keep them all.
        low = np.full(shape, -np.inf)
        high = np.full(shape, np.inf)
        window = np.full(shape, n_total)
    else:
        # Lower pivot: at most ``previous`` replicates below it.
        j_low = np.floor_divide(previous - slack, BCA_SPACING)
        low = np.take_along_axis(summary, np.clip(j_low, 0, n_kept - 1)[None], 0)[0]
        low = np.where((j_low >= 0) & valid, low, -np.inf)
        # Upper pivot: at least ``following + 1`` replicates up to it.
        j_high = -(-(following + 1) // BCA_SPACING) - 1
        high = np.take_along_axis(summary, np.clip(j_high, 0, n_kept - 1)[None], 0)[0]
        high = np.where((j_high < n_kept) & valid, high, np.inf)
        window = BCA_SPACING * (
            (summary <= high).sum(axis=0) - (summary < low).sum(axis=0)
        )
        window = np.minimum(window + slack, n_total)
    # Both pivots equal: the order statistics are that value.
    settled = (low == high) | ~valid
    return dict(low=low, high=high, window=window, settled=settled, valid=valid)


class OrderStatistics:
    """Second pass of a BCa interval: exact order statistics at per-element ranks.

    For each bound, the two order statistics that its level's linear
    interpolation reads, per element. From the first pass's summary (each
    value's rank known to within ``slack``) come two pivots per element
    that bracket them; this pass counts the replicates below the lower
    pivot and keeps those between the pivots, at most ``capacity`` per
    element (``2 slack + 3 BCA_SPACING`` or so for continuous statistics),
    so that the order statistics are read exactly from what it kept.
    Built by :meth:`BCaAccumulator.second_pass`.
    """

    def __init__(self, shape, n_total, bounds):
        self.shape, self.n_total = shape, n_total
        self.n_seen = 0
        self._bounds = bounds
        windows = [b["window"][~b["settled"]] for b in bounds]
        self.capacity = max([1] + [int(w.max()) for w in windows if w.size])
        for bound in bounds:
            bound["below"] = np.zeros(shape, dtype=np.int64)
            bound["inside"] = np.zeros(shape, dtype=np.int64)
            bound["rows"] = np.full((self.capacity + BCA_SLICE, *shape), np.inf)

    def update(self, samples, ids=None):
        """Fold in replicates of the second pass (any order, any batches)."""
        samples = np.asarray(samples, dtype=np.float64)
        _check_room(self.n_seen, len(samples), self.n_total)
        capacity = self.capacity
        for start in range(0, len(samples), BCA_SLICE):
            block = samples[start : start + BCA_SLICE]
            for bound in self._bounds:
                bound["below"] += (block < bound["low"]).sum(axis=0)
                inside = (block >= bound["low"]) & (block <= bound["high"])
                bound["inside"] += inside.sum(axis=0)
                rows = bound["rows"]
                rows[capacity : capacity + len(block)] = np.where(inside, block, np.inf)
                used = rows[: capacity + len(block)]
                used.partition(capacity - 1, axis=0)
                rows[capacity:] = np.inf
        self.n_seen += len(samples)
        return self

    def values(self):
        """``[lower, upper]`` interpolated order statistics, per element."""
        _check_complete(self.n_seen, self.n_total)
        out = []
        for bound in self._bounds:
            window = np.sort(bound["rows"][: self.capacity], axis=0)
            first = bound["previous"] - bound["below"]
            second = bound["following"] - bound["below"]
            active = bound["valid"] & ~bound["settled"]
            inside = bound["inside"]
            if active.any() and (
                (first[active] < 0).any()
                or (second[active] >= inside[active]).any()
                or (inside[active] > self.capacity).any()
            ):
                raise RuntimeError(
                    "the BCa second pass did not bracket its order statistics; "
                    "were the same replicates fed to both passes?"
                )
            first = np.clip(first, 0, self.capacity - 1)
            second = np.clip(second, 0, self.capacity - 1)
            a = np.take_along_axis(window, first[None], axis=0)[0]
            b = np.take_along_axis(window, second[None], axis=0)[0]
            value = _lerp_array(a, b, bound["fraction"])
            value = np.where(bound["settled"], bound["low"], value)
            out.append(np.where(bound["valid"], value, np.nan))
        return out


# NaN intervals -------------------------------------------------------------------


def describe_nan(results):
    """Which elements have a NaN bound or standard error, and why, in words.

    Parameters
    ----------
    results : dict of str to (sequence of ndarray, list of (str, ndarray))
        Per attribute name: its bounds and standard error (arrays of one
        shape), and the reasons its accumulator's ``nan_reasons`` gives. An
        element NaN in any of the arrays is explained by the first reason
        that holds for it.

    Returns
    -------
    str or None
        One message for every attribute, naming how many of its elements
        are NaN and why, then what each reason means; None when nothing is
        NaN.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch.streaming import BootstrapAccumulator, describe_nan
    >>> replicates = [[0.0, 1.0], [0.0, 3.0], [np.nan, 2.0]]
    >>> acc = BootstrapAccumulator((2,), 3).update(replicates)
    >>> lower, upper = acc.interval()
    >>> values = (lower, upper, acc.std)
    >>> print(describe_nan({"coef_": (values, acc.nan_reasons())}))
    ... # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
    NaN interval bounds or standard errors for coef_: 1 of 2 elements,
    1 where a replicate is NaN. A NaN replicate is ...
    """
    parts, seen = [], []
    for name, (values, reasons) in results.items():
        undefined = np.zeros(np.shape(values[0]), dtype=bool)
        for value in values:
            undefined |= np.isnan(value)
        if not undefined.any():
            continue
        left = undefined.copy()
        counts = []
        for reason, mask in reasons:
            count = int((left & mask).sum())
            left &= ~mask
            if count:
                counts.append(f"{count} where {reason}")
                if reason not in seen:
                    seen.append(reason)
        if left.any():
            counts.append(f"{int(left.sum())} for another reason")
        size = undefined.size
        parts.append(
            f"{name}: {int(undefined.sum())} of {size} "
            f"{'element' if size == 1 else 'elements'}, {', '.join(counts)}"
        )
    if not parts:
        return None
    hints = " ".join(_NAN_HINTS[reason] for reason in seen)
    listed = "; ".join(parts)
    return f"NaN interval bounds or standard errors for {listed}. {hints}"


class PermutationCounter:
    """Exceedance counts and p-values of permutation null scores.

    For each target, counts the null scores at least as extreme as the
    observed one on the side(s) of ``alternative``: greater than or equal
    to it for "greater" (ties count, as in
    :func:`sklearn.model_selection.permutation_test_score`), less than or
    equal for "less", both for "two-sided"; and the permutations whose
    maximum (minimum) over targets reaches it, for family-wise
    (max-statistic) p-values. The null distribution itself is kept only when
    asked. The p-value rules are those of :mod:`skbatch._kernels.rules`.

    A null score within ``tolerance`` of the observed one counts as a tie,
    on either side: a permutation that reproduces the observed data (the
    identity, or a permutation within blocks of equal values) must count as
    reaching the observed score whatever the round-off of the arithmetic
    that scored it.

    Parameters
    ----------
    observed : float or array-like of shape (n_targets,)
        Score with the true labels; higher is better. Outputs are scalars for
        a scalar, arrays of shape (n_targets,) otherwise.
    n_total : int
        Number of permutations that will be received, at least 1.
    keep_null : bool, default=False
        Also keep every null score, in :attr:`null`.
    tolerance : float or array-like of shape (n_targets,), default=0.0
        Null scores ``>= observed - tolerance`` count as reaching the
        observed score; 0 compares exactly, as scikit-learn does.
    exact : bool, default=False
        The ``n_total`` permutations are every distinct permutation of the
        scheme, enumerated once, the identity among them: the p-values are
        then ``counts / n_total``, the exact share of permutations reaching
        the observed score (the identity counts itself), without the
        ``+ 1`` that Monte Carlo draws add for the observed data.
    alternative : {"greater", "less", "two-sided"}, default="greater"
        The side a null score must reach, as in
        :func:`scipy.stats.permutation_test`: "greater" (the observed score
        is higher than chance), "less", or "two-sided" (twice the smaller
        one-sided p-value, clipped to 1).

    Attributes
    ----------
    n_seen : int
        Number of permutations received so far, merged ones included.
    null : ndarray of shape (n_total,) or (n_total, n_targets) or None
        Null scores at rows ``ids``; None unless ``keep_null=True``.

    Notes
    -----
    Undefined scores never make a p-value small. A NaN observed score gives
    NaN p-values for that target, and the target is left out of the maximum
    over targets. A NaN null score of a target whose observed score is
    defined counts as reaching it (it could have been anything), and as
    reaching every target in the maximum over targets; it makes that
    target's null mean and std NaN.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch.streaming import PermutationCounter
    >>> null = np.random.default_rng(0).normal(size=(99, 2))
    >>> counter = PermutationCounter([2.5, 0.0], n_total=99).update(null)
    >>> counter.counts
    array([ 0, 53])
    >>> counter.pvalue()
    array([0.01, 0.54])
    >>> counter.pvalue_fwer()
    array([0.01, 0.76])
    >>> PermutationCounter([2.5, 0.0], 99, alternative="less").update(null).pvalue()
    array([1.  , 0.47])
    """

    def __init__(
        self,
        observed,
        n_total,
        *,
        keep_null=False,
        tolerance=0.0,
        exact=False,
        alternative="greater",
    ):
        observed = np.array(observed, dtype=np.float64)
        if observed.ndim > 1:
            raise ValueError(
                f"observed must be a scalar or a 1-D array, got shape {observed.shape}"
            )
        _check_n_total(n_total, minimum=1)
        tolerance = np.array(tolerance, dtype=np.float64)
        if tolerance.ndim > observed.ndim or tolerance.shape not in (
            (),
            observed.shape,
        ):
            raise ValueError(
                f"tolerance must be a scalar or have the shape of observed "
                f"{observed.shape}, got shape {tolerance.shape}"
            )
        if not np.all(np.isfinite(tolerance) & (tolerance >= 0)):
            raise ValueError(f"tolerance must be finite and >= 0, got {tolerance!r}")
        self.observed = observed
        self.tolerance = np.broadcast_to(tolerance, observed.shape).copy()
        self.n_total = n_total
        self.keep_null = keep_null
        self.exact = bool(exact)
        self.alternative = check_alternative(alternative)
        # NaN for an undefined observed score: nothing reaches it.
        self._limits = {
            side: threshold(observed, self.tolerance, side).reshape(-1)
            for side in sides(alternative)
        }
        self._undefined = np.isnan(observed).reshape(-1)
        self.n_seen = 0
        n_targets = observed.size
        # Per side: null scores reaching the observed one, and permutations
        # whose most extreme score over the family reaches it.
        self._counts = {
            side: np.zeros(n_targets, dtype=np.int64) for side in self._limits
        }
        self._family_counts = {
            side: np.zeros(n_targets, dtype=np.int64) for side in self._limits
        }
        self._moments = _RunningMoments(n_targets)
        self._store = _RowStore(n_total, observed.shape) if keep_null else None

    @staticmethod
    def nbytes_needed(n_targets, n_total, *, keep_null=False, alternative="greater"):
        """Bytes a counter with these parameters retains, and its p-values'
        temporaries.

        Observed scores, their tolerance and undefined mask, per side
        ``alternative`` counts the limit and both counts, null mean and M2,
        the null scores when kept, and ``COUNTER_TRANSIENT_ARRAYS`` float64
        arrays of the moments' update or the p-values; for the memory
        preflight before any work. An :meth:`update` of m permutations
        holds at most 3 m float64 values per target more (a copy of the
        family's scores, the comparisons), which belong to its batch, and
        the counter's Python objects (a few kB, whatever the targets).

        Parameters
        ----------
        n_targets : int
            Size of ``observed``, 1 for a scalar.
        n_total, keep_null, alternative
            As for the constructor.

        Returns
        -------
        nbytes : int
        """
        n_sides = len(sides(alternative))
        per_side = _FLOAT_BYTES + 2 * _COUNT_BYTES
        per_target = (4 + COUNTER_TRANSIENT_ARRAYS) * _FLOAT_BYTES + _BOOL_BYTES
        nbytes = n_targets * (per_target + n_sides * per_side)
        if keep_null:
            nbytes += n_total * (n_targets * _FLOAT_BYTES + _BOOL_BYTES)
        return nbytes

    def _unpack(self, values):
        return values[0] if self.observed.ndim == 0 else values

    def update(self, null_scores, ids=None):
        """Count a batch of permutations.

        Parameters
        ----------
        null_scores : array-like of shape (m,) or (m, n_targets)
            Scores of m permutations, shaped like ``observed`` per permutation.
        ids : array-like of int of shape (m,), default=None
            Row of :attr:`null` for each permutation; only used when
            ``keep_null=True``. None numbers them from :attr:`n_seen` on,
            which is only right when a single counter sees every permutation.

        Returns
        -------
        self : PermutationCounter
        """
        null_scores = np.asarray(null_scores, dtype=np.float64)
        if (
            null_scores.ndim != 1 + self.observed.ndim
            or null_scores.shape[1:] != self.observed.shape
        ):
            raise ValueError(
                f"null_scores must have shape (m, *{self.observed.shape}) to "
                f"match observed of shape {self.observed.shape}, got "
                f"{null_scores.shape}"
            )
        n_new = len(null_scores)
        _check_room(self.n_seen, n_new, self.n_total)
        if self._store is not None:
            self._store.put(
                null_scores, _check_ids(ids, n_new, self.n_seen, self.n_total)
            )
        scores = null_scores.reshape(n_new, -1)
        # The family is the targets with a defined observed score; within it
        # an undefined null score is extreme on either side, so the family
        # counts are never below the counts.
        family = scores[:, ~self._undefined]
        for side, limit in self._limits.items():
            self._counts[side] += np.count_nonzero(reaches(scores, limit, side), axis=0)
            if family.shape[1]:
                extreme = family_extreme(family, side)
                self._family_counts[side] += np.count_nonzero(
                    reaches(extreme, limit, side), axis=0
                )
        self._moments.update(scores)
        self._moments.advance(len(scores))
        self.n_seen += n_new
        return self

    def merge(self, other):
        """Add the permutations seen by another counter.

        Parameters
        ----------
        other : PermutationCounter
            Built with the same observed, n_total and keep_null, and having
            seen other permutations than this one.

        Returns
        -------
        self : PermutationCounter
        """
        for name in ("observed", "tolerance"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if not np.array_equal(mine, theirs, equal_nan=True):
                _check_same(name, mine.tolist(), np.asarray(theirs).tolist())
        _check_same("n_total", self.n_total, other.n_total)
        _check_same("keep_null", self.keep_null, other.keep_null)
        _check_same("exact", self.exact, other.exact)
        _check_same("alternative", self.alternative, other.alternative)
        _check_room(self.n_seen, other.n_seen, self.n_total)
        if self._store is not None:
            self._store.merge(other._store)
        for side in self._limits:
            self._counts[side] += other._counts[side]
            self._family_counts[side] += other._family_counts[side]
        self._moments.merge(other._moments)
        self.n_seen += other.n_seen
        return self

    def _read(self, counts, side):
        return self._unpack(counts[side].copy()) if side in counts else None

    @property
    def counts(self):
        """Per target, the number of null scores >= observed; None when
        ``alternative="less"``."""
        return self._read(self._counts, "greater")

    @property
    def counts_less(self):
        """Per target, the number of null scores <= observed; None when
        ``alternative="greater"``."""
        return self._read(self._counts, "less")

    @property
    def max_counts(self):
        """Per target, the permutations whose max over targets >= observed;
        None when ``alternative="less"``."""
        return self._read(self._family_counts, "greater")

    @property
    def min_counts(self):
        """Per target, the permutations whose min over targets <= observed;
        None when ``alternative="greater"``."""
        return self._read(self._family_counts, "less")

    @property
    def null_mean(self):
        """Per target, the mean of the null scores seen."""
        return self._unpack(self._moments.current_mean())

    @property
    def null_std(self):
        """Per target, the standard deviation (ddof=1) of the null scores."""
        return self._unpack(np.sqrt(self._moments.variance()))

    @property
    def null(self):
        """ndarray of shape (n_total, ...) or None: null score i at row ids[i]."""
        return None if self._store is None else self._store.rows

    def pvalue(self):
        """Per-target p-value for ``alternative``.

        "greater": ``(counts + 1) / (n_total + 1)``, "less" the same of
        :attr:`counts_less`, "two-sided" twice the smaller of the two,
        clipped to 1 (:func:`skbatch._kernels.rules.permutation_pvalue`). With
        ``exact``, ``counts / n_total``.

        Returns
        -------
        pvalue : float or ndarray of shape (n_targets,)
            NaN where the observed score is NaN.
        """
        _check_complete(self.n_seen, self.n_total)
        return self._defined(
            permutation_pvalue(
                self.n_total,
                **self._counts,
                alternative=self.alternative,
                exact=self.exact,
            )
        )

    def _defined(self, pvalue):
        pvalue[self._undefined] = np.nan
        return self._unpack(pvalue)

    def pvalue_fwer(self):
        """Family-wise p-value by the max statistic, for ``alternative``.

        "greater": ``(max_counts + 1) / (n_total + 1)``; "less": the same of
        :attr:`min_counts` (the min statistic); "two-sided": twice the
        smaller of the two, clipped to 1
        (:func:`skbatch._kernels.rules.maxstat_pvalue`). With ``exact``,
        ``max_counts / n_total``.

        Controls the family-wise error rate over targets (max-statistic
        method); never below :meth:`pvalue`.

        Returns
        -------
        pvalue : float or ndarray of shape (n_targets,)
        """
        _check_complete(self.n_seen, self.n_total)
        return self._defined(
            maxstat_pvalue(
                self.n_total,
                max_counts=self._family_counts.get("greater"),
                min_counts=self._family_counts.get("less"),
                alternative=self.alternative,
                exact=self.exact,
            )
        )

    def pvalue_adjusted(self, method):
        """:meth:`pvalue` adjusted for multiple testing over targets.

        Parameters
        ----------
        method : {"holm", "bh", "by"}
            Holm's step-down (family-wise error rate, any dependence),
            Benjamini–Hochberg (false discovery rate, independent or
            positively dependent tests) or Benjamini–Yekutieli (false
            discovery rate, any dependence); see
            :func:`skbatch._kernels.rules.adjust_pvalues`.

        Returns
        -------
        pvalue : float or ndarray of shape (n_targets,)
            NaN where the observed score is NaN, left out of the family; a
            scalar equals :meth:`pvalue` (a family of one).
        """
        return self._unpack(adjust_pvalues(np.atleast_1d(self.pvalue()), method))

    def pvalue_fdr(self):
        """Benjamini–Hochberg adjusted p-values of :meth:`pvalue`.

        Controls the false discovery rate over targets when their tests are
        independent or positively dependent; see :func:`fdr_adjusted`.

        Returns
        -------
        pvalue : float or ndarray of shape (n_targets,)
            NaN where the observed score is NaN; a scalar equals
            :meth:`pvalue` (a family of one).
        """
        return self.pvalue_adjusted("bh")


def fdr_adjusted(pvalues):
    """Benjamini–Hochberg adjusted p-values, NaNs left out of the family.

    The definition of :func:`scipy.stats.false_discovery_control` (method
    "bh"), computed the same way so that the values agree to the last digit:
    sorted p-values times ``m / i`` (rank ``i`` of ``m``), the running
    minimum from the largest down, clipped to [0, 1]. Rejecting where the
    adjusted value is at most ``q`` controls the false discovery rate at
    ``q`` for independent or positively dependent tests. The same as
    :func:`skbatch._kernels.rules.bh_adjusted`, where the rule lives.

    Parameters
    ----------
    pvalues : array-like of shape (m,)
        Values in [0, 1]; NaN marks an undefined test.

    Returns
    -------
    adjusted : ndarray of shape (m,)
        NaN where ``pvalues`` is NaN; the other values are adjusted as a
        family of their own number.

    Raises
    ------
    ValueError
        If ``pvalues`` is not 1-D, or holds a value outside [0, 1]
        (infinity included), as :func:`scipy.stats.false_discovery_control`
        refuses them.

    Examples
    --------
    >>> from skbatch.streaming import fdr_adjusted
    >>> fdr_adjusted([0.01, 0.04, float("nan"), 0.03])
    array([0.03, 0.04,  nan, 0.04])
    """
    return bh_adjusted(pvalues)
