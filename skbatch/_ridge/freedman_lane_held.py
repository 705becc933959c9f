"""The Freedman–Lane null with the hyperparameters held: permuted residuals
as extra rows of a few GEMMs per fold.

With every target's choices held (:mod:`skbatch._ridge.freedman_lane`),
each model's held-out predictions are linear in the targets ``y*``. Per
call (a batch of K permutations, t targets), one row per target and
permutation (``target * K + k``):

- ``X'Wy*`` of all rows is one GEMM of the residuals by X's rows moved as
  each permutation moves the residuals, plus the fitted values' products,
  made once (:meth:`HeldNullProblem.totals`): no ``y*`` of all rows;
- per fold, ``y*`` is built at the rows the fold reads only (its test
  rows, and the rows it does not train on; :func:`fold_columns`), by slices
  of the reduced model's residuals: a circular shift or a block shuffle
  within runs is a few contiguous runs of rows, sign flips one
  (:func:`_segments`); a fold's training products are all rows' less the
  product of the rows it does not train on;
- per fold and model, the held-out squared errors come from the
  candidates' decompositions, a block of rows at a time
  (:class:`~skbatch._ridge.held_model.HeldModel`), computed once per fold
  and shared by every permutation (and, by the caller, by every band: the
  full model is the same for all of them);
- the squared errors and the moments of ``y*`` that R^2 needs (the weight,
  mean and centred sum of squares of each fold's test rows) are
  accumulated fold by fold: no prediction outlives its fold.

Every target's statistic is its own: a call from the main thread splits the
targets into parts that run side by side, one per thread of numpy's BLAS,
each on one thread (:func:`held_parts`). Most of the work is small GEMMs and
passes over rows that one BLAS call cannot spread over the cores.
"""

import contextlib
import copy
import threading
from typing import NamedTuple

import numpy as np

from .._backends.side_by_side import cpu_workers, map_threads
from .._kernels import linalg as _linalg
from .._kernels.blas import gemm_update
from .._kernels.linalg.scores import CONSTANT_ULPS, TargetSpread, _r2
from .._resampling.signed import signed_rows
from ..backend import Backend
from .held_model import (
    BLOCK_BYTES,
    HeldModel,
    _as_slice,
    _block_moments,
    _block_rows,
    _columns,
    _offset,
    _scratch,
    _train_weights,
    held_fold,
)

__all__ = [
    "HELD_PRODUCT_COPIES",
    "HELD_ROW_NUMBERS",
    "HELD_TARGET_COPIES",
    "HeldModel",
    "HeldNullProblem",
    "fold_columns",
    "held_fold",
    "held_item_bytes",
    "held_parts",
    "read_rows",
]

# What one resample of the held null holds per target, at most: copies of
# the rows of y* that a fold reads (y* there; the pieces of the residuals or
# the fitted values gathered when those rows are not one slice) and of the
# p + 1 products with X (all rows', a fold's); per resample, whatever the
# targets, X's rows moved as the residuals are (HeldNullProblem.totals); and
# the blocks of rows of HeldModel.squared_errors (a block's products,
# coordinates, two copies of its test rows and their deviations for the
# moments: at most 3 BLOCK_BYTES, fewer with fewer rows) and a hat matrix
# with its damped test basis (HeldModel._hat: at most 2 BLOCK_BYTES, p + 1
# by the test rows each). A call split side by side (held_parts) holds the
# last three once per part.
# tracemalloc's peak was 0.60-0.79 of this charge (160 rows, 300 targets, 1-8
# resamples a call; tests/test_partitioning_freedman_lane.py holds it
# between 0.5 and 1).
HELD_TARGET_COPIES = 2
HELD_PRODUCT_COPIES = 2
# Numbers per target and resample alive at once: both models' squared
# errors, scores and orders of rows, the moments pooled and of a fold, and
# R^2's temporaries (they matter where folds have few rows and X few
# columns).
HELD_ROW_NUMBERS = 16
# Contiguous pieces of rows up to which a gather is done piece by piece (a
# memory copy each) rather than element by element (np.take along rows is
# several times slower per element).
MAX_SEGMENTS = 256
# Bytes of the chunks of targets whose test rows' products are made
# together (HeldNullProblem._moved_test_products).
PRODUCT_CHUNK_BYTES = 8 << 20
# Targets whose rows of y* are built together (HeldNullProblem.targets).
TARGET_CHUNK = 64
# Targets per part, at least, of a call split across the library's threads
# (held_parts): fewer, and the threads cost more than they save.
PART_TARGETS = 256
_NUMPY = Backend("numpy")


