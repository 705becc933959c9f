"""The batching engine: plan, batch, recover, reduce.

Every heavy loop of skbatch goes through this package.

- ``planner.py``: :class:`BatchPlanner`, the bookkeeping both loops of
  batches share (batch sizes, item order, out-of-memory shrinking, progress,
  logs and the :class:`~skbatch.FitStage`), and one batch under recovery.
- ``local.py``: :func:`run_batched` runs a device kernel over items
  (targets, replicates, permutations) in batches sized from the memory
  budgets, under OOM recovery, moves each result to the host and hands it
  to a reducer.
- ``cluster.py``: :func:`run_on_cluster`, the same batches as tasks on a
  dask cluster's workers (submitting, sending data once and again after a
  loss, pickling problems).
- ``parallel.py``: :func:`run_parallel` runs CPU tasks (refits of
  arbitrary estimators) through ``sklearn.utils.parallel`` in windows sized
  so that results in flight stay bounded.
- ``preflight.py``: what a resampling fit holds, against its budgets,
  before any work; ``report.py``: the :class:`~skbatch.FitStage` records of
  ``fit_report_``; ``targets.py``: targets read (and predictions written) a
  batch of columns at a time, in memory, on disk or in a dask array.

:func:`run_problem`, here, runs a problem object
(``skbatch/_ridge/problems/``) through :func:`run_batched`, or, when a
dask client is active, through :func:`run_on_cluster`.

Reducers always receive results in item order, whatever the batch size, OOM
splits or number of workers, so results do not depend on them.
"""

import functools

from .cluster import Portable, active_dask_client, dask_timeout, run_on_cluster
from .local import run_batched
from .parallel import run_parallel
from .planner import BatchPlanner, Plan, plan_batches

__all__ = [
    "BatchPlanner",
    "Plan",
    "Portable",
    "active_dask_client",
    "dask_timeout",
    "plan_batches",
    "run_batched",
    "run_on_cluster",
    "run_parallel",
    "run_problem",
]


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
