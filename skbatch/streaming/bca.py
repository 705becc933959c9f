"""BCa intervals in two passes over the replicates: :class:`BCaAccumulator`,
its acceleration and levels, and :class:`OrderStatistics`."""

import math
import numbers

import numpy as np

from .._kernels.rules import check_alternative
from ._common import (
    _BOOL_BYTES,
    _COUNT_BYTES,
    _FLOAT_BYTES,
    _admit,
    _check_complete,
    _check_n_total,
    _check_room,
    _check_same,
    _in_parts,
    _one_sided,
    _quantiles_read,
    _replicates,
    _RowStore,
    _RunningMoments,
)
from .nan import (
    EQUAL_REPLICATES,
    NAN_ESTIMATE,
    NAN_REPLICATE,
    ONE_SIDED_REPLICATES,
    UNDEFINED_ACCELERATION,
)

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
