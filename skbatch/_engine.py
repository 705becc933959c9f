"""The batching engine: plan, batch, recover, reduce.

Every heavy loop of skbatch goes through one of the functions here.

- :func:`run_batched` runs a device kernel over items (targets, replicates,
  permutations) in batches sized from the memory budgets, under OOM
  recovery, moves each result to the host and hands it to a reducer.
- :func:`run_parallel` runs CPU tasks (refits of arbitrary estimators)
  through ``sklearn.utils.parallel`` in windows sized so that results in
  flight stay bounded. Wrapping ``fit`` in ``joblib.parallel_config`` picks
  the joblib backend (loky, threading, dask, ray).
- :func:`run_problem` runs a problem object (``skbatch/_ridge/problems.py``)
  through :func:`run_batched`, or, when a dask client is active, its batches
  as tasks on the cluster's workers (:func:`run_on_cluster`).
- :class:`BatchPlanner` is the bookkeeping both loops of batches share:
  their batch sizes, item order, out-of-memory shrinking, progress, logs
  and :class:`~skbatch.FitStage`.

What only a dask cluster needs (submitting batches, sending data once and
again after a loss, pickling problems) is in ``skbatch/_cluster.py``; its
names are re-exported here.

Reducers always receive results in item order, whatever the batch size, OOM
splits or number of workers, so results do not depend on them.
"""

import contextlib
import contextvars
import functools
import logging
import math
import sys
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

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
from tqdm.auto import tqdm

from . import _backends
from ._cluster import DASK_TIMEOUT_ENV as DASK_TIMEOUT_ENV
from ._cluster import DASK_TIMEOUT_S as DASK_TIMEOUT_S
from ._cluster import DATA_LOSS_RETRIES as DATA_LOSS_RETRIES
from ._cluster import SCATTER_MIN_BYTES as SCATTER_MIN_BYTES
from ._cluster import TASKS_IN_FLIGHT_PER_WORKER as TASKS_IN_FLIGHT_PER_WORKER
from ._cluster import Portable as Portable
from ._cluster import (
    _dask_client,
    _resolved,
    _send_lost_data_again,
    _TaskData,
    active_dask_client,
    run_on_cluster,
)
from ._cluster import dask_timeout as dask_timeout
from ._report import (
    FitStage,
    Progress,
    _count,
    record_stage,
    stages_not_collected,
)
from ._targets import chunk_aligned
from .backend import to_numpy
from .memory import (
    GB,
    _check_n_items,
    auto_batch_size,
    auto_n_jobs,
    memory_budget,
)
from .oom import _SIMULATED_OOM_LIMIT, ChunkRunner

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


@dataclass
class Plan:
    """What :func:`plan_batches` decided, and how many batches then ran.

    The record published in ``fit_report_`` is the :class:`FitStage` that
    :class:`BatchPlanner` builds from it.
    """

    n_items: int
    batch_size: int
    n_batches: int
    budget_gb: float
    n_oom_recoveries: int = 0
    n_kernel_calls: int = 0


