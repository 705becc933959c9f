"""Bootstrap replicates of unique variance with the hyperparameters held.

Replicate ``i`` is the one of the searched path
(:func:`skbatch._ridge.partition_inference.replicate`: the same rows and the
same kept folds). On each kept fold, the full model and every
leave-one-band-out model keep, target by target, the band weights and alpha
that they chose on the data's fold of the same index (``held_out_scores(...,
chosen=...)``); no search is run. A target's model on a fold is then a
weighted ridge fit on the replicate's training rows (copies of a run are
rows of their own) of its held candidate's columns, scaled by the square
roots of their band weights, at its held alpha, and it is scored on the
replicate's test rows, copies counted, as
:func:`~skbatch._ridge.partition_inference.held_out_scores` scores.

That is what the held Freedman–Lane null computes
(:mod:`skbatch._ridge.freedman_lane_held`): each fold's decompositions at the
held choices (:func:`~skbatch._ridge.freedman_lane_held.held_fold`), and the
held-out R^2 of targets from squared errors and moments accumulated fold by
fold (:class:`~skbatch._ridge.freedman_lane_held.HeldNullProblem`). Here its
targets are the replicate's own: the reduced fit is nothing (fitted values
0, residuals the targets) and the one permutation is the identity (item 0 of
the exact enumeration of sign flips of one unit), so that ``y* = y``. Each
model is its own problem, with no reduced model (its "unique variance" is
then its score), on its own columns of the replicate's rows: each model is
scored once, whatever the number of bands.
"""

import warnings

import numpy as np

from .banded import check_bands
from .freedman_lane_held import (
    HeldNullProblem,
    held_fold,
    held_item_bytes,
    held_parts,
)
from .partition_inference import band_shares, replicate

__all__ = [
    "BOOTSTRAP_HYPERPARAMETERS",
    "check_bootstrap_hyperparameters",
    "held_bootstrap_bytes",
    "held_bootstrap_statistics",
    "held_replicate_bytes",
    "held_scores",
]

# variance_partitioning's ``bootstrap_hyperparameters``: each replicate's
# models search again (the default, what None means), or keep the data's
# choices.
BOOTSTRAP_HYPERPARAMETERS = ("searched", "held")

# The identity as a resample of HeldNullProblem: every sign vector of one
# unit enumerated, item 0 flipping nothing.
_IDENTITY = dict(permutation_type="sign_flip", block_size=None, exact=True)
# Copies of the replicate's targets that a held score holds at its peak:
# the replicate's rows, the problem's fitted values and residuals (as rows)
# and the zeros it is given as fitted values.
REPLICATE_TARGET_COPIES = 4
# Copies of the replicate's rows of X: the rows taken, the problem's
# centred and weighted design, every fold's rows that it does not train on
# (together about one more), and the centring's temporary.
REPLICATE_X_COPIES = 4


def check_bootstrap_hyperparameters(value):
    """``value`` of ``bootstrap_hyperparameters``, None read as "searched".

    Examples
    --------
    >>> from skbatch._ridge.partition_bootstrap_held import (
    ...     check_bootstrap_hyperparameters)
    >>> check_bootstrap_hyperparameters(None)
    'searched'
    >>> check_bootstrap_hyperparameters("fixed")
    Traceback (most recent call last):
    ...
    ValueError: bootstrap_hyperparameters must be None or one of ...
    """
    if value is None:
        return "searched"
    if not isinstance(value, str) or value not in BOOTSTRAP_HYPERPARAMETERS:
        raise ValueError(
            f"bootstrap_hyperparameters must be None or one of "
            f"{BOOTSTRAP_HYPERPARAMETERS}, got {value!r}: 'searched' refits each "
            f"replicate's models with their searches, 'held' keeps each "
            f"target's band weights and alpha as chosen on the data's folds"
        )
    return value


