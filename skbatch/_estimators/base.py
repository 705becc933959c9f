"""Pieces shared by the three estimators: device moves and array I/O."""

import copy
import functools
import inspect
import numbers

import numpy as np
from sklearn import get_config
from sklearn.base import clone
from sklearn.utils import get_tags
from sklearn.utils.metadata_routing import (
    MetadataRouter,
    MethodMapping,
    get_routing_for_object,
    process_routing,
)
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted, validate_data

from .._engine.report import FitReport, collect_stages
from ..backend import backend_of_array, resolve_backend, to_numpy
from ..random import check_groups


def host_input(X):
    """Host copy of a torch/jax input, and the backend it came from.

    DataFrames and other array-likes are returned untouched so that
    ``validate_data`` still sees their feature names.
    """
    source = backend_of_array(X)
    if source is None:
        return X, None
    return to_numpy(X), source


def estimator_input(given, validated):
    """What a wrapped estimator is fit on: a DataFrame or Series as given.

    pandas objects reach it as the user passed them, as scikit-learn's
    ``permutation_test_score`` passes them: column names for its own checks
    and name-based transformers, ``.iloc`` for the user's code; anything else
    as the ``validated`` array.
    """
    return given if hasattr(given, "iloc") else validated


def check_input_device(source, backend):
    """Refuse an input array that sits on another device than the model."""
    if source is not None and source.device != backend.device:
        raise ValueError(
            f"X is a {source.library} array on device {source.device!r} but the "
            f"model computes on {backend.device!r} ({backend.name}); nothing is "
            f"moved silently. Move X to {backend.device!r}, or move the model "
            f"with est.to_device({source.device!r})."
        )


def as_output(result, source):
    """Return a host result in the library (and on the device) of the input."""
    if source is None:
        return result
    with source.context():
        return source.asarray(result)


def check_verbose(verbose):
    if (
        isinstance(verbose, bool)
        or not isinstance(verbose, numbers.Integral)
        or (verbose < 0)
    ):
        raise ValueError(f"verbose must be an int >= 0, got {verbose!r}")


def check_max_memory_gb(max_memory_gb):
    if max_memory_gb is None:
        return
    if isinstance(max_memory_gb, bool) or not isinstance(max_memory_gb, numbers.Real):
        raise TypeError(
            f"max_memory_gb must be None or a number of GB > 0, got "
            f"{type(max_memory_gb).__name__}: {max_memory_gb!r}"
        )
    if not (np.isfinite(max_memory_gb) and max_memory_gb > 0):
        raise ValueError(
            f"max_memory_gb must be None or a finite number of GB > 0, got "
            f"{max_memory_gb!r}"
        )


def atomic_fit(fit):
    """Make ``fit`` all or nothing, and publish how it ran as ``fit_report_``.

    If ``fit`` raises, or is interrupted (KeyboardInterrupt included), the
    estimator's attributes are restored to what they were before the call:
    a refit that fails keeps the previous model (and report) whole, and a
    first fit that fails leaves the estimator unfitted. Fitted attributes are
    only visible once ``fit`` has returned. On success, ``fit_report_`` is a
    :class:`~skbatch.FitReport` of the engine's loops that ran meanwhile,
    nested fits' included, whose seconds add up to the fit's wall time (see
    :mod:`skbatch._engine.report`); ``fit`` must set ``backend_``.
    """

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        state = dict(vars(self))
        try:
            verbose = getattr(self, "verbose", 0)
            if isinstance(verbose, bool) or not isinstance(verbose, numbers.Integral):
                verbose = 0  # refused by the fit itself
            with collect_stages(verbose) as stages:
                result = fit(self, *args, **kwargs)
            self.fit_report_ = FitReport(backend=self.backend_, stages=stages)
            return result
        except BaseException:
            vars(self).clear()
            vars(self).update(state)
            raise

    return wrapper


class DeviceMixin:
    """``to_device`` and run-or-raise for estimators with a ``backend_``."""

    def to_device(self, device):
        """Move the fitted estimator to another device, explicitly.

        Fitted arrays are host numpy, so nothing is copied: ``backend_``,
        where later computation runs, changes, and so does the ``device``
        parameter, so that a refit runs where the model was moved (a model
        fitted with ``device="torch"`` and moved to ``"cpu"`` refits with
        numpy, on a host without torch too). A wrapper moves its
        ``estimator_`` as well, and its ``estimator`` parameter is replaced
        by a clone with that ``device`` (the object given is left as it was);
        where that estimator is a ``Pipeline`` (or another meta-estimator),
        so are the skbatch estimators among its steps, and the
        ``best_estimator_`` of a fitted hyperparameter search.

        Parameters
        ----------
        device : str or Backend
            Any specification accepted by :func:`skbatch.resolve_backend`
            except ``"auto"``.

        Returns
        -------
        self : object
            The estimator, with ``backend_`` on the new device.
        """
        check_is_fitted(self, "backend_")
        if device == "auto":
            raise ValueError(
                "to_device needs an explicit device such as 'cpu' or 'cuda:0', "
                "got 'auto'"
            )
        self.backend_ = resolve_backend(device)
        self.device = device
        for part in _fitted_device_parts(getattr(self, "estimator_", None)):
            part.to_device(device)
        given = getattr(self, "estimator", None)
        parts = _device_parts(given)
        if parts:
            moved = clone(given)
            moved.set_params(
                **{f"{key}__device" if key else "device": device for key, _ in parts}
            )
            self.estimator = moved
        return self


