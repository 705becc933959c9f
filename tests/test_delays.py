"""Delayer against hand-built delays; runs never crossed; routing in pipelines."""

import warnings

import numpy as np
import pytest
import sklearn
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import check_estimator

from skbatch import BatchedRidge, Delayer


def _hand_delays(X, delays):
    """The eight lines everyone writes: one shifted copy per delay."""
    n_samples, n_features = X.shape
    blocks = []
    for d in delays:
        block = np.zeros_like(X)
        if d >= 0:
            block[d:] = X[: n_samples - d]
        else:
            block[:d] = X[-d:]
        blocks.append(block)
    return np.hstack(blocks)


def _hand_delays_by_run(X, delays, runs):
    out = np.zeros((X.shape[0], X.shape[1] * len(delays)))
    for run in np.unique(runs):
        rows = np.flatnonzero(runs == run)
        out[rows] = _hand_delays(
            X[rows], [min(d, len(rows)) if d > 0 else d for d in delays]
        )
    return out


def test_check_estimator():
    # Row order is what delays are about.
    order = "delays shift rows: a permutation of the rows changes the output"
    check_estimator(
        Delayer(),
        expected_failed_checks={
            "check_methods_sample_order_invariance": order,
            "check_methods_subset_invariance": order,
        },
    )


@pytest.mark.parametrize("delays", [(1, 2, 3, 4), (0,), (0, 2, -1), (-3, 5)])
def test_equals_hand_built_delays(delays):
    X = np.random.default_rng(0).standard_normal((20, 3))
    out = Delayer(delays=delays).fit_transform(X)
    assert out.shape == (20, 3 * len(delays))
    np.testing.assert_array_equal(out, _hand_delays(X, delays))


def test_delay_longer_than_a_run_gives_zeros():
    X = np.arange(1.0, 9.0)[:, None]
    runs = np.repeat([0, 1], [6, 2])
    out = Delayer(delays=(3, -3)).fit_transform(X, groups=runs)
    np.testing.assert_array_equal(out[:, 0], [0, 0, 0, 1, 2, 3, 0, 0])
    np.testing.assert_array_equal(out[:, 1], [4, 5, 6, 0, 0, 0, 0, 0])


def test_runs_in_any_order_and_interleaved():
    # Rows of a run taken in their order in X, wherever they are.
    X = np.arange(1.0, 7.0)[:, None]
    runs = np.array(["b", "a", "b", "a", "b", "a"])
    out = Delayer(delays=(1,)).fit_transform(X, groups=runs)
    np.testing.assert_array_equal(out.ravel(), [0, 0, 1, 2, 3, 4])


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=5),
    delays=st.lists(st.integers(-6, 6), min_size=1, max_size=4, unique=True),
    seed=st.integers(0, 2**16),
)
def test_never_crosses_runs(lengths, delays, seed):
    rng = np.random.default_rng(seed)
    runs = rng.permutation(np.repeat(np.arange(len(lengths)), lengths))
    n = runs.size
    # Each row's value names its run: a value from another run would show.
    X = np.column_stack([runs * 100.0 + 1, rng.standard_normal(n)])
    out = Delayer(delays=delays).fit_transform(X, groups=runs)
    marks = out[:, 0::2]
    assert np.all((marks == 0) | (marks == (runs * 100.0 + 1)[:, None]))
    np.testing.assert_array_equal(out, _hand_delays_by_run(X, delays, runs))


def test_feature_names_and_dataframes():
    pd = pytest.importorskip("pandas")
    X = pd.DataFrame({"motion": [1.0, 2.0, 3.0], "words": [4.0, 5.0, 6.0]})
    delayer = Delayer(delays=(0, 2)).fit(X)
    np.testing.assert_array_equal(
        delayer.get_feature_names_out(),
        ["motion_delay0", "words_delay0", "motion_delay2", "words_delay2"],
    )
    np.testing.assert_array_equal(
        delayer.transform(X), _hand_delays(X.to_numpy(), (0, 2))
    )
    frame = Delayer(delays=(1,)).set_output(transform="pandas").fit_transform(X)
    assert list(frame.columns) == ["motion_delay1", "words_delay1"]


