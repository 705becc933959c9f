"""The bytes the streaming reducers charge against the peak they reach.

``nbytes_needed`` is what a memory preflight charges for one accumulator
before any work: tracemalloc (numpy allocates through Python's tracked
allocator) measures the peak of the real updates and interval, which the
charge must cover, and not by much for large shapes.
"""

import tracemalloc

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import skbatch._engine  # noqa: F401  (imported before tracing: _in_parts reads it)
from skbatch.streaming import BootstrapAccumulator, PermutationCounter

METHODS = [
    ("percentile", "two-sided"),
    ("percentile", "less"),
    ("percentile", "greater"),
    ("basic", "two-sided"),
    ("basic", "less"),
    ("basic", "greater"),
]


def ar1_runs(n_rows, size, seed, phi=0.7, run_lengths=(3, 7, 12)):
    """Rows of AR(1) series restarting at each run (runs of unequal length)."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((n_rows, size))
    rows = np.empty_like(noise)
    start, i = 0, 0
    while start < n_rows:
        stop = min(n_rows, start + run_lengths[i % len(run_lengths)])
        rows[start] = noise[start]
        for r in range(start + 1, stop):
            rows[r] = phi * rows[r - 1] + noise[r]
        start, i = stop, i + 1
    return rows


def traced_peak(fn):
    """``fn()`` and the peak bytes tracemalloc saw while it ran."""
    tracemalloc.start()
    try:
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, peak


def run_accumulator(size, n_total, method, alternative, block, keep_samples=False):
    """An accumulator fed ``n_total`` replicates cycled from ``block``, in
    batches of len(block), then its interval around a zero estimate."""
    estimate = np.zeros(size)
    acc = BootstrapAccumulator(
        size,
        n_total,
        0.95,
        alternative=alternative,
        method=method,
        keep_samples=keep_samples,
    )
    for start in range(0, n_total, len(block)):
        acc.update(block[: n_total - start])
    return acc.interval(method, estimate)


def check_charge(size, n_total, dtype, method, alternative, batch, keep_samples):
    block = ar1_runs(min(batch, n_total), size, seed=size + n_total).astype(dtype)
    _, peak = traced_peak(
        lambda: run_accumulator(size, n_total, method, alternative, block, keep_samples)
    )
    charged = BootstrapAccumulator.nbytes_needed(
        size,
        n_total,
        0.95,
        keep_samples=keep_samples,
        alternative=alternative,
        method=method,
    )
    assert peak <= charged, (peak, charged)
    return peak, charged


@pytest.mark.parametrize(("method", "alternative"), METHODS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    ("size", "n_total", "batch"),
    [(1, 10, 3), (1, 5000, 200), (10, 10, 10), (100, 1000, 200), (500, 200, 8)],
)
def test_charge_covers_updates_and_interval(
    size, n_total, batch, dtype, method, alternative
):
    check_charge(size, n_total, dtype, method, alternative, batch, False)


@pytest.mark.parametrize(("method", "alternative"), METHODS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("batch", [8, 200])
def test_charge_covers_the_interval_at_2000_elements(batch, dtype, method, alternative):
    # The shape of the undercount first measured: 2.82 MB peak (the sorted
    # copy of the tails, the bounds' copies) against 1.89 MB charged.
    check_charge(2000, 1000, dtype, method, alternative, batch, False)


@pytest.mark.parametrize("alternative", ["two-sided", "less"])
@pytest.mark.parametrize(("size", "n_total"), [(1, 50), (300, 400)])
def test_charge_covers_kept_samples(size, n_total, alternative):
    check_charge(size, n_total, np.float64, "percentile", alternative, 64, True)


@pytest.mark.slow
@pytest.mark.parametrize(("method", "alternative"), METHODS[:2] + METHODS[-1:])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    ("size", "n_total", "batch"),
    [(20_000, 1000, 200), (100_000, 1000, 64), (2000, 5000, 200)],
)
def test_charge_covers_large_shapes_and_stays_tight(
    size, n_total, batch, dtype, method, alternative
):
    peak, charged = check_charge(
        size, n_total, dtype, method, alternative, batch, False
    )
    if dtype == np.float64:
        # float32 tails take half the float64 bytes charged for them.
        assert charged <= 1.5 * peak, (peak, charged)


def test_first_update_leaves_the_retained_part_allocated():
    # The charge less the temporaries is what stays between calls.
    shape, n_total = (100, 50), 500
    retained_charge = BootstrapAccumulator._nbytes_retained(
        shape, n_total, 0.9, False, "two-sided", "percentile"
    )
    replicate = np.ones((1, *shape))

    def first_update():
        return BootstrapAccumulator(shape, n_total, 0.9).update(replicate)

    tracemalloc.start()
    try:
        acc = first_update()
        retained = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert retained_charge <= retained <= 1.02 * retained_charge
    assert retained < BootstrapAccumulator.nbytes_needed(shape, n_total, 0.9)
    assert acc.n_seen == 1


@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_interval_of_float32_tails_sorted_in_place_is_np_percentile(alternative):
    # The tails are sorted where they lie and only the rows read are cast to
    # float64: the bounds are np.percentile's of the float64 replicates, and
    # a second call gives the same.
    samples = ar1_runs(300, 7, seed=4).astype(np.float32)
    acc = BootstrapAccumulator(7, 300, 0.9, alternative=alternative)
    for block in np.array_split(samples, 7):
        acc.update(block)
    lower, upper = acc.interval()
    wide = samples.astype(np.float64)
    if alternative == "two-sided":
        expected = np.percentile(wide, [5, 95], axis=0)
    else:
        expected = np.percentile(wide, [10, 90], axis=0)
        expected[0 if alternative == "less" else 1] = (
            -np.inf if alternative == "less" else np.inf
        )
    assert_allclose(lower, expected[0], rtol=1e-12)
    assert_allclose(upper, expected[1], rtol=1e-12)
    again = acc.interval()
    assert_array_equal(again[0], lower)
    assert_array_equal(again[1], upper)


def test_basic_interval_reflects_in_place_around_the_estimate():
    samples = ar1_runs(200, 5, seed=5)
    samples[3, 2] = np.nan
    estimate = np.array([0.5, -1.0, 0.0, 2.0, np.nan])
    acc = BootstrapAccumulator(5, 200, 0.9).update(samples)
    lower, upper = acc.interval("basic", estimate)
    low_q, high_q = np.percentile(samples, [5, 95], axis=0)
    assert_allclose(lower, 2 * estimate - high_q, rtol=1e-12)
    assert_allclose(upper, 2 * estimate - low_q, rtol=1e-12)
    # NaN where a replicate or the estimate is NaN, as np.percentile.
    assert np.isnan(lower[[2, 4]]).all() and np.isnan(upper[[2, 4]]).all()


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
@pytest.mark.parametrize("n_targets", [1000, 10_000])
@pytest.mark.parametrize("keep_null", [False, True])
def test_counter_charge_covers_its_peak(n_targets, alternative, keep_null):
    # One permutation per batch: the per-permutation temporaries, which
    # belong to the batch, are then as small as they get. The counter's few
    # kB of Python objects are not charged: from a thousand targets on,
    # the arrays' charge covers them.
    null = ar1_runs(99, n_targets, seed=6)
    observed = np.zeros(n_targets)

    def count():
        counter = PermutationCounter(
            observed, 99, alternative=alternative, keep_null=keep_null
        )
        for row in range(99):
            counter.update(null[row : row + 1])
        return counter.pvalue(), counter.pvalue_fwer(), counter.pvalue_fdr()

    _, peak = traced_peak(count)
    charged = PermutationCounter.nbytes_needed(
        n_targets, 99, keep_null=keep_null, alternative=alternative
    )
    assert peak <= charged, (peak, charged)


def test_counter_batch_temporaries_stay_within_three_values_per_score():
    # What an update of m permutations adds is the batch's: at most 3 m
    # float64 values per target, as nbytes_needed's docstring says.
    n_targets, m = 2000, 50
    null = ar1_runs(m, n_targets, seed=7)
    counter = PermutationCounter(np.zeros(n_targets), 2 * m, alternative="two-sided")
    counter.update(null[:1])
    _, peak = traced_peak(lambda: counter.update(null[1:]))
    assert peak <= 3 * 8 * (m - 1) * n_targets + 8 * 8 * n_targets
