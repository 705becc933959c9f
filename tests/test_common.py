"""scikit-learn's estimator checks on every public estimator."""

import pytest
from sklearn.linear_model import LinearRegression, Ridge
from sklearn.utils.estimator_checks import parametrize_with_checks

from skbatch import BandedRidge, BatchedRidge, BootstrapEstimator, PermutationScorer

ESTIMATORS = [
    BatchedRidge(),
    BatchedRidge(alphas=[0.1, 1.0, 10.0], cv=3, scoring="neg_mean_squared_error"),
    BatchedRidge(cv="gcv", alpha_per_target=False),
    BandedRidge(),
    BandedRidge(band_weights=5, cv=3, scoring="neg_mean_squared_error"),
    PermutationScorer(n_permutations=5, random_state=0),
    PermutationScorer(Ridge(), n_permutations=5, random_state=0),
    PermutationScorer(
        Ridge(),
        n_permutations=5,
        scoring="correlation",
        multioutput="raw_values",
        permutation_type="circular_shift",
        random_state=0,
    ),
    PermutationScorer(
        n_permutations=5,
        permutation_type="block_shuffle",
        block_size=1,
        random_state=0,
    ),
    BootstrapEstimator(n_bootstrap=5, random_state=0),
    BootstrapEstimator(Ridge(), n_bootstrap=5, random_state=0),
    BootstrapEstimator(LinearRegression(), n_bootstrap=5, block_size=2, random_state=0),
]


# scikit-learn's checks fit on small random data, often rows in order or a
# constant column: skbatch's advice about such data (an alpha grid to extend,
# autocorrelated rows, undefined fold scores) is expected there, not checked.
@pytest.mark.filterwarnings("ignore::skbatch.AlphaEdgeWarning")
@pytest.mark.filterwarnings("ignore::skbatch.AutocorrelationWarning")
@pytest.mark.filterwarnings("ignore:The rows of y are autocorrelated:UserWarning")
@pytest.mark.filterwarnings(
    "ignore:The residuals of the fit on all data are autocorrelated:UserWarning"
)
@pytest.mark.filterwarnings("ignore:The cross-validated score is undefined:UserWarning")
@parametrize_with_checks(ESTIMATORS)
@pytest.mark.slow
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
