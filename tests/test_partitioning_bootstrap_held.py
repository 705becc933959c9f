"""Bootstrap intervals of unique variance with the hyperparameters held,
against naive loops: each replicate built as X[rows], every kept fold's full
and leave-one-band-out models refit target by target with scikit-learn's
Ridge at the choices made on the data's fold, scored by r2_score."""

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import GroupKFold, LeaveOneGroupOut
from test_partitioning import _NoFit
from test_partitioning_freedman_lane import RUN_LENGTHS, _data, _model

from skbatch import variance_partitioning
from skbatch._ridge.partition_bootstrap_held import (
    held_bootstrap_statistics,
    held_replicate_bytes,
)
from skbatch.random import bootstrap_rows

SEED = 5


def _naive_replicate(X, runs, splits, item, n_items, seed):
    """Rows of replicate ``item`` and its kept folds as ``(k, train, test)``
    positions: whole runs drawn by bootstrap_rows, redrawn (draw item + d
    n_items) until a fold has a test row drawn and training rows from 2
    runs; a copy of a row lands on the side of the row."""
    for d in range(100):
        (rows,) = bootstrap_rows(seed, [item + d * n_items], len(X), runs)
        folds = []
        for k, (train, test) in enumerate(splits):
            train_at = np.flatnonzero(np.isin(rows, train))
            test_at = np.flatnonzero(np.isin(rows, test))
            if test_at.size and np.unique(runs[rows[train_at]]).size >= 2:
                folds.append((k, train_at, test_at))
        if folds:
            return rows, folds
    raise AssertionError("no replicate")


def _held_score(X, Y, labels, weights, folds, held, average, fit_intercept):
    """R^2 per target of one model at the choices ``held[k]`` (band weights
    and alpha of each target on data fold k), one Ridge per target and
    fold on the columns of positive weight times sqrt(weight)."""
    bands = np.unique(labels, return_inverse=True)[1]
    tested, predicted, per_fold = [], [], []
    for k, train, test in folds:
        gammas, alphas = held[k]
        prediction = np.empty((len(test), Y.shape[1]))
        for t in range(Y.shape[1]):
            scale = np.sqrt(np.atleast_2d(gammas)[t][bands])
            keep = scale > 0
            ridge = Ridge(np.atleast_1d(alphas)[t], fit_intercept=fit_intercept)
            ridge.fit(
                X[train][:, keep] * scale[keep],
                Y[train, t],
                sample_weight=None if weights is None else weights[train],
            )
            prediction[:, t] = ridge.predict(X[test][:, keep] * scale[keep])
        w = None if weights is None else weights[test]
        tested.append(test)
        predicted.append(prediction)
        per_fold.append(
            r2_score(Y[test], prediction, sample_weight=w, multioutput="raw_values")
        )
    if average == "folds":
        return np.mean(per_fold, axis=0)
    rows = np.concatenate(tested)
    return r2_score(
        Y[rows],
        np.concatenate(predicted),
        sample_weight=None if weights is None else weights[rows],
        multioutput="raw_values",
    )


def _naive_statistics(
    X, Y, labels, runs, weights, splits, held, n_items, seed, average, fit_intercept
):
    """Unique variance and shares of every replicate (n_items, 2, n_bands,
    n_targets); ``held[0]`` the full model's choices, ``held[1 + b]`` those
    of the model without band b."""
    n_bands = np.unique(labels).size
    out = []
    for item in range(n_items):
        rows, folds = _naive_replicate(X, runs, splits, item, n_items, seed)
        Xr, Yr = X[rows], Y[rows]
        wr = None if weights is None else weights[rows]
        full = _held_score(Xr, Yr, labels, wr, folds, held[0], average, fit_intercept)
        unique = np.stack(
            [
                full
                - _held_score(
                    Xr[:, labels != b],
                    Yr,
                    labels[labels != b],
                    wr,
                    folds,
                    held[1 + b],
                    average,
                    fit_intercept,
                )
                for b in range(n_bands)
            ]
        )
        share = np.where(full > 0, unique / np.where(full > 0, full, 1), np.nan)
        out.append([unique, share])
    return np.array(out)


