"""BootstrapEstimator(BandedRidge): the batched path at the held choices.

References: scikit-learn's Ridge at each target's alpha on the rescaled
resampled rows of its candidate, the generic path (HeldBandedRidge refit per
replicate) on the same draws, and BandedRidge refit per replicate for
tune_per_replicate=True.
"""

import pickle
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import clone
from sklearn.linear_model import Ridge
from threadpoolctl import threadpool_limits

from skbatch import BandedRidge, BootstrapEstimator
from skbatch._ridge.banded.bootstrap import BandedBootstrapProblem, HeldBands
from skbatch._ridge.problems import BootstrapRidgeProblem
from skbatch.backend import resolve_backend
from skbatch.banded import HeldBandedRidge
from skbatch.random import bootstrap_counts, resolve_entropy
from skbatch.testing import simulate_oom

# Two bands of 4 columns, interleaved.
LABELS = np.array([0, 1, 0, 1, 1, 0, 1, 0])
ALPHAS = np.logspace(-2, 3, 6)
# Equal, band 0 alone (a weight 0), and leaning to band 1.
CANDIDATES = np.array([[0.5, 0.5], [1.0, 0.0], [0.2, 0.8]])


def ar1(rng, n, size, phi):
    out = np.empty((n, size))
    out[0] = rng.standard_normal(size)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + np.sqrt(1 - phi**2) * rng.standard_normal(size)
    return out


def make_data(runs=(30, 20, 14), t=6, seed=0, phi=0.6):
    """Runs of unequal length of AR(1) rows; targets driven by band 0 only,
    band 1 mostly, or both, so that several candidates win."""
    rng = np.random.default_rng(seed)
    X = np.vstack([ar1(rng, r, LABELS.size, phi) for r in runs]) + 2.0
    W = rng.standard_normal((LABELS.size, t))
    kind = np.arange(t) % 3
    W[np.ix_(LABELS == 1, kind == 0)] = 0
    W[np.ix_(LABELS == 0, kind == 1)] *= 0.2
    noise = np.vstack([ar1(rng, r, t, phi) for r in runs])
    Y = X @ W + noise + 3.0
    groups = np.repeat(np.arange(len(runs)), runs)
    return X, Y, groups


def columns_of(labels):
    return [np.flatnonzero(labels == b) for b in dict.fromkeys(labels)]


def ridge_replicate(X, y, rows, gamma, alpha, fit_intercept, sample_weight=None):
    """Ridge at alpha on the rescaled drawn rows, mapped back to X's columns."""
    scale = np.empty(X.shape[1])
    for b, cols in enumerate(columns_of(LABELS)):
        scale[cols] = np.sqrt(gamma[b])
    kept = np.flatnonzero(scale > 0)
    weight = None if sample_weight is None else sample_weight[rows]
    ref = Ridge(alpha=alpha, fit_intercept=fit_intercept).fit(
        X[rows][:, kept] * scale[kept], y[rows], sample_weight=weight
    )
    coef = np.zeros(X.shape[1])
    coef[kept] = ref.coef_ * scale[kept]
    return coef, ref.intercept_


def drawn_rows(random_state, n_bootstrap, n_samples, groups=None, **blocks):
    counts = bootstrap_counts(
        resolve_entropy(random_state),
        np.arange(n_bootstrap),
        n_samples,
        groups,
        **blocks,
    )
    return [np.repeat(np.arange(n_samples), c) for c in counts]


def linear_of(model):
    """A callable ``attributes``: forces the generic path, the same values."""
    return {"coef_": model.coef_, "intercept_": model.intercept_}


def banded(**params):
    return BandedRidge(LABELS, alphas=ALPHAS, band_weights=CANDIDATES, **params)


