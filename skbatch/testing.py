"""Utilities for testing code that uses skbatch without a GPU."""

import contextlib

from .oom import _SIMULATED_OOM_LIMIT

__all__ = ["simulate_oom"]


@contextlib.contextmanager
def simulate_oom(max_items):
    """Make every engine batch larger than ``max_items`` run out of memory.

    Inside the context the batching engine raises a device-style
    out-of-memory error (a :class:`RuntimeError` reading "CUDA out of
    memory") for any batch of more than ``max_items`` items, before the
    kernel runs. Recovery then splits the batch exactly as it would on a
    real GPU, so CPU-only test suites exercise that path. With a dask client
    active, the batches its workers run are limited too.

    Parameters
    ----------
    max_items : int
        Largest batch that still "fits", >= 1.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch import compute_oom_safe
    >>> from skbatch.testing import simulate_oom
    >>> with simulate_oom(max_items=1):
    ...     compute_oom_safe(lambda a: a * 10, np.arange(3))
    array([ 0, 10, 20])
    """
    if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 1:
        raise ValueError(f"max_items must be an int >= 1, got {max_items!r}")
    token = _SIMULATED_OOM_LIMIT.set(max_items)
    try:
        yield
    finally:
        _SIMULATED_OOM_LIMIT.reset(token)
