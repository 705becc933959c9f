"""r2_score_split: each band's share of R^2, against scikit-learn's r2_score,
himalaya's r2_score_split, a loop of the product measure, and
BandedRidge.score_per_band."""

import numpy as np
import pytest
from sklearn.metrics import r2_score
from sklearn.model_selection import LeaveOneGroupOut
from test_correlation_split import ar1_runs, split_data

from skbatch import BandedRidge, r2_score_split


def _r2(y, prediction, weight=None):
    return r2_score(y, prediction, multioutput="raw_values", sample_weight=weight)


def _centred(y, parts):
    return y - y.mean(0), parts - parts.mean(1, keepdims=True)


def reference(y, parts):
    """The product measure by loops, for centred y and parts:
    sum_i P_b,i (2 y_i - P_i) / sum_i y_i^2."""
    n_bands, _, t = parts.shape
    out = np.empty((n_bands, t))
    for j in range(t):
        total = parts[:, :, j].sum(0)
        for b in range(n_bands):
            out[b, j] = np.sum(parts[b, :, j] * (2 * y[:, j] - total)) / np.sum(
                y[:, j] ** 2
            )
    return out


def test_shares_sum_to_the_r2_of_the_summed_prediction_and_its_intercept():
    # y far from zero mean, band predictions without the intercept.
    y, parts = split_data(seed=11)
    intercept = np.random.default_rng(1).uniform(3.0, 7.0, y.shape[1])
    shares = r2_score_split(y, parts, intercept=intercept)
    np.testing.assert_allclose(
        shares.sum(0), _r2(y, parts.sum(0) + intercept), rtol=1e-10, atol=1e-12
    )
    np.testing.assert_allclose(
        r2_score_split(y, parts).sum(0), _r2(y, parts.sum(0)), rtol=1e-10
    )


def test_centred_data_give_the_product_measure():
    y, parts = _centred(*split_data(seed=12))
    np.testing.assert_allclose(
        r2_score_split(y, parts), reference(y, parts), rtol=1e-10, atol=1e-12
    )


@pytest.mark.parametrize("include_correlation", [True, False])
def test_matches_himalaya_on_centred_data(include_correlation):
    pytest.importorskip("himalaya")
    from himalaya.backend import set_backend
    from himalaya.scoring import r2_score_split as himalaya_split

    set_backend("numpy")
    y, parts = _centred(*split_data(seed=13))
    np.testing.assert_allclose(
        r2_score_split(y, parts, include_correlation),
        himalaya_split(y, parts, include_correlation),
        rtol=1e-10,
        atol=1e-12,
    )


def test_without_correlation_each_band_scores_alone():
    y, parts = split_data(seed=14, n_bands=2)
    weight = np.random.default_rng(2).uniform(0.5, 2.0, y.shape[0])
    own = r2_score_split(y, parts, False, intercept=5.0, sample_weight=weight)
    for b in range(parts.shape[0]):
        np.testing.assert_allclose(own[b], _r2(y, parts[b] + 5.0, weight), rtol=1e-10)


def test_weights_equal_repeated_rows():
    y, parts = split_data(seed=15)
    counts = np.random.default_rng(3).integers(0, 4, y.shape[0])
    counts[0] = 1
    rows = np.repeat(np.arange(y.shape[0]), counts)
    np.testing.assert_allclose(
        r2_score_split(y, parts, sample_weight=counts, intercept=5.0),
        r2_score_split(y[rows], parts[:, rows], intercept=5.0),
        rtol=1e-9,
    )


def test_one_target_and_one_prediction():
    y, parts = split_data(seed=16)
    np.testing.assert_allclose(
        r2_score_split(y[:, 0], parts[:, :, 0]), r2_score_split(y, parts)[:, 0]
    )
    np.testing.assert_allclose(r2_score_split(y, parts[0]), _r2(y, parts[0]))
    assert r2_score_split(y[:, 0], parts[0][:, 0]).shape == ()


def test_held_out_split_is_score_per_band():
    # Fit on three runs, split the held-out run's R^2 between the bands.
    rng = np.random.default_rng(17)
    X = ar1_runs(rng, 6)
    runs = np.repeat(np.arange(4), (23, 31, 17, 29))
    Y = X[:, :2] @ rng.standard_normal((2, 3)) + ar1_runs(rng, 3) + 4.0
    bands = np.array([0, 0, 0, 1, 1, 1])
    train, test = next(LeaveOneGroupOut().split(X, Y, runs))
    weights = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [0.8, 0.2]])
    model = BandedRidge(bands, band_weights=weights, alphas=np.logspace(-1, 3, 5))
    model.fit(X[train], Y[train])
    split = r2_score_split(
        Y[test], model.predict_per_band(X[test]), intercept=model.intercept_
    )
    np.testing.assert_allclose(
        split, model.score_per_band(X[test], Y[test]), rtol=1e-10, atol=1e-12
    )
    np.testing.assert_allclose(
        split.sum(0), _r2(Y[test], model.predict(X[test])), rtol=1e-8
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"intercept": np.ones(3)}, "intercept must be a number or have shape"),
        ({"intercept": np.nan}, "intercept must be finite"),
        ({"sample_weight": -np.ones(10)}, "non-negative"),
    ],
)
def test_refuses_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        r2_score_split(np.ones((10, 2)), np.ones((3, 10, 2)), **kwargs)


def _himalaya_split(y, parts):
    pytest.importorskip("himalaya")
    import warnings

    from himalaya.backend import set_backend
    from himalaya.scoring import r2_score_split as himalaya_split

    set_backend("numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # y is zero-mean
        return np.asarray(himalaya_split(y, parts))


@pytest.mark.parametrize("offsets", [(0.7, -0.2), (1.5, 0.0), (0.6, -0.6)])
def test_offset_predictions_share_the_offset_as_the_docstring_says(offsets):
    # Zero-mean y, uncentred predictions: the totals agree with himalaya's;
    # the shares differ by himalaya's n m_b m / SST against this function's
    # n m^2 / SST in proportion to the centred products, and agree when the
    # offsets cancel (m = 0).
    y, parts = split_data(seed=14, n_bands=2)
    y = y - y.mean(axis=0)
    parts = parts - parts.mean(axis=1, keepdims=True)
    parts = parts + np.asarray(offsets)[:, None, None]
    ours, theirs = r2_score_split(y, parts), _himalaya_split(y, parts)
    total = r2_score(y, parts.sum(0), multioutput="raw_values")
    np.testing.assert_allclose(ours.sum(0), total, rtol=1e-10)
    np.testing.assert_allclose(theirs.sum(0), total, rtol=1e-10)
    n = y.shape[0]
    m_b, m = parts.mean(axis=1), parts.sum(0).mean(axis=0)
    centred = parts - m_b[:, None]
    products = (centred * centred.sum(0)).sum(axis=1)
    sst = (y**2).sum(axis=0)
    gap = -n * m_b * m / sst + n * m**2 / sst * products / products.sum(0)
    np.testing.assert_allclose(theirs - ours, gap, rtol=1e-9, atol=1e-12)
    assert (np.abs(gap).max() > 0.01) == (sum(offsets) != 0)
    doc = " ".join(r2_score_split.__doc__.split())
    assert "uses the predictions as given, uncentred" in doc
    assert "``n m_b m / SST``" in doc