def assert_refits(boot, X, Y, rows, fit_intercept=True, sample_weight=None):
    fitted = boot.estimator_
    coef = boot.results_["coef_"].samples
    intercept = boot.results_["intercept_"].samples
    for k, r in enumerate(rows):
        for j in range(Y.shape[1]):
            expected, b = ridge_replicate(
                X,
                Y[:, j],
                r,
                fitted.band_weights_[j],
                fitted.alpha_[j],
                fit_intercept,
                sample_weight,
            )
            assert_allclose(coef[k, j], expected, rtol=1e-8, atol=1e-8)
            assert_allclose(intercept[k, j], b, rtol=1e-8, atol=1e-8)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        # Some targets choose an edge of ALPHAS or lean to a band: not what
        # is tested here.
        warnings.simplefilter("ignore", UserWarning)
        yield


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_replicates_equal_ridge_on_rescaled_rows(fit_intercept):
    X, Y, _ = make_data(seed=1)
    boot = BootstrapEstimator(
        banded(fit_intercept=fit_intercept),
        n_bootstrap=8,
        return_samples=True,
        random_state=5,
    ).fit(X, Y)
    chosen = np.unique(boot.estimator_.band_weights_, axis=0)
    assert len(chosen) >= 2
    assert any((row == 0).any() for row in chosen)
    assert boot.fit_report_.stages[-1].name == "replicates"
    assert boot.fit_report_.stages[-1].path == "batched"
    assert_refits(boot, X, Y, drawn_rows(5, 8, X.shape[0]), fit_intercept)
    # A band of weight 0 stays exactly 0 in every replicate.
    zero = boot.estimator_.band_weights_[:, 1] == 0
    assert zero.any()
    samples = boot.results_["coef_"].samples
    assert np.all(samples[:, zero][:, :, LABELS == 1] == 0)


@pytest.mark.parametrize("one_target", [False, True], ids=["2d", "1d"])
def test_batched_path_equals_generic_path(one_target):
    X, Y, _ = make_data(seed=1)
    y = Y[:, 2] if one_target else Y
    weight = np.random.default_rng(1).uniform(0.5, 2.0, X.shape[0])
    params = dict(n_bootstrap=10, return_samples=True, random_state=2)
    fast = BootstrapEstimator(banded(), **params).fit(X, y, sample_weight=weight)
    generic = BootstrapEstimator(banded(), attributes=linear_of, **params)
    generic.fit(X, y, sample_weight=weight)
    assert fast.fit_report_.stages[-1].path == "batched"
    assert generic.fit_report_.stages[-1].path == "parallel"
    for name in ("coef_", "intercept_"):
        fast_result, generic_result = fast.results_[name], generic.results_[name]
        assert fast_result.samples.shape == generic_result.samples.shape
        assert_allclose(
            fast_result.samples, generic_result.samples, rtol=1e-9, atol=1e-9
        )
        assert_allclose(fast_result.ci_lower, generic_result.ci_lower, atol=1e-9)
    if not one_target:
        assert_refits(fast, X, Y, drawn_rows(2, 10, X.shape[0]), sample_weight=weight)


def _assert_same(reference, other):
    for name, result in reference.results_.items():
        assert_allclose(
            other.results_[name].samples, result.samples, rtol=1e-10, atol=1e-12
        )
        assert_allclose(other.results_[name].ci_upper, result.ci_upper, atol=1e-12)


def test_invariant_to_batch_size_memory_budget_and_oom():
    X, Y, _ = make_data(seed=2)
    params = dict(n_bootstrap=23, return_samples=True, random_state=7)
    with threadpool_limits(1, user_api="blas"):
        reference = BootstrapEstimator(banded(), max_memory_gb=8.0, **params)
        reference.fit(X, Y)
    assert reference.fit_report_.stages[-1].n_batches == 1
    tiny = BootstrapEstimator(banded(n_targets_batch=2), max_memory_gb=5e-4, **params)
    tiny.fit(X, Y)
    assert tiny.fit_report_.stages[-1].n_batches > 1
    _assert_same(reference, tiny)
    with simulate_oom(max_items=3):
        recovered = BootstrapEstimator(banded(), **params).fit(X, Y)
    stage = recovered.fit_report_.stages[-1]
    assert stage.path == "batched" and stage.n_oom_splits > 0
    _assert_same(reference, recovered)


@pytest.mark.parametrize("block_scheme", ["moving", "circular", "stationary"])
def test_block_bootstrap_of_runs_equals_ridge_refits(block_scheme):
    X, Y, groups = make_data(runs=(26, 17, 11), seed=3, phi=0.8)
    params = dict(block_size=4, block_scheme=block_scheme)
    boot = BootstrapEstimator(
        banded(), n_bootstrap=6, return_samples=True, random_state=4, **params
    ).fit(X, Y, groups=groups)
    assert boot.fit_report_.stages[-1].path == "batched"
    rows = drawn_rows(4, 6, X.shape[0], groups, **params)
    assert_refits(boot, X, Y, rows)


