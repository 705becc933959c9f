"""What differs between the array libraries, in one module per library.

``numpy.py``, ``torch.py`` and ``jax.py`` implement the same surface of
module-level functions. Devices are skbatch's device strings (``"cpu"``,
``"cuda:0"``, ``"mps"``, ``"gpu:1"``), never live device objects, except
where a function says it takes the library's own device object (``native``).

Every library provides:

- ``namespace()``: the array-API namespace of the library.
- ``asarray(x, dtype, native)``: ``x`` (host data or an array of any of the
  libraries) as an array of this library on the device ``native``;
  ``dtype`` is a numpy dtype or None.
- ``to_numpy(x)``: a host numpy copy of an array of this library.
- ``device_of(array)``: the device string of an array of this library.
- ``missing_reason(device)``: why the device cannot compute in this
  process, or None; called once the library is known to be installed.
- ``native_device(device)``: the library's device object (None for numpy).
- ``context()``: the context in which the library computes.
- ``empty_cache(device)``: release the memory the library caches there.
- ``uses_host_memory(device)``: whether the device computes in host RAM (the
  CPU, or unified memory); its budget is then the host's.
- ``threads()`` and ``one_thread()``: the number of CPU threads the library
  runs on, and a context that runs it on one thread. Thread counts belong to
  the process: ``one_thread`` is safe to enter from several threads at once
  (see :class:`skbatch._backends._threads.SharedLimit`).
- ``BATCHES_SIDE_BY_SIDE``: whether batches side by side on CPU threads,
  each on one library thread, beat one batch at a time on all threads
  (numpy and torch; see :func:`skbatch._backends.side_by_side.cpu_workers`).
- ``COMPILES_PER_SHAPE``: whether each new array shape costs a compilation
  (jax), so that kernels keep shapes fixed rather than skip work by shape.
- ``out_namespace()``: the module whose ``matmul``, ``multiply`` and
  ``subtract`` write into an existing array (``out=``), or None when arrays
  are immutable.
- ``take_rows(A, rows, out)``: ``A[rows]`` for in-range ``rows``, written
  into ``out`` where arrays are mutable (a new array on jax).
- ``solves_by_cholesky(device)``: whether a batched Cholesky solve beats
  inverting small matrices there.
- ``svd(A)``: the thin SVD ``U, s, Vt`` of a matrix (numpy's through
  scipy's LAPACK).
- ``spd_inverse(A)``: the inverses of a batch of symmetric positive definite
  matrices, or None when a factorisation fails (jax gives infinities or
  NaNs instead). Below ``SPD_CHOLESKY_MIN_SIZE`` an LU inverse, which
  refuses only a singular matrix, not an indefinite one.

and, for the devices for which they are asked: ``device_name(device)`` (an
accelerator's hardware name), ``free_bytes(native)`` (free memory of a
device that does not use host memory, in bytes, or None when not
measurable), ``cholesky(A)`` and ``cholesky_solve(factor, B)`` (where
``solves_by_cholesky`` can be true; a failed factorisation gives None or a
factor with NaNs).

A library module imports its library inside its functions, never at module
level: importing skbatch, or unpickling a model, must not import torch or
jax.

To add a backend: write ``_backends/<library>.py`` with this surface, add
its name to ``LIBRARIES`` below, and add its devices to the device-spec
table of ``skbatch/backend.py``: its backend names (``_NAMED``), its device
strings (``_DEVICE_PATTERN``), the specs users may pass (``_ALLOWED_SPECS``)
and, for an accelerator, its place among the GPUs that ``device="gpu"``
tries (``_GPUS``).
"""

import importlib

import numpy as np
from array_api_compat import is_jax_array, is_torch_array

# spd_inverse inverts matrices of at least this size one at a time through
# LAPACK's Cholesky inverse; smaller ones by the library's batched LU
# inverse, whose cost per matrix (0.1-4 us up to 16 x 16) is below the
# per-call overhead of the loop (1.5-4 us; benchmarks/RESULTS.md).
SPD_CHOLESKY_MIN_SIZE = 20

# The registry: each name is a module of this package.
LIBRARIES = ("numpy", "torch", "jax")


def get(library):
    """The module of ``library``, one of :data:`LIBRARIES`."""
    return importlib.import_module(f"{__name__}.{library}")


def library_of(array):
    """The library that holds ``array``: "torch", "jax", else "numpy" (host data).

    Asks ``array_api_compat``, which never imports a library to answer.
    """
    if isinstance(array, np.ndarray):
        return "numpy"
    if is_torch_array(array):
        return "torch"
    if is_jax_array(array):
        return "jax"
    return "numpy"


def of_array(array):
    """The module of the library that holds ``array``."""
    return get(library_of(array))


def to_numpy(x):
    """A host numpy array of ``x``; numpy input is returned as is."""
    if isinstance(x, np.ndarray):
        return x
    return of_array(x).to_numpy(x)


def split_device(device):
    """``"cuda:1"`` -> ``("cuda", 1)``; a device without index is index 0."""
    kind, _, index = device.partition(":")
    return kind, int(index) if index else 0
