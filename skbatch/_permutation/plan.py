"""What a PermutationScorer fit settles before any work.

The resampling scheme checked against the data (with the warning against
shuffling autocorrelated rows), whether the ridge fast path applies (and
why not) and which metrics it scores, the memory preflights of the
retained results and of the refits, the fast path's device, dtype and
memory plan, and the exceedance counter of each metric with its tie
tolerance. Functions of the scorer's
parameters (:class:`~skbatch._permutation.inputs.Settings`) and the data;
:mod:`skbatch._permutation.paths` runs the paths they plan.
"""

import functools
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import is_classifier
from sklearn.model_selection import check_cv

from .._engine.planner import _say
from .._engine.preflight import DataBytes, refit_window, refuse
from .._kernels.timeseries import autocorrelation_warning
from .._resampling.sign_flip import SIGN_FLIP
from .._resampling.signed import count_resamples, signed_rows
from .._ridge.banded import banded_spec, permuted_problem
from .._ridge.covariance_resampling import (
    CovariancePermutedProblem,
    permuted_decomposition,
)
from .._ridge.cv import cv_scheme
from .._ridge.problems import DEVICE_SCORINGS, PermutedRidgeProblem
from .._ridge.spec import check_column_scales, refit_reason, resolve_dtype, ridge_spec
from ..backend import resolve_backend
from ..memory import GB, memory_budget
from ..ridge import AutocorrelationWarning
from ..streaming import PermutationCounter
from .cv import _metrics, _splits_ignore_y

# Scores bounded by 1 whose round-off is relative to 1, not to the score:
# R^2 = 1 - SSE / SST near 0 still carries errors of order eps.
_UNIT_SCALE_SCORINGS = (None, "r2", "correlation", "explained_variance")
# A permuted score this many units in the last place (of the compute dtype,
# relative to the score's scale) below the observed one counts as a tie: the
# same score computed in batches of other widths differs by a few ulps per
# summed row, and a permutation that reproduces the data must count.
TIE_ULPS = 1000


def _warn_if_autocorrelated(y, groups, moved="y"):
    """Warn when shuffling rows of ``y`` that are clearly autocorrelated
    (:func:`skbatch._kernels.timeseries.autocorrelation_warning`); labels
    (classifiers' ``y``) are not checked. ``moved`` names what the rows are
    of in the message."""
    y = np.asarray(y)
    if y.dtype.kind not in "biuf":
        return
    found = autocorrelation_warning(y, groups)
    if found is None or found[0] <= found[1]:
        return
    within = "within groups" if groups is not None else "(no groups given)"
    warnings.warn(
        f"The rows of {moved} are autocorrelated {within}: median lag-1 "
        f"autocorrelation {found[0]:.2f} over the targets, above {found[1]:.2f}. "
        f"permutation_type='shuffle' breaks that dependence, so the null is "
        f"too narrow and the p-values too small. Use "
        f"permutation_type='circular_shift' or 'block_shuffle' (with "
        f"block_size), with the runs as groups.",
        AutocorrelationWarning,
        # _warn_if_autocorrelated, _plan_resamples, fit, atomic_fit.
        stacklevel=5,
    )


def _plan_resamples(settings, estimator, y, groups, moved="y"):
    """``(permutation, n_items)``: the resampling scheme's parameters
    (``permutation_type``, ``block_size``, ``exact``) and how many resamples
    to score, checked against ``y`` and ``groups`` before any work."""
    n_samples = y.shape[0]
    permutation = dict(
        permutation_type=settings.permutation_type, block_size=settings.block_size
    )
    if settings.permutation_type == SIGN_FLIP and (
        is_classifier(estimator) or y.dtype.kind not in "biuf"
    ):
        raise ValueError(
            f"permutation_type='sign_flip' flips the sign of rows of a "
            f"numeric y, for a regressor; got {type(estimator).__name__} "
            f"with y of dtype {y.dtype}. Use permutation_type='shuffle' "
            f"for labels."
        )
    # Checks the scheme against the groups (a block longer than a group)
    # before any work.
    signed_rows(0, [0], n_samples, groups, **permutation)
    if settings.permutation_type == "shuffle":
        _warn_if_autocorrelated(y, groups, moved)
    n_distinct = count_resamples(
        n_samples, groups, **permutation, limit=settings.n_permutations
    )
    # Every distinct permutation fits: each once, instead of draws.
    permutation["exact"] = n_distinct is not None
    n_items = settings.n_permutations if n_distinct is None else n_distinct
    return permutation, n_items