def held_scores(X, Y, splits, *, bands, chosen, sample_weight, fit_intercept, average):
    """Held-out R^2 per target of one model at its held choices.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        The model's columns only.
    Y : ndarray of shape (n_samples, n_targets)
    splits : list of (ndarray, ndarray)
    bands : list of ndarray
        The model's bands, as columns of ``X``.
    chosen : list of (ndarray, ndarray)
        Per fold of ``splits``: each target's band weights (n_targets,
        n_bands) and alpha (n_targets,).
    sample_weight : ndarray of shape (n_samples,) or None
    fit_intercept : bool
    average : {"rows", "folds"}

    Returns
    -------
    ndarray of shape (n_targets,)

    Examples
    --------
    One band of weight 1: ridge at each target's alpha, scored on the test
    rows of both folds together, as scikit-learn scores it.

    >>> import numpy as np
    >>> from sklearn.linear_model import Ridge
    >>> from sklearn.metrics import r2_score
    >>> from skbatch._ridge.partition_bootstrap_held import held_scores
    >>> rng = np.random.default_rng(0)
    >>> X, Y = rng.standard_normal((40, 3)), rng.standard_normal((40, 2))
    >>> first, second = np.arange(20), np.arange(20, 40)
    >>> splits = [(second, first), (first, second)]
    >>> alphas = np.array([1.0, 10.0])
    >>> chosen = [(np.ones((2, 1)), alphas)] * 2
    >>> scores = held_scores(X, Y, splits, bands=[np.arange(3)], chosen=chosen,
    ...                      sample_weight=None, fit_intercept=True, average="rows")
    >>> predicted = np.empty_like(Y)
    >>> for train, test in splits:
    ...     for t in range(2):
    ...         ridge = Ridge(alpha=alphas[t]).fit(X[train], Y[train, t])
    ...         predicted[test, t] = ridge.predict(X[test])
    >>> bool(np.allclose(scores, r2_score(Y, predicted, multioutput="raw_values")))
    True
    """
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    n_samples = X.shape[0]
    models = [
        held_fold(
            X,
            train,
            test,
            sample_weight,
            np.arange(X.shape[1]),
            bands,
            choice,
            fit_intercept=fit_intercept,
        )
        for (train, test), choice in zip(splits, chosen)
    ]
    problem = HeldNullProblem(
        X,
        models,
        None,
        fitted=np.zeros_like(Y),
        residuals=Y,
        splits=splits,
        sample_weight=sample_weight,
        groups=np.zeros(n_samples, dtype=np.intp),
        entropy=0,
        permutation=_IDENTITY,
        fit_intercept=fit_intercept,
        average=average,
    )
    return problem(np.zeros(1, dtype=np.int64))[0]


def held_bootstrap_statistics(
    ids,
    *,
    full,
    reduced,
    columns,
    chosen,
    X,
    Y,
    splits,
    sample_weight,
    groups,
    entropy,
    n_items,
    average="rows",
    quiet=(),
):
    """Unique variance and share of every band in bootstrap replicates, the
    hyperparameters held: a joblib task.

    As :func:`skbatch._ridge.partition_inference.bootstrap_statistics`
    (the same replicates), each model fit at its held choices
    (:func:`held_scores`) instead of searching.

    Parameters
    ----------
    full : BandedRidge
        The model of every band (its ``bands`` and ``fit_intercept`` read).
    reduced : list of BandedRidge or None
        Per band b, the model of every band but b (None for the empty set,
        whose score is 0).
    columns : list of ndarray or None
        X's columns of each ``reduced[b]``.
    chosen : list
        ``chosen[0]`` the full model's choices on each of the data's folds
        (``(band_weights_, alpha_)``), ``chosen[1 + b]`` those of
        ``reduced[b]`` (None with it).
    X, Y, splits, sample_weight, groups, entropy, n_items, average, quiet
        As for ``bootstrap_statistics``.

    Returns
    -------
    statistics : ndarray of shape (len(ids), 2, n_bands, n_targets)
        ``[:, 0]`` unique variance, ``[:, 1]`` share (:func:`band_shares`).
    """
    n_bands = len(reduced)
    n_features = X.shape[1]
    fit_intercept = full.fit_intercept
    specs = [(np.arange(n_features), full, chosen[0])]
    specs += [
        None if model is None else (keep, model, choices)
        for model, keep, choices in zip(reduced, columns, chosen[1:])
    ]
    bands = [
        None if spec is None else check_bands(spec[1].bands, spec[0].size)[0]
        for spec in specs
    ]
    out = np.empty((len(ids), 2, n_bands, Y.shape[1]))
    with warnings.catch_warnings():
        for category in quiet:
            warnings.simplefilter("ignore", category)
        for k, item in enumerate(ids):
            rows, folds, kept = replicate(
                entropy, int(item), n_items, X.shape[0], groups, splits, fold_ids=True
            )
            Y_rows = Y[rows]
            weight = None if sample_weight is None else sample_weight[rows]
            _check_training_weights(weight, folds, kept, int(item))
            scores = [
                np.zeros(Y.shape[1])
                if spec is None
                else held_scores(
                    X[np.ix_(rows, spec[0])],
                    Y_rows,
                    folds,
                    bands=model_bands,
                    chosen=[spec[2][fold] for fold in kept],
                    sample_weight=weight,
                    fit_intercept=fit_intercept,
                    average=average,
                )
                for spec, model_bands in zip(specs, bands)
            ]
            out[k, 0] = scores[0] - np.stack(scores[1:])
            out[k, 1] = band_shares(out[k, 0], scores[0])
    return out


