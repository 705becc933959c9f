"""What a bootstrap holds, checked against its budgets before any work.

``BootstrapEstimator`` holds copies of the data, the summaries of every
bootstrapped attribute and, per batch or per worker, replicates in flight.
The functions here add those up against the budgets of :mod:`skbatch.memory`
(the full budget decides whether the run fits at all; the batching cap
bounds one batch) and give the budget left for the batches, so that the
estimator does no memory arithmetic. ``PermutationScorer``'s refits on its
generic path are checked by :func:`refit_window` too. A BCa interval's
summaries are counted at their peak (:func:`bca_summary_bytes`) and its
closed-form jackknife after the replicates by :func:`check_jackknife`.
``refuse(need, budget_gb, where, parts)`` is the estimator's error: it
raises, naming what to lower.
"""

import math
from typing import NamedTuple

import joblib
import numpy as np
from scipy import sparse

from .._backends.side_by_side import cpu_workers
from ..memory import GB, memory_budget
from ..streaming.bca import BCA_FOLD, BCA_SLICE, BCA_SPACING, BCaAccumulator

# Copies of X and y that fitting a model makes besides its input, for the
# fit on all data and, on the generic path, for each refit, whose true
# working set only the wrapped estimator knows. Measured with tracemalloc:
# LinearRegression peaks at 2-3.3 copies (validation, centring, lstsq's
# Fortran-order copies), Ridge at 1.1-2.2.
REFIT_COPIES = 4
# Copies of one replicate's result on the generic path: the task's output
# array and the block the engine regroups for the reducer
# (skbatch._engine.parallel._block_result), plus the reducer's two block-sized
# temporaries (skbatch.streaming._common._RunningMoments.update).
RESULT_COPIES = 4
# Python objects of a fit besides its arrays (estimator clones, joblib's task
# records, the engine's queues): tracemalloc measures 50-150 kB.
INTERPRETER_BYTES = 200e3
# Bytes per element and bound of the BCa second pass besides its window
# (OrderStatistics and _pivots, skbatch/streaming/bca.py): its counts below
# and inside, the pivots, window, flags, ranks and fraction, ten 8-byte
# values.
BCA_BOUND_BYTES = 80
# Values of a bound's window past its two slacks, for distinct replicates:
# the pivots' rounding to the summary's spacing, BCA_SPACING on either side
# (the window is at most 2 slack + 8: 104 for n_bootstrap=1000, measured 104).
BCA_WINDOW_PAD = 2 * BCA_SPACING
# Bytes per element of the temporaries of building the second pass (levels,
# pivots) and of reading the interval (ranks, order statistics): tracemalloc
# measures 350 at most, for n_bootstrap=20.
BCA_TEMPORARY_BYTES = 512
# Bytes of the BCa passes whatever the shape: the accumulators' Python
# objects and numpy's small buffers. tracemalloc measures up to 11.7 KB past
# the per-element figures at 5 elements (benchmarks/RESULTS.md).
BCA_OVERHEAD_BYTES = 16 * 1024
# Arrays of n_samples x (n_features + 1) float64 that the closed-form
# jackknife holds at once (skbatch._bootstrap.jackknife.linear_jackknife_sums): Z and
# the centred X it is built from, A^-1 Z', its map to the uncentred
# intercept, the gains G, their power and its signed copy.
JACKKNIFE_COLUMN_ARRAYS = 7
# Arrays of n_samples x n_targets: the targets' columns, weighted or fitted,
# the residuals and their power (tracemalloc: 3.3 of them at most).
JACKKNIFE_TARGET_ARRAYS = 4
# Arrays of (n_features + 1) x n_targets (its power sums, their copies in the
# result, a product) and of (n_features + 1)^2 (the Gram matrix, penalised,
# its Cholesky factor, the condition number's SVD).
JACKKNIFE_SMALL_ARRAYS = 6
# Arrays of the largest group's rows that a leave-one-group-out update holds:
# g x g (its system, the identity, the local products) and g x n_targets
# (the weighted residuals, their solve, the rows of the residuals).
JACKKNIFE_GROUP_ARRAYS = 3


def gb_up(nbytes):
    """``nbytes`` in GB rounded up to 3 significant digits: a budget of the
    figure shown suffices."""
    value = nbytes / GB
    if value <= 0:
        return 0.0
    step = 10.0 ** (math.floor(math.log10(value)) - 2)
    return math.ceil(value / step) * step


def refuse(owner, max_memory_gb, advice, need, budget_gb, where, parts):
    """Raise ``owner``'s error: ``need`` bytes ``where`` exceed ``budget_gb``.

    ``parts`` says what the need is made of, ``advice`` what to lower.
    """
    raise ValueError(
        f"{owner} needs {gb_up(need):.3g} GB {where} ({parts}), but the memory "
        f"budget there is {budget_gb:.3g} GB (max_memory_gb={max_memory_gb!r}). "
        f"{advice}"
    )


