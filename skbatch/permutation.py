"""PermutationScorer: cross-validated score with a permutation p-value, per target.

The definitions are those of scikit-learn's ``permutation_test_score``: the
score is the mean over folds of the scorer on the test rows, the null
distribution is that score with ``y`` permuted (within groups when given),
and ``p = (C + 1) / (n_permutations + 1)`` with C the number of permuted
scores at least as high as the true one.

Two paths compute the null with the same permutations (one seed stream per
permutation, see :mod:`skbatch.random`):

- ridge family (``BatchedRidge``, ``Ridge``, ``RidgeCV``,
  ``LinearRegression``): permuting ``y`` leaves the decomposition of every
  fold's ``X`` unchanged, so each outer fold is decomposed once and a batch
  of permutations goes through it as extra target columns, alpha selection
  included, on the device and in batches sized by the engine;
- any other estimator: refits through joblib, in bounded windows.
"""

import contextlib
import functools
import math
import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, RegressorMixin, clone, is_classifier
from sklearn.linear_model import LinearRegression, Ridge, RidgeCV
from sklearn.metrics import (
    check_scoring,
    explained_variance_score,
    get_scorer_names,
    mean_absolute_error,
    mean_absolute_percentage_error,
    mean_squared_error,
    median_absolute_error,
    r2_score,
    root_mean_squared_error,
)
from sklearn.model_selection import check_cv
from sklearn.utils import _safe_indexing, get_tags
from sklearn.utils.metaestimators import _safe_split
from sklearn.utils.validation import _check_method_params

from . import _linalg
from ._base import (
    WrapperMixin,
    atomic_fit,
    check_max_memory_gb,
    check_verbose,
)
from ._engine import run_batched, run_parallel
from .backend import resolve_backend, to_numpy
from .memory import GB, memory_budget
from .random import permutation_indices, resolve_entropy
from .ridge import _SCORINGS as _BATCHED_RIDGE_SCORINGS
from .ridge import (
    MAX_TARGETS_PER_BATCH,
    WORKSPACE_OVERHEAD,
    BatchedRidge,
    _check_alphas,
    _resolve_dtype,
    _RidgeProblem,
)
from .streaming import PermutationCounter

__all__ = ["PermutationScorer"]

# Permuted target columns per device batch: a batch of permutations is one
# GEMM per fold over (permutations x targets) columns, already at the BLAS
# peak at this width (the target batch of BatchedRidge, same reasoning).
MAX_COLUMNS_PER_BATCH = MAX_TARGETS_PER_BATCH
# Below this much work (FLOPs of the whole fast path) every product is small
# and BLAS / torch threads synchronise more than they compute: 2-20x slower
# than one thread on busy cores (PERFORMANCE.md, and torch's SVD of a
# 400 x 50 fold: 0.5 ms alone, 250 ms beside one other process), while one
# thread costs at most a few ms here; drawing the permutations dominates.
SMALL_FIT_FLOPS = 1e9
_MULTIOUTPUTS = ("uniform_average", "raw_values")
# Scorings the ridge fast path computes on the device, per target. None is
# R^2: the ``score`` of every estimator the fast path accepts.
_DEVICE_SCORINGS = (
    None,
    "r2",
    "neg_mean_squared_error",
    "neg_root_mean_squared_error",
    "neg_mean_absolute_error",
)
# Scorings with a per-target value (multioutput="raw_values"): the metric and
# the sign of the scorer of that name (scorers are higher-is-better).
_PER_TARGET_METRICS = {
    "r2": (r2_score, 1.0),
    "explained_variance": (explained_variance_score, 1.0),
    "neg_mean_squared_error": (mean_squared_error, -1.0),
    "neg_root_mean_squared_error": (root_mean_squared_error, -1.0),
    "neg_mean_absolute_error": (mean_absolute_error, -1.0),
    "neg_median_absolute_error": (median_absolute_error, -1.0),
    "neg_mean_absolute_percentage_error": (mean_absolute_percentage_error, -1.0),
}
# sklearn Ridge solvers that give the exact ridge solution (the fast path's);
# the iterative ones stop at a tolerance and take the generic path.
_EXACT_RIDGE_SOLVERS = ("auto", "svd", "cholesky")
_RIDGECV_SCORINGS = (None, "r2", "neg_mean_squared_error")


