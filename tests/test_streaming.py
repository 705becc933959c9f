import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import permutation_test_score

from skbatch import streaming
from skbatch.streaming import BootstrapAccumulator, PermutationCounter

# The bounds follow np.percentile's own arithmetic, so only rounding may differ.
TOL = {"rtol": 1e-12, "atol": 1e-12}


def reference_interval(samples, confidence_level):
    c = confidence_level
    return np.percentile(samples, [100 * (1 - c) / 2, 100 * (1 + c) / 2], axis=0)


# A fold orders its rows by sorting them or, past SORT_MAX_ROWS, by two
# partitions; both must give numpy's bounds.
SELECTIONS = {"sort": 10**9, "partition": 0}


def split_points(rng, n, n_chunks):
    return np.sort(
        rng.choice(np.arange(1, n), size=min(n_chunks, n) - 1, replace=False)
    )


@pytest.mark.parametrize("selection", SELECTIONS)
@pytest.mark.parametrize("n_total", [2, 37, 40, 201, 1000])
@pytest.mark.parametrize("confidence_level", [0.8, 0.95, 0.99])
def test_interval_and_moments_match_numpy(
    monkeypatch, n_total, confidence_level, selection
):
    monkeypatch.setattr(streaming.bootstrap, "SORT_MAX_ROWS", SELECTIONS[selection])
    rng = np.random.default_rng(n_total)
    samples = rng.normal(loc=3.0, size=(n_total, 4, 3))
    samples[rng.random(n_total) < 0.3, 0, 0] = np.nan
    samples[-1, 1, 2] = np.nan
    acc = BootstrapAccumulator((4, 3), n_total, confidence_level)
    # Uneven batches cross the fold boundary at different offsets.
    for batch in np.split(samples, split_points(rng, n_total, 7)):
        acc.update(batch)

    lower, upper = acc.interval()
    expected_lower, expected_upper = reference_interval(samples, confidence_level)
    assert_allclose(lower, expected_lower, **TOL)
    assert_allclose(upper, expected_upper, **TOL)
    assert np.isnan(lower[1, 2])
    assert np.isnan(upper[1, 2])
    assert_allclose(acc.mean, samples.mean(axis=0), rtol=1e-12)
    assert_allclose(acc.std, samples.std(axis=0, ddof=1), rtol=1e-12)
    assert_allclose(acc.variance, samples.var(axis=0, ddof=1), rtol=1e-12)


@pytest.mark.parametrize("selection", SELECTIONS)
def test_float32_replicates_give_the_statistics_of_their_float64_values(
    monkeypatch, selection
):
    # The tails keep float32 replicates as they are; every float32 is a
    # float64, so the bounds are np.percentile's of the same values.
    monkeypatch.setattr(streaming.bootstrap, "SORT_MAX_ROWS", SELECTIONS[selection])
    rng = np.random.default_rng(7)
    samples = rng.normal(loc=1e4, size=(500, 30)).astype(np.float32)
    acc = BootstrapAccumulator(30, 500)
    for batch in np.split(samples, [13, 200, 333]):
        acc.update(batch)
    exact = samples.astype(np.float64)
    lower, upper = acc.interval()
    assert lower.dtype == upper.dtype == np.float64
    assert_allclose(np.stack([lower, upper]), reference_interval(exact, 0.95), **TOL)
    # Moments in float64 too: a float32 mean of values near 1e4 would be off
    # by about 1e-4 relative to their spread.
    assert_allclose(acc.mean, exact.mean(axis=0), rtol=1e-14)
    assert_allclose(acc.std, exact.std(axis=0, ddof=1), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_moments_of_wide_replicates_match_numpy(dtype):
    # Replicates of 70,000 elements take their squared deviations one row at
    # a time (DEVIATION_SLICE_BYTES), narrow ones a slice of rows at a time.
    rng = np.random.default_rng(11)
    samples = rng.normal(loc=1e3, size=(90, 70_000)).astype(dtype)
    acc = BootstrapAccumulator(70_000, 90)
    for batch in np.split(samples, [1, 40, 77]):
        acc.update(batch)
    exact = samples.astype(np.float64)
    assert_allclose(acc.mean, exact.mean(axis=0), rtol=1e-13)
    assert_allclose(acc.variance, exact.var(axis=0, ddof=1), rtol=1e-11)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(7, 5), (3,), ()])
