"""correlation_score_split and BandedRidge.score_per_band(scoring="correlation"),
against himalaya's function and a numpy reference."""

import numpy as np
import pytest
from sklearn.model_selection import LeaveOneGroupOut

from skbatch import BandedRidge
from skbatch.exceptions import DegenerateDataWarning
from skbatch.scoring import correlation_score_split

# Runs of unequal length; AR(1) series restart at each run.
RUN_LENGTHS = (23, 31, 17, 29)
AR_COEF = 0.8


def ar1_runs(rng, n_columns):
    blocks = []
    for length in RUN_LENGTHS:
        block = np.empty((length, n_columns))
        block[0] = rng.standard_normal(n_columns)
        for i in range(1, length):
            block[i] = AR_COEF * block[i - 1] + rng.standard_normal(n_columns)
        blocks.append(block)
    return np.concatenate(blocks)


def split_data(seed=0, n_bands=3, n_targets=5):
    rng = np.random.default_rng(seed)
    parts = ar1_runs(rng, n_bands * n_targets).reshape(-1, n_bands, n_targets)
    parts = np.moveaxis(parts, 1, 0) * rng.uniform(0.2, 3.0, (n_bands, 1, n_targets))
    y = parts.sum(0) + 2.0 * ar1_runs(rng, n_targets) + 5.0
    return y, parts


def reference(y, parts, weight=None):
    """Band b's share: weighted cov(y, P_b) / (std(y) std(sum_b P_b)), by loops."""
    n_bands, n, t = parts.shape
    w = np.ones(n) if weight is None else weight
    out = np.empty((n_bands, t))
    for j in range(t):
        yc = y[:, j] - np.average(y[:, j], weights=w)
        total = parts[:, :, j].sum(0)
        total = total - np.average(total, weights=w)
        for b in range(n_bands):
            pb = parts[b, :, j] - np.average(parts[b, :, j], weights=w)
            out[b, j] = np.average(yc * pb, weights=w) / np.sqrt(
                np.average(yc**2, weights=w) * np.average(total**2, weights=w)
            )
    return out


def test_matches_numpy_reference_and_sums_to_correlation():
    y, parts = split_data()
    shares = correlation_score_split(y, parts)
    np.testing.assert_allclose(shares, reference(y, parts), rtol=1e-10, atol=1e-12)
    full = [np.corrcoef(y[:, j], parts.sum(0)[:, j])[0, 1] for j in range(y.shape[1])]
    np.testing.assert_allclose(shares.sum(0), full, rtol=1e-10)


def test_matches_himalaya():
    pytest.importorskip("himalaya")
    from himalaya.backend import set_backend
    from himalaya.scoring import correlation_score_split as himalaya_split

    set_backend("numpy")
    y, parts = split_data(seed=1)
    np.testing.assert_allclose(
        correlation_score_split(y, parts), himalaya_split(y, parts), rtol=1e-10
    )


def test_weights_equal_repeated_rows_and_match_the_reference():
    y, parts = split_data(seed=2)
    counts = np.random.default_rng(3).integers(0, 4, y.shape[0])
    counts[0] = 1
    weighted = correlation_score_split(y, parts, sample_weight=counts)
    rows = np.repeat(np.arange(y.shape[0]), counts)
    np.testing.assert_allclose(
        weighted, correlation_score_split(y[rows], parts[:, rows]), rtol=1e-9
    )
    np.testing.assert_allclose(
        weighted, reference(y, parts, counts.astype(float)), rtol=1e-9
    )


def test_one_target_and_constant_target():
    y, parts = split_data(seed=4)
    np.testing.assert_allclose(
        correlation_score_split(y[:, 0], parts[:, :, 0]),
        correlation_score_split(y, parts)[:, 0],
    )
    y[:, 1] = 3.0
    with pytest.warns(DegenerateDataWarning, match="1 of 5"):
        shares = correlation_score_split(y, parts)
    assert np.all(np.isnan(shares[:, 1]))
    assert not np.any(np.isnan(np.delete(shares, 1, axis=1)))


def test_one_prediction_gives_its_correlation():
    # y_pred of y_true's shape is one prediction, as himalaya takes it.
    y, parts = split_data(seed=6)
    full = [np.corrcoef(y[:, j], parts[0][:, j])[0, 1] for j in range(y.shape[1])]
    np.testing.assert_allclose(correlation_score_split(y, parts[0]), full, rtol=1e-10)
    one = correlation_score_split(y[:, 0], parts[0][:, 0])
    assert one.shape == ()
    np.testing.assert_allclose(one, full[0], rtol=1e-10)


@pytest.mark.parametrize(
    "y_shape, pred_shape, kwargs, match",
    [
        ((10, 2), (10, 3), {}, "y_pred must have shape"),
        ((10, 2), (3, 9, 2), {}, "y_pred must have shape"),
        ((1, 2), (3, 1, 2), {}, "at least 2 rows"),
        ((10, 2), (3, 10, 2), {"sample_weight": -np.ones(10)}, "non-negative"),
        ((10, 2), (3, 10, 2), {"sample_weight": np.ones(9)}, "shape \\(10,\\)"),
    ],
)
def test_refuses_bad_input(y_shape, pred_shape, kwargs, match):
    with pytest.raises(ValueError, match=match):
        correlation_score_split(np.ones(y_shape), np.ones(pred_shape), **kwargs)


def test_refuses_nan():
    y, parts = split_data()
    parts[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        correlation_score_split(y, parts)


def test_score_per_band_correlation():
    rng = np.random.default_rng(5)
    X = ar1_runs(rng, 7)
    Y = X[:, :2] @ rng.standard_normal((2, 4)) + 2.0 * ar1_runs(rng, 4)
    bands = [0, 0, 1, 1, 1, 2, 2]
    runs = np.repeat(np.arange(len(RUN_LENGTHS)), RUN_LENGTHS)
    model = BandedRidge(
        bands, band_weights=6, alphas=np.logspace(-1, 3, 5), cv=LeaveOneGroupOut()
    ).fit(X, Y, groups=runs)
    X_test = ar1_runs(rng, 7)
    Y_test = X_test[:, :2] @ rng.standard_normal((2, 4)) + ar1_runs(rng, 4)
    shares = model.score_per_band(X_test, Y_test, scoring="correlation")
    parts = model.predict_per_band(X_test)
    np.testing.assert_allclose(shares, reference(Y_test, parts), rtol=1e-9)
    np.testing.assert_allclose(
        shares.sum(0),
        model.score_per_target(X_test, Y_test, scoring="correlation"),
        rtol=1e-9,
    )
    weight = rng.uniform(0.0, 2.0, X_test.shape[0])
    weighted = model.score_per_band(
        X_test, Y_test, sample_weight=weight, scoring="correlation"
    )
    np.testing.assert_allclose(weighted, reference(Y_test, parts, weight), rtol=1e-9)
    np.testing.assert_allclose(
        weighted.sum(0),
        model.score_per_target(
            X_test, Y_test, sample_weight=weight, scoring="correlation"
        ),
        rtol=1e-9,
    )
    # The default stays the R^2 split.
    np.testing.assert_allclose(
        model.score_per_band(X_test, Y_test).sum(0),
        model.score_per_target(X_test, Y_test),
        rtol=1e-9,
    )
    with pytest.raises(ValueError, match="scoring must be one of"):
        model.score_per_band(X_test, Y_test, scoring="neg_mean_squared_error")
