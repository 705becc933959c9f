"""Freedman–Lane nulls of a band's unique variance: permuted residuals as
extra targets.

Under the null "band b adds nothing to the other bands", the reduced model
(every band but b) is fit on all rows (:func:`reduced_fit`); target ``t``
of permutation ``i`` is ``y*_t = fitted_t + P_i residuals_t``
(:func:`permuted_targets`), ``P_i`` row ``i`` of
:func:`skbatch._resampling.signed.signed_rows` (a permutation within runs,
or sign flips), the same for every target. The design never changes, so
every permutation is one more set of targets of the decompositions the
observed fits already need, and band b's unique variance is recomputed on
``y*`` with the same outer folds and the same score
(:func:`skbatch._ridge.partition_inference.held_out_scores`'s ``average``).

Two treatments of the hyperparameters:

- ``"held"`` (:class:`~skbatch._ridge.freedman_lane_held.HeldNullProblem`):
  every target keeps, on every outer fold, the (band weights, alpha) that
  the full and the reduced models chose there on the data. Predictions are
  then linear in ``y*``: per fold one product ``X'Wy*`` serves both models
  and every candidate, and each candidate's decomposition, computed once
  per fold (and for the full model once for every band), gives its
  targets' predictions at their own alphas; the permutations are extra rows
  of the same GEMMs (:mod:`skbatch._ridge.freedman_lane_held`).
- ``"searched"`` (:func:`searched_null_scores`): the models are refit on
  ``y*`` with their searches, the permuted targets as extra targets of one
  fit per fold (per permutation with ``local_alpha=False``, whose one choice
  is shared by the targets of a fit).

Both are joblib tasks of :func:`skbatch._engine.run_parallel`: functions of
item ids, numpy in and numpy out.
"""

import functools
import warnings

import numpy as np
from sklearn.base import clone

from .._resampling.signed import signed_rows
from .banded import check_bands
from .freedman_lane_held import (
    HeldModel,
    HeldNullProblem,
    held_fold,
    held_item_bytes,
    held_parts,
    read_rows,
)
from .partition_inference import held_out_scores

__all__ = [
    "HYPERPARAMETERS",
    "NULLS",
    "HeldModel",
    "HeldNullProblem",
    "band_null_task",
    "item_bytes",
    "null_bytes",
    "task_bytes",
    "held_fold",
    "permuted_targets",
    "reduced_fit",
    "searched_null_scores",
]

# variance_partitioning's ``null``: band b's rows permuted (the design
# changes), or the reduced model's residuals (Freedman and Lane, 1983).
NULLS = ("band_rows", "freedman_lane")
# variance_partitioning's ``null_hyperparameters`` under "freedman_lane".
HYPERPARAMETERS = ("held", "searched")
# Copies of a resample's held-out rows that its searched refits hold: the
# held-out predictions and targets (partition_inference.HELD_OUT_COPIES) and
# the search's own copies of a fold's targets (centred, projected, their
# errors; BandedRidge's preflight bounds the search itself).
SEARCHED_COPIES = 6


def reduced_fit(model, X, Y, *, sample_weight=None, groups=None, fit_intercept=True):
    """In-sample fitted values and residuals of the reduced model.

    ``model`` (unfitted; None for the empty set of bands, an intercept
    alone, or nothing without ``fit_intercept``) is fit on every row of
    ``X`` (the reduced model's columns), ``groups`` given to its search.

    Returns
    -------
    fitted, residuals : ndarray of shape (n_samples, n_targets)

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._ridge.freedman_lane import reduced_fit
    >>> Y = np.array([[1.0], [2.0], [6.0]])
    >>> fitted, residuals = reduced_fit(None, np.empty((3, 0)), Y)
    >>> fitted.ravel().tolist(), residuals.ravel().tolist()
    ([3.0, 3.0, 3.0], [-2.0, -1.0, 3.0])
    """
    Y = np.asarray(Y, dtype=np.float64)
    if model is None:
        mean = (
            np.average(Y, axis=0, weights=sample_weight)
            if fit_intercept
            else np.zeros(Y.shape[1])
        )
        fitted = np.broadcast_to(mean, Y.shape).copy()
    else:
        fit = clone(model).fit(X, Y, sample_weight=sample_weight, groups=groups)
        fitted = np.asarray(fit.predict(X), dtype=np.float64).reshape(Y.shape)
    return fitted, Y - fitted


