"""Scoring encoding models per target: the noise ceiling and per-target scores.

:func:`explainable_variance` is the share of a target's variance that is
repeatable across presentations of the same stimulus, the ceiling a model's
R^2 is compared against; :func:`score_per_target` reaches the per-target
scores of a skbatch ridge through a fitted :class:`~sklearn.pipeline.Pipeline`;
:func:`r2_score_split` and :func:`correlation_score_split` split each
target's R^2 and correlation among the feature spaces (bands) whose
predictions sum to the model's.
"""

import warnings

import numpy as np
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted

from ._kernels import linalg as _linalg
from .backend import to_numpy

__all__ = [
    "correlation_score_split",
    "explainable_variance",
    "r2_score_split",
    "score_per_target",
]


def explainable_variance(Y_repeats, bias_correction=True):
    """Explainable variance of each target, from repeated presentations.

    Each repeat is z-scored over samples; the explainable variance is the
    variance over samples of the mean over repeats, divided by the mean over
    repeats of the variance over samples (1 after z-scoring):

    ``ev = var_t(mean_r Y[r, t]) / mean_r var_t(Y[r, t])``.

    Noise independent across repeats averages out of the mean, so ``ev`` is
    the share of each target's variance that the stimulus drives: the noise
    ceiling, the largest R^2 a model of the stimulus can reach on a single
    repeat. Compare a model's per-target R^2 with it (e.g. ``r2 / ev``).
    The same definition as the voxelwise-modelling tutorials of the Gallant
    lab, so numbers compare across libraries.

    Parameters
    ----------
    Y_repeats : array-like of shape (n_repeats, n_samples, n_targets)
        Responses to ``n_repeats`` presentations of the same ``n_samples``
        stimuli (numpy, torch or jax array), at least 2 repeats of at least 2
        samples.
    bias_correction : bool, default=True
        Subtract ``(1 - ev) / (n_repeats - 1)``: with few repeats the mean
        over repeats still holds ``1 / n_repeats`` of the noise variance, so
        the uncorrected ratio overestimates the ceiling (pure noise gives
        about ``1 / n_repeats``, corrected about 0; it can then be slightly
        negative).

    Returns
    -------
    ev : ndarray of shape (n_targets,)
        Explainable variance per target, float64. NaN, with one
        ``RuntimeWarning`` counting them, for a target constant over samples
        in some repeat (its z-score is undefined).

    Raises
    ------
    ValueError
        If ``Y_repeats`` is not 3-D, has fewer than 2 repeats or 2 samples,
        or holds NaN or infinity.
    TypeError
        If ``bias_correction`` is not a bool.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch import explainable_variance
    >>> rng = np.random.default_rng(0)
    >>> signal = rng.standard_normal((200, 2))
    >>> # Target 0 repeats its signal (noise of equal variance); target 1 is
    >>> # noise only.
    >>> Y = signal * [1.0, 0.0] + rng.standard_normal((10, 200, 2))
    >>> ev = explainable_variance(Y)
    >>> bool(abs(ev[0] - 0.5) < 0.1), bool(abs(ev[1]) < 0.05)
    (True, True)
    """
    if not isinstance(bias_correction, bool | np.bool_):
        raise TypeError(
            f"bias_correction must be a bool, got {type(bias_correction).__name__}: "
            f"{bias_correction!r}"
        )
    Y = np.asarray(to_numpy(Y_repeats))
    if Y.ndim != 3:
        raise ValueError(
            f"Y_repeats must be 3-D, of shape (n_repeats, n_samples, n_targets), "
            f"got an array of shape {Y.shape}"
        )
    n_repeats, n_samples, _ = Y.shape
    if n_repeats < 2 or n_samples < 2:
        raise ValueError(
            f"Y_repeats must hold at least 2 repeats of at least 2 samples, got "
            f"shape {Y.shape} ({n_repeats} repeats of {n_samples} samples)"
        )
    if Y.dtype.kind not in "biuf":
        raise ValueError(f"Y_repeats must hold numbers, got dtype {Y.dtype}")
    Y = Y.astype(np.float64, copy=False)
    if not np.all(np.isfinite(Y)):
        raise ValueError("Y_repeats must be finite, got NaN or infinity")
    # The z-score of a series does not change when it is scaled: each repeat
    # of a target is divided by its largest magnitude first, so that squares
    # neither overflow (above 1e154) nor underflow (below 1e-162), and a
    # power-of-2 scale of Y leaves every bit of the result as it is.
    scale = np.abs(Y).max(axis=1, keepdims=True)
    Y = Y / np.where(scale > 0, scale, 1.0)
    centred = Y - Y.mean(axis=1, keepdims=True)
    std = np.sqrt(np.mean(centred**2, axis=1, keepdims=True))
    # A repeat of a target constant to round-off: its spread is that of the
    # rounding of its mean, not of a signal.
    constant = std <= np.finfo(np.float64).eps * np.abs(Y).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(constant, np.nan, centred / std)
    # Both variances with ddof=0: each z-scored repeat has variance 1, the
    # mean of the variances is 1.
    ev = np.var(z.mean(axis=0), axis=0)
    if bias_correction:
        ev = ev - (1.0 - ev) / (n_repeats - 1)
    undefined = np.isnan(ev)
    if undefined.any():
        warnings.warn(
            f"{int(undefined.sum())} of {ev.size} targets are constant over samples "
            f"in at least one repeat: their explainable variance is undefined "
            f"(NaN).",
            RuntimeWarning,
            stacklevel=2,
        )
    return ev


