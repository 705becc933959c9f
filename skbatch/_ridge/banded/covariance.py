"""Banded ridge on the covariance: many rows, few features.

A candidate ``gamma``'s design is ``Z = X[:, kept] D`` (``D`` the square
roots of its band weights on its kept columns), so its training covariance
is ``D C[kept, kept] D`` for the fold's covariance ``C`` of X, and its
cross-moments ``D (X'y)[kept]``: the moments of X (``sum w``, ``sum w x``,
``sum w x x'``) are formed once for all candidates, a fold's from those of
all rows less its test rows' (as :class:`~skbatch._ridge.covariance.CovarianceSolver`
forms them), and each candidate costs one ``eigh`` of a p x p matrix per
fold, serving every alpha, and no product over the rows. In the
eigenbasis ``V`` of ``D C D``, ``W = D V`` maps X's kept columns straight to
the candidate's coordinates: the held-out predictions are ``X_test[:, kept]
W diag(1 / (eigenvalues + alpha)) W' (X'y)[kept]`` and the coefficients
``W diag(1 / (eigenvalues + alpha)) W' (X'y)[kept]``, already on X's
columns.

- :class:`BandedCovariance`: the moments of every fold and of all rows, and
  each candidate's eigendecomposition, made when a batch needs it (p x p
  per fold of the candidates in flight, never one per candidate held);
- :func:`banded_covariance`: the decomposition where the rule chooses it
  (:func:`choose_banded_decomposition`).

Its problems (the search of each batch of targets, the refit at each
target's pair), their preflight and the search of a fit are
``covariance_search.py``'s.

The rule (:func:`choose_banded_decomposition`) is
:func:`~skbatch._ridge.covariance.choose_decomposition`'s (K-fold, X's
squares within float64), "auto" asking more training rows per column
(``BANDED_COVARIANCE_MIN_ROWS_PER_FEATURE``: the SVD search shares its QRs
among the candidates), with the conditioning of every candidate: ``D C D``
has its eigenvalues in ``[gamma_min lambda_min(C), gamma_max
lambda_max(C)]`` (``gamma`` over the kept bands), so ``eps * (gamma_max
lambda_max + alpha) / (gamma_min lambda_min + alpha)`` at the smallest
alpha bounds the error of every candidate of every fold from the
eigenvalues of X's covariances alone, before any candidate is decomposed;
``"auto"`` keeps the covariance where that bound stays below
``COVARIANCE_MAX_ERROR``.
"""

import numpy as np
import scipy.linalg
from array_api_compat import device as array_device
from array_api_compat import is_numpy_array

from ..._backends.side_by_side import cpu_workers, map_threads
from ..._engine import Portable
from ..._kernels import linalg as _linalg
from ..covariance import (
    COVARIANCE_MAX_ERROR,
    CovarianceDesign,
    _centred,
    _subtract,
    _test_rows,
    choose_decomposition,
    row_selections,
)

__all__ = [
    "BANDED_COVARIANCE_MIN_ROWS_PER_FEATURE",
    "BandedCovariance",
    "banded_covariance",
    "choose_banded_decomposition",
]


# Training rows per column of X from which "auto" searches several candidates
# on the covariance (beside BatchedRidge's rule): the SVD search shares one QR
# of each fold's rows among the candidates (factors.SharedFactors), so each
# candidate costs it a p x p SVD and the covariance saves only the QRs and
# the folds' projections of the targets, while it decomposes every
# candidate's folds for each batch. Timed with 20 candidates and 5 folds
# (benchmarks/RESULTS.md, "BandedRidge on the covariance"): at 8 rows per
# column the SVD was 1.2-1.3x faster; with 64 targets the covariance was
# 1.45x faster at 16 and 1.7x at 24, with 2,000 targets 0.89-0.94x; on EEG
# trials (21 and 62 rows per column, 64 channels) it was 1.9-2.9x faster
# with a 25th to a 35th of the SVD's memory.
BANDED_COVARIANCE_MIN_ROWS_PER_FEATURE = 20


