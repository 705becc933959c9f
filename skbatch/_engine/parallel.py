"""Refits of arbitrary estimators as joblib tasks, in bounded windows.

:func:`run_parallel` runs CPU tasks through ``sklearn.utils.parallel`` in
windows sized so that results in flight stay bounded; wrapping ``fit`` in
``joblib.parallel_config`` picks the joblib backend (loky, threading, dask,
ray).
"""

import functools
import logging
import math
import time
from dataclasses import replace

import numpy as np
from joblib import effective_n_jobs

# Private to joblib, without a public twin: its public API configures a
# backend (parallel_config) but neither names the active one nor says
# whether its workers share this host's memory; the classes of its local
# backends and its table of names (BACKENDS) do. tests/test_private_names.py
# checks what is relied on here.
from joblib._parallel_backends import (
    LokyBackend,
    MultiprocessingBackend,
    ThreadingBackend,
)
from joblib.parallel import BACKENDS, get_active_backend
from sklearn.utils.parallel import Parallel, delayed

from ..memory import GB, auto_n_jobs, memory_budget
from .cluster import _dask_client, _resolved, _send_lost_data_again, _TaskData
from .planner import _batch_size, _progress, _say
from .report import (
    FitStage,
    _count,
    loop_started,
    record_stage,
    stage_finished,
    stages_not_collected,
)

logger = logging.getLogger("skbatch")


# Items per joblib task when the window is split among workers: enough tasks
# per worker to balance load, few enough that dispatch overhead stays small.
TASKS_PER_WORKER = 4
# Upper bound on items in flight in one joblib window, whatever the budget,
# so a progress bar and a KeyboardInterrupt react in reasonable time.
MAX_WINDOW = 4096
# Items per call of a run_parallel reducer. Results are regrouped on this
# fixed grid of item ids, so the reducer sees the same blocks, and its
# floating-point sums round the same way, whatever n_jobs, the joblib backend
# or the size of the tasks.
REDUCE_BLOCK = 64
# joblib backends whose workers run on this host and share its memory budget.
_LOCAL_BACKENDS = (LokyBackend, MultiprocessingBackend, ThreadingBackend)