def test_feature_names_without_a_dataframe():
    delayer = Delayer(delays=(0, 1)).fit(np.zeros((4, 2)))
    np.testing.assert_array_equal(
        delayer.get_feature_names_out(),
        ["x0_delay0", "x1_delay0", "x0_delay1", "x1_delay1"],
    )
    np.testing.assert_array_equal(
        delayer.get_feature_names_out(["a", "b"]),
        ["a_delay0", "b_delay0", "a_delay1", "b_delay1"],
    )
    with pytest.raises(ValueError, match="input_features"):
        delayer.get_feature_names_out(["a"])


def test_jax_in_jax_out():
    jnp = pytest.importorskip("jax.numpy")
    X = np.random.default_rng(1).standard_normal((10, 2)).astype(np.float32)
    out = Delayer(delays=(2, -1)).fit_transform(
        jnp.asarray(X), groups=[0] * 4 + [1] * 6
    )
    assert type(out).__module__.startswith("jax") and out.dtype == np.float32
    runs = np.repeat([0, 1], [4, 6])
    np.testing.assert_array_equal(
        np.asarray(out), _hand_delays_by_run(X, (2, -1), runs)
    )


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    X = np.random.default_rng(1).standard_normal((10, 2)).astype(np.float32)
    out = Delayer(delays=(1, 3)).fit_transform(torch.from_numpy(X))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    np.testing.assert_array_equal(out.numpy(), _hand_delays(X, (1, 3)))


@pytest.mark.parametrize(
    "delays, error, match",
    [
        ((), ValueError, "non-empty"),
        (3, TypeError, "sequence of ints"),
        ("12", TypeError, "sequence of ints"),
        ((1, 2.5), TypeError, "must hold ints"),
        ((1, True), TypeError, "must hold ints"),
        ((1, 2, 1), ValueError, r"distinct.*\[1\]"),
        ([[1, 2]], ValueError, "1-D"),
    ],
)
def test_bad_delays_are_refused(delays, error, match):
    with pytest.raises(error, match=match) as info:
        Delayer(delays=delays).fit(np.zeros((5, 2)))
    assert "delays" in str(info.value)


def test_groups_of_the_wrong_length_are_refused():
    delayer = Delayer().fit(np.zeros((5, 2)))
    with pytest.raises(ValueError, match="groups"):
        delayer.transform(np.zeros((5, 2)), groups=[0, 1])


def test_routed_inside_a_pipeline():
    rng = np.random.default_rng(2)
    runs = np.repeat([0, 1, 2], [15, 10, 12])
    X = rng.standard_normal((runs.size, 2))
    Y = rng.standard_normal((runs.size, 3))
    expected = BatchedRidge(alphas=1.0).fit(
        Delayer(delays=(1, 2)).fit_transform(X, groups=runs), Y
    )
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(
            Delayer(delays=(1, 2)).set_transform_request(groups=True),
            BatchedRidge(alphas=1.0).set_fit_request(groups=False),
        )
        pipe.fit(X, Y, groups=runs)
        np.testing.assert_allclose(pipe[-1].coef_, expected.coef_, rtol=1e-12)
        # transform too: the test rows delayed within their runs.
        np.testing.assert_allclose(
            pipe.predict(X, groups=runs), expected.predict(pipe[0].transform(X, runs))
        )
    # Without routing, as scikit-learn passes step parameters.
    pipe = make_pipeline(Delayer(delays=(1, 2)), BatchedRidge(alphas=1.0))
    pipe.fit(X, Y, delayer__groups=runs)
    np.testing.assert_allclose(pipe[-1].coef_, expected.coef_, rtol=1e-12)


def test_delayed_bands_follow_the_columns():
    delayer = Delayer(delays=(0, 1, 2))
    labels = np.array(["a", "b", "b"])
    np.testing.assert_array_equal(delayer.delayed_bands(labels), np.tile(labels, 3))
    X = np.random.default_rng(3).standard_normal((6, 3))
    out = delayer.fit_transform(X)
    for band, columns in zip([[0], [1, 2]], delayer.delayed_bands([[0], [1, 2]])):
        # The band's delayed columns are its features' delayed copies.
        np.testing.assert_array_equal(
            out[:, columns], _hand_delays(X[:, band], (0, 1, 2))
        )
    with pytest.raises(ValueError, match="cover every"):
        delayer.delayed_bands([[0], [2]])
    with pytest.raises(ValueError, match="fit on 3"):
        delayer.delayed_bands(["a", "b"])