def score_per_target(estimator, X, y, scoring="r2", sample_weight=None):
    """Per-target scores of a fitted skbatch ridge, bare or ending a pipeline.

    ``estimator.score`` averages R^2 over targets (what ``GridSearchCV``
    needs); this gives each target's score. For a fitted
    :class:`~sklearn.pipeline.Pipeline`, ``X`` goes through the transforms of
    every step but the last (as ``Pipeline.predict`` sends it), then the
    last step's ``score_per_target`` scores it.

    Parameters
    ----------
    estimator : fitted estimator
        A skbatch estimator with a ``score_per_target`` method
        (:class:`~skbatch.BatchedRidge`...), or a fitted ``Pipeline`` ending
        in one.
    X : array-like of shape (n_samples, n_features)
        Test samples, as the estimator's ``predict`` takes them.
    y : array-like of shape (n_samples,) or (n_samples, n_targets)
        True values.
    scoring : {"r2", "correlation", "neg_mean_squared_error"}, default="r2"
        See :meth:`skbatch.BatchedRidge.score_per_target`.
    sample_weight : array-like of shape (n_samples,), default=None
        Sample weights, in every mean of the score.

    Returns
    -------
    scores : ndarray of shape (n_targets,)

    Raises
    ------
    TypeError
        If the estimator (or the last step of the pipeline) has no
        ``score_per_target``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from skbatch import BatchedRidge, score_per_target
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((80, 4))
    >>> Y = X[:, :3] + 0.5 * rng.standard_normal((80, 3))
    >>> model = make_pipeline(StandardScaler(), BatchedRidge()).fit(X, Y)
    >>> score_per_target(model, X, Y).shape
    (3,)
    """
    final = estimator
    if isinstance(estimator, Pipeline):
        final = estimator.steps[-1][1]
    if not hasattr(final, "score_per_target"):
        where = (
            f"the last step of the pipeline is a {type(final).__name__}"
            if final is not estimator
            else f"got a {type(estimator).__name__}"
        )
        raise TypeError(
            f"score_per_target needs a skbatch estimator with a score_per_target "
            f"method (BatchedRidge...), or a Pipeline ending in one; {where}"
        )
    if final is not estimator:
        check_is_fitted(estimator)
        if len(estimator) > 1:
            X = estimator[:-1].transform(X)
    return final.score_per_target(X, y, sample_weight=sample_weight, scoring=scoring)


