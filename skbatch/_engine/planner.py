"""The planner both loops of batches share: batch sizes, item order,
out-of-memory shrinking, progress, logs and the :class:`~skbatch.FitStage`.

:class:`BatchPlanner` serves the local loop (``local.py``) and the dask loop
(``cluster.py``), which both import it and neither the other;
:func:`run_batch` is one batch of either, under out-of-memory recovery.
"""

import contextlib
import logging
import math
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
from tqdm.auto import tqdm

from .. import _backends
from .._backends.side_by_side import cpu_workers
from ..backend import to_numpy
from ..memory import (
    GB,
    _check_n_items,
    auto_batch_size,
    memory_budget,
    side_by_side_within,
)
from ..oom import _SIMULATED_OOM_LIMIT, ChunkRunner
from .report import FitStage, Progress, loop_started, record_stage, stage_finished
from .targets import chunk_aligned

logger = logging.getLogger("skbatch")


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
        follows the chunks (:func:`skbatch._engine.targets.chunk_aligned`).

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
    """The :class:`~skbatch._engine.report.Progress` of one loop; never stored on an
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
    stage_finished(stage, verbose, _say)
    return stage


class BatchPlanner:
    """The bookkeeping of one loop of batches, here or on a dask cluster.

    :func:`run_batched` and :func:`~skbatch._engine.cluster.run_on_cluster` share
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
        self.started = loop_started()
        _say(self.verbose, self.stage.format_plan())
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
        """The loop's :class:`~skbatch._engine.report.Progress` (see
        :func:`_progress`)."""
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
