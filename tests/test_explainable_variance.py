"""explainable_variance is invariant to the scale of the targets."""

import warnings

import numpy as np
import pytest

from skbatch import explainable_variance

# Powers of 2 scale floats exactly: the result must not move by one bit.
FLOAT64_EXPONENTS = [-1000, -600, -300, -162, -100, 0, 100, 154, 300, 600, 1000]
# float32 spans 2**-126 .. 2**128: the data (|values| in about 1e-4 .. 5)
# stays normal across these scales.
FLOAT32_EXPONENTS = [-100, -60, -20, 0, 20, 60, 100]


def _reference(Y, bias_correction=True):
    """The formula, one target and one repeat at a time, in exact-ish float64."""
    n_repeats, n_samples, n_targets = Y.shape
    ev = np.empty(n_targets)
    for j in range(n_targets):
        z = np.empty((n_repeats, n_samples))
        for r in range(n_repeats):
            series = Y[r, :, j].astype(np.float64)
            series = series / np.abs(series).max()
            deviations = series - series.sum() / n_samples
            z[r] = deviations / np.sqrt((deviations**2).sum() / n_samples)
        average = z.sum(axis=0) / n_repeats
        value = ((average - average.mean()) ** 2).sum() / n_samples
        if bias_correction:
            value -= (1 - value) / (n_repeats - 1)
        ev[j] = value
    return ev


def _repeats(dtype=np.float64):
    rng = np.random.default_rng(11)
    signal = rng.standard_normal((80, 4))
    noise = rng.standard_normal((6, 80, 4))
    # Targets from pure signal to pure noise, one with a large offset.
    Y = signal * [1.0, 0.5, 0.2, 0.0] + noise + [0.0, 0.0, 30.0, 0.0]
    return Y.astype(dtype)


@pytest.mark.parametrize("exponent", FLOAT64_EXPONENTS)
@pytest.mark.parametrize("bias_correction", [True, False])
def test_invariant_to_powers_of_two_float64(exponent, bias_correction):
    Y = _repeats()
    unit = explainable_variance(Y, bias_correction=bias_correction)
    np.testing.assert_allclose(unit, _reference(Y, bias_correction), rtol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled = explainable_variance(
            Y * 2.0**exponent, bias_correction=bias_correction
        )
    np.testing.assert_array_equal(scaled, unit)


@pytest.mark.parametrize("exponent", FLOAT32_EXPONENTS)
def test_invariant_to_powers_of_two_float32(exponent):
    Y = _repeats(np.float32)
    unit = explainable_variance(Y)
    np.testing.assert_allclose(unit, _reference(Y), rtol=1e-10)
    scaled = Y * np.float32(2.0**exponent)
    assert scaled.dtype == np.float32 and np.all(np.isfinite(scaled))
    np.testing.assert_array_equal(explainable_variance(scaled), unit)


@pytest.mark.parametrize("scale", [2.0**-1000, 1.0, 2.0**1000])
def test_constant_target_is_still_nan_at_any_scale(scale):
    Y = _repeats()
    Y[2, :, 1] = 3.0
    Y = Y * scale
    with pytest.warns(RuntimeWarning, match="1 of 4 targets are constant"):
        ev = explainable_variance(Y)
    assert np.isnan(ev[1])
    defined = [0, 2, 3]
    np.testing.assert_allclose(
        ev[defined], explainable_variance(Y[..., defined]), rtol=1e-13
    )


def test_near_the_largest_float():
    # Sums of values near the largest float overflow unless scaled first.
    Y = _repeats()
    big = Y / np.abs(Y).max() * np.finfo(np.float64).max
    np.testing.assert_allclose(explainable_variance(big), _reference(Y), rtol=1e-12)