def test_last_update_and_interval_in_threads_give_the_same_values(
    monkeypatch, shape, dtype
):
    # The update that completes the replicates and the interval split the
    # elements between threads: the same arithmetic per element, so the same
    # values to the last bit as one thread gives.
    rng = np.random.default_rng(5)
    n_total = 150
    samples = rng.normal(size=(n_total, *shape)).astype(dtype)
    if shape:
        samples[(120, *[0] * len(shape))] = np.nan
    calls = []
    map_threads = streaming._common.map_threads

    def recording_map_threads(fn, items, backend):
        calls.append(len(items))
        return map_threads(fn, items, backend)

    monkeypatch.setattr(streaming._common, "map_threads", recording_map_threads)
    monkeypatch.setattr(streaming._common, "cpu_workers", lambda backend: 3)

    def fitted(min_elements):
        monkeypatch.setattr(streaming._common, "PARALLEL_MIN_ELEMENTS", min_elements)
        acc = BootstrapAccumulator(shape, n_total)
        # The last update crosses a fold (every 64 replicates here).
        for batch in np.split(samples, [40, 100]):
            acc.update(batch)
        return acc, acc.interval()

    one, one_interval = fitted(10**12)
    assert calls == []
    split, split_interval = fitted(1)
    # Both pieces of the last update, then the interval.
    assert calls == ([min(3, shape[0])] * 3 if shape else [])
    assert_array_equal(split_interval, one_interval)
    assert_array_equal(split.mean, one.mean)
    assert_array_equal(split.std, one.std)
    exact = samples.astype(np.float64)
    assert_allclose(split_interval, reference_interval(exact, 0.95), **TOL)
    assert_allclose(split.std, exact.std(axis=0, ddof=1), rtol=1e-12)


def test_float32_replicates_keep_their_tails_in_half_the_memory():
    def peak(dtype):
        block = np.ones((64, 100_000), dtype)
        return traced_peak(lambda: BootstrapAccumulator(100_000, 1000).update(block))

    assert peak(np.float32) < 0.6 * peak(np.float64)


@pytest.mark.parametrize("merged", [False, True], ids=["one", "merged"])
@pytest.mark.parametrize("first", ["float32", "float64"])
def test_float32_and_float64_replicates_mix(first, merged):
    # float64 replicates that float32 would round must keep every digit,
    # whichever type came first, in one accumulator or across a merge.
    rng = np.random.default_rng(3)
    wide = rng.normal(size=(150, 20))
    narrow = rng.normal(size=(150, 20)).astype(np.float32)
    parts = [narrow, wide] if first == "float32" else [wide, narrow]
    accs = [BootstrapAccumulator(20, 300) for _ in range(2 if merged else 1)]
    for i, part in enumerate(parts):
        for batch in np.split(part, [70]):
            accs[i % len(accs)].update(batch, ids=None)
    acc = accs[0].merge(accs[1]) if merged else accs[0]
    exact = np.concatenate([part.astype(np.float64) for part in parts])
    assert_allclose(acc.interval(), reference_interval(exact, 0.95), **TOL)
    assert_allclose(acc.std, exact.std(axis=0, ddof=1), rtol=1e-12)


# numpy's reference warns about inf - inf just as the accumulator does.
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize(("n_total", "confidence_level"), [(5, 0.5), (41, 0.95)])
def test_interval_keeps_neighbour_of_integer_position(n_total, confidence_level):
    # Here the bounds fall exactly on order statistics; numpy still reads the
    # next one, which turns the bound into NaN when that neighbour is infinite.
    samples = np.tile(np.arange(n_total, dtype=float)[:, None], (1, 3))
    samples[2, 0] = np.inf
    samples[-3, 1] = -np.inf
    acc = BootstrapAccumulator(3, n_total, confidence_level).update(samples)

    expected_lower, expected_upper = reference_interval(samples, confidence_level)
    lower, upper = acc.interval()
    assert_array_equal(lower, expected_lower)
    assert_array_equal(upper, expected_upper)