@dataclass(frozen=True)
class _RidgeSpec:
    """How a ridge-family estimator fits, in the terms of ``_RidgeProblem``."""

    alphas: np.ndarray
    cv: object
    scoring: object
    alpha_per_target: bool
    fit_intercept: bool


def _ridge_spec(estimator):
    """The ridge problem ``estimator.fit`` solves, or None for the generic path.

    Exact types only: a subclass may override ``fit``. Anything the fast
    path would compute differently (positive coefficients, per-target alpha
    arrays, iterative solvers, invalid parameters, which the estimator
    itself must report) returns None.
    """
    kind = type(estimator)
    params = estimator.get_params(deep=False)
    if kind is LinearRegression:
        if params["positive"]:
            return None
        # The pseudo-inverse: ridge with alpha = 0 on the numerical rank of X.
        return _RidgeSpec(np.zeros(1), None, None, True, params["fit_intercept"])
    if kind is Ridge:
        alpha = params["alpha"]
        if (
            params["positive"]
            or params["solver"] not in _EXACT_RIDGE_SOLVERS
            or np.ndim(alpha) != 0
            or not isinstance(alpha, numbers.Real)
            or not (0 <= alpha < np.inf)
        ):
            return None
        return _RidgeSpec(
            np.array([float(alpha)]), None, None, True, params["fit_intercept"]
        )
    if kind is RidgeCV:
        alphas = _valid_alphas(params["alphas"])
        if (
            alphas is None
            or params["scoring"] not in _RIDGECV_SCORINGS
            or (params["cv"] is not None and params["alpha_per_target"])
            or isinstance(params["cv"], str)
        ):
            return None
        return _RidgeSpec(
            alphas,
            params["cv"],
            params["scoring"],
            params["alpha_per_target"],
            params["fit_intercept"],
        )
    if kind is BatchedRidge:
        alphas = _valid_alphas(params["alphas"])
        cv, scoring = params["cv"], params["scoring"]
        if (
            alphas is None
            or scoring not in _BATCHED_RIDGE_SCORINGS
            or (isinstance(cv, str) and cv != "gcv")
            or (cv == "gcv" and scoring is not None)
        ):
            return None
        return _RidgeSpec(
            alphas, cv, scoring, params["alpha_per_target"], params["fit_intercept"]
        )
    return None


def _valid_alphas(alphas):
    try:
        return _check_alphas(alphas)
    except (TypeError, ValueError):
        return None


def _device_scores(y_true, y_pred, scoring, xp):
    """Score of every column, computed where the arrays are."""
    dtype = _linalg._criterion_dtype(y_true, xp)
    y_true = xp.astype(y_true, dtype, copy=False)
    y_pred = xp.astype(y_pred, dtype, copy=False)
    if scoring == "neg_root_mean_squared_error":
        return -xp.sqrt(xp.mean((y_true - y_pred) ** 2, axis=0))
    if scoring == "neg_mean_absolute_error":
        return -xp.mean(xp.abs(y_true - y_pred), axis=0)
    return _linalg.score_per_target(y_true, y_pred, scoring or "r2", xp=xp)