def test_delayed_bands_drive_banded_ridge():
    from skbatch import BandedRidge

    rng = np.random.default_rng(4)
    runs = np.repeat([0, 1, 2], [30, 25, 20])
    X = rng.standard_normal((runs.size, 3))
    labels = ["motion", "words", "words"]
    delayed = _hand_delays_by_run(X, (1, 2), runs)
    Y = delayed @ rng.standard_normal((6, 2)) + rng.standard_normal((runs.size, 2))
    delayer = Delayer(delays=(1, 2))
    args = dict(band_weights=3, alphas=np.logspace(-3, 5, 9), random_state=0)
    pipe = make_pipeline(delayer, BandedRidge(delayer.delayed_bands(labels), **args))
    pipe.fit(X, Y, delayer__groups=runs)
    # By hand: the delayed design, each delayed column in its input's band.
    hand = BandedRidge(np.tile(labels, 2), **args)
    hand.fit(delayed, Y)
    np.testing.assert_allclose(pipe[-1].coef_, hand.coef_, rtol=1e-10)
    np.testing.assert_array_equal(pipe[-1].band_names_, ["motion", "words"])


# Runs of unequal length for the fill tests: edges of every length of run.
_FILL_RUN_LENGTHS = (140, 230, 95)
_TRUE_DELAY = 2
_FILL_DELAYS = (0, 1, 2, 3, 4)
_FEATURE_OFFSET = 100.0


def _ar1_runs(rng, lengths, n_features, phi=0.8):
    """Autocorrelated features, one AR(1) series per run, offset far from 0."""
    parts = []
    for length in lengths:
        series = np.zeros((length, n_features))
        noise = rng.standard_normal((length, n_features))
        series[0] = noise[0]
        for t in range(1, length):
            series[t] = phi * series[t - 1] + noise[t]
        parts.append(series)
    runs = np.repeat(np.arange(len(lengths)), lengths)
    return np.vstack(parts) + _FEATURE_OFFSET, runs


def _hand_delays_filled(X, delays, runs, fill):
    """A naive loop over runs and delays, edges set to ``fill`` per feature."""
    n_features = X.shape[1]
    out = np.empty((X.shape[0], n_features * len(delays)))
    for run in np.unique(runs):
        rows = np.flatnonzero(runs == run)
        length = rows.size
        for k, d in enumerate(delays):
            block = np.tile(fill, (length, 1))
            for t in range(length):
                if 0 <= t - d < length:
                    block[t] = X[rows[t - d]]
            out[rows, k * n_features : (k + 1) * n_features] = block
    return out


def _delayed_response(X, runs, weights, rng):
    """y[t] = X[t - _TRUE_DELAY] @ weights within each run, plus a little noise."""
    y = np.zeros(X.shape[0])
    for run in np.unique(runs):
        rows = np.flatnonzero(runs == run)
        y[rows[_TRUE_DELAY:]] = X[rows[:-_TRUE_DELAY]] @ weights
        # The first rows of a run respond to the stimulus before it, at its mean.
        y[rows[:_TRUE_DELAY]] = X[rows].mean(axis=0) @ weights
    return y + 0.01 * rng.standard_normal(y.size)


def test_mean_fill_equals_a_loop_filling_with_the_fit_mean():
    rng = np.random.default_rng(3)
    X, runs = _ar1_runs(rng, _FILL_RUN_LENGTHS, 2)
    delayer = Delayer(delays=(0, 3, -2, 1), fill="mean")
    out = delayer.fit_transform(X, groups=runs)
    np.testing.assert_allclose(delayer.fill_values_, X.mean(axis=0), rtol=1e-12)
    expected = _hand_delays_filled(X, (0, 3, -2, 1), runs, X.mean(axis=0))
    np.testing.assert_array_equal(out, expected)
    # New data is filled with the mean learnt at fit, as scikit-learn's
    # transformers apply their fitted statistics.
    X_new, runs_new = _ar1_runs(rng, (40, 25), 2)
    X_new += 7.0
    np.testing.assert_array_equal(
        delayer.transform(X_new, groups=runs_new),
        _hand_delays_filled(X_new, (0, 3, -2, 1), runs_new, X.mean(axis=0)),
    )


