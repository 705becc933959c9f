"""The jackknife of BCa: acceleration from leave-one-unit-out fits.

``ci_method="bca"`` needs, per element, the acceleration of the jackknife
(:func:`skbatch.streaming.bca_acceleration` of the power sums of
``theta_(-i) - theta``). A unit is a row, or a group with ``groups``. On
the linear path the sums are closed-form updates of the fit on all data
(:func:`linear_jackknife_sums`, :func:`banded_jackknife_sums`); when those
are ill-defined, and on the generic path, one refit per unit through joblib.
"""

import functools
import math

import numpy as np
from scipy import linalg
from sklearn.base import clone

# Private to scikit-learn, without a public twin: the refits slice X, y and
# the fit parameters as its own cross-validation does (DataFrames by
# position, only the per-sample parameters); tests/test_private_names.py
# checks what is relied on here.
from sklearn.utils import _safe_indexing
from sklearn.utils.validation import _check_method_params

from .._engine.preflight import check_jackknife, linear_jackknife_bytes, refit_window
from .._estimators.base import refit_params
from .._ridge.banded.bootstrap import HeldBands
from ..streaming import bca_acceleration
from .attributes import statistic, unwrap_search
from .refit import windowed_refits
from .summaries import refuse_bca

# The closed-form jackknife of the linear path needs the leave-one-out fits
# well defined: every unit's leverage gap 1 - h_i above this, and the
# penalised Gram matrix's condition number below BCA_MAX_CONDITION (a loss
# of at most 6 of float64's 16 digits); otherwise it refits.
BCA_MIN_LEVERAGE_GAP = 1e-8
BCA_MAX_CONDITION = 1e10


def check_linear_jackknife(settings, X, y, groups, data, summaries, shapes, banded):
    """Refuse, before any replicate, a BCa jackknife of the linear path that
    the budget cannot hold after them: its closed form, and the refits
    it falls back on when a leave-one-out fit is ill-defined."""
    n_samples, n_features = X.shape
    n_targets = 1 if y.ndim == 1 else y.shape[1]
    copies = (X.dtype != np.float64) * X.size + (y.dtype != np.float64) * y.size
    largest_group = None
    if groups is not None:
        largest_group = int(np.unique(groups, return_counts=True)[1].max())
    jackknife = linear_jackknife_bytes(
        n_samples,
        n_features,
        n_targets,
        largest_group=largest_group,
        copies=copies,
        banded=banded,
    )
    refuse = functools.partial(refuse_bca, settings)
    check_jackknife(settings.max_memory_gb, data, summaries, jackknife, refuse)
    size = sum(math.prod(shape) for shape in shapes.values())
    refit_window(
        settings.max_memory_gb,
        settings.n_jobs,
        data,
        summaries,
        n_samples,
        size,
        refuse,
    )


def jackknife_acceleration(settings, linear, estimator, inputs, attributes, estimates):
    """BCa acceleration per attribute, from leave-one-unit-out fits.

    A unit is a row, or a group with ``groups``. Closed-form updates of
    the fit on all data on the linear path (``linear``, from
    :func:`skbatch._bootstrap.linear.linear_model`) when they are well
    defined; otherwise one refit per unit of ``estimator`` through joblib.
    """
    X, y, X_fit, y_fit, groups, fit_params, data = inputs
    units = (
        np.arange(X.shape[0])
        if groups is None
        else np.unique(groups, return_inverse=True)[1]
    )
    n_units = int(units.max()) + 1
    sums = None
    if linear is not None:
        spec, _ = linear
        args = (
            fit_params.get("sample_weight"),
            units if groups is not None else None,
            {name: value.shape for name, value in estimates.items()},
        )
        if isinstance(spec, HeldBands):
            sums = banded_jackknife_sums(X, y, spec, *args)
        else:
            sums = linear_jackknife_sums(X, y, spec.alphas, spec.fit_intercept, *args)
    if sums is None:
        sums = refit_jackknife_sums(
            settings,
            estimator,
            X_fit,
            y_fit,
            units,
            n_units,
            groups,
            fit_params,
            attributes,
            estimates,
            data,
        )
    return {name: bca_acceleration(*sums[name], n_units) for name in estimates}


