"""Memory budgets and batch sizes.

Inside skbatch memory is counted in bytes; public parameters take decimal
gigabytes (1 GB = 1e9 bytes) and are converted once, here. The host (RAM)
and the device (GPU memory) are separate budgets: results retained on the
host are charged to RAM, working sets of kernels to the device.

skbatch's own loops size their batches with :func:`memory_budget` and
:func:`auto_batch_size`, through the engine (``skbatch._engine.plan_batches``,
from what each problem states). :func:`get_available_memory_gb` and
:func:`compute_batch_size` keep the signatures known from JAX statistics
code, for callers outside skbatch that batch a ``jax.lax.map`` themselves;
skbatch does not call them.
"""

import math
import operator
import os
import warnings

import psutil

from . import _backends

__all__ = [
    "auto_batch_size",
    "auto_n_jobs",
    "compute_batch_size",
    "get_available_memory_gb",
    "memory_budget",
]

GB = 1e9
# Share of free CUDA / JAX device memory that batches may take: the rest is
# left for the allocator's fragmentation and for other processes.
DEVICE_FREE_FRACTION = 0.8
# Share of available host RAM that batches may take: the rest is for the
# user's own arrays, the OS and other programs.
HOST_AVAILABLE_FRACTION = 0.5
# Used (with a warning) when nothing can be measured.
FALLBACK_BUDGET_GB = 4.0
# Batches bigger than this are not faster (the GEMMs are already at peak)
# and starve unified-memory hosts, so a measured budget is capped here.
BATCHING_CAP_GB = 8.0
# compute_batch_size keeps this share of its budget in reserve for
# temporaries that a per-item estimate does not see.
SAFETY_MARGIN = 0.3
# get_available_memory_gb never reports less than this, so a momentarily
# busy host still gets usable batches from compute_batch_size.
MIN_BUDGET_GB = 0.5


def _check_positive_gb(name, value):
    try:
        ok = value > 0 and math.isfinite(value)
    except TypeError:
        raise TypeError(
            f"{name} must be a positive number of GB, got {type(value).__name__}: "
            f"{value!r}"
        ) from None
    if not ok:
        raise ValueError(f"{name} must be a finite number > 0 (GB), got {value!r}")
    return float(value)


def _check_n_items(n_items):
    try:
        n_items = operator.index(n_items)
    except TypeError:
        raise TypeError(f"n_items must be an int, got {n_items!r}") from None
    if n_items <= 0:
        raise ValueError(f"n_items must be >= 1, got {n_items!r}")
    return n_items


def get_available_memory_gb():
    """Memory available to computations now, in decimal GB.

    Returns
    -------
    float
        When JAX computes on a GPU (jax is imported and its default backend
        is ``"gpu"``): the first device's ``bytes_limit - bytes_in_use``
        (``memory_stats()``). Otherwise available host RAM (psutil). At
        least 0.5 GB; 4 GB, with a warning, when the query fails.

    Examples
    --------
    >>> from skbatch import get_available_memory_gb
    >>> get_available_memory_gb() >= 0.5
    True
    """
    jax_backend = _backends.get("jax")
    try:
        device = jax_backend.default_gpu()
        if device is not None:
            available = jax_backend.free_bytes(device)
            if available is None:
                raise RuntimeError("the GPU reports no memory statistics")
        else:
            available = psutil.virtual_memory().available
    except Exception as exc:
        _warn_unmeasurable(f"Cannot measure available memory ({exc})")
        return FALLBACK_BUDGET_GB
    return max(available / GB, MIN_BUDGET_GB)


def _warn_unmeasurable(what):
    warnings.warn(
        f"{what}; assuming {FALLBACK_BUDGET_GB} GB. Pass max_memory_gb to set it.",
        UserWarning,
        stacklevel=3,
    )


def _host_budget_gb():
    try:
        available = psutil.virtual_memory().available
    except Exception as exc:
        _warn_unmeasurable(f"Cannot measure available host memory ({exc})")
        return FALLBACK_BUDGET_GB
    return available / GB * HOST_AVAILABLE_FRACTION


