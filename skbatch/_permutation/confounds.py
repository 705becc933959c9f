"""PermutationScorer's confounds: the score of X beyond them, Freedman–Lane.

With ``fit(X, y, confounds=Z)`` the statistic of the observed data and of
every resample is the cross-validated score of the estimator on ``[X, Z]``
(the confounds as its last columns) less that of least squares on ``Z``
with an intercept, on the same outer folds; the null's targets are
Freedman and Lane's: the fitted values of the least-squares fit of ``y`` on
``Z`` (all rows, the fit's ``sample_weight``) plus its residuals permuted
(or sign-flipped) as ``permutation_type`` says, within ``groups``
(:mod:`skbatch._ridge.confounds`).

:func:`confounded_inputs` checks the confounds and fits the reduced model
before any work, :func:`check_confounded_memory` refuses the fast path's
work that cannot fit, and :func:`run_confounded_paths` scores every
resample: on the ridge fast path as extra targets of both models'
decompositions (:class:`skbatch._ridge.confounds.ConfoundedPermutedProblem`),
otherwise by refits of both models (:func:`_confounded_task`).
"""

import functools
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp
from sklearn.base import is_classifier
from sklearn.metrics import check_scoring

from .._engine import run_parallel
from .._resampling.signed import signed_rows
from .._ridge.banded import banded_spec
from .._ridge.confounds import ConfoundedPermutedProblem, confound_fit, confounds_model
from .._ridge.freedman_lane import permuted_targets
from ..backend import backend_of_array, to_numpy
from .cv import _PER_TARGET_METRICS, _split_rows, _splits_ignore_y
from .paths import _cv_score, _ridge_pass, counting_reduce
from .plan import _counter


class Confounds(NamedTuple):
    """The confounds of a fit and the reduced model's fit on them.

    ``values`` (n_samples, n_confounds), float64; ``fitted`` and
    ``residuals`` of :func:`skbatch._ridge.confounds.confound_fit`, of shape
    (n_samples, n_targets); ``sample_weight`` of the fits (or None).
    """

    values: Any
    fitted: Any
    residuals: Any
    sample_weight: Any


def check_confounds(confounds, n_samples):
    """``confounds`` as a float64 array of shape (n_samples, n_confounds).

    Raises
    ------
    TypeError
        For a sparse matrix or values that are not numbers.
    ValueError
        For another number of rows than ``X`` has, no column, as many
        columns as rows less one or more, more than 2 dimensions, or missing
        or infinite values.

    Examples
    --------
    >>> from skbatch._permutation.confounds import check_confounds
    >>> check_confounds([1, 2, 3], 3).shape
    (3, 1)
    """
    if sp.issparse(confounds):
        raise TypeError(
            "confounds must be a dense array of shape (n_samples, n_confounds), "
            f"got a sparse {type(confounds).__name__}"
        )
    if backend_of_array(confounds) is not None:
        confounds = to_numpy(confounds)
    values = np.asarray(confounds)
    if values.dtype.kind not in "biuf":
        raise TypeError(
            f"confounds must hold numbers (bool, int or float), got dtype "
            f"{values.dtype}"
        )
    if values.ndim == 1:
        values = values[:, None]
    if values.ndim != 2:
        raise ValueError(
            f"confounds must be 1-D or 2-D, of shape (n_samples, n_confounds), "
            f"got shape {values.shape}"
        )
    if values.shape[0] != n_samples:
        raise ValueError(
            f"confounds must have one row per sample of X ({n_samples}), got "
            f"{values.shape[0]} rows"
        )
    if values.shape[1] == 0:
        raise ValueError(
            "confounds must have at least one column; pass confounds=None for "
            "no confounds"
        )
    if values.shape[1] + 1 >= n_samples:
        raise ValueError(
            f"confounds must have fewer columns than n_samples - 1 "
            f"({n_samples - 1}), got {values.shape[1]}: least squares on them "
            f"and an intercept would fit y exactly, leaving no residuals to "
            f"permute"
        )
    values = values.astype(np.float64)
    bad = ~np.isfinite(values)
    if bad.any():
        raise ValueError(
            f"confounds must be finite: {int(bad.sum())} missing or infinite "
            f"values (first at row {int(np.argwhere(bad)[0, 0])}). Impute or "
            f"drop those rows first."
        )
    return values


