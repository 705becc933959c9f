"""The inputs of a ridge ``fit``, checked before any work.

:func:`fit_data` validates ``X``, ``y`` and ``sample_weight`` as
scikit-learn's ``Ridge`` does (``n_features_in_`` set on the estimator),
for ``BatchedRidge`` and ``BandedRidge``; 2-D targets on disk are checked
for their shape only, their values as they are read
(:func:`skbatch._ridge.magnitudes.checked_targets`).
"""

import numbers

import numpy as np
from scipy import sparse
from sklearn.utils.validation import check_array, validate_data

from .._engine.targets import NUMERIC_KINDS, check_target_array, out_of_core_kind
from .._ridge.cv import MIN_SAMPLES
from .base import host_input

__all__ = ["fit_data"]


def _check_weights(sample_weight, n_samples):
    """Sample weights as float64, refused before any work if unusable."""
    if isinstance(sample_weight, numbers.Number):
        sample_weight = np.full(n_samples, sample_weight, dtype=np.float64)
    sample_weight = check_array(
        sample_weight, ensure_2d=False, dtype=np.float64, input_name="sample_weight"
    )
    if sample_weight.shape != (n_samples,):
        raise ValueError(
            f"sample_weight must have shape ({n_samples},), one weight per "
            f"sample of X ({n_samples} samples), got shape {sample_weight.shape}"
        )
    negative = sample_weight < 0
    if np.any(negative):
        raise ValueError(
            f"sample_weight must be non-negative, got {np.count_nonzero(negative)} "
            f"negative weight(s), the smallest {float(sample_weight.min())!r}"
        )
    n_weighted = np.count_nonzero(sample_weight)
    if n_weighted < MIN_SAMPLES:
        # Rows of weight 0 are no rows: as few samples as fit refuses.
        raise ValueError(
            f"sample_weight must have at least {MIN_SAMPLES} non-zero weights, "
            f"got {n_weighted} among {n_samples} samples"
        )
    return sample_weight


def fit_data(estimator, X, y, sample_weight):
    """``fit``'s inputs checked once: ``(X, y, Y, sample_weight, out_of_core)``.

    ``X`` validated (``n_features_in_`` set on ``estimator``), ``y`` as
    given or validated, ``Y`` its 2-D view (the array on disk for targets
    read one batch at a time, ``out_of_core``), weights as float64.
    """
    X, _ = host_input(X)
    # 2-D targets on disk are read one batch at a time, checked as they
    # are read; a single target is read whole, like any array-like. Asked
    # first: a closed h5py dataset is refused naming y.
    out_of_core = out_of_core_kind(y) is not None and len(y.shape) != 1
    y, _ = host_input(y)
    if out_of_core:
        X = validate_data(estimator, X, dtype=[np.float64, np.float32])
        check_target_array(y, X.shape[0])
        Y = y
    else:
        if sparse.issparse(y):
            raise TypeError(
                "Sparse data was passed for y, but dense data is required. "
                "Use '.toarray()' to convert to a dense numpy array."
            )
        X, y = validate_data(
            estimator,
            X,
            y,
            multi_output=True,
            y_numeric=True,
            dtype=[np.float64, np.float32],
        )
        if y.dtype.kind not in NUMERIC_KINDS:
            # Numbers written as strings, which Ridge reads as numbers.
            try:
                y = y.astype(np.float64)
            except ValueError as error:
                raise ValueError(f"y must hold numbers: {error}") from None
        Y = y.reshape(X.shape[0], -1) if y.ndim == 1 else y
    n_samples = X.shape[0]
    if n_samples < MIN_SAMPLES:
        raise ValueError(
            f"{type(estimator).__name__} needs at least {MIN_SAMPLES} samples, got "
            f"{n_samples} sample"
        )
    if sample_weight is not None:
        sample_weight = _check_weights(host_input(sample_weight)[0], n_samples)
    return X, y, Y, sample_weight, out_of_core
