"""What every estimator shares (skbatch/_estimators/base.py).

Fits are atomic: an error or an interrupt leaves the estimator as it was.
The wrappers are what they wrap (a classifier's wrapper is a classifier);
``to_device`` moves a model and where it refits; one ``random_state``
default.
"""

import inspect
import itertools
import pickle

import numpy as np
import pytest
import sklearn
from sklearn.base import BaseEstimator, RegressorMixin, is_classifier, is_regressor
from sklearn.ensemble import RandomForestRegressor
from sklearn.exceptions import NotFittedError, UnsetMetadataPassedError
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.model_selection import (
    GridSearchCV,
    KFold,
    StratifiedKFold,
    check_cv,
    cross_val_score,
    cross_validate,
)
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from sklearn.utils import get_tags
from sklearn.utils.validation import check_is_fitted

import skbatch
from skbatch import BatchedRidge, BootstrapEstimator, PermutationScorer, _engine
from skbatch._estimators.base import _device_parts
from skbatch.random import DEFAULT_RANDOM_STATE


class _Interrupt(BaseException):
    """Stands for KeyboardInterrupt without stopping pytest."""


def _data(n_features, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((40, n_features))
    Y = X @ rng.standard_normal((n_features, 3)) + rng.standard_normal((40, 3))
    return X, Y


def _estimators():
    return [
        BatchedRidge(alphas=[0.1, 1.0, 10.0]),
        PermutationScorer(BatchedRidge(), n_permutations=5, random_state=0),
        BootstrapEstimator(LinearRegression(), n_bootstrap=5, random_state=0),
    ]


def _interrupt_batches(monkeypatch, exc):
    real = _engine.run_batched

    def failing(kernel, *args, **kwargs):
        def broken(ids):
            raise exc

        return real(broken, *args, **kwargs)

    # Every batched path runs its problem through the engine's run_batched.
    monkeypatch.setattr(_engine, "run_batched", failing)


@pytest.mark.parametrize("estimator", _estimators(), ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("exc", [_Interrupt(), RuntimeError("kernel failed")])
def test_failed_first_fit_leaves_estimator_unfitted(estimator, exc, monkeypatch):
    _interrupt_batches(monkeypatch, exc)
    with pytest.raises(type(exc)):
        estimator.fit(*_data(5))
    with pytest.raises(NotFittedError):
        check_is_fitted(estimator)
    assert not hasattr(estimator, "n_features_in_")


@pytest.mark.parametrize("estimator", _estimators(), ids=lambda e: type(e).__name__)
def test_failed_refit_keeps_previous_model(estimator, monkeypatch):
    X5, Y5 = _data(5)
    estimator.fit(X5, Y5)
    before = pickle.dumps(estimator)
    prediction = estimator.predict(X5)
    _interrupt_batches(monkeypatch, _Interrupt())
    with pytest.raises(_Interrupt):
        estimator.fit(*_data(7, seed=1))
    assert estimator.n_features_in_ == 5
    assert pickle.dumps(estimator) == before
    monkeypatch.undo()
    np.testing.assert_array_equal(estimator.predict(X5), prediction)


class _FailsOnFit(RegressorMixin, BaseEstimator):
    def fit(self, X, y):
        raise _Interrupt


@pytest.mark.parametrize("meta", [PermutationScorer, BootstrapEstimator])
def test_interrupt_in_generic_path_leaves_meta_estimator_unfitted(meta):
    inner = _FailsOnFit()
    estimator = meta(inner)
    with pytest.raises(_Interrupt):
        estimator.fit(*_data(4))
    assert vars(estimator) == vars(meta(inner))


def _routing_data():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((60, 3))
    y = X @ np.array([1.0, 2.0, 0.0]) + rng.standard_normal(60)
    return X, y, rng.uniform(0.5, 2.0, 60)


def _fitted_values(model):
    if isinstance(model, BootstrapEstimator):
        return [result.samples for result in model.results_.values()]
    return [model.score_, model.pvalue_, model.permutation_scores_]


WRAPPERS = [
    lambda estimator: BootstrapEstimator(estimator, n_bootstrap=20, random_state=0),
    lambda estimator: PermutationScorer(
        estimator, n_permutations=20, return_null=True, random_state=0
    ),
]


@pytest.mark.parametrize("wrap", WRAPPERS, ids=["bootstrap", "permutation"])
@pytest.mark.slow
def test_metadata_routing_sends_requested_fit_params_to_the_estimator(wrap):
    """Under routing, what the estimator requests reaches every fit of it."""
    X, y, weight = _routing_data()
    expected = wrap(Ridge()).fit(X, y, sample_weight=weight)
    with sklearn.config_context(enable_metadata_routing=True):
        routed = wrap(Ridge().set_fit_request(sample_weight=True))
        routed.fit(X, y, sample_weight=weight)
        # Not requested: refused, and nothing is fitted.
        unrequested = wrap(Ridge())
        with pytest.raises(UnsetMetadataPassedError, match=r"sample_weight.*Ridge"):
            unrequested.fit(X, y, sample_weight=weight)
        with pytest.raises(NotFittedError):
            check_is_fitted(unrequested)
        # And through cross_validate, which routes to the wrapper's fit.
        scores = cross_validate(
            wrap(Ridge().set_fit_request(sample_weight=True)).set_score_request(
                sample_weight=False
            ),
            X,
            y,
            cv=KFold(3),
            params={"sample_weight": weight},
        )["test_score"]
    for ours, ref in zip(_fitted_values(routed), _fitted_values(expected)):
        np.testing.assert_array_equal(ours, ref)
    np.testing.assert_allclose(
        routed.estimator_.coef_, Ridge().fit(X, y, sample_weight=weight).coef_
    )
    by_hand = [
        wrap(Ridge())
        .fit(X[train], y[train], sample_weight=weight[train])
        .score(X[test], y[test])
        for train, test in KFold(3).split(X)
    ]
    np.testing.assert_allclose(scores, by_hand, rtol=1e-12)


# --- wrappers are what they wrap -------------------------------------------


def _classes(seed=0):
    """Two classes in rows of no order (sorted rows are autocorrelated)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((90, 3))
    y = (X @ np.array([1.5, -1.0, 0.5]) + 0.5 * rng.standard_normal(90) > 0).astype(int)
    return X, y


CLASSIFIER_WRAPPERS = [
    lambda estimator: BootstrapEstimator(estimator, n_bootstrap=5),
    lambda estimator: PermutationScorer(estimator, n_permutations=5, cv=3),
]


@pytest.mark.parametrize("wrap", CLASSIFIER_WRAPPERS, ids=["bootstrap", "permutation"])
def test_a_wrapped_classifier_is_a_classifier(wrap):
    wrapped = wrap(LogisticRegression())
    assert is_classifier(wrapped) and not is_regressor(wrapped)
    assert (
        get_tags(wrapped).classifier_tags
        == get_tags(LogisticRegression()).classifier_tags
    )
    assert is_regressor(wrap(Ridge())) and not is_classifier(wrap(Ridge()))
    # The methods are those the estimator has, as sklearn's meta-estimators'.
    for inner in (LogisticRegression(), SVC(), SVC(probability=True), Ridge()):
        for method in ("predict_proba", "predict_log_proba", "decision_function"):
            assert hasattr(wrap(inner), method) == hasattr(inner, method), (
                inner,
                method,
            )
    assert not hasattr(wrap(LogisticRegression()), "classes_")  # unfitted


@pytest.mark.parametrize("wrap", CLASSIFIER_WRAPPERS, ids=["bootstrap", "permutation"])
def test_a_wrapped_classifier_predicts_as_the_classifier(wrap):
    X, y = _classes()
    labels = np.array(["no", "yes"])[y]
    wrapped = wrap(LogisticRegression()).fit(X, labels)
    reference = LogisticRegression().fit(X, labels)
    np.testing.assert_array_equal(wrapped.classes_, ["no", "yes"])
    np.testing.assert_array_equal(wrapped.predict(X), reference.predict(X))
    for method in ("predict_proba", "predict_log_proba", "decision_function"):
        np.testing.assert_allclose(
            getattr(wrapped, method)(X), getattr(reference, method)(X), rtol=1e-12
        )
    assert wrapped.score(X, labels) == reference.score(X, labels)
    # A fitted wrapper answers from estimator_, as sklearn's meta-estimators.
    assert not hasattr(wrap(Ridge()).fit(X, y.astype(float)), "classes_")
    assert not hasattr(wrap(Ridge()).fit(X, y.astype(float)), "predict_proba")


@pytest.mark.parametrize("wrap", CLASSIFIER_WRAPPERS, ids=["bootstrap", "permutation"])
def test_cross_val_score_stratifies_a_wrapped_classifier(wrap):
    X, y = _classes()
    wrapped = wrap(LogisticRegression())
    assert isinstance(
        check_cv(3, y, classifier=is_classifier(wrapped)), StratifiedKFold
    )
    ours = cross_val_score(wrapped, X, y, cv=3)
    # The wrapper scores as estimator_, LogisticRegression fit on the fold.
    stratified = cross_val_score(LogisticRegression(), X, y, cv=StratifiedKFold(3))
    np.testing.assert_allclose(ours, stratified, rtol=1e-12)
    unstratified = cross_val_score(LogisticRegression(), X, y, cv=KFold(3))
    assert not np.allclose(ours, unstratified)


# --- to_device moves the model and where it refits -------------------------


def test_to_device_sets_device_so_a_refit_stays_there():
    pytest.importorskip("torch")
    X, Y = _data(5)
    model = BatchedRidge(device="torch").fit(X, Y)
    assert model.backend_.name == "torch-cpu"
    assert model.to_device("cpu") is model
    assert model.get_params()["device"] == "cpu"
    assert model.backend_.name == "numpy"
    refit = model.fit(X, Y)
    assert refit.backend_.name == "numpy"
    assert isinstance(refit.coef_, np.ndarray)
    np.testing.assert_allclose(refit.coef_, BatchedRidge().fit(X, Y).coef_, rtol=1e-10)


def test_to_device_moves_a_wrapper_its_estimator_and_where_they_refit():
    pytest.importorskip("torch")
    X, Y = _data(5)
    given = BatchedRidge(device="torch")
    model = BootstrapEstimator(given, n_bootstrap=5, device="torch").fit(X, Y)
    model.to_device("cpu")
    params = model.get_params()
    assert params["device"] == "cpu" and params["estimator__device"] == "cpu"
    assert model.estimator_.get_params()["device"] == "cpu"
    assert model.estimator_.backend_.name == "numpy"
    assert given.device == "torch"  # the object given is left as it was
    model.fit(X, Y)
    assert model.backend_.name == model.estimator_.backend_.name == "numpy"


def _last_step_coef(pipeline):
    return pipeline[-1].coef_


def test_to_device_reaches_the_skbatch_steps_of_a_wrapped_pipeline():
    pytest.importorskip("torch")
    X, Y = _data(5)
    given = make_pipeline(
        StandardScaler(), BootstrapEstimator(BatchedRidge(device="torch"))
    )
    inner = BatchedRidge(device="torch")
    model = BootstrapEstimator(
        make_pipeline(StandardScaler(), inner),
        n_bootstrap=5,
        attributes=_last_step_coef,
        device="torch",
    ).fit(X, Y)
    ridge = model.estimator_.steps[-1][1]
    assert ridge.backend_.name == "torch-cpu"
    model.to_device("cpu")
    # The fitted step moved, and the parameter refits there.
    assert ridge.backend_.name == "numpy" and ridge.device == "cpu"
    assert model.get_params()["estimator__batchedridge__device"] == "cpu"
    assert inner.device == "torch"  # the object given is left as it was
    model.fit(X, Y)
    assert model.estimator_.steps[-1][1].backend_.name == "numpy"
    # A wrapper nested as a step is moved as one part: it moves what it holds.
    parts = _device_parts(given)
    assert [key for key, _ in parts] == ["bootstrapestimator"]
    assert parts[0][1] is given[-1]


def test_to_device_reaches_the_best_estimator_of_a_wrapped_search():
    pytest.importorskip("torch")
    X, Y = _data(5)
    search = GridSearchCV(
        BatchedRidge(device="torch"), {"fit_intercept": [True, False]}, cv=3
    )
    model = BootstrapEstimator(search, n_bootstrap=3, device="torch").fit(X, Y)
    best = model.estimator_.best_estimator_
    assert best.backend_.name == "torch-cpu"
    model.to_device("cpu")
    assert best.backend_.name == "numpy" and best.device == "cpu"
    assert model.get_params()["estimator__estimator__device"] == "cpu"
    assert search.estimator.device == "torch"  # the object given is left as it was


# --- one random_state default ----------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: BootstrapEstimator(Ridge(), n_bootstrap=20, return_samples=True),
        lambda: PermutationScorer(Ridge(), n_permutations=20, return_null=True),
    ],
    ids=["bootstrap", "permutation"],
)
def test_every_random_estimator_defaults_to_the_one_random_state(make):
    X, Y = _data(4)
    assert DEFAULT_RANDOM_STATE == 0
    assert make().get_params()["random_state"] == DEFAULT_RANDOM_STATE
    # Reproducible by default: two fits without a seed agree, and agree with
    # the fit given the default explicitly.
    first, second = make().fit(X, Y), make().fit(X, Y)
    explicit = make().set_params(random_state=DEFAULT_RANDOM_STATE).fit(X, Y)
    fresh = make().set_params(random_state=None).fit(X, Y)
    for a, b, c in zip(
        _fitted_values(first), _fitted_values(second), _fitted_values(explicit)
    ):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    assert not all(
        np.array_equal(a, d)
        for a, d in zip(_fitted_values(first), _fitted_values(fresh))
    )


def test_every_estimator_with_random_state_documents_the_default():
    for name in skbatch.__all__:
        cls = getattr(skbatch, name)
        if not (isinstance(cls, type) and issubclass(cls, BaseEstimator)):
            continue
        if "random_state" not in inspect.signature(cls).parameters:
            continue
        default = inspect.signature(cls).parameters["random_state"].default
        assert default == DEFAULT_RANDOM_STATE, name
        # The entry: its first line and those indented under it.
        after = cls.__doc__.split("\n    random_state : ")[1].split("\n")
        body = itertools.takewhile(lambda line: line.startswith(" " * 8), after[1:])
        entry = "\n".join([after[0], *body])
        assert entry.split("\n")[0].endswith("default=0"), (name, entry)
        assert "DEFAULT_RANDOM_STATE" in entry, (name, entry)


def test_auto_attributes_are_feature_importances_without_coef():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 4))
    y = X[:, 0] + 0.5 * rng.standard_normal(50)
    forest = RandomForestRegressor(n_estimators=5, random_state=0)
    auto = BootstrapEstimator(forest, n_bootstrap=4).fit(X, y)
    named = BootstrapEstimator(
        forest, n_bootstrap=4, attributes="feature_importances_"
    ).fit(X, y)
    assert list(auto.results_) == ["feature_importances_"]
    np.testing.assert_array_equal(
        auto.results_["feature_importances_"].estimate,
        forest.fit(X, y).feature_importances_,
    )
    for a, b in zip(auto.results_.values(), named.results_.values()):
        np.testing.assert_array_equal(a.standard_error, b.standard_error)
        np.testing.assert_array_equal(a.ci_lower, b.ci_lower)
    # A model with coef_ keeps coef_ and intercept_; one with neither is told.
    linear = BootstrapEstimator(LinearRegression(), n_bootstrap=4).fit(X, y)
    assert list(linear.results_) == ["coef_", "intercept_"]
    with pytest.raises(ValueError, match="neither coef_ nor feature_importances_"):
        BootstrapEstimator(KNeighborsRegressor(), n_bootstrap=4).fit(X, y)
