"""The batched paths on a dask cluster, and the data they send there.

- :func:`run_on_cluster` runs a problem's batches as tasks on the workers of
  a dask cluster: the loop of :func:`skbatch._engine.run_batched`, planned by
  the same :class:`skbatch._engine.BatchPlanner`, with what only a cluster
  needs (submitting tasks, waiting for workers, sending lost data again).
- :class:`_TaskData` sends large task arguments to a cluster once, and again
  after the workers holding them died; :func:`skbatch._engine.run_parallel`
  uses it under joblib's dask backend too.
- :class:`Portable` pickles a problem as host arrays and device strings.

``skbatch._engine`` re-exports the names other modules use.
"""

import importlib
import logging
import math
import os
import sys
import types
import warnings
from collections import deque
from concurrent.futures import CancelledError
from dataclasses import dataclass

import numpy as np
from joblib.parallel import get_active_backend

from ..backend import Backend, backend_of_array, to_numpy
from ..memory import GB, memory_budget
from ..oom import _SIMULATED_OOM_LIMIT
from .planner import BatchPlanner, _run_batch

logger = logging.getLogger("skbatch")

# Seconds any exchange with a dask scheduler (sending the data, asking who
# holds it, waiting for a worker) may take before it fails, instead of
# hanging a fit; the environment variable DASK_TIMEOUT_ENV overrides it.
DASK_TIMEOUT_S = 60
DASK_TIMEOUT_ENV = "SKBATCH_DASK_TIMEOUT"
# Batches per dask worker thread in flight at once: one computing, one queued,
# so that no worker waits for the client; more would only hold more results.
TASKS_IN_FLIGHT_PER_WORKER = 2
# Times the data is sent again, and the tasks that needed it rerun, after the
# dask workers holding every copy of it died.
DATA_LOSS_RETRIES = 2
# Client.status of a client that was closed (or is closing): no task can be
# sent or waited for through it any more.
CLOSED_CLIENT_STATUSES = ("closing", "closed")
# Task arguments bigger than this (dask's sizeof) go to a dask cluster once,
# scattered, instead of inside every task: joblib's dask backend scatters from
# the same size on, but again for every window.
SCATTER_MIN_BYTES = 1e3


def dask_timeout():
    """Seconds an exchange with a dask cluster may take before a fit fails.

    ``DASK_TIMEOUT_S``, unless the environment variable ``SKBATCH_DASK_TIMEOUT``
    gives another number of seconds (read at every use, so that it can be set
    in a job script, or in ``os.environ`` before a fit).

    Raises
    ------
    ValueError
        If the variable is not a number of seconds > 0.
    """
    value = os.environ.get(DASK_TIMEOUT_ENV)
    if value is None:
        return DASK_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(
            f"The environment variable {DASK_TIMEOUT_ENV} must be a number of "
            f"seconds > 0, got {value!r}."
        )
    return seconds


def active_dask_client():
    """The dask client batched work goes to, or None to run in this process.

    The client of ``joblib.parallel_config(backend="dask")`` when that is
    active, else dask's default client (the last ``distributed.Client``
    made in this process, or the one of ``client.as_current()``). None when
    dask's ``distributed`` was never imported (no client can exist), and
    inside a task on a dask worker, whose fits run where they are.
    """
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return None
    try:
        distributed.get_worker()
    except ValueError:
        pass
    else:
        return None
    client = _dask_client()
    if client is None:
        try:
            client = distributed.default_client()
        except ValueError:
            return None
    return client if client.status == "running" else None