class _RidgeFolds:
    """Outer folds decomposed once, scoring batches of permuted targets.

    A permutation k of the rows of ``Y`` (n x t) becomes t target columns
    ``k * t + j``; a batch of permutations is one ``_RidgeProblem`` call per
    fold over all their columns: projection, alpha choice by the inner CV of
    the estimator, prediction of the test rows and their score.
    """

    def __init__(self, X, Y, Y_device, splits, spec, backend, dtype, scoring):
        self.backend, self.dtype, self.xp = backend, dtype, backend.xp
        self.scoring = scoring
        self.n_targets = Y.shape[1]
        many = not spec.alpha_per_target and self.n_targets > 1
        self.columns_per_choice = self.n_targets if many else 1
        self.Y = Y_device
        self.folds = []
        for train, test in splits:
            X_train = X[train]
            inner = None
            if spec.cv not in (None, "gcv"):
                inner = list(check_cv(spec.cv).split(X_train, Y[train]))
            problem = _RidgeProblem(
                X_train,
                None,
                spec.alphas,
                inner,
                backend,
                dtype,
                fit_intercept=spec.fit_intercept,
                scoring=spec.scoring,
                cv=spec.cv,
            )
            X_test_V = problem.rows_in_basis(backend.asarray(X[test], dtype))
            self.folds.append(
                (backend.asarray(train), backend.asarray(test), problem, X_test_V)
            )

    @property
    def nbytes(self):
        """Device bytes held whatever the batch: targets and decompositions."""
        arrays = [self.Y]
        for _, _, problem, X_test_V in self.folds:
            arrays += [problem.U, problem.Vt, X_test_V]
            for fold in problem.folds:
                arrays += [fold.U, fold.X_test_V]
        itemsize = np.dtype(self.dtype).itemsize
        return itemsize * sum(math.prod(a.shape) for a in arrays)

    def bytes_per_permutation(self, n_samples, n_alphas):
        """Device working set of one permutation in a batch."""
        rank = max(problem.s.shape[0] for _, _, problem, _ in self.folds)
        itemsize = np.dtype(self.dtype).itemsize
        # Gathered train and test targets, their centred copy, LOO residual
        # and errors, predictions: a few (n x t) blocks, plus the indices.
        per_column = 6 * n_samples + rank + 2 * n_alphas
        return WORKSPACE_OVERHEAD * itemsize * self.n_targets * per_column + (
            16 * n_samples
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
        indices = self.backend.asarray(indices)
        permuted = self._permute(indices)
        total = 0.0
        for train, test, problem, X_test_V in self.folds:
            Y_train = xp.take(permuted, train, axis=0)
            Y_centered, Y_offset, UtY = problem.project(Y_train)
            alpha = problem.choose_alpha(
                Y_train,
                Y_centered,
                Y_offset,
                UtY,
                columns_per_choice=self.columns_per_choice,
            )
            predictions = problem.predict(X_test_V, UtY, Y_offset, alpha)
            Y_test = xp.take(permuted, test, axis=0)
            total = total + _device_scores(Y_test, predictions, self.scoring, xp)
        return xp.reshape(total / len(self.folds), (indices.shape[0], self.n_targets))

    def _permute(self, indices):
        """``Y[indices[k]]`` for every k, as columns ``k * t + j``: (n, b * t).

        Gathered once per batch; each fold then copies whole rows of it.
        """
        xp = self.xp
        rows = xp.reshape(xp.permute_dims(indices, (1, 0)), (-1,))
        return xp.reshape(xp.take(self.Y, rows, axis=0), (indices.shape[1], -1))


def _cv_score(estimator, X, y, splits, scorer, metric, fit_params):
    """Mean over folds of the test score, as ``permutation_test_score`` does.

    One clone is refit on every fold, as scikit-learn does, so an estimator
    holding a random state draws the same sequence. ``metric`` (a function
    and a sign) gives per-target scores; otherwise ``scorer`` gives one.
    """
    estimator = clone(estimator)
    scores = []
    for train, test in splits:
        X_train, y_train = _safe_split(estimator, X, y, train)
        X_test, y_test = _safe_split(estimator, X, y, test, train)
        estimator.fit(
            X_train, y_train, **_check_method_params(X, fit_params, indices=train)
        )
        if metric is None:
            scores.append(scorer(estimator, X_test, y_test))
        else:
            function, sign = metric
            predictions = estimator.predict(X_test)
            scores.append(
                sign * function(y_test, predictions, multioutput="raw_values")
            )
    if metric is None:
        # Flattened, as scikit-learn averages whatever the scorer returns.
        return np.mean(scores)
    return np.mean(scores, axis=0)


def _null_scores_task(
    ids, *, estimator, X, y, splits, groups, entropy, scorer, metric, fit_params
):
    """Scores of permutations ``ids``: a joblib task, numpy in, numpy out."""
    indices = permutation_indices(entropy, ids, len(y), groups)
    return np.stack(
        [
            _cv_score(
                estimator,
                X,
                _safe_indexing(y, perm),
                splits,
                scorer,
                metric,
                fit_params,
            )
            for perm in indices
        ]
    )


class PermutationScorer(WrapperMixin, RegressorMixin, BaseEstimator):
    """Cross-validated score with a permutation p-value, per target.

    The estimator form of :func:`sklearn.model_selection.permutation_test_score`,
    with its definitions: ``score_`` is the mean over folds of the scorer on
    the test rows, the null distribution is that score with the rows of
    ``y`` permuted (within ``groups`` when given), and
    ``pvalue_ = (C + 1) / (n_permutations + 1)``, C the number of permuted
    scores greater than or equal to ``score_``. With
    ``multioutput="raw_values"`` every target gets its score and p-value, and
    ``pvalue_fwer_`` controls the family-wise error rate over targets
    (max-statistic method: every target's permuted score comes from the same
    row permutation).

    For ``BatchedRidge``, ``Ridge``, ``RidgeCV`` and ``LinearRegression``
    (exact solvers, no ``fit_params``) and a scoring among None, "r2",
    "neg_mean_squared_error", "neg_root_mean_squared_error" and
    "neg_mean_absolute_error", permuting ``y`` leaves each fold's
    decomposition of X unchanged: one SVD per fold, and the permutations go
    through it as a batch of extra targets, alpha chosen per permuted target
    by the estimator's own LOO, GCV or K-fold criterion on the fold's
    training rows, scored on the device (``device``), in batches sized from
    the memory budget and recovered from out-of-memory errors. Any other
    estimator is refit on every fold of every permutation through joblib
    (``n_jobs``). Both paths draw the same permutations: the same
    ``random_state`` gives the same null distribution and p-values for any
    batch size, budget, ``n_jobs`` and path.

    Parameters
    ----------
    estimator : estimator object, default=None
        Regressor to score; None means :class:`~skbatch.BatchedRidge` with
        its defaults.
    n_permutations : int, default=1000
        Number of permutations of ``y``, at least 1.
    scoring : str, callable or None, default=None
        Scorer name (:func:`sklearn.metrics.get_scorer_names`) or callable
        ``scorer(estimator, X, y)``; None uses ``estimator.score`` (R^2 for
        regressors). With ``multioutput="raw_values"`` it must have a
        per-target value: None (R^2), "r2", "explained_variance",
        "neg_mean_squared_error", "neg_root_mean_squared_error",
        "neg_mean_absolute_error", "neg_median_absolute_error" or
        "neg_mean_absolute_percentage_error".
    cv : int, CV splitter or iterable, default=5
        Outer cross-validation, as in ``permutation_test_score`` (``groups``
        are passed to the splitter). The splits are drawn once, on the true
        ``y``, and shared by all permutations; inner splits of a K-fold
        ``RidgeCV`` / ``BatchedRidge`` likewise, once per outer fold.
    multioutput : {"uniform_average", "raw_values"}, default="uniform_average"
        "uniform_average": one score, the scorer's (for several targets, the
        mean over targets of the per-target scores, as ``r2_score`` does).
        "raw_values": a score, p-value and null per target.
    return_null : bool, default=False
        Keep every permuted score in ``permutation_scores_``. Without it
        memory does not grow with ``n_permutations``.
    random_state : int, RandomState instance, Generator or None, default=None
        Seeds the permutations: permutation i depends on this and i alone.
    n_jobs : int or None, default=None
        Workers of the generic path (joblib convention; wrap ``fit`` in
        ``joblib.parallel_config`` to choose the joblib backend). The ridge
        fast path runs on ``device`` and ignores it.
    device : str or Backend, default="auto"
        Where the ridge fast path computes; see
        :func:`skbatch.resolve_backend`. Float64 unless the estimator is a
        ``BatchedRidge`` whose ``dtype`` says otherwise (float32 on MPS).
    max_memory_gb : float or None, default=None
        Memory budget in GB, for device batches, generic-path windows and
        the retained null; None measures free memory.
    verbose : int, default=0
        1: progress bar over permutations; 2: also log the batch plan.

    Attributes
    ----------
    score_ : float or ndarray of shape (n_targets,)
        Cross-validated score on the true ``y`` (per target for
        "raw_values").
    pvalue_ : float or ndarray of shape (n_targets,)
        ``(C + 1) / (n_permutations + 1)``.
    pvalue_fwer_ : float or ndarray of shape (n_targets,)
        Family-wise p-value: the proportion (with the same +1) of
        permutations whose best score over targets reaches the target's
        ``score_``. Never below ``pvalue_``. For "uniform_average" there is a
        single statistic and it equals ``pvalue_``.
    null_mean_ : float or ndarray of shape (n_targets,)
        Mean of the permuted scores.
    null_std_ : float or ndarray of shape (n_targets,)
        Standard deviation (ddof=1) of the permuted scores.
    permutation_scores_ : ndarray of shape (n_permutations,) or \
(n_permutations, n_targets)
        Every permuted score, row i from permutation i; only with
        ``return_null=True``.
    estimator_ : estimator object
        Clone of ``estimator`` fit on all data; ``predict`` and ``score``
        delegate to it.
    backend_ : Backend
        Where the fast path computed (resolved from ``device``).
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen in fit, when X has string column names.

    See Also
    --------
    sklearn.model_selection.permutation_test_score : Same test, one score,
        refitting the estimator for every permutation.

    Notes
    -----
    The ridge fast path solves every fold exactly (SVD, rank-truncated like
    ``numpy.linalg.matrix_rank``), so its scores match scikit-learn's to
    rounding; ``LinearRegression`` is its ``alpha = 0`` limit (the
    pseudo-inverse). An estimator choosing one alpha for all targets
    (``RidgeCV``'s default ``alpha_per_target=False``, or
    ``BatchedRidge(alpha_per_target=False)``) chooses it per permutation,
    over that permutation's targets, as its refit on permuted data would.

    All targets of a permutation share one row permutation (as
    ``permutation_test_score`` permutes the rows of a 2-D ``y``), which keeps
    their dependence and makes the max-statistic ``pvalue_fwer_`` valid.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import Ridge
    >>> from skbatch import PermutationScorer
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((60, 4))
    >>> signal = X[:, 0] + 0.5 * rng.standard_normal(60)
    >>> Y = np.column_stack([signal, rng.standard_normal(60)])
    >>> perm = PermutationScorer(
    ...     Ridge(alpha=1.0), n_permutations=99, multioutput="raw_values",
    ...     random_state=0,
    ... ).fit(X, Y)
    >>> float(perm.pvalue_[0])  # the smallest possible: 1 / (99 + 1)
    0.01
    >>> bool(perm.pvalue_[1] > 0.05), bool(perm.score_[0] > 0.5)
    (True, True)
    """

    def __init__(
        self,
        estimator=None,
        *,
        n_permutations=1000,
        scoring=None,
        cv=5,
        multioutput="uniform_average",
        return_null=False,
        random_state=None,
        n_jobs=None,
        device="auto",
        max_memory_gb=None,
        verbose=0,
    ):
        self.estimator = estimator
        self.n_permutations = n_permutations
        self.scoring = scoring
        self.cv = cv
        self.multioutput = multioutput
        self.return_null = return_null
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.device = device
        self.max_memory_gb = max_memory_gb
        self.verbose = verbose

    def _default_estimator(self):
        return BatchedRidge()

    def _check_params(self):
        n_permutations = self.n_permutations
        if (
            isinstance(n_permutations, bool)
            or not isinstance(n_permutations, numbers.Integral)
            or n_permutations < 1
        ):
            raise ValueError(
                f"n_permutations must be an int >= 1, got {n_permutations!r}"
            )
        if self.multioutput not in _MULTIOUTPUTS:
            raise ValueError(
                f"multioutput must be one of {_MULTIOUTPUTS}, got {self.multioutput!r}"
            )
        scoring = self.scoring
        if isinstance(scoring, str):
            if scoring not in get_scorer_names():
                raise ValueError(
                    f"scoring must be None, a callable or a name from "
                    f"sklearn.metrics.get_scorer_names(), got {scoring!r}"
                )
        elif scoring is not None and not callable(scoring):
            raise ValueError(
                f"scoring must be None, a callable or a scorer name, got {scoring!r}"
            )
        if self.multioutput == "raw_values" and (
            scoring is not None and scoring not in _PER_TARGET_METRICS
        ):
            raise ValueError(
                f"multioutput='raw_values' needs a scoring with a value per "
                f"target: None or one of {tuple(_PER_TARGET_METRICS)}, got "
                f"scoring={scoring!r}"
            )
        if not isinstance(self.return_null, bool | np.bool_):
            raise ValueError(f"return_null must be a bool, got {self.return_null!r}")
        check_max_memory_gb(self.max_memory_gb)
        check_verbose(self.verbose)

    @atomic_fit
    def fit(self, X, y, groups=None, **fit_params):
        """Score the estimator and its permutation null distribution.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets.
        groups : array-like of shape (n_samples,), default=None
            Exchangeability blocks: ``y`` is permuted within each group only.
            Also passed to the ``cv`` splitter.
        **fit_params : dict
            Passed to ``estimator.fit`` (sliced to the training rows of each
            fold); any of them sends the work to the generic path.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        self._check_params()
        estimator = self._get_estimator()
        raw = self.multioutput == "raw_values"
        inner_tags = get_tags(estimator).input_tags
        X_input, _, X_valid, y, groups, fit_params = self._check_fit_input(
            X,
            y,
            groups,
            fit_params,
            # Row-indexable formats, for slicing folds.
            accept_sparse=["csr", "csc"] if inner_tags.sparse else False,
            dtype=None if inner_tags.string or inner_tags.categorical else "numeric",
            ensure_all_finite=not inner_tags.allow_nan,
            y_numeric=not is_classifier(estimator),
        )
        # Column names reach the estimator as the user gave them, so that
        # estimator_ checks them in predict and name-based transformers work.
        X = X_input if hasattr(self, "feature_names_in_") else X_valid
        n_targets = 1 if y.ndim == 1 else y.shape[1]
        n_stats = n_targets if raw else 1
        self._check_host_memory(n_stats)
        entropy = resolve_entropy(self.random_state)
        cv = check_cv(self.cv, y, classifier=is_classifier(estimator))
        splits = list(cv.split(X, y, groups))

        spec = None
        if not fit_params and not sp.issparse(X_valid):
            if self.scoring in _DEVICE_SCORINGS:
                spec = _ridge_spec(estimator)
        counter_args = dict(n_total=self.n_permutations, keep_null=self.return_null)
        if spec is not None:
            counter = self._fit_ridge(
                X_valid, y, groups, splits, spec, entropy, raw, counter_args
            )
        else:
            self.backend_ = resolve_backend(self.device)
            counter = self._fit_generic(
                estimator, X, y, groups, splits, entropy, raw, fit_params, counter_args
            )
        self.score_ = counter.observed if raw else float(counter.observed)
        self.pvalue_ = counter.pvalue()
        self.pvalue_fwer_ = counter.pvalue_fwer()
        self.null_mean_ = counter.null_mean
        self.null_std_ = counter.null_std
        if self.return_null:
            self.permutation_scores_ = counter.null
        self.estimator_ = clone(estimator).fit(X, y, **fit_params)
        return self

    def _check_host_memory(self, n_stats):
        needed = PermutationCounter.nbytes_needed(
            n_stats, self.n_permutations, keep_null=self.return_null
        )
        budget = memory_budget(None, self.max_memory_gb)
        if needed > budget * GB:
            raise ValueError(
                f"PermutationScorer would retain {needed / GB:.3g} GB on the host "
                f"(n_permutations={self.n_permutations} x {n_stats} score(s), "
                f"return_null={self.return_null}) but the host budget is "
                f"{budget:.3g} GB. Set return_null=False (p-values, null mean and "
                "std do not need it), lower n_permutations, or raise max_memory_gb."
            )

    def _fit_ridge(self, X, y, groups, splits, spec, entropy, raw, counter_args):
        """Fast path: permutations as extra targets through one SVD per fold."""
        Y = np.asarray(y, dtype=np.float64).reshape(X.shape[0], -1)
        n_samples, n_features = X.shape
        n_targets = Y.shape[1]
        columns = self.n_permutations * n_targets
        rank = min(n_samples, n_features)
        flops = 2.0 * len(splits) * n_samples * rank * columns * (spec.alphas.size + 2)
        backend = resolve_backend(self.device, flops=flops)
        self.backend_ = backend
        dtype = np.dtype(np.float32 if backend.device == "mps" else np.float64)
        estimator = self._get_estimator()
        if isinstance(estimator, BatchedRidge):
            dtype = _resolve_dtype(estimator.dtype, backend)
        scoring = self.scoring
        with contextlib.ExitStack() as stack:
            stack.enter_context(backend.context())
            Y_device = backend.asarray(Y, dtype)
            if flops < SMALL_FIT_FLOPS:
                stack.enter_context(_linalg.one_thread(Y_device))
            folds = _RidgeFolds(X, Y, Y_device, splits, spec, backend, dtype, scoring)
            observed = np.asarray(
                to_numpy(folds.scores(np.arange(n_samples)[None, :]))[0],
                dtype=np.float64,
            )
            counter = PermutationCounter(
                observed if raw else observed.mean(), **counter_args
            )

            def kernel(ids):
                return folds.scores(
                    permutation_indices(entropy, ids, n_samples, groups)
                )

            def reduce(ids, scores):
                counter.update(scores if raw else scores.mean(axis=1), ids)

            run_batched(
                kernel,
                reduce,
                n_items=self.n_permutations,
                backend=backend,
                device_bytes_per_item=folds.bytes_per_permutation(
                    n_samples, spec.alphas.size
                ),
                host_bytes_per_item=8 * (n_samples + n_targets),
                fixed_bytes=folds.nbytes,
                max_memory_gb=self.max_memory_gb,
                max_batch_size=max(1, MAX_COLUMNS_PER_BATCH // n_targets),
                threads=True,
                verbose=self.verbose,
                desc="permutations",
            )
        return counter

    def _fit_generic(
        self, estimator, X, y, groups, splits, entropy, raw, fit_params, counter_args
    ):
        """Generic path: refits of clones in joblib windows."""
        if raw:
            metric = _PER_TARGET_METRICS[self.scoring or "r2"]
            scorer = None
        else:
            metric = None
            scorer = check_scoring(estimator, self.scoring)
        args = dict(
            estimator=estimator,
            X=X,
            splits=splits,
            scorer=scorer,
            metric=metric,
            fit_params=fit_params,
        )
        observed = _cv_score(y=y, **args)
        counter = PermutationCounter(observed, **counter_args)
        task = functools.partial(
            _null_scores_task, y=y, groups=groups, entropy=entropy, **args
        )
        run_parallel(
            task,
            lambda ids, scores: counter.update(scores, ids),
            n_items=self.n_permutations,
            host_bytes_per_item=8 * np.size(observed),
            n_jobs=self.n_jobs,
            max_memory_gb=self.max_memory_gb,
            verbose=self.verbose,
            desc="permutations",
        )
        return counter