@pytest.mark.parametrize("clustered", [False, True], ids=["rows", "runs"])
def test_bca_equals_the_generic_jackknife(clustered):
    # The closed-form jackknife per candidate against refits leaving out
    # each row (or run, for a cluster bootstrap of the runs).
    X, Y, runs = make_data(runs=(12, 9, 14, 10, 11, 8, 9, 7), seed=4)
    groups = runs if clustered else None
    params = dict(n_bootstrap=40, ci_method="bca", random_state=1)
    counts = bootstrap_counts(resolve_entropy(1), np.arange(40), X.shape[0], groups)
    # A replicate drawing every unit once is the fit on all data, to within
    # rounding, which then decides whether it counts as a tie in z0: none
    # here, so the two paths must agree.
    assert not np.any(np.all(counts == 1, axis=1))
    fast = BootstrapEstimator(banded(), **params).fit(X, Y, groups=groups)
    generic = BootstrapEstimator(banded(), attributes=linear_of, **params)
    generic.fit(X, Y, groups=groups)
    assert fast.fit_report_.stages[-1].path == "batched"
    for name in ("coef_", "intercept_"):
        assert_allclose(
            fast.results_[name].ci_lower,
            generic.results_[name].ci_lower,
            rtol=1e-8,
            atol=1e-8,
        )
        assert_allclose(
            fast.results_[name].ci_upper,
            generic.results_[name].ci_upper,
            rtol=1e-8,
            atol=1e-8,
        )


def test_tune_per_replicate_redoes_the_search():
    X, Y, _ = make_data(seed=5)
    model = banded()
    boot = BootstrapEstimator(
        model,
        n_bootstrap=4,
        attributes=["coef_", "alpha_"],
        tune_per_replicate=True,
        return_samples=True,
        random_state=3,
    ).fit(X, Y)
    assert boot.fit_report_.stages[-1].path == "parallel"
    rows = drawn_rows(3, 4, X.shape[0])
    alphas = boot.results_["alpha_"].samples
    for k, r in enumerate(rows):
        refit = banded().fit(X[r], Y[r])
        assert_allclose(boot.results_["coef_"].samples[k], refit.coef_, atol=1e-10)
        assert_allclose(alphas[k], refit.alpha_)
    assert not np.all(alphas == alphas[0])


def test_fixed_banded_ridge_takes_the_batched_path():
    X, Y, _ = make_data(seed=6)
    model = BandedRidge(LABELS, alphas=3.0, band_weights=[[0.3, 0.7]])
    boot = BootstrapEstimator(
        model, n_bootstrap=5, return_samples=True, random_state=0
    ).fit(X, Y)
    assert boot.fit_report_.stages[-1].path == "batched"
    assert_refits(boot, X, Y, drawn_rows(0, 5, X.shape[0]))


def test_held_choices_are_refused_as_bootstrapped_attributes():
    X, Y, _ = make_data(seed=7)
    with pytest.raises(ValueError, match="tune_per_replicate=True"):
        BootstrapEstimator(banded(), n_bootstrap=3, attributes="band_weights_").fit(
            X, Y
        )


def test_memory_is_that_of_the_largest_candidate_at_a_time():
    X, Y, _ = make_data(seed=8)
    alphas = np.ones(Y.shape[1])
    weights = CANDIDATES[np.arange(Y.shape[1]) % 3]
    held = HeldBands(columns_of(LABELS), weights, alphas)
    backend = resolve_backend("numpy")
    fixed, device, _ = BandedBootstrapProblem.nbytes(
        X, Y, held, backend, np.float64, n_bootstrap=2
    )
    # Candidate [1, 0] keeps 4 of 8 columns; the others keep all, with two
    # targets each.
    whole_fixed, whole_device, _ = BootstrapRidgeProblem.nbytes(
        X.shape[0],
        X.shape[1],
        2,
        8,
        copies_y=True,
        gather_buffers=BootstrapRidgeProblem.gather_buffers(
            backend, X.shape[0], X.shape[1] + 1, 2, threads=False
        ),
    )
    assert device == whole_device
    assert fixed == whole_fixed + 8 * X.size
    with pytest.raises(ValueError, match="max_memory_gb"):
        BootstrapEstimator(banded(), n_bootstrap=10, max_memory_gb=1e-5).fit(X, Y)