def correlation_score_split(y_true, y_pred, sample_weight=None):
    """Each band's share of the correlation of every target; shares sum to it.

    With ``P_b`` band b's prediction (e.g.
    :meth:`~skbatch.BandedRidge.predict_per_band`) and ``P = sum_b P_b``, the
    share of band b is ``cov(y, P_b) / (std(y) std(P))``: the shares sum to
    the correlation of ``y`` with ``P``, that of the whole prediction (an
    intercept changes no correlation). The same definition as himalaya's
    ``himalaya.scoring.correlation_score_split``, so numbers compare across
    libraries; unlike it, a target whose correlation is undefined (``y`` or
    ``P`` constant on the rows, to rounding, as
    :func:`skbatch._kernels.linalg.score_per_target` decides it) has NaN shares,
    with one :class:`~skbatch.exceptions.DegenerateDataWarning`, where
    himalaya gives zeros or unbounded values.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_targets)
        True values.
    y_pred : array-like of shape (n_bands, n_samples) or \
(n_bands, n_samples, n_targets)
        The prediction of each band, one more dimension than ``y_true``;
        of ``y_true``'s shape, one prediction, whose correlation is
        returned (as himalaya accepts it).
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights of the rows in every mean, variance and
        covariance (a weighted correlation, as ``score_per_target(...,
        scoring="correlation", sample_weight=...)``).

    Returns
    -------
    scores : ndarray of shape (n_bands, n_targets) or (n_bands,)
        float64; summed over bands, the correlation of ``y_true`` with
        ``y_pred.sum(0)`` (to rounding). Of shape (n_targets,) or () for one
        prediction.

    Raises
    ------
    ValueError
        For shapes that do not match, fewer than 2 rows, NaN or infinity, or
        negative weights.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch import correlation_score_split
    >>> rng = np.random.default_rng(0)
    >>> parts = rng.standard_normal((2, 50, 3))
    >>> y = parts.sum(0) + rng.standard_normal((50, 3))
    >>> shares = correlation_score_split(y, parts)
    >>> shares.shape
    (2, 3)
    >>> r = [np.corrcoef(y[:, j], parts.sum(0)[:, j])[0, 1] for j in range(3)]
    >>> bool(np.allclose(shares.sum(0), r))
    True
    """
    y, parts, Y, weight, one = _split_inputs(
        y_true, y_pred, sample_weight, "correlation_score_split"
    )
    shares = correlation_split(parts, Y, weight)
    _linalg.warn_undefined(
        shares.sum(axis=0), "correlation", n_rows=Y.shape[0], stacklevel=2
    )
    return _split_shape(shares, y, one)


