"""Freedman–Lane p-values of variance_partitioning, against naive loops that
build each permuted target, refit the full and the reduced models (at the
held choices, or with their searches) and recompute the unique variance."""

import pickle
import threading
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import GroupKFold, LeaveOneGroupOut
from test_partitioning import _NoFit
from test_ridge import _ar1_runs

from skbatch import BandedRidge, variance_partitioning
from skbatch._resampling.signed import signed_rows
from skbatch._ridge import freedman_lane, freedman_lane_held, held_model
from skbatch._ridge.freedman_lane import (
    band_null_task,
    null_bytes,
    permuted_targets,
    reduced_fit,
    searched_null_scores,
    task_bytes,
)
from skbatch._ridge.partition_inference import held_out_scores
from skbatch.exceptions import AutocorrelationWarning

# Five AR(1) runs of unequal length.
RUN_LENGTHS = (36, 28, 40, 32, 24)
SEED = 11
N_PERMUTATIONS = 19


def _model(**params):
    defaults = dict(band_weights=3, alphas=np.logspace(-1, 3, 5))
    return BandedRidge(**{**defaults, **params})


def _data(band_sizes=(3, 3), seed=0):
    """AR(1) bands in runs; target b driven by band b (for the first two
    bands), the last target by none, in AR(1) noise; positive weights."""
    n_bands = len(band_sizes)
    X, runs = _ar1_runs(RUN_LENGTHS, sum(band_sizes), 0.6, seed)
    labels = np.repeat(np.arange(n_bands), band_sizes)
    rng = np.random.default_rng(seed + 1)
    signal = [X[:, labels == b] @ rng.standard_normal(band_sizes[b]) for b in (0, 1)]
    signal = [part / part.std() for part in signal]
    noise, _ = _ar1_runs(RUN_LENGTHS, 3, 0.5, seed + 2)
    Y = np.column_stack([signal[0], signal[1], np.zeros(len(X))]) + 0.8 * noise
    weights = rng.uniform(0.5, 2.0, len(X))
    return X, Y, labels, runs, weights


def _held_predictions(X_train, y_train, X_test, labels, gamma, alpha, weights):
    """One target's predictions at band weights ``gamma`` and ``alpha``:
    scikit-learn's Ridge on the columns of the bands of positive weight
    times sqrt(gamma_b)."""
    scale = np.sqrt(gamma[labels])
    keep = scale > 0
    ridge = Ridge(alpha=alpha, solver="svd").fit(
        X_train[:, keep] * scale[keep], y_train, sample_weight=weights
    )
    return ridge.predict(X_test[:, keep] * scale[keep])


def _cv_unique(X, Y, labels, band, splits, runs, weights, held=None, average="rows"):
    """Band ``band``'s unique variance on targets ``Y`` by refits on every
    fold: full and reduced models at the choices ``held`` (per model, per
    fold: band weights and alpha of each target) or with their searches."""
    rest = labels != band
    reduced_labels = labels[rest]
    scores = []
    for m, (columns, bands) in enumerate(
        ((slice(None), labels), (rest, reduced_labels))
    ):
        if m == 1 and not rest.any():
            scores.append(0.0)
            continue
        tested, predicted, folds = [], [], []
        for k, (train, test) in enumerate(splits):
            Xtr, Xte = X[train][:, columns], X[test][:, columns]
            if held is None:
                model = _model(bands=bands).fit(
                    Xtr, Y[train], sample_weight=weights[train], groups=runs[train]
                )
                prediction = model.predict(Xte)
            else:
                gammas, alphas = held[m][k]
                prediction = np.column_stack(
                    [
                        _held_predictions(
                            Xtr,
                            Y[train, t],
                            Xte,
                            np.unique(bands, return_inverse=True)[1],
                            gammas[t],
                            alphas[t],
                            weights[train],
                        )
                        for t in range(Y.shape[1])
                    ]
                )
            tested.append(test)
            predicted.append(prediction)
            folds.append(
                r2_score(
                    Y[test],
                    prediction,
                    sample_weight=weights[test],
                    multioutput="raw_values",
                )
            )
        rows = np.concatenate(tested)
        scores.append(
            np.mean(folds, axis=0)
            if average == "folds"
            else r2_score(
                Y[rows],
                np.concatenate(predicted),
                sample_weight=weights[rows],
                multioutput="raw_values",
            )
        )
    return scores[0] - scores[1]


def _observed_choices(X, Y, labels, band, splits, runs, weights):
    """Each fold's choices of the full and of the reduced model."""
    rest = labels != band
    choices = []
    for columns, bands in ((slice(None), labels), (rest, labels[rest])):
        if not bands.size:
            choices.append(None)
            continue
        per_fold = []
        for train, _ in splits:
            model = _model(bands=bands).fit(
                X[train][:, columns],
                Y[train],
                sample_weight=weights[train],
                groups=runs[train],
            )
            per_fold.append((model.band_weights_, model.alpha_))
        choices.append(per_fold)
    return choices


