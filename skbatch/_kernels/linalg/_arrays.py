"""Array helpers every kernel shares: the namespace of arrays, scratch
buffers, products accumulated in a wider dtype, weighted centring."""

import contextlib

import numpy as np
from array_api_compat import array_namespace, is_numpy_array
from array_api_compat import device as array_device

from ... import _backends

# float64 bytes of each widened operand block of accumulated_matmul: large
# enough for full-rate GEMMs, a bounded temporary beside a batch.
ACCUMULATION_BLOCK_BYTES = 2**23
# An empty array whose namespace is array_api_compat's numpy (_namespace).
_NUMPY_PROBE = np.empty(0)


def center(A, sample_weight=None, *, fit_intercept=True, xp=None):
    """Centre columns on their (weighted) means and scale rows by sqrt(weight).

    The same preprocessing as scikit-learn's ``_preprocess_data`` with
    ``rescale_with_sw=True``: weighted least squares becomes ordinary least
    squares on the returned array.

    Parameters
    ----------
    A : array of shape (n_samples, n_columns)
        Design matrix or targets.
    sample_weight : array of shape (n_samples,), default=None
        Non-negative weights.
    fit_intercept : bool, default=True
        Whether to subtract the column means.

    Returns
    -------
    A_centered : array of shape (n_samples, n_columns)
    offset : array of shape (n_columns,)
        Subtracted means (zeros when ``fit_intercept`` is False).
    """
    xp = _namespace(xp, A)
    if sample_weight is not None:
        sample_weight = xp.astype(sample_weight, A.dtype, copy=False)
    if fit_intercept:
        # The mean of the columns shifted by their first row of positive
        # weight: a column constant on the rows that weigh is then exactly
        # 0 there once centred and its offset exactly its value, whatever
        # order its mean is summed in (which depends on the batch it is
        # in). Rounding noise in its place made its CV scores noise, and
        # the alpha chosen depend on the batch size; a row of weight 0 as
        # the anchor brought that noise back.
        anchor = _first_weighed_row(sample_weight, xp)
        A_centered = A - A[anchor : anchor + 1]
        shift = _average(A_centered, sample_weight, xp)
        offset = A[anchor] + shift
        library = _out_namespace(A_centered)
        if library is None:
            A_centered = A_centered - shift
        else:
            library.subtract(A_centered, shift, out=A_centered)
    else:
        offset = xp.zeros(A.shape[1], dtype=A.dtype, device=array_device(A))
        A_centered = A - offset
    if sample_weight is not None:
        A_centered = A_centered * xp.sqrt(sample_weight)[:, None]
    return A_centered, offset


def _first_weighed_row(sample_weight, xp):
    """Index of the first row of positive weight (0 without weights, or
    where none weighs)."""
    if sample_weight is None:
        return 0
    return int(xp.argmax(xp.astype(sample_weight > 0, xp.int8)))


def decomposition_dtype(X, xp):
    """float64 for float32 ``X`` on the CPU where the library has it, else X's."""
    if X.dtype != xp.float32 or _backends.of_array(X).device_of(X) != "cpu":
        return X.dtype
    return _criterion_dtype(X, xp)


def _cast(A, dtype, xp):
    return xp.astype(A, dtype, copy=False)