def refit_jackknife_sums(
    settings,
    estimator,
    X,
    y,
    units,
    n_units,
    groups,
    fit_params,
    attributes,
    estimates,
    data,
):
    """Power sums of ``theta_(-i) - theta`` by one refit per unit."""
    shapes = {name: value.shape for name, value in estimates.items()}
    bounds, run = windowed_refits(settings, X, shapes, data)
    flat = np.concatenate([value.ravel() for value in estimates.values()])
    task = functools.partial(
        _jackknife_refits,
        estimator=estimator,
        X=X,
        y=y,
        units=units,
        fit_params=refit_params(estimator, groups, fit_params),
        attributes=attributes,
        shapes=shapes,
        estimate=flat,
    )
    power = np.zeros((3, bounds[-1]))

    def reduce(ids, result):
        for k in range(3):
            power[k] += (result ** (k + 1)).sum(axis=0)

    run(task, reduce, n_items=n_units, desc="jackknife refits")
    return {
        name: tuple(
            power[k, bounds[j] : bounds[j + 1]].reshape(shapes[name]) for k in range(3)
        )
        for j, name in enumerate(shapes)
    }


def _jackknife_refits(
    ids, *, estimator, X, y, units, fit_params, attributes, shapes, estimate
):
    """Generic-path task: refit without unit i, for each i of ``ids``.

    Returns ``theta_(-i) - theta`` of shape (len(ids), total size of the
    attributes), raveled and concatenated in the order of ``shapes``.
    """
    out = np.empty((len(ids), estimate.size))
    for k, unit in enumerate(ids):
        rows = np.flatnonzero(units != unit)
        try:
            fitted = clone(estimator).fit(
                _safe_indexing(X, rows),
                _safe_indexing(y, rows),
                **_check_method_params(X, fit_params, rows),
            )
            values = statistic(unwrap_search(fitted), attributes)
            for name, value in values.items():
                if name not in shapes or value.shape != shapes[name]:
                    raise ValueError(
                        f"{name} has shape {value.shape} but {shapes.get(name)} "
                        f"on all data"
                    )
            out[k] = np.concatenate([v.ravel() for v in values.values()]) - estimate
        except Exception as exc:
            if hasattr(exc, "add_note"):
                exc.add_note(f"Raised in the jackknife fit leaving out unit {unit}.")
            raise
    return out


