"""Temporal response functions (TRFs) of a fitted ``Pipeline(Delayer, ridge)``.

A linear model on delayed features has one weight per (target, feature,
delay): laid out over the lags, those weights are the model's temporal
response function, as MNE's ``ReceptiveField.coef_`` and mTRFpy's
``TRF.weights`` give it. :func:`trf_from_estimator` reads them from the
regressor's ``coef_`` (and their bootstrap intervals from a
:class:`~skbatch.BootstrapEstimator`); :class:`~skbatch.plotting.TRFDisplay`
draws them.
"""

from dataclasses import dataclass
from operator import attrgetter

import numpy as np
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import check_is_fitted

from .delays import Delayer

__all__ = ["TRF", "trf_from_estimator"]


@dataclass(frozen=True)
class TRF:
    """The temporal response functions of a fitted model, over increasing lags.

    Attributes
    ----------
    coef : ndarray of shape (n_targets, n_features, n_lags)
        Weight of each input feature at each lag, for each target (channel):
        MNE's ``ReceptiveField.coef_`` layout (always 3-D; one target is
        ``coef[0]``).
    delays : ndarray of int of shape (n_lags,)
        The lags in samples, increasing.
    times : ndarray of shape (n_lags,) or None
        The lags in seconds (the Delayer's ``times_``); None when the
        Delayer has no ``sfreq``.
    feature_names : ndarray of str of shape (n_features,)
        The names of the Delayer's input features: its
        ``feature_names_in_``, else the names the steps before it give out
        (``get_feature_names_out``), else ``x0, x1, ...``.
    ci_lower, ci_upper : ndarray of shape (n_targets, n_features, n_lags) or None
        Bootstrap interval of each weight, from a
        :class:`~skbatch.BootstrapEstimator`; None otherwise.
    standard_error : ndarray of shape (n_targets, n_features, n_lags) or None
        Bootstrap standard error of each weight; None without a bootstrap.
    confidence_level : float or None
        Coverage of the intervals.
    """

    coef: np.ndarray
    delays: np.ndarray
    times: np.ndarray | None
    feature_names: np.ndarray
    ci_lower: np.ndarray | None = None
    ci_upper: np.ndarray | None = None
    standard_error: np.ndarray | None = None
    confidence_level: float | None = None


def _delayer_and_regressor(pipeline):
    """The Delayer feeding the pipeline's last step, and that step."""
    if not isinstance(pipeline, Pipeline):
        raise TypeError(
            f"trf_from_estimator expects a fitted Pipeline(..., Delayer, regressor) "
            f"or a BootstrapEstimator around one, got {type(pipeline).__name__}"
        )
    check_is_fitted(pipeline)
    steps = [
        (name, step)
        for name, step in pipeline.steps
        if step is not None and not (isinstance(step, str) and step == "passthrough")
    ]
    names = [name for name, _ in pipeline.steps]
    if len(steps) < 2 or not isinstance(steps[-2][1], Delayer):
        raise ValueError(
            f"the step before the pipeline's regressor must be a Delayer, so that "
            f"its coef_ columns are delayed features; got steps {names}"
        )
    (_, delayer), (last, regressor) = steps[-2:]
    if not hasattr(regressor, "coef_"):
        raise ValueError(
            f"the pipeline's last step {last!r} ({type(regressor).__name__}) has no "
            f"coef_: a TRF needs a linear regressor"
        )
    return delayer, last, regressor


def _regressor(estimator, delayer):
    """``estimator``, a fitted regressor of the delayed features of ``delayer``."""
    if not isinstance(delayer, Delayer):
        raise TypeError(
            f"delayer must be the fitted Delayer whose output the regressor was "
            f"fit on, got {type(delayer).__name__}"
        )
    check_is_fitted(delayer)
    if isinstance(estimator, Pipeline):
        raise ValueError(
            "a Pipeline holds its own Delayer: pass delayer=None, or the "
            "regressor itself"
        )
    check_is_fitted(estimator)
    if not hasattr(estimator, "coef_"):
        raise ValueError(
            f"{type(estimator).__name__} has no coef_: a TRF needs a linear regressor"
        )
    return estimator


