"""Data whose scale the compute dtype cannot represent, refused before any work.

``X`` must fit the compute dtype with room for its column sums, and the
squared errors of ``y`` that score alpha must neither overflow nor
underflow it: :func:`checked_targets` checks both, for every ridge fit of
targets (``BatchedRidge``, ``BandedRidge``), targets on disk as each batch
is read.
"""

import functools

import numpy as np

from .._engine.targets import TargetColumns

__all__ = ["checked_targets"]


def _column_magnitudes(A):
    """Largest absolute value of each column, without an abs() copy of A.

    In float64 whatever A holds: booleans cannot be negated, and the most
    negative integer has no positive counterpart.
    """
    high = np.max(A, axis=0).astype(np.float64, copy=False)
    low = np.min(A, axis=0).astype(np.float64, copy=False)
    return np.maximum(high, -low)


def _check_magnitudes(X, dtype):
    """Refuse an X whose scale the computation cannot represent.

    The SVD path never squares X (see ``skbatch._kernels.linalg._ridge_factors``):
    X only has to fit the compute dtype, with room for its column sums (the
    means), and no column may be subnormal there (the cast to float32 would
    flush it to zero).
    """
    finfo = np.finfo(dtype)
    n_samples = X.shape[0]
    largest_sum = float(finfo.max) / n_samples
    smallest = float(finfo.smallest_normal)
    fix = "rescale it, e.g. with sklearn.preprocessing.StandardScaler"
    columns = _column_magnitudes(X)
    largest = float(columns.max())
    if largest > largest_sum:
        raise ValueError(
            f"X has values up to {largest:.3g} in magnitude, beyond what the "
            f"{finfo.dtype} computation can sum over {n_samples} samples "
            f"({largest_sum:.3g}); {fix}."
        )
    tiny = columns[(columns > 0) & (columns < smallest)]
    if tiny.size:
        raise ValueError(
            f"X has columns whose values are all below {smallest:.3g} in "
            f"magnitude (the largest of them {float(tiny.max()):.3g}), which "
            f"{finfo.dtype} cannot hold without losing them; {fix}."
        )


def _check_target_magnitudes(Y, start=0, *, dtype):
    """Refuse targets (columns ``start`` on of y) whose CV scores would be noise.

    The CV scores square the errors of y (in the compute dtype before they
    are summed in float64): squares that overflow make every score inf or
    NaN, squares that underflow make them noise, and either way the alpha
    choice would be arbitrary and ``best_score_`` meaningless (with a single
    alpha too). The error names the first target at fault.
    """
    finfo = np.finfo(dtype)
    n_samples = Y.shape[0]
    largest_sum = float(finfo.max) / n_samples
    smallest = float(finfo.smallest_normal)
    fix = (
        "rescale y, e.g. with sklearn.compose.TransformedTargetRegressor and a "
        "StandardScaler"
    )
    high, low = np.sqrt(largest_sum), np.sqrt(smallest)
    columns = _column_magnitudes(Y)
    largest = float(columns.max())
    if largest > high:
        first = start + int(np.argmax(columns > high))
        raise ValueError(
            f"y has values up to {largest:.3g} in magnitude (target {first} is "
            f"the first): the squared errors that score alpha would overflow "
            f"{finfo.dtype} (the limit is {high:.3g} for {n_samples} samples); "
            f"{fix}."
        )
    tiny = (columns > 0) & (columns < low)
    if tiny.any():
        first = start + int(np.argmax(tiny))
        raise ValueError(
            f"y has targets whose values are all below {low:.3g} in magnitude "
            f"(the largest of them {float(columns[tiny].max()):.3g}; target "
            f"{first} is the first): the squared errors that score alpha "
            f"would underflow {finfo.dtype}; {fix}."
        )


def checked_targets(X, Y, dtype, out_of_core):
    """``Y`` as :class:`~skbatch._engine.targets.TargetColumns`, ``X`` and ``Y``'s
    magnitudes checked for ``dtype`` (targets on disk as they are read)."""
    _check_magnitudes(X, dtype)
    # With one alpha too: the squared errors give best_score_.
    check_y = functools.partial(_check_target_magnitudes, dtype=dtype)
    if out_of_core:
        return TargetColumns(Y, check_y)
    check_y(Y)
    return TargetColumns(Y)