def _device_parts(estimator):
    """``[(parameter path, estimator), ...]`` of the outermost estimators with
    a ``to_device`` in ``estimator``: itself (path ""), or those among its
    nested parameters (the steps of a ``Pipeline``, by name), each of which
    moves what it holds itself."""
    if hasattr(estimator, "to_device"):
        return [("", estimator)]
    if not hasattr(estimator, "get_params") or isinstance(estimator, type):
        return []
    movable = {
        key: value
        for key, value in estimator.get_params(deep=True).items()
        if hasattr(value, "to_device") and not isinstance(value, type)
    }
    return [
        (key, value)
        for key, value in movable.items()
        if not any(key.startswith(f"{outer}__") for outer in movable)
    ]


def _fitted_device_parts(estimator):
    """The fitted movable estimators of :func:`_device_parts` in a fitted
    ``estimator``, and those of the ``best_estimator_`` of any search among
    it and its nested parameters (a refit ``GridSearchCV``)."""
    if estimator is None:
        return []
    parts = [part for _, part in _device_parts(estimator) if hasattr(part, "backend_")]
    nested = []
    if hasattr(estimator, "get_params") and not isinstance(estimator, type):
        nested = list(estimator.get_params(deep=True).values())
    for value in [estimator, *nested]:
        best = getattr(value, "best_estimator_", None)
        if best is not None and not isinstance(value, type):
            parts += _fitted_device_parts(best)
    return parts


def _estimator_has(attr):
    """For ``available_if``: the fitted (or else the given) estimator has attr."""

    def check(self):
        if hasattr(self, "estimator_"):
            return hasattr(self.estimator_, attr)
        return hasattr(self._get_estimator(), attr)

    return check


def check_n_jobs(n_jobs):
    """joblib's convention: None, or a non-zero int (-1: all cores)."""
    if n_jobs is None:
        return
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral):
        raise TypeError(
            f"n_jobs must be None or an int, got {type(n_jobs).__name__}: {n_jobs!r}"
        )
    if n_jobs == 0:
        raise ValueError(
            "n_jobs must be None, a positive int (workers) or a negative int "
            "(-1: all cores, -2: all but one...), got 0"
        )


def fit_under_budget(estimator, max_memory_gb):
    """A clone of ``estimator`` for a wrapper's fit on all data, under the
    wrapper's ``max_memory_gb`` where the estimator takes a budget and was
    given none: the wrapper's budget is the whole fit's, and its
    ``fit_report_`` records the stages against it."""
    estimator = clone(estimator)
    if max_memory_gb is not None:
        params = estimator.get_params(deep=False)
        if "max_memory_gb" in params and params["max_memory_gb"] is None:
            estimator.set_params(max_memory_gb=max_memory_gb)
    return estimator


def refit_params(estimator, groups, fit_params):
    """``fit_params`` of a wrapper's fits of ``estimator``, with the rows' groups.

    ``groups`` join them when the estimator's fit takes them: under metadata
    routing, when it requests ``groups`` (a ``BatchedRidge``, a
    ``Delayer`` or a group-splitting ``RidgeCV``, in a pipeline too);
    otherwise, when its ``fit`` has a ``groups`` parameter. Sliced with the
    rows of every refit, they give an inner group CV (leave-one-run-out
    within leave-one-run-out) the runs of its subset.
    """
    if groups is None:
        return fit_params
    if get_config()["enable_metadata_routing"]:
        takes = bool(get_routing_for_object(estimator).consumes("fit", ["groups"]))
    else:
        takes = "groups" in inspect.signature(estimator.fit).parameters
    return {**fit_params, "groups": groups} if takes else fit_params