def plan_batches(
    n_items,
    *,
    backend,
    device_bytes_per_item,
    host_bytes_per_item=0.0,
    fixed_bytes=0.0,
    max_memory_gb=None,
    batch_size="auto",
    max_batch_size=None,
    n_workers=1,
    n_held=0,
    chunk_width=None,
):
    """Choose a batch size from the device and host budgets.

    Parameters
    ----------
    n_items : int
        Items to process.
    backend : Backend
        Where kernels run.
    device_bytes_per_item, host_bytes_per_item : float
        Working set of one item on the device, and bytes of its result held
        on the host until reduced. On a CPU backend both are charged to RAM.
    fixed_bytes : float, default=0
        Memory used regardless of the batch (inputs, decompositions), charged
        to the device budget before batching.
    max_memory_gb : float or None
        Explicit budget, applied to both device and host.
    batch_size : "auto" or int
        A fixed batch size overrides the plan (still capped at n_items).
    max_batch_size : int or None, default=None
        Largest useful batch of an "auto" plan: a kernel whose speed
        saturates at some batch size says so here.
    n_workers : int, default=1
        Batches in flight at once: an "auto" plan gives each its share of the
        budget, and makes at least that many batches when there are items
        enough.
    n_held : int, default=0
        Results of finished batches held on the host for reduction while
        ``n_workers`` batches compute (CPU backends): each costs
        ``host_bytes_per_item`` per item besides.
    chunk_width : int or None, default=None
        Items per chunk of the array the items are read from or written to
        (the column chunks of out-of-core targets): an "auto" plan then
        follows the chunks (:func:`skbatch._targets.chunk_aligned`).

    Returns
    -------
    Plan
    """
    n_items = _check_n_items(n_items)
    for name, value in (
        ("device_bytes_per_item", device_bytes_per_item),
        ("host_bytes_per_item", host_bytes_per_item),
        ("fixed_bytes", fixed_bytes),
    ):
        if not (value >= 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if max_batch_size is not None and (
        isinstance(max_batch_size, bool) or not max_batch_size >= 1
    ):
        raise ValueError(
            f"max_batch_size must be None or an int >= 1, got {max_batch_size!r}"
        )
    # Whether the data and one item fit at all is decided against the full
    # budget; the budget capped for batching only sizes the batches.
    device_budget = memory_budget(backend, max_memory_gb)
    device_batching = memory_budget(backend, max_memory_gb, for_batching=True)
    if batch_size != "auto":
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, int | np.integer)
            or (batch_size < 1)
        ):
            raise ValueError(
                f"batch_size must be 'auto' or an int >= 1, got {batch_size!r}"
            )
        size = min(int(batch_size), n_items)
        return Plan(n_items, size, math.ceil(n_items / size), device_batching)
    if fixed_bytes >= device_budget * GB:
        raise ValueError(
            f"The data alone needs {fixed_bytes / GB:.3g} GB but the memory budget "
            f"on {backend.name} is {device_budget:.3g} GB; raise max_memory_gb or "
            "reduce n_samples / n_features."
        )
    item_bytes = device_bytes_per_item
    if not backend.is_gpu:
        item_bytes += host_bytes_per_item
    if fixed_bytes + item_bytes > device_budget * GB:
        raise ValueError(
            _one_item_refusal(item_bytes, fixed_bytes, device_budget, max_memory_gb)
        )
    room = device_budget - fixed_bytes / GB
    batching_room = min(room, device_batching) / n_workers
    if backend.is_gpu:
        size = _batch_size(n_items, device_bytes_per_item, room, batching_room)
        host_size = _batch_size(
            n_items,
            host_bytes_per_item,
            memory_budget(None, max_memory_gb),
            memory_budget(None, max_memory_gb, for_batching=True),
        )
        size = min(size, host_size)
    else:
        per_item = device_bytes_per_item + host_bytes_per_item
        per_item += host_bytes_per_item * n_held / n_workers
        size = _batch_size(n_items, per_item, room, batching_room)
    size = min(size, math.ceil(n_items / n_workers))
    room = size
    if max_batch_size is not None:
        size = min(size, int(max_batch_size))
    if chunk_width is None:
        # As many batches, of equal sizes: a short last batch would leave
        # threads side by side idle at the end.
        size = math.ceil(n_items / math.ceil(n_items / size))
    size = chunk_aligned(size, room, chunk_width)
    return Plan(n_items, size, math.ceil(n_items / size), device_batching)


def _one_item_refusal(item_bytes, fixed_bytes, budget_gb, max_memory_gb):
    """The message refusing an item that does not fit beside the data: what
    each needs, against the budget the user gave (or the one measured)."""
    besides = (
        f" beside the {fixed_bytes / GB:.3g} GB the data and decompositions "
        f"hold ({(item_bytes + fixed_bytes) / GB:.3g} GB together)"
        if fixed_bytes
        else ""
    )
    given = (
        "measured: max_memory_gb=None"
        if max_memory_gb is None
        else f"max_memory_gb={max_memory_gb!r}"
    )
    return (
        f"One item needs {item_bytes / GB:.3g} GB{besides} but the memory budget "
        f"is {budget_gb:.3g} GB ({given}); raise max_memory_gb or reduce the size "
        f"of an item (fewer samples or features)."
    )