def choose_banded_decomposition(solver, scheme, X):
    """``"svd"`` or ``"covariance"`` for the search of several candidates:
    :func:`~skbatch._ridge.covariance.choose_decomposition`, and for
    ``"auto"`` at least ``BANDED_COVARIANCE_MIN_ROWS_PER_FEATURE`` training
    rows per column in every fold; :meth:`BandedCovariance.accurate` then
    says whether the candidates' conditioning keeps it.

    Raises
    ------
    ValueError
        As :func:`~skbatch._ridge.covariance.choose_decomposition`.
    """
    chosen = choose_decomposition(solver, scheme, X)
    if solver != "auto" or chosen != "covariance":
        return chosen
    smallest = min(len(train) for train, _ in scheme.splits)
    if smallest < BANDED_COVARIANCE_MIN_ROWS_PER_FEATURE * X.shape[1]:
        return "svd"
    return chosen


def banded_covariance(
    X,
    sample_weight,
    alphas,
    scheme,
    design,
    backend,
    dtype,
    *,
    fit_intercept,
    scoring,
    solver,
):
    """A :class:`BandedCovariance` of ``design`` where ``solver`` and the
    rule choose the covariance, else None (the candidates' SVDs). Called
    inside the backend's context, after its memory check."""
    if choose_banded_decomposition(solver, scheme, X) != "covariance":
        return None
    decomposed = BandedCovariance(
        X,
        sample_weight,
        alphas,
        scheme,
        design,
        backend,
        dtype,
        fit_intercept=fit_intercept,
        scoring=scoring,
    )
    # "auto" keeps the covariance only where squaring the condition number
    # of every candidate keeps the SVD's accuracy.
    if solver == "auto" and not decomposed.accurate():
        return None
    return decomposed


def _eigenvalue_range(covariance, xp):
    """The smallest and largest eigenvalues of a symmetric matrix (floats),
    the smallest clipped at 0 as :func:`_linalg.covariance_eigh` clips it."""
    with _linalg.one_thread(covariance):
        if is_numpy_array(covariance):
            values = scipy.linalg.eigh(
                covariance, eigvals_only=True, check_finite=False
            )
        else:
            values = xp.linalg.eigvalsh(covariance)
    return max(float(xp.min(values)), 0.0), float(xp.max(values))


class _Fold(Portable):
    """One split: its training moments and covariance, its rows located."""

    def __init__(self, weight, sums, covariance, train, test, complement, backend):
        self.weight, self.sums, self.covariance = weight, sums, covariance
        self.complement = complement
        self.train = None if complement else row_selections(train, backend)
        # Bounded blocks for the moments; whole runs (views) for the scores.
        self.blocks = row_selections(test, backend)
        self.test = row_selections(test, backend, block=max(len(test), 1))
        self.n_test = len(test)


