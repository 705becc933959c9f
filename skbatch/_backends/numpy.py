"""numpy: the host library. Its arrays live in RAM; its one device is "cpu"."""

import contextlib
import functools

import numpy as np
import threadpoolctl

from . import SPD_CHOLESKY_MIN_SIZE
from . import to_numpy as _host_array
from ._threads import SharedLimit

# numpy's elementwise passes (residuals, squares, reductions) run on one
# core while a multi-threaded GEMM waits for them (see
# skbatch/_backends/side_by_side.py, cpu_workers).
BATCHES_SIDE_BY_SIDE = True
# numpy runs every shape through the same compiled loops and BLAS calls.
COMPILES_PER_SHAPE = False


def namespace():
    import array_api_compat.numpy as xp

    return xp


def asarray(x, dtype, native):
    return np.asarray(_host_array(x), dtype=dtype)


def to_numpy(x):
    return np.asarray(x)


def device_of(array):
    return "cpu"


def missing_reason(device):
    return None


def native_device(device):
    return None


def context():
    return contextlib.nullcontext()


def empty_cache(device):
    """Nothing to release: numpy frees its arrays as they go."""


def uses_host_memory(device):
    return True


@functools.cache
def _threadpools():
    return threadpoolctl.ThreadpoolController()


def threads():
    """Threads of numpy's BLAS (the most of its libraries)."""
    return max(
        (
            pool["num_threads"]
            for pool in _threadpools().info()
            if pool["user_api"] == "blas"
        ),
        default=1,
    )


def _release_openblas():
    """Let any thread set OpenBLAS's thread count again.

    threadpoolctl (3.8 on) ignores a count set by another thread than the
    one that set it last, until that one releases it; the shared limit is
    set and restored by whichever threads come first and leave last.
    """
    controller = getattr(threadpoolctl, "OpenBLASController", None)
    if hasattr(controller, "clear_controlling_thread"):
        controller.clear_controlling_thread(force=True)


def _blas_one_thread():
    limiter = _threadpools().limit(limits=1, user_api="blas")
    _release_openblas()

    def restore():
        limiter.restore_original_limits()
        _release_openblas()

    return restore


_ONE_THREAD = SharedLimit(_blas_one_thread)


def one_thread():
    """Context in which numpy's BLAS runs on one thread."""
    return _ONE_THREAD.hold()


def out_namespace():
    return np


def take_rows(A, rows, out):
    """``A[rows]`` written into ``out``.

    ``mode="clip"``, as ``rows`` are in range: in its default mode numpy
    gathers into a buffer, then copies it into ``out``.
    """
    return np.take(A, rows, axis=0, out=out, mode="clip")


def solves_by_cholesky(device):
    # numpy has no batched Cholesky solve (see skbatch/_kernels/linalg/weighted.py,
    # _solve_spd).
    return False


def svd(A):
    """Thin SVD of a matrix, by LAPACK's ``gesdd`` through numpy.

    numpy's wrapper releases the GIL; scipy's (f2py) holds it, so SVDs run
    side by side in threads
    (``skbatch._backends.side_by_side.map_threads``: the folds of
    a K-fold scheme, the candidates of a banded search) ran one at a time
    through scipy: 20 SVDs of 240 x 240 took 0.32 s on one thread or two
    through scipy, 0.16 s on two through numpy, whose one-thread SVD is as
    fast here (numpy 2.4, benchmarks/RESULTS.md). U and Vt are returned
    C-ordered: LAPACK writes them Fortran-ordered, and the products with a
    Fortran U rounded a target's results differently by batch size.
    """
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    return np.ascontiguousarray(U), s, np.ascontiguousarray(Vt)


def spd_inverse(A):
    """Inverses of a batch of symmetric positive definite matrices, or None.

    LAPACK's Cholesky inverse (potrf, potri) of each matrix from
    ``SPD_CHOLESKY_MIN_SIZE`` on: half the work of ``np.linalg.inv``'s LU
    solve against the identity, 2-2.5x faster at 100 x 100
    (benchmarks/RESULTS.md). Smaller matrices by ``np.linalg.inv`` at once.
    None when a factorisation fails: a matrix not positive definite to
    working precision from ``SPD_CHOLESKY_MIN_SIZE`` on, an exactly singular
    one below it.
    """
    if A.shape[-1] < SPD_CHOLESKY_MIN_SIZE:
        try:
            return np.linalg.inv(A)
        except np.linalg.LinAlgError:
            return None
    from scipy.linalg import lapack

    potrf, potri = lapack.get_lapack_funcs(("potrf", "potri"), (A,))
    inverse = np.array(A, order="C")
    for matrix in inverse:
        # The transposed view of a C-ordered symmetric matrix is the matrix,
        # Fortran-ordered, as LAPACK takes it and overwrites.
        factor, info = potrf(matrix.T, overwrite_a=True, clean=False)
        if info != 0:
            return None
        result, info = potri(factor, overwrite_c=True)
        if info != 0:
            return None
        if not np.may_share_memory(result, matrix):
            matrix.T[...] = result
    # potri leaves the inverse in the upper triangle of the Fortran-ordered
    # view, the lower one of each C-ordered matrix: mirror it.
    rows, columns = np.triu_indices(A.shape[-1], 1)
    inverse[:, rows, columns] = inverse[:, columns, rows]
    return inverse
