"""Inference on unique variance: the refits of permuted and resampled designs.

The statistic is band b's unique variance, ``f(B) - f(B minus b)``, with
``f(U)`` the held-out R^2 of the model on the bands of ``U``
(:func:`held_out_scores`): with ``average="rows"`` (the default), one R^2
over the test rows of all outer folds together, each row predicted by its
fold's model, as ``r2_score(y, cross_val_predict(...))``; with
``average="folds"``, the mean of the folds' own R^2, as
``cross_val_score(...).mean()``. The Venn maths is in
:mod:`skbatch._ridge.partition`.

- Permutation null (:func:`band_null_scores`): band b's rows are permuted
  relative to ``y`` and the other bands (:func:`permuted_band`), with the
  schemes of :func:`skbatch.random.permutation_indices` (item ``i`` is
  permutation ``i``, whatever the batch), and the full model is refit on
  every outer fold, its own search included. ``f(B minus b)`` does not see
  band b, so it is the same under every permutation and is not refit.
- Bootstrap (:func:`bootstrap_statistics`): replicate ``i`` is the rows of
  :func:`skbatch.random.bootstrap_rows` (whole runs when groups are given),
  each outer fold of the data mapped onto them (:func:`replicate_splits`),
  redrawn while no fold can be scored (:func:`replicate`),
  the full and the leave-one-band-out models refit on the replicate's
  training rows and scored on its test rows.

Both are joblib tasks of :func:`skbatch._engine.run_parallel`: module-level
functions of item ids, numpy in and numpy out; the model arrives as an
estimator and is cloned (unfitted) for every design, so that the fits do
not depend on which worker or batch runs them.
"""

import warnings

import numpy as np
from sklearn.base import clone

from .._kernels import linalg as _linalg
from ..random import bootstrap_rows, permutation_indices
from .cv import MIN_SAMPLES

__all__ = [
    "HELD_OUT_COPIES",
    "MAX_DRAWS",
    "MIN_REPLICATE_RUNS",
    "band_null_scores",
    "band_shares",
    "bootstrap_statistics",
    "check_replicable",
    "held_out_r2",
    "held_out_scores",
    "permuted_band",
    "replicate",
    "replicate_splits",
]

# Distinct runs a replicate's training fold must draw from: a fit on copies
# of a single run has no run to hold out in an inner cross-validation over
# runs, and says nothing about another run.
MIN_REPLICATE_RUNS = 2
# Draws a replicate may take before one has a fold to score: with 3 runs
# and leave-one-run-out only a draw of every run has one (probability
# 6/27), so 1000 draws all fail with probability below 1e-100; reaching it
# means that no draw can succeed, which check_replicable refuses before any
# fit.
MAX_DRAWS = 1000
# Copies of the targets that held_out_scores(average="rows") holds beside a
# fold's fit: every held-out row's prediction, and those rows' targets.
HELD_OUT_COPIES = 2