def r2_score_split(
    y_true, y_pred, include_correlation=True, *, intercept=0.0, sample_weight=None
):
    """Each band's share of the R^2 of every target; shares sum to it.

    With ``P_b`` band b's prediction (e.g.
    :meth:`~skbatch.BandedRidge.predict_per_band` on held-out rows) and
    ``P = sum_b P_b``, band b's share is the product measure of himalaya's
    ``himalaya.scoring.r2_score_split``: ``sum_i P_b,i (2 y_i - P_i) / SST``
    on the centred ``y`` and centred predictions, which sum to the R^2 of
    ``P`` when ``P`` has the mean of ``y``; what a difference of means
    takes off R^2 is then shared in proportion to ``sum_i P_b,i P_i``
    (centred), so that the shares always sum to ``r2_score(y, P +
    intercept)``. With a fitted :class:`~skbatch.BandedRidge`,
    ``r2_score_split(y, model.predict_per_band(X),
    intercept=model.intercept_)`` is ``model.score_per_band(X, y)``.

    himalaya's function asks for a zero-mean ``y_true`` (it warns
    otherwise, and takes ``sum_i y_i**2`` as the total) and uses the
    predictions as given, uncentred. On a zero-mean ``y`` the totals agree,
    and so do the shares when ``P`` has the mean of ``y`` (centred
    predictions, or bands whose means cancel). Where ``P``'s mean ``m``
    differs, the ``n m**2 / SST`` that the offset takes off R^2 is shared
    otherwise: himalaya takes ``n m_b m / SST`` off band b, in proportion
    to the mean ``m_b`` of its prediction, here in proportion to ``sum_i
    P_b,i P_i`` (centred), so that a band's share does not depend on a
    constant its prediction carries. The shares then differ by the
    difference of those two terms, while summing to the same total.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_targets)
        True values.
    y_pred : array-like of shape (n_bands, n_samples) or \
(n_bands, n_samples, n_targets)
        The prediction of each band, one more dimension than ``y_true``;
        of ``y_true``'s shape, one prediction, whose R^2 is returned.
    include_correlation : bool, default=True
        False: each band's own R^2, ``r2_score(y, P_b)``, which ignores what
        the bands' predictions share and does not sum to the R^2 of ``P``
        (himalaya's ``include_correlation=False`` for zero-mean ``y``).
    intercept : float or array-like of shape (n_targets,), default=0.0
        Added to the summed prediction (a model's ``intercept_``, which
        ``predict_per_band`` leaves out); with ``include_correlation=False``,
        to each band's.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights of the rows in every mean and sum of squares
        (a weighted R^2, as ``r2_score(..., sample_weight=...)``).

    Returns
    -------
    scores : ndarray of shape (n_bands, n_targets) or (n_bands,)
        float64; with ``include_correlation``, summed over bands, the R^2 of
        ``y_pred.sum(0) + intercept`` (to rounding). Of shape (n_targets,) or () for one
        prediction. A target constant on the rows scores as ``r2_score``
        scores it (1 if predicted exactly, else 0), shared as above.

    Raises
    ------
    ValueError
        For shapes that do not match, fewer than 2 rows, NaN or infinity, or
        negative weights.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.metrics import r2_score
    >>> from skbatch import r2_score_split
    >>> rng = np.random.default_rng(0)
    >>> parts = rng.standard_normal((2, 50, 3))
    >>> y = parts.sum(0) + rng.standard_normal((50, 3))
    >>> shares = r2_score_split(y, parts)
    >>> shares.shape
    (2, 3)
    >>> total = r2_score(y, parts.sum(0), multioutput="raw_values")
    >>> bool(np.allclose(shares.sum(0), total))
    True
    """
    y, parts, Y, weight, one = _split_inputs(
        y_true, y_pred, sample_weight, "r2_score_split"
    )
    intercept = np.asarray(to_numpy(intercept), dtype=np.float64)
    if intercept.ndim > 1 or intercept.size not in (1, Y.shape[1]):
        raise ValueError(
            f"intercept must be a number or have shape ({Y.shape[1]},), one per "
            f"target, got shape {intercept.shape}"
        )
    if not np.all(np.isfinite(intercept)):
        raise ValueError("intercept must be finite, got NaN or infinity")
    if include_correlation:
        shares = product_measure(parts, Y, intercept, weight)
    else:
        shares = np.stack(
            [
                _linalg.score_per_target(
                    Y, part + intercept, "r2", sample_weight=weight, warn=False, xp=np
                )
                for part in parts
            ]
        )
    return _split_shape(shares, y, one)