def _naive(X, Y, labels, runs, weights, band, splits, codes, held, average="rows"):
    """Observed unique variance and its Freedman–Lane null by naive loops."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rest = labels != band
        reduced = _model(bands=labels[rest]).fit(
            X[:, rest], Y, sample_weight=weights, groups=runs
        )
        fitted = reduced.predict(X[:, rest])
        residuals = Y - fitted
        choices = (
            _observed_choices(X, Y, labels, band, splits, runs, weights)
            if held
            else None
        )
        observed = _cv_unique(X, Y, labels, band, splits, runs, weights, None, average)
        null = []
        for code in codes:
            sign = np.where(code < 0, -1.0, 1.0)[:, None]
            y_star = fitted + sign * residuals[np.where(code < 0, ~code, code)]
            null.append(
                _cv_unique(
                    X, y_star, labels, band, splits, runs, weights, choices, average
                )
            )
    return observed, np.array(null)


def _run(X, Y, labels, runs, weights, **kwargs):
    kwargs.setdefault("cv", GroupKFold(2))
    kwargs.setdefault("n_permutations", N_PERMUTATIONS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return variance_partitioning(
            X,
            Y,
            bands=labels,
            estimator=_model(),
            groups=runs,
            sample_weight=weights,
            null="freedman_lane",
            random_state=SEED,
            **kwargs,
        )


def _check_against(result, observed, null, band, n_items, exact=False):
    """The result's statistic, null mean, p-values and FWER p-values equal
    those of the naive loop's null (ties within 1e-10 count)."""
    assert_allclose(result.unique[band], observed, rtol=0, atol=1e-10)
    assert_allclose(result.null_mean[band], null.mean(axis=0), rtol=0, atol=1e-10)
    reached = null >= observed - 1e-10
    if exact:
        expected = reached.sum(axis=0) / n_items
        fwer = (null.max(axis=1, keepdims=True) >= observed - 1e-10).sum(0) / n_items
    else:
        expected = (1 + reached.sum(axis=0)) / (n_items + 1)
        fwer = (1 + (null.max(axis=1, keepdims=True) >= observed - 1e-10).sum(0)) / (
            n_items + 1
        )
    assert_allclose(result.pvalue[band], expected, rtol=0, atol=1e-12)
    assert_allclose(result.pvalue_fwer[band], fwer, rtol=0, atol=1e-12)


HELD_ROUTES = [
    "held",
    "held from products",
    "held, small from products",
    "held by hat matrices",
    "held, hat matrices for long runs",
]


def _route(monkeypatch, hyperparameters):
    """``"held"`` scoring every model through its test rows; ``"held from
    products"`` every model from products wherever a fold trains on all rows
    but its test rows (HeldModel.moment_errors); ``"held, small from
    products"`` only the models of 3 columns or fewer (a reduced model of one
    small band, as at the benchmark's shape); ``"held by hat matrices"``
    every run of one candidate and alpha through its hat matrix
    (HeldModel._hat), and ``"held, hat matrices for long runs"`` only the
    runs of more than 6 rows, the others through coordinates (their own
    and the in-place route where no run of a model takes one). Returns the
    treatment's name."""
    if hyperparameters.startswith("held"):
        routes = {
            "held": lambda rank, kept, n_test: False,
            "held from products": lambda rank, kept, n_test: True,
            "held, small from products": lambda rank, kept, n_test: kept <= 3,
        }
        hats = {
            "held by hat matrices": lambda n_rows, kept, rank, n_test: True,
            "held, hat matrices for long runs": (
                lambda n_rows, kept, rank, n_test: n_rows > 6
            ),
        }
        monkeypatch.setattr(
            held_model, "_from_moments", routes.get(hyperparameters, routes["held"])
        )
        monkeypatch.setattr(
            held_model,
            "_by_hat",
            hats.get(hyperparameters, lambda n_rows, kept, rank, n_test: False),
        )
        return "held"
    return hyperparameters


def _codes(n_samples, runs, permutation_type, n_items, exact=False):
    return signed_rows(
        SEED,
        np.arange(n_items),
        n_samples,
        runs,
        permutation_type=permutation_type,
        exact=exact,
    )


@pytest.mark.parametrize("hyperparameters", [*HELD_ROUTES, "searched"])
@pytest.mark.parametrize("band", [0, 1])
def test_two_bands_equal_a_naive_loop(hyperparameters, band, monkeypatch):
    hyperparameters = _route(monkeypatch, hyperparameters)
    X, Y, labels, runs, weights = _data()
    result = _run(X, Y, labels, runs, weights, null_hyperparameters=hyperparameters)
    splits = list(GroupKFold(2).split(X, groups=runs))
    codes = _codes(len(X), runs, "circular_shift", N_PERMUTATIONS)
    observed, null = _naive(
        X, Y, labels, runs, weights, band, splits, codes, hyperparameters == "held"
    )
    _check_against(result, observed, null, band, N_PERMUTATIONS)
    # A permutation changes the statistic: the null is not the observed value.
    assert np.ptp(null, axis=0).min() > 1e-3


