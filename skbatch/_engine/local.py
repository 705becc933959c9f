"""The local loop: a device kernel over items in batches, in this process."""

import contextvars
from collections import deque

from .._backends.side_by_side import _side_by_side
from ..oom import ChunkRunner
from .planner import BatchPlanner, _to_host


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
        collected (see :func:`skbatch._engine.report.collect_stages`).
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
        # its last update, skbatch/streaming/_common.py).
        if last is not None:
            finish(*last)
    planner.count(runner.n_calls, runner.n_recoveries)
    return planner.finish(("%s", backend.name))