def _split_inputs(y_true, y_pred, sample_weight, caller):
    """``(y, parts, Y, weight, one)`` of a split score, checked: ``y`` as
    given, ``parts`` (n_bands, n, t) and ``Y`` (n, t) in float64, ``weight``
    (n,) float64 or None, ``one``: ``y_pred`` of ``y_true``'s shape, one
    band."""
    y = np.asarray(to_numpy(y_true))
    parts = np.asarray(to_numpy(y_pred))
    for name, value in (("y_true", y), ("y_pred", parts)):
        if value.dtype.kind not in "biuf":
            raise ValueError(f"{name} must hold numbers, got dtype {value.dtype}")
    one = parts.shape == y.shape
    if one:
        parts = parts[None]
    if y.ndim not in (1, 2) or parts.ndim != y.ndim + 1 or parts.shape[1:] != y.shape:
        raise ValueError(
            f"y_pred must have shape (n_bands, *y_true.shape), one prediction of "
            f"y_true's shape per band, with y_true of shape (n_samples,) or "
            f"(n_samples, n_targets); got y_true of shape {y.shape} and y_pred of "
            f"shape {parts.shape}."
        )
    if y.shape[0] < _linalg.MIN_SCORED_ROWS:
        raise ValueError(
            f"{caller} needs at least {_linalg.MIN_SCORED_ROWS} rows, got {y.shape[0]}"
        )
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(parts))):
        raise ValueError("y_true and y_pred must be finite, got NaN or infinity")
    weight = None
    if sample_weight is not None:
        weight = np.asarray(to_numpy(sample_weight), dtype=np.float64)
        if weight.shape != (y.shape[0],):
            raise ValueError(
                f"sample_weight must have shape ({y.shape[0]},), one weight per "
                f"row, got shape {weight.shape}"
            )
        if not np.all(np.isfinite(weight)) or np.any(weight < 0) or not weight.any():
            raise ValueError("sample_weight must be finite and non-negative, not all 0")
    Y = y.reshape(y.shape[0], -1).astype(np.float64)
    parts = parts.reshape(parts.shape[0], *Y.shape).astype(np.float64)
    return y, parts, Y, weight, one


def _split_shape(shares, y, one):
    """``shares`` (n_bands, t) in the shape the split functions return: no
    target axis for 1-D ``y``, no band axis for ``one`` prediction."""
    shares = shares if y.ndim == 2 else shares[:, 0]
    return shares[0] if one else shares


def correlation_split(parts, Y, weight=None):
    """Shares (n_bands, t) of the correlation from float64 band predictions
    (n_bands, n, t) and targets (n, t), rows weighted by ``weight`` (n,) or
    not; NaN where the correlation is undefined.

    Constancy is decided as for every correlation of skbatch
    (:func:`skbatch._kernels.linalg.target_spread`, of ``y`` and of the summed
    prediction).
    """
    spread = _linalg.target_spread(Y, weight, deviations=True, xp=np)
    predicted = _linalg.target_spread(parts.sum(axis=0), weight, xp=np)
    w = np.ones(Y.shape[0]) if weight is None else weight
    P_b = parts - np.average(parts, axis=1, weights=weight)[:, None, :]
    covariance = np.einsum("i,bij,ij->bj", w, P_b, spread.deviations) / w.sum()
    undefined = spread.constant | predicted.constant
    product = np.where(undefined, 1.0, spread.variance * predicted.variance)
    return np.where(undefined, np.nan, covariance / np.sqrt(product))


def product_measure(parts, Y, intercept, weight=None):
    """Shares (n_bands, t) of R^2 from band predictions (n_bands, n, t), the
    rows weighted by ``weight`` (n,) or not.

    R^2 and the targets' deviations and constancy are those of every score
    (:func:`skbatch._kernels.linalg.score_per_target`,
    :func:`~skbatch._kernels.linalg.target_spread`).
    """
    predictions = parts.sum(axis=0) + intercept
    r2 = _linalg.score_per_target(
        Y, predictions, "r2", sample_weight=weight, warn=False, xp=np
    )
    spread = _linalg.target_spread(Y, weight, deviations=True, xp=np)
    w = np.ones((Y.shape[0], 1)) if weight is None else weight[:, None]
    Y_c = spread.deviations
    P_b = parts - np.average(parts, axis=1, weights=weight)[:, None, :]
    P = P_b.sum(axis=0)
    S = np.sum(w * Y_c**2, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        centred = np.sum(w * P_b * (2 * Y_c - P), axis=1) / S
        centred = np.where(spread.constant, 0.0, centred)
        power = np.sum(w * P**2, axis=0)
        pi = np.sum(w * P_b * P, axis=1) / power
        pi = np.where(power > 0, pi, 1.0 / parts.shape[0])
    return centred + pi * (r2 - centred.sum(axis=0))
