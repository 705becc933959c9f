"""Ridge problems: data decomposed once, computing on batches of item ids.

A problem object is what the engine (:func:`skbatch._engine.run_problem`)
runs. It states its memory, so that no estimator does memory arithmetic:

- ``n_items``, ``backend``, ``desc``: what is batched, where, and its name;
- ``fixed_bytes``: device bytes held whatever the batch (data and
  decompositions);
- ``device_bytes_per_item`` and ``host_bytes_per_item``: the working set of
  one item on the device, and its result on the host until reduced;
- ``max_batch_size``: the batch past which the kernel is no faster;
- ``threads``: whether batches may run side by side on the BLAS threads;

and computes on item ids: ``problem(ids)`` returns device arrays whose axis 0
runs over ``ids``, drawing what item i needs (permutation, bootstrap counts)
from item i's seed stream alone.

- :class:`TargetProblem`: the targets of ``BatchedRidge``, through a
  :class:`RidgeSolver` (one SVD, or one per fold, and a CV scheme);
- :class:`PermutedRidgeProblem`: the permutations of ``PermutationScorer``'s
  ridge fast path, as extra targets through one solver per outer fold;
- :class:`BootstrapRidgeProblem`: the replicates of ``BootstrapEstimator``'s
  linear path, as row weights of one batched weighted solve.

The memory multipliers below are checked by ``benchmarks/bench_memory.py``
(measured peaks over planned bytes, ``benchmarks/RESULTS.md``) and by the
peak-memory tests of ``tests/test_bootstrap.py``.
"""

import copy
import dataclasses
import functools
import math

import numpy as np
from array_api_compat import device as array_device

from .. import _backends
from .._backends.side_by_side import cpu_workers
from .._engine import Portable, plan_batches, run_problem
from .._engine.targets import TargetColumns
from .._kernels import linalg as _linalg
from .._resampling.sign_flip import split_signed_rows
from .._resampling.signed import signed_rows
from ..memory import GB, memory_budget
from ..random import bootstrap_counts

__all__ = [
    "BootstrapRidgeProblem",
    "PermutedRidgeProblem",
    "RidgeSolver",
    "TargetProblem",
    "fit_targets",
    "mean_over_scored_targets",
]

# A GEMM over this many targets already runs at the BLAS peak; larger target
# batches only add page faults and cache misses (chunked targets were faster
# and used half the memory). torch's CPU GEMM peaks at smaller batches: its
# K-fold fit took 6.2 s at 512 targets, 6.8 s at 2048.
MAX_TARGETS_PER_BATCH = 2048
MAX_TARGETS_PER_BATCH_TORCH_CPU = 512
# Temporaries of the ridge CV kernels beyond the arrays counted per target
# (copies made by casts, centring, broadcasting). With it, numpy peaks at
# 0.23-0.73 of the planned bytes per item (benchmarks/bench_memory.py,
# benchmarks/RESULTS.md "Memory model"): the rest is room for the GPU
# libraries' allocators, which that benchmark cannot see.
CV_WORKSPACE_OVERHEAD = 2.0
# Float64 values per target and permutation that
# skbatch.streaming.PermutationCounter.update makes beside the batch's scores:
# the family's copy (8 bytes), its NaN-filled copy for the extreme (8) and
# the NaN flags (1), 17 bytes. tracemalloc measures 2.125 values at 8 to 100
# permutations of 20,000 and 100,000 targets, every alternative, with or
# without an undefined observed score (tests/test_preflight_batch_temporaries.py).
COUNTER_UPDATE_VALUES = 2.125
# Temporaries of the bootstrap kernel beyond the arrays counted per replicate
# (copies made by broadcasting, transposes and LAPACK's Fortran-order
# inputs). With it, numpy peaks at 0.29-0.39 of the planned bytes per
# replicate (same benchmark).
BOOTSTRAP_WORKSPACE_OVERHEAD = 1.5
# Largest working set of one bootstrap batch. The batch GEMM runs at the BLAS
# rate long before this (n=1000, p=100, 1000 targets: 28 replicates; the
# kernel alone reaches 66-70% of the one-thread GEMM rate from 4 to 28, and
# smaller caps did not change the whole fit, benchmarks/RESULTS.md); bigger
# batches only add page faults for their temporaries.
MAX_BOOTSTRAP_BATCH_BYTES = 256e6
# Least work (flops of all replicates) for which the bootstrap runs batches
# side by side on the BLAS threads: below it, starting the threads costs more
# than the second core gives (2 or 100 replicates of 40 rows, 1e6 flops at
# most: 3.0 ms in turn against 3.6 ms side by side); from 5e7 (10,000
# replicates of 40 rows, 100,000 of 16) both are as fast at best and side by
# side faster in median.
SIDE_BY_SIDE_MIN_FLOPS = 1e7
# LAPACK's block size for the SVD's bidiagonal reduction (ilaenv for dgebrd:
# 32 in reference LAPACK and OpenBLAS), by which gesdd's optimal workspace
# grows per row and column of the matrix (RidgeSolver.svd_workspace).
LAPACK_BLOCK_SIZE = 32
# n x rank float64 temporaries of svd_decompose's check of graded columns
# (X V, and U s that receives their difference).
GRADED_CHECK_TEMPORARIES = 2


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


