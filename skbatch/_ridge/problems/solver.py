"""One decomposition of a design and its CV scheme: :class:`RidgeSolver`,
and the checks that it and the results fit the memory budget."""

import functools
import math

import numpy as np

from ..._backends.side_by_side import cpu_workers
from ..._engine import Portable
from ..._kernels import linalg as _linalg
from ...memory import GB, memory_budget

# n x rank float64 temporaries of svd_decompose's check of graded columns
# (X V, and U s that receives their difference).
GRADED_CHECK_TEMPORARIES = 2
# LAPACK's block size for the SVD's bidiagonal reduction (ilaenv for dgebrd:
# 32 in reference LAPACK and OpenBLAS), by which gesdd's optimal workspace
# grows per row and column of the matrix (RidgeSolver.svd_workspace).
LAPACK_BLOCK_SIZE = 32
# Temporaries of the ridge CV kernels beyond the arrays counted per target
# (copies made by casts, centring, broadcasting). With it, numpy peaks at
# 0.23-0.73 of the planned bytes per item (benchmarks/bench_memory.py,
# benchmarks/RESULTS.md "Memory model"): the rest is room for the GPU
# libraries' allocators, which that benchmark cannot see.
CV_WORKSPACE_OVERHEAD = 2.0


class RidgeSolver(Portable):
    """A design matrix decomposed once for a CV scheme, taking device targets.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Host design matrix.
    sample_weight : ndarray of shape (n_samples,) or None
    alphas : ndarray of shape (n_alphas,)
    scheme : skbatch._ridge.cv.CVScheme
        Split already (:meth:`~skbatch._ridge.cv.CVScheme.split`).
    backend : Backend
    dtype : numpy dtype
    fit_intercept : bool
    scoring : str or None
    basis : object, default=None
        Decompositions of ``X`` from a factorisation shared with other
        designs (:class:`skbatch._ridge.banded.CandidateBasis`): its
        ``full()`` and ``folds`` replace the SVDs of X, and ``coords`` maps
        the shared ``Q'Y`` to ``U'Y``. ``X`` is then read for its shape only.
    """

    def __init__(
        self,
        X,
        sample_weight,
        alphas,
        scheme,
        backend,
        dtype,
        *,
        fit_intercept,
        scoring,
        basis=None,
    ):
        xp = backend.xp
        self.backend, self.dtype, self.xp = backend, dtype, xp
        self.alphas, self.scheme = alphas, scheme
        self.fit_intercept, self.scoring = fit_intercept, scoring
        self.n_samples, self.n_features = X.shape
        sample_weight, n_effective = scheme.weights(sample_weight)
        # Rows that count in the GCV criterion: those of non-zero weight.
        self.n_effective = self.n_samples if n_effective is None else n_effective
        weight = (
            None if sample_weight is None else backend.asarray(sample_weight, dtype)
        )
        self.sample_weight = weight
        self.coords = self._Q = None
        # The SVDs' resolution of graded columns is judged against the
        # smallest alpha solved (skbatch._kernels.linalg.svd_decompose).
        alpha = float(np.min(alphas))
        if basis is not None:
            folds = basis.folds
            if folds is not None:
                folds = [functools.partial(fold, alpha=alpha) for fold in folds]
            full_result, self.state = scheme.decompose(
                X,
                weight,
                backend,
                fit_intercept=fit_intercept,
                full=functools.partial(basis.full, alpha=alpha),
                folds=folds,
            )
            self.X_offset, self.U, self.s, self.Vt = full_result
            self.coords, self._Q = basis.coords, basis.factors.Q
            return
        X = backend.asarray(X, dtype)

        def full():
            X_centered, X_offset = _linalg.center(
                X, weight, fit_intercept=fit_intercept, xp=xp
            )
            return X_offset, *_linalg.svd_decompose(X_centered, alpha=alpha, xp=xp)

        full_result, self.state = scheme.decompose(
            X, weight, backend, fit_intercept=fit_intercept, full=full, alpha=alpha
        )
        self.X_offset, self.U, self.s, self.Vt = full_result

    @staticmethod
    def nbytes(n_samples, n_features, scheme, itemsize, *, backend=None):
        """Device bytes at the solver's peak, from the shapes, before decomposing
        (:meth:`nbytes_side_by_side` of one design)."""
        return RidgeSolver.nbytes_side_by_side(
            n_samples, [n_features], scheme, itemsize, backend=backend
        )

    @staticmethod
    def held_nbytes(n_samples, n_features, scheme, itemsize):
        """Device bytes one solver holds once decomposed, from the shapes: its
        X and centred copy (2np), its thin SVD (nr + rp) with the rank r at
        its bound min(n, p) and the scheme's own decompositions."""
        rank = min(n_samples, n_features)
        count = 2 * n_samples * n_features + (n_samples + n_features) * rank
        return itemsize * count + scheme.nbytes(n_features, itemsize)

    @staticmethod
    def nbytes_side_by_side(n_samples, widths, scheme, itemsize, *, backend=None):
        """Device bytes at the peak of solvers of designs of ``widths`` columns
        built side by side
        (:func:`skbatch._backends.side_by_side.map_threads`), from the
        shapes, before decomposing.

        Each holds its X and centred copy (2np), its thin SVD (nr + rp) with
        the rank r at its bound min(n, p) and the scheme's own decompositions.
        While they decompose, the working set of the SVDs running at once
        (:meth:`svd_workspace`, and for a fold its copies of the training and
        test rows and the centred training rows, at most 2np): one per
        solver, or for a single solver its SVDs of all rows and of each fold,
        as many as the backend runs side by side. ``backend`` None counts as
        the CPU with every SVD at once: the larger figure.
        """
        held = sum(
            RidgeSolver.held_nbytes(n_samples, p, scheme, itemsize) for p in widths
        )
        n_svds = len(widths)
        if n_svds == 1:
            n_svds += len(getattr(scheme, "splits", None) or ())
        if backend is not None:
            n_svds = min(n_svds, cpu_workers(backend))
        folds = bool(getattr(scheme, "splits", None))
        workspace = max(
            RidgeSolver.svd_workspace(n_samples, p, itemsize, backend=backend)
            + folds * itemsize * 2 * n_samples * p
            for p in widths
        )
        return held + n_svds * workspace

    @staticmethod
    def svd_workspace(n_samples, n_features, itemsize, *, backend=None):
        """Transient bytes of one SVD of an n x p matrix on the CPU beyond its
        input and U, s, Vt in the working dtype (0 on a GPU, whose library
        allocator the budget's overhead covers).

        The larger of its two stages: LAPACK's ``gesdd`` (the Fortran-ordered
        copy it overwrites, its workspace and a column-permuted copy for
        graded columns) and the graded columns' check (copies of the
        directions kept or ``GRADED_CHECK_TEMPORARIES`` n x r residuals).
        float32 is decomposed in float64
        (:func:`skbatch._kernels.linalg.svd_decompose`):
        add the float64 copy of X, and U and Vt in float64, to both.
        ``backend`` None counts as the CPU.
        """
        if backend is not None and backend.is_gpu:
            return 0
        n, p = n_samples, n_features
        rank = min(n, p)
        factors = (n + p) * rank
        # gesdd's optimal workspace for thin U and Vt (LAPACK's dgesdd: at most
        # 4r^2 + 7r, or a block per row and column), and 8r int32 (4r doubles).
        workspace = 4 * rank**2 + 11 * rank + LAPACK_BLOCK_SIZE * (n + p)
        residuals = GRADED_CHECK_TEMPORARIES * n * rank
        gesdd = 8 * (n * p + workspace) + itemsize * n * p
        check = 8 * max(factors, residuals)
        if itemsize == np.dtype(np.float32).itemsize:
            widened = 8 * (n * p + factors)
            gesdd, check = gesdd + widened, check + widened
        return max(gesdd, check)

    @property
    def fixed_bytes(self):
        """Device bytes held once decomposed: X and its centred copy (none on
        a shared basis) and :meth:`held_arrays`."""
        design = 0 if self.coords is not None else 2 * self.n_samples * self.n_features
        count = design + sum(math.prod(a.shape) for a in self.held_arrays())
        return np.dtype(self.dtype).itemsize * count

    def held_arrays(self):
        """The decompositions the solver holds: U (unless a shared basis left
        it out), Vt, the coordinates of U in a shared basis, and each fold's
        basis (its coordinates on shared factors) and test rows in it."""
        arrays = [a for a in (self.U, self.Vt, self.coords) if a is not None]
        for fold in self.state or ():
            arrays += [fold.coords if fold.U is None else fold.U, fold.X_test_V]
        return arrays

    def values_per_target(self):
        """Device values of one target in a batch: its column, centred copy,
        projection, LOO residuals and scores of every alpha."""
        n, rank = self.n_samples, self.s.shape[0]
        return 4 * n + rank + self.n_features + 2 * self.alphas.size

    def factored_U(self):
        """``(B, coords)``: U itself and None, or, on a shared basis that left
        U out (a scheme that does not read it whole), the shared Q and U's
        coordinates in it: U is ``Q @ coords``."""
        if self.U is not None:
            return self.U, None
        return self._Q, self.coords

    def center(self, Y):
        """Device targets ``Y`` (n_samples, m) centred (and weight-scaled) as X
        was, and their offsets."""
        return _linalg.center(
            Y, self.sample_weight, fit_intercept=self.fit_intercept, xp=self.xp
        )

    def project(self, Y):
        """Centre device targets ``Y`` (n_samples, m) and project them on U.

        Returns
        -------
        Y_centered, Y_offset, UtY : arrays
            Centred (and weight-scaled) targets, their offsets, and their
            coordinates in the basis.
        """
        Y_centered, Y_offset = self.center(Y)
        return Y_centered, Y_offset, _linalg.project(self.U, Y_centered, xp=self.xp)

    def scores(self, Y, Y_centered, Y_offset, UtY, shared=None):
        """Scores (n_alphas, m) of one batch of targets, by the CV scheme.

        ``shared``: the scheme's projections of the batch on a shared
        factorisation (:meth:`skbatch._ridge.banded.SharedFactors.project`).
        """
        return self.scheme.scores(
            self, self.state, Y, Y_centered, Y_offset, UtY, shared=shared
        )

    def choose_alpha(self, Y, Y_centered, Y_offset, UtY, *, columns_per_choice=1):
        """Alpha chosen by the CV criterion for every column of ``Y``.

        Parameters
        ----------
        Y, Y_centered, Y_offset, UtY : arrays
            Targets as given to :meth:`project` and what it returned.
        columns_per_choice : int, default=1
            Consecutive columns that share one alpha, chosen on their mean
            score (``alpha_per_target=False`` for a block of targets).

        Returns
        -------
        alpha : array of shape (m,), or (1,) with a single alpha
            The single alpha broadcasts: one filter for every column of
            :meth:`predict`, not one per column.
        """
        xp = self.xp
        alphas = self.backend.asarray(self.alphas, self.dtype)
        if self.alphas.size == 1:
            return alphas
        scores = self.scores(Y, Y_centered, Y_offset, UtY)
        if columns_per_choice > 1:
            scores = xp.mean(
                xp.reshape(scores, (self.alphas.size, -1, columns_per_choice)),
                axis=2,
            )
        best, _ = _linalg.select_alpha(scores, xp=xp)
        if columns_per_choice > 1:
            best = xp.reshape(
                xp.broadcast_to(best[:, None], (best.shape[0], columns_per_choice)),
                (-1,),
            )
        return xp.take(alphas, best, axis=0)

    def rows_in_basis(self, X_new):
        """New rows (device, n_new x n_features), centred, times V."""
        return (X_new - self.X_offset) @ self.Vt.T

    def predict(self, X_new_V, UtY, Y_offset, alpha):
        """Predictions for rows given by :meth:`rows_in_basis`.

        The coefficients in the basis of V, ``diag(s / (s^2 + alpha)) U'Y``,
        are mapped by ``X_new V`` instead of ``V``: :func:`_linalg.ridge_coef`
        with ``X_new_V.T`` in place of ``Vt``, one product, no coefficients
        over the features.
        """
        return _linalg.ridge_coef(X_new_V.T, self.s, UtY, alpha, xp=self.xp) + Y_offset

    def refit(self, UtY, Y_offset, alpha):
        """Coefficients (m, n_features) and intercepts (m,) at ``alpha``."""
        coef = _linalg.ridge_coef(self.Vt, self.s, UtY, alpha, xp=self.xp)
        return coef.T, Y_offset - self.X_offset @ coef

    def select_and_fit(self, Y):
        """Scores of every alpha, the best per target, its coefficients."""
        xp = self.xp
        Y_centered, Y_offset, UtY = self.project(Y)
        scores = self.scores(Y, Y_centered, Y_offset, UtY)
        best, best_score = _linalg.select_alpha(scores, xp=xp)
        alpha = xp.take(self.backend.asarray(self.alphas, self.dtype), best)
        return (*self.refit(UtY, Y_offset, alpha), best, best_score, scores.T)

    def fit_fixed(self, Y, alpha):
        """Coefficients at one alpha for all targets of ``Y``."""
        _, Y_offset, UtY = self.project(Y)
        return self.refit(UtY, Y_offset, alpha)


