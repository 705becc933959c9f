"""gemm_update: C += alpha A B in place, against numpy's product."""

import ctypes

import numpy as np
import pytest
from numpy.testing import assert_allclose

from skbatch._kernels import blas
from skbatch._kernels.blas import gemm_update


def _operand(rng, shape, layout):
    """An array of ``shape`` laid out as ``layout``: C or F order, or a
    strided view (a slice of a bigger array, rows or columns contiguous)."""
    if layout in "CF":
        return np.asarray(rng.standard_normal(shape), order=layout)
    rows, cols = shape
    big = rng.standard_normal((rows + 3, cols + 5))
    view = big[1 : rows + 1, 2 : cols + 2]
    return (
        view
        if layout == "C view"
        else np.asfortranarray(big)[1 : rows + 1, 2:][:, :cols]
    )


@pytest.mark.parametrize("a_layout", ["C", "F", "C view", "F view"])
@pytest.mark.parametrize("b_layout", ["C", "F", "C view", "F view"])
@pytest.mark.parametrize("m, k, n", [(7, 5, 6), (1, 5, 6), (7, 1, 6), (7, 5, 1)])
def test_equals_numpy_for_any_layout(a_layout, b_layout, m, k, n):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    A, B = _operand(rng, (m, k), a_layout), _operand(rng, (k, n), b_layout)
    # C a slice of rows of a wider array: its rows are apart by more than n.
    C = rng.standard_normal((m + 2, n + 4))[1 : m + 1, :n]
    expected = C + 2.5 * (A @ B)
    before = A.copy(), B.copy()
    assert gemm_update(C, A, B, alpha=2.5) is C
    assert_allclose(C, expected, rtol=1e-13, atol=1e-13)
    assert_allclose(A, before[0], rtol=0, atol=0)
    assert_allclose(B, before[1], rtol=0, atol=0)


def test_strided_both_ways_is_copied_and_empty_products_leave_c():
    rng = np.random.default_rng(1)
    # Strided both ways, reversed, broadcast: copied.
    for A in (
        rng.standard_normal((12, 10))[::2, ::2],
        rng.standard_normal((6, 5))[::-1],
        np.broadcast_to(rng.standard_normal(5), (6, 5)),
    ):
        B = rng.standard_normal((5, 4))
        C = rng.standard_normal((6, 4))
        expected = C - A @ B
        gemm_update(C, A, B)
        assert_allclose(C, expected, rtol=1e-13, atol=1e-13)
    # Strides of no whole number of elements (float64 read every 12 bytes
    # of a byte buffer): copied, not read with a rounded stride.
    raw = np.zeros(6 * 12 * 5 + 8, dtype=np.uint8)
    A = np.lib.stride_tricks.as_strided(
        np.frombuffer(raw.data, dtype=np.float64, count=1),
        shape=(6, 5),
        strides=(60, 12),
    )
    A_values = rng.standard_normal((6, 5))
    for i in range(6):
        for j in range(5):
            raw[60 * i + 12 * j : 60 * i + 12 * j + 8] = np.frombuffer(
                A_values[i, j].tobytes(), dtype=np.uint8
            )
    assert_allclose(A, A_values, rtol=0, atol=0)
    B = rng.standard_normal((5, 4))
    C = rng.standard_normal((6, 4))
    expected = C - A_values @ B
    gemm_update(C, A, B)
    assert_allclose(C, expected, rtol=1e-13, atol=1e-13)
    # One row of C, whatever its row stride (a column's transpose).
    C = rng.standard_normal((4, 1)).T
    A, B = rng.standard_normal((1, 3)), rng.standard_normal((3, 4))
    expected = C - A @ B
    gemm_update(C, A, B)
    assert_allclose(C, expected, rtol=1e-13, atol=1e-13)
    for A, B, C in [
        (np.empty((3, 0)), np.empty((0, 4)), np.ones((3, 4))),
        (np.empty((0, 2)), np.ones((2, 4)), np.empty((0, 4))),
    ]:
        gemm_update(C, A, B)
        assert np.all(C == 1.0)


@pytest.mark.parametrize(
    "C, A, B, error, match",
    [
        (np.zeros((3, 4)), np.zeros((3, 2)), np.zeros((3, 4)), ValueError, "got C"),
        (np.zeros((3, 4)), np.zeros((2, 2)), np.zeros((2, 4)), ValueError, "got C"),
        (
            np.zeros((3, 4), dtype=np.float32),
            np.zeros((3, 2)),
            np.zeros((2, 4)),
            TypeError,
            "float64",
        ),
        (np.zeros((4, 3)).T, np.zeros((3, 2)), np.zeros((2, 4)), ValueError, "rows"),
    ],
)
def test_refuses_shapes_dtypes_and_c_it_cannot_update(C, A, B, error, match):
    with pytest.raises(error, match=match):
        gemm_update(C, A, B)


def test_dimensions_beyond_blas_int_are_refused():
    # A broadcast view of 2**31 rows costs no memory; BLAS's int cannot
    # index it.
    A = np.broadcast_to(np.zeros((1, 2)), (2**31, 2))
    C = np.broadcast_to(np.zeros((1, 1)), (2**31, 1))
    with pytest.raises(ValueError, match="2\\*\\*31"):
        gemm_update(C, A, np.zeros((2, 1)))


def test_read_only_c_is_refused():
    C = np.zeros((3, 4))
    C.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        gemm_update(C, np.zeros((3, 2)), np.zeros((2, 4)))


def test_releases_the_gil():
    # ctypes releases the GIL for a foreign function unless the function's
    # type carries FUNCFLAG_PYTHONAPI (PYFUNCTYPE's): threads side by side
    # run their products at the same time.
    product = blas._dgemm()
    assert not product._flags_ & ctypes._FUNCFLAG_PYTHONAPI
    assert product._restype_ is None
