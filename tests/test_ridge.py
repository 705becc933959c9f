import pickle
import warnings

import numpy as np
import pytest
import sklearn
from scipy import sparse
from sklearn.datasets import load_diabetes, load_linnerud
from sklearn.linear_model import Ridge, RidgeCV
from sklearn.metrics import mean_squared_error, r2_score
from sklearn.model_selection import (
    GridSearchCV,
    KFold,
    TimeSeriesSplit,
    cross_val_score,
)
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from skbatch import Backend, BatchedRidge, DegenerateDataWarning, memory
from skbatch._ridge import problems
from skbatch._ridge.cv import LeaveOneOut, cv_scheme
from skbatch.memory import GB
from skbatch.testing import simulate_oom

ALPHAS = np.logspace(-3, 4, 12)


def make_data(n, p, t, seed=0, noise=1.0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    W = rng.standard_normal((p, t)) * rng.uniform(0, 1, size=t)
    Y = X @ W + noise * rng.standard_normal((n, t)) + rng.standard_normal(t)
    return X, Y


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize(("n", "p", "t"), [(50, 10, 1), (40, 60, 7), (80, 20, 500)])
def test_single_alpha_matches_sklearn_ridge(n, p, t, fit_intercept):
    X, Y = make_data(n, p, t)
    y = Y[:, 0] if t == 1 else Y
    ours = BatchedRidge(alphas=2.5, fit_intercept=fit_intercept).fit(X, y)
    ref = Ridge(alpha=2.5, solver="svd", fit_intercept=fit_intercept).fit(X, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ours.predict(X), ref.predict(X), rtol=1e-8, atol=1e-10)
    assert ours.coef_.shape == ref.coef_.shape
    assert ours.predict(X).dtype == np.float64


@pytest.mark.parametrize("loader", [load_diabetes, load_linnerud])
def test_bundled_datasets_match_sklearn(loader):
    X, y = loader(return_X_y=True)
    X = X.astype(np.float64)
    ours = BatchedRidge(alphas=0.7).fit(X, y)
    ref = Ridge(alpha=0.7, solver="svd").fit(X, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(ours.predict(X), ref.predict(X), rtol=1e-8)
    cv_ours = BatchedRidge(alphas=ALPHAS).fit(X, y)
    cv_ref = RidgeCV(alphas=ALPHAS, alpha_per_target=True).fit(X, y)
    np.testing.assert_array_equal(cv_ours.alpha_, cv_ref.alpha_)


@pytest.mark.parametrize(("n", "p"), [(60, 15), (30, 45)])
def test_loo_picks_sklearn_ridgecv_alphas(n, p):
    X, Y = make_data(n, p, 40, seed=1, noise=3.0)
    ours = BatchedRidge(alphas=ALPHAS).fit(X, Y)
    ref = RidgeCV(alphas=ALPHAS, alpha_per_target=True).fit(X, Y)
    np.testing.assert_array_equal(ours.alpha_, ref.alpha_)
    assert len(np.unique(ours.alpha_)) > 1
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ours.best_score_, ref.best_score_, rtol=1e-8)


def test_loo_with_sample_weight_matches_sklearn():
    X, Y = make_data(50, 8, 6, seed=2, noise=2.0)
    weight = np.random.default_rng(3).uniform(0.5, 2.0, size=50)
    ours = BatchedRidge(alphas=ALPHAS).fit(X, Y, sample_weight=weight)
    ref = RidgeCV(alphas=ALPHAS, alpha_per_target=True).fit(X, Y, sample_weight=weight)
    np.testing.assert_array_equal(ours.alpha_, ref.alpha_)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ours.best_score_, ref.best_score_, rtol=1e-8)


def test_shared_alpha_matches_sklearn():
    X, Y = make_data(60, 10, 8, seed=4, noise=2.0)
    ours = BatchedRidge(alphas=ALPHAS, alpha_per_target=False).fit(X, Y)
    ref = RidgeCV(alphas=ALPHAS).fit(X, Y)
    assert ours.alpha_ == ref.alpha_
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ours.best_score_, ref.best_score_, rtol=1e-8)


@pytest.mark.parametrize("cv", [None, 4])
def test_a_target_without_scores_does_not_choose_the_shared_alpha(cv):
    """A constant target has no correlation at any alpha: it is left out.

    The shared alpha, coefficients and best score of the other targets are
    those of a fit without it, with no warning of NaN slices.
    """
    X, Y = make_data(40, 5, 4, seed=32, noise=0.5)
    with_constant = np.column_stack([Y[:, :2], np.full(40, 3.0), Y[:, 2:]])
    args = dict(alphas=ALPHAS, cv=cv, alpha_per_target=False, scoring="correlation")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        ours = BatchedRidge(**args).fit(X, with_constant)
    # Per target, its best_score_ is NaN, which one DegenerateDataWarning
    # says (and no warning of numpy's).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        BatchedRidge(**{**args, "alpha_per_target": True}).fit(X, with_constant)
    runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert [w.category for w in runtime] == [DegenerateDataWarning]
    assert "1 of 5 targets" in str(runtime[0].message)
    ref = BatchedRidge(**args).fit(X, Y)
    assert ours.alpha_ == ref.alpha_
    assert ours.best_score_ == pytest.approx(ref.best_score_, rel=1e-12)
    np.testing.assert_allclose(ours.coef_[[0, 1, 3, 4]], ref.coef_, rtol=1e-12)
    assert np.isfinite(ours.best_score_)


def test_loo_r2_scoring_matches_hand_loo():
    X, Y = make_data(30, 5, 4, seed=5, noise=2.0)
    ours = BatchedRidge(alphas=ALPHAS, scoring="r2", store_cv_results=True).fit(X, Y)
    for k, alpha in enumerate(ALPHAS):
        predictions = np.empty_like(Y)
        for i in range(len(X)):
            keep = np.arange(len(X)) != i
            fit = Ridge(alpha=alpha).fit(X[keep], Y[keep])
            predictions[i] = fit.predict(X[i : i + 1])[0]
        expected = r2_score(Y, predictions, multioutput="raw_values")
        np.testing.assert_allclose(
            ours.cv_results_["scores"][:, k], expected, rtol=1e-8
        )


@pytest.mark.parametrize("scoring", [None, "neg_mean_squared_error", "correlation"])
def test_kfold_scores_equal_hand_loop(scoring):
    X, Y = make_data(70, 12, 9, seed=6, noise=2.0)
    cv = KFold(5, shuffle=True, random_state=0)
    ours = BatchedRidge(alphas=ALPHAS, cv=cv, scoring=scoring, store_cv_results=True)
    ours.fit(X, Y)
    expected = np.zeros((Y.shape[1], ALPHAS.size))
    for train, test in cv.split(X):
        for k, alpha in enumerate(ALPHAS):
            pred = Ridge(alpha=alpha).fit(X[train], Y[train]).predict(X[test])
            if scoring is None:
                fold = r2_score(Y[test], pred, multioutput="raw_values")
            elif scoring == "neg_mean_squared_error":
                fold = -mean_squared_error(Y[test], pred, multioutput="raw_values")
            else:
                fold = [np.corrcoef(Y[test][:, j], pred[:, j])[0, 1] for j in range(9)]
            expected[:, k] += np.asarray(fold) / 5
    np.testing.assert_allclose(
        ours.cv_results_["scores"], expected, rtol=1e-8, atol=1e-12
    )
    np.testing.assert_array_equal(ours.alpha_, ALPHAS[np.argmax(expected, axis=1)])
    refit = Ridge(alpha=ours.alpha_).fit(X, Y)
    np.testing.assert_allclose(ours.coef_, refit.coef_, rtol=1e-8, atol=1e-10)


