"""The permutations of ``PermutationScorer``'s ridge fast path, as extra
targets through one solver per outer fold (:class:`PermutedRidgeProblem`)."""

import dataclasses
import math

import numpy as np

from ..._engine import Portable, plan_batches
from ..._kernels import linalg as _linalg
from ..._resampling.sign_flip import split_signed_rows
from ..._resampling.signed import signed_rows
from .solver import CV_WORKSPACE_OVERHEAD, RidgeSolver
from .targets import MAX_TARGETS_PER_BATCH

# Float64 values per target and permutation that
# skbatch.streaming.PermutationCounter.update makes beside the batch's scores:
# the family's copy (8 bytes), its NaN-filled copy for the extreme (8) and
# the NaN flags (1), 17 bytes. tracemalloc measures 2.125 values at 8 to 100
# permutations of 20,000 and 100,000 targets, every alternative, with or
# without an undefined observed score (tests/test_preflight_batch_temporaries.py).
COUNTER_UPDATE_VALUES = 2.125
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