def permuted_targets(fitted, residuals, codes):
    """``fitted + P residuals`` for each resample's signed row codes.

    Code ``r`` of row j puts ``+residuals[r]`` there, ``~r`` puts
    ``-residuals[r]`` (:mod:`skbatch._resampling.signed`).

    Returns
    -------
    Y_star : ndarray of shape (n_samples, len(codes) * n_targets)
        Column ``k * n_targets + t`` is target t under resample k.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._ridge.freedman_lane import permuted_targets
    >>> fitted, residuals = np.zeros((3, 1)), np.array([[1.0], [2.0], [3.0]])
    >>> permuted_targets(fitted, residuals, np.array([[2, 0, 1], [0, ~1, 2]]))
    array([[ 3.,  1.],
           [ 1., -2.],
           [ 2.,  3.]])
    """
    codes = np.atleast_2d(np.asarray(codes, dtype=np.int64))
    n_samples, n_targets = fitted.shape
    out = np.empty((n_samples, len(codes), n_targets))
    for k, code in enumerate(codes):
        flipped = code < 0
        np.take(residuals, np.where(flipped, ~code, code), axis=0, out=out[:, k])
        out[flipped, k] *= -1.0
        out[:, k] += fitted
    return out.reshape(n_samples, -1)


def searched_null_scores(
    ids,
    *,
    full,
    reduced,
    columns,
    X,
    fitted,
    residuals,
    splits,
    sample_weight,
    groups,
    entropy,
    permutation,
    average="rows",
    per_permutation=False,
    quiet=(),
):
    """Band b's unique variance on Freedman–Lane targets, the searches redone:
    a joblib task.

    Clones of ``full`` (every column of X) and ``reduced`` (X's ``columns``;
    None for the empty set, score 0) are scored by
    :func:`skbatch._ridge.partition_inference.held_out_scores` on the
    targets of every resample of ``ids`` together (:func:`permuted_targets`),
    or resample by resample with ``per_permutation`` (a search that makes one
    choice for all its targets). Warnings of the categories ``quiet`` are
    not repeated per refit.

    Returns
    -------
    unique : ndarray of shape (len(ids), n_targets)
    """
    n_samples, n_targets = fitted.shape
    codes = signed_rows(entropy, ids, n_samples, groups, **permutation)
    chunks = [[k] for k in range(len(codes))] if per_permutation else [slice(None)]
    out = np.empty((len(codes), n_targets))
    data = dict(splits=splits, sample_weight=sample_weight, groups=groups)
    with warnings.catch_warnings():
        for category in quiet:
            warnings.simplefilter("ignore", category)
        for chunk in chunks:
            Y = permuted_targets(fitted, residuals, codes[chunk])
            f_full = held_out_scores(clone(full), X, Y, average=average, **data)
            f_reduced = (
                0.0
                if reduced is None
                else held_out_scores(
                    clone(reduced), X, Y, columns=columns, average=average, **data
                )
            )
            out[chunk] = (f_full - f_reduced).reshape(-1, n_targets)
    return out


def band_null_task(
    *,
    full,
    reduced,
    reduced_columns,
    chosen,
    hyperparameters,
    X,
    Y,
    splits,
    sample_weight,
    groups,
    entropy,
    permutation,
    average="rows",
    quiet=(),
    cache=None,
):
    """The task of band b's Freedman–Lane null: ``task(ids) -> unique``.

    Fits the reduced model on all rows (:func:`reduced_fit`), then, for
    ``hyperparameters="held"``, the :class:`HeldModel` of the full and the
    reduced model on every fold from their ``chosen`` lists (of
    ``held_out_scores(..., chosen=...)``: ``chosen[0]`` the full model's,
    ``chosen[1]`` the reduced one's) in a :class:`HeldNullProblem`; for
    ``"searched"``, :func:`searched_null_scores` of the two models.

    Parameters
    ----------
    full, reduced : BandedRidge
        Unfitted, with their bands; ``reduced`` None for the empty set.
    reduced_columns : ndarray of int or None
        X's columns of the reduced model.
    cache : dict or None
        Shared by the tasks of every band of one call: the full model's
        :class:`HeldModel` of every fold, the same for every band, is
        computed by the first held task and kept there.
    """
    fit_intercept = full.fit_intercept
    if reduced is None:
        reduced_columns = np.arange(0)
    with warnings.catch_warnings():
        for category in quiet:
            warnings.simplefilter("ignore", category)
        fitted, residuals = reduced_fit(
            reduced,
            X[:, reduced_columns],
            Y,
            sample_weight=sample_weight,
            groups=groups,
            fit_intercept=fit_intercept,
        )
    data = dict(
        fitted=fitted,
        residuals=residuals,
        splits=splits,
        sample_weight=sample_weight,
        groups=groups,
        entropy=entropy,
        permutation=permutation,
    )
    if hyperparameters == "searched":
        return functools.partial(
            searched_null_scores,
            full=full,
            reduced=reduced,
            columns=reduced_columns,
            X=X,
            average=average,
            per_permutation=not full.local_alpha,
            quiet=quiet,
            **data,
        )
    X = np.asarray(X, dtype=np.float64)
    cache = {} if cache is None else cache
    models = []
    for name, model, columns, choices in (
        ("full", full, np.arange(X.shape[1]), chosen[0]),
        (None, reduced, reduced_columns, chosen[1]),
    ):
        if model is None:
            models.append(None)
            continue
        if name in cache:
            models.append(cache[name])
            continue
        bands, _ = check_bands(model.bands, columns.size)
        folds = [
            held_fold(
                X,
                train,
                test,
                sample_weight,
                columns,
                bands,
                choice,
                fit_intercept=fit_intercept,
            )
            for (train, test), choice in zip(splits, choices)
        ]
        if name is not None:
            cache[name] = folds
        models.append(folds)
    return HeldNullProblem(
        X, *models, fit_intercept=fit_intercept, average=average, **data
    )