SPLITTERS = {
    # Train and test rows in runs (read as views), scattered (gathered), and
    # training rows only before the test rows.
    "kfold": KFold(5),
    "shuffled": KFold(5, shuffle=True, random_state=1),
    "time series": TimeSeriesSplit(4),
}


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("splitter", SPLITTERS)
@pytest.mark.slow
def test_kfold_r2_equals_hand_loop_for_any_splitter(splitter, weighted, fit_intercept):
    X, Y = make_data(60, 10, 7, seed=11, noise=2.0)
    Y += 50.0  # far from zero: the training means matter
    weight = np.random.default_rng(12).uniform(0.2, 3.0, 60) if weighted else None
    cv = SPLITTERS[splitter]
    ours = BatchedRidge(
        alphas=ALPHAS, cv=cv, fit_intercept=fit_intercept, store_cv_results=True
    ).fit(X, Y, sample_weight=weight)
    folds = []
    for train, test in cv.split(X):
        train_weight = None if weight is None else weight[train]
        test_weight = None if weight is None else weight[test]
        folds.append(
            [
                r2_score(
                    Y[test],
                    Ridge(alpha=alpha, fit_intercept=fit_intercept)
                    .fit(X[train], Y[train], sample_weight=train_weight)
                    .predict(X[test]),
                    sample_weight=test_weight,
                    multioutput="raw_values",
                )
                for alpha in ALPHAS
            ]
        )
    expected = np.mean(folds, axis=0).T
    np.testing.assert_allclose(ours.cv_results_["scores"], expected, rtol=1e-8)
    np.testing.assert_array_equal(ours.alpha_, ALPHAS[np.argmax(expected, axis=1)])


def test_kfold_float32_with_offset_targets_matches_float64():
    X, Y = make_data(200, 15, 12, seed=13, noise=2.0)
    Y += 1e3
    ref = BatchedRidge(alphas=ALPHAS, cv=5, store_cv_results=True).fit(X, Y)
    model = BatchedRidge(
        alphas=ALPHAS, cv=5, dtype="float32", store_cv_results=True
    ).fit(X, Y)
    assert model.cv_results_["scores"].dtype == np.float64
    np.testing.assert_allclose(
        model.cv_results_["scores"], ref.cv_results_["scores"], rtol=1e-4, atol=1e-6
    )
    np.testing.assert_array_equal(model.alpha_, ref.alpha_)


@pytest.mark.parametrize("cv", [None, "gcv", 4])
def test_batches_side_by_side_equal_batches_in_turn(cv):
    X, Y = make_data(50, 10, 40, seed=14, noise=2.0)
    with threadpool_limits(1, user_api="blas"):
        ref = BatchedRidge(alphas=ALPHAS, cv=cv, n_targets_batch=6).fit(X, Y)
        ref_predictions = ref.predict(X)
    with threadpool_limits(2, user_api="blas"):
        model = BatchedRidge(alphas=ALPHAS, cv=cv, n_targets_batch=6).fit(X, Y)
        predictions = model.predict(X)
    np.testing.assert_array_equal(model.alpha_, ref.alpha_)
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(predictions, ref_predictions, rtol=1e-12)


def test_gcv_picks_alpha_of_naive_gcv():
    X, Y = make_data(40, 6, 5, seed=7, noise=2.0)
    ours = BatchedRidge(alphas=ALPHAS, cv="gcv", store_cv_results=True).fit(X, Y)
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    n = len(X)
    expected = np.empty((5, ALPHAS.size))
    for k, alpha in enumerate(ALPHAS):
        H = Xc @ np.linalg.solve(Xc.T @ Xc + alpha * np.eye(6), Xc.T) + 1.0 / n
        residual = Y - Y.mean(0) - (H - 1.0 / n) @ Yc
        expected[:, k] = -np.mean(residual**2, 0) / (1 - np.trace(H) / n) ** 2
    np.testing.assert_allclose(ours.cv_results_["scores"], expected, rtol=1e-8)
    np.testing.assert_array_equal(ours.alpha_, ALPHAS[np.argmax(expected, 1)])


@pytest.mark.parametrize("cv", [None, "gcv", 4])
def test_batching_budget_and_oom_do_not_change_results(cv):
    X, Y = make_data(50, 10, 40, seed=8, noise=2.0)
    ref = BatchedRidge(alphas=ALPHAS, cv=cv).fit(X, Y)
    variants = [
        BatchedRidge(alphas=ALPHAS, cv=cv, n_targets_batch=1),
        BatchedRidge(alphas=ALPHAS, cv=cv, n_targets_batch=17),
        BatchedRidge(alphas=ALPHAS, cv=cv, n_targets_batch=40),
        BatchedRidge(alphas=ALPHAS, cv=cv, max_memory_gb=1.2e-4),
    ]
    for model in variants:
        model.fit(X, Y)
    assert variants[-1].fit_report_.stages[0].n_batches > 1
    for model in variants:
        np.testing.assert_array_equal(model.alpha_, ref.alpha_)
        np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-10, atol=1e-12)
    with simulate_oom(max_items=3):
        model = BatchedRidge(alphas=ALPHAS, cv=cv).fit(X, Y)
        predictions = model.predict(X)
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(predictions, ref.predict(X), rtol=1e-10)


@pytest.mark.parametrize("cv", [None, "gcv"])
def test_batch_size_leaves_every_target_bit_for_bit(cv):
    # A target's coefficients do not depend on the targets it is batched
    # with, in batches of whole products (a batch of one target is a
    # matrix-vector product, rounded otherwise): a Fortran-ordered basis from
    # LAPACK rounded them differently by batch size.
    X, Y = make_data(60, 5, 120, seed=10)
    ref = BatchedRidge(alphas=ALPHAS, cv=cv).fit(X, Y)
    for batch in (40, 60):
        model = BatchedRidge(alphas=ALPHAS, cv=cv, n_targets_batch=batch).fit(X, Y)
        np.testing.assert_array_equal(model.alpha_, ref.alpha_)
        np.testing.assert_array_equal(model.coef_, ref.coef_)
        np.testing.assert_array_equal(model.intercept_, ref.intercept_)


@pytest.mark.parametrize("cv", [None, "gcv", 5])
def test_constant_targets_fit_exactly_in_any_batch(cv):
    """A constant target has nothing to fit: no coefficients, its value.

    Centred exactly to zero, its scores tie at every alpha and it keeps the
    first; rounding noise in its place made its scores noise, and its alpha
    depend on the batch it was in (1e4 in a batch of several, 0.01 alone).
    """
    rng = np.random.default_rng(33)
    X = rng.standard_normal((40, 6))
    Y = np.column_stack([np.full((40, 4), 0.1), rng.standard_normal((40, 4))])
    alphas = np.logspace(-2, 4, 7)
    ref = BatchedRidge(alphas=alphas, cv=cv).fit(X, Y)
    np.testing.assert_array_equal(ref.alpha_[:4], alphas[0])
    np.testing.assert_array_equal(ref.intercept_[:4], 0.1)
    np.testing.assert_array_equal(ref.coef_[:4], 0.0)
    one = BatchedRidge(alphas=alphas, cv=cv, n_targets_batch=1).fit(X, Y)
    with simulate_oom(3):
        split = BatchedRidge(alphas=alphas, cv=cv).fit(X, Y)
    for model in (one, split):
        np.testing.assert_array_equal(model.alpha_, ref.alpha_)
        np.testing.assert_array_equal(model.intercept_[:4], ref.intercept_[:4])
        np.testing.assert_array_equal(model.coef_[:4], ref.coef_[:4])