def _device_budget_gb(backend):
    """Budget on a device with its own memory (CUDA, jax GPU), from its free memory.

    A query that fails falls back on the host budget; a device that keeps no
    statistics, on ``FALLBACK_BUDGET_GB``.
    """
    device = backend.native_device()
    try:
        free = _backends.get(backend.library).free_bytes(device)
    except Exception as exc:
        warnings.warn(
            f"Cannot measure free memory on {backend.name} ({backend.device}): "
            f"{exc}; using the host budget. Pass max_memory_gb to set it.",
            UserWarning,
            stacklevel=3,
        )
        return _host_budget_gb()
    if free is None:
        _warn_unmeasurable(
            f"Cannot measure free memory on {backend.name} ({backend.device})"
        )
        return FALLBACK_BUDGET_GB
    return free / GB * DEVICE_FREE_FRACTION


def memory_budget(backend=None, max_memory_gb=None, *, for_batching=False):
    """How much memory work may use, in decimal GB.

    Parameters
    ----------
    backend : Backend or None, default=None
        Where the memory is: None or a CPU backend for host RAM, a GPU
        backend for its device memory.
    max_memory_gb : float or None, default=None
        Explicit budget. It wins, uncapped, and must be > 0.
    for_batching : bool, default=False
        Cap a measured budget at ``BATCHING_CAP_GB`` (8 GB): bigger batches
        are not faster. The cap bounds one batch; whether the data and one
        item fit at all is decided against the uncapped budget.

    Returns
    -------
    budget_gb : float
        CUDA: free memory x 0.8 (the host budget, with a warning, when the
        query fails). JAX GPU: (``bytes_limit`` - ``bytes_in_use``) x 0.8.
        CPU and MPS: available RAM x 0.5. Unmeasurable: 4 GB, with a
        warning.

    Examples
    --------
    >>> from skbatch import memory_budget
    >>> memory_budget(max_memory_gb=2.5)
    2.5
    >>> 0 < memory_budget(for_batching=True) <= 8.0
    True
    """
    if max_memory_gb is not None:
        return _check_positive_gb("max_memory_gb", max_memory_gb)
    if backend is None or _backends.get(backend.library).uses_host_memory(
        backend.device
    ):
        budget = _host_budget_gb()
    else:
        budget = _device_budget_gb(backend)
    if for_batching:
        budget = min(budget, BATCHING_CAP_GB)
    return budget