def results_bytes(n_targets, n_features, n_alphas):
    """Host bytes of the results of every target, held for the whole fit:
    coefficients, intercept, best alpha and its score, the score of every
    alpha, at most in float64."""
    return 8 * n_targets * (n_features + 3 + n_alphas)


def check_solver_memory(
    n_samples,
    n_features,
    scheme,
    dtype,
    backend,
    max_memory_gb,
    n_targets=0,
    n_alphas=0,
    solver=None,
):
    """Refuse, before any SVD runs, a fit whose held memory exceeds the budget.

    What is held whatever the target batch: X and its decompositions on the
    device (those of ``solver``, the class of the solver to build:
    :class:`RidgeSolver` if None), and the results of all ``n_targets`` on
    the host (:func:`check_held_memory`).
    """
    needed = (solver or RidgeSolver).nbytes(
        n_samples, n_features, scheme, np.dtype(dtype).itemsize, backend=backend
    )
    results = results_bytes(n_targets, n_features, n_alphas)
    fix = (
        "raise max_memory_gb (or free memory), or reduce n_samples, n_features "
        "or the number of folds"
    )
    held = "X"
    if results and not backend.is_gpu:
        held = f"the results of {n_targets:,} targets and X"
        fix += ", or fit the targets in parts"
    check_held_memory(
        "BatchedRidge",
        needed,
        results,
        backend,
        max_memory_gb,
        held=f"{held} ({n_samples} x {n_features}) and its decompositions",
        results=f"the results of {n_targets} targets",
        fix=fix,
        host_fix="raise max_memory_gb (or free memory), or fit the targets in parts",
    )