def test_mean_fill_puts_the_receptive_field_at_the_true_delay():
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(4)
    X, runs = _ar1_runs(rng, _FILL_RUN_LENGTHS, 2)
    weights = np.array([1.5, -0.7])
    y = _delayed_response(X, runs, weights, rng)

    def coefficients(fill):
        X_delayed = Delayer(delays=_FILL_DELAYS, fill=fill).fit_transform(
            X, groups=runs
        )
        ridge = Ridge(alpha=1e-6).fit(X_delayed, y)
        return ridge.coef_.reshape(len(_FILL_DELAYS), X.shape[1])

    # Least squares with an intercept on delays built by hand, edges at the mean.
    design = _hand_delays_filled(X, _FILL_DELAYS, runs, X.mean(axis=0))
    design = np.column_stack([design, np.ones(X.shape[0])])
    reference = np.linalg.lstsq(design, y, rcond=None)[0][:-1]
    reference = reference.reshape(len(_FILL_DELAYS), X.shape[1])
    mean_filled = coefficients("mean")
    np.testing.assert_allclose(mean_filled, reference, atol=1e-4)
    true = np.zeros_like(reference)
    true[_FILL_DELAYS.index(_TRUE_DELAY)] = weights
    np.testing.assert_allclose(mean_filled, true, atol=0.01)
    # Zero at the edges of features around 100 spreads the weights over delays.
    with pytest.warns(UserWarning, match="fill='mean'"):
        zero_filled = coefficients("zero")
    assert np.abs(zero_filled - true).max() > 0.1


def test_batched_ridge_after_mean_fill_finds_the_true_delay():
    rng = np.random.default_rng(5)
    X, runs = _ar1_runs(rng, _FILL_RUN_LENGTHS, 2)
    weights = np.array([0.9, 1.2])
    y = _delayed_response(X, runs, weights, rng)
    model = make_pipeline(
        Delayer(delays=_FILL_DELAYS, fill="mean"), BatchedRidge(alphas=[1e-6])
    )
    model.fit(X, y, delayer__groups=runs)
    coef = np.asarray(model[-1].coef_).reshape(len(_FILL_DELAYS), X.shape[1])
    true = np.zeros_like(coef)
    true[_FILL_DELAYS.index(_TRUE_DELAY)] = weights
    np.testing.assert_allclose(coef, true, atol=0.01)


def test_zero_fill_warns_on_uncentred_features_only():
    rng = np.random.default_rng(6)
    X, runs = _ar1_runs(rng, _FILL_RUN_LENGTHS, 3)
    with pytest.warns(UserWarning, match=r"fill='zero'.*feature 0.*fill='mean'"):
        Delayer(delays=(1, 2)).fit(X, groups=runs)
    centred = X - X.mean(axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Delayer(delays=(1, 2)).fit(centred, groups=runs)
        # Nothing is filled without a non-zero delay, nor with the mean.
        Delayer(delays=(0,)).fit(X, groups=runs)
        Delayer(delays=(1, 2), fill="mean").fit(X, groups=runs)


@pytest.mark.parametrize("fill", ["median", "Mean", 0, None])
def test_bad_fill_is_refused(fill):
    with pytest.raises(ValueError, match="fill") as info:
        Delayer(fill=fill).fit(np.zeros((5, 2)))
    assert repr(fill) in str(info.value)
    assert "'zero'" in str(info.value) and "'mean'" in str(info.value)


def test_fill_is_a_parameter():
    from sklearn.base import clone

    delayer = Delayer(delays=(1,), fill="mean")
    assert delayer.get_params()["fill"] == "mean"
    assert clone(delayer).fill == "mean"
    check_estimator(
        Delayer(fill="mean"),
        expected_failed_checks={
            "check_methods_sample_order_invariance": "delays shift rows",
            "check_methods_subset_invariance": "delays shift rows",
        },
    )


def test_mean_fill_of_float32_stays_float32():
    X = np.arange(1.0, 7.0, dtype=np.float32)[:, None] + 1000
    out = Delayer(delays=(2,), fill="mean").fit_transform(X)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out[:2, 0], np.float32(1003.5))