def side_by_side_within(
    n_workers, budget_gb, device_bytes_per_item, host_bytes_per_item, fixed_bytes, hold
):
    """Batches side by side, at most ``n_workers``, whose items fit the budget.

    One item per batch and, with ``hold``, a finished batch's host result
    besides, beside ``fixed_bytes``: an item bigger than its share of the
    budget runs alone rather than several side by side past the budget.
    """
    room = budget_gb * GB - fixed_bytes
    item = device_bytes_per_item + host_bytes_per_item
    while n_workers > 1 and n_workers * item + hold * host_bytes_per_item > room:
        n_workers -= 1
    return n_workers


def _batch_size(n_items, bytes_per_item, budget_gb, batching_gb):
    """Items per batch: one item must fit ``budget_gb``, a batch ``batching_gb``.

    An item bigger than the batching budget but within the full budget runs
    alone: the batching cap says bigger batches are not faster, not that
    they do not fit.
    """
    auto_batch_size(n_items, bytes_per_item, budget_gb=budget_gb)
    size, _ = auto_batch_size(
        n_items, bytes_per_item, budget_gb=max(batching_gb, bytes_per_item / GB)
    )
    return size


def _say(verbose, message):
    """One plain line on stdout at ``verbose >= 1``, as scikit-learn prints.

    Plain lines, flushed, read the same on a terminal, in a notebook and in a
    batch job's log file, where a progress bar leaves nothing.
    """
    if verbose >= 1:
        print(f"[skbatch] {message}", flush=True)


def _progress(total, verbose, desc):
    """The :class:`~skbatch._report.Progress` of one loop; never stored on an
    estimator.

    ``verbose=0``: no bar, no lines. ``verbose>=1``: the bar is shown where
    someone watches, that is when stderr is a terminal or in a Jupyter
    notebook (``tqdm.auto`` then draws a widget), in addition to the plain
    lines of :func:`_say`; hidden in logs and pipes, where it would leave only
    control characters. Where the bar is hidden, or stdout is not a terminal
    (``python job.py > log``), progress lines go to stdout instead.
    """
    in_notebook = False
    if verbose <= 0:
        disable = True
    else:
        notebook = sys.modules.get("tqdm.notebook")
        # tqdm's disable=None hides the bar on a non-terminal stream, which a
        # notebook's output stream is, although its widget is seen.
        in_notebook = notebook is not None and issubclass(tqdm, notebook.tqdm)
        disable = False if in_notebook else None
    bar = tqdm(total=total, desc=desc, disable=disable, leave=False)
    in_log = verbose >= 1 and not in_notebook and (bar.disable or not _is_terminal())
    return Progress(
        bar, total=total, desc=desc, verbose=verbose, in_log=in_log, say=_say
    )


def _is_terminal():
    """Whether stdout is a terminal (a closed or odd stream is not)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _planned_stage(desc, path, backend, plan, n_workers, n_in_flight, memory, n_held=0):
    """The :class:`~skbatch.FitStage` of a loop of batches, as planned.

    ``n_in_flight`` batches at once on the memory ``memory`` (the problem's
    ``device_bytes_per_item``, ``host_bytes_per_item`` and ``fixed_bytes``),
    and the host results of ``n_held`` more, make its planned peak.
    """
    host = memory["host_bytes_per_item"]
    per_batch = n_in_flight * (memory["device_bytes_per_item"] + host) + n_held * host
    return FitStage(
        name=desc,
        path=path,
        runs_on=backend.name,
        n_items=plan.n_items,
        batch_size=plan.batch_size,
        n_batches=plan.n_batches,
        n_workers=n_workers,
        n_batches_run=0,
        n_oom_splits=0,
        planned_peak_bytes=memory["fixed_bytes"] + plan.batch_size * per_batch,
        budget_gb=plan.budget_gb,
        seconds=0.0,
        **memory,
    )


def _finished_stage(stage, plan, started, verbose):
    """``stage`` with what the loop did (batches run, OOM splits, seconds),
    printed at ``verbose >= 1``."""
    stage = replace(
        stage,
        n_batches_run=plan.n_kernel_calls,
        n_oom_splits=plan.n_oom_recoveries,
        seconds=time.perf_counter() - started,
    )
    _say(verbose, stage.format_summary())
    return stage


class BatchPlanner:
    """The bookkeeping of one loop of batches, here or on a dask cluster.

    :func:`run_batched` and :func:`~skbatch._cluster.run_on_cluster` share
    it, so that they cut the same batches and record the same stage: it
    plans the batch size (:func:`plan_batches`), cuts the item ids into
    batches in item order, shrinks later batches after an out-of-memory
    split, counts kernel calls and splits, makes the progress bar, logs the
    plan and the outcome, and records the loop's :class:`~skbatch.FitStage`.
    What runs the batches (threads here, tasks on a cluster) stays with the
    loop.

    Parameters
    ----------
    n_items, backend, device_bytes_per_item, host_bytes_per_item, \
