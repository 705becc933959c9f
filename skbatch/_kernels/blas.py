"""An in-place GEMM that lets other threads run: ``C += alpha A B``.

numpy's ``matmul`` releases the GIL but has no ``beta``: ``C -= A @ B``
makes ``A @ B`` and then subtracts it, a second pass over ``C``. scipy's
``scipy.linalg.blas.dgemm`` takes ``beta`` but holds the GIL for the whole
product, so threads that each call it run one at a time. :func:`gemm_update`
calls the same BLAS routine through the function pointer that
:mod:`scipy.linalg.cython_blas` exports for compiled callers, by
:mod:`ctypes`, which releases the GIL for the call: ``beta = 1`` on threads
side by side.
"""

import ctypes
import functools

import numpy as np
import scipy.linalg.cython_blas

__all__ = ["gemm_update"]

_INT = ctypes.POINTER(ctypes.c_int)
_MAX_INT = 2**31 - 1
_DOUBLE = ctypes.POINTER(ctypes.c_double)


@functools.cache
def _dgemm():
    """scipy's ``dgemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta,
    c, ldc)`` (column-major, every argument by pointer) as a ctypes
    function."""
    capsule = scipy.linalg.cython_blas.__pyx_capi__["dgemm"]
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    pointer = ctypes.pythonapi.PyCapsule_GetPointer
    pointer.restype = ctypes.c_void_p
    pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    address = pointer(capsule, name(capsule))
    prototype = ctypes.CFUNCTYPE(
        None,
        ctypes.c_char_p,
        ctypes.c_char_p,
        _INT,
        _INT,
        _INT,
        _DOUBLE,
        _DOUBLE,
        _INT,
        _DOUBLE,
        _INT,
        _DOUBLE,
        _DOUBLE,
        _INT,
    )
    return prototype(address)


def _layout(A):
    """How BLAS reads ``A`` (2-D) where it is: ``(rows contiguous, leading
    dimension)``, rows contiguous when the memory, read column-major, holds
    ``A.T``; None where neither its rows nor its columns are contiguous."""
    rows, cols = A.shape
    if A.size == 0:
        # Nothing is read: any strides will do.
        return True, max(cols, 1)
    if not A.flags.aligned or any(s % A.itemsize for s in A.strides):
        # Strides that are no whole number of elements: BLAS cannot say them.
        return None
    row_stride, col_stride = (s // A.itemsize for s in A.strides)
    # A stride along an axis of length 1 is never used: any will do.
    if col_stride == 1 or cols <= 1:
        ld = row_stride if rows > 1 else max(cols, 1)
        if ld >= max(cols, 1):
            return True, ld
    if row_stride == 1 or rows <= 1:
        ld = col_stride if cols > 1 else max(rows, 1)
        if ld >= max(rows, 1):
            return False, ld
    return None


def _operand(A):
    """``(A or a contiguous copy of it, rows contiguous, leading
    dimension)``, as :func:`_layout`."""
    layout = _layout(A)
    if layout is None:
        A = np.ascontiguousarray(A)
        layout = True, max(A.shape[1], 1)
    return (A, *layout)


def gemm_update(C, A, B, alpha=-1.0):
    """``C += alpha * A @ B`` in place, the GIL released during the product.

    Parameters
    ----------
    C : ndarray of shape (m, n), float64
        Rows contiguous (C order, or a slice of rows of it); updated in
        place.
    A : ndarray of shape (m, k), float64
    B : ndarray of shape (k, n), float64
        Either order; a copy is made of an operand whose rows and columns
        are both strided.
    alpha : float, default=-1.0

    Returns
    -------
    C : ndarray
        ``C`` itself.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._kernels.blas import gemm_update
    >>> rng = np.random.default_rng(0)
    >>> A, B, C = rng.random((3, 4)), rng.random((4, 5)), rng.random((3, 5))
    >>> expected = C - A @ B
    >>> bool(np.allclose(gemm_update(C, A, B), expected))
    True
    """
    (m, k), (k_b, n) = A.shape, B.shape
    if C.shape != (m, n) or k_b != k:
        raise ValueError(
            f"gemm_update takes C (m, n), A (m, k) and B (k, n); got C "
            f"{C.shape}, A {A.shape} and B {B.shape}."
        )
    if not all(X.dtype == np.float64 for X in (A, B, C)):
        raise TypeError(
            f"gemm_update takes float64 arrays; got {A.dtype}, {B.dtype} and {C.dtype}."
        )
    if max(m, n, k) > _MAX_INT:
        raise ValueError(
            f"gemm_update takes dimensions below 2**31 (BLAS's int); got C "
            f"{C.shape}, A {A.shape} and B {B.shape}."
        )
    layout = _layout(C)
    if layout is None or not layout[0] or not C.flags.writeable:
        raise ValueError(
            "gemm_update updates C in place: C must be writeable with its rows "
            "contiguous (C order, or a slice of rows of such an array)."
        )
    if m == 0 or n == 0 or k == 0:
        return C
    ldc = layout[1]
    # Row-major C is column-major C.T: C.T += alpha B.T A.T.
    B, B_rows, ldb = _operand(B)
    A, A_rows, lda = _operand(A)
    if max(lda, ldb, ldc) > _MAX_INT:
        raise ValueError(
            f"gemm_update takes rows apart by fewer than 2**31 elements (BLAS's "
            f"int); got leading dimensions {lda}, {ldb} and {ldc}."
        )
    integer = ctypes.c_int
    _dgemm()(
        b"N" if B_rows else b"T",
        b"N" if A_rows else b"T",
        ctypes.byref(integer(n)),
        ctypes.byref(integer(m)),
        ctypes.byref(integer(k)),
        ctypes.byref(ctypes.c_double(alpha)),
        B.ctypes.data_as(_DOUBLE),
        ctypes.byref(integer(ldb)),
        A.ctypes.data_as(_DOUBLE),
        ctypes.byref(integer(lda)),
        ctypes.byref(ctypes.c_double(1.0)),
        C.ctypes.data_as(_DOUBLE),
        ctypes.byref(integer(ldc)),
    )
    return C
