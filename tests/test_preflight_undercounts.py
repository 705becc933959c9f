"""Memory the preflights charge against what the work they plan measures.

Each test measures the peak of the real computation with tracemalloc (numpy
and scipy allocate through Python's tracked allocator) and checks the bytes
charged from the shapes alone cover it: a preflight that undercounts lets a
run past that cannot finish.
"""

import tracemalloc
from types import SimpleNamespace

import numpy as np
import pytest

from skbatch import BatchedRidge, BootstrapEstimator
from skbatch._engine.preflight import bca_summary_bytes, linear_jackknife_bytes
from skbatch._ridge import RidgeSolver, cv_scheme
from skbatch._ridge.banded.bootstrap import HeldBands
from skbatch.backend import Backend
from skbatch.bootstrap import _banded_jackknife_sums, _linear_jackknife_sums
from skbatch.memory import GB
from skbatch.streaming import BCaAccumulator


def _traced_peak(fn):
    """Peak bytes ``fn()`` allocates beyond what was held when it started."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, peak - base


@pytest.mark.parametrize("shape", [(600, 80), (80, 600)])
@pytest.mark.parametrize("cv", [None, 3])
@pytest.mark.parametrize("graded", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_solver_charges_its_decomposition_workspace(shape, cv, graded, dtype):
    # LAPACK's copy of X and workspace, a fold's copies of its rows, and for
    # float32 on the CPU the float64 SVD (skbatch._kernels.linalg.svd_decompose): the
    # solver's charge must cover those transients, which X, its centred copy
    # and the SVD alone (the held figure) miss.
    n, p = shape
    itemsize = np.dtype(dtype).itemsize
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, p)).astype(dtype)
    if graded:
        # Column norms 1e3 apart: the graded path, with its residual check.
        X[:, 0] *= 1e3
    scheme = cv_scheme(cv).split(X, X[:, :1])
    backend = Backend("numpy")
    _, peak = _traced_peak(
        lambda: RidgeSolver(
            X,
            None,
            np.array([1.0]),
            scheme,
            backend,
            dtype,
            fit_intercept=True,
            scoring=None,
        )
    )
    charged = RidgeSolver.nbytes(n, p, scheme, itemsize, backend=backend)
    rank = min(n, p)
    held = itemsize * (2 * n * p + (n + p) * rank) + scheme.nbytes(p, itemsize)
    if cv is None and dtype == np.float32:
        # One SVD, nothing side by side: the float64 copy of X and the float64
        # U and Vt are numpy arrays, traced (numpy's LAPACK copy and workspace
        # are allocated outside Python's tracked allocator, so a float64
        # solver's transient is charged from LAPACK's sizes, not traced).
        assert peak > 2 * held, "the transient this test guards is gone"
    assert charged >= peak
    # The default (no backend) charges as the CPU does, every SVD at once.
    assert RidgeSolver.nbytes(n, p, scheme, itemsize) >= charged


def test_gpu_solvers_charge_no_lapack_workspace():
    # A GPU decomposes float32 in float32, with its library's allocator:
    # only is_gpu is read.
    gpu = SimpleNamespace(is_gpu=True)
    for itemsize in (4, 8):
        assert RidgeSolver.svd_workspace(600, 80, itemsize, backend=gpu) == 0


# The BCa interval's second pass -----------------------------------------------


def _jackknife_data(n, p, t, dtype, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p)).astype(dtype)
    Y = (X @ rng.standard_normal((p, t)) + rng.standard_normal((n, t))).astype(dtype)
    return X, Y


@pytest.mark.parametrize(
    "n, p, t, fit_intercept, n_groups, dtype",
    [
        (400, 10, 300, True, None, np.float64),
        (400, 10, 300, False, None, np.float64),
        (400, 50, 3, True, None, np.float64),
        (400, 10, 300, True, None, np.float32),
        # Runs of unequal length, left out one at a time.
        (300, 10, 200, True, [50, 100, 150], np.float64),
    ],
)
def test_linear_jackknife_charge_covers_its_peak(
    n, p, t, fit_intercept, n_groups, dtype
):
    X, Y = _jackknife_data(n, p, t, dtype)
    units, largest = None, None
    if n_groups is not None:
        units = np.repeat(np.arange(len(n_groups)), n_groups)
        largest = max(n_groups)
    shapes = {"coef_": (t, p), "intercept_": (t,)}
    sums, peak = _traced_peak(
        lambda: _linear_jackknife_sums(X, Y, 1.0, fit_intercept, None, units, shapes)
    )
    assert sums is not None, "the closed form refused; this test measures it"
    copies = 0 if dtype == np.float64 else X.size + Y.size
    charged = linear_jackknife_bytes(n, p, t, largest_group=largest, copies=copies)
    assert peak <= charged <= 3 * peak


def test_banded_jackknife_charge_covers_its_peak():
    n, t = 400, 200
    X, Y = _jackknife_data(n, 8, t, np.float64)
    columns = [np.arange(0, 8, 2), np.arange(1, 8, 2)]
    weights = np.array([[0.5, 0.5], [1.0, 0.0], [0.2, 0.8]])[np.arange(t) % 3]
    held = HeldBands(columns, weights, np.linspace(0.5, 3.0, t))
    shapes = {"coef_": (t, 8), "intercept_": (t,)}
    sums, peak = _traced_peak(
        lambda: _banded_jackknife_sums(X, Y, held, None, None, shapes)
    )
    assert sums is not None
    assert peak <= linear_jackknife_bytes(n, 8, t, banded=True)


@pytest.mark.parametrize("n_bootstrap", [20, 300, 3000])
def test_bca_summary_charge_covers_both_passes_and_the_interval(n_bootstrap):
    # The second pass's windows (skbatch.streaming.OrderStatistics) outgrow
    # the first pass's summary for few replicates, and the interval's sorted
    # copies of them for many: the charge is the peak of all stages.
    size = 500
    replicates = np.random.default_rng(1).gamma(2.0, size=(n_bootstrap, size))
    estimate = np.full(size, 2.0)

    def both_passes():
        first = BCaAccumulator((size,), n_bootstrap, 0.95, estimate)
        for block in np.array_split(replicates, max(1, n_bootstrap // 8)):
            first.update(block)
        second = first.second_pass(np.full(size, 0.05))
        for block in np.array_split(replicates, max(1, n_bootstrap // 8)):
            second.update(block)
        return first.interval(second)

    (lower, upper), peak = _traced_peak(both_passes)
    # NaN where every replicate fell on one side of the estimate.
    defined = np.isfinite(lower) & np.isfinite(upper)
    assert defined.any() and np.all(lower[defined] < upper[defined])
    first_pass = BCaAccumulator.nbytes_needed((size,), n_bootstrap, 0.95)
    charged = bca_summary_bytes(
        (size,), n_bootstrap, 0.95, keep_samples=False, copy_samples=False
    )
    # Blocks of 8 replicates: their temporaries are a small part of the peak.
    assert peak <= charged <= 2 * peak
    if n_bootstrap != 300:
        assert peak > first_pass, "the stage this test guards fits the first pass"


def test_bca_kept_samples_charge_their_sorted_copy():
    size, n_bootstrap = 500, 400
    replicates = np.random.default_rng(2).gamma(2.0, size=(n_bootstrap, size))

    def kept():
        acc = BCaAccumulator(
            (size,), n_bootstrap, 0.95, np.full(size, 2.0), keep_samples=True
        )
        for block in np.array_split(replicates, n_bootstrap // 8):
            acc.update(block)
        acc.second_pass(np.zeros(size))
        return acc.interval(overwrite_samples=False)

    _, peak = _traced_peak(kept)
    charged = bca_summary_bytes(
        (size,), n_bootstrap, 0.95, keep_samples=True, copy_samples=True
    )
    assert peak > BCaAccumulator.nbytes_needed(
        (size,), n_bootstrap, 0.95, keep_samples=True
    )
    assert peak <= charged


@pytest.mark.parametrize("keep_samples", [False, True], ids=["two_passes", "kept"])
@pytest.mark.parametrize("size, batch", [(5, 1), (5, 64), (50, 8), (500, 64)])
def test_bca_charge_covers_the_updates_of_any_batch(keep_samples, size, batch):
    # Batches of 64 held their comparisons' flags and deviations, 660 bytes
    # per element with kept samples, past the charge; tiny shapes missed
    # the passes' fixed overhead (11.7 KB at 5 elements).
    n_bootstrap = 300
    replicates = np.random.default_rng(4).gamma(2.0, size=(n_bootstrap, size))
    blocks = [replicates[i : i + batch].copy() for i in range(0, n_bootstrap, batch)]
    estimate = np.full(size, 2.0)

    def both_passes():
        first = BCaAccumulator(
            (size,), n_bootstrap, 0.95, estimate, keep_samples=keep_samples
        )
        for block in blocks:
            first.update(block)
        second = first.second_pass(np.full(size, 0.05))
        if second is not None:
            for block in blocks:
                second.update(block)
        return first.interval(second, overwrite_samples=keep_samples)

    (lower, upper), peak = _traced_peak(both_passes)
    # The counts are those of the whole batch at once.
    reference = BCaAccumulator((size,), n_bootstrap, 0.95, estimate)
    reference.update(replicates)
    first = BCaAccumulator((size,), n_bootstrap, 0.95, estimate)
    for block in blocks:
        first.update(block)
    np.testing.assert_array_equal(first.below, (replicates < estimate).sum(0))
    np.testing.assert_array_equal(first.ties, reference.ties)
    np.testing.assert_allclose(first.std, replicates.std(axis=0, ddof=1), rtol=1e-12)
    charged = bca_summary_bytes(
        (size,), n_bootstrap, 0.95, keep_samples=keep_samples, copy_samples=False
    )
    assert peak <= charged


def _many_targets(n=1000, p=5, t=1000):
    return _jackknife_data(n, p, t, np.float64, seed=3)


# Runs of unequal length, left out one at a time by the jackknife.
RUNS = np.repeat([0, 1], [900, 100])


@pytest.mark.parametrize(
    "groups, n_bootstrap",
    # Traced, the BCa fits of these peak at 47 and 55 MB, above the 45 MB
    # budget that holds the percentile fits (25 and 16 MB).
    [(None, 460), (RUNS, 400)],
)
def test_bca_jackknife_refused_before_any_replicate(monkeypatch, groups, n_bootstrap):
    X, Y = _many_targets()
    budget_gb = 0.045
    estimator = BatchedRidge(alphas=1.0)
    BootstrapEstimator(estimator, n_bootstrap=n_bootstrap, max_memory_gb=budget_gb).fit(
        X, Y, groups=groups
    )
    calls = []
    monkeypatch.setattr(
        "skbatch.bootstrap.run_problem", lambda *a, **k: calls.append(a)
    )
    boot = BootstrapEstimator(
        estimator,
        n_bootstrap=n_bootstrap,
        ci_method="bca",
        max_memory_gb=budget_gb,
    )
    with pytest.raises(ValueError, match=f"max_memory_gb={budget_gb}") as info:
        boot.fit(X, Y, groups=groups)
    message = str(info.value)
    assert "BCa jackknife" in message and "ci_method='percentile'" in message
    # Refused by the preflight: no replicate, not even the fit on all data.
    assert not calls
    assert not hasattr(boot, "estimator_")


def test_bca_runs_within_a_budget_that_holds_its_jackknife():
    X, Y = _many_targets()
    budget_gb = 0.075
    boot = BootstrapEstimator(
        BatchedRidge(alphas=1.0),
        n_bootstrap=400,
        ci_method="bca",
        max_memory_gb=budget_gb,
    )
    boot, peak = _traced_peak(lambda: boot.fit(X, Y, groups=RUNS))
    assert peak <= budget_gb * GB
    coef = boot.results_["coef_"]
    assert coef.ci_lower.shape == (1000, 5)
    assert np.isfinite(coef.standard_error).all()


# The banded search on shared factors ------------------------------------------


@pytest.mark.parametrize("cv", [None, "gcv", 4])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_banded_search_charge_covers_its_shared_factors_and_candidates(
    cv, dtype, monkeypatch
):
    # On shared factors a candidate holds the SVD of the small R, not a copy
    # of X: the charge covers the traced peak of the factorisations and is
    # below the charge of decomposing every candidate's rescaled X.
    from skbatch._backends.side_by_side import map_threads
    from skbatch._ridge import banded

    n, p = 400, 60
    itemsize = np.dtype(dtype).itemsize
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, p)).astype(dtype)
    candidates = banded._floored(
        np.array([[0.5, 0.5], [0.9, 0.1], [1e-4, 1 - 1e-4], [1.0, 0.0], [0.3, 0.7]])
    )
    design = banded.BandedDesign(X, [np.arange(10), np.arange(10, p)], candidates)
    scheme = cv_scheme(cv).split(X, X[:, :1])
    backend = Backend("numpy")
    charged = {}
    check = banded.factors.check_held_memory

    def spy(name, device, host, *args, **kwargs):
        charged["device"] = device
        return check(name, device, host, *args, **kwargs)

    monkeypatch.setattr(banded.factors, "check_held_memory", spy)
    banded.check_search_memory(
        design,
        n,
        scheme,
        dtype,
        backend,
        None,
        n_targets=1,
        n_alphas=5,
        store_cv_results=False,
    )

    def build():
        factors = banded.SharedFactors(
            X, None, scheme, backend, dtype, fit_intercept=True
        )
        return factors, map_threads(
            lambda c: RidgeSolver(
                design.design(c, shape_only=True),
                None,
                np.logspace(-1, 3, 5),
                scheme,
                backend,
                dtype,
                fit_intercept=True,
                scoring=None,
                basis=factors.basis(design.kept[c], design.scales[c]),
            ),
            range(len(candidates)),
            backend,
        )

    (factors, solvers), peak = _traced_peak(build)
    assert charged["device"] >= peak
    widths = [design.n_columns(c) for c in range(len(candidates))]
    separate = RidgeSolver.nbytes_side_by_side(
        n, widths, scheme, itemsize, backend=backend
    )
    assert charged["device"] < separate
    # What the engine plans batches beside: the solvers hold no X.
    held = sum(s.fixed_bytes for s in solvers)
    assert held < sum(RidgeSolver.nbytes(n, k, scheme, itemsize) for k in widths)
    # LOO reads U on every batch; GCV only to form float32 residuals (once
    # per candidate, not per batch); K-fold scores from the folds and refits
    # from Q'Y: no U on all rows.
    forms_U = cv is None or (cv == "gcv" and itemsize == 4)
    assert all((s.U is not None) == forms_U for s in solvers)


@pytest.mark.parametrize("cv", [None, "gcv", 3])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_banded_permutation_charge_is_what_its_folds_hold(cv, dtype):
    # The permutation fast path's preflight charges, from the shapes, what
    # the problem then holds: each outer fold's shared factors and every
    # candidate's decompositions on them. Where the candidates form no U on
    # all rows (K-fold, GCV in float64) that is well below the old charge of
    # n_candidates + 1 full SVDs per fold.
    from skbatch import BandedRidge
    from skbatch._ridge.banded import (
        BandedPermutedProblem,
        SharedFactors,
        banded_spec,
    )
    from skbatch._ridge.problems import PermutedRidgeProblem

    rng = np.random.default_rng(0)
    n, p, t = 240, 30, 3
    X = rng.standard_normal((n, p))
    Y = rng.standard_normal((n, t))
    labels = np.repeat([0, 1], [10, 20])
    estimator = BandedRidge(
        labels,
        alphas=np.logspace(-1, 3, 4),
        band_weights=np.array([[0.5, 0.5], [1.0, 0.0], [0.2, 0.8], [0.7, 0.3]]),
        cv=cv,
    )
    spec = banded_spec(estimator)
    rows = np.arange(n)
    splits = [(rows[rows % 4 != k], rows[rows % 4 == k]) for k in range(4)]
    schemes = [cv_scheme(cv).split(X[train], Y[train]) for train, _ in splits]
    itemsize = np.dtype(dtype).itemsize
    held, _ = BandedPermutedProblem.held_bytes(X, splits, spec, schemes, itemsize)
    problem = BandedPermutedProblem(
        X,
        Y,
        splits,
        spec,
        lambda X_train, Y_train, train: cv_scheme(cv).split(X_train, Y_train),
        Backend("numpy"),
        dtype,
        None,
        n_permutations=5,
        permutation=dict(entropy=0, groups=None, permutation_type="rows"),
    )
    holds = problem.fixed_bytes - itemsize * Y.size
    assert holds <= held <= 1.25 * holds
    if not SharedFactors.holds_basis(schemes[0], itemsize):
        copies = 4 + 1
        old, _ = PermutedRidgeProblem.held_bytes(
            X, splits * copies, spec, schemes * copies, itemsize
        )
        assert held < 0.8 * old