class TargetProblem:
    """The targets of a fit: alpha chosen and coefficients fit per target.

    ``problem(ids)`` gives coefficients, intercepts, the best alpha's index,
    its score and the scores of every alpha of targets ``ids``; with a fixed
    ``alpha``, only coefficients and intercepts. ``Y`` is a host ndarray or
    a :class:`~skbatch._engine.targets.TargetColumns` (targets read from disk one
    batch at a time, whose ``chunk_width`` batches follow).
    """

    desc = "targets"
    # The kernels are pure functions of their batch.
    threads = True

    def __init__(self, solver, Y, alpha=None):
        if not isinstance(Y, TargetColumns):
            Y = TargetColumns(Y)
        self.solver, self.Y, self.alpha = solver, Y, alpha
        self.backend = solver.backend
        self.n_items = Y.shape[1]
        self.out_of_core, self.chunk_width = Y.out_of_core, Y.chunk_width
        p = solver.n_features
        n_alphas = solver.alphas.size
        itemsize = np.dtype(solver.dtype).itemsize
        self.fixed_bytes = solver.fixed_bytes
        if not self.backend.is_gpu:
            # The results of every target (fit_targets) share host memory.
            self.fixed_bytes += results_bytes(self.n_items, p, n_alphas)
        self.device_bytes_per_item = (
            CV_WORKSPACE_OVERHEAD * itemsize * solver.values_per_target()
        )
        # Its coefficients, intercept, best alpha and score, and all scores,
        # and its column as read from disk.
        self.host_bytes_per_item = 8 * (p + 3 + n_alphas) + Y.host_bytes_per_column
        backend = self.backend
        self.max_batch_size = (
            MAX_TARGETS_PER_BATCH_TORCH_CPU
            if backend.library == "torch" and not backend.is_gpu
            else MAX_TARGETS_PER_BATCH
        )

    # Id of the first column of Y: 0, or the first target of a batch that a
    # task on another process received alone (task_inputs, bind).
    first = 0

    def _to_device(self, ids):
        # The engine hands out consecutive ids: a slice is a view, where a
        # gather would copy every target once more before centring copies it.
        start, stop = int(ids[0]) - self.first, int(ids[-1]) + 1 - self.first
        block = self.Y.read(start, stop)
        if stop - start != len(ids):
            block = block[:, ids - self.first - start]
        return self.solver.backend.asarray(block, self.solver.dtype)

    def task_inputs(self, ids):
        """The columns of targets ``ids``, for a task elsewhere.

        The problem sent to a dask worker leaves the targets behind
        (``__getstate__``): each task receives the columns of its own batch
        (``skbatch._engine.run_on_cluster``), so a worker gets its share of
        ``Y`` rather than all of it. Files on this host are read here; a dask
        array's columns are computed on the cluster, next to its chunks
        (:meth:`~skbatch._engine.targets.TargetColumns.task_block`).
        """
        start, stop = int(ids[0]), int(ids[-1]) + 1
        return start, self.Y.task_block(start, stop)

    def bind(self, first, block):
        """This problem on the columns ``block`` of targets ``first`` on."""
        bound = copy.copy(self)
        bound.Y, bound.first = TargetColumns(block), first
        return bound

    def __getstate__(self):
        return {name: value for name, value in vars(self).items() if name != "Y"}

    def __call__(self, ids):
        Y = self._to_device(ids)
        if self.alpha is None:
            return self.solver.select_and_fit(Y)
        return self.solver.fit_fixed(Y, self.alpha)


