"""The block bootstrap's block size: its checks, the "auto" rule, and the
warning that an iid bootstrap of rows meets autocorrelated residuals.

How blocks are drawn is :mod:`skbatch.random`'s; the Politis-White rule and
the autocorrelation test are :mod:`skbatch._kernels.timeseries`'s.
"""

import math
import numbers
import warnings

import numpy as np

from .._kernels.timeseries import (
    autocorrelation_warning,
    min_rows_for_block_length,
    optimal_block_length,
)
from ..backend import to_numpy
from ..random import bootstrap_counts, check_block_scheme
from ..ridge import AutocorrelationWarning


def check_block_params(block_size, block_scheme, ci_method):
    """Refuse a ``block_size`` that is not None, "auto" or an int >= 1, a
    ``block_scheme`` without blocks, and BCa with blocks."""
    if not (isinstance(block_size, str) and block_size == "auto") and (
        block_size is not None
        and (
            isinstance(block_size, bool)
            or not isinstance(block_size, numbers.Integral)
            or block_size < 1
        )
    ):
        raise ValueError(
            f"block_size must be None, 'auto' or an int >= 1, got {block_size!r}"
        )
    check_block_scheme(block_scheme, block_size)
    if ci_method == "bca" and block_size is not None:
        raise ValueError(
            f"ci_method='bca' needs the jackknife of independent rows or "
            f"groups, which a block bootstrap does not have; got "
            f"ci_method='bca' with block_size={block_size!r}. Use "
            f"ci_method='percentile' with block_size, or block_size=None"
        )


def check_blocks_fit(entropy, n_samples, groups, block_size, block_scheme):
    """Refuse, before any fit, blocks that the rows or groups cannot hold."""
    if block_size == "auto":
        _check_auto_groups(groups, n_samples)
    else:
        # Draws no replicate: checks block_size against the groups.
        bootstrap_counts(
            entropy,
            [],
            n_samples,
            groups,
            block_size=block_size,
            block_scheme=block_scheme,
        )


def fit_residuals(estimator, X, y):
    """``y - estimator.predict(X)``, of shape (n_samples, n_targets), or
    None when the estimator does not predict numbers."""
    if not hasattr(estimator, "predict") or y.dtype.kind not in "biuf":
        return None
    predicted = np.asarray(to_numpy(estimator.predict(X)), dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if predicted.size != y.size:
        return None
    return (y - predicted.reshape(y.shape)).reshape(y.shape[0], -1)


def resolve_block_size(estimator, block_size, block_scheme, X, y, groups):
    """``block_size_``: as given, or chosen by "auto" from the residuals of
    the fitted ``estimator``; warns when an iid row bootstrap meets
    autocorrelated residuals."""
    if block_size is None:
        if groups is None:
            residuals = fit_residuals(estimator, X, y)
            if residuals is not None:
                _warn_if_autocorrelated(residuals)
        return None
    if block_size != "auto":
        return int(block_size)
    residuals = fit_residuals(estimator, X, y)
    if residuals is None:
        raise ValueError(
            f"block_size='auto' chooses the block size from the residuals "
            f"of the fit on all data, but {type(estimator).__name__} "
            f"does not predict numeric targets; pass an int block_size"
        )
    lengths = optimal_block_length(residuals, groups, block_scheme)
    lengths = lengths[np.isfinite(lengths)]
    smallest = n_samples = residuals.shape[0]
    if groups is not None:
        smallest = int(np.unique(groups, return_counts=True)[1].min())
    if not lengths.size:
        return 1
    chosen = math.ceil(float(np.median(lengths)))
    return int(min(max(chosen, 1), smallest, n_samples))


def _check_auto_groups(groups, n_samples):
    """Refuse block_size='auto' on groups too short for the rule."""
    least = min_rows_for_block_length()
    if groups is None:
        shortest, where = n_samples, f"n_samples={n_samples}"
    else:
        shortest = int(np.unique(groups, return_counts=True)[1].min())
        where = f"the smallest group has {shortest} rows"
    if shortest < least:
        raise ValueError(
            f"block_size='auto' needs at least {least} rows in every group for "
            f"the Politis-White rule, but {where}; pass an int block_size"
        )


def _warn_if_autocorrelated(residuals):
    """Warn when the residuals' lag-1 autocorrelation makes iid rows wrong."""
    found = autocorrelation_warning(residuals)
    if found is None:
        return
    median, threshold, n_series = found
    if median > threshold:
        warnings.warn(
            f"The residuals of the fit on all data are autocorrelated (median "
            f"lag-1 autocorrelation {median:.2f} over {n_series} target(s), above "
            f"{threshold:.2f}), so the iid bootstrap of rows understates the "
            f"variability. Set block_size (an int, or 'auto') and block_scheme "
            f"('moving', 'circular' or 'stationary') for a block bootstrap, or "
            f"pass the runs as groups.",
            AutocorrelationWarning,
            # _warn_if_autocorrelated, resolve_block_size, fit, atomic_fit.
            stacklevel=5,
        )
