"""TRFs from fitted pipelines, against MNE's ReceptiveField, mTRFpy and a
naive reading of coef_ column by column."""

import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from skbatch import (
    BandedRidge,
    BatchedRidge,
    BootstrapEstimator,
    Delayer,
    trf_from_estimator,
)


def _ar_runs(rng, lengths, n_features, phi=0.8):
    """AR(1) features in runs of the given lengths, rows run after run."""
    runs = []
    for length in lengths:
        noise = rng.standard_normal((length, n_features))
        run = np.empty_like(noise)
        run[0] = noise[0]
        for t in range(1, length):
            run[t] = phi * run[t - 1] + noise[t]
        runs.append(run)
    return runs


def _responses(rng, stimulus_runs, n_outputs, lags=(2, 5)):
    """Each output a different mix of the stimulus at a few lags, plus noise."""
    mixing = rng.standard_normal((stimulus_runs[0].shape[1], n_outputs))
    responses = []
    for run in stimulus_runs:
        response = 0.5 * rng.standard_normal((run.shape[0], n_outputs)) + 1.0
        for lag in lags:
            response[lag:] += run[:-lag] @ mixing
        responses.append(response)
    return responses


def _relative_error(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.mark.parametrize(
    "regressor",
    [
        lambda alpha: BatchedRidge(alphas=[alpha], fit_intercept=False),
        lambda alpha: BandedRidge(alphas=[alpha], fit_intercept=False),
        lambda alpha: Ridge(alpha=alpha, fit_intercept=False),
    ],
    ids=["BatchedRidge", "BandedRidge", "sklearn-Ridge"],
)
@pytest.mark.parametrize("mne_intercept", [True, False])
def test_equals_mne_receptive_field_coef(regressor, mne_intercept):
    mne = pytest.importorskip("mne")
    from mne.decoding import ReceptiveField

    rng = np.random.default_rng(0)
    n_times, n_epochs, n_features, n_outputs = 250, 4, 2, 3
    stimulus = _ar_runs(rng, [n_times] * n_epochs, n_features)
    response = _responses(rng, stimulus, n_outputs)
    tmin, tmax, sfreq, alpha = -0.04, 0.11, 100.0, 30.0
    receptive_field = ReceptiveField(
        tmin, tmax, sfreq, estimator=alpha, fit_intercept=mne_intercept
    )
    with mne.utils.use_log_level("error"):
        receptive_field.fit(
            np.stack(stimulus, axis=1) + 0.3, np.stack(response, axis=1)
        )

    X, y = np.concatenate(stimulus) + 0.3, np.concatenate(response)
    epochs = np.repeat(np.arange(n_epochs), n_times)
    if mne_intercept:
        # MNE centres over every sample of every epoch, then delays.
        X, y = X - X.mean(axis=0), y - y.mean(axis=0)
    model = make_pipeline(
        Delayer(tmin=tmin, tmax=tmax, sfreq=sfreq), regressor(alpha)
    ).fit(X, y, delayer__groups=epochs)
    trf = trf_from_estimator(model)
    assert trf.coef.shape == receptive_field.coef_.shape == (3, 2, 16)
    assert _relative_error(trf.coef, receptive_field.coef_) < 1e-8
    np.testing.assert_array_equal(trf.delays, receptive_field.delays_)
    np.testing.assert_allclose(trf.times, receptive_field.delays_ / sfreq)


def test_equals_mtrfpy_weights_with_lambda_mapped_to_alpha():
    mtrf = pytest.importorskip("mtrf")
    rng = np.random.default_rng(1)
    lengths = [180, 240, 210, 300, 150]
    stimulus = _ar_runs(rng, lengths, 2)
    response = _responses(rng, stimulus, 4)
    fs, tmin, tmax, lam = 64, -0.05, 0.2, 0.7
    reference = mtrf.TRF(direction=1)
    reference.train(stimulus, response, fs, tmin, tmax, lam, verbose=False)

    runs = np.repeat(np.arange(len(lengths)), lengths)
    model = make_pipeline(
        Delayer(tmin=tmin, tmax=tmax, sfreq=fs, rounding="outward"),
        BatchedRidge(alphas=[lam * fs * len(lengths)]),
    ).fit(np.concatenate(stimulus), np.concatenate(response), delayer__groups=runs)
    trf = trf_from_estimator(model)
    # mTRFpy: features x lags x outputs, scaled by fs.
    weights = np.transpose(reference.weights, (2, 0, 1)) / fs
    assert _relative_error(trf.coef, weights) < 1e-8
    np.testing.assert_allclose(trf.times, reference.times)
    np.testing.assert_allclose(
        model[-1].intercept_, np.ravel(reference.bias) / fs, rtol=1e-8
    )


def test_layout_equals_a_naive_reading_of_coef_columns():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((120, 3))
    Y = rng.standard_normal((120, 2))
    delays = (3, 0, -2, 1)
    model = make_pipeline(
        Delayer(delays=delays, sfreq=50.0), BatchedRidge(alphas=[1.0])
    ).fit(X, Y)
    trf = trf_from_estimator(model)
    coef = model[-1].coef_
    assert list(trf.delays) == sorted(delays)
    np.testing.assert_allclose(trf.times, np.sort(delays) / 50.0)
    for t in range(2):
        for j in range(3):
            for k, delay in enumerate(trf.delays):
                column = delays.index(delay) * 3 + j
                assert trf.coef[t, j, k] == coef[t, column]
    assert list(trf.feature_names) == ["x0", "x1", "x2"]
    assert trf.ci_lower is None and trf.confidence_level is None


def test_one_target_names_and_steps_around_the_delayer():
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(3)
    X = pd.DataFrame(rng.standard_normal((90, 2)), columns=["envelope", "onsets"])
    y = rng.standard_normal(90)
    model = Pipeline(
        [
            ("scale", StandardScaler()),
            ("delay", Delayer(delays=(0, 1))),
            ("skip", "passthrough"),
            ("ridge", Ridge()),
        ]
    ).fit(X, y)
    trf = trf_from_estimator(model)
    assert trf.coef.shape == (1, 2, 2)
    assert trf.times is None
    np.testing.assert_array_equal(trf.coef[0].T.ravel(), model[-1].coef_)
    assert list(trf.feature_names) == ["envelope", "onsets"]


def test_bootstrap_bounds_follow_the_same_layout():
    rng = np.random.default_rng(4)
    lengths = [60, 45, 70, 55, 50]
    stimulus = _ar_runs(rng, lengths, 1)
    X = np.concatenate(stimulus)
    Y = np.concatenate(_responses(rng, stimulus, 2, lags=(1,)))
    runs = np.repeat(np.arange(5), lengths)
    pipeline = make_pipeline(
        Delayer(tmin=0.0, tmax=0.03, sfreq=100.0), BatchedRidge(alphas=[10.0])
    )
    boot = BootstrapEstimator(
        pipeline,
        attributes="named_steps.batchedridge.coef_",
        n_bootstrap=30,
        random_state=0,
    ).fit(X, Y, groups=runs)
    trf = trf_from_estimator(boot)
    result = boot.results_["named_steps.batchedridge.coef_"]
    # One feature: columns are the lags in order.
    np.testing.assert_array_equal(trf.coef[:, 0, :], boot.estimator_[-1].coef_)
    np.testing.assert_array_equal(trf.ci_lower[:, 0, :], result.ci_lower)
    np.testing.assert_array_equal(trf.ci_upper[:, 0, :], result.ci_upper)
    np.testing.assert_array_equal(trf.standard_error[:, 0, :], result.standard_error)
    assert trf.confidence_level == 0.95
    assert np.all(trf.ci_lower <= trf.ci_upper)


def test_bad_estimators_are_refused_naming_what_is_expected():
    rng = np.random.default_rng(5)
    X, y = rng.standard_normal((40, 2)), rng.standard_normal(40)
    with pytest.raises(TypeError, match="expects a fitted Pipeline"):
        trf_from_estimator(Ridge().fit(X, y))
    no_delayer = make_pipeline(StandardScaler(), Ridge()).fit(X, y)
    with pytest.raises(ValueError, match="must be a Delayer.*standardscaler"):
        trf_from_estimator(no_delayer)
    scaled_after = make_pipeline(Delayer(), StandardScaler(), Ridge()).fit(X, y)
    with pytest.raises(ValueError, match="must be a Delayer"):
        trf_from_estimator(scaled_after)
    boot = BootstrapEstimator(
        make_pipeline(Delayer(delays=(0, 1)), Ridge()),
        attributes="named_steps.ridge.intercept_",
        n_bootstrap=5,
        random_state=0,
    ).fit(X, y)
    with pytest.raises(ValueError, match="attributes='named_steps.ridge.coef_'"):
        trf_from_estimator(boot)


def test_a_regressor_with_its_delayer_equals_the_pipeline():
    rng = np.random.default_rng(6)
    lengths = [80, 60, 70]
    stimulus = _ar_runs(rng, lengths, 2)
    X = np.concatenate(stimulus)
    Y = np.concatenate(_responses(rng, stimulus, 3))
    runs = np.repeat(np.arange(3), lengths)
    pipeline = make_pipeline(
        Delayer(tmin=-0.01, tmax=0.06, sfreq=100.0), BatchedRidge(alphas=[3.0])
    ).fit(X, Y, delayer__groups=runs)
    delayer = Delayer(tmin=-0.01, tmax=0.06, sfreq=100.0)
    X_delayed = delayer.fit_transform(X, groups=runs)
    ridge = BatchedRidge(alphas=[3.0]).fit(X_delayed, Y)
    separate = trf_from_estimator(ridge, delayer=delayer)
    together = trf_from_estimator(pipeline)
    np.testing.assert_allclose(separate.coef, together.coef, rtol=1e-12)
    np.testing.assert_array_equal(separate.times, together.times)
    boot = BootstrapEstimator(ridge, n_bootstrap=10, random_state=0).fit(
        X_delayed, Y, groups=runs
    )
    bounds = trf_from_estimator(boot, delayer=delayer)
    lower = boot.results_["coef_"].ci_lower
    # Naive reading: lag k, feature j is column position(k) * 2 + j.
    for k, delay in enumerate(bounds.delays):
        column = delayer.delays_.index(delay) * 2
        np.testing.assert_array_equal(
            bounds.ci_lower[:, :, k], lower[:, column : column + 2]
        )


def test_delayer_argument_is_checked():
    rng = np.random.default_rng(8)
    X, y = rng.standard_normal((30, 1)), rng.standard_normal(30)
    delayer = Delayer(delays=(0, 1)).fit(X)
    ridge = Ridge().fit(delayer.transform(X), y)
    with pytest.raises(TypeError, match="delayer must be the fitted Delayer"):
        trf_from_estimator(ridge, delayer="delayer")
    pipeline = make_pipeline(Delayer(delays=(0, 1)), Ridge()).fit(X, y)
    with pytest.raises(ValueError, match="holds its own Delayer"):
        trf_from_estimator(pipeline, delayer=delayer)
    wrong = Delayer(delays=(0, 1, 2)).fit(X)
    with pytest.raises(ValueError, match="not the Delayer's 1 features x 3"):
        trf_from_estimator(ridge, delayer=wrong)
    boot = BootstrapEstimator(
        Ridge(), attributes="intercept_", n_bootstrap=5, random_state=0
    ).fit(delayer.transform(X), y)
    with pytest.raises(ValueError, match="did not bootstrap coef_"):
        trf_from_estimator(boot, delayer=delayer)