def fit_targets(solver, Y, *, alpha_per_target, batch_size, max_memory_gb, verbose):
    """Choose alphas and fit all targets of ``Y`` (n_samples x t).

    ``Y`` is a host ndarray or a :class:`~skbatch._engine.targets.TargetColumns`.

    Returns
    -------
    coef, intercept, best, best_score, scores : ndarrays
        Of shapes (t, p), (t,), (t,) (indices into the alphas), (t,) and
        (t, n_alphas).
    batch_size : int
        The batch size the targets were read in (for targets read from
        disk, whole chunks of theirs).
    """
    n_targets = Y.shape[1]
    n_alphas = solver.alphas.size
    # In the compute dtype, as scikit-learn's Ridge keeps float32 input's.
    coef = np.empty((n_targets, solver.n_features), dtype=solver.dtype)
    intercept = np.empty(n_targets, dtype=solver.dtype)
    best = np.empty(n_targets, dtype=np.int64)
    best_score = np.empty(n_targets)
    scores = np.empty((n_targets, n_alphas))

    def reduce_all(ids, result):
        coef[ids], intercept[ids], best[ids], best_score[ids], scores[ids] = result

    def reduce_coef(ids, result):
        coef[ids], intercept[ids] = result

    problem = TargetProblem(solver, Y)
    run_args = dict(max_memory_gb=max_memory_gb, batch_size=batch_size, verbose=verbose)
    plan = run_problem(problem, reduce_all, **run_args)
    if not alpha_per_target and n_targets > 1:
        mean, _ = mean_over_scored_targets(scores)
        shared = int(np.argmax(np.nan_to_num(mean, nan=-np.inf)))
        alpha = float(solver.alphas[shared])
        run_problem(TargetProblem(solver, Y, alpha), reduce_coef, **run_args)
        best[:] = shared
        best_score[:] = scores[:, shared]
    return coef, intercept, best, best_score, scores, plan.batch_size


def mean_over_scored_targets(scores):
    """Mean score of each alpha over the targets that have a score.

    A target NaN at every alpha (a constant target scored by correlation)
    says nothing about which alpha is best: it is left out, rather than
    making every mean NaN and the first alpha the choice.

    Parameters
    ----------
    scores : ndarray of shape (n_targets, n_alphas)

    Returns
    -------
    mean : ndarray of shape (n_alphas,)
        NaN everywhere when no target has a score.
    scored : ndarray of bool of shape (n_targets,)
        The targets averaged.
    """
    scored = ~np.all(np.isnan(scores), axis=1)
    if not scored.any():
        return np.full(scores.shape[1], np.nan), scored
    return scores[scored].mean(axis=0), scored


def device_scores(y_true, y_pred, scoring, xp):
    """Score of every column, computed where the arrays are.

    A tuple of scorings gives each one's scores, stacked: (len(scoring), m).
    """
    if isinstance(scoring, tuple):
        return xp.stack([device_scores(y_true, y_pred, s, xp) for s in scoring])
    if scoring == "neg_mean_absolute_error":
        dtype = _linalg._criterion_dtype(y_true, xp)
        errors = xp.astype(y_true, dtype, copy=False) - xp.astype(
            y_pred, dtype, copy=False
        )
        return -xp.mean(xp.abs(errors), axis=0)
    # The scorings of _linalg.score_per_target are computed there alone, the
    # root of the mean squared error from it. Undefined scores are NaN
    # without a warning per batch: the permutation scorer reports them.
    if scoring == "neg_root_mean_squared_error":
        mse = -_linalg.score_per_target(
            y_true, y_pred, "neg_mean_squared_error", warn=False, xp=xp
        )
        return -xp.sqrt(mse)
    return _linalg.score_per_target(y_true, y_pred, scoring or "r2", warn=False, xp=xp)


# Scorings PermutedRidgeProblem computes on the device, per target. None is
# R^2: the ``score`` of every estimator the ridge fast path accepts.
DEVICE_SCORINGS = (
    None,
    "r2",
    "correlation",
    "neg_mean_squared_error",
    "neg_root_mean_squared_error",
    "neg_mean_absolute_error",
)