@pytest.mark.parametrize("cv", [None, "gcv", 5])
def test_weighted_constant_targets_fit_exactly_when_row_0_weighs_nothing(cv):
    # Constant on the rows that weigh; row 0 weighs 0 and holds another
    # value. Anchored on row 0, the centring left rounding noise in place of
    # zeros, so the fit was not exact and the alpha depended on the batch.
    rng = np.random.default_rng(34)
    X = rng.standard_normal((40, 6))
    Y = np.column_stack([np.full((40, 4), 0.1), rng.standard_normal((40, 4))])
    Y[0, :4] = [7.3, -1e3, 0.3, 1e-4]
    weight = rng.uniform(0.2, 3.0, 40)
    weight[0] = 0.0
    alphas = np.logspace(-2, 4, 7)
    ref = BatchedRidge(alphas=alphas, cv=cv).fit(X, Y, sample_weight=weight)
    np.testing.assert_array_equal(ref.alpha_[:4], alphas[0])
    np.testing.assert_array_equal(ref.intercept_[:4], 0.1)
    np.testing.assert_array_equal(ref.coef_[:4], 0.0)
    one = BatchedRidge(alphas=alphas, cv=cv, n_targets_batch=1)
    one.fit(X, Y, sample_weight=weight)
    np.testing.assert_array_equal(one.alpha_, ref.alpha_)
    np.testing.assert_array_equal(one.coef_[:4], 0.0)
    # The other targets: sklearn's weighted Ridge at the alphas chosen (GCV
    # normalises the weights to sum to the rows of non-zero weight).
    if cv == "gcv":
        weight = weight * np.count_nonzero(weight) / weight.sum()
    for j in range(4, 8):
        sk = Ridge(alpha=ref.alpha_[j]).fit(X, Y[:, j], sample_weight=weight)
        np.testing.assert_allclose(ref.coef_[j], sk.coef_, rtol=1e-8, atol=1e-10)


def test_impossible_budget_is_refused_up_front():
    X, Y = make_data(200, 50, 3)
    with pytest.raises(ValueError, match="max_memory_gb"):
        BatchedRidge(max_memory_gb=1e-6).fit(X, Y)


@pytest.mark.parametrize("device", ["torch", "jax"])
@pytest.mark.parametrize("cv", [None, 3])
@pytest.mark.slow
def test_torch_and_jax_agree_with_numpy(device, cv):
    pytest.importorskip(device)
    X, Y = make_data(40, 8, 6, seed=9, noise=2.0)
    ref = BatchedRidge(alphas=ALPHAS, cv=cv).fit(X, Y)
    model = BatchedRidge(alphas=ALPHAS, cv=cv, device=device, dtype="float64").fit(X, Y)
    assert model.backend_.library == device
    np.testing.assert_array_equal(model.alpha_, ref.alpha_)
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(model.predict(X), ref.predict(X), rtol=1e-6)


def test_float32_on_cpu_picks_float64_alphas():
    X, Y = make_data(100, 20, 30, seed=10, noise=2.0)
    ref = BatchedRidge(alphas=ALPHAS).fit(X, Y)
    model = BatchedRidge(alphas=ALPHAS, dtype="float32").fit(X, Y)
    assert model.dtype_ == np.float32
    np.testing.assert_array_equal(model.alpha_, ref.alpha_)
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=1e-3, atol=1e-4)


def test_torch_input_gives_torch_output():
    torch = pytest.importorskip("torch")
    X, Y = make_data(30, 4, 2)
    model = BatchedRidge(alphas=1.0, device="torch").fit(
        torch.tensor(X), torch.tensor(Y)
    )
    out = model.predict(torch.tensor(X))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
    np.testing.assert_allclose(out.numpy(), model.predict(X), rtol=1e-12)
    assert isinstance(model.predict(X), np.ndarray)


@pytest.mark.slow
def test_jax_input_gives_jax_output():
    pytest.importorskip("jax")
    import jax

    X, Y = make_data(30, 4, 2)
    model = BatchedRidge(alphas=1.0, device="jax", dtype="float64").fit(X, Y)
    with jax.enable_x64(True):
        out = model.predict(jax.numpy.asarray(X))
    assert isinstance(out, jax.Array) and out.dtype == np.float64
    np.testing.assert_allclose(np.asarray(out), model.predict(X), rtol=1e-12)


def test_sklearn_tools_work():
    X, Y = make_data(60, 6, 3, seed=11)
    pipe = make_pipeline(StandardScaler(), BatchedRidge(alphas=ALPHAS)).fit(X, Y)
    assert pipe.predict(X).shape == Y.shape
    scores = cross_val_score(BatchedRidge(alphas=ALPHAS), X, Y[:, 0], cv=3)
    ref = cross_val_score(RidgeCV(alphas=ALPHAS), X, Y[:, 0], cv=3)
    np.testing.assert_allclose(scores, ref, rtol=1e-8)
    search = GridSearchCV(
        BatchedRidge(),
        {"alphas": [0.1, 1.0, 100.0], "fit_intercept": [True, False]},
        cv=3,
        n_jobs=2,
    ).fit(X, Y)
    ref = GridSearchCV(
        Ridge(), {"alpha": [0.1, 1.0, 100.0], "fit_intercept": [True, False]}, cv=3
    ).fit(X, Y)
    np.testing.assert_allclose(
        search.cv_results_["mean_test_score"],
        ref.cv_results_["mean_test_score"],
        rtol=1e-8,
    )


def test_score_and_score_per_target():
    X, Y = make_data(60, 6, 4, seed=12)
    model = BatchedRidge(alphas=ALPHAS).fit(X, Y)
    per_target = model.score_per_target(X, Y)
    np.testing.assert_allclose(
        per_target, r2_score(Y, model.predict(X), multioutput="raw_values")
    )
    assert model.score(X, Y) == pytest.approx(per_target.mean())


def test_pickle_round_trip():
    X, Y = make_data(30, 5, 3)
    model = BatchedRidge(alphas=ALPHAS).fit(X, Y)
    loaded = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    assert loaded.backend_ == model.backend_


def _pretend_cuda(monkeypatch, available):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: int(available))


def test_cuda_model_refuses_cpu_host_until_moved(monkeypatch):
    X, Y = make_data(30, 5, 3)
    model = BatchedRidge(alphas=1.0).fit(X, Y)
    expected = model.predict(X)
    model.backend_ = Backend("torch", "cuda:0")
    _pretend_cuda(monkeypatch, False)
    loaded = pickle.loads(pickle.dumps(model))
    assert loaded.backend_ == Backend("torch", "cuda:0")
    with pytest.raises(RuntimeError, match=r"cuda:0.*to_device"):
        loaded.predict(X)
    loaded.to_device("cpu")
    assert loaded.backend_.name == "numpy"
    np.testing.assert_allclose(loaded.predict(X), expected, rtol=1e-12)