def test_basic_interval_reflects_percentile_interval():
    rng = np.random.default_rng(0)
    samples = rng.normal(size=(300, 5))
    estimate = rng.normal(size=5)
    acc = BootstrapAccumulator(5, 300, 0.9).update(samples)

    lower, upper = acc.interval("basic", estimate=estimate)
    pct_lower, pct_upper = reference_interval(samples, 0.9)
    assert_allclose(lower, 2 * estimate - pct_upper, **TOL)
    assert_allclose(upper, 2 * estimate - pct_lower, **TOL)


@st.composite
def split_replicates(draw):
    n_total = draw(st.integers(2, 300))
    confidence_level = draw(st.floats(0.05, 0.995))
    seed = draw(st.integers(0, 2**32 - 1))
    n_parts = draw(st.integers(1, 6))
    with_ties = draw(st.booleans())
    with_nan = draw(st.booleans())
    return n_total, confidence_level, seed, n_parts, with_ties, with_nan


@pytest.mark.parametrize("selection", SELECTIONS)
@settings(deadline=None, max_examples=50)
@given(split_replicates())
def test_merge_in_any_order_equals_single_pass(selection, case):
    n_total, confidence_level, seed, n_parts, with_ties, with_nan = case
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(streaming.bootstrap, "SORT_MAX_ROWS", SELECTIONS[selection])
        check_merge_in_any_order(
            n_total, confidence_level, seed, n_parts, with_ties, with_nan
        )


def check_merge_in_any_order(
    n_total, confidence_level, seed, n_parts, with_ties, with_nan
):
    rng = np.random.default_rng(seed)
    samples = rng.normal(loc=2.0, size=(n_total, 3))
    if with_ties:
        samples = np.round(samples)
    if with_nan:
        samples[rng.integers(n_total), 2] = np.nan
    order = rng.permutation(n_total)
    partials = []
    for part in np.split(order, split_points(rng, n_total, n_parts)):
        acc = BootstrapAccumulator(3, n_total, confidence_level)
        for batch in np.array_split(part, rng.integers(1, 4)):
            acc.update(samples[batch])
        partials.append(acc)
    while len(partials) > 1:
        i, j = rng.choice(len(partials), size=2, replace=False)
        partials[i].merge(partials[j])
        del partials[j]
    (acc,) = partials

    lower, upper = acc.interval()
    expected_lower, expected_upper = reference_interval(samples, confidence_level)
    assert acc.n_seen == n_total
    assert_allclose(lower, expected_lower, **TOL)
    assert_allclose(upper, expected_upper, **TOL)
    assert_allclose(acc.mean, samples.mean(axis=0), rtol=1e-12)
    assert_allclose(acc.std, samples.std(axis=0, ddof=1), rtol=1e-12)


def test_keep_samples_stores_rows_at_ids():
    rng = np.random.default_rng(0)
    samples = rng.normal(size=(100, 2))
    ids = rng.permutation(100)
    first = BootstrapAccumulator(2, 100, keep_samples=True)
    second = BootstrapAccumulator(2, 100, keep_samples=True)
    first.update(samples[ids[:37]], ids=ids[:37])
    second.update(samples[ids[37:70]], ids=ids[37:70])
    second.update(samples[ids[70:]], ids=ids[70:])

    merged = second.merge(first)
    assert_array_equal(merged.samples, samples)
    assert BootstrapAccumulator(2, 100).samples is None


def test_keep_samples_without_ids_numbers_consecutively():
    samples = np.random.default_rng(0).normal(size=(10, 2))
    acc = BootstrapAccumulator(2, 10, keep_samples=True)
    acc.update(samples[:4])
    acc.update(samples[4:])
    assert_array_equal(acc.samples, samples)