# Every model here keeps 4 columns or more (a reduced model two bands):
# "held, small from products" would be "held" again.
@pytest.mark.parametrize("hyperparameters", ["held", "held from products", "searched"])
def test_three_bands_mean_over_folds_equal_a_naive_loop(hyperparameters, monkeypatch):
    hyperparameters = _route(monkeypatch, hyperparameters)
    X, Y, labels, runs, weights = _data(band_sizes=(3, 2, 2), seed=4)
    cv = LeaveOneGroupOut()
    result = _run(
        X,
        Y,
        labels,
        runs,
        weights,
        null_hyperparameters=hyperparameters,
        cv=cv,
        n_permutations=6,
        permutation_type="shuffle",
        average="folds",
    )
    splits = list(cv.split(X, groups=runs))
    codes = _codes(len(X), runs, "shuffle", 6)
    for band in (1, 2):
        observed, null = _naive(
            X,
            Y,
            labels,
            runs,
            weights,
            band,
            splits,
            codes,
            hyperparameters == "held",
            average="folds",
        )
        _check_against(result, observed, null, band, 6)


def test_sign_flips_of_runs_enumerated_exactly():
    # 5 runs: 2**5 sign vectors, all enumerated (identity first) when 40 are
    # asked for; p is then the share of them reaching the observed value.
    X, Y, labels, runs, weights = _data(seed=2)
    result = _run(
        X, Y, labels, runs, weights, n_permutations=40, permutation_type="sign_flip"
    )
    assert result.exact and result.n_permutations == 32
    splits = list(GroupKFold(2).split(X, groups=runs))
    codes = _codes(len(X), runs, "sign_flip", 32, exact=True)
    observed, null = _naive(X, Y, labels, runs, weights, 0, splits, codes, True)
    # The identity reproduces the observed statistic.
    assert_allclose(null[0], observed, rtol=0, atol=1e-10)
    _check_against(result, observed, null, 0, 32, exact=True)
    assert result.pvalue.min() >= 1 / 32


def test_one_band_permutes_the_centred_targets():
    # With one band the reduced model is the intercept: y* is the mean plus
    # the permuted deviations, and the statistic the full model's R^2.
    X, Y, labels, runs, weights = _data(seed=3)
    X = X[:, labels == 0]
    labels = np.zeros(X.shape[1], dtype=int)
    result = _run(X, Y, labels, runs, weights, n_permutations=9)
    fitted, residuals = reduced_fit(None, X[:, :0], Y, sample_weight=weights)
    assert_allclose(fitted[0], np.average(Y, axis=0, weights=weights))
    codes = _codes(len(X), runs, "circular_shift", 9)
    splits = list(GroupKFold(2).split(X, groups=runs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        choices = _observed_choices(X, Y, labels, 0, splits, runs, weights)
        null = np.array(
            [
                _cv_unique(
                    X,
                    permuted_targets(fitted, residuals, code[None]),
                    labels,
                    0,
                    splits,
                    runs,
                    weights,
                    choices,
                )
                for code in codes
            ]
        )
    assert_allclose(result.null_mean[0], null.mean(axis=0), rtol=0, atol=1e-10)


def test_driven_bands_reach_the_least_p_null_bands_do_not():
    # Band 1 adds nothing to target 0: its p-values under both nulls are
    # not small, and the driven pairs reach the least p.
    X, Y, labels, runs, weights = _data(seed=5)
    result = _run(X, Y, labels, runs, weights)
    assert result.pvalue[0, 0] == result.pvalue[1, 1] == 1 / 20
    assert result.pvalue[1, 0] > 0.1 and result.pvalue[0, 1] > 0.1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(null="freedman-lane"), r"null must be one of \('band_rows', 'freedm"),
        (
            dict(null="freedman_lane", null_hyperparameters="fixed"),
            r"null_hyperparameters must be None or one of \('held', 'searched'\), "
            r"got 'fixed'",
        ),
        (
            dict(null_hyperparameters="held"),
            r"null_hyperparameters='held' needs null='freedman_lane'",
        ),
        (
            dict(permutation_type="sign_flip"),
            r"permutation_type='sign_flip' needs null='freedman_lane'",
        ),
        (
            dict(null="freedman_lane", permutation_type="flip"),
            r"permutation_type must be one of .*'sign_flip'\), got 'flip'",
        ),
        (
            dict(null="freedman_lane", permutation_type="sign_flip", block_size=3),
            r"block_size is only used with permutation_type='block_shuffle'",
        ),
        (
            dict(null="freedman_lane", max_memory_gb=1e-5),
            r"variance_partitioning needs .* GB of host memory",
        ),
    ],
)
def test_bad_input_is_refused_before_any_fit(kwargs, match):
    X, runs = _ar1_runs(RUN_LENGTHS, 4, 0.5, 9)
    with pytest.raises(ValueError, match=match):
        variance_partitioning(
            X,
            X[:, :2],
            bands=[0, 0, 1, 1],
            estimator=_NoFit(),
            groups=runs,
            n_permutations=5,
            **kwargs,
        )


def _task(hyperparameters):
    """Band 0's null task on 300 targets, leave-one-run-out, and its data."""
    X, Y, labels, runs, weights = _data(seed=6)
    Y = np.tile(Y, (1, 100))
    splits = list(LeaveOneGroupOut().split(X, groups=runs))
    bands = [np.flatnonzero(labels == b) for b in (0, 1)]
    full, reduced = _model(bands=bands), _model(bands=[np.arange(3)])
    chosen = [[], []]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        held_out_scores(full, X, Y, splits, groups=runs, chosen=chosen[0])
        held_out_scores(
            reduced, X, Y, splits, groups=runs, columns=bands[1], chosen=chosen[1]
        )
        task = band_null_task(
            full=full,
            reduced=reduced,
            reduced_columns=bands[1],
            chosen=chosen,
            hyperparameters=hyperparameters,
            X=X,
            Y=Y,
            splits=splits,
            sample_weight=weights,
            groups=runs,
            entropy=0,
            permutation=dict(permutation_type="circular_shift", exact=False),
            quiet=(UserWarning,),
        )
    return task, X, Y, splits


