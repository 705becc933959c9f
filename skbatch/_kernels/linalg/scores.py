"""The one scoring function: held-out errors to R^2, correlation or
negative MSE per target, constant targets decided up to rounding, and the
choice of alpha."""

import warnings
from typing import NamedTuple

from array_api_compat import device as array_device
from array_api_compat import is_numpy_array

from ...exceptions import DegenerateDataWarning
from ._arrays import (
    _average,
    _criterion_dtype,
    _multiply,
    _namespace,
    _out_namespace,
    column_sq_norms,
)

# Names accepted by the scoring functions; higher is better for all three.
_SCORINGS = ("neg_mean_squared_error", "r2", "correlation")
# R^2 and correlation need deviations from a mean: one row has none.
MIN_SCORED_ROWS = 2
# Deviations of a column from its mean up to this many units in the last
# place of its values (their root mean square) are rounding, not spread: a
# constant target scaled and unscaled row by row (times and over sqrt(w) in
# loo_scores) deviates by a few, and scored as spread it gives an R^2 of
# -1e31 or a correlation of noise.
CONSTANT_ULPS = 16


def _check_scoring(scoring, allow_none=False):
    if scoring is None and allow_none:
        return
    if scoring not in _SCORINGS:
        allowed = ((None,) if allow_none else ()) + _SCORINGS
        raise ValueError(f"scoring must be one of {allowed!r}, got {scoring!r}")


class TargetSpread(NamedTuple):
    """What every score needs of its targets, computed once per set of rows.

    deviations : array of shape (n_samples, n_targets) or None
        From the (weighted) mean, exactly 0 on a constant column.
    variance : array of shape (n_targets,)
        (Weighted) mean of the squared deviations.
    constant : array of bool of shape (n_targets,)
        Variance within the rounding of the values.
    rounding : array of shape (n_targets,)
        That rounding: ``(CONSTANT_ULPS * eps)^2`` times the mean square of
        the values, eps that of their dtype. A squared error up to it is no
        error (a constant target predicted exactly).
    """

    deviations: object
    variance: object
    constant: object
    rounding: object


def target_spread(y, sample_weight=None, *, y_dtype=None, deviations=False, xp=None):
    """Each column's (weighted) spread, and whether it is constant to rounding.

    The one test of constancy of every score. Deviations are taken from a
    row of the largest weight (the first row without weights) before the
    mean: a column constant on the rows of positive weight then deviates by
    exactly 0 there, whatever order its mean is summed in (the rounding of
    that mean would otherwise be its spread). A column is constant when its
    variance is at most ``(CONSTANT_ULPS * eps)^2`` times its mean square:
    relative to its level, not absolute, so a constant far from 0 and one at
    0 are both constant, in float32 as in float64.

    Parameters
    ----------
    y : array of shape (n_samples, n_targets)
    sample_weight : array of shape (n_samples,), default=None
    y_dtype : dtype, default=None
        The dtype whose rounding the values carry (``y.dtype`` if None): that
        of the data when ``y`` was cast to float64 after its arithmetic.
    deviations : bool, default=False
        Whether to keep the deviations (correlation reads them).

    Returns
    -------
    spread : TargetSpread
        In float64 where the device supports it.
    """
    xp = _namespace(xp, y)
    y_dtype = y.dtype if y_dtype is None else y_dtype
    dtype = _criterion_dtype(y, xp)
    if not xp.isdtype(y_dtype, "real floating"):
        y_dtype = dtype
    y = xp.astype(y, dtype, copy=False)
    if sample_weight is None:
        anchor = y[:1]
    else:
        anchor = xp.take(y, xp.reshape(xp.argmax(sample_weight), (1,)), axis=0)
    y_dev = y - anchor
    shift = _average(y_dev, sample_weight, xp)
    library = _out_namespace(y_dev)
    if library is None:
        y_dev = y_dev - shift
    else:
        library.subtract(y_dev, shift, out=y_dev)
    variance = _average(y_dev**2, sample_weight, xp)
    mean = anchor[0] + shift
    eps = float(xp.finfo(y_dtype).eps)
    rounding = (CONSTANT_ULPS * eps) ** 2 * (variance + mean**2)
    return TargetSpread(
        y_dev if deviations else None, variance, variance <= rounding, rounding
    )