def test_array_on_other_device_is_refused(monkeypatch):
    torch = pytest.importorskip("torch")
    X, Y = make_data(30, 5, 3)
    model = BatchedRidge(alphas=1.0).fit(X, Y)
    _pretend_cuda(monkeypatch, True)
    model.backend_ = Backend("torch", "cuda:0")
    with pytest.raises(ValueError, match=r"device 'cpu'.*cuda:0"):
        model.predict(torch.tensor(X))


def test_gpu_request_without_gpu_raises(monkeypatch):
    X, Y = make_data(20, 3, 2)
    _pretend_cuda(monkeypatch, False)
    with pytest.raises(RuntimeError, match="cuda"):
        BatchedRidge(device="cuda").fit(X, Y)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"alphas": 0.0}, "alphas"),
        ({"alphas": [1.0, -1.0]}, "alphas"),
        ({"alphas": [1.0, np.nan]}, "alphas"),
        ({"alphas": []}, "alphas"),
        ({"alphas": "big"}, "alphas"),
        ({"scoring": "accuracy"}, "scoring"),
        ({"cv": "loo"}, "cv"),
        ({"cv": "gcv", "scoring": "r2"}, "scoring"),
        ({"dtype": "float16"}, "dtype"),
        ({"n_targets_batch": 0}, "n_targets_batch"),
        ({"max_memory_gb": 0}, "max_memory_gb"),
        ({"max_memory_gb": -1.0}, "max_memory_gb"),
        ({"device": "tpu"}, "device"),
        ({"verbose": -1}, "verbose"),
    ],
)
def test_bad_parameters_are_named(params, match):
    X, Y = make_data(20, 3, 2)
    with pytest.raises((ValueError, TypeError), match=match):
        BatchedRidge(**params).fit(X, Y)


def test_bad_data_is_refused():
    X, Y = make_data(20, 3, 2)
    X_nan = X.copy()
    X_nan[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        BatchedRidge().fit(X_nan, Y)
    Y_inf = Y.copy()
    Y_inf[1, 1] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        BatchedRidge().fit(X, Y_inf)
    with pytest.raises(ValueError, match="1 sample"):
        BatchedRidge().fit(X[:1], Y[:1])
    with pytest.raises(TypeError, match="Sparse data was passed for y"):
        BatchedRidge().fit(X, sparse.csr_matrix(Y))
    with pytest.raises(ValueError, match="y must hold numbers: could not convert"):
        BatchedRidge().fit(X, np.array(["a", "b"] * 10))


@pytest.mark.parametrize("alphas", [1.0, ALPHAS])
def test_targets_of_any_numeric_spelling_fit_as_floats(alphas):
    """Booleans, integers and numbers in strings fit as Ridge reads them."""
    X, Y = make_data(30, 3, 2)
    counts = np.round(np.abs(Y) * 3)
    for spelled, value in [
        (Y > 0, (Y > 0).astype(float)),
        (counts.astype(np.uint8), counts),
        (Y.astype(str), Y),
    ]:
        ours = BatchedRidge(alphas=alphas).fit(X, spelled)
        ref = BatchedRidge(alphas=alphas).fit(X, value)
        np.testing.assert_array_equal(ours.alpha_, ref.alpha_)
        np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-12)


@pytest.mark.parametrize("weighted", [False, True])
def test_score_per_target_scorings_match_references(weighted):
    X, Y = make_data(60, 6, 4, seed=15)
    model = BatchedRidge(alphas=ALPHAS).fit(X[:40], Y[:40])
    X_test, Y_test = X[40:], Y[40:]
    weight = np.random.default_rng(16).uniform(0.2, 3.0, 20) if weighted else None
    predictions = model.predict(X_test)
    np.testing.assert_allclose(
        model.score_per_target(X_test, Y_test, sample_weight=weight),
        r2_score(Y_test, predictions, sample_weight=weight, multioutput="raw_values"),
        rtol=1e-10,
    )
    np.testing.assert_allclose(
        model.score_per_target(
            X_test, Y_test, sample_weight=weight, scoring="neg_mean_squared_error"
        ),
        -mean_squared_error(
            Y_test, predictions, sample_weight=weight, multioutput="raw_values"
        ),
        rtol=1e-10,
    )
    covariances = [
        np.cov(Y_test[:, j], predictions[:, j], aweights=weight) for j in range(4)
    ]
    np.testing.assert_allclose(
        model.score_per_target(
            X_test, Y_test, sample_weight=weight, scoring="correlation"
        ),
        [c[0, 1] / np.sqrt(c[0, 0] * c[1, 1]) for c in covariances],
        rtol=1e-10,
    )
    one_target = BatchedRidge(alphas=ALPHAS).fit(X[:40], Y[:40, 0])
    assert one_target.score_per_target(X_test, Y_test[:, 0]).shape == (1,)
    with pytest.raises(ValueError, match=r"scoring must be one of .*'accuracy'"):
        model.score_per_target(X_test, Y_test, scoring="accuracy")


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.UndefinedMetricWarning")
def test_one_row_test_fold_is_nan_as_in_grid_search():
    """KFold(11) on 21 rows leaves one row in the last fold: its R^2 is NaN.

    GridSearchCV then has NaN for every alpha, keeps the first, and reports
    a NaN best score: so does BatchedRidge, with a warning naming cv.
    """
    X, Y = make_data(21, 4, 3, seed=17)
    cv = KFold(11)
    with pytest.warns(UserWarning, match=r"cv has test folds .*sizes \[2 2 .* 1\]"):
        ours = BatchedRidge(alphas=ALPHAS, cv=cv, alpha_per_target=False).fit(X, Y)
    with pytest.warns(UserWarning, match="non-finite"):
        ref = GridSearchCV(Ridge(), {"alpha": ALPHAS}, cv=cv).fit(X, Y)
    assert np.isnan(ref.best_score_) and np.isnan(ours.best_score_)
    assert ours.alpha_ == ref.best_params_["alpha"]
    with pytest.warns(UserWarning, match="cv has test folds"):
        per_target = BatchedRidge(alphas=ALPHAS, cv=cv).fit(X, Y)
    assert np.isnan(per_target.best_score_).all()
    np.testing.assert_array_equal(per_target.alpha_, ALPHAS[0])


def test_one_row_test_fold_with_mse_matches_grid_search():
    X, y = make_data(21, 4, 1, seed=18)
    cv = KFold(11)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the MSE of one row is defined
        ours = BatchedRidge(alphas=ALPHAS, cv=cv, scoring="neg_mean_squared_error").fit(
            X, y[:, 0]
        )
    ref = GridSearchCV(
        Ridge(), {"alpha": ALPHAS}, cv=cv, scoring="neg_mean_squared_error"
    ).fit(X, y[:, 0])
    assert ours.alpha_ == ref.best_params_["alpha"]
    np.testing.assert_allclose(ours.best_score_, ref.best_score_, rtol=1e-8)