@pytest.mark.parametrize(
    "hyperparameters, n_parts", [("held", 1), ("held", 2), ("searched", 1)]
)
@pytest.mark.parametrize("n_ids", [1, 3])
def test_charge_per_resample_covers_the_traced_peak(
    hyperparameters, n_parts, n_ids, monkeypatch
):
    # n_parts: a call split into parts of targets side by side, each with
    # scratch arrays of its own.
    tracemalloc = pytest.importorskip("tracemalloc")
    for module in (freedman_lane_held, freedman_lane):
        monkeypatch.setattr(module, "held_parts", lambda n_targets: n_parts)
    task, X, Y, splits = _task(hyperparameters)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        tracemalloc.start()
        try:
            task(np.arange(n_ids))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    charged = n_ids * task_bytes(task, Y.shape[1])
    assert peak <= charged
    # Not a charge that would refuse far more than it needs.
    assert peak >= 0.5 * charged


def test_each_worker_is_charged_the_fitted_products_it_makes():
    # A worker process receives the held task without the fitted values'
    # products with each fold's test rows (they are not pickled) and makes
    # them on its first call: a second worker adds them to the charge, with
    # its resample.
    task, X, Y, splits = _task("held")
    worker = pickle.loads(pickle.dumps(task))
    assert not worker._fitted_test
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        worker(np.arange(2))
    made = sum(products.nbytes for products in worker._fitted_test.values())
    assert made > 0
    one, two = (null_bytes(X, Y.shape[1], splits, 4, "held", n) for n in (1, 2))
    assert two - one - task_bytes(task, Y.shape[1]) == pytest.approx(made)