fixed_bytes, max_memory_gb, batch_size, max_batch_size, chunk_width :
        See :func:`plan_batches`.
    threads : bool, default=False
        Batches run side by side, one per thread of the library
        (:func:`cpu_workers`): the plan gives each its share of the budget.
    hold_result : bool, default=False
        Whether the loop holds a finished batch's host result while the
        batches side by side compute, charged to the plan.
    verbose : int, default=0
    desc : str, default="items"
        See :func:`run_batched`.

    Attributes
    ----------
    plan : Plan
    n_side_by_side : int
        Batches side by side (1 without ``threads``).
    n_held : int
        Results held besides, as planned.
    """

    def __init__(
        self,
        *,
        n_items,
        backend,
        device_bytes_per_item,
        host_bytes_per_item=0.0,
        fixed_bytes=0.0,
        max_memory_gb=None,
        batch_size="auto",
        max_batch_size=None,
        chunk_width=None,
        threads=False,
        hold_result=False,
        verbose=0,
        desc="items",
    ):
        self.n_side_by_side = cpu_workers(backend) if threads else 1
        if batch_size == "auto" and self.n_side_by_side > 1:
            self.n_side_by_side = side_by_side_within(
                self.n_side_by_side,
                memory_budget(backend, max_memory_gb),
                device_bytes_per_item,
                host_bytes_per_item,
                fixed_bytes,
                hold_result,
            )
        # Side by side, one batch more than the threads is in flight: the threads
        # compute while this thread reduces a finished batch, whose result is
        # held meanwhile (n_held). With one batch per thread they waited for
        # every reduction (a bootstrap fit took 0.93 s against 0.77 s,
        # benchmarks/RESULTS.md).
        self.n_held = 1 if hold_result and self.n_side_by_side > 1 else 0
        self.plan = plan_batches(
            n_items,
            backend=backend,
            device_bytes_per_item=device_bytes_per_item,
            host_bytes_per_item=host_bytes_per_item,
            fixed_bytes=fixed_bytes,
            max_memory_gb=max_memory_gb,
            batch_size=batch_size,
            max_batch_size=max_batch_size,
            n_workers=self.n_side_by_side,
            n_held=self.n_held,
            chunk_width=chunk_width,
        )
        self.backend = backend
        self.memory = dict(
            device_bytes_per_item=device_bytes_per_item,
            host_bytes_per_item=host_bytes_per_item,
            fixed_bytes=fixed_bytes,
        )
        self.verbose = verbose
        self.desc = desc
        # The plan is always logged: at DEBUG for whoever configures the
        # "skbatch" logger, at INFO with verbose>=2.
        self.log_level = logging.INFO if verbose >= 2 else logging.DEBUG
        self.size = self.plan.batch_size
        self.stage = None
        self.started = None

    def start(self, path, n_workers, n_in_flight, n_held=0, *, where):
        """Build the stage as planned, say and log the plan, start the clock.

        ``path``, ``n_workers``, ``n_in_flight`` and ``n_held`` are those of
        :func:`_planned_stage`; ``where``, a format and its arguments, ends
        the logged plan.
        """
        self.stage = _planned_stage(
            self.desc,
            path,
            self.backend,
            self.plan,
            n_workers,
            n_in_flight,
            self.memory,
            n_held=n_held,
        )
        _say(self.verbose, self.stage.format_plan())
        self.started = time.perf_counter()
        message, *args = where
        plan = self.plan
        self.log(
            "%d %s in batches of %d (%d batches)" + message,
            plan.n_items,
            self.desc,
            plan.batch_size,
            plan.n_batches,
            *args,
        )

    def log(self, message, *args):
        """One record of the "skbatch" logger, after the loop's ``desc``."""
        logger.log(self.log_level, "%s: " + message, self.desc, *args)

    def progress(self):
        """The loop's :class:`~skbatch._report.Progress` (see :func:`_progress`)."""
        return _progress(self.plan.n_items, self.verbose, self.desc)

    def batches(self):
        """Item ids of each batch (host int64 arrays), in item order.

        Each of ``size`` items, the planned batch size until :meth:`shrink`
        lowers it for the batches not yet cut.
        """
        n_items = self.plan.n_items
        all_ids = np.arange(n_items, dtype=np.int64)
        start = 0
        while start < n_items:
            ids = all_ids[start : start + self.size]
            yield ids
            start += len(ids)

    def shrink(self, largest_ok):
        """Cut later batches at ``largest_ok`` items, the largest chunk that ran
        after an out-of-memory split (``ChunkRunner.largest_ok``; None when
        none was split), instead of failing at full size again."""
        if largest_ok is not None and largest_ok < self.size:
            self.log(
                "out of memory at %d, continuing with batches of %d",
                self.size,
                largest_ok,
            )
            self.size = largest_ok

    def count(self, n_calls, n_splits):
        """Add kernel calls and out-of-memory splits to the plan."""
        self.plan.n_kernel_calls += n_calls
        self.plan.n_oom_recoveries += n_splits

    def finish(self, where):
        """Say and log what the loop did, record its stage; returns the plan.

        ``where``, a format and its arguments, ends the logged outcome.
        """
        self.stage = _finished_stage(self.stage, self.plan, self.started, self.verbose)
        message, *args = where
        self.log(
            "done in %d kernel calls, %d out-of-memory recoveries on " + message,
            self.plan.n_kernel_calls,
            self.plan.n_oom_recoveries,
            *args,
        )
        record_stage(self.stage)
        return self.plan