def _check_training_weights(weight, folds, kept, item):
    """Refuse a replicate fold whose training rows weigh nothing, as the
    searched path's fit refuses it (a weighted fit needs 2 rows of weight)."""
    if weight is None:
        return
    for (train, _), fold in zip(folds, kept):
        n_weighed = int(np.count_nonzero(weight[train]))
        if n_weighed < 2:
            raise ValueError(
                f"bootstrap replicate {item}: the training rows of outer fold "
                f"{fold} have {n_weighed} non-zero sample_weight among "
                f"{len(train)}; a fit needs at least 2. Give the runs drawn "
                f"positive weights, or drop the runs that weigh nothing."
            )


def held_bootstrap_bytes(shape, n_targets, splits, groups, n_candidates):
    """:func:`held_replicate_bytes` of the most rows a draw of the runs of
    ``groups`` can give (every draw the longest run; rows without groups),
    for data of ``shape`` (n_samples, n_features).

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._ridge.partition_bootstrap_held import held_bootstrap_bytes
    >>> splits = [(np.arange(50), np.arange(50, 100))]
    >>> held_bootstrap_bytes((100, 10), 1, splits, None, 2)
    62640.0
    """
    n_samples, n_features = shape
    if groups is None:
        n_rows = n_samples
    else:
        _, lengths = np.unique(groups, return_counts=True)
        n_rows = int(lengths.size * lengths.max())
    return held_replicate_bytes(
        n_samples, n_rows, n_features, splits, n_candidates, n_targets
    )


def held_replicate_bytes(
    n_samples, n_rows, n_features, splits, n_candidates, n_targets
):
    """Host bytes that one replicate of :func:`held_bootstrap_statistics`
    holds at its peak, for the preflight.

    ``n_rows``: the most rows a replicate can have (copies of its longest
    runs); its folds are taken as the data's in proportion. Counted:
    :data:`REPLICATE_X_COPIES` copies of the replicate's rows of X,
    :data:`REPLICATE_TARGET_COPIES` of its targets, one resample of
    :func:`~skbatch._ridge.freedman_lane_held.held_item_bytes` (in the parts
    of :func:`~skbatch._ridge.freedman_lane_held.held_parts`) and, per fold,
    the decompositions of at most ``n_candidates`` candidates (right singular
    vectors twice, the test rows in their basis) and the triangular factor
    they come from, all for the full model (the largest).

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._ridge.partition_bootstrap_held import held_replicate_bytes
    >>> splits = [(np.arange(50), np.arange(50, 100))]
    >>> held_replicate_bytes(100, 100, 10, splits, 2, 1)
    62640.0
    """
    largest = max((len(test) for _, test in splits), default=0)
    n_test = -(-largest * n_rows // n_samples)
    total = 8.0 * REPLICATE_X_COPIES * n_rows * n_features
    total += 8.0 * REPLICATE_TARGET_COPIES * n_rows * n_targets
    total += held_item_bytes(
        n_rows, n_features, n_test, n_targets, n_parts=held_parts(n_targets)
    )
    rank = min(n_rows, n_features)
    per_fold = 8.0 * n_features * rank + 8.0 * min(n_candidates, n_targets) * rank * (
        2 * n_features + n_test + 2
    )
    return total + len(splits) * per_fold