def test_keep_samples_rejects_reused_ids():
    acc = BootstrapAccumulator(2, 10, keep_samples=True).update(np.ones((4, 2)))
    with pytest.raises(ValueError, match="ids"):
        acc.update(np.ones((1, 2)), ids=[3])
    other = BootstrapAccumulator(2, 10, keep_samples=True).update(np.ones((4, 2)))
    with pytest.raises(ValueError, match="ids"):
        acc.merge(other)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_total": 1}, "n_total"),
        ({"n_total": 10.0}, "n_total"),
        ({"n_total": 10, "confidence_level": 0.0}, "confidence_level"),
        ({"n_total": 10, "confidence_level": 1.0}, "confidence_level"),
        ({"n_total": 10, "confidence_level": np.nan}, "confidence_level"),
    ],
)
def test_bootstrap_rejects_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BootstrapAccumulator((3,), **kwargs)


def test_bootstrap_rejects_bad_updates():
    acc = BootstrapAccumulator((3,), 10, keep_samples=True)
    with pytest.raises(ValueError, match=r"shape.*\(4, 2\)"):
        acc.update(np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"shape.*\(3,\)"):
        acc.update(np.zeros(3))
    with pytest.raises(ValueError, match="ids"):
        acc.update(np.zeros((2, 3)), ids=[0, 10])
    with pytest.raises(ValueError, match="ids"):
        acc.update(np.zeros((2, 3)), ids=[0])
    acc.update(np.zeros((8, 3)))
    with pytest.raises(ValueError, match=r"n_total=10.*11"):
        acc.update(np.zeros((3, 3)))
    assert acc.n_seen == 8


def test_interval_rejects_incomplete_or_unknown():
    acc = BootstrapAccumulator(3, 10).update(np.zeros((9, 3)))
    with pytest.raises(ValueError, match=r"n_total=10.*9"):
        acc.interval()
    acc.update(np.zeros((1, 3)))
    with pytest.raises(ValueError, match=r"method.*'percentile', 'basic'"):
        acc.interval("bca")
    with pytest.raises(ValueError, match="estimate"):
        acc.interval("basic")


@pytest.mark.parametrize(
    ("other", "match"),
    [
        (BootstrapAccumulator(4, 10), "shape"),
        (BootstrapAccumulator(3, 11), "n_total"),
        (BootstrapAccumulator(3, 10, 0.9), "confidence_level"),
        (BootstrapAccumulator(3, 10, keep_samples=True), "keep_samples"),
        (BootstrapAccumulator(3, 10).update(np.zeros((6, 3))), "n_total"),
    ],
)
def test_merge_rejects_incompatible(other, match):
    acc = BootstrapAccumulator(3, 10).update(np.zeros((5, 3)))
    with pytest.raises(ValueError, match=match):
        acc.merge(other)
    assert acc.n_seen == 5


