"""explainable_variance against the formula, score_per_target through pipelines."""

import numpy as np
import pytest
from scipy import stats
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skbatch import BatchedRidge, Delayer, explainable_variance, score_per_target


def _naive_ev(Y, bias_correction):
    """The formula, one target at a time, through scipy's z-score."""
    n_repeats, _, n_targets = Y.shape
    out = np.empty(n_targets)
    for j in range(n_targets):
        z = np.stack([stats.zscore(Y[r, :, j]) for r in range(n_repeats)])
        ev = np.var(z.mean(axis=0), ddof=1) / np.mean(np.var(z, axis=1, ddof=1))
        if bias_correction:
            ev -= (1 - ev) / (n_repeats - 1)
        out[j] = ev
    return out


def _ar1(rng, shape, phi):
    """AR(1) series along axis 1 of ``shape`` (repeats, samples, targets)."""
    noise = rng.standard_normal(shape)
    out = np.empty(shape)
    out[:, 0] = noise[:, 0]
    for t in range(1, shape[1]):
        out[:, t] = phi * out[:, t - 1] + noise[:, t]
    return out


@pytest.mark.parametrize("bias_correction", [True, False])
def test_explainable_variance_equals_the_formula(bias_correction):
    rng = np.random.default_rng(0)
    # Autocorrelated signal and noise, targets of different scales and means.
    signal = _ar1(rng, (1, 120, 6), 0.8)[0] * np.linspace(0, 2, 6)
    Y = signal + _ar1(rng, (4, 120, 6), 0.5) * 3.0 + np.arange(6) * 10.0
    ev = explainable_variance(Y, bias_correction=bias_correction)
    np.testing.assert_allclose(ev, _naive_ev(Y, bias_correction), rtol=1e-10)
    assert ev.shape == (6,) and ev.dtype == np.float64


def test_explainable_variance_recovers_the_signal_share():
    rng = np.random.default_rng(1)
    n_repeats, n_samples = 5, 4000
    signal = rng.standard_normal((n_samples, 3)) * np.sqrt([0.0, 0.25, 0.75])
    noise = rng.standard_normal((n_repeats, n_samples, 3)) * np.sqrt([1.0, 0.75, 0.25])
    ev = explainable_variance(signal + noise)
    np.testing.assert_allclose(ev, [0.0, 0.25, 0.75], atol=0.03)
    # Uncorrected, pure noise keeps 1 / n_repeats of its variance in the mean.
    raw = explainable_variance(signal + noise, bias_correction=False)
    assert abs(raw[0] - 1 / n_repeats) < 0.03


def test_explainable_variance_accepts_torch():
    torch = pytest.importorskip("torch")
    Y = np.random.default_rng(2).standard_normal((3, 30, 4))
    np.testing.assert_allclose(
        explainable_variance(torch.from_numpy(Y)), explainable_variance(Y)
    )


def test_explainable_variance_constant_target_is_nan_with_a_warning():
    Y = np.random.default_rng(3).standard_normal((3, 30, 4))
    Y[1, :, 2] = 7.0
    with pytest.warns(RuntimeWarning, match="1 of 4 targets are constant"):
        ev = explainable_variance(Y)
    assert np.isnan(ev[2]) and np.all(np.isfinite(ev[[0, 1, 3]]))


@pytest.mark.parametrize(
    "Y, match",
    [
        (np.zeros((30, 4)), "must be 3-D"),
        (np.zeros((1, 30, 4)), "at least 2 repeats"),
        (np.ones((2, 1, 4)), "at least 2 repeats of at least 2 samples"),
        (np.full((2, 5, 1), np.nan), "finite"),
    ],
)
def test_explainable_variance_refuses_bad_input(Y, match):
    with pytest.raises(ValueError, match=match):
        explainable_variance(Y)


def test_explainable_variance_refuses_a_non_bool_correction():
    with pytest.raises(TypeError, match="bias_correction"):
        explainable_variance(np.zeros((2, 5, 1)), bias_correction="yes")


@pytest.mark.parametrize("scoring", ["r2", "correlation", "neg_mean_squared_error"])
def test_score_per_target_through_a_pipeline(scoring):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((90, 3))
    Y = X @ rng.standard_normal((3, 5)) + rng.standard_normal((90, 5))
    runs = np.repeat([0, 1, 2], [40, 30, 20])
    pipe = make_pipeline(StandardScaler(), Delayer(delays=(0, 1)), BatchedRidge())
    pipe.fit(X, Y)
    ridge = pipe[-1]
    expected = ridge.score_per_target(pipe[:-1].transform(X), Y, scoring=scoring)
    np.testing.assert_array_equal(score_per_target(pipe, X, Y, scoring), expected)
    if scoring == "r2":
        np.testing.assert_allclose(
            expected, r2_score(Y, pipe.predict(X), multioutput="raw_values")
        )
    bare = BatchedRidge().fit(X, Y, groups=runs)
    np.testing.assert_array_equal(
        score_per_target(bare, X, Y, scoring),
        bare.score_per_target(X, Y, None, scoring),
    )


def test_score_per_target_refuses_other_estimators():
    X, y = np.random.default_rng(5).standard_normal((20, 2)), np.arange(20.0)
    with pytest.raises(TypeError, match="last step of the pipeline is a Ridge"):
        score_per_target(make_pipeline(StandardScaler(), Ridge()).fit(X, y), X, y)
    with pytest.raises(TypeError, match="got a Ridge"):
        score_per_target(Ridge().fit(X, y), X, y)
