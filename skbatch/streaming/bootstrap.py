"""Bootstrap replicates: running moments and the percentile tails,
:class:`BootstrapAccumulator`."""

import math
import numbers

import numpy as np

from .._kernels.rules import check_alternative
from ._common import (
    _BOOL_BYTES,
    _COUNT_BYTES,
    _FLOAT_BYTES,
    DEVIATION_SLICE_BYTES,
    UFUNC_BUFFER_BYTES,
    _admit,
    _check_complete,
    _check_n_total,
    _check_room,
    _check_same,
    _in_parts,
    _lerp,
    _n_parts,
    _one_sided,
    _quantiles_read,
    _replicates,
    _RowStore,
    _RunningMoments,
)
from .nan import (
    NAN_ESTIMATE,
    NAN_REPLICATE,
)

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
# Float64 arrays of an accumulator's shape that BootstrapAccumulator's update
# or interval holds at once beside what it retains: the block's mean and M2,
# the deviation of one replicate and Chan's update of them; the two bounds,
# numpy's interpolation of one (three arrays, two float64 rows read from
# float32 tails) and the open side of a one-sided interval. The interval
# measured 6 with float64 tails, 8 with float32 ones (numpy's buffers
# included), when the update's pending block and deviations are free.
TRANSIENT_ARRAYS = 8
# Copies of a batch's ids that BootstrapAccumulator.update makes to store its
# replicates (the ids, np.unique's sorted copy and its flags).
ID_COPIES = 4
# The Python objects of a BootstrapAccumulator and of its calls (array
# headers, the threads of _in_parts): 5 KB measured at shape 1.
ACCUMULATOR_OVERHEAD = 8 * 1024
_INTERVAL_METHODS = ("percentile", "basic")


def _check_method(method):
    if not isinstance(method, str) or method not in _INTERVAL_METHODS:
        raise ValueError(f"method must be one of {_INTERVAL_METHODS}, got {method!r}")


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


def _row64(ordered, i):
    """Row ``i`` of ``ordered`` in float64: a copy only of float32 rows."""
    return np.asarray(ordered[i], dtype=np.float64)


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