def traced_peak(func):
    tracemalloc.start()
    try:
        func()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def stream_replicates(n_total, size=10_000, batch_size=100):
    rng = np.random.default_rng(0)
    acc = BootstrapAccumulator(size, n_total)
    for _ in range(n_total // batch_size):
        acc.update(rng.standard_normal((batch_size, size)))
    acc.interval()


def test_peak_memory_does_not_grow_with_n_total():
    peak_small = traced_peak(lambda: stream_replicates(200))
    peak_large = traced_peak(lambda: stream_replicates(2000))
    # The peak includes the batch being folded, as in real use; keeping every
    # replicate would instead make it about ten times larger.
    assert peak_large < 0.25 * 2000 * 10_000 * 8
    # All of the growth is the longer percentile tails nbytes_needed predicts.
    needed = BootstrapAccumulator.nbytes_needed
    tail_growth = needed(10_000, 2000) - needed(10_000, 200)
    assert peak_large - peak_small <= 1.05 * tail_growth


def test_update_allocates_little_beside_the_batch():
    acc = BootstrapAccumulator(100_000, 1000)
    first, block = np.random.default_rng(0).standard_normal((2, 64, 100_000))
    acc.update(first)  # makes the buffer of the tails and pending rows
    peak = traced_peak(lambda: acc.update(block))
    # The replicates are copied into the preallocated pending rows; the
    # squared deviations from the block mean, formed whole, would add two
    # arrays the size of the block.
    assert peak < 0.25 * block.nbytes
    both = np.concatenate([first, block])
    assert_allclose(acc.std, both.std(axis=0, ddof=1), rtol=1e-12)


@pytest.mark.parametrize("keep_samples", [False, True])
# Tails of 26 rows (shorter than the pending block) and of 1001 rows.
@pytest.mark.parametrize(("shape", "n_total"), [((100, 50), 500), (500, 20_000)])
def test_nbytes_retained_is_what_the_first_update_leaves_allocated(
    shape, n_total, keep_samples
):
    nbytes = BootstrapAccumulator._nbytes_retained(
        shape, n_total, 0.9, keep_samples=keep_samples
    )
    replicate = np.ones((1, *np.atleast_1d(shape)))

    def first_update():
        acc = BootstrapAccumulator(shape, n_total, 0.9, keep_samples=keep_samples)
        return acc.update(replicate)

    tracemalloc.start()
    try:
        acc = first_update()
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert nbytes <= retained <= 1.02 * nbytes
    # A replicate's temporaries come on top, nothing the size of the tails,
    # and within what the preflight charges (tests/test_streaming_bytes.py).
    assert peak <= 1.02 * nbytes + 4 * replicate.nbytes
    assert peak <= BootstrapAccumulator.nbytes_needed(
        shape, n_total, 0.9, keep_samples=keep_samples
    )
    assert acc.n_seen == 1


def test_nbytes_retained_grows_with_tail_size_not_n_total():
    small = BootstrapAccumulator._nbytes_retained(1000, 200)
    large = BootstrapAccumulator._nbytes_retained(1000, 20_000)
    # k grows from 6 to 501 per tail, and the pending block with it; both stay
    # well under storing every replicate: 200 rows, then 20,000 (100x).
    assert small < 0.5 * 8 * 200 * 1000
    stored = 8 * 20_000 * 1000
    assert large < 0.15 * stored
    kept = BootstrapAccumulator._nbytes_retained(1000, 20_000, keep_samples=True)
    assert_allclose(kept - large, stored, rtol=1e-3)


@pytest.mark.parametrize("n_total", [1000, 20_000, 100_000])
def test_folding_work_is_linear_in_n_total(monkeypatch, n_total):
    # Each fold partitions the tail with the pending replicates. Folding a
    # fixed 64 replicates at a time would partition about n_total * k / 64
    # rows in all: 40 * n_total for B = 100,000 (k = 2501).
    partitioned = []
    select_tails = streaming.bootstrap._select_tails

    def counting_select_tails(rows, k):
        partitioned.append(len(rows))
        return select_tails(rows, k)

    monkeypatch.setattr(streaming.bootstrap, "_select_tails", counting_select_tails)
    rng = np.random.default_rng(0)
    samples = rng.standard_normal((n_total, 2))
    acc = BootstrapAccumulator(2, n_total)
    for batch in np.array_split(samples, 37):
        acc.update(batch)
    lower, upper = acc.interval()

    # Every replicate passes through a selection at least once.
    assert n_total <= sum(partitioned) <= 3 * n_total
    expected_lower, expected_upper = reference_interval(samples, 0.95)
    assert_allclose(lower, expected_lower, **TOL)
    assert_allclose(upper, expected_upper, **TOL)


def naive_counts(null, observed, tolerance=0.0):
    """Exceedances by definition; an undefined null score counts as one."""
    n_perm, n_targets = null.shape
    counts = np.zeros(n_targets, dtype=int)
    max_counts = np.zeros(n_targets, dtype=int)
    family = [t for t in range(n_targets) if not np.isnan(observed[t])]
    for i in range(n_perm):
        best = max(
            (np.inf if np.isnan(null[i, t]) else null[i, t] for t in family),
            default=-np.inf,
        )
        for t in family:
            reached = np.isnan(null[i, t]) or null[i, t] >= observed[t] - tolerance
            counts[t] += reached
            max_counts[t] += best >= observed[t] - tolerance
    return counts, max_counts


def test_permutation_counts_match_naive_loop():
    rng = np.random.default_rng(0)
    null = np.round(rng.normal(size=(250, 6)), 1)
    null[rng.random(null.shape) < 0.05] = np.nan
    observed = np.array([0.0, 0.5, 1.0, 2.0, -3.0, 0.3])
    counter = PermutationCounter(observed, 250)
    for batch in np.array_split(null, 9):
        counter.update(batch)

    counts, max_counts = naive_counts(null, observed)
    assert_array_equal(counter.counts, counts)
    assert_array_equal(counter.max_counts, max_counts)
    assert_allclose(counter.pvalue(), (counts + 1) / 251, rtol=1e-15)
    assert_allclose(counter.pvalue_fwer(), (max_counts + 1) / 251, rtol=1e-15)
    assert np.all(counter.pvalue_fwer() >= counter.pvalue())


def test_undefined_scores_never_give_small_pvalues():
    rng = np.random.default_rng(1)
    null = rng.normal(size=(99, 4))
    null[::7, 1] = np.nan
    null[:, 3] = np.nan
    observed = np.array([5.0, 5.0, np.nan, np.nan])
    counter = PermutationCounter(observed, 99).update(null)
    counts, max_counts = naive_counts(null, observed)
    assert_array_equal(counter.counts[:2], counts[:2])
    assert_array_equal(counter.max_counts[:2], max_counts[:2])
    # No null score reaches 5, but every undefined one might have.
    assert counter.pvalue()[0] == 0.01
    assert counter.pvalue()[1] == (np.isnan(null[:, 1]).sum() + 1) / 100
    # Undefined observed scores: undefined p-values, left out of the family.
    assert np.isnan(counter.pvalue()[2:]).all()
    assert np.isnan(counter.pvalue_fwer()[2:]).all()
    assert counter.pvalue_fwer()[0] == counter.pvalue()[1]


def test_scores_within_tolerance_are_ties():
    observed = np.array([0.3, -2.0])
    null = observed - np.array([[2e-16, 0.0], [1e-12, 4e-15], [0.1, 1e-15]])
    exact = PermutationCounter(observed, 3).update(null)
    assert_array_equal(exact.counts, [0, 1])
    tolerant = PermutationCounter(observed, 3, tolerance=[1e-14, 5e-15]).update(null)
    counts, max_counts = naive_counts(null, observed, tolerance=1e-14)
    assert_array_equal(tolerant.counts, [1, 3])
    assert_array_equal(tolerant.max_counts, max_counts)
    with pytest.raises(ValueError, match="tolerance"):
        PermutationCounter(observed, 3, tolerance=-1.0)
    with pytest.raises(ValueError, match="tolerance"):
        PermutationCounter(observed, 3, tolerance=[0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="tolerance"):
        PermutationCounter(observed, 3).merge(
            PermutationCounter(observed, 3, tolerance=0.1)
        )


def test_permutation_moments_match_numpy():
    null = np.random.default_rng(0).normal(loc=1.0, size=(130, 4))
    counter = PermutationCounter(np.zeros(4), 130)
    for batch in np.array_split(null, 3):
        counter.update(batch)
    assert_allclose(counter.null_mean, null.mean(axis=0), rtol=1e-12)
    assert_allclose(counter.null_std, null.std(axis=0, ddof=1), rtol=1e-12)


def test_permutation_pvalue_matches_sklearn():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] + rng.normal(size=60) > 0).astype(int)
    score, null, pvalue = permutation_test_score(
        LogisticRegression(), X, y, cv=3, n_permutations=30, random_state=0
    )
    counter = PermutationCounter(score, 30).update(null)
    assert counter.pvalue() == pytest.approx(pvalue, rel=1e-15)
    assert np.ndim(counter.pvalue()) == 0
    assert counter.counts == np.sum(null >= score)


