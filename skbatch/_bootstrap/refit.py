"""The generic path: refits of the wrapped estimator through joblib.

Any estimator that the batched linear path does not solve is refit on the
rows of each replicate, in the order drawn
(:func:`skbatch.random.bootstrap_rows`), in joblib windows sized by
:func:`skbatch._engine.preflight.refit_window`. Tuning done on all data is held
fixed by :func:`replicate_estimator`.
"""

import functools
import warnings

import numpy as np
from sklearn.base import clone
from sklearn.linear_model import Ridge, RidgeCV

# Private to scikit-learn, without a public twin: the refits slice X, y and
# the fit parameters as its own cross-validation does (DataFrames by
# position, only the per-sample parameters); tests/test_private_names.py
# checks what is relied on here.
from sklearn.utils import _safe_indexing
from sklearn.utils.validation import _check_method_params

from .._engine import run_parallel
from .._engine.preflight import refit_window
from .._estimators.base import refit_params
from .._ridge.problems import check_replicate_weights
from ..banded import BandedRidge, held_banded_ridge
from ..random import bootstrap_rows
from ..ridge import AlphaEdgeWarning, AutocorrelationWarning, BatchedRidge
from .attributes import LINEAR_ATTRIBUTES, statistic, unwrap_search
from .summaries import accumulator_bytes, refuse_replicates


def replicate_estimator(fitted, estimator, tune_per_replicate, names):
    """The unfitted estimator of each replicate when tuning is held fixed.

    None when nothing is tuned (or tuning is redone per replicate): the
    replicates then refit a clone of ``estimator`` as given. A
    ``BandedRidge`` that chose nothing (one candidate, one alpha) is held
    all the same when only ``coef_`` / ``intercept_`` (``names``) are
    bootstrapped, for the batched path.
    """
    if tune_per_replicate:
        return None
    if isinstance(fitted, BandedRidge):
        searched = len(fitted.candidates_) > 1 or np.size(fitted.alphas) > 1
        linear = names is not None and set(names) <= set(LINEAR_ATTRIBUTES)
        return held_banded_ridge(fitted) if searched or linear else None
    if isinstance(fitted, BatchedRidge):
        if np.size(fitted.alphas) < 2:
            return None
        chosen = np.unique(fitted.alpha_)
        if chosen.size == 1:
            return clone(estimator).set_params(alphas=float(chosen[0]))
        return Ridge(
            alpha=np.asarray(fitted.alpha_), fit_intercept=fitted.fit_intercept
        )
    if type(fitted) is RidgeCV:
        return Ridge(alpha=fitted.alpha_, fit_intercept=fitted.fit_intercept)
    if hasattr(fitted, "best_params_"):
        if not hasattr(fitted, "best_estimator_"):
            raise ValueError(
                f"{type(fitted).__name__} must be built with refit=True for its "
                f"best parameters to be held fixed across replicates, or set "
                f"tune_per_replicate=True"
            )
        return clone(fitted.best_estimator_)
    return None


def _refit_replicates(
    ids,
    *,
    estimator,
    X,
    y,
    groups,
    block_size,
    block_scheme,
    entropy,
    fit_params,
    attributes,
    shapes,
):
    """Generic-path task: refit clones on the resampled rows of replicates ``ids``.

    Each refit gets X, y and the per-sample fit parameters (groups among
    them) indexed by its rows in the order drawn
    (:func:`skbatch.random.bootstrap_rows`): whole blocks of consecutive
    rows, whole clusters, so that an estimator that reads the rows' order
    (a delay, an inner time-series split) sees the resample as drawn.

    Returns an array of shape (len(ids), total size of the attributes), the
    attributes raveled and concatenated in the order of ``shapes``.
    """
    drawn = bootstrap_rows(
        entropy,
        ids,
        X.shape[0],
        groups,
        block_size=block_size,
        block_scheme=block_scheme,
    )
    sample_weight = fit_params.get("sample_weight")
    if sample_weight is not None:
        sample_weight = np.asarray(sample_weight)
        totals = np.array([sample_weight[rows].sum() for rows in drawn])
        check_replicate_weights(ids, totals[:, None])
    out = np.empty((len(ids), sum(int(np.prod(s)) for s in shapes.values())))
    for k, (item, indices) in enumerate(zip(ids, drawn)):
        try:
            with warnings.catch_warnings():
                # The fit on all data has said it once; not once per replicate.
                warnings.simplefilter("ignore", AutocorrelationWarning)
                warnings.simplefilter("ignore", AlphaEdgeWarning)
                fitted = clone(estimator).fit(
                    _safe_indexing(X, indices),
                    _safe_indexing(y, indices),
                    **_check_method_params(X, fit_params, indices),
                )
            values = statistic(unwrap_search(fitted), attributes)
            if list(values) != list(shapes):
                raise ValueError(
                    f"attributes gave {list(values)} but {list(shapes)} on all data"
                )
            for name, value in values.items():
                if value.shape != shapes[name]:
                    raise ValueError(
                        f"{name} has shape {value.shape} but {shapes[name]} on all data"
                    )
            out[k] = np.concatenate([v.ravel() for v in values.values()])
        except Exception as exc:
            # The estimator's own error, as scikit-learn's refits raise it,
            # with the replicate named in its traceback (Python 3.11 on).
            if hasattr(exc, "add_note"):
                exc.add_note(f"Raised in bootstrap replicate {int(item)}.")
            raise
    return out


def run_refits(settings, estimator, inputs, entropy, attributes, shapes, accumulators):
    """The generic path: refit every replicate through joblib, each into
    ``accumulators`` (name -> accumulator, in the order of ``shapes``)."""
    X, y, groups, data = inputs.X_fit, inputs.y_fit, inputs.groups, inputs.data
    # Each replicate's rows carry their groups.
    fit_params = refit_params(estimator, groups, inputs.fit_params)
    bounds, run = windowed_refits(settings, X, shapes, data)
    task = functools.partial(
        _refit_replicates,
        estimator=estimator,
        X=X,
        y=y,
        groups=groups,
        block_size=settings.block_size,
        block_scheme=settings.block_scheme,
        entropy=entropy,
        fit_params=fit_params,
        attributes=attributes,
        shapes=shapes,
    )

    def reduce(ids, result):
        for k, accumulator in enumerate(accumulators.values()):
            block = result[:, bounds[k] : bounds[k + 1]]
            accumulator.update(block.reshape((len(ids), *accumulator.shape)), ids=ids)

    run(task, reduce, n_items=settings.n_bootstrap, desc="replicates")


def windowed_refits(settings, X, shapes, data):
    """``(bounds, run)`` of the generic path's refits.

    ``bounds``: where each attribute of ``shapes`` starts in a refit's
    flat row of estimates (and where the last ends). ``run(task, reduce,
    n_items=..., desc=...)``: :func:`skbatch._engine.run_parallel` within
    the memory window that :func:`skbatch._engine.preflight.refit_window` grants
    (or refuses now, before any refit).
    """
    sizes = [int(np.prod(shape)) for shape in shapes.values()]
    bounds = np.cumsum([0, *sizes])
    window_gb, item_bytes = refit_window(
        settings.max_memory_gb,
        settings.n_jobs,
        data,
        accumulator_bytes(settings, shapes),
        X.shape[0],
        bounds[-1],
        functools.partial(refuse_replicates, settings),
    )
    run = functools.partial(
        run_parallel,
        host_bytes_per_item=item_bytes,
        n_jobs=settings.n_jobs,
        max_memory_gb=window_gb,
        verbose=settings.verbose,
    )
    return bounds, run
