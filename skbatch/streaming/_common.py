"""What the accumulators share: checks of replicates, running moments,
stored rows, the split of work between threads."""

import math
import numbers

import numpy as np

from .._backends.side_by_side import cpu_workers, map_threads
from ..backend import Backend

# Deviations from a block's mean are squared a slice of rows of about this
# size at a time: a temporary as large as the block is mapped afresh on every
# update, and its page faults made the update twice as slow.
DEVIATION_SLICE_BYTES = 2**20
# The update that completes the replicates, and the interval, run once no
# batch computes any more: shapes of at least this many elements are then
# split between threads (see _in_parts).
PARALLEL_MIN_ELEMENTS = 2**14
# numpy's ufunc buffers: np.getbufsize() (8192) float64 values for each of
# two operands cast or broadcast, per thread.
UFUNC_BUFFER_BYTES = 2 * 8192 * 8
_FLOAT_BYTES = np.dtype(np.float64).itemsize
_COUNT_BYTES = np.dtype(np.int64).itemsize
_BOOL_BYTES = np.dtype(bool).itemsize


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
    (BootstrapRidgeProblem.nbytes in skbatch/_ridge/problems/replicates.py)."""
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


def _one_sided(lower, upper, alternative):
    """The bounds with the open side of a one-sided interval at -inf or inf,
    whatever the replicates (NaN ones included), as scipy's ``bootstrap``;
    that side may be given as None."""
    if alternative == "less":
        lower = np.full(np.shape(upper), -np.inf)
    elif alternative == "greater":
        upper = np.full(np.shape(lower), np.inf)
    return lower, upper


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