def _messages(X, Y, labels, runs, **kwargs):
    """The AutocorrelationWarning messages of a call."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        variance_partitioning(
            X,
            Y,
            bands=labels,
            estimator=_model(),
            groups=runs,
            cv=GroupKFold(2),
            n_permutations=3,
            null="freedman_lane",
            **kwargs,
        )
    return [
        str(w.message) for w in caught if issubclass(w.category, AutocorrelationWarning)
    ]


def test_autocorrelated_residuals_warn():
    X, Y, labels, runs, weights = _data(seed=7)
    shuffled = _messages(X, Y, labels, runs, permutation_type="shuffle")
    assert any("null='freedman_lane' shuffles" in m for m in shuffled)
    # Sign flips of whole runs keep the runs' autocorrelation; the
    # family-wise p-values of autocorrelated residuals still warn.
    flipped = _messages(X, Y, labels, runs, permutation_type="sign_flip")
    assert not any("shuffles" in m for m in flipped)
    assert any("family-wise p-values (pvalue_fwer)" in m for m in flipped)
    # One target has no family; white residuals do not warn.
    assert not _messages(X, Y[:, :1], labels, runs)
    rng = np.random.default_rng(0)
    white = X[:, :3] @ rng.standard_normal((3, 2)) + rng.standard_normal((len(X), 2))
    assert not _messages(X, white, labels, runs)


def test_held_calls_at_the_same_time_keep_their_own_scratch(monkeypatch):
    # The threads of a threading joblib backend call one held task at the
    # same time: each call's y*, products and blocks must stay its own.
    task, X, Y, splits = _task("held")
    ids = [np.arange(0, 2), np.arange(2, 4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        alone = [task(i) for i in ids]
    # Both calls build their first fold's y* and products before either
    # scores it.
    barrier = threading.Barrier(2, timeout=60)
    fold_errors = freedman_lane_held.HeldNullProblem._fold_errors

    def together(self, *args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            barrier.wait()
        return fold_errors(self, *args, **kwargs)

    monkeypatch.setattr(freedman_lane_held.HeldNullProblem, "_fold_errors", together)
    results = [None, None]

    def call(k):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            results[k] = task(ids[k])

    threads = [threading.Thread(target=call, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for got, expected in zip(results, alone):
        assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_same_result_for_any_n_jobs():
    joblib = pytest.importorskip("joblib")
    X, Y, labels, runs, weights = _data(seed=8)
    kwargs = dict(n_permutations=5)
    for hyperparameters in ("held", "searched"):
        serial = _run(
            X, Y, labels, runs, weights, null_hyperparameters=hyperparameters, **kwargs
        )
        # Threads share the task itself, processes get copies of it.
        for backend in ("loky", "threading"):
            with joblib.parallel_config(backend=backend):
                workers = _run(
                    X,
                    Y,
                    labels,
                    runs,
                    weights,
                    null_hyperparameters=hyperparameters,
                    n_jobs=2,
                    **kwargs,
                )
            assert_allclose(serial.null_mean, workers.null_mean, rtol=0, atol=1e-12)
            assert_allclose(serial.pvalue, workers.pvalue, rtol=0, atol=0)


def test_held_parts_side_by_side_change_no_result(monkeypatch):
    # The public path with the targets split into parts side by side (the
    # null and the held bootstrap's replicates) gives what one part gives.
    X, Y, labels, runs, weights = _data(seed=9)
    Y = np.tile(Y, (1, 4))
    Y += np.random.default_rng(9).standard_normal(Y.shape)
    kwargs = dict(
        null_hyperparameters="held",
        n_permutations=9,
        n_bootstrap=4,
        bootstrap_hyperparameters="held",
    )
    one = _run(X, Y, labels, runs, weights, **kwargs)
    made = []

    def parts(n_targets):
        made.append(n_targets)
        return 3

    monkeypatch.setattr(freedman_lane_held, "held_parts", parts)
    split = _run(X, Y, labels, runs, weights, **kwargs)
    assert made
    assert_allclose(split.null_mean, one.null_mean, rtol=0, atol=1e-12)
    assert_allclose(split.pvalue, one.pvalue, rtol=0, atol=0)
    assert_allclose(split.pvalue_fwer, one.pvalue_fwer, rtol=0, atol=0)
    assert_allclose(split.unique_ci, one.unique_ci, rtol=0, atol=1e-12)


def test_searched_one_permutation_at_a_time_equals_all_together():
    # The path of a search whose one choice is shared by its targets
    # (local_alpha=False) fits the permutations one by one; with per-target
    # choices both paths give the same statistics.
    X, Y, labels, runs, weights = _data(seed=9)
    splits = list(GroupKFold(2).split(X, groups=runs))
    bands = [np.flatnonzero(labels == b) for b in (0, 1)]
    fitted, residuals = reduced_fit(
        _model(bands=[np.arange(3)]), X[:, bands[1]], Y, groups=runs
    )
    kwargs = dict(
        full=_model(bands=bands),
        reduced=_model(bands=[np.arange(3)]),
        columns=bands[1],
        X=X,
        fitted=fitted,
        residuals=residuals,
        splits=splits,
        sample_weight=weights,
        groups=runs,
        entropy=SEED,
        permutation=dict(permutation_type="circular_shift", exact=False),
        quiet=(UserWarning,),
    )
    together = searched_null_scores(np.arange(3), **kwargs)
    apart = searched_null_scores(np.arange(3), per_permutation=True, **kwargs)
    assert_allclose(apart, together, rtol=0, atol=1e-10)
    assert np.ptp(together, axis=0).min() > 0


def _held_unique(X, Y, labels, band, splits, weights, held, average, fit_intercept):
    """Band ``band``'s unique variance at the choices ``held`` by one
    scikit-learn Ridge per target, fold and model, scored by r2_score."""
    rest = labels != band
    scores = []
    for m, columns in enumerate((np.ones(labels.size, bool), rest)):
        bands = np.unique(labels[columns], return_inverse=True)[1]
        tested, predicted, folds = [], [], []
        for k, (train, test) in enumerate(splits):
            gammas, alphas = held[m][k]
            prediction = np.empty((len(test), Y.shape[1]))
            for t in range(Y.shape[1]):
                scale = np.sqrt(gammas[t][bands])
                keep = scale > 0
                ridge = Ridge(alphas[t], fit_intercept=fit_intercept, solver="svd")
                ridge.fit(
                    X[train][:, columns][:, keep] * scale[keep],
                    Y[train, t],
                    sample_weight=weights[train],
                )
                prediction[:, t] = ridge.predict(
                    X[test][:, columns][:, keep] * scale[keep]
                )
            tested.append(test)
            predicted.append(prediction)
            folds.append(
                r2_score(
                    Y[test],
                    prediction,
                    sample_weight=weights[test],
                    multioutput="raw_values",
                )
            )
        rows = np.concatenate(tested)
        scores.append(
            np.mean(folds, axis=0)
            if average == "folds"
            else r2_score(
                Y[rows],
                np.concatenate(predicted),
                sample_weight=weights[rows],
                multioutput="raw_values",
            )
        )
    return scores[0] - scores[1]


@pytest.mark.parametrize(
    "cv, average, permutation_type, by_element, fit_intercept",
    [
        (LeaveOneGroupOut(), "rows", "circular_shift", False, True),
        (GroupKFold(2), "rows", "block_shuffle", True, True),
        (GroupKFold(3), "folds", "sign_flip", False, True),
        (LeaveOneGroupOut(), "folds", "shuffle", True, True),
        (GroupKFold(2), "rows", "circular_shift", False, False),
    ],
)
@pytest.mark.parametrize("route", HELD_ROUTES)
def test_held_candidates_interleaved_equal_per_target_ridge(
    cv,
    average,
    permutation_type,
    by_element,
    fit_intercept,
    route,
    monkeypatch,
    within_runs=True,
):
    # The held null sorts each fold's targets by candidate and scores from
    # moments accumulated fold by fold: with candidates that interleave
    # (drawn per target and fold, one of them dropping a band whose columns
    # are not contiguous), targets far from 0, weights and AR runs of unequal
    # length, every permutation's unique variance equals per-target Ridge
    # refits scored by r2_score. by_element: gathers of rows element by
    # element (no contiguous pieces). route: every model scored through its
    # test rows, or from products where the fold allows (_route).
    _route(monkeypatch, route)
    if by_element:
        monkeypatch.setattr(freedman_lane_held, "MAX_SEGMENTS", 0)
    X, Y, _, runs, weights = _data(seed=12)
    labels = np.array([0, 1, 0, 1, 0, 1])
    rng = np.random.default_rng(12)
    Y = np.repeat(Y, 4, axis=1) + 0.3 * rng.standard_normal((len(Y), 12))
    Y[:, 5] += 1e4
    splits = list(cv.split(X, groups=runs))
    # Permutations within runs, or (within_runs False) across them.
    groups = runs if within_runs else None
    candidates = np.array([[1.0, 0.0], [0.0, 1.0], [0.3, 0.7], [0.8, 0.2]])
    alphas = np.logspace(-1, 3, 5)
    held = [
        [
            (candidates[rng.integers(4, size=12)], rng.choice(alphas, 12))
            for _ in splits
        ],
        [(np.ones((12, 1)), rng.choice(alphas, 12)) for _ in splits],
    ]
    band, rest = 1, np.flatnonzero(labels != 1)
    fitted = 0.5 * X[:, rest] @ rng.standard_normal((3, 12)) + 2.0
    residuals, _ = _ar1_runs(RUN_LENGTHS, 12, 0.6, 13)
    models = [
        [
            freedman_lane_held.held_fold(
                X,
                train,
                test,
                weights,
                columns,
                bands,
                choice,
                fit_intercept=fit_intercept,
            )
            for (train, test), choice in zip(splits, choices)
        ]
        for columns, bands, choices in (
            (np.arange(6), [np.flatnonzero(labels == b) for b in (0, 1)], held[0]),
            (rest, [np.arange(3)], held[1]),
        )
    ]
    permutation = dict(
        permutation_type=permutation_type,
        block_size=5 if permutation_type == "block_shuffle" else None,
        exact=False,
    )
    task = freedman_lane_held.HeldNullProblem(
        X,
        *models,
        fitted=fitted,
        residuals=residuals,
        splits=splits,
        sample_weight=weights,
        groups=groups,
        entropy=SEED,
        permutation=permutation,
        fit_intercept=fit_intercept,
        average=average,
    )
    null = task(np.arange(3))
    codes = signed_rows(SEED, np.arange(3), len(X), groups, **permutation)
    expected = [
        _held_unique(
            X,
            permuted_targets(fitted, residuals, code[None]),
            labels,
            band,
            splits,
            weights,
            held,
            average,
            fit_intercept,
        )
        for code in codes
    ]
    assert_allclose(null, expected, rtol=0, atol=1e-10)
    assert np.ptp(null, axis=0).min() > 1e-4
    # Batches of one permutation give the same statistics.
    assert_allclose(task(np.array([2])), null[2:], rtol=0, atol=1e-12)
    # So do parts of 2 or 3 targets side by side, each with its own choices
    # (a part may lack a candidate).
    monkeypatch.setattr(freedman_lane_held, "held_parts", lambda n_targets: 5)
    assert_allclose(task(np.arange(3)), null, rtol=0, atol=1e-12)
    assert sorted(len(part.fitted) for part in task._split[5]) == [2, 2, 2, 3, 3]


@pytest.mark.parametrize(
    "route, block_bytes",
    [
        ("held", 1),
        ("held", 2000),
        ("held from products", 1),
        ("held from products", 1200),
        ("held, small from products", 1),
        ("held, small from products", 1200),
    ],
)
@pytest.mark.parametrize(
    "cv, average, permutation_type",
    [
        (LeaveOneGroupOut(), "rows", "circular_shift"),
        (GroupKFold(3), "folds", "sign_flip"),
    ],
)
def test_held_blocks_of_any_size_equal_per_target_ridge(
    route, block_bytes, cv, average, permutation_type, monkeypatch
):
    # The squared errors go through blocks of rows in candidate order: blocks
    # of one row, and blocks of a few rows that end inside a candidate's
    # targets and inside a run of one alpha, give what per-target Ridge
    # refits give; so does y* built 5 targets at a time.
    sizes = []
    block_rows = held_model._block_rows

    def spy(width):
        sizes.append(block_rows(width))
        return sizes[-1]

    monkeypatch.setattr(held_model, "BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(held_model, "_block_rows", spy)
    monkeypatch.setattr(freedman_lane_held, "TARGET_CHUNK", 5)
    test_held_candidates_interleaved_equal_per_target_ridge(
        cv, average, permutation_type, False, True, route, monkeypatch
    )
    # 36 rows (12 targets, 3 permutations) over 4 candidates and 5 alphas.
    assert max(sizes) == 1 if block_bytes == 1 else 2 <= min(sizes) <= max(sizes) < 9


class _Splits:
    """A cv of the folds ``make(groups)`` gives."""

    def __init__(self, make):
        self.make = make

    def split(self, X, y=None, groups=None):
        return self.make(np.asarray(groups))


def _gapped(groups):
    # Three runs to train on, the next to test: the fifth run is in neither,
    # so a fold reads rows of y* besides its test rows.
    runs = np.unique(groups)
    return [
        (
            np.flatnonzero(np.isin(groups, runs[[(i + j) % 5 for j in (1, 2, 3)]])),
            np.flatnonzero(groups == runs[i]),
        )
        for i in range(len(runs))
    ]


def _train_on_one(groups):
    # More rows outside than in: the training rows' own products.
    return [
        (np.flatnonzero(groups == r), np.flatnonzero(groups != r))
        for r in np.unique(groups)
    ]


@pytest.mark.parametrize("make", [_gapped, _train_on_one])
def test_held_folds_reading_other_rows_equal_per_target_ridge(make, monkeypatch):
    test_held_candidates_interleaved_equal_per_target_ridge(
        _Splits(make), "rows", "circular_shift", False, True, "held", monkeypatch
    )


def test_products_of_all_rows_equal_those_of_the_permuted_targets():
    # All rows' products come from the residuals times X's rows moved as the
    # residuals are: equal to those of y* itself, for permutations with
    # signs and for codes that repeat a row.
    X, Y, labels, runs, weights = _data(seed=3)
    splits = list(LeaveOneGroupOut().split(X, groups=runs))
    rng = np.random.default_rng(3)
    models = [
        freedman_lane_held.held_fold(
            X,
            train,
            test,
            weights,
            np.arange(6),
            [np.arange(3), np.arange(3, 6)],
            (np.full((3, 2), 0.5), np.ones(3)),
            fit_intercept=True,
        )
        for train, test in splits
    ]
    task = freedman_lane_held.HeldNullProblem(
        X,
        models,
        None,
        fitted=Y + 3.0,
        residuals=rng.standard_normal(Y.shape),
        splits=splits,
        sample_weight=weights,
        groups=runs,
        entropy=SEED,
        permutation=dict(permutation_type="sign_flip", exact=False),
        fit_intercept=True,
        average="rows",
    )
    n = len(X)
    codes = np.array([rng.permutation(n), ~rng.permutation(n), rng.integers(n, size=n)])
    codes[1, ::2] = ~codes[1, ::2]
    expected = task.targets(codes).reshape(-1, n) @ task.weighted
    assert_allclose(task.totals(codes, {}), expected, rtol=0, atol=1e-10)


def test_held_shuffle_across_folds_equals_per_target_ridge(monkeypatch):
    # Rows shuffled across runs (no groups): a permutation moves test rows
    # out of their fold, so the test rows' products cannot come from the
    # residuals' (the path for permutations within folds); the null still
    # equals per-target Ridge refits.
    test_held_candidates_interleaved_equal_per_target_ridge(
        LeaveOneGroupOut(),
        "rows",
        "shuffle",
        False,
        True,
        "held",
        monkeypatch,
        within_runs=False,
    )


def test_held_task_pickles_without_copies_of_its_views(monkeypatch):
    # Workers get the task by pickle: the same statistics, and each model's
    # V' and test basis (views of the arrays its GEMMs read) are rebuilt,
    # not shipped as copies.
    X, Y, labels, runs, weights = _data(seed=5)
    splits = list(LeaveOneGroupOut().split(X, groups=runs))
    models = [
        freedman_lane_held.held_fold(
            X,
            train,
            test,
            weights,
            np.arange(6),
            [np.arange(3), np.arange(3, 6)],
            (np.array([[0.5, 0.5], [1.0, 0.0], [0.5, 0.5]]), np.ones(3)),
            fit_intercept=True,
        )
        for train, test in splits
    ]
    task = freedman_lane_held.HeldNullProblem(
        X,
        models,
        None,
        fitted=Y,
        residuals=Y[::-1].copy(),
        splits=splits,
        sample_weight=weights,
        groups=runs,
        entropy=SEED,
        permutation=dict(permutation_type="circular_shift", exact=False),
        fit_intercept=True,
        average="rows",
    )
    shipped = pickle.loads(pickle.dumps(task))
    whole = task(np.arange(3))
    assert_allclose(shipped(np.arange(3)), whole, rtol=0, atol=0)
    # Nor are the parts of a call side by side (views of the task's arrays),
    # which give the same statistics without a reduced model too.
    monkeypatch.setattr(freedman_lane_held, "held_parts", lambda n_targets: 2)
    assert_allclose(task(np.arange(3)), whole, rtol=0, atol=1e-12)
    assert task._split and "_split" not in task.__getstate__()
    model, copy = task.full[0], shipped.full[0]
    for views, rebuilt in ((model.Vt, copy.Vt), (model.test_basis, copy.test_basis)):
        assert [v.shape for v in views] == [v.shape for v in rebuilt]
        assert all(not v.flags.owndata for v in rebuilt)
    assert "Vt" not in model.__getstate__()


def test_small_models_score_from_products_wide_ones_from_test_rows():
    # A model of few columns beside many test rows scores from products (no
    # pass over the test rows); one as wide as its test rows goes through
    # them, where its predictions take fewer flops than B'Wy and B'WB.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, 40))
    train, test = np.arange(80), np.arange(80, 120)
    choice = (np.ones((3, 1)), np.ones(3))
    small, wide = (
        freedman_lane_held.held_fold(
            X,
            train,
            test,
            None,
            columns,
            [np.arange(columns.size)],
            choice,
            fit_intercept=True,
        )
        for columns in (np.arange(4), np.arange(40))
    )
    assert small.from_moments and not wide.from_moments


def _one_fold(rng, weighted, bands, choice, n_repeats):
    """A HeldModel of 6 columns on one fold (60 training rows, 30 test
    rows, weighted or not) at ``choice``, and random products and test rows
    of its targets (far from 0), with the test rows' own weighted means and
    a training mean per row."""
    X = rng.standard_normal((90, 6))
    train, test = np.arange(60), np.arange(60, 90)
    weights = rng.uniform(0.5, 2.0, 90) if weighted else None
    model = freedman_lane_held.held_fold(
        X, train, test, weights, np.arange(6), bands, choice, fit_intercept=True
    )
    n_rows = len(choice[1]) * n_repeats
    products = rng.standard_normal((n_rows, 7))
    test_rows = rng.standard_normal((n_rows, 30)) + 5.0
    root = None if weights is None else np.sqrt(weights[test])
    w = np.ones(30) if root is None else root**2
    own = test_rows @ w / w.sum()
    return model, products, test_rows, root, w, own, rng.standard_normal(n_rows)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n_repeats", [1, 3])
def test_one_candidate_in_place_equals_the_copy_in_candidate_order(
    weighted, n_repeats, monkeypatch
):
    # The last model through a fold's test rows, of one candidate, takes
    # them in their own order and overwrites them; the test rows' means,
    # given (from the products), centre them in place. Both give the squared
    # errors and moments of the copies in candidate order with the means
    # taken from the rows, blocks ending inside a target's rows or not.
    monkeypatch.setattr(held_model, "BLOCK_BYTES", 8 * 7 * 40)
    rng = np.random.default_rng(3)
    n_targets = 11
    alphas = rng.choice([0.1, 1.0, 10.0], n_targets)
    model, products, test_rows, root, w, own, mean = _one_fold(
        rng, weighted, [np.arange(6)], (np.ones((n_targets, 1)), alphas), n_repeats
    )
    assert len(model.columns) == 1
    n_rows = n_targets * n_repeats
    results = []
    for in_place, means in ((False, None), (True, own), (True, None), (False, own)):
        shift, squares = np.empty(n_rows), np.empty(n_rows)
        rows = test_rows.copy()
        errors = model.squared_errors(
            products,
            rows,
            n_repeats,
            root,
            {},
            (mean, w.sum(), shift, squares, means),
            in_place=in_place,
        )
        # Only the route in place writes over the rows it is given.
        assert np.array_equal(rows, test_rows) != in_place
        results.append((errors, shift, squares))
    for result in results[1:]:
        for got, expected in zip(result, results[0]):
            assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert_allclose(results[0][1], own - mean, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("block_bytes", [8 * 30 * 60, None])
def test_hat_matrices_equal_coordinates_and_predictions(
    weighted, block_bytes, monkeypatch
):
    # Long runs of one candidate and alpha go through their hat matrix (one
    # GEMM of the products, made once per call), short ones through
    # coordinates: both give the squared errors and moments of coordinates
    # and predictions alone, with the test rows' means given (centred in
    # place, then added back) or taken from the rows, and blocks ending
    # inside a run or not.
    if block_bytes is not None:
        monkeypatch.setattr(held_model, "BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(4)
    n_targets, n_repeats = 40, 3
    # Most targets at one candidate and alpha (a run of 66 rows), the others
    # in runs of 3 to 24 rows.
    candidates = np.array([[1.0, 0.5], [0.2, 1.0]])
    chosen = np.where(rng.random(n_targets) < 0.85, 0, 1)
    alphas = np.where(
        rng.random(n_targets) < 0.8, 1.0, rng.choice([0.1, 10.0], n_targets)
    )
    model, products, test_rows, root, w, own, mean = _one_fold(
        rng,
        weighted,
        [np.arange(3), np.arange(3, 6)],
        (candidates[chosen], alphas),
        n_repeats,
    )
    n_rows = n_targets * n_repeats
    by_hat = held_model._by_hat
    results, hats = {}, []
    for route in ("hat for long runs", "coordinates"):
        monkeypatch.setattr(
            held_model,
            "_by_hat",
            (lambda *shape: hats.append(shape) or by_hat(*shape))
            if route.startswith("hat")
            else (lambda *shape: False),
        )
        for means in (None, own):
            shift, squares = np.empty(n_rows), np.empty(n_rows)
            errors = model.squared_errors(
                products,
                test_rows.copy(),
                n_repeats,
                root,
                {},
                (mean, w.sum(), shift, squares, means),
            )
            results[route, means is None] = (errors, shift, squares)
    # The default rule sent the long runs, and only them, to hat matrices.
    taken = [shape[0] for shape in hats if by_hat(*shape)]
    assert taken and min(taken) >= 60 > max(s[0] for s in hats if not by_hat(*s))
    for key, result in results.items():
        for got, expected in zip(result, results["coordinates", True]):
            assert_allclose(got, expected, rtol=1e-12, atol=1e-12, err_msg=str(key))
    assert_allclose(results["coordinates", True][1], own - mean, rtol=1e-12, atol=1e-12)
