"""BatchedRidge: ridge regression for one to hundreds of thousands of targets."""

import numbers

import numpy as np
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.metrics import r2_score
from sklearn.model_selection import check_cv
from sklearn.utils.validation import (
    _check_sample_weight,
    check_is_fitted,
    validate_data,
)

from . import _linalg
from ._base import (
    DeviceMixin,
    as_output,
    atomic_fit,
    check_input_device,
    check_max_memory_gb,
    check_verbose,
    host_input,
)
from ._engine import map_threads, run_batched
from .backend import resolve_backend

__all__ = ["BatchedRidge"]

# A GEMM over this many targets already runs at the BLAS peak; larger target
# batches only add page faults and cache misses (PERFORMANCE.md: chunked
# targets were faster and used half the memory). torch's CPU GEMM peaks at
# smaller batches: its K-fold fit took 6.2 s at 512 targets, 6.8 s at 2048.
MAX_TARGETS_PER_BATCH = 2048
MAX_TARGETS_PER_BATCH_TORCH_CPU = 512
# Temporaries a kernel holds besides the arrays counted per target (copies
# made by casts, centring, broadcasting).
WORKSPACE_OVERHEAD = 2.0
_SCORINGS = (None, "r2", "neg_mean_squared_error", "correlation")
_DTYPES = {"float32": np.float32, "float64": np.float64}


def _check_alphas(alphas):
    try:
        values = np.asarray(alphas, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"alphas must be a positive float or a 1-D array-like of positive "
            f"floats, got {alphas!r}"
        ) from None
    values = np.atleast_1d(values)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(
            f"alphas must be a positive float or a non-empty 1-D array-like of "
            f"positive floats, got {alphas!r}"
        )
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError(f"alphas must be positive and finite, got {alphas!r}")
    return values


def _resolve_dtype(dtype, backend):
    if dtype == "auto":
        dtype = np.float32 if backend.is_gpu else np.float64
    try:
        dtype = np.dtype(_DTYPES.get(dtype, dtype))
    except TypeError:
        dtype = None
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype must be 'auto', 'float32' or 'float64', got {dtype!r}")
    if dtype == np.float64 and backend.device == "mps":
        raise ValueError(
            "dtype float64 is not available on MPS; pass dtype='float32' or run "
            "on another device"
        )
    return dtype