def held_out_scores(
    model,
    X,
    Y,
    splits,
    *,
    sample_weight=None,
    groups=None,
    columns=None,
    residuals=None,
    average="rows",
    chosen=None,
):
    """Held-out R^2 per target over ``splits``.

    ``model`` is fit on every training fold (its rows of ``groups`` and
    ``sample_weight`` given to ``fit``) and predicts the fold's test rows.
    ``average="rows"``: one R^2 per target over the test rows of every fold
    together (:func:`skbatch._kernels.linalg.score_per_target`, weighted by the
    test rows' ``sample_weight``), as ``r2_score(y, cross_val_predict(...))``
    for folds that test each row once; ``"folds"``: the mean of each fold's
    R^2 on its own test rows, as ``cross_val_score(...).mean()``.

    Parameters
    ----------
    model : estimator
        Fit in place, fold after fold.
    X : ndarray of shape (n_samples, n_features)
    Y : ndarray of shape (n_samples, n_targets)
    splits : list of (ndarray, ndarray)
        Training and test rows of each fold, int indices.
    sample_weight, groups : ndarray of shape (n_samples,) or None
    columns : ndarray of int or None
        The columns of X the model sees; None: all.
    residuals : ndarray of shape (n_samples, n_targets) or None
        Filled, when given, with ``Y - prediction`` on each fold's test
        rows (a row tested twice keeps its last fold's); other rows are
        left as they are.
    average : {"rows", "folds"}, default="rows"
    chosen : list or None
        Appended, when given, with each fold's choices of a ``BandedRidge``
        model: ``(band_weights_, alpha_)``, of shapes (n_targets, n_bands)
        and (n_targets,).

    Returns
    -------
    scores : ndarray of shape (n_targets,)
        NaN without any fold.
    """
    if columns is None:
        columns = np.arange(X.shape[1])
    if not len(splits):
        return np.full(Y.shape[1], np.nan)
    # "rows": every fold's predictions in one array, written in place (the
    # held-out rows' predictions and targets are the two copies of Y that
    # HELD_OUT_COPIES counts); "folds": each fold's score.
    rows = np.concatenate([test for _, test in splits]).astype(np.intp)
    ends = np.cumsum([len(test) for _, test in splits])
    if average == "rows":
        predicted = np.empty((len(rows), Y.shape[1]))
    else:
        scores = np.empty((len(splits), Y.shape[1]))
    for fold, (train, test) in enumerate(splits):
        model.fit(
            X[np.ix_(train, columns)],
            Y[train],
            sample_weight=None if sample_weight is None else sample_weight[train],
            groups=None if groups is None else groups[train],
        )
        if chosen is not None:
            chosen.append(
                (
                    np.array(model.band_weights_, ndmin=2),
                    np.array(model.alpha_, ndmin=1),
                )
            )
        prediction = np.asarray(model.predict(X[np.ix_(test, columns)]))
        prediction = prediction.reshape(len(test), -1)
        if residuals is not None:
            residuals[test] = Y[test] - prediction
        if average == "rows":
            predicted[ends[fold] - len(test) : ends[fold]] = prediction
        else:
            scores[fold] = held_out_r2(Y, test, prediction, sample_weight)
    if average == "rows":
        return held_out_r2(Y, rows, predicted, sample_weight)
    return scores.mean(axis=0)


def held_out_r2(Y, rows, prediction, sample_weight, *, warn=True):
    """R^2 per target of ``prediction`` of ``Y[rows]``, rows weighted;
    ``warn=False`` leaves undefined scores to the caller's warning."""
    return _linalg.score_per_target(
        Y[rows],
        prediction,
        "r2",
        sample_weight=None if sample_weight is None else sample_weight[rows],
        warn=warn,
        xp=np,
    )


def permuted_band(X, columns, rows):
    """X with the rows of the band's ``columns`` taken in the order ``rows``.

    The other columns keep their rows: band b moves relative to ``y`` and to
    the other bands, as the null "band b adds nothing" permutes it.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._ridge.partition_inference import permuted_band
    >>> X = np.arange(6.0).reshape(3, 2)
    >>> permuted_band(X, [1], [2, 0, 1]).tolist()
    [[0.0, 5.0], [2.0, 1.0], [4.0, 3.0]]
    """
    out = np.array(X, copy=True)
    columns = np.asarray(columns)
    out[:, columns] = X[np.ix_(np.asarray(rows), columns)]
    return out


