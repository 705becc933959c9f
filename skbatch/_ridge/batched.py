"""Every target of a ``BatchedRidge`` fit: checked, solved, and warned about.

:func:`fit_batched_ridge` runs ``BatchedRidge.fit`` past its checks of the
input (the scheme split, the backend and the compute dtype resolved): the
checks that need the compute dtype and the memory budget, before any SVD;
the choice of alpha and the fit of every target, in batches; and the
warnings about what the fit says of the grid of alphas and of the rows.
"""

import numpy as np

from .covariance import CovarianceSolver, choose_decomposition, covariance_solver
from .fit_warnings import (
    no_model_scores,
    warn_at_grid_edges,
    warn_if_autocorrelated,
    warn_undefined_best_scores,
)
from .magnitudes import checked_targets
from .problems import (
    RidgeSolver,
    check_solver_memory,
    fit_targets,
    mean_over_scored_targets,
)
from .spec import check_column_scales

__all__ = ["fit_batched_ridge"]


def fit_batched_ridge(
    X,
    Y,
    sample_weight,
    groups,
    alphas,
    scheme,
    backend,
    dtype,
    *,
    out_of_core,
    cv,
    fit_intercept,
    scoring,
    alpha_per_target,
    batch_size,
    max_memory_gb,
    verbose,
    solver="auto",
):
    """Choose alphas and fit all targets ``Y`` on ``X``, as ``BatchedRidge``.

    ``X``, ``Y`` (a host array, or the array on disk with ``out_of_core``),
    ``sample_weight`` and ``groups`` are those of
    :func:`skbatch._estimators.fit_checks.fit_data` and ``scheme`` is split; the other
    arguments are ``BatchedRidge``'s parameters, ``backend`` and ``dtype``
    resolved; ``solver`` chooses the decomposition
    (:func:`~skbatch._ridge.covariance.choose_decomposition`). Warnings name
    the caller of ``BatchedRidge.fit``.

    Returns
    -------
    coef, intercept, best, best_score, scores : ndarrays
        As :func:`~skbatch._ridge.problems.fit_targets` returns them.
    mean_scores : ndarray of shape (n_alphas,) or None
        With one alpha for all targets (``alpha_per_target=False``), the
        mean over the targets scored of each alpha's scores; else None.
    decomposition : {"svd", "covariance"}
        The decomposition the fit used.
    """
    n_samples, n_features = X.shape
    n_targets = Y.shape[1]
    check_column_scales(
        X,
        dtype,
        backend,
        fit_intercept=fit_intercept,
        sample_weight=sample_weight,
        alphas=alphas,
    )
    targets = checked_targets(X, Y, dtype, out_of_core)
    memory = dict(n_targets=n_targets, n_alphas=alphas.size)
    solver_args = (X, sample_weight, alphas, scheme, backend, dtype)
    options = dict(fit_intercept=fit_intercept, scoring=scoring)
    with backend.context():
        ridge_solver = None
        if choose_decomposition(solver, scheme, X) == "covariance":
            check_solver_memory(
                n_samples,
                n_features,
                scheme,
                dtype,
                backend,
                max_memory_gb,
                solver=CovarianceSolver,
                **memory,
            )
            ridge_solver = covariance_solver(*solver_args, **options, solver=solver)
        if ridge_solver is None:
            check_solver_memory(
                n_samples,
                n_features,
                scheme,
                dtype,
                backend,
                max_memory_gb,
                **memory,
            )
            ridge_solver = RidgeSolver(*solver_args, **options)
        results = fit_targets(
            ridge_solver,
            targets,
            alpha_per_target=alpha_per_target,
            batch_size=batch_size,
            max_memory_gb=max_memory_gb,
            verbose=verbose,
        )
    coef, intercept, best, best_score, scores, batch_size = results

    no_model = no_model_scores(
        scheme, Y, targets, sample_weight, scoring, fit_intercept, batch_size
    )
    # Past the warning's function, this one, fit and its atomic wrapper.
    stacklevel = 5
    mean_scores = None
    if alpha_per_target:
        warn_at_grid_edges(alphas, best, scores, no_model, stacklevel=stacklevel)
    else:
        # The shared alpha's scores: the mean over the targets scored.
        mean_scores, scored = mean_over_scored_targets(scores)

        def mean_no_model(_):
            limit = no_model(slice(None))
            return None if limit is None else np.mean(limit[scored])[None]

        warn_at_grid_edges(
            alphas,
            best[:1],
            mean_scores[None],
            mean_no_model,
            stacklevel=stacklevel,
        )
    warn_if_autocorrelated(
        X,
        targets,
        coef,
        intercept,
        groups,
        cv,
        n_alphas=alphas.size,
        stacklevel=stacklevel,
    )
    # best_score_ holds NaN: per target, or, for one alpha for all, the mean
    # over the targets scored when no target is.
    if alpha_per_target or np.isnan(best_score).all():
        warn_undefined_best_scores(
            best_score, scoring, cv, shared=False, stacklevel=stacklevel
        )
    decomposition = (
        "covariance" if isinstance(ridge_solver, CovarianceSolver) else "svd"
    )
    return coef, intercept, best, best_score, scores, mean_scores, decomposition