def confounded_inputs(estimator, inputs, confounds):
    """``(inputs, confounds)``: the data of a fit with confounds, checked
    before any work, and the reduced model fit on all rows.

    The returned :class:`~skbatch._permutation.inputs.FitInputs` hold the
    full design ``[X, Z]`` (in X's float dtype, float64 for any other;
    sparse if X is) as ``X``, what every fit of the estimator gets.
    """
    kind = type(estimator).__name__
    if is_classifier(estimator):
        raise ValueError(
            f"confounds are regressed out of a numeric y (Freedman-Lane), "
            f"for a regressor; got the classifier {kind}"
        )
    spec = banded_spec(estimator)
    if spec is not None and getattr(estimator, "bands", None) is not None:
        raise ValueError(
            f"confounds cannot be added to {kind}'s bands. Give the confounds "
            f"as a band of their own and test a band's unique variance with "
            f"skbatch.variance_partitioning(..., null='freedman_lane')"
        )
    y = inputs.y
    if y.dtype.kind not in "biuf":
        raise ValueError(
            f"confounds are regressed out of a numeric y; got y of dtype {y.dtype}"
        )
    X = inputs.X
    values = check_confounds(confounds, X.shape[0])
    # X's float precision is kept (float32 X stays float32, the confounds
    # rounded to it), as the estimator would compute on X alone.
    dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
    if sp.issparse(X):
        design = sp.hstack([X, sp.csr_matrix(values)], format=X.format)
        design = design.astype(dtype)
    else:
        try:
            design = np.hstack([np.asarray(X, dtype=dtype), values.astype(dtype)])
        except (TypeError, ValueError) as error:
            raise TypeError(
                f"With confounds, X and the confounds reach the estimator as "
                f"one float array; X's values are not numbers ({error})"
            ) from None
    sample_weight = inputs.fit_params.get("sample_weight")
    if sample_weight is not None:
        sample_weight = np.asarray(sample_weight, dtype=np.float64)
    Y = np.asarray(y, dtype=np.float64).reshape(X.shape[0], -1)
    fitted, residuals = confound_fit(values, Y, sample_weight)
    inputs = inputs._replace(X=design, X_fit=design, X_given=design)
    return inputs, Confounds(values, fitted, residuals, sample_weight)


def check_confounded_memory(settings, paths, confounds, n_items):
    """Refuse, before any fit, a fast path whose two models' work cannot
    fit the budget (:meth:`ConfoundedPermutedProblem.check_memory`)."""
    if not paths.fast:
        return
    ridge = paths.ridge
    X, Y = ridge["X"], ridge["Y"]
    ConfoundedPermutedProblem.check_memory(
        X,
        confounds.values,
        Y,
        paths.splits,
        ridge["spec"],
        [ridge["inner_scheme"](X[train], Y[train], train) for train, _ in paths.splits],
        ridge["backend"],
        ridge["dtype"],
        n_permutations=n_items,
        max_memory_gb=settings.max_memory_gb,
    )


def run_confounded_paths(settings, estimator, inputs, resamples, paths, confounds):
    """The exceedance counter of every metric of the score beyond
    ``confounds``, as :func:`skbatch._permutation.paths.run_paths` returns
    them."""
    backend, counters = paths.backend, {}
    permutation = dict(
        entropy=resamples.entropy, groups=inputs.groups, **resamples.permutation
    )
    if paths.fast:
        ridge = paths.ridge
        backend = ridge["backend"]
        problem = functools.partial(
            ConfoundedPermutedProblem,
            ridge["X"],
            confounds.values,
            confounds.fitted,
            confounds.residuals,
            paths.splits,
            ridge["spec"],
            ridge["inner_scheme"],
            backend,
            ridge["dtype"],
        )
        # Both models score every metric on the same targets: one pass.
        counters = _ridge_pass(
            settings,
            problem,
            backend,
            ridge["dtype"],
            ridge["flops"],
            permutation,
            resamples.n_items,
            settings.raw,
            paths.fast,
        )
    if paths.slow:
        generic = _fit_generic(
            settings,
            estimator,
            inputs,
            paths,
            confounds,
            resamples.n_items,
            permutation,
        )
        counters = {name: {**counters, **generic}[name] for name in paths.metrics}
    return backend, counters