def linear_jackknife_sums(X, y, alphas, fit_intercept, sample_weight, units, shapes):
    """Power sums of ``theta_(-i) - theta`` for ridge at fixed alphas, closed form.

    Leaving unit i out of the weighted problem ``min sum w (y - b - x beta)^2
    + alpha |beta|^2`` removes its rows from the normal equations of
    ``Z = [X - mean, 1]`` (the intercept unpenalised), so with ``A = Z' W Z +
    alpha D`` and residuals ``e`` of the fit on all data:

    - a row: ``theta_(-i) = theta - A^-1 z_i w_i e_i / (1 - w_i z_i' A^-1
      z_i)`` (Sherman-Morrison), whose power sums over i are three matrix
      products;
    - a group g: ``theta_(-g) = theta - A^-1 Z_g' (I - W_g Z_g A^-1
      Z_g')^-1 W_g e_g`` (Woodbury).

    The intercept of the uncentred X is ``b - beta . mean``. Returns a dict of
    name to ``(sum u, sum u^2, sum u^3)``, or None when a leave-one-out fit
    is ill-defined or not cheaper this way (more features than samples, a
    leverage of 1, a nearly singular system), for refits instead.
    """
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(y, dtype=np.float64).reshape(X.shape[0], -1)
    n_samples, n_features = X.shape
    n_targets = Y.shape[1]
    weight = (
        np.ones(n_samples)
        if sample_weight is None
        else np.asarray(sample_weight, dtype=np.float64)
    )
    Z = X
    if fit_intercept:
        offset = (weight @ X) / weight.sum()
        Z = np.hstack([X - offset, np.ones((n_samples, 1))])
    n_columns = Z.shape[1]
    if n_columns >= n_samples:
        return None
    penalty = np.ones(n_columns)
    if fit_intercept:
        penalty[-1] = 0.0
    alphas = np.broadcast_to(np.asarray(alphas, dtype=np.float64).ravel(), (n_targets,))
    gram = (Z * weight[:, None]).T @ Z
    power = np.zeros((3, n_columns, n_targets))
    members = None if units is None else _unit_rows(units)
    for alpha in np.unique(alphas):
        columns = np.flatnonzero(alphas == alpha)
        A = gram + alpha * np.diag(penalty)
        if not np.linalg.cond(A) < BCA_MAX_CONDITION:
            return None
        try:
            factor = linalg.cho_factor(A)
        except linalg.LinAlgError:
            return None
        # A^-1 Z', and its map to (coef, intercept of the uncentred X).
        P = linalg.cho_solve(factor, Z.T)
        theta = P @ (weight[:, None] * Y[:, columns])
        residuals = Y[:, columns] - Z @ theta
        P_out = P.copy()
        if fit_intercept:
            P_out[-1] -= offset @ P[:-1]
        if members is None:
            leverage = weight * np.einsum("ij,ji->i", Z, P)
            gap = 1.0 - leverage
            if not (gap > BCA_MIN_LEVERAGE_GAP).all():
                return None
            G = P_out * (weight / gap)
            for k in range(3):
                sign = -1.0 if k % 2 == 0 else 1.0
                power[k][:, columns] = sign * (G ** (k + 1)) @ residuals ** (k + 1)
            continue
        for rows in members:
            local = weight[rows, None] * (Z[rows] @ P[:, rows])
            system = np.eye(len(rows)) - local
            try:
                solved = linalg.solve(system, weight[rows, None] * residuals[rows])
            except linalg.LinAlgError:
                return None
            if not np.linalg.cond(system) < BCA_MAX_CONDITION:
                return None
            shift = -(P_out[:, rows] @ solved)
            for k in range(3):
                power[k][:, columns] += shift ** (k + 1)
    out = {}
    for name, shape in shapes.items():
        if name == "coef_":
            values = power[:, :n_features, :].transpose(0, 2, 1)
        elif fit_intercept:
            values = power[:, n_features, :]
        else:
            # Shaped like the estimator's own intercept_ (0.0 for sklearn).
            values = np.zeros((3, *shape))
        out[name] = tuple(v.reshape(shape) for v in values)
    return out


def banded_jackknife_sums(X, y, held, sample_weight, units, shapes):
    """:func:`linear_jackknife_sums` of a :class:`HeldBands`, candidate by
    candidate: ridge on each candidate's rescaled columns for its targets,
    whose deviations scale back by ``sqrt(gamma_b)`` (their k-th powers by
    its k-th power); 0 in the bands left out. None when any candidate's is.
    """
    design, chosen = held.design(X)
    Y = np.asarray(y, dtype=np.float64).reshape(X.shape[0], -1)
    n_targets, n_features = Y.shape[1], X.shape[1]
    coef = np.zeros((3, n_targets, n_features))
    intercept = np.zeros((3, n_targets))
    for c in range(len(design.kept)):
        targets = np.flatnonzero(chosen == c)
        kept, scale = design.kept[c], design.scales[c]
        sums = linear_jackknife_sums(
            design.design(c),
            Y[:, targets],
            held.alphas[targets],
            held.fit_intercept,
            sample_weight,
            units,
            {"coef_": (targets.size, kept.size), "intercept_": (targets.size,)},
        )
        if sums is None:
            return None
        for k in range(3):
            coef[k][np.ix_(targets, kept)] = sums["coef_"][k] * scale ** (k + 1)
            intercept[k][targets] = sums["intercept_"][k]
    power = {"coef_": coef, "intercept_": intercept}
    return {
        name: tuple(power[name][k].reshape(shape) for k in range(3))
        for name, shape in shapes.items()
    }


def _unit_rows(units):
    order = np.argsort(units, kind="stable")
    bounds = np.flatnonzero(np.diff(units[order])) + 1
    return np.split(order, bounds)
