"""jax on the devices "cpu" and "gpu:N".

jax is imported inside the functions, through :func:`import_jax`: importing
skbatch must not import it.
"""

import contextlib
import os
import sys

import numpy as np

from . import split_device

# jax grabs 75% of a GPU's memory when its GPU client starts unless told not
# to. skbatch sizes batches from the memory actually free and may share the
# card with torch, so when it is the one importing jax it asks for allocation
# on demand, unless the user has set this variable.
_PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"
# XLA schedules its kernels on its own pool of threads, which no call limits
# to one: jax batches run one at a time.
BATCHES_SIDE_BY_SIDE = False
# XLA compiles a kernel for every new array shape.
COMPILES_PER_SHAPE = True


def import_jax():
    """Import jax; the first import, by skbatch, turns off GPU preallocation.

    ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` is set only when jax is not yet
    imported (a user's own import of jax leaves the choice to them) and the
    variable is not set.
    """
    if "jax" not in sys.modules:
        os.environ.setdefault(_PREALLOCATE, "false")
    import jax

    return jax


def namespace():
    import_jax()
    import jax.numpy as xp

    return xp


def asarray(x, dtype, native):
    jax = import_jax()
    with context():
        return jax.device_put(np.asarray(x, dtype=dtype), native)


def to_numpy(x):
    return np.asarray(x)


def device_of(array):
    (device,) = array.devices()
    return "cpu" if device.platform == "cpu" else f"gpu:{device.id}"


def gpu_count():
    """Number of GPUs jax sees; 0 when it has no GPU backend."""
    jax = import_jax()
    try:
        return len(jax.devices("gpu"))
    except RuntimeError:
        return 0


def missing_reason(device):
    kind, index = split_device(device)
    if kind == "cpu":
        return None
    n_gpus = gpu_count()
    if n_gpus == 0:
        return "jax reports no GPU device"
    if index >= n_gpus:
        return f"jax sees {n_gpus} GPU device(s), no index {index}"
    return None


def native_device(device):
    kind, index = split_device(device)
    return import_jax().devices(kind)[index]


def device_name(device):
    return str(native_device(device).device_kind)


def context():
    """64-bit types enabled locally.

    float64 asked for by the caller is honoured without changing jax's global
    configuration.
    """
    return import_jax().enable_x64(True)


def empty_cache(device):
    """Nothing to release: XLA frees buffers as their arrays are collected."""


def uses_host_memory(device):
    return device == "cpu"


def free_bytes(native):
    """``bytes_limit - bytes_in_use`` of a device, or None if not measurable.

    Platforms without allocator statistics return None or raise; both mean
    that nothing can be measured.
    """
    try:
        stats = native.memory_stats()
    except Exception:
        return None
    if stats and "bytes_limit" in stats:
        return stats["bytes_limit"] - stats.get("bytes_in_use", 0)
    return None


def default_gpu():
    """The device jax computes on by default when that is a GPU, else None.

    jax is asked only when already imported: importing it takes seconds and
    starts its GPU client.
    """
    jax = sys.modules.get("jax")
    if jax is None or jax.default_backend() != "gpu":
        return None
    return jax.devices()[0]


def threads():
    """1: XLA schedules its own threads, which skbatch does not limit."""
    return 1


def one_thread():
    return contextlib.nullcontext()


def out_namespace():
    # jax arrays are immutable.
    return None


def take_rows(A, rows, out):
    """``A[rows]``, a new array: jax arrays are immutable, ``out`` is unused."""
    import_jax()
    import jax.numpy as jnp

    return jnp.take(A, rows, axis=0)


def solves_by_cholesky(device):
    return device != "cpu"


def svd(A):
    """Thin SVD of a matrix."""
    import_jax()
    import jax.numpy as jnp

    return jnp.linalg.svd(A, full_matrices=False)


def spd_inverse(A):
    """Inverses of a batch of symmetric positive definite matrices.

    ``jnp.linalg.inv``: a singular matrix gives infinities or NaNs, which the
    caller's condition test rejects, rather than None.
    """
    import_jax()
    import jax.numpy as jnp

    return jnp.linalg.inv(A)


def cholesky(A):
    """Lower Cholesky factors of a batch; a failed factorisation gives NaNs."""
    import_jax()
    import jax.scipy.linalg

    factor, _ = jax.scipy.linalg.cho_factor(A, lower=True)
    return factor


def cholesky_solve(factor, B):
    import_jax()
    import jax.scipy.linalg

    return jax.scipy.linalg.cho_solve((factor, True), B)