def _fast_path(settings, estimator, inputs, cv, splits):
    """``(spec, reason)``: the ridge problem of the fast path, or None and
    why not, the reason None for an estimator nobody expects there (see
    :func:`skbatch._ridge.spec.refit_reason`); ``inputs``, the
    :class:`~skbatch._permutation.inputs.FitInputs`."""
    X, fit_params, n_targets = inputs.X, inputs.fit_params, inputs.n_targets
    spec = banded_spec(estimator) or ridge_spec(estimator)
    if spec is None:
        return None, refit_reason(estimator)
    if fit_params:
        reason = f"fit parameters {sorted(fit_params)} go to every refit"
    elif sp.issparse(X):
        reason = "X is sparse"
    elif not any(s in DEVICE_SCORINGS for s in _metrics(settings.scoring).values()):
        reason = (
            f"scoring={settings.scoring!r} is not among the fast path's "
            f"{DEVICE_SCORINGS}"
        )
    elif not _splits_ignore_y(cv):
        reason = f"the folds of cv={cv!r} depend on y, split again per permutation"
    elif min(len(train) for train, _ in splits) < 2:
        # BatchedRidge refuses a one-row training fold, Ridge fits it.
        reason = "a training fold has fewer than 2 rows"
    elif spec.fixed_per_target and spec.alphas.size not in (1, n_targets):
        # The estimator's fit refuses it.
        reason = f"{spec.alphas.size} alphas for {n_targets} targets"
    elif (
        spec.cv is not None
        and not isinstance(spec.cv, str)
        and not _splits_ignore_y(check_cv(spec.cv))
    ):
        # Its own inner folds depend on y: its refits decide them.
        reason = f"the estimator's inner cv={spec.cv!r} splits depend on y"
    else:
        return spec, None
    return None, reason


def _split_metrics(settings, estimator, spec, reason, metrics):
    """``(fast, slow)``: the metrics (name -> scoring) of the ridge fast
    path, ``spec`` (None: no metric) scoring those among its scorings, and
    those scored by refits; at ``verbose >= 1``, says why there are refits
    (``reason``, from :func:`_fast_path`)."""
    kind = type(estimator).__name__
    if reason is not None:
        _say(
            settings.verbose,
            f"PermutationScorer refits {kind} on every fold of every "
            f"permutation (the generic path): {reason}.",
        )
    # Metrics the fast path scores there, the others by refits.
    fast = {
        name: scoring
        for name, scoring in metrics.items()
        if spec is not None and scoring in DEVICE_SCORINGS
    }
    slow = {name: s for name, s in metrics.items() if name not in fast}
    if fast and slow:
        _say(
            settings.verbose,
            f"PermutationScorer refits {kind} for the metrics {sorted(slow)}: "
            f"the fast path scores only {DEVICE_SCORINGS}.",
        )
    return fast, slow


def _check_host_memory(settings, n_stats):
    # The counter, and one id per permutation that the engine hands out.
    needed = 8 * settings.n_permutations + PermutationCounter.nbytes_needed(
        n_stats,
        settings.n_permutations,
        keep_null=settings.return_null,
        alternative=settings.alternative,
    )
    budget = memory_budget(None, settings.max_memory_gb)
    if needed > budget * GB:
        raise ValueError(
            f"PermutationScorer would retain {needed / GB:.3g} GB on the host "
            f"(n_permutations={settings.n_permutations} x {n_stats} "
            f"{'score' if n_stats == 1 else 'scores'}, "
            f"return_null={settings.return_null}) but the host budget is "
            f"{budget:.3g} GB. Set return_null=False (p-values, null mean and "
            "std do not need it), lower n_permutations, or raise max_memory_gb."
        )


def _check_refit_memory(settings, inputs, n_stats):
    """Refuse, before any fit, refits whose copies of the data exceed the
    budget: each worker of the generic path refits on one (``inputs``, the
    :class:`~skbatch._permutation.inputs.FitInputs`)."""
    X, y = inputs.X, inputs.y
    data = DataBytes.of(inputs.X_given, inputs.y_given, X, y, inputs.fit_params)
    summaries = PermutationCounter.nbytes_needed(
        n_stats,
        settings.n_permutations,
        keep_null=settings.return_null,
        alternative=settings.alternative,
    )
    refit_window(
        settings.max_memory_gb,
        settings.n_jobs,
        data,
        summaries,
        X.shape[0],
        n_stats,
        functools.partial(_refuse, settings),
    )


