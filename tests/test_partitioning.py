"""variance_partitioning and the Venn-region maths of skbatch._ridge.partition."""

import itertools
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import KFold, LeaveOneGroupOut
from test_ridge import _ar1_runs

from skbatch import BandedRidge, BatchedRidge, variance_partitioning
from skbatch._ridge.partition import subsets, unique_variance, venn_regions

RUN_LENGTHS = (40, 55, 35, 50)
ALPHAS = np.logspace(-2, 4, 7)


def _model(**params):
    defaults = dict(band_weights=4, alphas=ALPHAS, cv=LeaveOneGroupOut())
    return BandedRidge(**{**defaults, **params})


def _data(band_sizes, seed, interleaved=False):
    """AR(1) runs; a label per column; targets driven by band 0 alone, by
    band 1 alone and by every band, in AR(1) noise."""
    X, runs = _ar1_runs(RUN_LENGTHS, sum(band_sizes), 0.7, seed)
    labels = np.repeat(np.arange(len(band_sizes)), band_sizes)
    if interleaved:
        labels = np.random.default_rng(seed).permutation(labels)
    rng = np.random.default_rng(seed + 1)
    signal = [
        X[:, labels == b] @ rng.standard_normal(size)
        for b, size in enumerate(band_sizes)
    ]
    # Each band's part of unit variance, the noise's about as large.
    signal = [part / part.std() for part in signal]
    noise, _ = _ar1_runs(RUN_LENGTHS, 3, 0.5, seed + 2)
    Y = np.column_stack([signal[0], signal[1], sum(signal)]) + 0.8 * noise
    return X, Y, labels, runs


def _naive(
    X,
    Y,
    labels,
    runs,
    n_bands,
    sample_weight=None,
    sizes=None,
    average="rows",
    **params,
):
    """One BandedRidge per subset (of ``sizes``, by size, then
    lexicographic) and held-out run; r2_score per target of the held-out
    predictions of every row (``average="rows"``, as of cross_val_predict),
    or the mean over the runs of each run's r2_score (``"folds"``)."""

    def r2(rows, prediction):
        weight = None if sample_weight is None else sample_weight[rows]
        return r2_score(
            Y[rows], prediction, sample_weight=weight, multioutput="raw_values"
        )

    scores = []
    for size in sizes or range(1, n_bands + 1):
        for subset in itertools.combinations(range(n_bands), size):
            keep = np.isin(labels, subset)
            folds = []
            predicted = np.full(Y.shape, np.nan)
            for train, test in LeaveOneGroupOut().split(X, Y, runs):
                w = None if sample_weight is None else sample_weight[train]
                model = _model(**params).set_params(bands=labels[keep])
                model.fit(
                    X[train][:, keep], Y[train], sample_weight=w, groups=runs[train]
                )
                predicted[test] = model.predict(X[test][:, keep]).reshape(len(test), -1)
                if average == "folds":
                    folds.append(r2(test, predicted[test]))
            every = np.arange(len(Y))
            scores.append(
                r2(every, predicted) if average == "rows" else np.mean(folds, axis=0)
            )
    return np.array(scores)


# The maths -------------------------------------------------------------------


def test_subsets_by_size_then_lexicographic():
    expected = sorted(
        (s for k in range(1, 5) for s in itertools.combinations(range(4), k)),
        key=lambda s: (len(s), s),
    )
    assert subsets(4) == expected
    assert subsets(1) == [(0,)]


@pytest.mark.parametrize("n_bands", [1, 2, 3, 4])
def test_inversion_recovers_known_regions(n_bands):
    rng = np.random.default_rng(n_bands)
    regions = rng.standard_normal((2**n_bands - 1, 5))
    every = subsets(n_bands)
    # f(U): the regions of every S that meets U.
    scores = np.array(
        [sum(r for S, r in zip(every, regions) if set(S) & set(U)) for U in every]
    )
    assert_allclose(venn_regions(scores, n_bands), regions, rtol=0, atol=1e-12)
    singles = [every.index((b,)) for b in range(n_bands)]
    assert_allclose(
        unique_variance(scores, n_bands), regions[singles], rtol=0, atol=1e-12
    )