def _as_trf(values, n_features, order):
    """coef_-shaped values, (n_targets, n_delays * n_features) delay-major, as
    (n_targets, n_features, n_lags) over increasing lags."""
    values = np.asarray(values, dtype=np.float64)
    values = values.reshape(-1, values.shape[-1])
    n_targets = values.shape[0]
    blocks = values.reshape(n_targets, order.size, n_features)
    return blocks.transpose(0, 2, 1)[:, :, order]


def _feature_names(pipeline, delayer):
    """The names of the Delayer's input: its ``feature_names_in_``, else those
    the steps before it give out (a scaler passes the pipeline's input names
    on), else ``x0, x1, ...`` as scikit-learn names them."""
    names = getattr(delayer, "feature_names_in_", None)
    position = 0 if pipeline is None else [s for _, s in pipeline.steps].index(delayer)
    if names is None and position > 0:
        try:
            names = pipeline[:position].get_feature_names_out()
        except (AttributeError, TypeError, ValueError):
            names = None
    if names is None or len(names) != delayer.n_features_in_:
        names = [f"x{j}" for j in range(delayer.n_features_in_)]
    return np.asarray(names, dtype=object)


def _bootstrapped_coef(boot, pipeline, regressor_name, regressor):
    """The entry of ``boot.results_`` that holds the regressor's ``coef_``."""
    if regressor_name is None:
        if "coef_" in boot.results_:
            return boot.results_["coef_"]
        raise ValueError(
            f"the BootstrapEstimator did not bootstrap coef_ (its results are "
            f"{sorted(map(str, boot.results_))}): fit it with attributes='coef_' "
            f"or 'auto'"
        )
    for name, result in boot.results_.items():
        if not isinstance(name, str):
            continue
        try:
            value = attrgetter(name)(pipeline)
        except AttributeError:
            continue
        if value is regressor.coef_:
            return result
    raise ValueError(
        f"the BootstrapEstimator did not bootstrap the regressor's coef_ (its "
        f"results are {sorted(map(str, boot.results_))}): fit it with "
        f"attributes='named_steps.{regressor_name}.coef_'"
    )


