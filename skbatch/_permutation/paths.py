"""The two paths of PermutationScorer's null: the ridge fast path and refits.

Both score the same resamples (one seed stream per resample, see
:mod:`skbatch.random`) and stream their scores into one exceedance
counter per metric (:func:`skbatch._permutation.plan._counter`):

- the ridge fast path (:func:`_fit_ridge`): resampling ``y`` (permuting
  its rows or flipping their signs) leaves the decomposition of every
  fold's ``X`` unchanged, so each outer fold is decomposed once and a batch
  of resamples goes through it as extra target columns, alpha selection
  included, on the device and in batches the engine sizes
  (:func:`skbatch._engine.run_problem`);
- the generic path (:func:`_fit_generic`): refits of clones of any
  estimator on every fold of every resample, in bounded joblib windows
  (:func:`skbatch._engine.run_parallel`), scored as
  ``permutation_test_score`` scores (:func:`_cv_score`).

:func:`run_paths` runs each metric on the path
:class:`~skbatch.PermutationScorer` chose for it.
"""

import contextlib
import functools
import warnings

import numpy as np
from sklearn.base import clone
from sklearn.metrics import check_scoring

# Private to scikit-learn, without a public twin: the row slicing of its own
# cross-validation. The folds and permutations slice X, y and the fit
# parameters as permutation_test_score does (DataFrames by position, a
# precomputed kernel on both axes, only the per-sample parameters);
# tests/test_private_names.py checks what is relied on here.
from sklearn.utils import _safe_indexing
from sklearn.utils.metaestimators import _safe_split
from sklearn.utils.validation import _check_method_params

from .. import _backends
from .._engine import run_parallel, run_problem
from .._resampling.sign_flip import split_signed_rows
from .._resampling.signed import signed_rows
from .._ridge.covariance_resampling import (
    CovariancePermutedProblem,
    build_permuted_problem,
)
from .._ridge.problems import PermutedRidgeProblem
from ..backend import to_numpy
from ..ridge import AlphaEdgeWarning, AutocorrelationWarning
from .cv import (
    _PER_TARGET_METRICS,
    _flipped,
    _per_target_score,
    _split_rows,
    _splits_ignore_y,
)
from .plan import _counter

# Below this much work (FLOPs of the whole fast path) every product is small
# and BLAS / torch threads synchronise more than they compute: 2-20x slower
# than one thread on busy cores (torch's SVD of a 400 x 50 fold: 0.5 ms
# alone, 250 ms beside one other process), while one
# thread costs at most a few ms here; drawing the permutations dominates.
SMALL_FIT_FLOPS = 1e9


def _cv_score(estimator, X, y, splits, scorers, fit_params):
    """Mean over folds of the test score, as ``permutation_test_score`` does,
    for each ``(scorer, metric)`` of ``scorers``: a list, one per scorer.

    One clone is refit on every fold, as scikit-learn does, so an estimator
    holding a random state draws the same sequence; every scorer scores
    that fit. ``metric`` (a function and a sign) gives per-target scores of
    the fold's predictions; otherwise ``scorer`` gives one, or with
    ``metric="scorer"`` one per target.
    """
    estimator = clone(estimator)
    scores = [[] for _ in scorers]
    for train, test in splits:
        X_train, y_train = _safe_split(estimator, X, y, train)
        X_test, y_test = _safe_split(estimator, X, y, test, train)
        with warnings.catch_warnings():
            # The fit on all data has said it once; not once per refit.
            warnings.simplefilter("ignore", AutocorrelationWarning)
            warnings.simplefilter("ignore", AlphaEdgeWarning)
            estimator.fit(
                X_train, y_train, **_check_method_params(X, fit_params, indices=train)
            )
        predictions = None
        for (scorer, metric), fold_scores in zip(scorers, scores):
            if metric is None:
                fold_scores.append(scorer(estimator, X_test, y_test))
            elif metric == "scorer":
                value = scorer(estimator, X_test, y_test)
                fold_scores.append(_per_target_score(value, y))
            else:
                function, sign = metric
                if predictions is None:
                    predictions = estimator.predict(X_test)
                fold_scores.append(
                    sign * function(y_test, predictions, multioutput="raw_values")
                )
    # A scorer's values flattened, as scikit-learn averages whatever it returns.
    return [
        np.mean(fold_scores) if metric is None else np.mean(fold_scores, axis=0)
        for (_, metric), fold_scores in zip(scorers, scores)
    ]