def _gcv_fit(X, Y, weight, alpha_per_target=True):
    return BatchedRidge(
        alphas=ALPHAS,
        cv="gcv",
        alpha_per_target=alpha_per_target,
        store_cv_results=True,
    ).fit(X, Y, sample_weight=weight)


@pytest.mark.parametrize("alpha_per_target", [True, False])
def test_gcv_zero_weight_rows_equal_dropped_rows_and_scale_is_irrelevant(
    alpha_per_target,
):
    X, Y = make_data(40, 8, 6, seed=19, noise=2.0)
    weight = np.random.default_rng(20).uniform(0.2, 3.0, 40)
    weight[::5] = 0.0
    kept = weight > 0

    def fit(X, Y, weight):
        return _gcv_fit(X, Y, weight, alpha_per_target)

    full = fit(X, Y, weight)
    dropped = fit(X[kept], Y[kept], weight[kept])
    scaled = fit(X, Y, 7.0 * weight)
    for other in (dropped, scaled):
        np.testing.assert_array_equal(other.alpha_, full.alpha_)
        np.testing.assert_allclose(other.coef_, full.coef_, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(other.intercept_, full.intercept_, rtol=1e-9)
        np.testing.assert_allclose(other.best_score_, full.best_score_, rtol=1e-9)
    if alpha_per_target:
        assert len(np.unique(full.alpha_)) > 1
    # Equal weights, whatever their value, are no weights at all.
    unweighted = fit(X, Y, None)
    constant = fit(X, Y, np.full(40, 3.0))
    np.testing.assert_array_equal(constant.alpha_, unweighted.alpha_)
    np.testing.assert_allclose(constant.coef_, unweighted.coef_, rtol=1e-9)
    np.testing.assert_allclose(constant.best_score_, unweighted.best_score_, rtol=1e-9)


def test_gcv_with_weights_matches_naive_weighted_hat_matrix():
    """GCV = (sum w r^2 / n_eff) / (1 - tr(H) / n_eff)^2, w summing to n_eff."""
    X, Y = make_data(30, 6, 4, seed=21, noise=2.0)
    weight = np.random.default_rng(22).uniform(0.2, 3.0, 30)
    weight[[4, 9]] = 0.0
    ours = _gcv_fit(X, Y, weight)
    n_eff = 28
    normalised = weight * n_eff / weight.sum()
    root = np.sqrt(normalised)[:, None]
    Xc = root * (X - np.average(X, axis=0, weights=normalised))
    Yc = root * (Y - np.average(Y, axis=0, weights=normalised))
    expected = np.empty((4, ALPHAS.size))
    for k, alpha in enumerate(ALPHAS):
        hat = Xc @ np.linalg.solve(Xc.T @ Xc + alpha * np.eye(6), Xc.T)
        rss = np.sum((Yc - hat @ Yc) ** 2, axis=0)
        expected[:, k] = -(rss / n_eff) / (1 - (np.trace(hat) + 1) / n_eff) ** 2
    np.testing.assert_allclose(ours.cv_results_["scores"], expected, rtol=1e-8)
    best = ALPHAS[np.argmax(expected, axis=1)]
    np.testing.assert_array_equal(ours.alpha_, best)
    ref = Ridge(alpha=best).fit(X, Y, sample_weight=normalised)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-8, atol=1e-10)


@pytest.mark.skipif(
    tuple(int(part) for part in sklearn.__version__.split(".")[:2]) < (1, 7),
    reason="RidgeCV(cv=K) weights the held-out rows from scikit-learn 1.7 on",
)
@pytest.mark.parametrize("scoring", [None, "neg_mean_squared_error"])
def test_kfold_sample_weight_matches_sklearn_ridgecv(scoring):
    """RidgeCV(cv=K) weights the held-out rows in the score (sklearn >= 1.7)."""
    X, Y = make_data(60, 8, 1, seed=23, noise=3.0)
    y = Y[:, 0]
    weight = np.random.default_rng(24).uniform(0.0, 3.0, 60)
    grid = np.logspace(-2, 3, 12)
    ours = BatchedRidge(
        alphas=grid, cv=KFold(5), alpha_per_target=False, scoring=scoring
    ).fit(X, y, sample_weight=weight)
    ref = RidgeCV(alphas=grid, cv=KFold(5), scoring=scoring).fit(
        X, y, sample_weight=weight
    )
    assert ours.alpha_ == ref.alpha_
    np.testing.assert_allclose(ours.best_score_, ref.best_score_, rtol=1e-8)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-8, atol=1e-10)


def _as_masks(splits, n):
    return [
        (np.isin(np.arange(n), train), np.isin(np.arange(n), test))
        for train, test in splits
    ]


@pytest.mark.parametrize(
    "spell",
    [
        pytest.param(
            lambda splits, n: [(t - n, s - n) for t, s in splits], id="negative"
        ),
        pytest.param(_as_masks, id="boolean masks"),
        pytest.param(
            lambda splits, n: [(list(t), list(s)) for t, s in splits], id="lists"
        ),
        pytest.param(
            lambda splits, n: [
                (t.astype(np.uint16), s.astype(np.int32)) for t, s in splits
            ],
            id="other int dtypes",
        ),
    ],
)
@pytest.mark.parametrize("shuffle", [False, True])
def test_explicit_splits_index_rows_as_sklearn_does(spell, shuffle):
    """Splits are read as X[rows] would read them, as RidgeCV(cv=splits) does.

    Unshuffled folds are runs of consecutive rows, read as slices: the last
    fold, spelled -10..-1, is a run that ends at the last row.
    """
    X, Y = make_data(40, 5, 3, seed=31, noise=2.0)
    random_state = 0 if shuffle else None
    splits = list(KFold(4, shuffle=shuffle, random_state=random_state).split(X))
    ours = BatchedRidge(alphas=ALPHAS, cv=spell(splits, 40), alpha_per_target=False)
    ours.fit(X, Y)
    ref = RidgeCV(alphas=ALPHAS, cv=splits).fit(X, Y)
    assert ours.alpha_ == ref.alpha_
    np.testing.assert_allclose(ours.best_score_, ref.best_score_, rtol=1e-8)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-8)


@pytest.mark.parametrize(
    ("split", "error", "match"),
    [
        (
            (np.arange(20), np.array([30])),
            ValueError,
            "test row index 30 is out",
        ),
        (
            (np.arange(-31, -11), np.arange(20, 30)),
            ValueError,
            "training row index -31",
        ),
        (
            (np.arange(20.0), np.arange(20, 30)),
            TypeError,
            "the training rows must be integer",
        ),
        ((np.ones(29, bool), np.arange(29, 30)), ValueError, "mask.*30.*got 29"),
        ((np.arange(20)[:, None], np.arange(20, 30)), ValueError, "must be 1-D"),
    ],
)
def test_explicit_splits_outside_the_rows_are_refused_naming_cv(split, error, match):
    X, Y = make_data(30, 3, 2)
    with pytest.raises(error, match=f"cv fold 0: .*{match}"):
        BatchedRidge(cv=[split]).fit(X, Y)


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"fit_intercept": "yes"}, (ValueError, TypeError), "'fit_intercept'.*'yes'"),
        ({"alpha_per_target": 1}, (ValueError, TypeError), "'alpha_per_target'"),
        ({"store_cv_results": "no"}, (ValueError, TypeError), "'store_cv_results'"),
        ({"dtype": 3}, ValueError, "'dtype'.*Got 3"),
        ({"dtype": None}, ValueError, "'dtype'.*Got None"),
        ({"alphas": True}, TypeError, "alphas.*bool: True"),
        ({"alphas": [True, False]}, TypeError, "alphas"),
        ({"alphas": "1"}, TypeError, "'alphas'.*Got '1'"),
        ({"alphas": ["1", "2"]}, TypeError, "alphas"),
        ({"cv": 1}, ValueError, "'cv'"),
        ({"cv": []}, ValueError, "cv must yield at least one"),
        ({"cv": iter([])}, ValueError, "cv must yield at least one"),
    ],
)
def test_bad_parameter_types_are_refused_as_sklearn_does(params, error, match):
    X, Y = make_data(20, 3, 2)
    with pytest.raises(error, match=match):
        BatchedRidge(**params).fit(X, Y)