class BandedCovariance(CovarianceDesign):
    """The moments of a design, decomposed per candidate through its covariance.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Host design matrix.
    sample_weight : ndarray of shape (n_samples,) or None
    alphas : ndarray of shape (n_alphas,)
    scheme : skbatch._ridge.cv.KFold
        Split already.
    design : BandedDesign
        The candidates' kept columns and scales.
    backend : Backend
    dtype : numpy dtype
        The compute dtype, as for ``CovarianceSolver``: the moments and the
        ``eigh`` run in :func:`skbatch._kernels.linalg.decomposition_dtype`.
    fit_intercept : bool
    scoring : str or None
    """

    def __init__(
        self,
        X,
        sample_weight,
        alphas,
        scheme,
        design,
        backend,
        dtype,
        *,
        fit_intercept,
        scoring,
    ):
        weight = self._set_design(
            X, sample_weight, alphas, scheme, backend, dtype, fit_intercept, scoring
        )
        xp, work, root_weight = self.xp, self.work_dtype, self.root_weight
        n, p = X.shape
        shift = self.x_shift_work
        self._candidates(design)
        splits = scheme.splits
        tests = np.concatenate([test for _, test in splits])
        self.partition = tests.size == n and np.array_equal(
            np.sort(tests), np.arange(n)
        )
        self.all_rows = (
            None if self.partition else row_selections(np.arange(n), backend)
        )

        def moments(rows):
            return _linalg.gram_moments(self.X, rows, root_weight, shift, work, xp=xp)

        tested = [moments(row_selections(test, backend)) for _, test in splits]
        total = (
            tuple(sum(parts) for parts in zip(*tested))
            if self.partition
            else moments(self.all_rows)
        )
        self.folds = []
        for k, (train, test) in enumerate(splits):
            complement = (
                train.size + test.size == n and np.union1d(train, test).size == n
            )
            if complement:
                part = _subtract(total, tested[k])
            else:
                part = moments(row_selections(train, backend))
            tested[k] = None
            fold_weight, sums, gram = part
            covariance = _linalg.centred_gram(
                gram, sums, fold_weight, fit_intercept=fit_intercept, xp=xp
            )
            self.folds.append(
                _Fold(fold_weight, sums, covariance, train, test, complement, backend)
            )
            fold = self.folds[-1]
            fold.test_weight = (
                None if weight is None else xp.take(weight, backend.asarray(test))
            )
        self.weight, self.sums = total[0], total[1]
        self.covariance = _linalg.centred_cross(
            total[2], total[1], total[1], total[0], fit_intercept=fit_intercept
        )
        del total
        ranges = map_threads(
            lambda C: _eigenvalue_range(C, xp),
            [fold.covariance for fold in self.folds] + [self.covariance],
            backend,
        )
        self.condition = self._condition_bound(ranges, float(np.min(alphas)))

    def _candidates(self, design):
        """Each candidate's kept columns (None: all) and scales."""
        backend = self.backend
        self.candidates = design.candidates
        self.n_candidates = len(design.candidates)
        self.kept, self.scales, self.host_kept = [], [], []
        for kept, scale in zip(design.kept, design.scales):
            every = kept.size == self.n_features
            self.host_kept.append(kept)
            self.kept.append(None if every else backend.asarray(kept))
            self.scales.append(backend.asarray(scale, self._work_numpy))

    def _condition_bound(self, ranges, alpha):
        """The largest bound ``(g_max l_max + alpha) / (g_min l_min + alpha)``
        of ``cond(D C D + alpha I)`` over candidates and covariances."""
        largest = 1.0
        for gamma in self.candidates:
            kept = gamma[gamma > 0]
            low, high = float(kept.min()), float(kept.max())
            for smallest, biggest in ranges:
                largest = max(
                    largest, (high * biggest + alpha) / (low * smallest + alpha)
                )
        return largest

    def accurate(self):
        """Whether ``eps * cond(D C D + alpha I)``, bounded at the smallest
        alpha for every candidate and covariance, stays below
        ``COVARIANCE_MAX_ERROR``."""
        eps = float(self.xp.finfo(self.work_dtype).eps)
        return eps * self.condition <= COVARIANCE_MAX_ERROR

    # -- memory ---------------------------------------------------------

    @staticmethod
    def nbytes(n_samples, n_features, scheme, itemsize, *, backend=None):
        """Device bytes at the peak, from the shapes: X in the compute dtype;
        the moments of every test fold and of all rows while they are
        formed, then each fold's covariance and that of all rows (p x p each,
        float64), two blocks of rows being multiplied; then, for each
        candidate in flight (one per worker), the rescaled covariance,
        ``eigh``'s copy of it and workspace, its eigenbasis and a cast copy
        (6 p x p), and a fold's centred test rows."""
        n_folds = len(scheme.splits)
        p = n_features
        workers = 1 if backend is None else cpu_workers(backend)
        n_test = max(len(test) for _, test in scheme.splits)
        forming = 8 * 2 * (n_folds + 1) * (p * p + p)
        block = 8 * 2 * min(n_samples, _linalg.COVARIANCE_ROW_BLOCK) * p
        held = 8 * (n_folds + 1) * (p * p + p)
        in_flight = workers * (8 * 6 * p * p + itemsize * 2 * n_test * p)
        return itemsize * n_samples * p + max(forming + block, held + in_flight)

    @property
    def fixed_bytes(self):
        """Device bytes held once the moments are formed (:meth:`nbytes`
        after the moments)."""
        p = self.n_features
        workers = cpu_workers(self.backend)
        n_test = max(fold.n_test for fold in self.folds)
        itemsize = np.dtype(self.dtype).itemsize
        held = 8 * (len(self.folds) + 1) * (p * p + p)
        in_flight = workers * (8 * 6 * p * p + itemsize * 2 * n_test * p)
        return itemsize * self.n_samples * p + held + in_flight

    def values_per_target(self):
        """Device values of one target in a batch: its column and a block's
        centred copy, its cross-moments with every test fold and all rows
        and each fold's centred training cross-moments, the scores of every
        pair; per candidate in flight, its coordinates, filtered copy, test
        targets, predictions and errors, and the scores of every alpha."""
        n_test = max(fold.n_test for fold in self.folds)
        n_alphas = self.alphas.size
        workers = cpu_workers(self.backend)
        per_candidate = 3 * self.n_features + 4 * n_test + 2 * n_alphas
        return (
            2 * self.n_samples
            + (2 * len(self.folds) + 3) * self.n_features
            + self.n_candidates * n_alphas
            + workers * per_candidate
        )

    # -- targets --------------------------------------------------------

    def _shift(self, Y):
        xp, work = self.xp, self.work_dtype
        if self.fit_intercept:
            return xp.astype(Y[self.anchor], work)
        return xp.zeros(Y.shape[1], dtype=work, device=array_device(Y))

    def _cross(self, Y, rows, y_shift):
        return _linalg.cross_moments(
            self.X,
            Y,
            rows,
            self.root_weight,
            self.x_shift_work,
            y_shift,
            self.work_dtype,
            xp=self.xp,
        )

    def _centred_cross(self, weight, x_sums, sums):
        """``(y_sums, centred cross-moments (p, m))`` in the work dtype."""
        y_sums, cross = sums
        return y_sums, _linalg.centred_cross(
            cross, x_sums, y_sums, weight, fit_intercept=self.fit_intercept
        )

    def prepare(self, Y):
        """A batch's shift, and each fold's and all rows' centred training
        cross-moments, formed once for every candidate."""
        y_shift = self._shift(Y)
        tested = [self._cross(Y, fold.blocks, y_shift) for fold in self.folds]
        total = (
            tuple(sum(parts) for parts in zip(*tested))
            if self.partition
            else self._cross(Y, self.all_rows, y_shift)
        )
        folds = []
        for k, fold in enumerate(self.folds):
            if fold.complement:
                sums = _subtract(total, tested[k])
            else:
                sums = self._cross(Y, fold.train, y_shift)
            tested[k] = None
            folds.append(self._centred_cross(fold.weight, fold.sums, sums))
        full = self._centred_cross(self.weight, self.sums, total)
        return y_shift, folds, full

    def _offsets(self, weight, x_sums, y_sums, y_shift):
        """As ``CovarianceSolver._offsets``: the means over a set of rows as
        a row of the data and the small mean of the deviations from it."""
        xp, dtype = self.xp, self.X.dtype
        shifts = self.x_shift, xp.astype(y_shift, dtype)
        if not self.fit_intercept:
            return (shifts[0], 0.0), (shifts[1], 0.0)
        x_offset = xp.astype(x_sums / weight, dtype)
        return (shifts[0], x_offset), (shifts[1], xp.astype(y_sums / weight, dtype))

    # -- one candidate --------------------------------------------------

    def _columns(self, A, c, axis):
        kept = self.kept[c]
        return A if kept is None else self.xp.take(A, kept, axis=axis)

    def _test_columns(self, fold, c, x_shift, x_offset):
        """A fold's test rows of candidate ``c``'s kept columns, centred on
        the training means: one copy of them (the gathered columns are
        centred in place)."""
        xp = self.xp
        rows = _test_rows(self.X, fold.test, xp)
        if self.kept[c] is None:
            return _centred(rows, x_shift, x_offset, xp)
        rows = self._columns(rows, c, 1)
        for part in (x_shift, x_offset):
            if isinstance(part, float):
                continue
            part = self._columns(part, c, 0)
            library = _linalg._out_namespace(rows)
            if library is None:
                rows = rows - part
            else:
                library.subtract(rows, part, out=rows)
        return rows

    def basis(self, covariance, c):
        """``(eigenvalues, W, W_work)`` of candidate ``c``'s rescaled
        ``covariance``: ``W = D V`` for ``D C D = V diag(eigenvalues) V'``,
        in the compute dtype and (``W_work``) the work dtype."""
        xp = self.xp
        scale = self.scales[c]
        C = self._columns(self._columns(covariance, c, 0), c, 1)
        C = C * scale[:, None] * scale[None, :]
        eigenvalues, V = _linalg.covariance_eigh(C, overwrite=True, xp=xp)
        del C
        W_work = V * scale[:, None]
        del V
        dtype = self.X.dtype
        return (
            xp.astype(eigenvalues, dtype, copy=False),
            xp.astype(W_work, dtype, copy=False),
            W_work,
        )

    def candidate_scores(self, c, Y, prepared):
        """Scores (n_alphas, m) of candidate ``c`` for a batch ``Y``,
        averaged over folds as :class:`~skbatch._ridge.cv.KFold` averages
        them."""
        xp = self.xp
        y_shift, folds, _ = prepared
        result = 0.0
        for fold, (y_sums, centred) in zip(self.folds, folds):
            eigenvalues, W, W_work = self.basis(fold.covariance, c)
            WtXtY = xp.astype(
                xp.permute_dims(W_work, (1, 0)) @ self._columns(centred, c, 0),
                self.X.dtype,
            )
            del W_work
            x_means, y_means = self._offsets(fold.weight, fold.sums, y_sums, y_shift)
            X_test = self._test_columns(fold, c, *x_means)
            y_true = _centred(_test_rows(Y, fold.test, xp), *y_means, xp)
            result = result + _linalg.covariance_holdout_scores(
                X_test,
                W,
                eigenvalues,
                WtXtY,
                y_true,
                self.alphas,
                scoring=self.scoring or "r2",
                sample_weight=fold.test_weight,
                y_dtype=Y.dtype,
                xp=xp,
            )
        return result / len(self.folds)

    def refit(self, c, prepared, alpha, picked=None):
        """Coefficients (m, kept columns) on X's columns and intercepts (m,)
        of candidate ``c`` on all rows, for the targets ``picked`` (device
        indices into the batch, None: all) at ``alpha`` (m,)."""
        xp = self.xp
        y_shift, _, (y_sums, centred) = prepared
        if picked is not None:
            y_shift = xp.take(y_shift, picked, axis=0)
            y_sums = xp.take(y_sums, picked, axis=0)
            centred = xp.take(centred, picked, axis=1)
        eigenvalues, W, W_work = self.basis(self.covariance, c)
        WtXtY = xp.astype(
            xp.permute_dims(W_work, (1, 0)) @ self._columns(centred, c, 0),
            self.X.dtype,
        )
        del W_work
        coef = _linalg.covariance_coef(W, eigenvalues, WtXtY, alpha, xp=xp)
        (x_shift, x_offset), (y_shift, y_offset) = self._offsets(
            self.weight, self.sums, y_sums, y_shift
        )
        x_means = x_shift + x_offset
        intercept = (y_shift + y_offset) - self._columns(x_means, c, 0) @ coef
        return xp.permute_dims(coef, (1, 0)), intercept