class BatchedRidge(DeviceMixin, MultiOutputMixin, RegressorMixin, BaseEstimator):
    """Ridge regression for many targets, with a per-target alpha chosen by CV.

    One thin SVD of the centred design matrix (one per fold for K-fold)
    serves every target and every alpha: targets are projected once onto
    the SVD basis and all alphas are evaluated from that projection. Targets
    are processed in batches sized from the measured memory budget, on
    numpy, PyTorch or JAX, and out-of-memory errors are recovered from by
    splitting batches, without changing the result.

    Parameters
    ----------
    alphas : float or array-like of shape (n_alphas,), default=(0.1, 1.0, 10.0)
        Positive regularisation strengths to choose from.
    cv : None, "gcv", int or CV splitter, default=None
        None: exact leave-one-out (the choice of sklearn's ``RidgeCV``).
        ``"gcv"``: generalized cross-validation, cheaper still.
        int or splitter: K-fold; per-target alpha is supported with it.
    alpha_per_target : bool, default=True
        Choose an alpha for each target; False chooses one alpha for all,
        maximising the score averaged over targets.
    fit_intercept : bool, default=True
        Whether to fit an intercept.
    scoring : {None, "r2", "neg_mean_squared_error", "correlation"}, \
default=None
        Criterion of the alpha choice, computed per target on the device.
        None: squared error for leave-one-out and GCV, R^2 for K-fold.
        GCV supports only None.
    dtype : {"auto", "float32", "float64"}, default="auto"
        Compute dtype. "auto": float64 on CPU, float32 on a GPU.
    n_targets_batch : "auto" or int, default="auto"
        Targets per batch; "auto" sizes batches from the memory budget.
    store_cv_results : bool, default=False
        Keep the score of every alpha for every target in ``cv_results_``.
    device : str or Backend, default="auto"
        Where to compute; see :func:`skbatch.resolve_backend`.
    max_memory_gb : float or None, default=None
        Memory budget in GB; None measures free memory.
    verbose : int, default=0
        1: progress bar over target batches; 2: log the batch plan.

    Attributes
    ----------
    coef_ : ndarray of shape (n_targets, n_features) or (n_features,)
        Coefficients at the chosen alphas; 1-D for 1-D ``y``.
    intercept_ : ndarray of shape (n_targets,) or float
        Intercepts (0.0 when ``fit_intercept=False``).
    alpha_ : ndarray of shape (n_targets,) or float
        Chosen alpha per target; a float for 1-D ``y`` or
        ``alpha_per_target=False``.
    best_score_ : ndarray of shape (n_targets,) or float
        Cross-validated score at the chosen alpha (higher is better; minus
        the mean squared error when ``scoring=None`` with LOO or GCV).
    cv_results_ : dict
        With ``store_cv_results=True``: ``"alphas"`` and ``"scores"``, the
        latter of shape (n_targets, n_alphas) (or (n_alphas,) for 1-D y).
    dtype_ : numpy dtype
        Dtype the model computes in.
    backend_ : Backend
        Where the model computes; ``predict`` raises if it is missing.
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen in fit, when X has string column names.

    See Also
    --------
    sklearn.linear_model.RidgeCV : Same model, one CPU, LOO or K-fold
        without per-target alpha for K-fold.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch import BatchedRidge
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((100, 5))
    >>> Y = X @ rng.standard_normal((5, 3)) + 0.1 * rng.standard_normal((100, 3))
    >>> model = BatchedRidge(alphas=np.logspace(-2, 2, 5)).fit(X, Y)
    >>> model.coef_.shape, model.alpha_.shape
    ((3, 5), (3,))
    >>> round(model.score(X, Y), 2)
    1.0
    """

    def __init__(
        self,
        alphas=(0.1, 1.0, 10.0),
        *,
        cv=None,
        alpha_per_target=True,
        fit_intercept=True,
        scoring=None,
        dtype="auto",
        n_targets_batch="auto",
        store_cv_results=False,
        device="auto",
        max_memory_gb=None,
        verbose=0,
    ):
        self.alphas = alphas
        self.cv = cv
        self.alpha_per_target = alpha_per_target
        self.fit_intercept = fit_intercept
        self.scoring = scoring
        self.dtype = dtype
        self.n_targets_batch = n_targets_batch
        self.store_cv_results = store_cv_results
        self.device = device
        self.max_memory_gb = max_memory_gb
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        # Not sklearn's array-API convention: fitted arrays stay host numpy
        # (portable pickles) and the device is chosen by `device`, not by X.
        tags.array_api_support = False
        return tags

    def _check_params(self):
        alphas = _check_alphas(self.alphas)
        if self.scoring not in _SCORINGS:
            raise ValueError(
                f"scoring must be one of {_SCORINGS}, got {self.scoring!r}"
            )
        if isinstance(self.cv, str) and self.cv != "gcv":
            raise ValueError(
                f"cv must be None, 'gcv', an int >= 2 or a CV splitter, got {self.cv!r}"
            )
        if self.cv == "gcv" and self.scoring is not None:
            raise ValueError(
                f"cv='gcv' supports only scoring=None, got scoring={self.scoring!r}"
            )
        batch = self.n_targets_batch
        if batch != "auto" and (
            isinstance(batch, bool)
            or not isinstance(batch, numbers.Integral)
            or batch < 1
        ):
            raise ValueError(
                f"n_targets_batch must be 'auto' or an int >= 1, got {batch!r}"
            )
        check_max_memory_gb(self.max_memory_gb)
        check_verbose(self.verbose)
        return alphas

    @atomic_fit
    def fit(self, X, y, sample_weight=None):
        """Fit the model and choose alphas.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data (numpy, torch or jax arrays are accepted).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        alphas = self._check_params()
        X, _ = host_input(X)
        y, _ = host_input(y)
        X, y = validate_data(
            self,
            X,
            y,
            multi_output=True,
            y_numeric=True,
            dtype=[np.float64, np.float32],
        )
        n_samples, n_features = X.shape
        if n_samples < 2:
            raise ValueError(
                f"BatchedRidge needs at least 2 samples, got {n_samples} sample"
            )
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64)
        Y = y.reshape(n_samples, -1) if y.ndim == 1 else y
        n_targets = Y.shape[1]
        splits = None
        if self.cv not in (None, "gcv"):
            splits = list(check_cv(self.cv).split(X, y))
        rank = min(n_samples, n_features)
        n_fits = 1 if splits is None else len(splits) + 1
        flops = (
            2.0
            * n_fits
            * (
                n_samples * n_features * rank
                + n_samples * rank * n_targets * alphas.size
            )
        )
        self.backend_ = resolve_backend(self.device, flops=flops)
        self.dtype_ = _resolve_dtype(self.dtype, self.backend_)

        with self.backend_.context():
            problem = _RidgeProblem(
                X,
                sample_weight,
                alphas,
                splits,
                self.backend_,
                self.dtype_,
                fit_intercept=self.fit_intercept,
                scoring=self.scoring,
                cv=self.cv,
            )
            results = problem.solve(
                Y,
                alpha_per_target=self.alpha_per_target,
                batch_size=self.n_targets_batch,
                max_memory_gb=self.max_memory_gb,
                verbose=self.verbose,
            )
        coef, intercept, best, best_score, scores = results
        one_target = y.ndim == 1
        if not self.alpha_per_target or one_target:
            self.alpha_ = float(alphas[best[0]])
            self.best_score_ = float(np.mean(best_score))
        else:
            self.alpha_ = alphas[best]
            self.best_score_ = best_score
        self.coef_ = coef[0] if one_target else coef
        self.intercept_ = float(intercept[0]) if one_target else intercept
        if not self.fit_intercept:
            self.intercept_ = 0.0 if one_target else np.zeros(n_targets)
        if self.store_cv_results:
            self.cv_results_ = {
                "alphas": alphas,
                "scores": scores[0] if one_target else scores,
            }
        return self

    def _predict_host(self, X):
        check_is_fitted(self)
        self.backend_.check_available()
        X, source = host_input(X)
        check_input_device(source, self.backend_)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        coef = np.atleast_2d(self.coef_)
        intercept = np.atleast_1d(np.asarray(self.intercept_, dtype=np.float64))
        out_dtype = np.result_type(X.dtype, self.dtype_)
        out = np.empty((X.shape[0], coef.shape[0]), dtype=out_dtype)
        backend, dtype = self.backend_, self.dtype_
        itemsize = np.dtype(dtype).itemsize
        with backend.context():
            X_device = backend.asarray(X, dtype)

            def kernel(ids):
                coef_batch = backend.asarray(coef[ids], dtype)
                return (
                    coef_batch @ X_device.T
                    + backend.asarray(intercept[ids], dtype)[:, None]
                )

            def reduce(ids, block):
                out[:, ids] = block.T

            run_batched(
                kernel,
                reduce,
                n_items=coef.shape[0],
                backend=backend,
                device_bytes_per_item=itemsize * (X.shape[0] + X.shape[1]),
                host_bytes_per_item=out.itemsize * X.shape[0],
                fixed_bytes=X.nbytes,
                max_memory_gb=self.max_memory_gb,
                batch_size=self.n_targets_batch,
                threads=True,
            )
        if np.ndim(self.coef_) == 1:
            out = out[:, 0]
        return out, source

    def predict(self, X):
        """Predict with the fitted coefficients, batched over targets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            numpy, torch or jax array. A torch or jax array must sit on the
            model's device (else ValueError: nothing moves silently).

        Returns
        -------
        y_pred : array of shape (n_samples,) or (n_samples, n_targets)
            numpy for numpy input; otherwise the input's library, on its
            device.
        """
        out, source = self._predict_host(X)
        return as_output(out, source)

    def score(self, X, y, sample_weight=None):
        """Uniform average of the per-target R^2, so that GridSearchCV works.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Test samples.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            True values.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights.

        Returns
        -------
        score : float
            Mean over targets of R^2.
        """
        y, _ = host_input(y)
        predictions, _ = self._predict_host(X)
        return float(r2_score(y, predictions, sample_weight=sample_weight))

    def score_per_target(self, X, y, sample_weight=None):
        """R^2 of each target.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Test samples.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            True values.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights.

        Returns
        -------
        scores : ndarray of shape (n_targets,)
            R^2 per target.
        """
        y, _ = host_input(y)
        predictions, _ = self._predict_host(X)
        return np.atleast_1d(
            r2_score(
                y, predictions, sample_weight=sample_weight, multioutput="raw_values"
            )
        )


class _RidgeProblem:
    """A design matrix decomposed once, ready to take targets in batches."""

    def __init__(
        self,
        X,
        sample_weight,
        alphas,
        splits,
        backend,
        dtype,
        *,
        fit_intercept,
        scoring,
        cv,
    ):
        xp = backend.xp
        self.backend, self.dtype, self.xp = backend, dtype, xp
        self.alphas = alphas
        self.fit_intercept, self.cv = fit_intercept, cv
        self.scoring = scoring
        self.n_samples, self.n_features = X.shape
        X = backend.asarray(X, dtype)
        weight = (
            None if sample_weight is None else backend.asarray(sample_weight, dtype)
        )
        self.sample_weight = weight

        def decompose(split):
            if split is not None:
                return _Fold(X, weight, *split, backend, fit_intercept=fit_intercept)
            X_centered, X_offset = _linalg.center(
                X, weight, fit_intercept=fit_intercept, xp=xp
            )
            return X_offset, *_linalg.svd_decompose(X_centered, xp=xp)

        # All rows and every fold: independent decompositions, side by side.
        full, *self.folds = map_threads(decompose, [None, *(splits or ())], backend)
        self.X_offset, self.U, self.s, self.Vt = full

    def _scores(self, Y, Y_centered, Y_offset, UtY):
        """Scores (n_alphas, n_targets) of one batch of targets."""
        xp = self.xp
        if self.cv is None:
            return _linalg.loo_scores(
                self.U,
                self.s,
                UtY,
                Y_centered,
                self.alphas,
                fit_intercept=self.fit_intercept,
                sample_weight=self.sample_weight,
                scoring=self.scoring,
                xp=xp,
            )
        if self.cv == "gcv":
            sq_norm = _linalg.residual_sq_norm(
                self.U, UtY, Y_centered, fit_intercept=self.fit_intercept, xp=xp
            )
            return _linalg.gcv_scores(
                self.s,
                UtY,
                sq_norm,
                self.n_samples,
                self.alphas,
                fit_intercept=self.fit_intercept,
                xp=xp,
            )
        total = 0.0
        for fold in self.folds:
            # The fold's training rows of the targets centred on all rows:
            # U's columns are orthogonal to the (weighted) mean direction, so
            # projecting them equals projecting the rows centred on their own
            # means, and the training mean is one shift of the test targets.
            UtY_fold, train_mean = fold.project(
                Y_centered, with_mean=self.fit_intercept
            )
            # Offset first, then the small training mean: in float32 their sum
            # would round the mean away on targets far from zero.
            y_true = fold.test_rows(Y) - Y_offset
            y_true -= train_mean
            total = total + _linalg.holdout_scores(
                fold.s,
                fold.X_test_V,
                UtY_fold,
                y_true,
                self.alphas,
                scoring=self.scoring or "r2",
                xp=xp,
            )
        return total / len(self.folds)

    def project(self, Y):
        """Centre device targets ``Y`` (n_samples, m) and project them on U.

        Returns
        -------
        Y_centered, Y_offset, UtY : arrays
            Centred (and weight-scaled) targets, their offsets, and their
            coordinates in the basis.
        """
        Y_centered, Y_offset = _linalg.center(
            Y, self.sample_weight, fit_intercept=self.fit_intercept, xp=self.xp
        )
        return Y_centered, Y_offset, _linalg.project(self.U, Y_centered, xp=self.xp)

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
        alpha : array of shape (m,)
        """
        xp = self.xp
        alphas = self.backend.asarray(self.alphas, self.dtype)
        n_columns = Y.shape[1]
        if self.alphas.size == 1:
            return xp.broadcast_to(alphas, (n_columns,))
        scores = self._scores(Y, Y_centered, Y_offset, UtY)
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

    def _refit(self, UtY, Y_offset, alpha):
        coef = _linalg.ridge_coef(self.Vt, self.s, UtY, alpha, xp=self.xp)
        return coef.T, Y_offset - self.X_offset @ coef

    def _to_device(self, Y_host, ids):
        # The engine hands out consecutive ids: a slice is a view, where a
        # gather would copy every target once more before centring copies it.
        if ids[-1] - ids[0] + 1 == len(ids):
            return self.backend.asarray(Y_host[:, ids[0] : ids[-1] + 1], self.dtype)
        return self.backend.asarray(Y_host[:, ids], self.dtype)

    def _select_and_fit(self, Y):
        """Kernel: scores of every alpha, the best per target, its coefficients."""
        xp = self.xp
        Y_centered, Y_offset, UtY = self.project(Y)
        scores = self._scores(Y, Y_centered, Y_offset, UtY)
        best, best_score = _linalg.select_alpha(scores, xp=xp)
        alpha = xp.take(self.backend.asarray(self.alphas, self.dtype), best)
        return (*self._refit(UtY, Y_offset, alpha), best, best_score, scores.T)

    def _fit_fixed(self, Y, alpha):
        """Kernel: coefficients at one alpha for all targets of the batch."""
        _, Y_offset, UtY = self.project(Y)
        return self._refit(UtY, Y_offset, alpha)

    def solve(self, Y, *, alpha_per_target, batch_size, max_memory_gb, verbose):
        """Choose alphas and fit all targets of ``Y`` (host, n_samples x t)."""
        n_targets = Y.shape[1]
        n_alphas = self.alphas.size
        n, p, r = self.n_samples, self.n_features, self.s.shape[0]
        itemsize = np.dtype(self.dtype).itemsize
        coef = np.empty((n_targets, p))
        intercept = np.empty(n_targets)
        best = np.empty(n_targets, dtype=np.int64)
        best_score = np.empty(n_targets)
        scores = np.empty((n_targets, n_alphas))

        def reduce_all(ids, result):
            coef[ids], intercept[ids], best[ids], best_score[ids], scores[ids] = result

        def reduce_coef(ids, result):
            coef[ids], intercept[ids] = result

        fixed = itemsize * (2 * n * p + n * r + r * p)
        for fold in self.folds:
            fixed += itemsize * (fold.U.shape[0] + fold.X_test_V.shape[0]) * r
        engine_args = dict(
            n_items=n_targets,
            backend=self.backend,
            device_bytes_per_item=WORKSPACE_OVERHEAD
            * itemsize
            * (4 * n + r + p + 2 * n_alphas),
            host_bytes_per_item=8 * (p + 3 + n_alphas),
            fixed_bytes=fixed,
            max_memory_gb=max_memory_gb,
            verbose=verbose,
            desc="targets",
            batch_size=batch_size,
            max_batch_size=(
                MAX_TARGETS_PER_BATCH_TORCH_CPU
                if self.backend.library == "torch" and not self.backend.is_gpu
                else MAX_TARGETS_PER_BATCH
            ),
            threads=True,
        )
        run_batched(
            lambda ids: self._select_and_fit(self._to_device(Y, ids)),
            reduce_all,
            **engine_args,
        )
        if not alpha_per_target and n_targets > 1:
            shared = int(np.argmax(np.nan_to_num(scores.mean(axis=0), nan=-np.inf)))
            alpha = float(self.alphas[shared])
            run_batched(
                lambda ids: self._fit_fixed(self._to_device(Y, ids), alpha),
                reduce_coef,
                **engine_args,
            )
            best[:] = shared
            best_score[:] = scores[:, shared]
        return coef, intercept, best, best_score, scores