def _exhausted(splits):
    generator = iter(splits)
    list(generator)
    return generator


@pytest.mark.parametrize(
    ("make_cv", "match"),
    [
        (lambda rows: _exhausted(KFold(3).split(rows)), "at least one train/test"),
        (lambda rows: [(rows[:15], rows[15:]), (rows, rows[:0])], "empty test fold"),
        (lambda rows: [(rows[:0], rows)], "fold 0 has 0 training row"),
        (lambda rows: [(rows[5:], rows[:5]), (rows[:1], rows[1:])], "fold 1 has 1"),
    ],
)
def test_unusable_folds_are_refused_naming_cv(make_cv, match):
    X, Y = make_data(20, 3, 2)
    with pytest.raises(ValueError, match=f"cv.*{match}|{match}.*cv"):
        BatchedRidge(cv=make_cv(np.arange(20))).fit(X, Y)


def test_bad_sample_weights_are_refused_naming_sample_weight():
    X, Y = make_data(30, 3, 2)
    with pytest.raises(
        ValueError, match=r"sample_weight.*\(30,\).*30 samples.*\(29,\)"
    ):
        BatchedRidge(cv=5).fit(X, Y, sample_weight=np.ones(29))
    negative = np.ones(30)
    negative[3] = -0.5
    for cv in (None, "gcv", 5):
        with pytest.raises(ValueError, match="sample_weight must be non-negative"):
            BatchedRidge(cv=cv).fit(X, Y, sample_weight=negative)
    for n_weighted in (0, 1):
        weight = np.zeros(30)
        weight[:n_weighted] = 1.0
        with pytest.raises(ValueError, match=f"sample_weight .* got {n_weighted} "):
            BatchedRidge().fit(X, Y, sample_weight=weight)
    # KFold(5): fold 0 trains on rows 6-29, all of weight 0.
    only_first_fold = np.r_[np.ones(6), np.zeros(24)]
    with pytest.raises(ValueError, match="sample_weight is 0 on all 24.*cv fold 0"):
        BatchedRidge(cv=5).fit(X, Y, sample_weight=only_first_fold)


@pytest.mark.parametrize("cv", [None, "gcv", 5])
def test_huge_design_matches_ridge_of_the_unscaled_problem(cv):
    """X near 1e155: Ridge(alpha) on c X is Ridge(alpha / c^2) on X, over c."""
    X, y = make_data(100, 5, 1, seed=25, noise=0.3)
    y = y[:, 0]
    scale = 1e155
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = BatchedRidge(alphas=[1.0, 10.0], cv=cv).fit(X * scale, y)
        score = ours.score(X * scale, y)
    ref = Ridge(alpha=ours.alpha_ / scale / scale, solver="svd").fit(X, y)
    np.testing.assert_allclose(ours.coef_ * scale, ref.coef_, rtol=1e-10)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-10)
    assert score == pytest.approx(ref.score(X, y), rel=1e-10)
    assert score > 0.9


def test_tiny_design_is_shrunk_exactly_not_underflowed():
    """X near 1e-160: alpha dominates, coef = (c^2 X'X + alpha)^-1 c X'y exactly."""
    X, y = make_data(50, 4, 1, seed=26)
    y = y[:, 0]
    scale = 1e-160
    Xc, yc = X - X.mean(axis=0), y - y.mean()
    gram = scale**2 * (Xc.T @ Xc) + 1.0 * np.eye(4)
    expected = np.linalg.solve(gram, scale * (Xc.T @ yc))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = BatchedRidge(alphas=1.0).fit(X * scale, y)
    np.testing.assert_allclose(ours.coef_, expected, rtol=1e-10)


@pytest.mark.parametrize(
    ("dtype", "X_scale", "y_scale", "match"),
    [
        ("float32", 1e155, 1.0, "X has values up to .*e\\+155.*StandardScaler"),
        ("float32", 1e-50, 1.0, "X has columns .* below .*StandardScaler"),
        ("float64", 1.0, 1e155, "y has values up to .*overflow float64"),
        ("float64", 1.0, 1e-160, "y has targets .* underflow float64"),
        ("float32", 1.0, 1e20, "y has values up to .*overflow float32"),
    ],
)
@pytest.mark.parametrize("alphas", [ALPHAS, 1.0])
def test_unrepresentable_scales_are_refused(dtype, X_scale, y_scale, match, alphas):
    """With one alpha too: its squared errors give best_score_."""
    X, Y = make_data(50, 4, 2, seed=27)
    with pytest.raises(ValueError, match=match):
        BatchedRidge(alphas=alphas, dtype=dtype).fit(X * X_scale, Y * y_scale)


def test_memory_preflight_refuses_before_any_svd(monkeypatch):
    X, Y = make_data(200, 50, 3)

    def no_svd(*args, **kwargs):
        raise AssertionError("the SVD ran before the memory check")

    monkeypatch.setattr(problems.solver._linalg, "svd_decompose", no_svd)
    monkeypatch.setattr(problems.solver._linalg.svd, "svd_decompose", no_svd)
    # 8 * (2 * 200 * 50 + 250 * 50) bytes = 0.26 MB of fixed memory, the
    # SVD's transient (LAPACK's copy and workspace), and the results of 3
    # targets: 8 * 3 * (50 + 3 + 13 alphas) bytes.
    held = 8 * (2 * 200 * 50 + 250 * 50)
    workspace = problems.RidgeSolver.svd_workspace(200, 50, 8)
    assert workspace > 8 * 200 * 50
    needed = (held + workspace + 8 * 3 * (50 + 3 + 13)) / GB
    monkeypatch.setattr(problems.solver, "memory_budget", lambda backend, gb: 1e-4)
    with pytest.raises(
        ValueError, match=rf"needs {needed:.3g} GB.*budget is 0.0001 GB.*max_memory_gb"
    ):
        BatchedRidge().fit(X, Y)


def test_memory_preflight_counts_the_results_of_every_target(monkeypatch):
    # 20,000 targets: their coefficients, intercepts, chosen alphas and the
    # scores of 13 alphas are 8 * 20,000 * (5 + 3 + 13) bytes = 3.36 MB, held
    # until the fit ends, where X (30 x 5) and its SVD take 5 kB and the SVD's
    # transient 13 kB.
    X, Y = make_data(30, 5, 20_000)

    def no_svd(*args, **kwargs):
        raise AssertionError("the SVD ran before the memory check")

    monkeypatch.setattr(problems.solver._linalg, "svd_decompose", no_svd)
    monkeypatch.setattr(problems.solver._linalg.svd, "svd_decompose", no_svd)
    with pytest.raises(
        ValueError, match=r"needs 0.00338 GB.*results of 20,000 targets.*in parts"
    ):
        BatchedRidge(max_memory_gb=0.002).fit(X, Y)