@settings(deadline=None, max_examples=30)
@given(st.integers(1, 200), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_permutation_merge_in_any_order_equals_single_pass(n_total, n_parts, seed):
    rng = np.random.default_rng(seed)
    null = np.round(rng.normal(size=(n_total, 3)), 1)
    observed = np.array([0.0, 0.4, 1.2])
    partials = []
    for part in np.split(null, split_points(rng, n_total, n_parts)):
        partials.append(PermutationCounter(observed, n_total).update(part))
    single = PermutationCounter(observed, n_total).update(null)
    merged = partials.pop(rng.integers(len(partials)))
    for i in rng.permutation(len(partials)):
        merged.merge(partials[i])

    assert_array_equal(merged.counts, single.counts)
    assert_array_equal(merged.max_counts, single.max_counts)
    assert_allclose(merged.pvalue(), single.pvalue())
    assert_allclose(merged.null_mean, null.mean(axis=0), rtol=1e-12, atol=1e-12)
    if n_total > 1:
        assert_allclose(merged.null_std, null.std(axis=0, ddof=1), rtol=1e-12)


def test_keep_null_stores_rows_at_ids():
    rng = np.random.default_rng(0)
    null = rng.normal(size=40)
    ids = rng.permutation(40)
    first = PermutationCounter(0.5, 40, keep_null=True)
    first.update(null[ids[:15]], ids=ids[:15])
    second = PermutationCounter(0.5, 40, keep_null=True)
    second.update(null[ids[15:]], ids=ids[15:])
    assert_array_equal(second.merge(first).null, null)
    assert PermutationCounter(0.5, 40).null is None


def test_permutation_counter_validates():
    with pytest.raises(ValueError, match="n_total"):
        PermutationCounter(0.5, 0)
    with pytest.raises(ValueError, match="observed"):
        PermutationCounter(np.zeros((2, 2)), 10)
    counter = PermutationCounter(np.zeros(3), 10)
    with pytest.raises(ValueError, match=r"null_scores.*\(4, 2\)"):
        counter.update(np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"null_scores.*\(3,\)"):
        counter.update(np.zeros(3))
    counter.update(np.zeros((6, 3)))
    with pytest.raises(ValueError, match=r"n_total=10.*12"):
        counter.update(np.zeros((6, 3)))
    with pytest.raises(ValueError, match=r"n_total=10.*6"):
        counter.pvalue()
    with pytest.raises(ValueError, match="observed"):
        counter.merge(PermutationCounter(np.ones(3), 10))
    with pytest.raises(ValueError, match="keep_null"):
        counter.merge(PermutationCounter(np.zeros(3), 10, keep_null=True))


# --- BCa -----------------------------------------------------------------------


def bca_levels_reference(samples, estimate, acceleration, confidence_level):
    """scipy's _bca_interval levels, written out."""
    from scipy.special import ndtr, ndtri

    n = len(samples)
    share = ((samples < estimate).sum(axis=0) + (samples <= estimate).sum(axis=0)) / (
        2 * n
    )
    z0 = ndtri(share)
    z = ndtri((1 - confidence_level) / 2)
    return [
        ndtr(z0 + (z0 + s * z) / (1 - acceleration * (z0 + s * z))) for s in (1, -1)
    ]


def bca_reference_interval(samples, estimate, acceleration, confidence_level):
    levels = bca_levels_reference(samples, estimate, acceleration, confidence_level)
    out = []
    for level in levels:
        bound = np.empty(estimate.shape)
        for index in np.ndindex(estimate.shape):
            q = level[index]
            column = samples[(slice(None), *index)]
            bound[index] = np.quantile(column, q) if np.isfinite(q) else np.nan
        out.append(bound)
    return out


def feed(reducer, samples, rng, n_chunks=7, shuffle=False):
    order = rng.permutation(len(samples)) if shuffle else np.arange(len(samples))
    for part in np.array_split(order, n_chunks):
        reducer.update(samples[part], ids=part)
    return reducer


@pytest.mark.parametrize("keep_samples", [True, False])
@pytest.mark.parametrize("n_total, shape", [(1000, (30, 4)), (257, (9,)), (3, (2,))])
def test_bca_interval_is_scipys_at_per_element_levels(keep_samples, n_total, shape):
    rng = np.random.default_rng(n_total)
    samples = rng.gamma(1.5, size=(n_total, *shape))
    # Ties with the estimate and between replicates, in one column.
    samples[:, 0] = np.round(samples[:, 0], 1)
    estimate = np.median(samples, axis=0) * rng.uniform(0.6, 1.4, size=shape)
    estimate.flat[0] = samples.flat[0]
    acceleration = rng.uniform(-0.15, 0.15, size=shape)
    acc = feed(
        streaming.BCaAccumulator(
            shape, n_total, 0.9, estimate, keep_samples=keep_samples
        ),
        samples,
        rng,
    )
    second = acc.second_pass(acceleration)
    assert (second is None) == keep_samples
    if second is not None:
        # The same replicates, in another order and other batches.
        feed(second, samples, rng, n_chunks=5, shuffle=True)
    lower, upper = acc.interval(second)
    expected = bca_reference_interval(samples, estimate, acceleration, 0.9)
    assert_allclose(lower, expected[0], rtol=1e-12, atol=1e-12)
    assert_allclose(upper, expected[1], rtol=1e-12, atol=1e-12)
    assert_allclose(acc.std, samples.std(axis=0, ddof=1))


def test_bca_interval_merges_and_propagates_nan():
    rng = np.random.default_rng(5)
    samples = rng.lognormal(size=(600, 5))
    samples[17, 2] = np.nan
    estimate = np.exp(rng.normal(size=5) * 0.2)
    parts = [
        feed(streaming.BCaAccumulator((5,), 600, 0.95, estimate), samples[ids], rng)
        for ids in np.array_split(np.arange(600), 3)
    ]
    acc = parts[2].merge(parts[0]).merge(parts[1])
    second = acc.second_pass(np.full(5, 0.05))
    feed(second, samples, rng)
    lower, upper = acc.interval(second)
    keep = [0, 1, 3, 4]
    assert np.isnan(lower[2]) and np.isnan(upper[2])
    # Without the NaN column, the merged accumulators give the reference
    # (recomputed on the 600 replicates for the other columns).
    expected = bca_reference_interval(samples[:, keep], estimate[keep], 0.05, 0.95)
    assert_allclose(lower[keep], expected[0], rtol=1e-12)
    assert_allclose(upper[keep], expected[1], rtol=1e-12)


def test_bca_undefined_where_scipys_is():
    samples = np.arange(10.0)[:, None] + np.zeros((1, 3))
    # Every replicate above the estimate (z0 = -inf); no jackknife spread.
    acc = streaming.BCaAccumulator((3,), 10, 0.9, [-1.0, 4.5, 4.5])
    second = acc.update(samples).second_pass([0.0, np.nan, 0.0])
    lower, upper = acc.interval(second.update(samples))
    assert np.isnan([lower[0], upper[0], lower[1], upper[1]]).all()
    # z0 = 0 and a = 0: the percentile interval.
    assert_allclose([lower[2], upper[2]], np.percentile(samples[:, 2], [5, 95]))


def test_bca_acceleration_is_the_jackknife_skewness():
    rng = np.random.default_rng(6)
    theta = 1.3
    leave_one_out = theta + rng.gamma(2.0, size=(50, 4)) * 0.01
    d = leave_one_out.mean(axis=0) - leave_one_out
    expected = (d**3).sum(axis=0) / (6 * ((d**2).sum(axis=0)) ** 1.5)
    u = leave_one_out - theta
    got = streaming.bca_acceleration(
        u.sum(axis=0), (u**2).sum(axis=0), (u**3).sum(axis=0), 50
    )
    assert_allclose(got, expected, rtol=1e-10)


def test_bca_two_passes_hold_a_fraction_of_the_replicates():
    # Peak memory of both passes, far below keeping every replicate, and the
    # figure the preflight uses bounds the first pass.
    rng = np.random.default_rng(7)
    shape, n_total = (2000,), 2000
    estimate = np.zeros(shape)
    tracemalloc.start()
    try:
        acc = streaming.BCaAccumulator(shape, n_total, 0.95, estimate)
        for _ in range(0, n_total, 100):
            acc.update(rng.standard_normal((100, *shape)))
        first = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        rng = np.random.default_rng(7)
        second = acc.second_pass(np.zeros(shape))
        for _ in range(0, n_total, 100):
            second.update(rng.standard_normal((100, *shape)))
        acc.interval(second)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    samples_bytes = n_total * shape[0] * 8
    assert first <= streaming.BCaAccumulator.nbytes_needed(shape, n_total) + 4e6
    assert max(first, peak) < 0.5 * samples_bytes
