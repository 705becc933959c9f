"""The per-band predictions and scores of a fitted ``BandedRidge``.

:func:`band_predictions` is ``BandedRidge.predict_per_band`` past its check
of X; :func:`band_shares` is ``BandedRidge.score_per_band`` past its checks
of the scoring and X: y and the weights checked, each band's share of every
target's R^2 (the product measure, :func:`skbatch.scoring.product_measure`)
or correlation (:func:`skbatch.scoring.correlation_split`), in blocks of
targets.
"""

import numpy as np
from sklearn.utils.validation import check_array

from ..scoring import correlation_split, product_measure
from .base import host_input
from .predict import score_weights

__all__ = ["SPLIT_SCORINGS", "band_predictions", "band_shares"]

# Targets scored per block in score_per_band: n_bands x n_samples x this many
# predictions at once.
SCORE_BLOCK = 256
# The scores score_per_band splits among the bands.
SPLIT_SCORINGS = ("r2", "correlation")


def band_predictions(X, coef, band_columns, dtype):
    """``X_b @ coef_b`` of every band b, (n_bands, n_samples, n_targets), or
    (n_bands, n_samples) for a 1-D ``coef``, in the result dtype of X and
    ``dtype``."""
    one_target = np.ndim(coef) == 1
    coef = np.atleast_2d(coef)
    dtype = np.result_type(X.dtype, dtype)
    parts = np.stack(
        [X[:, cols].astype(dtype) @ coef[:, cols].T for cols in band_columns]
    )
    return parts[:, :, 0] if one_target else parts


def band_shares(X, y, sample_weight, coef, intercept, band_columns, scoring):
    """Each band's share (n_bands, n_targets) of every target's score
    ``scoring`` (one of :data:`SPLIT_SCORINGS`), in float64, of a model of
    ``coef`` and ``intercept`` (as fitted, 1-D for one target) on X (checked)
    and ``y``, ``sample_weight`` (checked here)."""
    y, _ = host_input(y)
    y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
    Y = y.reshape(y.shape[0], -1)
    coef = np.atleast_2d(coef)
    if Y.shape != (X.shape[0], coef.shape[0]):
        raise ValueError(
            f"y must have one row per sample of X and one column per target, "
            f"shape {(X.shape[0], coef.shape[0])}, got {y.shape}"
        )
    weight = score_weights(sample_weight, X)
    intercept = np.atleast_1d(np.asarray(intercept, dtype=np.float64))
    shares = np.empty((len(band_columns), coef.shape[0]))
    for start in range(0, coef.shape[0], SCORE_BLOCK):
        block = slice(start, start + SCORE_BLOCK)
        parts = np.stack(
            [
                X[:, cols].astype(np.float64) @ coef[block, cols].T.astype(float)
                for cols in band_columns
            ]
        )
        if scoring == "correlation":
            shares[:, block] = correlation_split(parts, Y[:, block], weight)
        else:
            shares[:, block] = product_measure(
                parts, Y[:, block], intercept[block], weight
            )
    return shares