class PermutedRidgeProblem(Portable):
    """Outer folds decomposed once, scoring batches of permuted targets.

    A permutation k of the rows of ``Y`` (n x t) becomes t target columns
    ``k * t + j``; a batch of permutations is one :class:`RidgeSolver` call
    per fold over all their columns: projection, alpha choice by the inner
    CV of the estimator, prediction of the test rows and their score.
    ``problem(ids)`` gives the scores (len(ids), t) of permutations ``ids``,
    drawn from their own seed streams
    (:func:`skbatch._resampling.signed.signed_rows`: row permutations, or
    sign flips of the rows).

    Parameters
    ----------
    X, Y : ndarrays of shape (n_samples, n_features) and (n_samples, t)
    splits : list of (train, test)
        Outer folds.
    spec : RidgeSpec
        The estimator's problem; its ``cv`` decides the inner scheme.
    inner_scheme : callable
        ``inner_scheme(X_train, Y_train, train)``: a split CV scheme for the
        fold of training rows ``train`` (whose groups it may split by).
    backend, dtype, scoring :
        Where, in what, and how the folds are scored; a tuple of scorings
        scores each on the same predictions, ``problem(ids)`` then giving
        (len(ids), len(scoring) * t), metric k in columns ``k * t ...``.
    n_permutations : int
    permutation : dict
        ``entropy``, ``groups``, ``permutation_type`` (a permutation
        scheme or "sign_flip"), ``block_size`` and optionally ``exact`` of
        :func:`skbatch._resampling.signed.signed_rows`.
    """

    desc = "permutations"
    threads = True
    # Held-out rows of (permutations x targets) columns per device batch:
    # one GEMM per fold, at the BLAS peak at the target batch's width.
    max_columns = MAX_TARGETS_PER_BATCH

    def __init__(
        self,
        X,
        Y,
        splits,
        spec,
        inner_scheme,
        backend,
        dtype,
        scoring,
        *,
        n_permutations,
        permutation,
    ):
        self._hold_targets(X, Y, backend, dtype, scoring, n_permutations, permutation)
        self.n_scorings = len(scoring) if isinstance(scoring, tuple) else 1
        many = not spec.alpha_per_target and self.n_targets > 1
        self.columns_per_choice = self.n_targets if many else 1
        # Ridge(alpha=array): target j keeps its alpha in every permutation,
        # none is chosen; the solvers then hold one alpha, unused.
        self.fixed_alpha = None
        if spec.fixed_per_target:
            per_target = np.broadcast_to(spec.alphas, (self.n_targets,))
            self.fixed_alpha = backend.asarray(np.ascontiguousarray(per_target), dtype)
            spec = dataclasses.replace(spec, alphas=spec.alphas[:1])
        self.folds = []
        for train, test in splits:
            X_train = X[train]
            solver = RidgeSolver(
                X_train,
                None,
                spec.alphas,
                inner_scheme(X_train, Y[train], train),
                backend,
                dtype,
                fit_intercept=spec.fit_intercept,
                scoring=spec.scoring,
            )
            X_test_V = solver.rows_in_basis(backend.asarray(X[test], dtype))
            self.folds.append(
                (backend.asarray(train), backend.asarray(test), solver, X_test_V)
            )
        rank = max(solver.s.shape[0] for _, _, solver, _ in self.folds)
        self._plan_items(rank, spec.alphas.size)
        # Each further scoring: t more scores per permutation on the host.
        self.host_bytes_per_item += 8 * (self.n_scorings - 1) * self.n_targets

    def _hold_targets(self, X, Y, backend, dtype, scoring, n_permutations, permutation):
        """What every permutation problem holds before its folds: where and
        in what it runs, its sizes, the permutations' draws and the targets
        on the device."""
        self.backend, self.dtype, self.xp = backend, dtype, backend.xp
        self.scoring = scoring
        self.n_samples = X.shape[0]
        self.n_targets = Y.shape[1]
        self.n_items = n_permutations
        self.permutation = permutation
        self.Y = backend.asarray(Y, dtype)

    def _plan_items(self, rank, n_alphas):
        """The engine's sizes, once the folds are held: the fixed device
        bytes, the bytes of one permutation (:meth:`item_bytes`, with
        decompositions of rank at most ``rank``) and the widest batch."""
        self.fixed_bytes = self._fixed_bytes()
        self.device_bytes_per_item, self.host_bytes_per_item = self.item_bytes(
            self.n_samples, self.n_targets, rank, n_alphas, self.dtype
        )
        self.max_batch_size = max(1, self.max_columns // self.n_targets)

    @staticmethod
    def item_bytes(n_samples, n_targets, rank, n_alphas, dtype):
        """Device and host bytes of one permutation.

        On the device, the gathered train and test targets, their centred
        copy, LOO residual and errors, predictions (a few n x t blocks) and
        the indices; on the host, the indices drawn, the scores, and the
        temporaries of the counter's update of them
        (``COUNTER_UPDATE_VALUES`` per target, and a float64 copy of
        scores in another dtype).
        """
        itemsize = np.dtype(dtype).itemsize
        per_column = 6 * n_samples + rank + 2 * n_alphas
        device = CV_WORKSPACE_OVERHEAD * itemsize * n_targets * per_column
        counter = COUNTER_UPDATE_VALUES + (itemsize != 8)
        host = 8 * n_samples + 8 * n_targets * (1 + counter)
        return device + 16 * n_samples, host

    @classmethod
    def check_memory(
        cls,
        X,
        Y,
        splits,
        spec,
        schemes,
        backend,
        dtype,
        *,
        n_permutations,
        max_memory_gb,
    ):
        """Refuse, before any SVD, permutations whose data cannot fit the budget.

        What :meth:`_fixed_bytes` will hold, with every rank at its bound:
        the targets, and per fold the thin SVD of its training rows, the
        bases of its inner ``scheme`` and its test rows in the basis; then
        the engine's plan of ``n_permutations`` against the budget
        (:func:`skbatch._engine.plan_batches`), which raises.
        """
        n_samples, n_features = X.shape
        itemsize = np.dtype(dtype).itemsize
        held, per_target = cls.held_bytes(X, splits, spec, schemes, itemsize)
        n_alphas = 1 if spec.fixed_per_target else spec.alphas.size
        device, host = cls.item_bytes(
            n_samples, Y.shape[1], min(n_samples, n_features), n_alphas, dtype
        )
        plan_batches(
            n_permutations,
            backend=backend,
            device_bytes_per_item=device
            + CV_WORKSPACE_OVERHEAD * itemsize * Y.shape[1] * per_target,
            host_bytes_per_item=host,
            fixed_bytes=itemsize * Y.size + held,
            max_memory_gb=max_memory_gb,
        )

    @classmethod
    def held_bytes(cls, X, splits, spec, schemes, itemsize):
        """``(bytes, values)``: the device bytes of every outer fold's
        decompositions, from the shapes, every rank at its bound (the thin
        SVD of its training rows, the bases of its inner ``scheme`` and its
        test rows in the basis), and the device values per target and
        permutation held beyond :meth:`item_bytes` (none here)."""
        held = sum(
            cls.solver_bytes(len(train), len(test), X.shape[1], scheme, itemsize)
            for (train, test), scheme in zip(splits, schemes)
        )
        return held, 0

    @staticmethod
    def solver_bytes(n_train, n_test, n_features, scheme, itemsize):
        """Device bytes of one outer fold's solver of ``n_features`` columns,
        its rank at its bound: the thin SVD of the training rows, the bases
        of its inner ``scheme`` and its test rows in the basis."""
        rank = min(n_train, n_features)
        return itemsize * (n_train + n_features + n_test) * rank + scheme.nbytes(
            n_features, itemsize
        )

    def _held_solvers(self):
        """``(solver, test rows in its basis)`` of every outer fold."""
        for _, _, solver, X_test_V in self.folds:
            yield solver, X_test_V

    def _fixed_bytes(self):
        """Device bytes held whatever the batch: targets and decompositions."""
        arrays = [self.Y]
        for solver, X_test_V in self._held_solvers():
            arrays += [*solver.held_arrays(), X_test_V]
        itemsize = np.dtype(self.dtype).itemsize
        return itemsize * sum(math.prod(a.shape) for a in arrays)

    def observed(self):
        """Per-target score (t,) of the unpermuted rows, on the device."""
        return self.scores(np.arange(self.n_samples)[None, :])[0]

    def __call__(self, ids):
        return self.scores(
            signed_rows(
                self.permutation["entropy"],
                ids,
                self.n_samples,
                self.permutation["groups"],
                permutation_type=self.permutation["permutation_type"],
                block_size=self.permutation["block_size"],
                exact=self.permutation.get("exact", False),
            )
        )

    def scores(self, indices):
        """Per-target score, averaged over folds, of each row permutation.

        Parameters
        ----------
        indices : ndarray of shape (b, n_samples)
            Row permutations (host); ``Y[indices[k]]`` is permuted target k.

        Returns
        -------
        scores : device array of shape (b, n_targets)
        """
        xp = self.xp
        permuted = self._permute(indices)
        total = 0.0
        for train, test, solver, X_test_V in self.folds:
            Y_train = xp.take(permuted, train, axis=0)
            Y_centered, Y_offset, UtY = solver.project(Y_train)
            if self.fixed_alpha is not None:
                # Column k * t + j is target j of permutation k.
                alpha = xp.reshape(
                    xp.broadcast_to(
                        self.fixed_alpha[None, :], (indices.shape[0], self.n_targets)
                    ),
                    (-1,),
                )
            else:
                alpha = solver.choose_alpha(
                    Y_train,
                    Y_centered,
                    Y_offset,
                    UtY,
                    columns_per_choice=self.columns_per_choice,
                )
            predictions = solver.predict(X_test_V, UtY, Y_offset, alpha)
            Y_test = xp.take(permuted, test, axis=0)
            total = total + device_scores(Y_test, predictions, self.scoring, xp)
        if self.n_scorings > 1:
            # (scorings, permutations x targets) -> (permutations, scorings x targets)
            total = xp.reshape(
                total, (self.n_scorings, indices.shape[0], self.n_targets)
            )
            total = xp.permute_dims(total, (1, 0, 2))
            return xp.reshape(
                total / len(self.folds),
                (indices.shape[0], self.n_scorings * self.n_targets),
            )
        return xp.reshape(total / len(self.folds), (indices.shape[0], self.n_targets))

    def _permute(self, indices):
        """``Y[indices[k]]`` for every k, as columns ``k * t + j``: (n, b * t).

        ``indices`` (b, n) are host signed row codes
        (:func:`skbatch._resampling.signed.signed_rows`: ``r`` for
        ``+Y[r]``, ``~r`` for ``-Y[r]``), moved to the device here, where
        every permutation problem gathers its targets. Gathered once per
        batch; each fold then copies whole rows of it. Sign flips multiply
        the gathered rows once, before any fold's work is allocated.
        """
        xp = self.xp
        indices, signs = split_signed_rows(indices)
        n_items, n_samples = indices.shape
        indices = self.backend.asarray(indices)
        rows = xp.reshape(xp.permute_dims(indices, (1, 0)), (-1,))
        gathered = xp.take(self.Y, rows, axis=0)
        if signs is not None:
            signs = self.backend.asarray(np.ascontiguousarray(signs.T), self.dtype)
            gathered = xp.reshape(gathered, (n_samples, n_items, -1))
            gathered = gathered * signs[:, :, None]
        return xp.reshape(gathered, (n_samples, -1))


def fit_flops(n_samples, n_features, n_targets, n_alphas, scheme, n_candidates=1):
    """Floating-point work of a ridge fit, for ``device="auto"``.

    The thin SVD of ``n_candidates`` designs of (``n_samples``,
    ``n_features``) and their projection of every target at every alpha,
    on the full data and on each fold of the split ``scheme`` (one fit when
    it has no folds: leave-one-out, GCV).
    """
    rank = min(n_samples, n_features)
    n_fits = 1 + len(getattr(scheme, "splits", None) or ())
    return (
        2.0
        * n_fits
        * n_candidates
        * (n_samples * n_features * rank + n_samples * rank * n_targets * n_alphas)
    )


def bootstrap_flops_per_replicate(n_samples, n_features, n_targets):
    """Floating-point work of one bootstrap replicate, for ``device="auto"``."""
    rank = min(n_samples, n_features)
    return (
        2.0 * n_samples * (n_features * n_targets + rank * max(n_samples, n_features))
    )


def check_replicate_weights(ids, weights):
    """Refuse replicates whose rows all have sample_weight 0: no fit exists."""
    empty = np.flatnonzero(weights.sum(axis=1) <= 0)
    if empty.size:
        raise ValueError(
            f"Bootstrap replicate {int(ids[empty[0]])} drew only samples whose "
            f"sample_weight is 0, so its weighted fit is undefined. Give more "
            f"samples a positive sample_weight, or leave out the samples of "
            f"weight 0 before fitting."
        )


class BootstrapRidgeProblem(Portable):
    """Data on the device, solving batches of bootstrap replicates as weights.

    ``problem(ids)`` returns the coefficients, of shape (batch, n_targets,
    n_features), and intercepts, (batch, n_targets), of replicates ``ids``,
    whose bootstrap counts (:func:`skbatch.random.bootstrap_counts`) weight
    the rows.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Host design matrix, computed on in float64 unless float32.
    y : ndarray of shape (n_samples,) or (n_samples, n_targets)
    alpha : float or ndarray of shape (n_targets,)
    fit_intercept : bool
    sample_weight : ndarray of shape (n_samples,) or None
    groups, block_size, block_scheme, entropy :
        The resampling scheme of :func:`skbatch.random.bootstrap_counts`.
    backend, dtype :
    n_bootstrap : int
    max_batch_size : int or None, default=None
        Fewer replicates per batch than the kernel's own bound (the host's
        room for their results, on a GPU).
    """

    desc = "replicates"

    def __init__(
        self,
        X,
        y,
        alpha,
        *,
        fit_intercept,
        sample_weight,
        groups,
        block_size,
        entropy,
        backend,
        dtype,
        n_bootstrap,
        max_batch_size=None,
        block_scheme="moving",
    ):
        xp = backend.xp
        self.backend, self.dtype, self.xp = backend, dtype, xp
        self.fit_intercept = fit_intercept
        self.sample_weight = sample_weight
        self.groups, self.block_size, self.entropy = groups, block_size, entropy
        self.block_scheme = block_scheme
        self.n_items = n_bootstrap
        X = np.asarray(X, dtype=np.float64 if X.dtype != np.float32 else None)
        Y = np.asarray(y, dtype=dtype).reshape(X.shape[0], -1)
        self.n_samples, n_features = X.shape
        n_targets = Y.shape[1]
        flops = n_bootstrap * bootstrap_flops_per_replicate(
            self.n_samples, n_features, n_targets
        )
        self.threads = flops >= SIDE_BY_SIDE_MIN_FLOPS
        self.fixed_bytes, self.device_bytes_per_item, self.host_bytes_per_item = (
            self.nbytes(
                self.n_samples,
                n_features,
                n_targets,
                np.dtype(dtype).itemsize,
                copies_y=backend.library != "numpy" or Y.dtype != y.dtype,
                gather_buffers=self.gather_buffers(
                    backend,
                    self.n_samples,
                    n_features + bool(fit_intercept),
                    n_targets,
                    threads=self.threads,
                ),
            )
        )
        alpha = np.array(
            np.broadcast_to(np.asarray(alpha, dtype=np.float64).ravel(), (n_targets,))
        )
        largest = max(1, int(MAX_BOOTSTRAP_BATCH_BYTES // self.device_bytes_per_item))
        self.max_batch_size = (
            largest if max_batch_size is None else min(largest, max_batch_size)
        )
        self.dual = n_features > self.n_samples
        if fit_intercept:
            # Centring X on its overall mean once keeps each replicate's mean
            # small, so the algebraic centring in the kernels loses no digits.
            offset = X.mean(axis=0, dtype=np.float64)
            self.x_offset = backend.asarray(offset, dtype)
            X = X - offset
            if not self.dual:
                # A column of ones makes the weighted sums of X and Y fall out
                # of the two batch GEMMs as one more row.
                X = np.hstack([X, np.ones((self.n_samples, 1))])
        library = _backends.get(backend.library)
        if not self.dual and not _linalg.gathers_drawn_rows(
            library, backend.device, self.n_samples, X.shape[1], n_targets
        ):
            # Column-major, so that X' is contiguous for the stacked products:
            # the kernel weights X' row by row, 3x faster than through a
            # strided view for few samples, 25% for n=1000. Products over each
            # replicate's drawn rows gather whole rows instead, 2-4% faster
            # from a row-major X.
            X = np.asfortranarray(X)
        self.X = backend.asarray(X, dtype)
        del X
        self.Y = backend.asarray(Y, dtype)
        self.K0 = self.X @ self.X.T if self.dual else None
        self.scratch = _linalg.Scratch()
        self.results = _linalg.ResultPool()
        same = bool(np.all(alpha == alpha[0]))
        self.fixed_alpha = float(alpha[0]) if same and alpha[0] > 0 else None
        self.alpha = backend.asarray(alpha, dtype)

    @staticmethod
    def gather_buffers(backend, n_samples, n_columns, n_targets, threads=True):
        """Buffers of Y's drawn rows held at once, for :meth:`nbytes`.

        One per thread that runs batches
        (:func:`skbatch._backends.side_by_side.cpu_workers`
        when ``threads``, else one) where the kernel gathers drawn rows, none
        where it stacks its products (:func:`skbatch._kernels.linalg.
        gathers_drawn_rows`; ``n_columns`` counts the ones column).
        """
        library = _backends.get(backend.library)
        if not _linalg.gathers_drawn_rows(
            library, backend.device, n_samples, n_columns, n_targets
        ):
            return 0
        return cpu_workers(backend) if threads else 1

    @staticmethod
    def nbytes(n_samples, n_features, n_targets, itemsize, copies_y, gather_buffers=1):
        """``(fixed, device per replicate, host per replicate)`` bytes.

        ``gather_buffers``: see :meth:`gather_buffers`.
        """
        n, p, t = n_samples, n_features, n_targets
        # X centred (with a ones column in the primal) on the device, and the
        # centred float64 copy it is made from.
        fixed = (itemsize + 8) * n * (p + 1)
        if copies_y:
            fixed += itemsize * n * t
        if p > n:
            fixed += itemsize * n**2
            elements = 5 * n * n + 5 * n * p + 3 * n * t + 3 * p * t + 4 * n + 2 * t
        else:
            elements = 2 * p * n + 4 * p * p + 5 * p * t + 4 * n + 2 * t
            # The drawn rows of Y gathered for one replicate at a time, on the
            # CPU, into a buffer per thread (skbatch/_kernels/linalg/weighted.py,
            # _weighted_products).
            fixed += gather_buffers * min(itemsize * n * t, _linalg.MAX_GATHER_BYTES)
        device = BOOTSTRAP_WORKSPACE_OVERHEAD * itemsize * elements
        # Counts and weights of one replicate, and its result in the compute
        # dtype with what the accumulator makes of it: a float64 copy of a
        # batch neither float64 nor float32, or BCa's squared deviations
        # (skbatch/streaming/): at most two float64 copies.
        host = 8.0 * (2 * n + 2 * t * (p + 1))
        return fixed, device, host

    def weights(self, ids):
        counts = bootstrap_counts(
            self.entropy,
            ids,
            self.n_samples,
            self.groups,
            block_size=self.block_size,
            block_scheme=self.block_scheme,
        )
        weights = counts.astype(np.float64)
        if self.sample_weight is not None:
            weights *= self.sample_weight
            check_replicate_weights(ids, weights)
        return self.backend.asarray(weights, self.dtype)

    def __call__(self, ids):
        xp = self.xp
        w = self.weights(ids)
        args = (w, self.alpha, self.fixed_alpha)
        if self.dual:
            coef, x_mean, y_mean = _linalg.weighted_dual_coef(
                self.X, self.K0, self.Y, *args, fit_intercept=self.fit_intercept, xp=xp
            )
        else:
            coef, x_mean, y_mean = _linalg.weighted_primal_coef(
                self.X,
                self.Y,
                *args,
                fit_intercept=self.fit_intercept,
                xp=xp,
                scratch=self.scratch,
                results=self.results,
            )
        if self.fit_intercept:
            offset = x_mean + self.x_offset
            with _linalg.one_thread(coef):
                intercept = y_mean - (coef @ offset[:, :, None])[:, :, 0]
        else:
            shape = coef.shape[:2]
            intercept = xp.zeros(shape, dtype=coef.dtype, device=array_device(coef))
        return coef, intercept

    def recycle(self, result):
        """Take back a result once reduced: its coefficients serve again."""
        self.results.give(result[0])


class PredictionProblem:
    """Predictions of fitted coefficients, in batches of targets.

    ``problem(ids)`` gives the predictions (len(ids), n_rows) of targets
    ``ids`` for the rows of ``X``.

    ``out_of_core`` (whether the reducer writes the predictions to, or
    compares them with, an out-of-core array), ``chunk_width`` (columns per
    chunk of that array) and ``reader_bytes_per_item`` (host bytes the
    reducer holds per target beyond the predictions) describe what the
    reducer does with each batch.
    """

    desc = "predicted targets"
    threads = True
    max_batch_size = None

    def __init__(
        self,
        X,
        coef,
        intercept,
        backend,
        dtype,
        *,
        out_of_core=False,
        chunk_width=None,
        reader_bytes_per_item=0,
    ):
        self.backend, self.dtype = backend, dtype
        self.out_of_core, self.chunk_width = out_of_core, chunk_width
        self.coef, self.intercept = coef, intercept
        self.n_items = coef.shape[0]
        self.X = backend.asarray(X, dtype)
        itemsize = np.dtype(dtype).itemsize
        out_itemsize = np.result_type(X.dtype, dtype).itemsize
        self.fixed_bytes = X.nbytes
        # A target's coefficients and its predictions, on the device...
        self.device_bytes_per_item = itemsize * (X.shape[0] + X.shape[1])
        # ... and its predictions on the host.
        self.host_bytes_per_item = out_itemsize * X.shape[0] + reader_bytes_per_item

    def __call__(self, ids):
        backend, dtype = self.backend, self.dtype
        coef = backend.asarray(self.coef[ids], dtype)
        return coef @ self.X.T + backend.asarray(self.intercept[ids], dtype)[:, None]