def _null_scores_task(
    ids,
    *,
    estimator,
    X,
    y,
    cv,
    splits,
    groups,
    entropy,
    permutation,
    scorers,
    fit_params,
):
    """Scores of permutations ``ids``: a joblib task, numpy in, numpy out.

    One row per permutation: the values of every scorer, flattened in turn.
    ``splits`` None re-splits every permuted ``y`` with ``cv``, whose folds
    then depend on it (stratified splitters).
    """
    codes = signed_rows(entropy, ids, y.shape[0], groups, **permutation)
    scores = []
    for code in codes:
        perm, signs = split_signed_rows(code)
        permuted = _safe_indexing(y, perm)
        if signs is not None:
            permuted = _flipped(permuted, signs)
        if hasattr(y, "index") and hasattr(permuted, "set_axis"):
            # The permuted values on y's own index: pandas code that aligns
            # on it (X.join(y)) would otherwise put the rows back in order.
            # A frame that is only row-sliceable (``iloc``, as scikit-learn
            # slices it) has no index to keep, and is passed as sliced.
            permuted = permuted.set_axis(y.index, axis=0)
        folds = splits
        if folds is None:
            folds = _split_rows(cv, X, permuted, groups)
        values = _cv_score(estimator, X, permuted, folds, scorers, fit_params)
        scores.append(np.concatenate([np.ravel(value) for value in values]))
    return np.stack(scores)


def _fit_ridge(
    settings, X, y, groups, splits, ridge, entropy, raw, permutation, n_items, metrics
):
    """Fast path: permutations as extra targets through one decomposition
    (an SVD, or an ``eigh`` of the covariance) per training set.

    ``ridge`` is what :func:`~skbatch._permutation.plan._plan_ridge`
    planned; ``metrics`` (name -> scoring) are among
    ``DEVICE_SCORINGS``. Returns the backend and a counter per metric.
    """
    X, Y, spec = ridge["X"], ridge["Y"], ridge["spec"]
    backend, dtype = ridge["backend"], ridge["dtype"]
    flops, inner_scheme = ridge["flops"], ridge["inner_scheme"]
    problem_class = ridge["problem_class"]
    # The problem scores every metric on the same predictions where its
    # scores() is PermutedRidgeProblem's or the covariance's; otherwise one
    # pass per metric.
    shared = (PermutedRidgeProblem.scores, CovariancePermutedProblem.scores)
    if len(metrics) > 1 and problem_class.scores in shared:
        passes = [list(metrics)]
    else:
        passes = [[name] for name in metrics]
    problem = functools.partial(
        build_permuted_problem,
        problem_class,
        X,
        Y,
        splits,
        spec,
        inner_scheme,
        backend,
        dtype,
        solver=getattr(spec, "solver", "svd"),
        fallback=ridge["fallback"],
    )
    counters = {}
    for names in passes:
        scorings = tuple(metrics[name] for name in names)
        counters.update(
            _ridge_pass(
                settings,
                problem,
                backend,
                dtype,
                flops,
                dict(entropy=entropy, groups=groups, **permutation),
                n_items,
                raw,
                dict(zip(names, scorings)),
            )
        )
    return backend, counters


def _ridge_pass(
    settings, problem, backend, dtype, flops, permutation, n_items, raw, metrics
):
    """One run of the fast path's problem over every permutation, scoring
    ``metrics`` (name -> scoring) on the same predictions: their counters.

    ``problem(scoring, n_permutations=, permutation=)`` builds it: the
    problem class with the data, folds, spec, inner scheme, backend and
    dtype of :func:`_fit_ridge` already bound.
    """
    scorings = tuple(metrics.values())
    with contextlib.ExitStack() as stack:
        stack.enter_context(backend.context())
        if flops < SMALL_FIT_FLOPS:
            stack.enter_context(_backends.get(backend.library).one_thread())
        problem = problem(
            scorings[0] if len(scorings) == 1 else scorings,
            n_permutations=n_items,
            permutation=permutation,
        )
        n_targets = problem.n_targets
        observed = np.asarray(to_numpy(problem.observed()), dtype=np.float64)
        # Metric k's scores are columns k * n_targets ... of every row.
        counters = {}
        for k, (name, scoring) in enumerate(metrics.items()):
            part = observed[k * n_targets : (k + 1) * n_targets]
            counters[name] = _counter(
                settings,
                part if raw else part.mean(),
                dtype,
                n_items,
                permutation["exact"],
                scoring,
            )

        def reduce(ids, scores):
            for k, counter in enumerate(counters.values()):
                part = scores[:, k * n_targets : (k + 1) * n_targets]
                counter.update(part if raw else part.mean(axis=1), ids)

        run_problem(
            problem,
            reduce,
            max_memory_gb=settings.max_memory_gb,
            verbose=settings.verbose,
        )
    return counters


