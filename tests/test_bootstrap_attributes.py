"""``attributes`` by scikit-learn's attrgetter convention: dotted names.

A dotted name such as ``"named_steps.ridge.coef_"`` is read as
``operator.attrgetter`` reads it (as ``SelectFromModel(importance_getter=...)``
takes it), so that a step of a Pipeline can be bootstrapped. The reference
is a naive loop that refits the pipeline on each replicate's rows, rebuilt
in drawn order from ``skbatch.random.bootstrap_rows``.
"""

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler
from test_bootstrap import FailsWithoutFirstRow, MustNotFit, resampled_rows

from skbatch import BootstrapEstimator

TOL = {"rtol": 1e-10, "atol": 1e-12}


def make_data(n_samples=50, n_features=4, n_targets=2, seed=0):
    rng = np.random.default_rng(seed)
    scales = rng.uniform(0.5, 3.0, n_features)
    X = rng.standard_normal((n_samples, n_features)) * scales + 1.0
    Y = X @ rng.standard_normal((n_features, n_targets))
    Y += rng.standard_normal((n_samples, n_targets))
    return X, Y


def test_pipeline_step_equals_a_naive_loop_of_pipeline_refits():
    X, Y = make_data()
    pipeline = make_pipeline(StandardScaler(), Ridge(alpha=3.0))
    boot = BootstrapEstimator(
        pipeline,
        attributes="named_steps.ridge.coef_",
        n_bootstrap=40,
        return_samples=True,
        random_state=7,
    ).fit(X, Y)
    assert list(boot.results_) == ["named_steps.ridge.coef_"]
    result = boot.results_["named_steps.ridge.coef_"]
    full = clone(pipeline).fit(X, Y)
    assert_allclose(result.estimate, full.named_steps["ridge"].coef_, **TOL)
    expected = np.stack(
        [
            clone(pipeline).fit(X[rows], Y[rows]).named_steps["ridge"].coef_
            for rows in resampled_rows(7, 40, len(X))
        ]
    )
    assert_allclose(result.samples, expected, **TOL)
    assert_allclose(result.standard_error, expected.std(axis=0, ddof=1), **TOL)
    assert_allclose(
        result.ci_lower, np.percentile(expected, 2.5, axis=0), rtol=1e-10, atol=1e-10
    )
    # A pipeline is refit on every replicate (the generic path).
    assert boot.fit_report_.stages[-1].path != "batched"


def test_dotted_and_plain_names_mix_and_keep_their_given_order():
    X, Y = make_data(seed=1)
    pipeline = make_pipeline(StandardScaler(), Ridge())
    names = ("named_steps.ridge.intercept_", "named_steps.standardscaler.mean_")
    boot = BootstrapEstimator(
        pipeline, attributes=list(names), n_bootstrap=25, return_samples=True
    ).fit(X, Y)
    assert tuple(boot.results_) == names
    rows = resampled_rows(0, 25, len(X))
    means = np.stack([X[r].mean(axis=0) for r in rows])
    assert_allclose(boot.results_[names[1]].samples, means, **TOL)
    intercepts = np.stack(
        [clone(pipeline).fit(X[r], Y[r])[-1].intercept_ for r in rows]
    )
    assert_allclose(boot.results_[names[0]].samples, intercepts, **TOL)


def test_dotted_name_reads_the_best_estimator_of_a_search():
    X, Y = make_data(seed=2)
    search = GridSearchCV(
        make_pipeline(StandardScaler(), Ridge()), {"ridge__alpha": [0.1, 10.0]}, cv=3
    )
    boot = BootstrapEstimator(
        search,
        attributes="named_steps.ridge.coef_",
        n_bootstrap=10,
        return_samples=True,
        random_state=3,
    ).fit(X, Y)
    best = boot.estimator_.best_estimator_
    result = boot.results_["named_steps.ridge.coef_"]
    assert_allclose(result.estimate, best.named_steps["ridge"].coef_, **TOL)
    # The best parameters are held fixed across replicates.
    expected = np.stack(
        [
            clone(best).fit(X[r], Y[r]).named_steps["ridge"].coef_
            for r in resampled_rows(3, 10, len(X))
        ]
    )
    assert_allclose(result.samples, expected, **TOL)


@pytest.mark.parametrize(
    "name, missing, where",
    [
        ("named_steps.failswithoutfirstrow.nope_", "'nope_'", "FailsWithoutFirstRow"),
        ("named_steps.ridge.coef_", "'ridge'", "named_steps"),
        ("steps_.coef_", "'steps_'", "Pipeline"),
    ],
)
def test_missing_dotted_attribute_raises_before_any_replicate(name, missing, where):
    X, y = make_data(20, 2, 1)
    X[0, 0] = -1  # the full fit succeeds, most replicates would fail
    pipeline = make_pipeline(FunctionTransformer(), FailsWithoutFirstRow())
    boot = BootstrapEstimator(pipeline, n_bootstrap=50, attributes=name)
    with pytest.raises(ValueError) as error:
        boot.fit(X, y[:, 0])
    message = str(error.value)
    assert message.startswith("attributes")
    assert repr(name) in message and missing in message and where in message
    assert not hasattr(boot, "results_")


@pytest.mark.parametrize(
    "attributes", ["named_steps..coef_", ".coef_", "coef_.", ("coef_", "a..b")]
)
def test_malformed_dotted_name_raises_before_fitting(attributes):
    X, y = make_data(20, 2, 1)
    with pytest.raises(ValueError, match="attributes must be .*dotted"):
        BootstrapEstimator(MustNotFit(), attributes=attributes).fit(X, y)


def test_plain_names_on_a_linear_model_keep_the_batched_path():
    X, Y = make_data(seed=4)
    boot = BootstrapEstimator(
        Ridge(), attributes="coef_", n_bootstrap=20, return_samples=True
    ).fit(X, Y)
    assert boot.fit_report_.stages[-1].path == "batched"
    expected = np.stack(
        [Ridge().fit(X[r], Y[r]).coef_ for r in resampled_rows(0, 20, len(X))]
    )
    assert_allclose(boot.results_["coef_"].samples, expected, **TOL)
