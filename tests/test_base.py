"""Fits are atomic: an error or an interrupt leaves the estimator as it was."""

import pickle

import numpy as np
import pytest
import sklearn
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import NotFittedError, UnsetMetadataPassedError
from sklearn.linear_model import LinearRegression, Ridge
from sklearn.model_selection import KFold, cross_validate
from sklearn.utils.validation import check_is_fitted

from skbatch import BatchedRidge, BootstrapEstimator, PermutationScorer, _engine


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
        PermutationScorer(
            BatchedRidge(alphas=[0.1, 1.0]), n_permutations=5, random_state=0
        ),
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