def test_memory_preflight_charges_the_full_budget_not_the_batch_cap(monkeypatch):
    """Tens of GB of fixed memory are not refused under a larger budget (cap:
    8 GB)."""
    numpy_backend = Backend("numpy", "cpu")
    n, p = 100_000, 10_000
    held = 8 * (2 * n * p + (n + p) * p)
    loo = cv_scheme(None)
    needed = problems.RidgeSolver.nbytes(n, p, loo, 8)
    # The SVD's transient: at least LAPACK's copy of X (its workspace too).
    assert needed >= held + 8 * n * p
    assert needed > 8 * GB
    problems.check_solver_memory(n, p, loo, np.float64, numpy_backend, 60.0)
    with pytest.raises(ValueError, match="max_memory_gb"):
        problems.check_solver_memory(n, p, loo, np.float64, numpy_backend, 30.0)
    # A measured budget: 128 GB of free RAM, half of it usable, uncapped.
    monkeypatch.setattr(memory, "_host_budget_gb", lambda: 64.0)
    problems.check_solver_memory(n, p, loo, np.float64, numpy_backend, None)
    folds = cv_scheme(KFold(5)).split(np.empty((n, 1)), np.empty(n))
    with pytest.raises(ValueError, match="number of folds"):
        problems.check_solver_memory(n, p, folds, np.float64, numpy_backend, None)


def test_auto_dtype_keeps_float32_input_in_float32():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((80, 6))
    Y = X @ rng.standard_normal((6, 3)) + rng.standard_normal((80, 3))
    alphas = np.logspace(-1, 3, 5)
    single = BatchedRidge(alphas=alphas).fit(X.astype(np.float32), Y)
    assert single.dtype_ == np.float32
    assert single.predict(X.astype(np.float32)).dtype == np.float32
    # The fitted arrays too, as Ridge's (scikit-learn's test_dtype_match).
    assert single.coef_.dtype == single.intercept_.dtype == np.float32
    double = BatchedRidge(alphas=alphas).fit(X, Y)
    assert double.dtype_ == np.float64
    assert double.predict(X).dtype == np.float64
    assert double.coef_.dtype == double.intercept_.dtype == np.float64
    np.testing.assert_allclose(single.coef_, double.coef_, rtol=1e-4, atol=1e-5)
    no_intercept = BatchedRidge(alphas=alphas, fit_intercept=False)
    assert no_intercept.fit(X.astype(np.float32), Y).intercept_.dtype == np.float32
    # Asked for float64, float64 it is, whatever the input.
    asked = BatchedRidge(alphas=alphas, dtype="float64").fit(X.astype(np.float32), Y)
    assert asked.dtype_ == np.float64
    assert asked.predict(X.astype(np.float32)).dtype == np.float64


def _grid_edge_warnings(model, X, Y):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X, Y)
    return [str(w.message) for w in caught if "extend `alphas`" in str(w.message)]


@pytest.mark.parametrize("cv", [None, 5])
def test_warns_when_targets_choose_an_edge_of_the_grid_while_improving(cv):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 100))
    coef = 0.03 * rng.standard_normal((100, 200))
    coef[:, 100:] = 0.0  # half the targets are pure noise
    Y = X @ coef + rng.standard_normal((400, 200))
    # Every target wants far more than 10: the grid stops too early.
    messages = _grid_edge_warnings(BatchedRidge(alphas=(0.1, 1.0, 10.0), cv=cv), X, Y)
    assert len(messages) == 1 and "largest alpha (10)" in messages[0]
    # A grid wide enough: noise targets still sit at its top, flat there.
    model = BatchedRidge(cv=cv)
    assert _grid_edge_warnings(model, X, Y) == []
    assert np.mean(model.alpha_[100:] == max(model.alphas)) >= 0.4
    # Clean targets want less than the smallest alpha.
    messages = _grid_edge_warnings(
        BatchedRidge(alphas=(1e3, 1e4), cv=cv), X, X @ coef[:, :100] * 100
    )
    assert len(messages) == 1 and "smallest alpha (1000)" in messages[0]


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize(
    ("cv", "scoring"),
    [
        (None, None),
        (None, "r2"),
        ("gcv", None),
        (5, None),
        (5, "neg_mean_squared_error"),
    ],
)
def test_noise_targets_at_the_top_of_the_grid_do_not_warn(
    cv, scoring, fit_intercept, weighted
):
    """Pure noise approaches the score of no model from below: no warning.

    Each scheme's limit of an infinite alpha is its own: K-fold predicts
    each fold by its training mean (an R^2 below 0), leave-one-out by the
    mean of the other rows.
    """
    rng = np.random.default_rng(0)
    X = rng.standard_normal((100, 10))
    noise = rng.standard_normal((100, 40))
    weight = rng.uniform(0.2, 2.0, 100) if weighted else None
    model = BatchedRidge(
        alphas=np.logspace(-2, 4, 7),
        cv=cv,
        scoring=scoring,
        fit_intercept=fit_intercept,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X, noise, sample_weight=weight)
    assert np.mean(model.alpha_ == 1e4) > 0.3
    assert [str(w.message) for w in caught if "extend" in str(w.message)] == []


def test_default_alphas_reach_the_regularisation_encoding_data_needs():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((800, 300))
    coef = 0.02 * rng.standard_normal((300, 50))
    Y_train = X @ coef + rng.standard_normal((800, 50))
    X_test = rng.standard_normal((400, 300))
    Y_test = X_test @ coef + rng.standard_normal((400, 50))
    default = BatchedRidge(cv=5).fit(X, Y_train).score(X_test, Y_test)
    narrow = BatchedRidge(alphas=(0.1, 1.0, 10.0), cv=5).fit(X, Y_train)
    assert default > 0 > narrow.score(X_test, Y_test)


def test_no_model_limit_is_read_only_for_targets_at_the_largest_alpha(monkeypatch):
    # The limit of an infinite alpha takes a pass over the targets: a fit
    # whose targets all sit inside the grid never reads it, and one whose
    # noise targets sit at the top reads it for those targets only.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 20))
    coef = 0.3 * rng.standard_normal((20, 40))
    coef[:, 30:] = 0.0
    Y = X @ coef + rng.standard_normal((200, 40))
    columns_read = []
    original = LeaveOneOut.no_model_score

    def spy(self, Y, *args, **kwargs):
        columns_read.append(Y.shape[1])
        return original(self, Y, *args, **kwargs)

    monkeypatch.setattr(LeaveOneOut, "no_model_score", spy)
    inside = BatchedRidge(alphas=np.logspace(-1, 8, 10)).fit(X, Y[:, :30])
    assert np.all(inside.alpha_ < 1e8) and columns_read == []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = BatchedRidge(alphas=np.logspace(-1, 3, 5)).fit(X, Y)
    at_top = np.flatnonzero(model.alpha_ == 1e3)
    assert 0 < sum(columns_read) <= at_top.size < Y.shape[1]