def replicate_splits(rows, splits, groups=None, *, fold_ids=False):
    """The outer folds of a bootstrap replicate, as positions in its rows.

    Position ``j`` of the replicate is data row ``rows[j]``; it is a test
    position of fold k when that row is a test row of fold k, a training
    position when it is a training row. A run drawn twice thus lands twice
    on the same side of every fold: never in training and test at once.
    A fold is kept when it has a test position and its training positions
    hold at least ``MIN_SAMPLES`` rows from at least
    :data:`MIN_REPLICATE_RUNS` distinct runs (rows, without ``groups``).

    Parameters
    ----------
    rows : ndarray of int
        The replicate's data rows (:func:`skbatch.random.bootstrap_rows`).
    splits : list of (ndarray, ndarray)
        The data's outer folds, int row indices.
    groups : ndarray of shape (n_samples,) or None
        Run of each data row.
    fold_ids : bool, default=False
        Also return which of ``splits`` each kept fold is.

    Returns
    -------
    list of (ndarray, ndarray)
        Training and test positions of each kept fold, in fold order.
    ids : list of int
        With ``fold_ids``: the index in ``splits`` of each kept fold.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._ridge.partition_inference import replicate_splits
    >>> runs = np.repeat([0, 1, 2, 3], 2)
    >>> splits = [(np.flatnonzero(runs != r), np.flatnonzero(runs == r))
    ...           for r in range(4)]
    >>> rows = np.array([0, 1, 0, 1, 2, 3, 6, 7])    # run 0 twice, runs 1, 3
    >>> folds = replicate_splits(rows, splits, runs)
    >>> len(folds)                     # run 2 was not drawn: no fold of its own
    3
    >>> folds[0][0].tolist(), folds[0][1].tolist()  # both copies of run 0 tested
    ([4, 5, 6, 7], [0, 1, 2, 3])
    """
    rows = np.asarray(rows)
    size = 1 + max(
        int(np.max(rows, initial=-1)),
        *(int(np.max(rows_k, initial=-1)) for fold in splits for rows_k in fold),
    )
    kept, ids = [], []
    for fold, (train, test) in enumerate(splits):
        in_train = np.zeros(size, dtype=bool)
        in_test = np.zeros(size, dtype=bool)
        in_train[train] = True
        in_test[test] = True
        train_at = np.flatnonzero(in_train[rows])
        test_at = np.flatnonzero(in_test[rows])
        source = rows[train_at] if groups is None else groups[rows[train_at]]
        if (
            test_at.size
            and train_at.size >= MIN_SAMPLES
            and np.unique(source).size >= MIN_REPLICATE_RUNS
        ):
            kept.append((train_at, test_at))
            ids.append(fold)
    return (kept, ids) if fold_ids else kept


def check_replicable(splits, groups, n_samples):
    """Refuse folds that no bootstrap replicate can score: every fold trains
    on fewer than :data:`MIN_REPLICATE_RUNS` runs (or rows) or tests none."""
    if not replicate_splits(np.arange(n_samples), splits, groups):
        raise ValueError(
            f"n_bootstrap needs a fold whose training rows come from at least "
            f"{MIN_REPLICATE_RUNS} runs (groups) and whose test rows are not "
            f"empty; none of the {len(splits)} outer folds has them. Give more "
            f"runs (at least 3 for leave-one-run-out) or other folds (cv)."
        )


def replicate(entropy, item, n_items, n_samples, groups, splits, *, fold_ids=False):
    """The rows and folds of bootstrap replicate ``item`` of ``n_items``.

    The first of the draws ``item, item + n_items, item + 2 n_items, ...`` of
    :func:`skbatch.random.bootstrap_rows` that has a fold to score
    (:func:`replicate_splits`): the bootstrap conditional on a scorable
    replicate. Draw ids of different replicates never meet, and a
    replicate depends on ``entropy``, ``item`` and ``n_items`` alone.

    Returns
    -------
    rows : ndarray of int
    folds : list of (ndarray, ndarray)
    ids : list of int
        With ``fold_ids``: the data's fold (index in ``splits``) of each of
        ``folds``.
    """
    for draw in range(MAX_DRAWS):
        (rows,) = bootstrap_rows(entropy, [item + draw * n_items], n_samples, groups)
        folds, ids = replicate_splits(rows, splits, groups, fold_ids=True)
        if folds:
            return (rows, folds, ids) if fold_ids else (rows, folds)
    raise ValueError(
        f"bootstrap replicate {item}: none of {MAX_DRAWS} draws of the runs has "
        f"a fold whose training rows come from at least {MIN_REPLICATE_RUNS} "
        f"runs; give more runs (groups)"
    )


