"""Out-of-memory recognition and recovery by splitting.

A batch that runs out of memory is split in halves along axis 0 and the
halves are retried; inputs are never re-drawn, so the result is the one the
unsplit batch would have given. :class:`ChunkRunner` remembers the largest
chunk that succeeded so the engine starts later batches there instead of
failing at full size again.
"""

import contextvars
import threading

from array_api_compat import array_namespace

from .backend import backend_of_array

__all__ = ["ChunkRunner", "compute_oom_safe", "is_oom_error"]

# Set by skbatch.testing.simulate_oom: batches larger than this raise a
# device-style OOM, so CPU-only CI exercises the recovery path.
_SIMULATED_OOM_LIMIT = contextvars.ContextVar("skbatch_simulated_oom", default=None)

_OOM_CLASS_NAMES = ("OutOfMemoryError",)
_OOM_MESSAGES = ("out of memory", "resource_exhausted", "resource exhausted")


def is_oom_error(exc):
    """Whether an exception means a device or host ran out of memory.

    Parameters
    ----------
    exc : BaseException
        The exception to classify.

    Returns
    -------
    bool
        True for host :class:`MemoryError`, torch ``OutOfMemoryError``,
        CuPy ``OutOfMemoryError``, a :class:`RuntimeError` whose message says
        "out of memory", and JAX errors with ``RESOURCE_EXHAUSTED``. A
        :class:`ValueError` is never an OOM, even if it mentions memory (the
        budget preflight raises those on purpose).

    Examples
    --------
    >>> from skbatch.oom import is_oom_error
    >>> is_oom_error(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB"))
    True
    >>> is_oom_error(ValueError("not enough memory for n_bootstrap=10**9"))
    False
    """
    if isinstance(exc, ValueError):
        return False
    if isinstance(exc, MemoryError):
        return True
    if any(cls.__name__ in _OOM_CLASS_NAMES for cls in type(exc).__mro__):
        return True
    if isinstance(exc, RuntimeError) or type(exc).__name__.endswith("RuntimeError"):
        message = str(exc).lower()
        return any(text in message for text in _OOM_MESSAGES)
    return False


def _simulated_oom(n_items):
    limit = _SIMULATED_OOM_LIMIT.get()
    if limit is not None and n_items > limit:
        return RuntimeError(
            f"CUDA out of memory. Tried to allocate a batch of {n_items} items "
            f"(simulated: limit {limit} items)"
        )
    return None


class ChunkRunner:
    """Run a function over chunks of its inputs, splitting on OOM.

    Parameters
    ----------
    min_chunk : int, default=1
        Smallest chunk tried; an OOM at this size raises MemoryError.
    backend : Backend or None, default=None
        Its device cache is freed before each retry.
    hint : str, default="lower max_memory_gb or the batch size"
        What the final MemoryError tells the user to lower.

    Attributes
    ----------
    largest_ok : int or None
        Largest chunk size that succeeded after a split (None until the
        first OOM): the size to start later batches at.
    n_recoveries : int
        Number of OOM errors recovered from.
    n_calls : int
        Chunks tried: the calls of ``fn``, and the chunks that a simulated
        OOM (:func:`skbatch.testing.simulate_oom`) stopped in its place.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch.oom import ChunkRunner
    >>> from skbatch.testing import simulate_oom
    >>> runner = ChunkRunner()
    >>> with simulate_oom(max_items=3):
    ...     pieces = runner.run(lambda a: a * 2, np.arange(8))
    >>> [len(out) for _, _, out in pieces], runner.largest_ok
    ([2, 2, 2, 2], 2)
    """

    def __init__(
        self, min_chunk=1, backend=None, hint="lower max_memory_gb or the batch size"
    ):
        if min_chunk < 1:
            raise ValueError(f"min_chunk must be >= 1, got {min_chunk!r}")
        self.min_chunk = min_chunk
        self.backend = backend
        self.hint = hint
        self.largest_ok = None
        self.n_recoveries = 0
        self.n_calls = 0
        # Batches side by side run chunks of one runner from several threads.
        self._lock = threading.Lock()

    def run(self, fn, *arrays):
        """Apply ``fn`` to the arrays, split along axis 0 on OOM.

        Returns
        -------
        pieces : list of (start, stop, result)
            Results of ``fn`` on ``[a[start:stop] for a in arrays]``, in
            order, covering every row exactly once.
        """
        n = len(arrays[0])
        pieces = []
        self._run(fn, arrays, 0, n, pieces)
        return pieces

    def _run(self, fn, arrays, start, stop, pieces):
        size = stop - start
        with self._lock:
            self.n_calls += 1
        try:
            error = _simulated_oom(size)
            if error is not None:
                raise error
            result = fn(*(a[start:stop] for a in arrays))
        except Exception as exc:
            if not is_oom_error(exc):
                raise
            if size <= self.min_chunk:
                raise MemoryError(
                    f"Out of memory on a chunk of {size} item(s), the smallest "
                    f"allowed (min_chunk={self.min_chunk}); {self.hint}."
                ) from exc
        else:
            if self.n_recoveries and (
                self.largest_ok is None or size > self.largest_ok
            ):
                self.largest_ok = size
            pieces.append((start, stop, result))
            return
        # Retry outside the except block: while it runs, the exception's
        # traceback keeps the failed attempt's frames, and their device
        # memory, alive, so the cache could not be freed.
        with self._lock:
            self.n_recoveries += 1
        if self.backend is not None:
            self.backend.empty_cache()
        middle = start + max(size // 2, self.min_chunk)
        self._run(fn, arrays, start, middle, pieces)
        self._run(fn, arrays, middle, stop, pieces)


def _concatenate(results):
    first = results[0]
    if isinstance(first, tuple):
        return tuple(_concatenate([r[i] for r in results]) for i in range(len(first)))
    return array_namespace(first).concat(results, axis=0)


def compute_oom_safe(fn, *arrays, min_chunk=1, backend=None):
    """Call ``fn(*arrays)``; on OOM split along axis 0, retry, concatenate.

    Parameters
    ----------
    fn : callable
        Maps arrays with a common first axis to an array (or tuple of
        arrays) with the same first axis.
    *arrays : arrays
        Inputs, split together along axis 0. They are never re-drawn.
    min_chunk : int, default=1
        At this chunk size an OOM raises MemoryError saying what to lower.
    backend : Backend or None, default=None
        Its device cache is freed before each retry. By default, the
        backend of the first array (a torch or jax array's device; nothing
        to free for numpy).

    Returns
    -------
    array or tuple of arrays
        Same as ``fn(*arrays)`` would have returned without an OOM.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch import compute_oom_safe
    >>> from skbatch.testing import simulate_oom
    >>> with simulate_oom(max_items=2):
    ...     compute_oom_safe(lambda a: a + 1, np.arange(5))
    array([1, 2, 3, 4, 5])
    """
    if not arrays:
        raise ValueError("compute_oom_safe needs at least one array to split")
    if backend is None:
        backend = backend_of_array(arrays[0])
    pieces = ChunkRunner(min_chunk=min_chunk, backend=backend).run(fn, *arrays)
    return _concatenate([result for _, _, result in pieces])