def trf_from_estimator(estimator, *, delayer=None):
    """The TRFs of a fitted ``Pipeline(Delayer, regressor)``, with lag times.

    The regressor (``BatchedRidge``, ``BandedRidge``, scikit-learn's
    ``Ridge``...) has one column of ``coef_`` per delayed feature, delay
    by delay (the :class:`~skbatch.Delayer`'s layout); this reshapes them to
    targets x features x lags, lags increasing, with the lags in samples and
    seconds. Given a :class:`~skbatch.BootstrapEstimator` around such a
    pipeline, the TRFs are those of its ``estimator_`` (all data) and the
    interval bounds and standard errors those it bootstrapped for the
    regressor's ``coef_`` (``attributes="named_steps.<name>.coef_"``).

    A design delayed once and fit by several models (a regressor, a
    BootstrapEstimator and a PermutationScorer on the same delayed
    features) takes the fitted Delayer as ``delayer`` and the regressor, or
    a BootstrapEstimator around it (``coef_`` bootstrapped), as
    ``estimator``.

    Parameters
    ----------
    estimator : Pipeline, regressor or BootstrapEstimator
        Fitted. In a pipeline, the step before the regressor is the Delayer
        (``"passthrough"`` steps aside); steps before the Delayer (scalers)
        change the features the TRFs weigh, not the layout. A regressor
        (with ``coef_``) alone needs ``delayer``.
    delayer : Delayer, default=None
        The fitted Delayer whose output the regressor was fit on, when
        ``estimator`` is no pipeline.

    Returns
    -------
    trf : TRF
        ``coef`` of shape (n_targets, n_features, n_lags), ``delays``,
        ``times`` (None without the Delayer's ``sfreq``),
        ``feature_names``, and ``ci_lower``, ``ci_upper``,
        ``standard_error``, ``confidence_level`` from a bootstrap.

    Raises
    ------
    TypeError
        If ``estimator`` is neither a Pipeline nor a BootstrapEstimator
        around one and ``delayer`` is None, or ``delayer`` is not a fitted
        Delayer.
    ValueError
        If the regressor's input is not a Delayer's output, or a bootstrap
        did not bootstrap the regressor's ``coef_``.

    See Also
    --------
    skbatch.plotting.TRFDisplay : Draws the TRFs over the lags.

    Notes
    -----
    **MNE.** ``ReceptiveField(tmin, tmax, sfreq, estimator=alpha)`` centres
    ``X`` and ``y`` over all samples of all epochs, delays each epoch with
    zeros at its edges and solves ridge with penalty ``alpha`` on the sums
    of squares, without a further intercept. Its ``coef_`` equals this
    ``coef`` for ``Pipeline(Delayer(tmin=tmin, tmax=tmax, sfreq=sfreq),
    BatchedRidge(alphas=[alpha], fit_intercept=False))`` fit on the centred
    ``X`` and ``y`` with the epochs as ``groups``: the same alpha.

    **mTRFpy.** ``TRF.train(stimulus, response, fs, tmin, tmax, lambda)``
    over ``n_trials`` trials solves with an unpenalised column of ones (an
    intercept) on the per-trial covariances averaged over trials, the
    penalty ``lambda * fs`` and weights scaled by ``fs``. Its ``weights``
    (features x lags x outputs) equal ``fs`` times this ``coef`` (moved to
    that layout) for ``Delayer(tmin=tmin, tmax=tmax, sfreq=fs,
    rounding="outward")`` and ``BatchedRidge(alphas=[lambda * fs *
    n_trials], fit_intercept=True)`` with the trials as ``groups``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.pipeline import make_pipeline
    >>> from skbatch import BatchedRidge, Delayer, trf_from_estimator
    >>> rng = np.random.default_rng(0)
    >>> stimulus = rng.standard_normal((500, 1))
    >>> response = np.roll(stimulus, 2, axis=0) + 0.1 * rng.standard_normal((500, 1))
    >>> model = make_pipeline(
    ...     Delayer(tmin=-0.01, tmax=0.04, sfreq=100.0), BatchedRidge(alphas=[1.0])
    ... ).fit(stimulus, response)
    >>> trf = trf_from_estimator(model)
    >>> trf.coef.shape, trf.times
    ((1, 1, 6), array([-0.01,  0.  ,  0.01,  0.02,  0.03,  0.04]))
    >>> float(trf.times[np.argmax(trf.coef[0, 0])])
    0.02
    """
    boot = None
    if hasattr(estimator, "results_") and hasattr(estimator, "estimator_"):
        boot, estimator = estimator, estimator.estimator_
    if delayer is None:
        delayer, regressor_name, regressor = _delayer_and_regressor(estimator)
    else:
        regressor_name, regressor = None, _regressor(estimator, delayer)
    delays = np.asarray(delayer.delays_)
    order = np.argsort(delays, kind="stable")
    n_features = delayer.n_features_in_
    expected = n_features * delays.size
    coef = np.asarray(regressor.coef_)
    if coef.shape[-1] != expected:
        raise ValueError(
            f"the regressor's coef_ has {coef.shape[-1]} columns, not the "
            f"Delayer's {n_features} features x {delays.size} delays = {expected}"
        )
    times = None if delayer.times_ is None else np.asarray(delayer.times_)[order]
    bounds = {}
    if boot is not None:
        result = _bootstrapped_coef(boot, estimator, regressor_name, regressor)
        bounds = {
            "ci_lower": _as_trf(result.ci_lower, n_features, order),
            "ci_upper": _as_trf(result.ci_upper, n_features, order),
            "standard_error": _as_trf(result.standard_error, n_features, order),
            "confidence_level": boot.confidence_level,
        }
    return TRF(
        coef=_as_trf(coef, n_features, order),
        delays=delays[order],
        times=times,
        feature_names=_feature_names(
            estimator if regressor_name is not None else None, delayer
        ),
        **bounds,
    )
