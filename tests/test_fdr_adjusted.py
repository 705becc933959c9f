"""fdr_adjusted against a hand-written Benjamini-Hochberg; p-values outside [0, 1]."""

import numpy as np
import pytest

from skbatch.streaming import fdr_adjusted


def _benjamini_hochberg(pvalues):
    """Step-up BH by its definition: p_(i) adjusted is min_{j >= i} m p_(j) / j."""
    pvalues = [float(p) for p in pvalues]
    m = len(pvalues)
    ranked = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    for position, i in enumerate(ranked):
        adjusted[i] = min(
            1.0,
            min(m * pvalues[ranked[j]] / (j + 1) for j in range(position, m)),
        )
    return np.array(adjusted)


@pytest.mark.parametrize("m", [1, 2, 9, 300])
def test_equals_benjamini_hochberg_on_valid_pvalues(m):
    rng = np.random.default_rng(m)
    pvalues = rng.uniform(size=m) ** 3
    pvalues[::4] = np.round(pvalues[::4], 1)
    pvalues[: min(m, 2)] = [0.0, 1.0][: min(m, 2)]
    np.testing.assert_allclose(
        fdr_adjusted(pvalues), _benjamini_hochberg(pvalues), rtol=1e-14
    )


def test_nan_is_left_out_of_the_family():
    pvalues = np.array([0.01, np.nan, 0.04, 0.03])
    adjusted = fdr_adjusted(pvalues)
    assert np.isnan(adjusted[1])
    np.testing.assert_allclose(
        adjusted[[0, 2, 3]], _benjamini_hochberg([0.01, 0.04, 0.03]), rtol=1e-14
    )


@pytest.mark.parametrize(
    "bad", [-0.1, 1.5, -1e-300, 1.0 + 2**-52, np.inf, -np.inf, 7.0]
)
def test_pvalues_outside_zero_one_are_refused(bad):
    pvalues = [0.2, 0.01, bad, 0.5]
    with pytest.raises(ValueError, match=r"pvalues.*\[0, 1\]") as info:
        fdr_adjusted(pvalues)
    assert repr(float(bad)) in str(info.value)
    assert "index 2" in str(info.value)
