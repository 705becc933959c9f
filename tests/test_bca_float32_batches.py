"""BCaAccumulator reads float32 batches as they are: the same state as their
float64 copies, bit for bit, without making those copies."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal
from test_streaming_bytes import ar1_runs, traced_peak

from skbatch.streaming import BCaAccumulator
from skbatch.streaming._common import UFUNC_BUFFER_BYTES


def _accumulator(size, n_total, keep_samples, alternative="two-sided"):
    # Zero estimate, ties included: the AR(1) rows straddle it.
    return BCaAccumulator(
        size,
        n_total,
        0.9,
        np.zeros(size),
        keep_samples=keep_samples,
        alternative=alternative,
    )


def _feed(accumulator, rows, batch):
    for start in range(0, len(rows), batch):
        accumulator.update(rows[start : start + batch])
    return accumulator


@pytest.mark.parametrize("keep_samples", [True, False])
@pytest.mark.parametrize("alternative", ["two-sided", "less"])
@pytest.mark.parametrize(("size", "n_total", "batch"), [(7, 300, 64), (1, 100, 9)])
def test_float32_batches_give_the_state_of_their_float64_copies(
    size, n_total, batch, keep_samples, alternative
):
    rows = ar1_runs(n_total, size, seed=size).astype(np.float32)
    rows[::17, 0] = 0.0  # exact ties with the estimate
    rows[5, -1] = np.nan
    single = _feed(_accumulator(size, n_total, keep_samples, alternative), rows, batch)
    double = _feed(
        _accumulator(size, n_total, keep_samples, alternative),
        rows.astype(np.float64),
        batch,
    )
    for name in ("mean", "std", "below", "ties", "_nan"):
        assert_array_equal(getattr(single, name), getattr(double, name), err_msg=name)
    if keep_samples:
        assert single.samples.dtype == np.float64
        assert_array_equal(single.samples, double.samples)
    else:
        # The filled rows: the rest of each buffer is uninitialised.
        assert single._n_summary == double._n_summary > 0
        filled = slice(0, single._n_summary)
        assert_array_equal(single._summary[filled], double._summary[filled])
        pending = slice(0, single._n_pending)
        assert_array_equal(single._pending[pending], double._pending[pending])


@pytest.mark.parametrize("keep_samples", [True, False])
@pytest.mark.parametrize(("size", "n_total"), [(500, 400), (1000, 300)])
@pytest.mark.parametrize("batch", [8, 64, 256])
def test_a_float32_batch_costs_no_float64_copy(size, n_total, batch, keep_samples):
    # The batches exist before tracing: they are the caller's results.
    rows = ar1_runs(n_total, size, seed=size + batch)
    peaks = {}
    for dtype in (np.float32, np.float64):
        batches = [
            rows[start : start + batch].astype(dtype)
            for start in range(0, n_total, batch)
        ]

        def run(batches=batches):
            accumulator = _accumulator(size, n_total, keep_samples)
            for block in batches:
                accumulator.update(block)

        peaks[dtype] = traced_peak(run)[1]
    # Casting float32 to float64 inside the ufuncs takes numpy's buffers at
    # most; a float64 copy of the batch was batch * size * 8 bytes more
    # (1.02 MB at 256 replicates of 500 elements).
    assert peaks[np.float32] <= peaks[np.float64] + UFUNC_BUFFER_BYTES, peaks
