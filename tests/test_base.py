"""Fits are atomic: an error or an interrupt leaves the estimator as it was."""

import pickle

import numpy as np
import pytest
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LinearRegression
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