def _batch_gb(left_gb, capped_gb, smallest):
    """Budget of the batches: what the full budget leaves, within the batching
    cap, but never below the ``smallest`` bytes the preflight found room for."""
    return max(min(left_gb, capped_gb), smallest / GB)


class DataBytes(NamedTuple):
    """Host bytes that the data costs a fit, for the memory preflight.

    held: the validated copies of X and y (those that are not the user's own
    arrays) and the interpreter's objects, kept throughout; fit: the working
    set of fitting on all of it;
    resampled: one replicate's copy of the rows of X, y and the per-sample
    fit parameters, with its row indices.
    """

    held: float
    fit: float
    resampled: float

    @classmethod
    def of(cls, X, y, X_checked, y_checked, fit_params):
        held = _copy_nbytes(X, X_checked) + _copy_nbytes(y, y_checked)
        size = _nbytes(X_checked) + _nbytes(y_checked)
        per_sample = sum(
            _nbytes(value)
            for value in fit_params.values()
            if _rows(value) == X_checked.shape[0]
        )
        n_samples = X_checked.shape[0]
        return cls(
            held=float(held + INTERPRETER_BYTES),
            fit=float(REFIT_COPIES * size),
            resampled=float(size + per_sample + 8 * n_samples),
        )


def batched_budget(
    backend, max_memory_gb, data, summaries, fixed, per_item, host_per_item, refuse
):
    """Check that a batched run fits its budgets; the budget of its batches.

    What is held throughout (the validated data and its copies, the
    summaries of every attribute, the data on the device: ``fixed``) plus
    one replicate per batch in flight (``per_item`` on the device,
    ``host_per_item`` on the host) must fit the full budget; the transient
    fit on all data comes before the summaries exist. On a CPU backend
    device and host are one memory.

    Returns
    -------
    batch_gb : float
        Budget left for the batches in flight.
    max_items : int or None
        Most replicates the host holds at once, for a GPU backend.
    """
    budget = memory_budget(backend, max_memory_gb)
    capped = memory_budget(backend, max_memory_gb, for_batching=True)
    if backend.is_gpu:
        need = fixed + per_item
        if need > budget * GB:
            refuse(
                need,
                budget,
                f"on {backend.name}",
                f"{fixed / GB:.3g} GB of data, {per_item / GB:.3g} GB for one "
                f"replicate",
            )
        host_held = data.held + summaries
        host_need = host_held + host_per_item
        host_budget = memory_budget(None, max_memory_gb)
        if max(host_need, data.held + data.fit) > host_budget * GB:
            refuse(
                max(host_need, data.held + data.fit),
                host_budget,
                "of host memory",
                f"{summaries / GB:.3g} GB of summaries, "
                f"{data.held / GB:.3g} GB of data copies",
            )
        max_items = int((host_budget * GB - host_held) // max(host_per_item, 1))
        return _batch_gb(budget - fixed / GB, capped, per_item), max(max_items, 1)
    n_workers = cpu_workers(backend)
    held = data.held + summaries + fixed
    need = data.held + max(
        data.fit, summaries + fixed + n_workers * (per_item + host_per_item)
    )
    if need > budget * GB:
        refuse(
            need,
            budget,
            f"on {backend.name}",
            f"{summaries / GB:.3g} GB of summaries, "
            f"{(data.held + fixed) / GB:.3g} GB of data and its copies, "
            f"{n_workers} replicate(s) in flight of "
            f"{(per_item + host_per_item) / GB:.3g} GB",
        )
    in_flight = n_workers * (per_item + host_per_item)
    return _batch_gb(budget - held / GB, capped, in_flight), None


def refit_window(max_memory_gb, n_jobs, data, summaries, n_samples, size, refuse):
    """Check that refits in joblib workers fit the host budget; their window.

    Each worker holds one resampled copy of the data and its fit; a
    replicate in the window holds its counts and ``RESULT_COPIES`` copies of
    its ``size`` bootstrapped values.

    Returns
    -------
    window_gb : float
        Budget of the results in flight, for :func:`skbatch._engine.run_parallel`.
    item_bytes : float
        Host bytes of one replicate in the window.
    """
    item_bytes = 8.0 * (n_samples + RESULT_COPIES * max(size, 1))
    budget = memory_budget(None, max_memory_gb)
    n_workers = joblib.effective_n_jobs(n_jobs)
    held = data.held + summaries
    working = n_workers * (data.resampled + data.fit)
    need = data.held + max(data.fit, summaries + working + item_bytes)
    if need > budget * GB:
        refuse(
            need,
            budget,
            "of host memory",
            f"{summaries / GB:.3g} GB of summaries, "
            f"{data.held / GB:.3g} GB of data copies, {n_workers} refit(s) "
            f"in flight of {(data.resampled + data.fit) / GB:.3g} GB",
        )
    window_gb = _batch_gb(
        budget - (held + working) / GB,
        memory_budget(None, max_memory_gb, for_batching=True),
        item_bytes,
    )
    return window_gb, item_bytes


def bca_summary_bytes(
    shape, n_bootstrap, confidence_level, *, keep_samples, copy_samples, n_bounds=2
):
    """Host bytes that the BCa summaries of one attribute reach at their peak.

    Kept samples (:class:`~skbatch.streaming.BCaAccumulator`'s first pass with
    ``keep_samples``), the levels' temporaries and, with ``copy_samples``
    (samples returned in replicate order), the sorted copy the interval
    reads. Otherwise the larger of building the second pass (the first pass,
    a flag per value of its summary, temporaries) and running it: the first
    pass's moments and counts, per bound a window of at most ``2 slack +
    BCA_WINDOW_PAD`` replicates (``slack``: ``BCA_SPACING - 1`` per fold of
    ``BCA_FOLD``) and ``BCA_SLICE`` incoming ones, then the interval's
    sorted copy of both windows. The window holds for distinct replicates:
    ties at a pivot widen it, up to ``n_bootstrap``. A one-sided interval
    reads ``n_bounds=1`` bound.
    """
    size = math.prod(shape)
    first = BCaAccumulator.nbytes_needed(
        shape, n_bootstrap, confidence_level, keep_samples=keep_samples
    )
    first += BCA_OVERHEAD_BYTES
    if keep_samples:
        copy = 8.0 * n_bootstrap if copy_samples else 0.0
        return first + size * (copy + BCA_TEMPORARY_BYTES)
    summary = BCA_FOLD + n_bootstrap // BCA_SPACING
    build = first + size * (n_bootstrap // BCA_SPACING + BCA_TEMPORARY_BYTES)
    slack = (BCA_SPACING - 1) * math.ceil(n_bootstrap / BCA_FOLD)
    window = min(n_bootstrap, 2 * slack + BCA_WINDOW_PAD)
    bound = 8 * (window + BCA_SLICE) + BCA_BOUND_BYTES
    second = first - 8.0 * size * summary + n_bounds * size * bound
    read = second + size * (n_bounds * 8 * window + BCA_TEMPORARY_BYTES)
    return float(max(build, read))


def linear_jackknife_bytes(
    n_samples, n_features, n_targets, *, largest_group=None, copies=0, banded=False
):
    """Host bytes of the closed-form jackknife of ridge at fixed alphas.

    The arrays :func:`skbatch._bootstrap.jackknife.linear_jackknife_sums` holds at once
    (``JACKKNIFE_*_ARRAYS``, the ones column counted), or with groups those
    of the largest group's update if more; ``copies`` float64 values made of
    a design or targets not given in float64; and for a banded ridge
    (``banded_jackknife_sums``) a candidate's rescaled design, its targets'
    columns and the power sums over all features.
    """
    n, c, t = n_samples, n_features + 1, n_targets
    count = JACKKNIFE_COLUMN_ARRAYS * n * c + JACKKNIFE_TARGET_ARRAYS * n * t
    if largest_group is not None:
        # After the fit on all data, one group at a time beside Z, A^-1 Z',
        # its map and the residuals.
        g = largest_group
        group = 3 * n * c + n * t + JACKKNIFE_GROUP_ARRAYS * (g * g + g * t)
        count = max(count, group)
    count += JACKKNIFE_SMALL_ARRAYS * (c * t + c * c) + copies
    if banded:
        count += n * n_features + n * t + 3 * t * c
    return 8.0 * count


def check_jackknife(max_memory_gb, data, summaries, jackknife, refuse):
    """Check that a closed-form jackknife after the replicates fits the host
    budget beside the data and the summaries (the replicates' data on the
    device is freed by then)."""
    budget = memory_budget(None, max_memory_gb)
    need = data.held + summaries + jackknife
    if need > budget * GB:
        refuse(
            need,
            budget,
            "of host memory",
            f"{summaries / GB:.3g} GB of summaries, {data.held / GB:.3g} GB of "
            f"data copies, {jackknife / GB:.3g} GB for the BCa jackknife after "
            f"the replicates",
        )


def _nbytes(array):
    if sparse.issparse(array):
        return array.data.nbytes + array.indices.nbytes + array.indptr.nbytes
    return np.asarray(array).nbytes


def _copy_nbytes(given, checked):
    """Bytes of ``checked`` unless it is (a view of) the array the user gave."""
    if isinstance(given, np.ndarray) and np.shares_memory(given, checked):
        return 0
    return _nbytes(checked)


def _rows(value):
    """Length of the first axis of a fit parameter; None for a scalar."""
    try:
        shape = np.shape(value)
    except ValueError:
        # A ragged list: not a per-sample array.
        return None
    return shape[0] if shape else None