def test_more_features_than_rows_solved_in_the_dual():
    # 20 rows, 24 columns: candidates of every band solve the n x n kernel,
    # the one of band 0 alone (12 columns) the primal.
    labels = np.tile(LABELS, 3)
    rng = np.random.default_rng(9)
    X = rng.standard_normal((20, labels.size)) + 1.0
    Y = X[:, labels == 0] @ rng.standard_normal((12, 4)) + rng.standard_normal((20, 4))
    Y[:, 2:] += X[:, labels == 1] @ rng.standard_normal((12, 2))
    weights = np.array([[0.5, 0.5], [1.0, 0.0]])[[1, 0, 1, 0]]
    alphas = np.array([0.5, 2.0, 1.0, 4.0])
    held = HeldBandedRidge(columns_of(labels), weights, alphas)
    boot = BootstrapEstimator(
        held, n_bootstrap=5, return_samples=True, random_state=6
    ).fit(X, Y)
    assert boot.fit_report_.stages[-1].path == "batched"
    # BCa: no closed-form jackknife with more columns than rows, refits.
    params = dict(n_bootstrap=20, ci_method="bca", random_state=6)
    fast = BootstrapEstimator(held, **params).fit(X, Y)
    generic = BootstrapEstimator(held, attributes=linear_of, **params).fit(X, Y)
    for name in ("coef_", "intercept_"):
        assert_allclose(
            fast.results_[name].ci_lower, generic.results_[name].ci_lower, atol=1e-8
        )
    for k, rows in enumerate(drawn_rows(6, 5, X.shape[0])):
        expected = clone(held).fit(X[rows], Y[rows])
        assert_allclose(
            boot.results_["coef_"].samples[k], expected.coef_, rtol=1e-8, atol=1e-8
        )
        assert_allclose(
            boot.results_["intercept_"].samples[k],
            expected.intercept_,
            rtol=1e-8,
            atol=1e-8,
        )


@pytest.mark.parametrize("device", ["torch", "jax"])
@pytest.mark.slow
def test_array_api_backends_match_numpy(device):
    pytest.importorskip(device)
    X, Y, _ = make_data(seed=10)
    params = dict(n_bootstrap=6, return_samples=True, random_state=8)
    reference = BootstrapEstimator(banded(), **params).fit(X, Y)
    boot = BootstrapEstimator(banded(), device=device, **params).fit(X, Y)
    assert boot.backend_.library == device
    for name in ("coef_", "intercept_"):
        assert_allclose(
            boot.results_[name].samples, reference.results_[name].samples, atol=1e-9
        )


def test_problem_pickles_for_a_cluster():
    # What run_on_cluster sends to dask workers: the same replicates back.
    X, Y, _ = make_data(seed=11)
    weights = CANDIDATES[np.arange(Y.shape[1]) % 3]
    held = HeldBands(columns_of(LABELS), weights, np.linspace(0.5, 3.0, Y.shape[1]))
    problem = BandedBootstrapProblem(
        X,
        Y,
        held,
        sample_weight=None,
        groups=None,
        block_size=None,
        entropy=resolve_entropy(3),
        backend=resolve_backend("numpy"),
        dtype=np.dtype(np.float64),
        n_bootstrap=6,
    )
    ids = np.arange(2, 5)
    again = pickle.loads(pickle.dumps(problem))
    for ours, theirs in zip(problem(ids), again(ids)):
        assert_array_equal(ours, theirs)


@pytest.mark.parametrize(
    "bands, weights, alphas, match",
    [
        (None, [[0.5, 0.5], [1.0, 0.0]], [1.0, 2.0], "band_weights has 2 row"),
        (None, [[0.5, 0.5]] * 3, [1.0, 2.0], "alphas has 2"),
        (None, [[0.5, 0.5]] * 3, [-1.0, 1.0, 1.0], "alphas must be positive"),
        (None, [[0.0, 0.0]] * 3, [1.0] * 3, "band_weights row 0 is all zero"),
        ([[0, 1], [2]], [[0.5, 0.5]] * 3, [1.0] * 3, "cover every column"),
        (None, 3, [1.0] * 3, "one row per target"),
    ],
)
def test_held_banded_ridge_refuses_what_does_not_fit_its_targets(
    bands, weights, alphas, match
):
    # Checked before any solve, in fit and on the bootstrap's batched path:
    # a row of weights and an alpha per target, bands partitioning X.
    rng = np.random.default_rng(12)
    X, Y = rng.standard_normal((30, 4)), rng.standard_normal((30, 3))
    bands = [[0, 1], [2, 3]] if bands is None else bands
    held = HeldBandedRidge(bands, weights, alphas)
    for fit in (held.fit, BootstrapEstimator(held, n_bootstrap=3).fit):
        with pytest.raises((ValueError, TypeError), match=match):
            fit(X, Y)