def _refuse(settings, need, budget, where, parts):
    refuse(
        "PermutationScorer",
        settings.max_memory_gb,
        "Lower n_jobs, set return_null=False, use fewer targets or samples, "
        "or raise max_memory_gb.",
        need,
        budget,
        where,
        parts,
    )


def _counter(settings, observed, dtype, n_items, exact, scoring):
    """The exceedance counter of ``n_items`` permutations (every distinct
    one if ``exact``) of a ``scoring``, with ties judged at ``dtype``'s
    round-off."""
    scale = np.abs(observed)
    if scoring in _UNIT_SCALE_SCORINGS:
        scale = np.maximum(scale, 1.0)
    tolerance = TIE_ULPS * np.finfo(dtype).eps * np.nan_to_num(scale)
    return PermutationCounter(
        observed,
        n_total=n_items,
        keep_null=settings.return_null,
        tolerance=tolerance,
        exact=exact,
        alternative=settings.alternative,
    )


def _plan_ridge(settings, inputs, splits, spec, n_items, inner_groups):
    """The fast path's device, dtype and work for ``n_items``
    permutations of ``inputs`` (the
    :class:`~skbatch._permutation.inputs.FitInputs`), its memory checked.
    ``inner_groups`` (or None) are the groups the estimator's own CV splits
    each training fold's rows by.

    Returns
    -------
    ridge : dict
        ``X`` and ``Y`` in float64, ``spec``, ``backend``, ``dtype``,
        ``flops``, ``inner_scheme``, ``problem_class`` (the decomposition
        :func:`~skbatch._ridge.covariance_resampling.permuted_decomposition`
        chose) and ``fallback`` (the SVD's memory check), for
        :func:`skbatch._permutation.paths._fit_ridge`.
    """
    input_dtype = np.asarray(inputs.X).dtype
    X = np.asarray(inputs.X, dtype=np.float64)
    Y = np.asarray(inputs.y, dtype=np.float64).reshape(X.shape[0], -1)
    n_samples, n_features = X.shape
    columns = n_items * Y.shape[1]
    rank = min(n_samples, n_features)
    n_alphas = 1 if spec.fixed_per_target else spec.alphas.size
    flops = 2.0 * len(splits) * n_samples * rank * columns * (n_alphas + 2)
    backend = resolve_backend(settings.device, flops=flops)
    # scikit-learn's estimators in float64 whatever X (float32 on MPS):
    # ties with the observed score are judged at the compute precision
    # (TIE_ULPS), so the null is computed as precisely as the device
    # allows. A BatchedRidge computes in its own dtype.
    own_dtype = spec.dtype != "input"
    dtype = resolve_dtype(spec.dtype, backend, input_dtype if own_dtype else None)
    check_column_scales(
        X, dtype, backend, fit_intercept=spec.fit_intercept, alphas=spec.alphas
    )

    def inner_scheme(X_train, Y_train, train):
        groups = None if inner_groups is None else inner_groups[train]
        return cv_scheme(spec.cv, spec.scoring).split(X_train, Y_train, groups=groups)

    schemes = [inner_scheme(X[train], Y[train], train) for train, _ in splits]
    memory = dict(n_permutations=n_items, max_memory_gb=settings.max_memory_gb)
    check = (X, Y, splits, spec, schemes, backend, dtype)
    problem_class = permuted_problem(spec)
    if permuted_decomposition(spec, X, splits, schemes) == "covariance":
        problem_class = CovariancePermutedProblem
    problem_class.check_memory(*check, **memory)
    return dict(
        X=X,
        Y=Y,
        spec=spec,
        backend=backend,
        dtype=dtype,
        flops=flops,
        inner_scheme=inner_scheme,
        problem_class=problem_class,
        # The SVD's memory, checked before "auto" turns to it
        # (skbatch._ridge.covariance_resampling.build_permuted_problem).
        fallback=functools.partial(PermutedRidgeProblem.check_memory, *check, **memory),
    )