def held_parts(n_targets):
    """Parts of consecutive targets that a call of :class:`HeldNullProblem`
    runs side by side, each on one thread
    (:func:`~skbatch._backends.side_by_side.cpu_workers`): one per thread
    of numpy's BLAS, with at least :data:`PART_TARGETS` targets each, from
    the main thread; 1 elsewhere (a worker of a joblib backend).

    Most of a call is on one thread whatever BLAS may use: the candidates'
    GEMMs are small and the passes over rows are numpy's. Side by side,
    both cores of the benchmark's host run (benchmarks/RESULTS.md).
    """
    return max(1, min(cpu_workers(_NUMPY), n_targets // PART_TARGETS))


def _segments(rows):
    """``rows`` as ``(start, stop, source)`` runs of consecutive rows, or
    None when there are more than :data:`MAX_SEGMENTS`."""
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    if breaks.size >= MAX_SEGMENTS:
        return None
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [rows.size]])
    return list(zip(starts.tolist(), stops.tolist(), rows[starts].tolist()))


def _gather_columns(A, rows, out, plus=None, segments=False):
    """``out[:] = A[:, rows] (+ plus)``, by slices where ``rows`` runs in
    pieces (``segments``, :func:`_segments` of ``rows`` when not given)."""
    if segments is False:
        segments = _segments(rows) if rows.size else []
    if segments is None:
        if plus is None:
            out[...] = A[:, rows]
        else:
            np.add(A[:, rows], plus, out=out)
        return
    for start, stop, source in segments:
        piece = A[:, source : source + stop - start]
        if plus is None:
            out[:, start:stop] = piece
        else:
            np.add(piece, plus[:, start:stop], out=out[:, start:stop])


def fold_columns(n_samples, train, test):
    """The rows of ``y*`` that :class:`HeldNullProblem` reads on a fold.

    A fold's training products are those of all rows less those of the rows
    it does not train on (``subtract``, the covariance path's total minus
    held-out runs), or, with repeated training rows or more rows outside
    than in, the training rows' own.

    Returns
    -------
    columns : ndarray of int
        The test rows, then the other rows whose products the fold needs.
    product : ndarray of int
        The positions in ``columns`` of the rows of those products.
    subtract : bool

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._ridge.freedman_lane_held import fold_columns
    >>> fold_columns(5, np.array([0, 1, 2]), np.array([3, 4]))
    (array([3, 4]), array([0, 1]), True)
    """
    test = np.asarray(test, dtype=np.intp)
    outside = np.setdiff1d(np.arange(n_samples), train)
    subtract = len(train) + len(outside) == n_samples and len(outside) < len(train)
    if subtract:
        columns = np.concatenate([test, np.setdiff1d(outside, test)])
        product = np.flatnonzero(np.isin(columns, outside))
    else:
        columns = np.concatenate([test, np.asarray(train, dtype=np.intp)])
        product = np.arange(len(test), len(columns))
    return columns, product, bool(subtract)


def read_rows(n_samples, splits):
    """The most rows of ``y*`` that :class:`HeldNullProblem` reads on one
    fold (:func:`fold_columns`)."""
    return max(
        (len(fold_columns(n_samples, train, test)[0]) for train, test in splits),
        default=0,
    )