def _score_errors(
    errors,
    y_true,
    scoring,
    sample_weight,
    xp,
    *,
    spread=None,
    y_dtype=None,
    pred_dtype=None,
    out=None,
):
    """Per-target score of predictions ``y_true - errors``: every path's.

    ``spread``: that of ``y_true`` (:func:`target_spread`), when already
    computed for these rows; ``y_dtype`` and ``pred_dtype``: the dtypes whose
    rounding targets and predictions carry (``y_true``'s if None); ``out``:
    a buffer for the squared errors, in the criterion dtype.
    """
    dtype = _criterion_dtype(y_true, xp)
    if scoring == "neg_mean_squared_error":
        return -_mean_square(errors, sample_weight, dtype, xp, out)
    if y_true.shape[0] < MIN_SCORED_ROWS:
        # No deviations from the mean: r2_score returns NaN, not a number.
        return xp.full(
            (y_true.shape[1],), xp.nan, dtype=dtype, device=array_device(y_true)
        )
    y_dtype = y_true.dtype if y_dtype is None else y_dtype
    if spread is None:
        spread = target_spread(
            y_true,
            sample_weight,
            y_dtype=y_dtype,
            deviations=scoring == "correlation",
            xp=xp,
        )
    if scoring == "r2":
        error_var = _mean_square(errors, sample_weight, dtype, xp, out)
        return _r2(error_var, spread, xp)
    predictions = xp.astype(y_true, dtype, copy=False) - xp.astype(
        errors, dtype, copy=False
    )
    predicted = target_spread(
        predictions,
        sample_weight,
        y_dtype=y_dtype if pred_dtype is None else pred_dtype,
        deviations=True,
        xp=xp,
    )
    covariance = _average(spread.deviations * predicted.deviations, sample_weight, xp)
    undefined = spread.constant | predicted.constant
    product = xp.where(undefined, 1.0, spread.variance * predicted.variance)
    correlation = xp.clip(covariance / xp.sqrt(product), -1.0, 1.0)
    return xp.where(undefined, xp.nan, correlation)


def _r2(error_var, spread, xp):
    """R^2 from the (weighted) mean squared error, as ``r2_score`` scores it.

    A constant target scores 1.0 when its error is within its rounding
    (predicted exactly), else 0.0: ``r2_score``'s ``force_finite=True``.
    """
    constant = spread.constant
    r2 = 1.0 - error_var / xp.where(constant, 1.0, spread.variance)
    exact = xp.where(error_var <= spread.rounding, 1.0, 0.0)
    return xp.where(constant, exact, r2)


def _mean_square(errors, sample_weight, dtype, xp, out=None):
    """(Weighted) mean of each column's squares, summed in ``dtype``.

    ``out``: a buffer for the squares, in ``dtype``; without one, the
    errors are cast to ``dtype`` first.
    """
    if sample_weight is None and is_numpy_array(errors) and errors.dtype == dtype:
        return column_sq_norms(errors, xp) / errors.shape[0]
    if out is None:
        errors = xp.astype(errors, dtype, copy=False)
    return _average(_multiply(errors, errors, out), sample_weight, xp)


def holdout_spread(y_true, scoring, sample_weight=None, *, xp=None):
    """The spread of test targets that :func:`holdout_scores` reads, or None
    where its scoring reads none (mean squared error, fewer than 2 rows)."""
    xp = _namespace(xp, y_true)
    if scoring == "neg_mean_squared_error" or y_true.shape[0] < MIN_SCORED_ROWS:
        return None
    if sample_weight is not None:
        sample_weight = xp.astype(
            sample_weight, _criterion_dtype(y_true, xp), copy=False
        )
    return target_spread(
        y_true, sample_weight, deviations=scoring == "correlation", xp=xp
    )