def _scorers(estimator, metrics, raw):
    """``(scorer, metric)`` of each scoring, as
    :func:`skbatch._permutation.paths._cv_score` takes them."""
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
    return scorers


def _gain(y, *, estimator, design, confounds, cv, splits, groups, full, reduced):
    """Each metric's cross-validated score of the estimator on ``design``
    less that of :func:`confounds_model` on ``confounds``, same folds.

    ``full`` and ``reduced``: each model's ``(scorers, fit parameters)``;
    ``splits`` None splits ``y`` with ``cv`` (folds that depend on it).
    """
    folds = splits if splits is not None else _split_rows(cv, design, y, groups)
    f_full = _cv_score(estimator, design, y, folds, *full)
    f_reduced = _cv_score(confounds_model(), confounds, y, folds, *reduced)
    return [np.asarray(a) - np.asarray(b) for a, b in zip(f_full, f_reduced)]


def _confounded_task(ids, *, fitted, residuals, y_shape, entropy, permutation, gain):
    """The score beyond the confounds of resamples ``ids``: a joblib task,
    numpy in, numpy out, one row per resample (every metric's values in
    turn). Resample k's targets are ``fitted + P_k residuals``."""
    codes = signed_rows(
        entropy, ids, fitted.shape[0], permutation["groups"], **permutation["scheme"]
    )
    scores = []
    for code in codes:
        y = permuted_targets(fitted, residuals, code[None]).reshape(y_shape)
        scores.append(np.concatenate([np.ravel(value) for value in gain(y)]))
    return np.stack(scores)


def _fit_generic(settings, estimator, inputs, paths, confounds, n_items, permutation):
    """Refits of both models on every fold of every resample, in joblib
    windows: a counter per metric of ``paths.slow``."""
    raw = settings.raw
    metrics = paths.slow
    reduced_params = (
        {}
        if confounds.sample_weight is None
        else {"sample_weight": confounds.sample_weight}
    )
    gain = functools.partial(
        _gain,
        estimator=estimator,
        design=inputs.X_fit,
        confounds=confounds.values,
        cv=paths.cv,
        splits=paths.splits if _splits_ignore_y(paths.cv) else None,
        groups=inputs.groups,
        full=(_scorers(estimator, metrics, raw), paths.refits),
        reduced=(_scorers(confounds_model(), metrics, raw), reduced_params),
    )
    observed = gain(inputs.y)
    shapes = [np.shape(value) for value in observed]
    sizes = [int(np.prod(shape)) for shape in shapes]
    bounds = np.cumsum([0, *sizes])
    counters = {
        name: _counter(
            settings,
            value if raw else np.mean(value),
            np.float64,
            n_items,
            permutation["exact"],
            scoring,
        )
        for (name, scoring), value in zip(metrics.items(), observed)
    }
    scheme = {
        key: permutation[key] for key in ("permutation_type", "block_size", "exact")
    }
    task = functools.partial(
        _confounded_task,
        fitted=confounds.fitted,
        residuals=confounds.residuals,
        y_shape=inputs.y.shape,
        entropy=permutation["entropy"],
        permutation=dict(groups=permutation["groups"], scheme=scheme),
        gain=gain,
    )

    reduce = counting_reduce(counters, shapes, bounds, raw)

    run_parallel(
        task,
        reduce,
        n_items=n_items,
        host_bytes_per_item=8 * sum(sizes),
        n_jobs=settings.n_jobs,
        max_memory_gb=settings.max_memory_gb,
        verbose=settings.verbose,
        desc="permutations",
    )
    return counters