def run_batched(
    kernel,
    reduce,
    *,
    n_items,
    backend,
    device_bytes_per_item,
    host_bytes_per_item=0.0,
    fixed_bytes=0.0,
    max_memory_gb=None,
    batch_size="auto",
    max_batch_size=None,
    chunk_width=None,
    threads=False,
    verbose=0,
    desc="items",
):
    """Run ``kernel`` over all items in budgeted, OOM-safe batches.

    Parameters
    ----------
    kernel : callable
        ``kernel(ids) -> result``: ``ids`` is a host int64 array of item ids;
        ``result`` is a backend array, or tuple of arrays, whose axis 0 runs
        over ``ids``. Its inputs are generated from the ids (seeds), never
        drawn once for all items. A kernel with a ``recycle(result)`` method
        gets each result back once reduced, to write later results into.
    reduce : callable
        ``reduce(ids, host_result)`` receives numpy results in item order.
        It keeps no reference to them (copies what it keeps) when the
        kernel recycles its results.
    n_items, backend, device_bytes_per_item, host_bytes_per_item, \
fixed_bytes, max_memory_gb, batch_size, max_batch_size, chunk_width :
        See :func:`plan_batches`.
    threads : bool, default=False
        On a numpy backend, run as many batches side by side as BLAS has
        threads, each on one BLAS thread (see :func:`cpu_workers`); the
        kernel must then be safe to call from several threads at once. The
        last batch is reduced once those threads are gone, with the library
        on all its threads again.
    verbose : int, default=0
        1: progress bar; 2: also log the plan and OOM recoveries.
    desc : str, default="items"
        Progress bar label.

    Returns
    -------
    Plan
        With the number of kernel calls and OOM recoveries filled in. The
        loop's :class:`~skbatch.FitStage` goes to the fit reports being
        collected (see :func:`skbatch._report.collect_stages`).
    """
    planner = BatchPlanner(
        n_items=n_items,
        backend=backend,
        device_bytes_per_item=device_bytes_per_item,
        host_bytes_per_item=host_bytes_per_item,
        fixed_bytes=fixed_bytes,
        max_memory_gb=max_memory_gb,
        batch_size=batch_size,
        max_batch_size=max_batch_size,
        chunk_width=chunk_width,
        threads=threads,
        hold_result=True,
        verbose=verbose,
        desc=desc,
    )
    plan = planner.plan
    n_workers = min(planner.n_side_by_side, plan.n_batches)
    n_in_flight = min(n_workers + planner.n_held, plan.n_batches)
    n_held = n_in_flight - n_workers
    planner.start(
        "batched",
        n_workers,
        n_workers,
        n_held,
        where=(", budget %.3g GB on %s", plan.budget_gb, backend.name),
    )
    runner = ChunkRunner(
        backend=backend, hint="lower max_memory_gb, or the batch size, or the data size"
    )
    pending = deque()

    recycle = getattr(kernel, "recycle", None)

    def finish(ids, pieces):
        for lo, hi, result in pieces:
            reduce(ids[lo:hi], _to_host(result))
            bar.update(hi - lo)
            if recycle is not None:
                recycle(result)

    last = None
    with planner.progress() as bar, backend.context():
        with _side_by_side(n_workers, backend) as pool:
            for ids in planner.batches():
                if pool is None:
                    finish(ids, runner.run(kernel, ids))
                else:
                    # Each task sees the caller's context (simulate_oom).
                    task = pool.submit(
                        contextvars.copy_context().run, runner.run, kernel, ids
                    )
                    pending.append((ids, task))
                    if len(pending) == n_in_flight:
                        ids_done, task = pending.popleft()
                        finish(ids_done, task.result())
                # Results are dropped once reduced: otherwise the next batch's
                # kernel runs while this batch's last device result is still
                # held, two working sets where one is budgeted.
                planner.shrink(runner.largest_ok)
            while len(pending) > 1:
                ids_done, task = pending.popleft()
                finish(ids_done, task.result())
            if pending:
                ids_done, task = pending.popleft()
                last = ids_done, task.result()
        # The last result is reduced once the threads are gone and the
        # library is back on all its threads, which the reduction may then
        # use: no batch computes beside it (the bootstrap accumulator splits
        # its last update, skbatch/streaming.py).
        if last is not None:
            finish(*last)
    planner.count(runner.n_calls, runner.n_recoveries)
    return planner.finish(("%s", backend.name))