def test_two_band_formulas():
    f0, f1, f01 = 0.3, 0.45, 0.6
    assert_allclose(venn_regions([f0, f1, f01], 2), [f01 - f1, f01 - f0, f0 + f1 - f01])
    assert_allclose(unique_variance([f0, f1, f01], 2), [f01 - f1, f01 - f0])


def test_table_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match=r"one row per non-empty subset of 3"):
        venn_regions(np.zeros((6, 2)), 3)
    with pytest.raises(ValueError, match="n_bands"):
        subsets(0)


# The estimator loop ----------------------------------------------------------


@pytest.mark.parametrize("average", ["rows", "folds"])
def test_two_bands_match_a_naive_loop_and_the_set_differences(average):
    X, Y, labels, runs = _data((4, 6), seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = variance_partitioning(
            X, Y, bands=labels, estimator=_model(), groups=runs, average=average
        )
        expected = _naive(X, Y, labels, runs, 2, average=average)
    assert result.subsets == [(0,), (1,), (0, 1)]
    assert_allclose(result.scores, expected, rtol=0, atol=1e-10)
    f0, f1, f01 = expected
    assert_allclose(result.unique, [f01 - f1, f01 - f0], rtol=0, atol=1e-10)
    assert_allclose(
        result.regions, [f01 - f1, f01 - f0, f0 + f1 - f01], rtol=0, atol=1e-10
    )
    # Target 0 is driven by band 0 alone, target 1 by band 1 alone.
    assert result.unique[0, 0] > result.unique[1, 0] + 0.2
    assert result.unique[1, 1] > result.unique[0, 1] + 0.2


# Seven subsets of three bands, each a search per fold: about 2 s.
@pytest.mark.slow
def test_three_interleaved_bands_weighted_match_a_naive_loop():
    X, Y, labels, runs = _data((3, 4, 5), seed=1, interleaved=True)
    weight = np.random.default_rng(2).uniform(0.5, 2.0, X.shape[0])
    names = np.array(["a", "b", "c"])[labels]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = variance_partitioning(
            X,
            Y,
            bands=names,
            estimator=_model(),
            groups=runs,
            sample_weight=weight,
        )
        expected = _naive(X, Y, labels, runs, 3, sample_weight=weight)
    assert result.subsets == [
        ("a",),
        ("b",),
        ("c",),
        ("a", "b"),
        ("a", "c"),
        ("b", "c"),
        ("a", "b", "c"),
    ]
    assert result.band_names.tolist() == ["a", "b", "c"]
    assert_allclose(result.scores, expected, rtol=0, atol=1e-10)
    assert_allclose(result.regions.sum(axis=0), expected[-1], atol=1e-10)
    assert result.unique[0, 0] > max(result.unique[1:, 0]) + 0.2


def test_explicit_band_weights_are_restricted_to_each_subset():
    X, Y, labels, runs = _data((3, 3), seed=3)
    weights = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 2.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = variance_partitioning(
            X,
            Y[:, 0],
            estimator=_model(bands=labels, band_weights=weights),
            groups=runs,
        )
        # One band: one candidate, weight 1; both: the three rows as given.
        singles = _naive(X, Y[:, :1], labels, runs, 2, sizes=[1])
        both = _naive(X, Y[:, :1], labels, runs, 2, sizes=[2], band_weights=weights)
    assert result.scores.shape == (3, 1)
    assert_allclose(result.scores, np.vstack([singles, both]), rtol=0, atol=1e-10)


# Bad input, refused before any fit ------------------------------------------


class _NoFit(BandedRidge):
    def fit(self, X, y, sample_weight=None, groups=None):
        raise AssertionError("a fit ran before the input was checked")


def test_not_a_banded_ridge_is_refused():
    X, Y, labels, runs = _data((2, 2), seed=4)
    with pytest.raises(TypeError, match="estimator must be a BandedRidge.*Ridge"):
        variance_partitioning(X, Y, bands=labels, estimator=Ridge())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(bands=np.arange(16) % 9), r"at most 8 bands"),
        (dict(bands=[np.arange(3), np.arange(3, 6)]), "bands"),
        (dict(bands=[0, 1] * 4), "bands"),
        (
            dict(bands=[0] * 8 + [1] * 8, estimator=_NoFit(bands=[0, 1] * 8)),
            "different bands",
        ),
        (
            dict(
                bands=[0] * 8 + [1] * 8,
                estimator=_NoFit(band_weights=[[1.0, 0.0], [1.0, 1e-13]]),
            ),
            r"no candidate a positive weight on the bands \[1\]",
        ),
        (dict(bands=[0] * 8 + [1] * 8, cv=LeaveOneGroupOut()), "groups"),
        (dict(bands=[0] * 8 + [1] * 8, cv=KFold(200)), "n_splits"),
        (dict(bands=[0] * 8 + [1] * 8, sample_weight=-np.ones(180)), "non-negative"),
        (dict(bands=[0] * 8 + [1] * 8, average="runs"), r"average must be one of"),
    ],
)
def test_bad_input_is_refused_before_any_fit(kwargs, match):
    X, runs = _ar1_runs(RUN_LENGTHS, 16, 0.5, 5)
    kwargs.setdefault("estimator", _NoFit())
    with pytest.raises(ValueError, match=match):
        variance_partitioning(X, X[:, :2], **kwargs)