def test_nan_groups_are_refused():
    X = np.arange(8.0).reshape(4, 2)
    groups = np.array([0.0, 0.0, np.nan, np.nan])
    with pytest.raises(ValueError, match="groups"):
        Delayer(delays=(1,)).fit(X, groups=groups)
    delayer = Delayer(delays=(1,)).fit(X)
    with pytest.raises(ValueError, match="groups"):
        delayer.transform(X, groups=groups)


def test_mean_fill_of_integers_gives_floats():
    X = np.array([[1, 2], [2, 4], [4, 9]])
    out = Delayer(delays=(1,), fill="mean").fit_transform(X)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, [[7 / 3, 5], [1, 2], [2, 4]])
    # Zero fill keeps the integers, as before.
    assert Delayer(delays=(1,)).fit_transform(X).dtype == X.dtype


# Lags in seconds, against the peers' own conversions.

_WINDOWS = [
    (-0.1, 0.4, 128.0),
    (0.0, 0.3, 10.0),
    (-0.7, 0.7, 10.0),
    (0.05, 0.25, 100.0),
    (-0.015625, 0.5078125, 64.0),
    (0.2, 0.2, 250.0),
    (-0.25, -0.05, 1000.0),
    (-0.123, 0.456, 512.0),
]


@pytest.mark.parametrize("tmin, tmax, sfreq", _WINDOWS)
def test_seconds_give_mnes_delays_and_valid_samples(tmin, tmax, sfreq):
    receptive_field = pytest.importorskip("mne.decoding.receptive_field")
    expected = receptive_field._times_to_delays(tmin, tmax, sfreq)
    delayer = Delayer(tmin=tmin, tmax=tmax, sfreq=sfreq)
    X = np.random.default_rng(0).standard_normal((300, 2))
    delayer.fit(X)
    assert delayer.delays_ == tuple(int(d) for d in expected)
    np.testing.assert_allclose(delayer.times_, expected / sfreq, rtol=0, atol=0)
    rows = np.arange(300)
    valid = rows[receptive_field._delays_to_slice(expected)]
    np.testing.assert_array_equal(np.flatnonzero(delayer.valid_samples_), valid)
    # The delayed design is the one MNE builds from the same window.
    mne_delayed = receptive_field._delay_time_series(X, tmin, tmax, sfreq)
    np.testing.assert_array_equal(
        delayer.transform(X),
        mne_delayed.transpose(0, 2, 1).reshape(300, -1),
    )


@pytest.mark.parametrize("tmin, tmax, sfreq", _WINDOWS)
def test_outward_rounding_gives_mtrfpys_lags(tmin, tmax, sfreq):
    matrices = pytest.importorskip("mtrf.matrices")
    expected = matrices.lags_idx(np, tmin, tmax, sfreq)
    delayer = Delayer(tmin=tmin, tmax=tmax, sfreq=sfreq, rounding="outward")
    assert delayer.fit(np.zeros((5, 1))).delays_ == tuple(expected)
    X = np.random.default_rng(1).standard_normal((400, 3))
    # mTRFpy's design after its column of ones, zero padded.
    np.testing.assert_array_equal(
        delayer.fit_transform(X), matrices.lag_matrix(X, expected)[:, 1:]
    )


def test_the_two_roundings_differ_where_the_issue_says():
    # -0.1..0.4 s at 128 Hz: MNE -13..51, mTRFpy -13..52.
    nearest = Delayer(tmin=-0.1, tmax=0.4, sfreq=128).fit(np.zeros((3, 1)))
    outward = Delayer(tmin=-0.1, tmax=0.4, sfreq=128, rounding="outward")
    outward.fit(np.zeros((3, 1)))
    assert (nearest.delays_[0], nearest.delays_[-1]) == (-13, 51)
    assert (outward.delays_[0], outward.delays_[-1]) == (-13, 52)