def run_on_cluster(
    client,
    problem,
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
    """Run a problem's batches as tasks on the workers of a dask cluster.

    The problem (the data and its decompositions) is sent to every worker
    once; each batch of item ids is a task calling ``problem(ids)`` under the
    worker's own out-of-memory recovery, whose numpy results come back and
    are reduced in item order. Data of the batch's own items
    (``problem.task_inputs(ids)``, such as its targets' columns) goes with
    its task; a dask collection among them (a dask array's columns) is
    computed by the cluster, next to its chunks, never in this process.
    The batches are those :func:`~skbatch._engine.run_batched` plans in this
    process (one :class:`~skbatch._engine.BatchPlanner`), so the results are
    the same up to the rounding of the workers' BLAS threads (within the
    tolerance of docs/user_guide/guarantees.rst). At most
    ``TASKS_IN_FLIGHT_PER_WORKER`` batches per worker thread, and no more
    than the host budget holds, are in flight.

    A worker that dies mid-fit is replaced by dask, which recomputes its
    batches from another worker's copy of the problem; if every copy was
    lost, the problem is sent again, up to ``DATA_LOSS_RETRIES`` times. No
    wait lasts longer than :func:`dask_timeout` without a worker in the
    cluster.

    Parameters
    ----------
    client : distributed.Client
    problem : object
        A picklable problem (see :func:`~skbatch._engine.run_problem`),
        called as ``problem(ids)`` on the workers.
    reduce, n_items, backend, device_bytes_per_item, host_bytes_per_item, \
fixed_bytes, max_memory_gb, batch_size, max_batch_size, chunk_width, threads, \
verbose, desc :
        See :func:`~skbatch._engine.run_batched`; ``backend`` is where each
        worker computes (a GPU backend: the worker's own card, for workers
        that see one each, as dask-cuda's do).

    Returns
    -------
    skbatch._engine.Plan

    Raises
    ------
    RuntimeError
        When ``client`` is closed while the batches run, saying so.
    """
    timeout = dask_timeout()
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
        verbose=verbose,
        desc=desc,
    )
    plan = planner.plan
    n_threads = _cluster_threads(client, timeout)
    result_bytes = plan.batch_size * host_bytes_per_item
    host_room = memory_budget(None, max_memory_gb) * GB
    in_flight = min(
        TASKS_IN_FLIGHT_PER_WORKER * n_threads,
        max(1, int(host_room // result_bytes)) if result_bytes else math.inf,
    )
    # One batch in flight per worker, on the worker's own memory.
    planner.start(
        "cluster",
        n_threads,
        1,
        where=(" on %d dask worker threads, %d in flight", n_threads, in_flight),
    )
    # Each batch splits on its own worker after an out-of-memory error: the
    # batches are cut once, as planned.
    batches = deque(planner.batches())
    try:
        return _run_tasks(
            client, problem, reduce, planner, batches, n_threads, in_flight
        )
    except Exception as exc:
        if client.status in CLOSED_CLIENT_STATUSES:
            raise _client_closed_error(client) from exc
        raise


def _run_tasks(client, problem, reduce, planner, batches, n_threads, in_flight):
    """Run ``batches`` (arrays of item ids) of ``problem`` on the ``n_threads``
    worker threads of ``client``'s cluster, at most ``in_flight`` at a time,
    for :func:`run_on_cluster`."""
    from distributed import wait

    timeout = dask_timeout()
    data = _TaskData((problem,), {}, client, min_bytes=0, broadcast=True)
    pending = deque()
    n_losses = 0

    # A problem whose items have data of their own (the targets' columns)
    # sends each task its batch's share, not all of it to every worker.
    task_inputs = getattr(problem, "task_inputs", lambda ids: ())

    def submit(ids):
        (sent,), _ = data.sent
        with warnings.catch_warnings():
            # The batch's columns travel inside its task, or are computed by
            # the cluster from a dask array's graph, so that the scheduler
            # can compute them again elsewhere if their worker dies (data
            # scattered on its own would die with that worker); dask warns
            # of any task over 10 MB.
            warnings.filterwarnings(
                "ignore", message="Sending large graph", category=UserWarning
            )
            inputs = _computed_on(client, task_inputs(ids))
            future = client.submit(
                _run_batch,
                sent,
                ids,
                planner.n_side_by_side > 1,
                inputs,
                _SIMULATED_OOM_LIMIT.get(),
                pure=False,
            )
        return _Task(ids, future)

    def send_again(pending, exc):
        """``pending`` with its unfinished batches sent again, once the data
        was lost with every worker holding it; else ``exc`` is raised."""
        nonlocal n_losses
        n_losses = _send_lost_data_again(data, n_losses, exc)
        return deque(
            task if task.future.status == "finished" else submit(task.ids)
            for task in pending
        )

    # Current, so that dask's wait finds the client of joblib's dask backend.
    with planner.progress() as bar, client.as_current():
        while batches or pending:
            while batches and len(pending) < in_flight:
                pending.append(submit(batches.popleft()))
            try:
                wait(
                    [task.future for task in pending],
                    timeout=timeout,
                    return_when="FIRST_COMPLETED",
                )
            except TimeoutError:
                # Batches may compute for longer than the timeout; a cluster
                # without workers would wait for ever.
                _cluster_threads(client, timeout)
                continue
            except CancelledError as exc:
                # Batches whose data died with every worker holding it.
                pending = send_again(pending, exc)
                continue
            for task in pending:
                if not task.counted and task.future.status == "finished":
                    task.counted = True
                    bar.update(len(task.ids))
            while pending and pending[0].future.done():
                task = pending[0]
                try:
                    pieces, n_calls, n_splits = task.future.result(timeout=timeout)
                except Exception as exc:
                    pending = send_again(pending, exc)
                    break
                pending.popleft()
                for lo, hi, result in pieces:
                    reduce(task.ids[lo:hi], result)
                planner.count(n_calls, n_splits)
    return planner.finish(("%d dask worker threads", n_threads))


def _client_closed_error(client):
    """The error of a fit whose dask client was closed while it ran."""
    return RuntimeError(
        f"The dask client this fit ran its batches on was closed during the "
        f"fit (its status is {client.status!r}: client.close() was called, or "
        f"its cluster shut down), and nothing more could be computed (a fit "
        f"leaves the estimator as it was). Keep the client open until the "
        f"call returns; fit again with an open client, or with no client "
        f"active to fit in this process."
    )


@dataclass
class _Task:
    """A batch sent to the cluster; ``counted`` once the progress bar has it."""

    ids: np.ndarray
    future: object
    counted: bool = False


def _cluster_threads(client, timeout):
    """Threads of the cluster's workers, waiting up to ``timeout`` for one."""
    try:
        client.wait_for_workers(1, timeout=timeout)
        n_threads = sum(client.nthreads(callback_timeout=timeout).values())
    except TimeoutError as exc:
        raise RuntimeError(
            f"The dask cluster had no worker for {timeout:g} s; start workers "
            f"(or wait for the ones requested to start), or raise the "
            f"environment variable {DASK_TIMEOUT_ENV}."
        ) from exc
    return max(n_threads, 1)


def _computed_on(client, inputs):
    """``inputs`` with each dask collection among them computed on the cluster.

    A collection becomes the future of its result, which the scheduler
    computes next to the chunks it reads and hands to the task that takes
    it, on the same worker where it can: the data never comes to this
    process.
    """
    from dask import is_dask_collection

    return tuple(
        client.compute(value) if is_dask_collection(value) else value
        for value in inputs
    )


def _send_lost_data_again(data, n_losses, cause):
    """Send again the :class:`_TaskData` ``data`` after an error, ``cause``,
    that followed ``n_losses`` losses of it; returns the losses counted now.

    ``cause`` is raised as it is when every argument still has a worker
    holding it. Data lost with every worker holding it is sent again (up to
    ``DATA_LOSS_RETRIES`` times, then :func:`_data_lost_error` is raised),
    and a re-send that no worker takes within :func:`dask_timeout` raises
    :func:`_data_lost_error` too, never the raw ``TimeoutError``.
    """
    if not data.any_lost():
        raise cause
    n_losses += 1
    if n_losses > DATA_LOSS_RETRIES:
        raise _data_lost_error(n_losses) from cause
    timeout = dask_timeout()
    try:
        data.scatter_lost()
    except TimeoutError as error:
        # No worker came to take it.
        raise _data_lost_error(n_losses, timeout) from error
    return n_losses


def _data_lost_error(n_losses, resend_timeout=None):
    """The error of a fit whose data died with the workers holding it,
    ``n_losses`` times, or once more with no worker to send it again to
    within ``resend_timeout`` seconds."""
    resend = (
        ""
        if resend_timeout is None
        else f", and no worker took it again within {resend_timeout:g} s"
    )
    return RuntimeError(
        f"The dask workers holding the data of this fit were lost {n_losses} "
        f"times (the data sent to the cluster is gone with them){resend}. "
        "Check the workers' logs for why they died (often their memory limit); "
        "give them more memory, or fit without a dask client and without "
        "joblib.parallel_config(backend='dask')."
    )


def _resolved(function, *args, **kwargs):
    """``function`` called with any dask future among its arguments resolved.

    On a worker, joblib's dask backend hands a task the data of its futures.
    A cluster that loses workers while a window is dispatched can leave joblib
    with one worker, when it runs the tasks in this process, futures and all:
    they are fetched here then, from a worker that still holds a copy.
    """
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return function(*args, **kwargs)

    def value(argument):
        if isinstance(argument, distributed.Future):
            return argument.result(timeout=dask_timeout())
        return argument

    args = [value(argument) for argument in args]
    kwargs = {name: value(argument) for name, argument in kwargs.items()}
    return function(*args, **kwargs)


class _TaskData:
    """Task arguments, the large ones sent once to a dask cluster.

    Arguments bigger than ``min_bytes`` (dask's sizeof) are replaced by their
    dask futures, which a worker resolves to the data it received once. If
    the workers holding a copy die, the cluster cannot recompute it:
    :meth:`scatter_lost` sends it again from this process. Without a client
    (another joblib backend, or one worker, when joblib runs the tasks in
    this process), the arguments are kept as they are.

    Parameters
    ----------
    args : tuple
    kwargs : dict
    client : distributed.Client or None
    min_bytes : float, default=SCATTER_MIN_BYTES
    broadcast : bool, default=False
        Send a copy to every worker, which then all compute without fetching
        it, and any of which can recompute the tasks of one that dies.
    """

    def __init__(
        self, args, kwargs, client, *, min_bytes=SCATTER_MIN_BYTES, broadcast=False
    ):
        self._values = [*args, *kwargs.values()]
        self._n_args = len(args)
        self._names = list(kwargs)
        self._client = client
        self._broadcast = broadcast
        self._large = []
        if self._client is not None:
            from dask.sizeof import sizeof
            from distributed import Future

            self._large = [
                i
                for i, value in enumerate(self._values)
                if not isinstance(value, Future) and sizeof(value) > min_bytes
            ]
        self._sent = list(self._values)
        self._scatter(self._large)

    @property
    def local(self):
        """``(args, kwargs)`` as given."""
        return self._split(self._values)

    @property
    def sent(self):
        """``(args, kwargs)`` with the large ones replaced by their futures."""
        return self._split(self._sent)

    def _split(self, values):
        return tuple(values[: self._n_args]), dict(
            zip(self._names, values[self._n_args :])
        )

    def _scatter(self, indices):
        if not indices:
            return
        # hash=False, as joblib does: hashed keys are unreliable when a task
        # on a worker scatters again (nested parallelism).
        futures = self._client.scatter(
            [self._values[i] for i in indices],
            hash=False,
            broadcast=self._broadcast,
            timeout=dask_timeout(),
        )
        for i, future in zip(indices, futures):
            self._sent[i] = future

    def _lost(self):
        """Indices of the arguments whose data no worker holds any more."""
        if not self._large:
            return []
        keys = [self._sent[i].key for i in self._large]
        # Client.who_has takes no timeout: the scheduler is asked directly.
        holders = self._client.sync(
            self._client.scheduler.who_has, keys=keys, callback_timeout=dask_timeout()
        )
        return [
            i
            for i, key in zip(self._large, keys)
            if self._sent[i].status != "finished" or not holders.get(key)
        ]

    def any_lost(self):
        return bool(self._lost())

    def scatter_lost(self):
        """Send again the arguments whose every copy was lost with a worker."""
        lost = self._lost()
        if lost:
            logger.warning("A dask worker holding the data was lost; sending it again.")
            self._scatter(lost)


def _dask_client():
    """The client of the active joblib backend when it is dask, else None."""
    backend, _ = get_active_backend()
    # joblib defines its dask backend in joblib._dask, imported when the
    # "dask" backend is first configured: absent, the backend is not dask.
    dask_module = sys.modules.get("joblib._dask")
    if dask_module is None or not isinstance(
        backend, dask_module.DaskDistributedBackend
    ):
        return None
    return backend.client


class Portable:
    """Pickles with host arrays and device strings; unpickles on its backend.

    For the problems that :func:`run_on_cluster` sends to dask workers. A
    problem holds device arrays and its array namespace: a namespace (a
    module) does not pickle, and a device array would come back on the
    device it was made on rather than the receiving worker's own (on
    dask-cuda, each worker's ``cuda:0`` is its card). Pickled, every device
    array becomes a host numpy array and its backend's strings, the
    namespace its module's name; unpickling re-creates them there.
    """

    def __getstate__(self):
        return {name: _portable(value) for name, value in vars(self).items()}

    def __setstate__(self, state):
        # Arrays first: re-creating a jax array configures jax before its
        # namespace is imported (skbatch/_backends/jax.py).
        restored = {name: _restored(value) for name, value in state.items()}
        vars(self).update(restored)
        vars(self).update(
            {
                name: importlib.import_module(value.name)
                for name, value in state.items()
                if isinstance(value, _Namespace)
            }
        )


@dataclass(frozen=True)
class _Namespace:
    name: str


@dataclass(frozen=True)
class _DeviceArray:
    array: np.ndarray
    backend: Backend


def _portable(value):
    if isinstance(value, types.ModuleType):
        return _Namespace(value.__name__)
    if isinstance(value, list | tuple):
        return type(value)(_portable(item) for item in value)
    if isinstance(value, dict):
        return {key: _portable(item) for key, item in value.items()}
    backend = backend_of_array(value)
    if backend is None:
        return value
    return _DeviceArray(to_numpy(value), backend)


def _restored(value):
    if isinstance(value, list | tuple):
        return type(value)(_restored(item) for item in value)
    if isinstance(value, dict):
        return {key: _restored(item) for key, item in value.items()}
    if isinstance(value, _DeviceArray):
        return value.backend.asarray(value.array)
    return value