class WrapperMixin(DeviceMixin):
    """Delegation to ``estimator_`` for the meta-estimators.

    Subclasses define ``_default_estimator()`` (used when ``estimator`` is
    None).
    """

    def _get_estimator(self):
        return self._default_estimator() if self.estimator is None else self.estimator

    def _check_fit_input(self, X, y, groups, fit_params, **check_params):
        """The inputs of ``fit`` on the host, validated before any work.

        torch and jax arrays come to the host; X and y go through
        ``validate_data`` (multi-output, with ``check_params``), and the
        groups are checked against the number of samples. The values of X
        (missing values, dtype) are the wrapped estimator's to judge, as in
        ``permutation_test_score``: a pipeline that imputes takes NaN, and
        a DataFrame reaches it unchanged.

        Returns
        -------
        X, y : host inputs as given (a DataFrame stays one)
        X_valid, y_valid : validated arrays
        groups : ndarray or None
        fit_params : dict
            With host values.
        """
        check_n_jobs(self.n_jobs)
        X, _ = host_input(X)
        y, _ = host_input(y)
        if get_config()["enable_metadata_routing"]:
            # The parameters the estimator requests, refused if none does.
            fit_params = process_routing(self, "fit", **fit_params).estimator.fit
        fit_params = {key: host_input(value)[0] for key, value in fit_params.items()}
        check_params.update(dtype=None, ensure_all_finite=False)
        X_valid, y_valid = validate_data(self, X, y, multi_output=True, **check_params)
        groups = check_groups(groups, X_valid.shape[0])
        return X, y, X_valid, y_valid, groups, fit_params

    def get_metadata_routing(self):
        """Where the parameters of ``fit`` go under metadata routing.

        With ``sklearn.set_config(enable_metadata_routing=True)``, the
        parameters of ``fit`` that the estimator requests (its
        ``set_fit_request``) reach its fit on all data and every refit;
        ``groups``, and ``sample_weight`` of :meth:`score`, are this
        object's own (its ``set_fit_request`` and ``set_score_request``).

        Returns
        -------
        routing : sklearn.utils.metadata_routing.MetadataRouter
        """
        return (
            MetadataRouter(owner=type(self).__name__)
            .add_self_request(self)
            .add(
                estimator=self._get_estimator(),
                method_mapping=MethodMapping().add(caller="fit", callee="fit"),
            )
        )

    def __sklearn_tags__(self):
        # The wrapper is what it wraps: a classifier's wrapper is a
        # classifier (is_classifier, and so stratified folds in
        # cross_val_score), a regressor's a regressor.
        tags = super().__sklearn_tags__()
        inner = get_tags(self._get_estimator())
        tags.estimator_type = inner.estimator_type
        tags.input_tags = copy.deepcopy(inner.input_tags)
        tags.target_tags = copy.deepcopy(inner.target_tags)
        tags.regressor_tags = copy.deepcopy(inner.regressor_tags)
        tags.classifier_tags = copy.deepcopy(inner.classifier_tags)
        return tags

    @property
    def classes_(self):
        """The class labels of ``estimator_``, for a classifier.

        Absent (``hasattr`` is False) before ``fit`` and for an estimator
        without ``classes_``.
        """
        return self.estimator_.classes_

    @available_if(_estimator_has("predict"))
    def predict(self, X):
        """Predict with ``estimator_``, the estimator fit on all data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        y_pred : array of shape (n_samples,) or (n_samples, n_targets)
            ``estimator_.predict(X)``.
        """
        check_is_fitted(self)
        return self.estimator_.predict(X)

    @available_if(_estimator_has("predict_proba"))
    def predict_proba(self, X):
        """Class probabilities from ``estimator_``, the estimator fit on all data.

        Available when the estimator has ``predict_proba``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        proba : array of shape (n_samples, n_classes)
            ``estimator_.predict_proba(X)``, columns in the order of
            ``classes_``.
        """
        check_is_fitted(self)
        return self.estimator_.predict_proba(X)

    @available_if(_estimator_has("predict_log_proba"))
    def predict_log_proba(self, X):
        """Log class probabilities from ``estimator_``.

        Available when the estimator has ``predict_log_proba``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        log_proba : array of shape (n_samples, n_classes)
            ``estimator_.predict_log_proba(X)``.
        """
        check_is_fitted(self)
        return self.estimator_.predict_log_proba(X)

    @available_if(_estimator_has("decision_function"))
    def decision_function(self, X):
        """Decision function of ``estimator_``.

        Available when the estimator has ``decision_function``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        scores : array of shape (n_samples,) or (n_samples, n_classes)
            ``estimator_.decision_function(X)``.
        """
        check_is_fitted(self)
        return self.estimator_.decision_function(X)

    @available_if(_estimator_has("score"))
    def score(self, X, y, sample_weight=None):
        """Score of ``estimator_`` on (X, y).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Test samples.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            True values.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights.

        Returns
        -------
        score : float
            ``estimator_.score(X, y)``.
        """
        check_is_fitted(self)
        if sample_weight is None:
            return self.estimator_.score(X, y)
        return self.estimator_.score(X, y, sample_weight=sample_weight)