def test_valid_samples_per_run_equal_a_naive_loop():
    rng = np.random.default_rng(3)
    lengths = [7, 3, 12, 1, 9]
    runs = np.repeat(np.arange(5), lengths)
    rng.shuffle(runs)  # interleaved runs
    X = rng.standard_normal((runs.size, 2))
    delays = (-2, 0, 3)
    delayer = Delayer(delays=delays).fit(X, groups=runs)
    expected = np.zeros(runs.size, dtype=bool)
    for run in np.unique(runs):
        rows = np.flatnonzero(runs == run)
        for t, row in enumerate(rows):
            expected[row] = all(0 <= t - d < rows.size for d in delays)
    np.testing.assert_array_equal(delayer.valid_samples_, expected)
    # No fill reaches a valid row: with NaN fills, they stay finite.
    delayed = Delayer(delays=delays, fill="mean").fit(X, groups=runs)
    delayed.fill_values_ = np.full(2, np.nan)
    out = delayed.transform(X, groups=runs)
    np.testing.assert_array_equal(np.isfinite(out).all(axis=1), expected)


def test_times_with_delays_in_samples_and_without_sfreq():
    X = np.zeros((6, 1))
    assert Delayer(delays=(0, 2)).fit(X).times_ is None
    np.testing.assert_array_equal(
        Delayer(delays=(0, 2), sfreq=100.0).fit(X).times_, [0.0, 0.02]
    )
    assert Delayer().fit(X).delays_ == (1, 2, 3, 4)


@pytest.mark.parametrize(
    "params, error, match",
    [
        (
            {"delays": (1, 2), "tmin": 0.0, "tmax": 0.1, "sfreq": 100},
            ValueError,
            "not both",
        ),
        ({"tmin": 0.0, "tmax": 0.1}, ValueError, "sfreq missing"),
        ({"tmin": 0.0, "sfreq": 100}, ValueError, "tmax missing"),
        ({"tmax": 0.1}, ValueError, "tmin and sfreq missing"),
        ({"tmin": 0.2, "tmax": 0.1, "sfreq": 100}, ValueError, "tmin must be <="),
        ({"tmin": 0.0, "tmax": 0.1, "sfreq": 0}, ValueError, "sfreq must be > 0"),
        ({"tmin": 0.0, "tmax": 0.1, "sfreq": -5.0}, ValueError, "sfreq must be > 0"),
        ({"tmin": 0.0, "tmax": np.inf, "sfreq": 10}, ValueError, "tmax must be fin"),
        ({"tmin": "0", "tmax": 0.1, "sfreq": 10}, TypeError, "tmin must be a real"),
        ({"tmin": 0.0, "tmax": 0.1, "sfreq": True}, TypeError, "sfreq must be a re"),
        (
            {"tmin": 0.0, "tmax": 0.1, "sfreq": 10, "rounding": "floor"},
            ValueError,
            "rounding must be one of 'nearest', 'outward', got str: 'floor'",
        ),
        ({"delays": (1,), "rounding": "outward"}, ValueError, "rounding applies"),
        ({"delays": (1,), "sfreq": np.nan}, ValueError, "sfreq must be finite"),
    ],
)
def test_bad_windows_are_refused_naming_the_parameter(params, error, match):
    with pytest.raises(error, match=match):
        Delayer(**params).fit(np.zeros((5, 1)))


def test_feature_names_and_bands_follow_the_seconds():
    delayer = Delayer(tmin=-0.01, tmax=0.01, sfreq=100).fit(np.zeros((4, 2)))
    np.testing.assert_array_equal(
        delayer.get_feature_names_out(),
        [
            "x0_delay-1",
            "x1_delay-1",
            "x0_delay0",
            "x1_delay0",
            "x0_delay1",
            "x1_delay1",
        ],
    )
    assert delayer.delayed_bands(["a", "b"]).tolist() == ["a", "b"] * 3