def test_the_docs_say_what_each_average_computes():
    # The scores' docs name both averages, and none says the default is the
    # mean over the folds.
    import skbatch._ridge.partition_inference as inference
    from skbatch.partitioning import VariancePartition

    summary = variance_partitioning.__doc__.split("Parameters")[0]
    scores = VariancePartition.__doc__.split("scores :")[1].split(" : ")[0]
    for text in (inference.__doc__, summary, scores):
        flat = " ".join(text.split())
        assert 'average="rows"' in flat and 'average="folds"' in flat, flat
        assert "folds together" in flat, flat
        assert "is the mean over the folds." not in flat, flat
        assert "the mean over the folds;" not in flat, flat
        assert not flat.rstrip().endswith("the mean over the folds."), flat


def _zero_weight_on_run(runs, run):
    weight = np.random.default_rng(3).uniform(0.5, 2.0, len(runs))
    weight[runs == run] = 0.0
    return weight


def test_a_test_fold_of_zero_weight_is_refused_by_the_mean_over_folds():
    # As BatchedRidge and BandedRidge refuse such a fold of their cv, naming
    # it, before any fit (it fit every subset and returned NaN everywhere).
    X, Y, labels, runs = _data((2, 2), seed=4)
    weight = _zero_weight_on_run(runs, 2)
    with pytest.raises(ValueError) as refused:
        variance_partitioning(
            X,
            Y,
            bands=labels,
            estimator=_NoFit(),
            groups=runs,
            sample_weight=weight,
            average="folds",
        )
    assert "sample_weight is 0 on all 35 test rows of cv fold 2" in str(refused.value)
    with pytest.raises(ValueError) as by_ridge:
        BatchedRidge(cv=LeaveOneGroupOut()).fit(X, Y, sample_weight=weight, groups=runs)
    assert str(refused.value) == str(by_ridge.value)


def test_a_test_fold_of_zero_weight_adds_nothing_to_the_score_over_rows():
    X, Y, labels, runs = _data((2, 2), seed=4)
    weight = _zero_weight_on_run(runs, 2)
    # Inner folds of training rows that each hold rows of positive weight.
    result = variance_partitioning(
        X,
        Y,
        bands=labels,
        estimator=_model(cv=KFold(3)),
        groups=runs,
        sample_weight=weight,
    )
    naive = _naive(X, Y, labels, runs, 2, sample_weight=weight, cv=KFold(3))
    assert np.isfinite(result.scores).all()
    assert_allclose(result.scores, naive, rtol=1e-8, atol=1e-10)