def _choices(X, Y, labels, runs, weights, splits):
    """Each data fold's choices of the full model and of each model without
    one band, by BandedRidge fits."""
    models = [np.ones(labels.size, bool)]
    models += [labels != b for b in np.unique(labels)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return [
            [
                _chosen(
                    _model(bands=labels[columns]).fit(
                        X[train][:, columns],
                        Y[train],
                        sample_weight=None if weights is None else weights[train],
                        groups=runs[train],
                    )
                )
                for train, _ in splits
            ]
            for columns in models
        ]


def _chosen(model):
    return model.band_weights_, model.alpha_


def _task(X, Y, labels, runs, weights, splits, held, n_items, average, fit_intercept):
    n_bands = np.unique(labels).size
    reduced = [
        _model(
            bands=np.unique(labels[labels != b], return_inverse=True)[1],
            fit_intercept=fit_intercept,
        )
        for b in range(n_bands)
    ]
    full = _model(bands=labels, fit_intercept=fit_intercept)
    return held_bootstrap_statistics(
        np.arange(n_items),
        full=full,
        reduced=reduced,
        columns=[np.flatnonzero(labels != b) for b in range(n_bands)],
        chosen=held,
        X=X,
        Y=Y,
        splits=splits,
        sample_weight=weights,
        groups=runs,
        entropy=SEED,
        n_items=n_items,
        average=average,
    )


def _random_choices(rng, labels, n_targets, n_folds):
    """Held choices drawn per target, model and fold: candidates that
    interleave across targets (one dropping a band), alphas spread over
    four decades."""
    n_bands = np.unique(labels).size
    alphas = np.logspace(-1, 3, 5)
    held = []
    for n_kept in [n_bands] + [n_bands - 1] * n_bands:
        candidates = rng.dirichlet(np.ones(n_kept), size=3)
        if n_kept > 1:
            candidates[0, 0] = 0.0
            candidates[0] /= candidates[0].sum()
        held.append(
            [
                (
                    candidates[rng.integers(3, size=n_targets)],
                    rng.choice(alphas, n_targets),
                )
                for _ in range(n_folds)
            ]
        )
    return held


@pytest.mark.parametrize(
    "band_sizes, cv, average, weighted, fit_intercept",
    [
        ((3, 3), LeaveOneGroupOut(), "rows", True, True),
        ((3, 3), GroupKFold(3), "folds", True, True),
        ((2, 3, 2), LeaveOneGroupOut(), "rows", True, True),
        ((2, 2, 3), LeaveOneGroupOut(), "folds", False, True),
        ((3, 3), LeaveOneGroupOut(), "rows", True, False),
        ((3, 3), GroupKFold(3), "rows", "zeros", True),
    ],
)
def test_replicates_equal_per_target_ridge_refits(
    band_sizes, cv, average, weighted, fit_intercept
):
    # Choices drawn per target, model and fold (interleaved candidates, one
    # dropping a band) on AR runs of unequal length, weights (some rows of
    # weight 0): every replicate's
    # unique variance and share equal the naive loop's to 1e-10, and some
    # replicate drops a fold.
    X, Y, _, runs, weights = _data(band_sizes, seed=3)
    labels = np.repeat(np.arange(len(band_sizes)), band_sizes)
    rng = np.random.default_rng(4)
    # Columns of the bands interleaved: a model's kept columns not one slice.
    order = rng.permutation(labels.size)
    X, labels = X[:, order], labels[order]
    weights = weights if weighted else None
    if weighted == "zeros":
        # Every fifth row weighs nothing, in training and test rows alike.
        weights = np.where(np.arange(len(X)) % 5 == 0, 0.0, weights)
    Y = Y + np.array([0.0, 50.0, -3.0])
    splits = list(cv.split(X, groups=runs))
    held = _random_choices(rng, labels, Y.shape[1], len(splits))
    n_items = 6
    found = _task(
        X, Y, labels, runs, weights, splits, held, n_items, average, fit_intercept
    )
    expected = _naive_statistics(
        X,
        Y,
        labels,
        runs,
        weights,
        splits,
        held,
        n_items,
        SEED,
        average,
        fit_intercept,
    )
    assert_allclose(found, expected, rtol=0, atol=1e-10)
    assert np.ptp(found[:, 0], axis=0).min() > 1e-4
    kept = [
        len(_naive_replicate(X, runs, splits, i, n_items, SEED)[1])
        for i in range(n_items)
    ]
    assert min(kept) < len(splits)


def _run(X, Y, labels, runs, weights, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return variance_partitioning(
            X,
            Y,
            bands=labels,
            estimator=_model(),
            groups=runs,
            sample_weight=weights,
            random_state=SEED,
            **kwargs,
        )


@pytest.mark.parametrize(
    "average", ["rows", pytest.param("folds", marks=pytest.mark.slow)]
)
def test_intervals_are_basic_intervals_of_the_naive_loop(average):
    # The choices are those of BandedRidge fits on the data's folds; the
    # interval is the basic one of the naive replicates around the
    # estimate.
    X, Y, labels, runs, weights = _data(seed=8)
    cv = LeaveOneGroupOut()
    splits = list(cv.split(X, groups=runs))
    result = _run(
        X,
        Y,
        labels,
        runs,
        weights,
        cv=cv,
        average=average,
        n_bootstrap=9,
        bootstrap_hyperparameters="held",
        confidence_level=0.8,
    )
    held = _choices(X, Y, labels, runs, weights, splits)
    samples = _naive_statistics(
        X, Y, labels, runs, weights, splits, held, 9, SEED, average, True
    )
    data = [(k, train, test) for k, (train, test) in enumerate(splits)]
    full = _held_score(X, Y, labels, weights, data, held[0], average, True)
    unique = np.stack(
        [
            full
            - _held_score(
                X[:, labels != b],
                Y,
                labels[labels != b],
                weights,
                data,
                held[1 + b],
                average,
                True,
            )
            for b in range(2)
        ]
    )
    share = np.where(full > 0, unique / np.where(full > 0, full, 1), np.nan)
    assert_allclose(result.unique, unique, rtol=0, atol=1e-10)
    estimate = np.array([unique, share])
    low, high = np.percentile(samples, [10, 90], axis=0)
    expected = np.stack([2 * estimate - high, 2 * estimate - low])
    assert_allclose(result.unique_ci, expected[:, 0], rtol=0, atol=1e-10)
    assert_allclose(result.share_ci, expected[:, 1], rtol=0, atol=1e-10)
    assert result.n_bootstrap == 9
    # The searched path is another interval (its replicates search again).
    searched = _run(
        X,
        Y,
        labels,
        runs,
        weights,
        cv=cv,
        average=average,
        n_bootstrap=9,
        confidence_level=0.8,
    )
    assert_allclose(searched.unique, result.unique, rtol=0, atol=1e-10)
    assert not np.allclose(searched.unique_ci, result.unique_ci)


def test_same_result_for_any_n_jobs():
    X, Y, labels, runs, weights = _data(seed=9)
    kwargs = dict(n_bootstrap=5, bootstrap_hyperparameters="held")
    one = _run(X, Y, labels, runs, weights, n_jobs=1, **kwargs)
    two = _run(X, Y, labels, runs, weights, n_jobs=2, **kwargs)
    np.testing.assert_array_equal(one.unique_ci, two.unique_ci)
    np.testing.assert_array_equal(one.share_ci, two.share_ci)


@pytest.mark.parametrize("value", ["fixed", "Held", 1, True])
def test_bad_value_is_refused_before_any_fit(value):
    X, Y, labels, runs, weights = _data()
    with pytest.raises(ValueError, match="bootstrap_hyperparameters must be None"):
        variance_partitioning(
            X,
            Y,
            bands=labels,
            estimator=_NoFit(),
            groups=runs,
            n_bootstrap=5,
            bootstrap_hyperparameters=value,
        )


def test_memory_too_small_is_refused_before_any_fit():
    # A budget that holds the searched path's refits but not the held
    # replicates' decompositions and copies is refused up front, naming the
    # budget; the searched path passes the preflight (and reaches a fit).
    X, Y, labels, runs, _ = _data()
    Y = np.repeat(Y, 200, axis=1)
    n_rows = len(RUN_LENGTHS) * max(RUN_LENGTHS)
    splits = list(LeaveOneGroupOut().split(X, groups=runs))
    held = held_replicate_bytes(len(X), n_rows, X.shape[1], splits, 3, Y.shape[1])
    kwargs = dict(
        bands=labels,
        estimator=_NoFit(),
        groups=runs,
        n_bootstrap=5,
        max_memory_gb=1.5 * held / 1e9,
        n_jobs=1,
    )
    with pytest.raises(AssertionError, match="a fit ran"):
        variance_partitioning(X, Y, bootstrap_hyperparameters="searched", **kwargs)
    with pytest.raises(ValueError, match=r"needs .* GB of host memory.*max_memory_gb"):
        variance_partitioning(X, Y, bootstrap_hyperparameters="held", **kwargs)


def test_charge_per_replicate_covers_the_traced_peak():
    # tracemalloc's peak of one held replicate (numpy's allocations) stays
    # within held_replicate_bytes's charge, and not far below it.
    import tracemalloc

    X, Y, labels, runs, weights = _data(seed=2)
    Y = np.repeat(Y, 100, axis=1)
    splits = list(LeaveOneGroupOut().split(X, groups=runs))
    rng = np.random.default_rng(0)
    held = _random_choices(rng, labels, Y.shape[1], len(splits))
    tracemalloc.start()
    try:
        _task(X, Y, labels, runs, weights, splits, held, 1, "rows", True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    n_rows = len(RUN_LENGTHS) * max(RUN_LENGTHS)
    charge = held_replicate_bytes(len(X), n_rows, X.shape[1], splits, 3, Y.shape[1])
    assert 0.5 * charge < peak < charge


def test_replicate_training_on_zero_weights_is_refused_as_the_searched_path():
    # Runs 0-2 weigh nothing: some replicate trains a fold on copies of them
    # alone. Both treatments refuse it with a ValueError about the weights.
    X, Y, labels, runs, weights = _data()
    weights[np.isin(runs, [0, 1, 2])] = 0.0
    for treatment in ("searched", "held"):
        with pytest.raises(ValueError, match="non-zero"):
            _run(
                X,
                Y,
                labels,
                runs,
                weights,
                n_bootstrap=20,
                bootstrap_hyperparameters=treatment,
            )