def score_per_target(
    y_true, y_pred, scoring, *, sample_weight=None, warn=True, xp=None
):
    """Score each target column separately; NaN where the score is undefined.

    - ``"r2"``: ``sklearn.metrics.r2_score(multioutput="raw_values")``,
      including its defaults for the degenerate cases: NaN for fewer than 2
      rows; for a constant ``y_true``, 1.0 when predicted exactly, else 0.0
      (``force_finite=True``). Constant and exact are decided up to the
      rounding of the values (:func:`target_spread`), where ``r2_score``
      compares sums of squares with 0 and scores the rounding of a weighted
      mean (R^2 of -1e31 for a constant target).
    - ``"neg_mean_squared_error"``: minus
      ``sklearn.metrics.mean_squared_error(multioutput="raw_values")``; NaN
      without rows.
    - ``"correlation"``: Pearson's r, weighted when ``sample_weight`` is
      given; NaN for fewer than 2 rows and where either column is constant,
      as ``numpy.corrcoef``.

    Every score of skbatch is this one: the cross-validation scores that
    choose alphas (:func:`holdout_scores`, :func:`loo_scores`), the scores
    per target and per band and those of the permutation fast paths.

    Parameters
    ----------
    y_true, y_pred : arrays of shape (n_samples, n_targets)
    scoring : {"r2", "neg_mean_squared_error", "correlation"}
    sample_weight : array of shape (n_samples,), default=None
        Weights of the rows in every mean, as in ``sklearn.metrics``.
    warn : bool, default=True
        Warn once (:class:`~skbatch.exceptions.DegenerateDataWarning`),
        naming how many targets, where a score is undefined; callers that
        score in batches warn once themselves (:func:`warn_undefined`).

    Returns
    -------
    scores : array of shape (n_targets,)
        In float64 where the device supports it.

    Examples
    --------
    >>> import numpy as np
    >>> y_true = np.array([[1.0, 0.3], [2.0, 0.3], [4.0, 0.3]])
    >>> y_pred = np.array([[1.5, 0.3], [2.0, 0.3], [3.5, 0.1]])
    >>> score_per_target(y_true, y_pred, "r2").round(3).tolist()
    [0.893, 0.0]
    """
    xp = _namespace(xp, y_true, y_pred)
    _check_scoring(scoring)
    dtype = _criterion_dtype(y_true, xp)
    y_dtype, pred_dtype = y_true.dtype, y_pred.dtype
    y_true = xp.astype(y_true, dtype, copy=False)
    y_pred = xp.astype(y_pred, dtype, copy=False)
    if sample_weight is not None:
        sample_weight = xp.astype(
            xp.asarray(sample_weight, device=array_device(y_true)), dtype, copy=False
        )
    scores = _score_errors(
        y_true - y_pred,
        y_true,
        scoring,
        sample_weight,
        xp,
        y_dtype=y_dtype,
        pred_dtype=pred_dtype,
    )
    if warn:
        # Past warn_undefined, this function and the estimator's method that
        # called it, to the user's line.
        warn_undefined(scores, scoring, n_rows=y_true.shape[0], stacklevel=4)
    return scores


def warn_undefined(scores, scoring, *, n_rows, stacklevel=2):
    """Warn once, naming how many targets, when some ``scores`` are NaN.

    Scores of finite data are NaN only where the data cannot define them:
    R^2 and correlation of fewer than 2 rows, the correlation of a constant
    target or prediction, any weighted score of rows whose weights are all 0.

    Parameters
    ----------
    scores : array of shape (n_targets,)
    scoring : str
    n_rows : int
        Rows scored.
    stacklevel : int, default=2
        As for ``warnings.warn``, counted from the caller.
    """
    xp = _namespace(None, scores)
    undefined = xp.isnan(scores)
    count = int(xp.sum(xp.astype(undefined, xp.int64)))
    if count == 0:
        return
    name = "R^2" if scoring == "r2" else scoring
    if n_rows < MIN_SCORED_ROWS and scoring != "neg_mean_squared_error":
        why = f"it needs at least {MIN_SCORED_ROWS} rows, got {n_rows}"
    elif scoring == "correlation":
        why = (
            "the target or its prediction is constant on the rows scored (to "
            "rounding), or their weights are all 0"
        )
    else:
        why = "the weights of the rows scored are all 0"
    warnings.warn(
        f"{name} is undefined (NaN) for {count} of {scores.shape[0]} targets: {why}.",
        DegenerateDataWarning,
        stacklevel=stacklevel + 1,
    )


def select_alpha(scores, *, xp=None):
    """Best alpha of each target: the first of ties, as scikit-learn keeps it.

    NaN scores rank last, as in ``GridSearchCV``; a target whose every score
    is NaN keeps the first alpha, and its best score is NaN.

    Parameters
    ----------
    scores : array of shape (n_alphas, n_targets)
        Higher is better.

    Returns
    -------
    best_index : array of int of shape (n_targets,)
    best_score : array of shape (n_targets,)
        NaN where every alpha scored NaN.
    """
    xp = _namespace(xp, scores)
    missing = xp.isnan(scores)
    filled = xp.where(missing, -xp.inf, scores)
    best_score = xp.where(xp.all(missing, axis=0), xp.nan, xp.max(filled, axis=0))
    return xp.argmax(filled, axis=0), best_score