def item_bytes(
    n_samples, n_features, n_rows, n_targets, hyperparameters, n_read=None, n_parts=1
):
    """Host bytes one resample holds while its null is computed.

    ``"held"``: :func:`~skbatch._ridge.freedman_lane_held.held_item_bytes`,
    ``n_rows`` the rows of the largest test fold (the held null scores a
    fold at a time), ``n_read`` the most rows of the targets a fold reads
    (:func:`~skbatch._ridge.freedman_lane_held.read_rows`; all when None),
    ``n_parts`` the parts of a call side by side
    (:func:`~skbatch._ridge.freedman_lane_held.held_parts`).
    ``"searched"``: its targets and
    :data:`SEARCHED_COPIES` copies of the ``n_rows`` test rows' of every
    fold.

    Examples
    --------
    >>> from skbatch._ridge.freedman_lane import item_bytes
    >>> item_bytes(100, 10, 20, 1, "held")
    14880.0
    """
    if hyperparameters == "held":
        return held_item_bytes(
            n_samples, n_features, n_rows, n_targets, n_read, n_parts
        )
    return 8.0 * n_targets * (n_samples + SEARCHED_COPIES * n_rows)


def _scored_rows(splits, hyperparameters):
    """The ``n_rows`` of :func:`item_bytes`."""
    if hyperparameters == "held":
        return max((len(test) for _, test in splits), default=0)
    return sum(len(test) for _, test in splits)


def task_bytes(task, n_targets):
    """:func:`item_bytes` of a task of :func:`band_null_task`."""
    if isinstance(task, HeldNullProblem):
        (n_samples, n_features, _), treatment = task.shape, "held"
    else:
        n_samples = task.keywords["fitted"].shape[0]
        n_features, treatment = task.keywords["X"].shape[1], "searched"
    splits = task.splits if treatment == "held" else task.keywords["splits"]
    n_rows = _scored_rows(splits, treatment)
    if treatment == "held":
        n_read, n_parts = read_rows(n_samples, splits), held_parts(n_targets)
    else:
        n_read, n_parts = None, 1
    return item_bytes(
        n_samples, n_features, n_rows, n_targets, treatment, n_read, n_parts
    )


def null_bytes(X, n_targets, splits, n_candidates, hyperparameters, n_workers):
    """Host bytes of a band's Freedman–Lane null beside the observed fits,
    for the preflight: the reduced model's fitted values and residuals (and,
    held, their copy as rows while it is made), one :func:`item_bytes` per
    worker and, held, the fitted values' products with X (of all rows, and
    of each fold's test rows in every worker), every fold's
    weighted rows that it does not train on and the decompositions of at
    most ``n_candidates`` candidates of both models (singular vectors, the
    test rows in their basis, and the triangular factor they come from).

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._ridge.freedman_lane import null_bytes
    >>> splits = [(np.arange(50), np.arange(50, 100))]
    >>> null_bytes(np.empty((100, 10)), 1, splits, 2, "searched", 1)
    4800.0
    """
    n_samples, n_features = X.shape
    held = hyperparameters == "held"
    total = 16.0 * n_samples * n_targets + n_workers * item_bytes(
        n_samples,
        n_features,
        _scored_rows(splits, hyperparameters),
        n_targets,
        hyperparameters,
        read_rows(n_samples, splits) if held else None,
        # One worker is this thread, whose calls go side by side; several
        # run on one thread each (held_parts).
        held_parts(n_targets) if held and n_workers <= 1 else 1,
    )
    if not held:
        return total
    # The fitted values' products with X (HeldNullProblem.fitted_products),
    # of all rows and of each fold's test rows; the latter made again by
    # every worker process (its task arrives without them).
    folds = len(splits) * max(n_workers, 1)
    total += 8.0 * n_targets * (n_features + 1) * (1 + folds)
    total += 8.0 * n_samples * n_targets + 8.0 * n_features * (n_samples + n_features)
    for train, test in splits:
        rank = min(len(train), n_features)
        total += 8.0 * n_features * max(n_samples - len(train), len(train))
        total += (
            2 * 8.0 * min(n_candidates, n_targets) * rank * (n_features + len(test) + 1)
        )
    return total