def counting_reduce(counters, shapes, bounds, raw):
    """The reduction of refit tasks' scores into ``counters``: a batch's
    rows are permutations, its columns each metric's values (``bounds``),
    counted per target (``raw``, reshaped to ``shapes``) or averaged."""

    def reduce(ids, scores):
        scores = scores.reshape(len(ids), -1)
        for counter, shape, lo, hi in zip(
            counters.values(), shapes, bounds[:-1], bounds[1:]
        ):
            part = scores[:, lo:hi]
            if raw:
                counter.update(part.reshape(len(ids), *shape), ids)
            else:
                counter.update(part.mean(axis=1), ids)

    return reduce


def _fit_generic(
    settings,
    estimator,
    X,
    y,
    groups,
    cv,
    splits,
    entropy,
    raw,
    permutation,
    fit_params,
    n_items,
    metrics,
):
    """Generic path: refits of clones in joblib windows, a counter per
    metric of ``metrics`` (name -> scoring).

    ``splits`` None: folds depend on ``y`` and are drawn anew for every
    permuted ``y``.
    """
    scorers = []
    for scoring in metrics.values():
        scorer = metric = None
        if raw and callable(scoring):
            scorer, metric = scoring, "scorer"
        elif raw or scoring == "correlation":
            metric = _PER_TARGET_METRICS[scoring or "r2"]
        else:
            scorer = check_scoring(estimator, scoring)
        scorers.append((scorer, metric))
    args = dict(
        estimator=estimator,
        X=X,
        scorers=scorers,
        fit_params=fit_params,
    )
    observed = _cv_score(y=y, splits=splits or _split_rows(cv, X, y, groups), **args)
    shapes = [np.shape(value) for value in observed]
    sizes = [int(np.prod(shape)) for shape in shapes]
    host_bytes_per_item = 8 * sum(sizes)
    bounds = np.cumsum([0, *sizes])
    counters = {
        name: _counter(
            settings,
            # A per-target metric averaged over targets, as r2_score does.
            value if raw else np.mean(value),
            np.float64,
            n_items,
            permutation["exact"],
            scoring,
        )
        for (name, scoring), value in zip(metrics.items(), observed)
    }
    task = functools.partial(
        _null_scores_task,
        y=y,
        # The splitter travels only when the folds are drawn per permutation.
        cv=cv if splits is None else None,
        splits=splits,
        groups=groups,
        entropy=entropy,
        permutation=permutation,
        **args,
    )

    reduce = counting_reduce(counters, shapes, bounds, raw)

    run_parallel(
        task,
        reduce,
        n_items=n_items,
        host_bytes_per_item=host_bytes_per_item,
        n_jobs=settings.n_jobs,
        max_memory_gb=settings.max_memory_gb,
        verbose=settings.verbose,
        desc="permutations",
    )
    return counters


def run_paths(settings, estimator, inputs, resamples, paths):
    """The exceedance counter of every metric, in the order of
    ``paths.metrics``: those of ``paths.fast`` from the ridge fast path,
    the others from refits of ``estimator``.

    Returns
    -------
    backend : Backend
        Where the fast path computed; ``paths.backend`` without it.
    counters : dict
        Metric name (None for a single metric) ->
        :class:`~skbatch.streaming.PermutationCounter`.
    """
    backend, counters = paths.backend, {}
    if paths.fast:
        backend, counters = _fit_ridge(
            settings,
            inputs.X,
            inputs.y,
            inputs.groups,
            paths.splits,
            paths.ridge,
            resamples.entropy,
            settings.raw,
            resamples.permutation,
            resamples.n_items,
            paths.fast,
        )
    if paths.slow:
        generic = _fit_generic(
            settings,
            estimator,
            inputs.X_fit,
            inputs.y_fit,
            inputs.groups,
            paths.cv,
            paths.splits if _splits_ignore_y(paths.cv) else None,
            resamples.entropy,
            settings.raw,
            resamples.permutation,
            paths.refits,
            resamples.n_items,
            paths.slow,
        )
        counters = {name: {**counters, **generic}[name] for name in paths.metrics}
    return backend, counters


def warn_if_undefined(counters):
    """Warn once per metric whose observed score is NaN for some target."""
    for name, counter in counters.items():
        undefined = np.isnan(counter.observed)
        if undefined.any():
            warnings.warn(
                f"The cross-validated score"
                f"{'' if name is None else f' {name!r}'} is undefined (NaN) for "
                f"{int(undefined.sum())} of {undefined.size} "
                f"{'target' if undefined.size == 1 else 'targets'}, for example "
                f"R^2 or correlation on test folds of fewer than 2 rows, or a "
                f"constant target; their p-values are NaN. Use folds with more "
                f"test rows (cv) or another scoring.",
                UserWarning,
                # warn_if_undefined, fit, atomic_fit.
                stacklevel=4,
            )