class _Fold(NamedTuple):
    """What a fold of :class:`HeldNullProblem` needs.

    ``columns``: the rows of ``y*`` that the fold reads, its test rows
    first; ``product``: those of them whose products with ``weighted`` (the
    matching rows of X, weighted) are the fold's training products
    (``subtract`` False) or are subtracted from all rows' (True);
    ``closed``: the subtracted rows are the test rows (their products can
    come from the residuals', :meth:`HeldNullProblem._moved_test_products`).
    """

    columns: object
    n_test: int
    root_weight: np.ndarray
    test_weight: float
    total: float
    product: object
    weighted: np.ndarray
    subtract: bool
    closed: bool


class _Moments:
    """Weight, mean and centred sum of squares of rows of ``y*``, pooled
    fold by fold (Chan et al.'s update): the spread R^2 divides by, without
    the rows."""

    def __init__(self, size):
        self.weight = 0.0
        self.mean = np.zeros(size)
        self.squares = np.zeros(size)
        self.n_rows = 0

    def add(self, weight, mean, squares, n_rows):
        total = self.weight + weight
        delta = mean - self.mean
        if total > 0:
            self.squares += squares + delta**2 * (self.weight * weight / total)
            self.mean += delta * (weight / total)
        else:
            self.squares += squares
        self.weight = total
        self.n_rows += n_rows

    def r2(self, sse):
        """R^2 of errors of sum of squares ``sse``, as
        :func:`skbatch._kernels.linalg.score_per_target` scores it
        (``force_finite``; NaN for fewer than 2 rows)."""
        if self.n_rows < _linalg.MIN_SCORED_ROWS:
            return np.full(sse.shape, np.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            variance = self.squares / self.weight
            error_var = sse / self.weight
        rounding = (CONSTANT_ULPS * np.finfo(np.float64).eps) ** 2 * (
            variance + self.mean**2
        )
        spread = TargetSpread(None, variance, variance <= rounding, rounding)
        return _r2(error_var, spread, np)


class HeldNullProblem:
    """Band b's unique variance on Freedman–Lane targets, choices held.

    Item ``i`` is resample ``i`` of :func:`signed_rows` (``entropy``,
    ``groups`` and ``permutation``); its targets are ``fitted + P_i
    residuals``. On each outer fold the full and the reduced models
    (:class:`HeldModel`, from :func:`held_fold`) predict the test rows from
    one product ``X'W y*`` of the training rows (all rows less the fold's
    held-out ones), and the held-out R^2 of each is the one of
    :func:`skbatch._ridge.partition_inference.held_out_scores`
    (``average``), from squared errors and moments accumulated fold by fold
    (the module's docstring).

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    full, reduced : list of HeldModel
        One per fold; ``reduced`` None for the empty set of bands (score 0).
    fitted, residuals : ndarray of shape (n_samples, n_targets)
    splits : list of (ndarray, ndarray)
    sample_weight, groups : ndarray of shape (n_samples,) or None
    entropy : int
    permutation : dict
        ``permutation_type``, ``block_size``, ``exact``.
    fit_intercept : bool
    average : {"rows", "folds"}
    """

    def __init__(
        self,
        X,
        full,
        reduced,
        *,
        fitted,
        residuals,
        splits,
        sample_weight,
        groups,
        entropy,
        permutation,
        fit_intercept,
        average,
    ):
        # The targets travel as rows (the layout of the module's docstring).
        self.fitted = np.ascontiguousarray(np.asarray(fitted, dtype=np.float64).T)
        self.residuals = np.ascontiguousarray(np.asarray(residuals, dtype=np.float64).T)
        self.splits, self.sample_weight, self.groups = splits, sample_weight, groups
        self.full, self.reduced = full, reduced
        self._scratch_sets()
        self.entropy, self.permutation = entropy, permutation
        self.fit_intercept, self.average = fit_intercept, average
        # A fold's products X'Wy* are the products of all rows less those of
        # the rows it does not train on (the covariance path's total minus
        # held-out runs): one product of every row per batch and one of each
        # fold's held-out rows, 2 n p (1 + 1 / (k - 1)) per target for k folds
        # instead of 2 n p over the training rows of each. X is centred on
        # its overall mean; each fold's own centring is a small correction
        # that the candidates' GEMMs apply (HeldModel's last row of V').
        n_samples = X.shape[0]
        self.w = _train_weights(sample_weight, np.arange(n_samples))
        X = X - _offset(X, self.w, fit_intercept)
        # The weights as one more column: the GEMM that makes the products
        # makes the targets' weighted sums too (no pass of its own over y*).
        self.weighted = np.column_stack([X * self.w[:, None], self.w])
        # The targets' part of every batch's products of all rows: fitted
        # values do not move (HeldNullProblem.totals).
        self.fitted_products = self.fitted @ self.weighted
        self.folds = []
        # The fitted values' products with each fold's test rows, made on the
        # first call that needs them (_moved_test_products).
        self._fitted_test = {}
        self._n_read = read_rows(n_samples, splits)
        for train, test in splits:
            columns, product, subtract = fold_columns(n_samples, train, test)
            self.folds.append(
                _Fold(
                    _as_slice(columns),
                    len(test),
                    None if sample_weight is None else np.sqrt(self.w[test]),
                    float(self.w[test].sum()),
                    self.w[train].sum(),
                    _as_slice(product),
                    self.weighted[columns[product]],
                    subtract,
                    subtract and len(columns) == len(product) == len(test),
                )
            )

    @property
    def shape(self):
        """(n_samples, n_features, n_targets)."""
        return self.fitted.shape[1], self.weighted.shape[1] - 1, self.fitted.shape[0]

    def __getstate__(self):
        # A worker gets the problem, not this process's scratch arrays (nor
        # their lock).
        state = dict(self.__dict__)
        del state["_free"], state["_lock"], state["_split"]
        # Made again where needed: not shipped to every worker.
        state["_fitted_test"] = {}
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._scratch_sets()

    def _scratch_sets(self):
        # Sets of scratch arrays not in use. Calls at the same time (the
        # threads of a threading joblib backend share this problem) each take
        # a set of their own; one call after another reuse theirs.
        self._free, self._lock = [], threading.Lock()
        # The parts of held_parts, once made (_parts).
        self._split = {}

    @contextlib.contextmanager
    def _scratch_set(self):
        """A set of scratch arrays (a dict of buffers) that no other call
        uses until this one gives it back."""
        with self._lock:
            buffers = self._free.pop() if self._free else {}
        try:
            yield buffers
        finally:
            with self._lock:
                self._free.append(buffers)

    def targets(self, codes, columns=slice(None), buffers=None):
        """``fitted + P residuals`` of each resample's signed row codes, at
        the rows ``columns`` (a slice or int positions), of shape
        (n_targets, len(codes), n_columns)."""
        n_targets = self.fitted.shape[0]
        fitted = _columns(self.fitted, columns)
        shape = (n_targets, len(codes), fitted.shape[1])
        out = np.empty(shape) if buffers is None else _scratch(buffers, "y*", shape)
        plans = []
        for code in codes:
            code = code[columns]
            flipped = code < 0
            rows = np.where(flipped, ~code, code)
            signs = np.where(flipped, -1.0, 1.0) if flipped.any() else None
            plans.append((rows, _segments(rows) if rows.size else [], signs))
        # A few targets at a time when each resample is a few pieces: their
        # rows of the residuals, fitted values and y* stay in cache (a third
        # faster than whole columns of pieces on the benchmark's host).
        few = all(
            segments is not None and len(segments) <= 16 for _, segments, _ in plans
        )
        chunk = TARGET_CHUNK if few else max(n_targets, 1)
        for lo in range(0, n_targets, chunk):
            hi = min(lo + chunk, n_targets)
            residuals, plus = self.residuals[lo:hi], fitted[lo:hi]
            for k, (rows, segments, signs) in enumerate(plans):
                part = out[lo:hi, k]
                if signs is None:
                    _gather_columns(residuals, rows, part, plus, segments)
                    continue
                _gather_columns(residuals, rows, part, None, segments)
                part *= signs
                part += plus
        return out

    def totals(self, codes, buffers):
        """``X'W y*`` of all rows (X centred, the weighted sums last) of each
        resample, as rows (``target * n_repeats + k``).

        Resample k moves residual ``rows[j]`` (sign ``s_j``) to row j, so its
        products are the fitted values' (made once) plus
        ``residuals @ W_k``, ``W_k[rows[j]] = s_j weighted[j]``: one GEMM of
        the residuals by every resample's rows of X, which is as many flops
        as one of ``y*`` and needs no ``y*`` of all rows.
        """
        n_targets, n_samples = self.fitted.shape
        width = self.weighted.shape[1]
        moved = _scratch(buffers, "moved", (n_samples, len(codes), width))
        for k, code in enumerate(codes):
            flipped = code < 0
            rows = np.where(flipped, ~code, code)
            source = self.weighted
            if flipped.any():
                source = source * np.where(flipped, -1.0, 1.0)[:, None]
            if np.bincount(rows, minlength=n_samples).max(initial=0) <= 1:
                moved[rows, k] = source
            else:
                moved[:, k] = 0.0
                np.add.at(moved[:, k], rows, source)
        out = _scratch(buffers, "totals", (n_targets, len(codes), width))
        np.matmul(
            self.residuals,
            moved.reshape(n_samples, -1),
            out=out.reshape(n_targets, -1),
        )
        out += self.fitted_products[:, None, :]
        return out.reshape(n_targets * len(codes), width)

    def __call__(self, ids):
        """Unique variance of the band under resamples ``ids``: an ndarray
        of shape (len(ids), n_targets)."""
        n_parts = held_parts(self.fitted.shape[0])
        if n_parts == 1:
            return self._whole(ids)
        scores = map_threads(
            lambda part: part._whole(ids), self._parts(n_parts), _NUMPY
        )
        return np.concatenate(scores, axis=1)

    def _whole(self, ids):
        """:meth:`__call__` on one thread."""
        # Scratch arrays kept from call to call: a batch's megabytes are not
        # mapped (and faulted in) anew for every batch.
        with self._scratch_set() as buffers:
            return self._unique(ids, buffers)

    def _parts(self, n_parts):
        """The problem as ``n_parts`` problems of consecutive targets, made
        on the first call that needs them: views of this one's arrays, the
        same decompositions, scratch arrays of their own."""
        parts = self._split.get(n_parts)
        if parts is None:
            bounds = np.linspace(0, self.fitted.shape[0], n_parts + 1).astype(int)
            parts = [self._part(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
            self._split = {n_parts: parts}
        return parts

    def _part(self, lo, hi):
        """The problem of targets ``lo:hi`` alone."""
        part = copy.copy(self)
        part.fitted, part.residuals = self.fitted[lo:hi], self.residuals[lo:hi]
        part.fitted_products = self.fitted_products[lo:hi]
        part.full = [model.targets(lo, hi) for model in self.full]
        if self.reduced is not None:
            part.reduced = [model.targets(lo, hi) for model in self.reduced]
        part._fitted_test = {}
        part._scratch_sets()
        return part

    def _unique(self, ids, buffers):
        """:meth:`__call__` with the scratch arrays ``buffers``."""
        n_targets, n_samples = self.fitted.shape
        codes = signed_rows(
            self.entropy, ids, n_samples, self.groups, **self.permutation
        )
        n_repeats = len(codes)
        n_rows = n_targets * n_repeats
        # The largest fold's rows of y*, taken first: a buffer that grew
        # fold by fold would be held twice while it grows.
        _scratch(buffers, "y*", (n_rows * max(self._n_read, 1),))
        models = [m for m in (self.full, self.reduced) if m is not None]
        sse = np.zeros((len(models), n_rows))
        scores = np.zeros((len(models), n_rows))
        pooled = _Moments(n_rows)
        totals = None
        for f, fold in enumerate(self.folds):
            if totals is None and fold.subtract:
                totals = self.totals(codes, buffers)
            # y* at the rows the fold reads, its test rows first.
            Y = self.targets(codes, fold.columns, buffers).reshape(n_rows, -1)
            products, mean = self._products(fold, Y, totals, codes, buffers)
            # Each candidate's products are small (its targets by its
            # columns): on one thread, as _linalg.one_thread says why.
            with _linalg.one_thread(Y):
                fold_sse, shift, squares = self._fold_errors(
                    [model[f] for model in models],
                    fold,
                    Y[:, : fold.n_test],
                    (products, totals, mean),
                    n_repeats,
                    buffers,
                )
            moments = _Moments(n_rows)
            moments.add(fold.test_weight, mean + shift, squares, fold.n_test)
            if self.average == "rows":
                pooled.add(moments.weight, moments.mean, moments.squares, fold.n_test)
                for m, errors in enumerate(fold_sse):
                    sse[m] += errors
            else:
                for m, errors in enumerate(fold_sse):
                    scores[m] += moments.r2(errors)
        if self.average == "rows":
            f = [pooled.r2(errors) for errors in sse]
        else:
            f = list(scores / len(self.folds))
        unique = f[0] - (f[1] if self.reduced is not None else 0.0)
        return unique.reshape(n_targets, n_repeats).T

    def _fold_errors(self, models, fold, test_rows, products, n_repeats, buffers):
        """Each model's squared errors on the fold, and the test rows' own
        moments (their weighted mean less the training mean, their centred
        sum of squares).

        The moments are taken from the first model's blocks that go through
        the test rows (:meth:`HeldModel.squared_errors`), while the rows are
        in cache. A model of few columns scores from products alone
        (:meth:`HeldModel.moment_errors`) where the fold trains on every row
        but its test rows, after the moments; with no model going through
        the test rows, the moments take a pass of their own.
        """
        products, totals, mean = products
        n_rows = test_rows.shape[0]
        shift, squares = np.empty(n_rows), np.empty(n_rows)
        own = None
        if fold.closed:
            # The test rows' weighted sums are all rows' less the training
            # ones (the products' last column): no pass over the rows.
            with np.errstate(divide="ignore", invalid="ignore"):
                own = (totals[:, -1] - products[:, -1]) / fold.test_weight
        moments = (mean, fold.test_weight, shift, squares, own)
        fold_sse = [None] * len(models)
        later = [
            m for m, model in enumerate(models) if fold.closed and model.from_moments
        ]
        # The last model through the test rows may overwrite them.
        last = max(set(range(len(models))) - set(later), default=None)
        for m, model in enumerate(models):
            if m in later:
                continue
            fold_sse[m] = model.squared_errors(
                products,
                test_rows,
                n_repeats,
                fold.root_weight,
                buffers,
                moments,
                in_place=m == last,
            )
            moments = None
        if later:
            if moments is not None:
                # A pass of their own, a block of rows at a time.
                size = _block_rows(2 * max(test_rows.shape[1], 1))
                for lo in range(0, n_rows, size):
                    block = slice(lo, min(lo + size, n_rows))
                    _block_moments(
                        test_rows[block], block, fold.root_weight, *moments[:-1]
                    )
            centred = squares + fold.test_weight * shift**2
            for m in later:
                fold_sse[m] = models[m].moment_errors(
                    products, totals, n_repeats, centred
                )
        return fold_sse, shift, squares

    def _products(self, fold, Y, totals, codes, buffers):
        """``(X_train' W Y_train`` with ``1' W Y_train`` in a last column,
        weighted mean of Y_train)``, X centred on its overall mean, the
        products as rows (one per row of ``Y``, y* at ``fold.columns``)."""
        # The products and, in the last column, the weighted sums.
        out = _scratch(buffers, "fold products", (Y.shape[0], self.shape[1] + 1))
        if not self._moved_test_products(fold, totals, codes, out, buffers):
            np.matmul(_columns(Y, fold.product), fold.weighted, out=out)
            if fold.subtract:
                np.subtract(totals, out, out=out)
        if not self.fit_intercept:
            return out, np.zeros(Y.shape[0])
        return out, out[:, -1] / fold.total

    def _fitted_product(self, fold):
        """The fitted values' products with the fold's test rows of X."""
        # The fold itself (a tuple of arrays) is not hashable; it lives as long
        # as the problem, and so does its id.
        key = id(fold)
        if key not in self._fitted_test:
            self._fitted_test[key] = _columns(self.fitted, fold.columns) @ fold.weighted
        return self._fitted_test[key]

    def _moved_test_products(self, fold, totals, codes, out, buffers):
        """``out[:] = totals`` less the test rows' products, as
        :meth:`totals` makes all rows': the fitted values' (made once) and
        the test rows' residuals times X's test rows moved as the residuals
        are. Only where every resample moves the test rows among themselves
        (permutations within runs, folds of whole runs; False otherwise):
        then one GEMM of the targets by every resample's rows, a shape BLAS
        runs faster than that of the rows of ``y*`` by X's rows."""
        if not fold.closed:
            return False
        test = fold.columns
        where = np.full(self.fitted.shape[1], -1)
        where[test] = np.arange(fold.n_test)
        n_targets, width = self.fitted.shape[0], self.weighted.shape[1]
        moved = _scratch(buffers, "moved test", (fold.n_test, len(codes), width))
        for k, code in enumerate(codes):
            code = code[test]
            flipped = code < 0
            positions = where[np.where(flipped, ~code, code)]
            if (positions < 0).any():
                return False
            source = fold.weighted
            if flipped.any():
                source = source * np.where(flipped, -1.0, 1.0)[:, None]
            moved[positions, k] = source
        out3 = out.reshape(n_targets, len(codes), width)
        totals3 = totals.reshape(out3.shape)
        fitted = self._fitted_product(fold)
        moved = moved.reshape(fold.n_test, -1)
        # A chunk of targets at a time: the chunk's products stay in cache
        # between the subtraction and the GEMM.
        chunk = max(1, PRODUCT_CHUNK_BYTES // (8 * len(codes) * width))
        for lo in range(0, n_targets, chunk):
            hi = min(lo + chunk, n_targets)
            np.subtract(totals3[lo:hi], fitted[lo:hi, None, :], out=out3[lo:hi])
            # out3 -= residuals @ moved (BLAS's beta = 1 subtracts in place),
            # the test rows' residuals read where they are (a slice of rows
            # is a strided operand, no copy).
            residuals = _columns(self.residuals[lo:hi], test)
            gemm_update(out3[lo:hi].reshape(hi - lo, -1), residuals, moved)
        return True


def held_item_bytes(n_samples, n_features, n_test, n_targets, n_read=None, n_parts=1):
    """Host bytes of one resample of :class:`HeldNullProblem` at its peak:
    :data:`HELD_TARGET_COPIES` copies of the ``n_read`` rows of ``y*`` a
    fold reads (:func:`read_rows`; all ``n_samples`` when None),
    :data:`HELD_PRODUCT_COPIES` of its products with X,
    :data:`HELD_ROW_NUMBERS` numbers per target; and in each of the
    ``n_parts`` parts of a call (:func:`held_parts`), X's rows moved as its
    residuals are, the blocks of rows its squared errors and moments go
    through (3 :data:`BLOCK_BYTES` at most, of rows of the products,
    coordinates and the largest test fold) and a hat matrix with its damped
    test basis (``n_features + 1`` by ``n_test`` each, :data:`BLOCK_BYTES`
    at most).

    Examples
    --------
    >>> from skbatch._ridge.freedman_lane_held import held_item_bytes
    >>> held_item_bytes(100, 10, 20, 1)
    14880.0
    """
    n_read = n_samples if n_read is None else n_read
    width = n_features + 1
    blocks = min(3 * BLOCK_BYTES, 8.0 * n_targets / n_parts * (2 * width + 3 * n_test))
    blocks += 2 * min(BLOCK_BYTES, 8.0 * width * n_test)
    return 8.0 * n_targets * (
        HELD_TARGET_COPIES * n_read + HELD_PRODUCT_COPIES * width + HELD_ROW_NUMBERS
    ) + n_parts * (8.0 * n_samples * width + blocks)