# Row indices that form at most this many runs of consecutive rows (KFold
# without shuffling: two) are read as slices, views rather than copies.
MAX_ROW_RUNS = 4


def _row_runs(indices):
    """``[(position, row, length), ...]`` of consecutive runs, or None if many."""
    indices = np.asarray(indices)
    breaks = np.flatnonzero(np.diff(indices) != 1) + 1
    if indices.size == 0 or breaks.size >= MAX_ROW_RUNS:
        return None
    bounds = np.concatenate(([0], breaks, [indices.size]))
    return [
        (int(start), int(indices[start]), int(stop - start))
        for start, stop in zip(bounds[:-1], bounds[1:])
    ]


class _Fold:
    """One train/test split: its training rows decomposed, its rows located."""

    def __init__(self, X, weight, train, test, backend, *, fit_intercept):
        xp = backend.xp
        self.xp = xp
        self.train_runs, self.test_runs = _row_runs(train), _row_runs(test)
        self.train, self.test = backend.asarray(train), backend.asarray(test)
        self.n_train = len(train)
        self.root_weight = None
        train_weight = None
        if weight is not None:
            train_weight = xp.take(weight, self.train, axis=0)
            self.root_weight = xp.sqrt(train_weight)
            self.total_weight = xp.sum(train_weight)
        self.U, self.s, self.X_test_V = _linalg.fold_basis(
            xp.take(X, self.train, axis=0),
            xp.take(X, self.test, axis=0),
            fit_intercept=fit_intercept,
            sample_weight=train_weight,
            xp=xp,
        )

    def _blocks(self, A, runs, indices):
        """``(positions, rows of A)`` pairs covering the fold's rows of ``A``."""
        if runs is None:
            return [(slice(None), self.xp.take(A, indices, axis=0))]
        return [
            (slice(position, position + length), A[row : row + length])
            for position, row, length in runs
        ]

    def project(self, Y_centered, *, with_mean):
        """``U' Y_centered[train]``, one product per run of rows.

        With ``with_mean``, also the (weighted) mean of those rows, unscaled,
        read in the same pass: ``Y_centered`` rows carry sqrt(w), so
        ``sqrt(w)' Y_centered[train] / sum(w[train])`` is the training mean
        of ``Y - Y_offset``. Without it the mean is 0.0.
        """
        xp = self.xp
        UtY = total = 0.0
        for positions, rows in self._blocks(Y_centered, self.train_runs, self.train):
            UtY = UtY + self.U[positions].T @ rows
            if not with_mean:
                continue
            if self.root_weight is None:
                total = total + xp.sum(rows, axis=0)
            else:
                total = total + self.root_weight[positions] @ rows
        if not with_mean:
            return UtY, 0.0
        if self.root_weight is None:
            return UtY, total / self.n_train
        return UtY, total / self.total_weight

    def test_rows(self, Y):
        """``Y[test]``: a view when the test rows are one run."""
        blocks = self._blocks(Y, self.test_runs, self.test)
        if len(blocks) == 1:
            return blocks[0][1]
        return self.xp.concat([rows for _, rows in blocks], axis=0)
