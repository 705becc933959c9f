"""Memory the preflights charge against what the work they plan measures.

Each test measures the peak of the real computation with tracemalloc (numpy
and scipy allocate through Python's tracked allocator) and checks the bytes
charged from the shapes alone cover it: a preflight that undercounts lets a
run past that cannot finish.
"""

import tracemalloc
from types import SimpleNamespace

import numpy as np
import pytest

from skbatch._ridge import RidgeSolver, cv_scheme
from skbatch.backend import Backend


def _traced_peak(fn):
    """Peak bytes ``fn()`` allocates beyond what was held when it started."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, peak - base


@pytest.mark.parametrize("shape", [(600, 80), (80, 600)])
@pytest.mark.parametrize("cv", [None, 3])
@pytest.mark.parametrize("graded", [False, True])
def test_float32_solver_charges_its_float64_decomposition(shape, cv, graded):
    # float32 on the CPU is decomposed in float64 (skbatch._linalg.
    # svd_decompose): the solver's charge must cover that transient, which
    # X, its centred copy and the float32 SVD alone (the held figure) miss.
    n, p = shape
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, p)).astype(np.float32)
    if graded:
        # Column norms 1e3 apart: the graded path, with its residual check.
        X[:, 0] *= 1e3
    scheme = cv_scheme(cv).split(X, X[:, :1])
    backend = Backend("numpy")
    _, peak = _traced_peak(
        lambda: RidgeSolver(
            X,
            None,
            np.array([1.0]),
            scheme,
            backend,
            np.float32,
            fit_intercept=True,
            scoring=None,
        )
    )
    charged = RidgeSolver.nbytes(n, p, scheme, 4, backend=backend)
    rank = min(n, p)
    held = 4 * (2 * n * p + (n + p) * rank) + scheme.nbytes(p, 4)
    assert peak > 2 * held, "the float64 transient this test guards is gone"
    assert charged >= peak
    # The default (no backend) charges as the CPU does, every SVD at once.
    assert RidgeSolver.nbytes(n, p, scheme, 4) >= charged


def test_float64_and_gpu_solvers_charge_no_float64_copy():
    n, p = 600, 80
    scheme = cv_scheme(None)
    held = 8 * (2 * n * p + (n + p) * p)
    assert RidgeSolver.nbytes(n, p, scheme, 8, backend=Backend("numpy")) == held
    # A GPU decomposes float32 in float32: only is_gpu is read.
    gpu = SimpleNamespace(is_gpu=True)
    assert RidgeSolver.svd_workspace(n, p, 4, backend=gpu) == 0
