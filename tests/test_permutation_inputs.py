"""Duck-typed DataFrames: what scikit-learn's own cross-validation accepts.

scikit-learn tests its cross-validation with ``MockDataFrame``, an object
with ``iloc``, ``shape`` and ``__array__`` but none of pandas' other
methods; ``permutation_test_score`` passes it to the estimator as given and
slices it by position. The wrappers take it the same way.
"""

import numpy as np
import pytest
from numpy.testing import assert_array_equal
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import Ridge
from sklearn.model_selection import KFold, cross_val_score, permutation_test_score
from sklearn.neighbors import KNeighborsRegressor
from sklearn.utils import _safe_indexing
from sklearn.utils._mocking import CheckingClassifier, MockDataFrame

from skbatch import BootstrapEstimator, PermutationScorer
from skbatch.random import permutation_indices, resolve_entropy

N_PERMUTATIONS = 19
SEED = 3


def regression_data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    y = X @ [1.0, -0.5, 0.0] + rng.standard_normal(n)
    return X, y


class MockOnlyRegressor(RegressorMixin, BaseEstimator):
    """A k-nearest-neighbours regressor that insists on receiving a
    ``MockDataFrame`` for X and y, as scikit-learn's ``CheckingClassifier``
    checks what cross-validation hands it."""

    def fit(self, X, y):
        assert isinstance(X, MockDataFrame), type(X)
        assert isinstance(y, MockDataFrame), type(y)
        self.knn_ = KNeighborsRegressor(n_neighbors=3).fit(X.values, y.values)
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X):
        return self.knn_.predict(np.asarray(X))


def test_mock_dataframe_generic_path_matches_sklearn():
    X, y = regression_data()
    frame, target = MockDataFrame(X), MockDataFrame(y)
    cv = KFold(4)
    scorer = PermutationScorer(
        MockOnlyRegressor(),
        cv=cv,
        n_permutations=N_PERMUTATIONS,
        return_null=True,
        random_state=SEED,
    ).fit(frame, target)

    score, _, pvalue = permutation_test_score(
        MockOnlyRegressor(), frame, target, cv=cv, n_permutations=N_PERMUTATIONS
    )
    assert scorer.score_ == score
    # The null, scored by scikit-learn on the same permutations of y.
    ids = np.arange(N_PERMUTATIONS)
    rows = permutation_indices(resolve_entropy(SEED), ids, len(y))
    null = [
        cross_val_score(
            MockOnlyRegressor(), frame, _safe_indexing(target, perm), cv=cv
        ).mean()
        for perm in rows
    ]
    assert_array_equal(scorer.permutation_scores_, null)
    # permutation_test_score's definition of the p-value.
    count = np.sum(np.asarray(null) >= score)
    assert scorer.pvalue_ == (count + 1) / (N_PERMUTATIONS + 1)
    assert 1 / (N_PERMUTATIONS + 1) <= pvalue <= 1


def test_mock_dataframe_equals_arrays_on_both_paths():
    X, y = regression_data()
    frame, target = MockDataFrame(X), MockDataFrame(y)
    for estimator in (Ridge(), KNeighborsRegressor(n_neighbors=3)):
        params = dict(cv=KFold(4), n_permutations=N_PERMUTATIONS, random_state=SEED)
        mock = PermutationScorer(estimator, return_null=True, **params)
        mock.fit(frame, target)
        plain = PermutationScorer(estimator, return_null=True, **params).fit(X, y)
        assert mock.score_ == plain.score_
        assert mock.pvalue_ == plain.pvalue_
        assert_array_equal(mock.permutation_scores_, plain.permutation_scores_)
        expected = permutation_test_score(
            estimator, frame, target, cv=KFold(4), n_permutations=1
        )[0]
        assert mock.score_ == pytest.approx(expected, rel=1e-12)


def test_mock_dataframe_classifier_reaches_the_estimator():
    # scikit-learn's own check: the estimator receives the mock, as given.
    rng = np.random.default_rng(1)
    X = rng.standard_normal((30, 2))
    labels = np.tile([0, 1, 2], 10)

    def is_mock(data):
        return isinstance(data, MockDataFrame)

    # A fixed random_state: its predictions are random draws of the classes.
    classifier = CheckingClassifier(check_X=is_mock, check_y=is_mock, random_state=0)
    frame, target = MockDataFrame(X), MockDataFrame(labels)
    scorer = PermutationScorer(
        classifier, cv=3, scoring="accuracy", n_permutations=N_PERMUTATIONS
    ).fit(frame, target)
    score, _, pvalue = permutation_test_score(
        classifier, frame, target, cv=3, scoring="accuracy", n_permutations=1
    )
    assert scorer.score_ == score
    assert 1 / (N_PERMUTATIONS + 1) <= scorer.pvalue_ <= 1


@pytest.mark.parametrize("estimator", [Ridge(), MockOnlyRegressor()])
def test_bootstrap_mock_dataframe_equals_arrays(estimator):
    X, y = regression_data()
    if isinstance(estimator, MockOnlyRegressor):
        attributes = lambda fitted: fitted.predict(X[:2])  # noqa: E731
    else:
        attributes = "auto"
    params = dict(n_bootstrap=30, attributes=attributes, random_state=SEED)
    mock = BootstrapEstimator(estimator, **params).fit(
        MockDataFrame(X), MockDataFrame(y)
    )
    if isinstance(estimator, MockOnlyRegressor):
        # The generic path refits on sliced mocks; here the reference refits
        # the same estimator on arrays through a twin that accepts them.
        reference = BootstrapEstimator(
            KNeighborsRegressor(n_neighbors=3),
            **dict(params, attributes=lambda fitted: fitted.predict(X[:2])),
        ).fit(X, y)
    else:
        reference = BootstrapEstimator(estimator, **params).fit(X, y)
    assert mock.results_.keys() == reference.results_.keys()
    for name, result in mock.results_.items():
        expected = reference.results_[name]
        assert_array_equal(result.estimate, expected.estimate)
        assert_array_equal(result.standard_error, expected.standard_error)
        assert_array_equal(result.ci_lower, expected.ci_lower)
        assert_array_equal(result.ci_upper, expected.ci_upper)