def cpu_workers(backend):
    """Batches a CPU backend runs side by side: one per thread of the library.

    numpy's elementwise passes (residuals, squares, reductions) run on one
    core while a multi-threaded GEMM waits for them; batches side by side,
    each on one BLAS thread, keep every core busy. BatchedRidge's K-fold fit
    ran 7% faster, its GCV 17%, on two cores. torch runs its elementwise
    passes on all threads, but its threads synchronise for every operation:
    side by side, a torch bootstrap fit ran 22% faster and BatchedRidge's
    medium LOO fit 32% faster on two cores, the large one as fast
    (benchmarks/RESULTS.md). jax's XLA runs its own pool of threads; a GPU
    is one device.

    Only a call from the main thread goes side by side: a call from another
    thread is most likely one of several workers already (a threading joblib
    backend), which keep the cores busy.

    Parameters
    ----------
    backend : Backend

    Returns
    -------
    int
        1 unless the backend is numpy or torch on the CPU, the library has
        several threads and the caller is the main thread.
    """
    library = _backends.get(backend.library)
    if backend.is_gpu or not library.BATCHES_SIDE_BY_SIDE or not _in_main_thread():
        return 1
    return library.threads()


def _in_main_thread():
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _side_by_side(n_workers, backend):
    """A pool of ``n_workers`` threads, the library on one thread, or None."""
    if n_workers <= 1:
        yield None
        return
    one_thread = _backends.get(backend.library).one_thread()
    with one_thread, ThreadPoolExecutor(n_workers) as pool:
        try:
            yield pool
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise


def map_threads(fn, items, backend):
    """``[fn(item) for item in items]``, side by side on a CPU backend.

    For independent tasks that run on one thread anyway, such as the
    factorisations of :func:`skbatch._linalg.one_thread`: numpy and torch on
    the CPU run one per thread of the library, each on one thread; in order.
    Sequential elsewhere, and when called from another than the main thread
    (see :func:`cpu_workers`).
    """
    n_workers = min(cpu_workers(backend), len(items))
    with _side_by_side(n_workers, backend) as pool:
        if pool is None:
            return [fn(item) for item in items]
        tasks = [
            pool.submit(contextvars.copy_context().run, fn, item) for item in items
        ]
        return [task.result() for task in tasks]


def _to_host(result):
    if isinstance(result, tuple):
        return tuple(to_numpy(r) for r in result)
    return to_numpy(result)


def _run_batch(problem, ids, one_thread, inputs=(), simulated_oom=None):
    """One batch on a dask worker: ``problem(ids)`` under OOM recovery.

    ``inputs``, when the problem gives them (``problem.task_inputs(ids)``),
    are the batch's own data, bound to the problem here (``problem.bind``).
    ``simulated_oom`` is the limit of :func:`skbatch.testing.simulate_oom`
    in the calling process, which the worker's threads do not inherit.

    With ``one_thread``, on one thread of the library, as :func:`run_batched`
    runs batches side by side: a product's rounding can depend on the
    threads that compute it.

    Returns
    -------
    pieces : list of (start, stop, numpy result)
        Consecutive pieces of ``ids``, more than one after out-of-memory
        splits, each as :func:`run_batched` hands it to the reducer.
    n_calls, n_splits : int
        Kernel calls and out-of-memory splits.
    """
    if inputs:
        problem = problem.bind(*inputs)
    backend = problem.backend
    runner = ChunkRunner(
        backend=backend,
        hint="lower max_memory_gb, or the batch size, or the data size",
    )
    library = _backends.get(backend.library)
    token = _SIMULATED_OOM_LIMIT.set(simulated_oom)
    try:
        with (
            backend.context(),
            library.one_thread() if one_thread else contextlib.nullcontext(),
        ):
            pieces = [
                (lo, hi, _to_host(result))
                for lo, hi, result in runner.run(problem, ids)
            ]
    finally:
        _SIMULATED_OOM_LIMIT.reset(token)
    return pieces, runner.n_calls, runner.n_recoveries


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
    _say(verbose, stage.format_plan())
    started = time.perf_counter()
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
    _say(verbose, stage.format_summary())
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


def run_problem(problem, reduce, *, max_memory_gb=None, batch_size="auto", verbose=0):
    """Run a problem object over all its items, here or on the active dask cluster.

    A problem (see :mod:`skbatch._ridge.problems`) is a kernel of item ids
    that states its memory (``fixed_bytes``, ``device_bytes_per_item``,
    ``host_bytes_per_item``), its largest useful batch (``max_batch_size``),
    whether its batches may run side by side (``threads``), ``n_items``,
    ``backend`` and ``desc``; the caller never does memory arithmetic.

    With a dask client active (see :func:`active_dask_client`) the batches
    run as tasks on the cluster's workers (:func:`run_on_cluster`), else in
    this process (:func:`run_batched`); the batches, and so the results, are
    the same.

    Returns
    -------
    Plan
    """
    client = active_dask_client()
    run = run_batched if client is None else functools.partial(run_on_cluster, client)
    return run(
        problem,
        reduce,
        n_items=problem.n_items,
        backend=problem.backend,
        device_bytes_per_item=problem.device_bytes_per_item,
        host_bytes_per_item=problem.host_bytes_per_item,
        fixed_bytes=problem.fixed_bytes,
        max_memory_gb=max_memory_gb,
        batch_size=batch_size,
        max_batch_size=problem.max_batch_size,
        # Targets read from (or predictions written to) a chunked array.
        chunk_width=getattr(problem, "chunk_width", None),
        threads=problem.threads,
        verbose=verbose,
        desc=problem.desc,
    )
