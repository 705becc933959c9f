"""Batches and factorisations side by side on a CPU backend's threads."""

import contextlib
import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor

from .. import _backends


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
    factorisations of :func:`skbatch._kernels.linalg.one_thread`: numpy and torch on
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