def auto_batch_size(n_items, bytes_per_item, *, budget_gb, overhead=1.0):
    """Largest batch of items that fits a budget.

    Parameters
    ----------
    n_items : int
        Number of items (targets, replicates, permutations), >= 1.
    bytes_per_item : float
        Memory one item needs, >= 0.
    budget_gb : float
        Budget in decimal GB, > 0.
    overhead : float, default=1.0
        Multiplier (>= 1) on ``bytes_per_item`` for temporaries.

    Returns
    -------
    batch_size : int
        Items per batch, in ``[1, n_items]``.
    n_batches : int
        ``ceil(n_items / batch_size)``.

    Raises
    ------
    ValueError
        When a single item does not fit, with both figures.

    Examples
    --------
    >>> from skbatch import auto_batch_size
    >>> auto_batch_size(1000, 1e6, budget_gb=0.1)
    (100, 10)
    """
    n_items = _check_n_items(n_items)
    if not (bytes_per_item >= 0 and math.isfinite(bytes_per_item)):
        raise ValueError(
            f"bytes_per_item must be a finite number >= 0, got {bytes_per_item!r}"
        )
    if not (overhead >= 1 and math.isfinite(overhead)):
        raise ValueError(f"overhead must be a finite number >= 1, got {overhead!r}")
    budget = _check_positive_gb("budget_gb", budget_gb) * GB
    need = bytes_per_item * overhead
    if need > budget:
        raise ValueError(
            f"One item needs {need / GB:.3g} GB but the memory budget is "
            f"{budget / GB:.3g} GB; raise max_memory_gb or reduce the size of an "
            f"item (fewer samples or features)."
        )
    # min before int: budget // need is inf for a tiny (sub-byte) need.
    batch = n_items if need == 0 else int(min(n_items, budget // need))
    return batch, math.ceil(n_items / batch)


def compute_batch_size(
    *, n_items, bytes_per_item, max_mem=None, min_batch=64, max_batch=8192
):
    """Batch size for ``jax.lax.map(..., batch_size=...)`` style loops.

    Parameters
    ----------
    n_items : int
        Number of items, >= 1.
    bytes_per_item : float
        Memory one item needs, > 0.
    max_mem : float or None, default=None
        Fraction of the available memory (:func:`get_available_memory_gb`)
        to use; default 0.5, clamped to
        ``[0.01, 1]``.
    min_batch, max_batch : int, default=64, 8192
        Bounds of the result (each capped at ``n_items``).

    Returns
    -------
    int
        ``usable / bytes_per_item`` where usable is the ``max_mem``
        fraction of :func:`get_available_memory_gb` (at least 0.5 GB) less a
        30% safety margin, clamped to ``[min(min_batch, n_items),
        min(max_batch, n_items)]``.

    Examples
    --------
    >>> from skbatch import compute_batch_size
    >>> compute_batch_size(n_items=10, bytes_per_item=1e3)
    10
    >>> compute_batch_size(n_items=10**6, bytes_per_item=1e12)
    64
    """
    n_items = _check_n_items(n_items)
    if not (bytes_per_item > 0 and math.isfinite(bytes_per_item)):
        raise ValueError(
            f"bytes_per_item must be a finite number > 0, got {bytes_per_item!r}"
        )
    if min_batch < 1 or max_batch < min_batch:
        raise ValueError(
            f"need 1 <= min_batch <= max_batch, got min_batch={min_batch!r}, "
            f"max_batch={max_batch!r}"
        )
    fraction = 0.5 if max_mem is None else min(max(float(max_mem), 0.01), 1.0)
    # get_available_memory_gb is floored at MIN_BUDGET_GB; max_mem and the
    # margin then apply to it, so a small max_mem is honoured.
    usable_gb = get_available_memory_gb() * fraction * (1 - SAFETY_MARGIN)
    batch = usable_gb * GB // bytes_per_item
    return int(min(max(batch, min(min_batch, n_items)), min(max_batch, n_items)))


def auto_n_jobs(n_tasks=None, bytes_per_worker=0, *, max_memory_gb=None, n_jobs=None):
    """How many CPU workers fit in the host budget.

    Parameters
    ----------
    n_tasks : int or None, default=None
        Number of tasks; never more workers than tasks.
    bytes_per_worker : float, default=0
        Memory each worker copies (data, model, results in flight).
    max_memory_gb : float or None, default=None
        Host budget; default measured (:func:`memory_budget`).
    n_jobs : int or None, default=None
        Requested workers, joblib convention (None: 1, -1: all cores).

    Returns
    -------
    int
        Workers to start, >= 1.

    Examples
    --------
    >>> from skbatch import auto_n_jobs
    >>> auto_n_jobs(1, n_jobs=-1)
    1
    >>> auto_n_jobs(100, 3e9, max_memory_gb=6.0, n_jobs=8)
    2
    """
    n_cpus = os.cpu_count() or 1
    if n_jobs is None:
        wanted = 1
    elif n_jobs < 0:
        wanted = max(n_cpus + 1 + n_jobs, 1)
    elif n_jobs == 0:
        raise ValueError("n_jobs == 0 has no meaning; use None, a positive int or -1")
    else:
        wanted = n_jobs
    if bytes_per_worker > 0:
        budget = memory_budget(None, max_memory_gb) * GB
        wanted = min(wanted, max(int(budget // bytes_per_worker), 1))
    if n_tasks is not None:
        wanted = min(wanted, max(n_tasks, 1))
    return max(wanted, 1)


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
