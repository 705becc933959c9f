"""The preflight's charge covers the temporaries that an update of a batch
makes: tracemalloc's peak of ``update()`` against the per-item bytes charged
times the batch size plus the fixed part.

- ``PermutationCounter.update``: the permutation fast path's host bytes per
  permutation (``PermutedRidgeProblem.item_bytes``, which the banded fast
  path shares) beside the counter's own ``nbytes_needed``.
"""

import tracemalloc

import numpy as np
import pytest

from skbatch._ridge.banded import BandedPermutedProblem
from skbatch._ridge.problems import PermutedRidgeProblem
from skbatch.streaming import PermutationCounter

# Python objects an update makes whatever the sizes (index tuples, the
# dictionaries of sides, numpy's scalars): tracemalloc measures about 4 kB.
PYTHON_OBJECTS = 16e3
N_SAMPLES = 50


def _ar1_runs(n_rows, n_columns, rng, lengths=(7, 3, 11, 5)):
    """AR(1) rows (coefficient 0.8) restarting at each run of ``lengths``,
    repeated to ``n_rows``: scores as autocorrelated as successive batches."""
    out = np.empty((n_rows, n_columns))
    starts = set(np.cumsum(np.resize(lengths, n_rows)) % max(n_rows, 1))
    previous = np.zeros(n_columns)
    for i in range(n_rows):
        noise = rng.normal(size=n_columns)
        previous = noise if i in starts or i == 0 else 0.8 * previous + noise
        out[i] = previous
    return out


def _update_peak(reducer, batch):
    """tracemalloc's peak of ``reducer.update(batch)`` beyond what was held."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        held = tracemalloc.get_traced_memory()[0]
        reducer.update(batch)
        return tracemalloc.get_traced_memory()[1] - held
    finally:
        tracemalloc.stop()


def _counter_charge(n_targets, batch, alternative, dtype):
    """What the fast path charges for a counter's update of ``batch``
    permutations: per permutation its host bytes less those of the indices
    and the scores (held before the update), plus the counter's own bytes."""
    _, host = PermutedRidgeProblem.item_bytes(
        N_SAMPLES, n_targets, 5, 3, np.dtype(dtype)
    )
    per_item = host - 8 * N_SAMPLES - 8 * n_targets
    fixed = PermutationCounter.nbytes_needed(n_targets, 1000, alternative=alternative)
    return batch * per_item, fixed


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
@pytest.mark.parametrize("undefined", [False, True])
@pytest.mark.parametrize("n_targets", [10, 1000, 20_000])
@pytest.mark.parametrize("batch", [1, 8, 64])
def test_counter_update_within_charge(alternative, undefined, n_targets, batch):
    rng = np.random.default_rng(n_targets + batch)
    observed = rng.normal(size=n_targets)
    if undefined:
        observed[::7] = np.nan
    counter = PermutationCounter(observed, n_total=1000, alternative=alternative)
    scores = _ar1_runs(batch, n_targets, rng)
    counter.update(scores)
    peak = _update_peak(counter, scores)
    per_batch, fixed = _counter_charge(n_targets, batch, alternative, np.float64)
    assert peak <= per_batch + fixed + PYTHON_OBJECTS, (peak, per_batch, fixed)
    # Against a naive reference: the counts are those of a loop.
    if not undefined and alternative == "greater":
        expected = sum((row >= observed).astype(int) for row in scores) * 2
        np.testing.assert_array_equal(counter.counts, expected)


@pytest.mark.parametrize("n_targets", [20_000, 100_000])
def test_counter_charge_is_tight(n_targets):
    # Large sizes: the charge stays within 1.5 times the measured peak.
    rng = np.random.default_rng(1)
    batch = 64 if n_targets == 20_000 else 32
    counter = PermutationCounter(rng.normal(size=n_targets), n_total=1000)
    scores = rng.normal(size=(batch, n_targets))
    peak = _update_peak(counter, scores)
    per_batch, fixed = _counter_charge(n_targets, batch, "greater", np.float64)
    assert peak <= per_batch + fixed <= 1.5 * peak


@pytest.mark.parametrize("n_targets", [10, 5000])
def test_counter_update_of_float32_scores_within_charge(n_targets):
    # Float32 scores (a float32 fast path) are copied to float64 first.
    rng = np.random.default_rng(2)
    counter = PermutationCounter(rng.normal(size=n_targets), n_total=1000)
    scores = rng.normal(size=(64, n_targets)).astype(np.float32)
    peak = _update_peak(counter, scores)
    per_batch, fixed = _counter_charge(n_targets, 64, "greater", np.float32)
    assert peak <= per_batch + fixed + PYTHON_OBJECTS


def test_banded_fast_path_shares_the_charge():
    # The banded permuted problem states its host bytes through the same
    # item_bytes (its check_memory and _plan_items are inherited).
    assert BandedPermutedProblem.item_bytes is PermutedRidgeProblem.item_bytes
    _, host = BandedPermutedProblem.item_bytes(N_SAMPLES, 1000, 5, 3, np.float64)
    assert host >= 8 * N_SAMPLES + 8 * 1000 * (1 + 2.1)