def check_held_memory(
    name,
    device_bytes,
    host_bytes,
    backend,
    max_memory_gb,
    *,
    held,
    results,
    fix,
    host_fix=None,
):
    """Refuse a fit whose memory held for its whole length exceeds the budget.

    ``device_bytes`` (decompositions) are held on the device, ``host_bytes``
    (the results of every target) on the host; a device computing in host
    memory holds both in one budget. Against the full budget: the 8 GB cap
    of ``memory_budget(for_batching=True)`` bounds one target batch, not the
    data (see skbatch.memory.memory_budget).

    Parameters
    ----------
    name : str
        The estimator, for the message.
    held, results : str
        What the device and the host bytes are, for the message.
    fix, host_fix : str
        What the user can do; ``host_fix`` (default ``fix``) when the host
        budget of a GPU fit is the one exceeded.

    Raises
    ------
    ValueError
        Naming the bytes needed, the budget and the fix.
    """
    if backend.is_gpu:
        host_gb = memory_budget(None, max_memory_gb)
        if host_bytes > host_gb * GB:
            raise ValueError(
                f"{name} needs {host_bytes / GB:.3g} GB of host memory for "
                f"{results}, but the host budget is {host_gb:.3g} GB; "
                f"{host_fix or fix}"
            )
    else:
        device_bytes += host_bytes
    budget_gb = memory_budget(backend, max_memory_gb)
    if device_bytes > budget_gb * GB:
        raise ValueError(
            f"{name} needs {device_bytes / GB:.3g} GB on {backend.name} for "
            f"{held} before any target is fit, but the memory budget is "
            f"{budget_gb:.3g} GB; {fix}"
        )