def band_shares(unique, full):
    """Each band's share of the full model's R^2: ``unique / full``.

    NaN where ``full <= 0``: a model that explains nothing has no shares.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._ridge.partition_inference import band_shares
    >>> band_shares(np.array([[0.1, 0.2], [0.3, 0.0]]), np.array([0.5, -0.1]))
    array([[0.2, nan],
           [0.6, nan]])
    """
    unique = np.asarray(unique, dtype=np.float64)
    full = np.asarray(full, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(full > 0, unique / np.where(full > 0, full, 1.0), np.nan)


def band_null_scores(
    ids,
    *,
    model,
    X,
    Y,
    columns,
    splits,
    sample_weight,
    groups,
    entropy,
    permutation,
    average="rows",
    quiet=(),
):
    """Held-out R^2 of the full model with a band permuted: a joblib task.

    Permutation ``i`` of ``ids`` is row ``i`` of
    :func:`skbatch.random.permutation_indices` (``entropy``, the scheme
    ``permutation`` and ``groups``), applied to the rows of the band's
    ``columns`` (:func:`permuted_band`); a clone of ``model`` (every band,
    its own search) is scored on ``splits`` by :func:`held_out_scores`
    (``average``). Warnings of the categories ``quiet`` are not repeated per
    refit.

    Returns
    -------
    scores : ndarray of shape (len(ids), n_targets)
    """
    indices = permutation_indices(entropy, ids, X.shape[0], groups, **permutation)
    scores = np.empty((len(indices), Y.shape[1]))
    with warnings.catch_warnings():
        for category in quiet:
            warnings.simplefilter("ignore", category)
        for k, rows in enumerate(indices):
            scores[k] = held_out_scores(
                clone(model),
                permuted_band(X, columns, rows),
                Y,
                splits,
                sample_weight=sample_weight,
                groups=groups,
                average=average,
            )
    return scores


def bootstrap_statistics(
    ids,
    *,
    full,
    reduced,
    columns,
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
    """Unique variance and share of every band in bootstrap replicates: a
    joblib task.

    Replicate ``i`` of ``ids`` (of ``n_items``) is :func:`replicate`: rows
    of :func:`skbatch.random.bootstrap_rows` (``entropy``, ``groups``: whole
    runs) and their folds. A clone of ``full`` (every band) and of each
    ``reduced[b]`` (every band but b, on its ``columns[b]``; None for the
    empty set, whose score is 0) is scored by :func:`held_out_scores`
    (``average``) on the replicate, the replicate's rows keeping their runs
    and weights.

    Returns
    -------
    statistics : ndarray of shape (len(ids), 2, n_bands, n_targets)
        ``[:, 0]`` unique variance, ``[:, 1]`` share (:func:`band_shares`).
    """
    n_bands = len(reduced)
    out = np.empty((len(ids), 2, n_bands, Y.shape[1]))
    with warnings.catch_warnings():
        for category in quiet:
            warnings.simplefilter("ignore", category)
        for k, item in enumerate(ids):
            rows, folds = replicate(
                entropy, int(item), n_items, X.shape[0], groups, splits
            )
            data = dict(
                X=X[rows],
                Y=Y[rows],
                splits=folds,
                sample_weight=None if sample_weight is None else sample_weight[rows],
                groups=None if groups is None else groups[rows],
                average=average,
            )
            f_full = held_out_scores(clone(full), **data)
            for b, (model, keep) in enumerate(zip(reduced, columns)):
                without = (
                    np.zeros(Y.shape[1])
                    if model is None
                    else held_out_scores(clone(model), columns=keep, **data)
                )
                out[k, 0, b] = f_full - without
            out[k, 1] = band_shares(out[k, 0], f_full)
    return out