def accumulated_matmul(A, B, xp):
    """``A @ B`` in ``B``'s dtype, accumulated in float64 where float32 is
    decomposed in float64 (:func:`decomposition_dtype`: the CPU).

    The products that turn the factors into coefficients (:func:`project`,
    :func:`ridge_coef`) summed in float32 left coefficients up to 3x the
    error of scikit-learn's float32 ``Ridge`` (its SVD solver; 1.2x summed
    in float64). Both operands are widened a block at a time, at most
    ``ACCUMULATION_BLOCK_BYTES`` each, the sum over the inner dimension
    kept in float64.
    """
    wide = decomposition_dtype(B, xp)
    if wide == B.dtype:
        return A @ B
    m, k = A.shape
    t = B.shape[1]
    rows = max(1, ACCUMULATION_BLOCK_BYTES // (8 * m))
    width = max(1, ACCUMULATION_BLOCK_BYTES // (8 * max(m, min(rows, k))))
    out = _scratch((m, t), B.dtype, B, xp) if width < t else None
    columns = []
    for start in range(0, t, width):
        total = None
        for inner in range(0, k, rows):
            part = xp.astype(A[:, inner : inner + rows], wide) @ xp.astype(
                B[inner : inner + rows, start : start + width], wide
            )
            total = part if total is None else _add(total, part)
        if out is None:
            columns.append(xp.astype(total, B.dtype))
        else:
            out[:, start : start + width] = total
    if out is not None:
        return out
    return columns[0] if len(columns) == 1 else xp.concat(columns, axis=1)


def _add(A, B):
    """``A + B``, written into ``A`` where the library allows it."""
    library = _out_namespace(A)
    if library is None:
        return A + B
    return library.add(A, B, out=A)


def _average(A, sample_weight, xp):
    """Column means of ``A``, weighted by ``sample_weight`` when given."""
    if sample_weight is None:
        return xp.mean(A, axis=0)
    return sample_weight @ A / xp.sum(sample_weight)


def _out_namespace(array):
    """numpy or torch, whose functions write results into existing arrays (out=)."""
    return _backends.of_array(array).out_namespace()


def _scratch(shape, dtype, like, xp):
    """An uninitialised array to receive a result, or None (jax: immutable).

    A fresh n x t array per alpha costs more in page faults (allocations of
    megabytes are mapped anew each time) than the pass that fills it: reusing
    one buffer made the K-fold loop 30% faster on the CPU.
    """
    if _out_namespace(like) is None:
        return None
    return xp.empty(shape, dtype=dtype, device=array_device(like))


def _matmul(A, B, out=None):
    """``A @ B``, written into ``out`` when given."""
    if out is None:
        return A @ B
    return _out_namespace(out).matmul(A, B, out=out)


def _multiply(A, B, out=None):
    """``A * B`` (broadcast), written into ``out`` (any wider dtype) when given."""
    if out is None:
        return A * B
    return _out_namespace(out).multiply(A, B, out=out)


def _subtract(A, B):
    """``A - B``, written into ``B`` where the library allows it."""
    library = _out_namespace(B)
    if library is None:
        return A - B
    return library.subtract(A, B, out=B)


def column_sq_norms(A, xp):
    """Squared norm of every column, in one pass without a temporary (numpy)."""
    if is_numpy_array(A):
        return np.einsum("ij,ij->j", A, A)
    return xp.sum(A * A, axis=0)


def _criterion_dtype(array, xp):
    """float64 where the device has it (not MPS, not jax without x64)."""
    available = xp.__array_namespace_info__().dtypes(
        kind="real floating", device=array_device(array)
    )
    return xp.float64 if "float64" in available else array.dtype


def _as_float_array(values, like, xp):
    """``values`` (scalar or sequence) as a 1-d array of ``like``'s dtype and device."""
    return xp.reshape(
        xp.asarray(values, dtype=like.dtype, device=array_device(like)), (-1,)
    )


def _namespace(xp, *arrays):
    if xp is None:
        return array_namespace(*arrays)
    # numpy 1.x is no array API namespace itself (no astype, no
    # __array_namespace_info__): callers passing numpy get its wrapper.
    return array_namespace(_NUMPY_PROBE) if xp is np else xp


def one_thread(array):
    """Context for LAPACK factorisations (SVD, eigh, inverse) on the CPU.

    numpy's LAPACK and torch run each factorisation, and each small product
    of a batch of p x p matrices, on all threads, whose synchronisation
    costs more than the work: 2-15x slower than one thread on two busy
    cores (torch's batched inverse: 3.3 s against 0.1 s for 200
    replicates; a 2000 x 500 SVD: 0.4-10 s against 0.15 s). The big GEMMs
    keep every thread. GPUs and jax schedule their own kernels.
    """
    library = _backends.of_array(array)
    if library.device_of(array) != "cpu":
        return contextlib.nullcontext()
    return library.one_thread()


def _transpose(A, xp):
    """The batch of transposed matrices, as a view."""
    return xp.permute_dims(A, (0, 2, 1))
