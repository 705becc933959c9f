"""What a bootstrap reads of each fitted model: names, checks, statistics.

``attributes`` of :class:`~skbatch.BootstrapEstimator` names fitted
attributes (dotted names read attributes of attributes, as
:func:`operator.attrgetter` does) or is a callable; :func:`statistic` reads
them, as float64 arrays, from the fit on all data and from every replicate
of both paths.
"""

import operator
from collections.abc import Mapping

import numpy as np

from ..backend import to_numpy

# The attributes the batched linear path computes.
LINEAR_ATTRIBUTES = ("coef_", "intercept_")
# What attributes="auto" bootstraps of a model without coef_ (trees, forests,
# boosting): the one per-feature summary such models have.
IMPORTANCES = "feature_importances_"
# results_ key of a callable ``attributes`` that returns a single array.
STATISTIC_KEY = "statistic"
# Attributes that only exist through hyperparameter tuning: with tuning held
# fixed across replicates they would be constant (or absent from the frozen
# estimator), so asking for them needs tune_per_replicate=True.
TUNED_ATTRIBUTES = (
    "alpha_",
    "band_weights_",
    "band_alphas_",
    "best_score_",
    "cv_results_",
    "best_params_",
    "best_index_",
)


def check_attributes_param(attributes):
    if callable(attributes):
        return
    if isinstance(attributes, str):
        if _is_attribute_name(attributes):
            return
    elif isinstance(attributes, list | tuple) and attributes:
        if all(_is_attribute_name(a) for a in attributes):
            if len(set(attributes)) == len(attributes):
                return
    raise ValueError(
        f"attributes must be 'auto', an attribute name (dotted names such as "
        f"'named_steps.ridge.coef_' read attributes of attributes, no part "
        f"empty), a non-empty sequence of distinct names, or a callable, got "
        f"{attributes!r}"
    )


def _is_attribute_name(name):
    """A non-empty name whose dotted parts are all non-empty."""
    return isinstance(name, str) and all(name.split("."))


def missing_attribute(source, name):
    """What a fitted ``source`` lacks to read ``name`` (dotted, as
    :func:`operator.attrgetter` reads it), in words; None when it has it."""
    value, read = source, []
    for part in name.split("."):
        if not hasattr(value, part):
            where = f"the fitted {type(source).__name__}"
            if read:
                where += f"'s {'.'.join(read)} (a {type(value).__name__})"
            return f"{where} has no attribute {part!r}"
        value = getattr(value, part)
        read.append(part)
    return None


def check_not_tuned(names):
    tuned = [name for name in names if name in TUNED_ATTRIBUTES]
    if tuned:
        raise ValueError(
            f"attributes {tuned} are chosen by hyperparameter tuning, which is "
            f"done once on all data and held fixed across replicates; set "
            f"tune_per_replicate=True to bootstrap the tuning too"
        )


def unwrap_search(fitted):
    """The model a hyperparameter search selected, or the estimator itself."""
    if hasattr(fitted, "best_params_") and hasattr(fitted, "best_estimator_"):
        return fitted.best_estimator_
    return fitted


def statistic(source, attributes):
    """The bootstrapped quantities of one fitted model, as float64 arrays."""
    if callable(attributes):
        values = attributes(source)
        if not isinstance(values, Mapping):
            values = {STATISTIC_KEY: values}
    else:
        # scikit-learn's convention for a fitted attribute named by a string
        # (SelectFromModel's importance_getter): "named_steps.ridge.coef_"
        # reads a pipeline step's coefficients.
        values = {name: operator.attrgetter(name)(source) for name in attributes}
    return {name: _as_float(name, value) for name, value in values.items()}


def _as_float(name, value):
    try:
        return np.asarray(to_numpy(value), dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"attribute {name!r} must be a number or a numeric array to be "
            f"bootstrapped, got {type(value).__name__}"
        ) from exc


def attribute_names(source, attributes):
    """Names to read from each fit (None for a callable), checked on ``source``."""
    if callable(attributes):
        return None
    if isinstance(attributes, str) and attributes == "auto":
        if hasattr(source, "coef_"):
            return tuple(a for a in LINEAR_ATTRIBUTES if hasattr(source, a))
        if hasattr(source, IMPORTANCES):
            return (IMPORTANCES,)
        raise ValueError(
            f"attributes='auto' bootstraps coef_ and intercept_, or else "
            f"{IMPORTANCES}, but the fitted {type(source).__name__} has "
            f"neither coef_ nor {IMPORTANCES}; pass attribute names or a "
            f"callable"
        )
    names = (attributes,) if isinstance(attributes, str) else tuple(attributes)
    for name in names:
        missing = missing_attribute(source, name)
        if missing is not None:
            raise ValueError(
                f"attributes names {name!r}, but {missing}; got "
                f"attributes={attributes!r}"
            )
    return names
