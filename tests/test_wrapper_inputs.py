"""What the wrapped estimator receives: pandas objects as given, and groups
only where they apply."""

import warnings

import numpy as np
import pytest
from numpy.testing import assert_array_equal
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import GroupKFold, KFold, permutation_test_score

from skbatch import BootstrapEstimator, PermutationScorer


def regression_data(n=36, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    y = X @ [1.0, -0.5, 0.0] + rng.standard_normal(n)
    return X, y


class PositionalRidge(RegressorMixin, BaseEstimator):
    """A user's estimator written for pandas: it reads rows with ``.iloc``."""

    def fit(self, X, y):
        first = (X.iloc[0], y.iloc[0])  # AttributeError on an ndarray
        assert len(first) == 2
        self.ridge_ = Ridge().fit(X.to_numpy(), y.to_numpy())
        return self

    def predict(self, X):
        return self.ridge_.predict(X.iloc[:, :].to_numpy())


class AligningRidge(PositionalRidge):
    """A user's estimator that joins y onto X by index, as pandas code does."""

    def fit(self, X, y):
        joined = X.join(y.rename("target"))
        self.ridge_ = Ridge().fit(
            joined.drop(columns="target").to_numpy(), joined["target"].to_numpy()
        )
        return self


def test_dataframe_without_column_names_and_series_reach_the_estimator():
    pd = pytest.importorskip("pandas")
    X, y = regression_data()
    # Integer column names: no feature_names_in_, a DataFrame all the same.
    frame, series = pd.DataFrame(X), pd.Series(y)
    cv = KFold(4)
    scorer = PermutationScorer(
        PositionalRidge(), cv=cv, n_permutations=9, random_state=0
    ).fit(frame, series)
    expected = permutation_test_score(
        PositionalRidge(), frame, series, cv=cv, n_permutations=1
    )[0]
    assert scorer.score_ == pytest.approx(expected, rel=1e-12)
    assert not hasattr(scorer, "feature_names_in_")


def test_permuted_series_keeps_its_index():
    # The permuted values sit on y's own index: an estimator that aligns y
    # on X's index sees the permutation, not the rows put back in order.
    pd = pytest.importorskip("pandas")
    X, y = regression_data(seed=1)
    frame, series = pd.DataFrame(X), pd.Series(y)
    scores = [
        PermutationScorer(
            estimator, cv=KFold(3), n_permutations=9, random_state=0, return_null=True
        )
        .fit(frame, series)
        .permutation_scores_
        for estimator in (PositionalRidge(), AligningRidge())
    ]
    assert_array_equal(scores[1], scores[0])
    # A null at the observed score would mean the permutations were undone.
    assert np.all(scores[1] < 0.5)


def classification_data(n=48, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    y = (X[:, 0] + 0.5 * rng.standard_normal(n) > 0).astype(int)
    groups = np.repeat(np.arange(8), n // 8)
    return X, y, groups


def test_groups_of_a_classifier_do_not_reach_stratified_folds():
    # The default cv of a classifier is StratifiedKFold, which ignores groups
    # and warns when given them: they are the permutations' and replicates'.
    X, y, groups = classification_data()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scorer = PermutationScorer(
            LogisticRegression(solver="liblinear"), n_permutations=9, random_state=0
        ).fit(X, y, groups=groups)
        BootstrapEstimator(
            LogisticRegression(solver="liblinear"), n_bootstrap=5, random_state=0
        ).fit(X, y, groups=groups)
    expected = permutation_test_score(
        LogisticRegression(solver="liblinear"), X, y, n_permutations=1
    )[0]
    assert scorer.score_ == pytest.approx(expected, rel=1e-12)


def test_groups_still_reach_a_group_splitter():
    X, y, groups = classification_data(seed=1)
    cv = GroupKFold(4)
    scorer = PermutationScorer(
        LogisticRegression(solver="liblinear"), cv=cv, n_permutations=9, random_state=0
    ).fit(X, y, groups=groups)
    expected = permutation_test_score(
        LogisticRegression(solver="liblinear"),
        X,
        y,
        groups=groups,
        cv=cv,
        n_permutations=1,
    )[0]
    assert scorer.score_ == pytest.approx(expected, rel=1e-12)