# Groups: runs of a time series through every CV ------------------------------


def _ar1_runs(lengths, n_columns, phi, seed):
    """Columns of AR(1) series restarting at every run, and the run labels."""
    rng = np.random.default_rng(seed)
    parts = []
    for length in lengths:
        noise = rng.standard_normal((length, n_columns))
        series = np.empty_like(noise)
        series[0] = noise[0] / np.sqrt(1 - phi**2)
        for t in range(1, length):
            series[t] = phi * series[t - 1] + noise[t]
        parts.append(series)
    runs = np.repeat(np.arange(len(lengths)), lengths)
    return np.concatenate(parts), runs


RUN_LENGTHS = (70, 45, 60, 30)


def test_group_splitter_uses_the_groups_of_fit():
    from sklearn import config_context
    from sklearn.model_selection import LeaveOneGroupOut

    X, runs = _ar1_runs(RUN_LENGTHS, 6, 0.5, seed=0)
    Y = X @ np.random.default_rng(1).standard_normal((6, 3))
    Y += _ar1_runs(RUN_LENGTHS, 3, 0.9, seed=2)[0] * 2
    ours = BatchedRidge(alphas=ALPHAS, cv=LeaveOneGroupOut()).fit(X, Y, groups=runs)
    # sklearn's RidgeCV, one target at a time, routes the runs to its splitter.
    with config_context(enable_metadata_routing=True):
        for j in range(3):
            ref = RidgeCV(alphas=ALPHAS, cv=LeaveOneGroupOut()).fit(
                X, Y[:, j], groups=runs
            )
            assert ours.alpha_[j] == ref.alpha_
            np.testing.assert_allclose(ours.coef_[j], ref.coef_, rtol=1e-8)
            np.testing.assert_allclose(ours.best_score_[j], ref.best_score_)


def test_group_splitter_without_groups_or_with_the_wrong_length():
    from sklearn.model_selection import GroupKFold

    X, Y = make_data(40, 3, 2)
    with pytest.raises(ValueError, match="groups"):
        BatchedRidge(cv=GroupKFold(2)).fit(X, Y)
    with pytest.raises(ValueError, match=r"groups must be 1-D with one label per"):
        BatchedRidge(cv=GroupKFold(2)).fit(X, Y, groups=np.zeros(39))


def test_groups_with_splitters_that_ignore_them():
    X, Y = make_data(60, 4, 3)
    runs = np.repeat([0, 1, 2], 20)
    with warnings.catch_warnings():
        # Neither sklearn's "groups is ignored by KFold" nor any other.
        warnings.simplefilter("error")
        for cv in (None, "gcv", KFold(3)):
            plain = BatchedRidge(alphas=ALPHAS, cv=cv).fit(X, Y)
            grouped = BatchedRidge(alphas=ALPHAS, cv=cv).fit(X, Y, groups=runs)
            np.testing.assert_array_equal(grouped.coef_, plain.coef_)


def test_cross_validate_passes_groups_as_sklearn_does():
    from sklearn import config_context
    from sklearn.model_selection import GroupKFold, LeaveOneGroupOut, cross_validate

    X, runs = _ar1_runs(RUN_LENGTHS, 4, 0.5, seed=3)
    y = X[:, 0] + np.random.default_rng(4).standard_normal(runs.size)
    outer, inner = LeaveOneGroupOut(), GroupKFold(3)
    expected = []
    for train, test in outer.split(X, y, runs):
        model = BatchedRidge(alphas=ALPHAS, cv=inner)
        model.fit(X[train], y[train], groups=runs[train])
        expected.append(model.score(X[test], y[test]))
    model = BatchedRidge(alphas=ALPHAS, cv=inner)
    # Without routing: groups for the splitter, params for fit.
    scores = cross_validate(
        model, X, y, groups=runs, cv=outer, params={"groups": runs}
    )["test_score"]
    np.testing.assert_allclose(scores, expected)
    with config_context(enable_metadata_routing=True):
        # Requested by default, as RidgeCV's splitter requests them.
        scores = cross_validate(model, X, y, cv=outer, params={"groups": runs})
        np.testing.assert_allclose(scores["test_score"], expected)


@pytest.mark.parametrize("cv", [None, "gcv"])
def test_autocorrelated_residuals_warn_white_noise_does_not(cv):
    from sklearn.model_selection import LeaveOneGroupOut

    from skbatch import AutocorrelationWarning

    X = np.random.default_rng(5).standard_normal((sum(RUN_LENGTHS), 5))
    noise, runs = _ar1_runs(RUN_LENGTHS, 40, 0.9, seed=6)
    Y = X @ np.random.default_rng(7).standard_normal((5, 40)) * 0.3 + noise
    with pytest.warns(AutocorrelationWarning, match="LeaveOneGroupOut"):
        BatchedRidge(cv=cv).fit(X, Y, groups=runs)
    with pytest.warns(AutocorrelationWarning, match="over all rows"):
        BatchedRidge(cv=cv).fit(X, Y)
    white = np.random.default_rng(8).standard_normal(Y.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AutocorrelationWarning)
        BatchedRidge(cv=cv).fit(X, white, groups=runs)
        BatchedRidge(cv=cv).fit(X, white)
        # Leave-one-run-out is the remedy; one alpha chooses nothing.
        BatchedRidge(cv=LeaveOneGroupOut()).fit(X, Y, groups=runs)
        BatchedRidge(alphas=10.0, cv=cv).fit(X, Y)


def test_autocorrelation_check_is_within_runs():
    from skbatch import AutocorrelationWarning

    # Each run a constant level: autocorrelated over all rows, white within.
    rng = np.random.default_rng(9)
    runs = np.repeat(np.arange(8), 40)
    Y = rng.standard_normal((320, 20)) * 0.3 + rng.standard_normal((8, 20))[runs] * 3
    X = rng.standard_normal((320, 3))
    with pytest.warns(AutocorrelationWarning):
        BatchedRidge().fit(X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AutocorrelationWarning)
        BatchedRidge().fit(X, Y, groups=runs)


@pytest.mark.parametrize("cv", [None, 4, "gcv"])
def test_alpha_with_weights_is_on_the_scale_the_docstring_states(cv):
    # coef_ is Ridge's at alpha_ with the weights as given for leave-one-out
    # and K-fold; with GCV, at alpha_ for the weights normalised to sum to
    # the number of rows of non-zero weight, so alpha_ ignores their scale.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 4))
    y = X @ rng.standard_normal(4) + rng.standard_normal(50)
    weights = rng.uniform(0.0, 5.0, 50)
    weights[:5] = 0.0
    alphas = np.logspace(-2, 3, 12)
    model = BatchedRidge(alphas=alphas, cv=cv).fit(X, y, sample_weight=weights)
    scale = weights.sum() / np.count_nonzero(weights) if cv == "gcv" else 1.0
    ridge = Ridge(alpha=model.alpha_ * scale).fit(X, y, sample_weight=weights)
    np.testing.assert_allclose(model.coef_, ridge.coef_, rtol=1e-10)
    np.testing.assert_allclose(model.intercept_, ridge.intercept_, rtol=1e-10)
    if cv == "gcv":
        scaled = BatchedRidge(alphas=alphas, cv=cv).fit(X, y, sample_weight=7 * weights)
        assert scaled.alpha_ == model.alpha_