def run_parallel(
    task,
    reduce,
    *,
    n_items,
    host_bytes_per_item,
    n_jobs=None,
    max_memory_gb=None,
    verbose=0,
    desc="items",
):
    """Run CPU tasks through joblib in bounded windows.

    Parameters
    ----------
    task : callable
        ``task(ids) -> result`` for a chunk of item ids; ``result`` is a numpy
        array with axis 0 over ``ids``. Must be picklable for process
        backends: a module-level function (or ``functools.partial`` of one)
        whose arguments are numpy arrays and strings, never live device
        tensors. A partial's arguments are passed to joblib as arguments:
        with the dask backend those bigger than ``SCATTER_MIN_BYTES`` are
        scattered to the cluster once for all windows.
    reduce : callable
        ``reduce(ids, result)``, called in item order on consecutive blocks
        of ``REDUCE_BLOCK`` items (fewer when the window is smaller, and at
        the end): the same blocks whatever ``n_jobs`` and joblib backend.
    n_items : int
        Number of items.
    host_bytes_per_item : float
        Bytes of one item's result: bounds how many are in flight.
    n_jobs : int or None
        joblib convention; the backend comes from ``joblib.parallel_config``.
        On a local backend (loky, multiprocessing, threading), lowered so
        that each worker's copy of the task's arrays fits the host budget
        (said at ``verbose>=1``).
    max_memory_gb : float or None
        Host budget for results in flight.
    verbose : int, default=0
        1: progress bar.
    desc : str
        Progress bar label.

    Returns
    -------
    int
        The window size used (items in flight at most). The loop's
        :class:`~skbatch.FitStage` goes to the fit reports being collected;
        the fits the tasks run record nothing there, whichever worker runs
        them.
    """
    budget = memory_budget(None, max_memory_gb, for_batching=True)
    window = _batch_size(
        n_items, host_bytes_per_item, memory_budget(None, max_memory_gb), budget
    )
    window = min(window, MAX_WINDOW)
    block = min(window, REDUCE_BLOCK)
    # Windows end on block boundaries: no block waits for the next window.
    window -= window % block
    function, args, kwargs = _task_parts(task)
    data_bytes = _array_bytes([*args, *kwargs.values()])
    n_jobs = _memory_capped_n_jobs(n_jobs, data_bytes, max_memory_gb, verbose, desc)
    joblib_backend, _ = get_active_backend()
    # Results as each task completes, in order, for the progress of a window
    # (a whole fit is often one window); the multiprocessing backend returns
    # them only at the end of the window.
    return_as = "generator" if joblib_backend.supports_return_generator else "list"
    parallel = Parallel(n_jobs=n_jobs, return_as=return_as)
    n_workers = max(_n_workers(parallel), 1)
    chunk = max(1, math.ceil(window / (n_workers * TASKS_PER_WORKER)))
    n_windows = math.ceil(n_items / window)
    # Local workers each copy the task's arrays; a cluster's hold theirs elsewhere.
    data_copies = n_workers if type(joblib_backend) in _LOCAL_BACKENDS else 0
    stage = FitStage(
        name=desc,
        path="parallel",
        runs_on=_joblib_name(joblib_backend, n_workers),
        n_items=n_items,
        batch_size=window,
        n_batches=n_windows,
        n_workers=n_workers,
        n_batches_run=0,
        n_oom_splits=0,
        planned_peak_bytes=window * host_bytes_per_item + data_copies * data_bytes,
        budget_gb=budget,
        device_bytes_per_item=0.0,
        host_bytes_per_item=host_bytes_per_item,
        fixed_bytes=float(data_bytes),
        seconds=0.0,
    )
    started = loop_started()
    _say(verbose, stage.format_plan())
    logger.log(
        logging.INFO if verbose >= 2 else logging.DEBUG,
        "%s: %d %s in windows of %d, %d per task, on %d joblib workers, "
        "host budget %.3g GB",
        desc,
        n_items,
        desc,
        window,
        chunk,
        n_workers,
        budget,
    )
    all_ids = np.arange(n_items, dtype=np.int64)
    # The fits the tasks run are not stages of this fit, whichever the worker.
    with _progress(n_items, verbose, desc) as bar, parallel, stages_not_collected():
        # Held until every window is done: the cluster keeps the data as long.
        data = _TaskData(args, kwargs, _dask_client() if n_workers > 1 else None)
        for start in range(0, n_items, window):
            window_ids = all_ids[start : start + window]
            chunks = [
                window_ids[i : i + chunk] for i in range(0, len(window_ids), chunk)
            ]
            results = _run_window(parallel, function, data, chunks, bar, start)
            for lo in range(0, len(window_ids), block):
                hi = min(lo + block, len(window_ids))
                reduce(window_ids[lo:hi], _block_result(results, chunk, lo, hi))
            # Release this window before the next one is computed, so that at
            # most one window of results is in flight.
            del results
    stage = replace(
        stage, n_batches_run=n_windows, seconds=time.perf_counter() - started
    )
    stage_finished(stage, verbose, _say)
    record_stage(stage)
    return window


def _joblib_name(backend, n_workers):
    """Where joblib runs the tasks: its name of ``backend`` ("loky", "dask"...).

    "sequential" for one worker, when joblib runs the tasks in this process
    whatever the backend.
    """
    if n_workers <= 1:
        return "sequential"
    for name, cls in BACKENDS.items():
        if type(backend) is cls:
            return name
    return type(backend).__name__


def _memory_capped_n_jobs(n_jobs, data_bytes, max_memory_gb, verbose, desc):
    """``n_jobs`` lowered so that each local worker's copy of the data fits.

    joblib's convention for ``n_jobs`` (None: ``joblib.parallel_config``'s
    ``n_jobs``, else one; -1: all cores), counted by ``effective_n_jobs``.
    Each worker of a process or thread backend on this host works on its own
    copy of the task's arrays (estimators copy what they fit on), so only as
    many as :func:`skbatch.memory.auto_n_jobs` allows run. The workers of
    dask, Ray and other backends live elsewhere: their ``n_jobs`` is kept.
    """
    backend, _ = get_active_backend()
    if type(backend) not in _LOCAL_BACKENDS or data_bytes == 0:
        return n_jobs
    requested = effective_n_jobs(n_jobs)
    if requested <= 1:
        return n_jobs
    fitting = auto_n_jobs(
        None, data_bytes, max_memory_gb=max_memory_gb, n_jobs=requested
    )
    if fitting == requested:
        return n_jobs
    _say(
        verbose,
        f"{desc}: {_count(fitting, 'workers')} instead of {requested}, so that "
        f"their copies of the data ({data_bytes / GB:.3g} GB each) fit the host "
        f"memory budget ({memory_budget(None, max_memory_gb):.3g} GB); raise "
        "max_memory_gb to allow more.",
    )
    return fitting


def _array_bytes(values):
    """Bytes of the arrays among ``values``, also inside lists, tuples, dicts."""
    total = 0
    for value in values:
        if isinstance(value, dict):
            total += _array_bytes(value.values())
        elif isinstance(value, list | tuple):
            total += _array_bytes(value)
        elif isinstance(value, np.ndarray):
            total += value.nbytes
    return total


def _n_workers(parallel):
    """Workers a call of ``parallel`` uses, as joblib decides it.

    Asked of the backend with the ``Parallel``'s own ``n_jobs``, as joblib
    does: the dask backend ignores ``n_jobs`` and counts the cluster's
    threads, so ``n_jobs=1`` still runs on the cluster, while a one-thread
    cluster runs the tasks in this process.
    """
    backend, _ = get_active_backend()
    return backend.effective_n_jobs(parallel.n_jobs)


def _task_parts(task):
    """``(function, args, kwargs)`` of a task called as ``function(*args, ids,
    **kwargs)``.

    A ``functools.partial`` is opened so that its arguments reach joblib as
    arguments, which the dask backend can scatter, not as part of the function,
    which it sends with every task.
    """
    if isinstance(task, functools.partial):
        return task.func, task.args, dict(task.keywords)
    return task, (), {}


def _run_window(parallel, function, data, chunks, progress=None, start=0):
    """One window of tasks, run again if the cluster lost the data meanwhile.

    The tasks of a window are functions of their item ids alone and nothing
    is reduced before the window is complete, so running it again gives the
    same results. ``progress``, if given, reaches ``start`` plus the items of
    the tasks completed, as they complete; a window run again is not counted
    twice.
    """
    n_losses = 0
    while True:
        try:
            # A cluster left with one thread (its other workers died or are
            # restarting) runs the tasks in this process: they get the data
            # here. Asking joblib waits for a worker, and fails without one.
            in_process = _n_workers(parallel) <= 1
            if not in_process and not n_losses:
                # Lost since the previous window; a window run again follows
                # a re-send.
                data.scatter_lost()
            args, kwargs = data.local if in_process else data.sent
            task = function if in_process else functools.partial(_resolved, function)
            results, reached = [], start
            outputs = parallel(delayed(task)(*args, ids, **kwargs) for ids in chunks)
            for ids, result in zip(chunks, outputs):
                results.append(result)
                reached += len(ids)
                if progress is not None:
                    progress.reach(reached)
            return results
        except Exception as exc:
            n_losses = _send_lost_data_again(data, n_losses, exc)


def _block_result(results, chunk, lo, hi):
    """Rows ``lo:hi`` of a window's results, given per task of ``chunk`` rows.

    A view when the rows come from one task, else a copy of at most
    ``REDUCE_BLOCK`` rows.
    """
    first, last = lo // chunk, (hi - 1) // chunk
    pieces = [
        results[k][max(lo - k * chunk, 0) : hi - k * chunk]
        for k in range(first, last + 1)
    ]
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
