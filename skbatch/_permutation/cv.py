"""What PermutationScorer's cross-validated score is made of.

The metrics of ``scoring`` (and those with a value per target) and their
checks, the folds of ``cv`` as integer rows and whether they depend on
``y`` (then split again for every resampled ``y``), and a resampled ``y``
with the signs of its rows flipped. :mod:`skbatch._permutation.paths`
refits and scores with them.
"""

import numpy as np
from sklearn.metrics import (
    explained_variance_score,
    get_scorer_names,
    mean_absolute_error,
    mean_absolute_percentage_error,
    mean_squared_error,
    median_absolute_error,
    r2_score,
    root_mean_squared_error,
)
from sklearn.model_selection import (
    GroupKFold,
    GroupShuffleSplit,
    KFold,
    LeaveOneGroupOut,
    LeaveOneOut,
    LeavePGroupsOut,
    LeavePOut,
    PredefinedSplit,
    RepeatedKFold,
    ShuffleSplit,
    TimeSeriesSplit,
    check_cv,
)

from .._kernels import linalg as _linalg
from .._ridge.cv import fold_rows, uses_groups


def _pearson(y_true, y_pred, *, multioutput="raw_values"):
    """Pearson correlation of each column; NaN where it is undefined.

    Undefined: fewer than 2 rows, or a constant column (as ``np.corrcoef``).
    The correlation of every path, that of the ridge fast path included
    (:func:`skbatch._kernels.linalg.score_per_target`); NaN is reported by the
    scorer once, not per fold.
    """
    y_true = np.asarray(y_true).reshape(len(y_true), -1)
    y_pred = np.asarray(y_pred).reshape(len(y_pred), -1)
    r = _linalg.score_per_target(y_true, y_pred, "correlation", warn=False, xp=np)
    return r if multioutput == "raw_values" else float(np.mean(r))


# Scorings with a per-target value (multioutput="raw_values"): the metric and
# the sign of the scorer of that name (scorers are higher-is-better).
_PER_TARGET_METRICS = {
    "r2": (r2_score, 1.0),
    "correlation": (_pearson, 1.0),
    "explained_variance": (explained_variance_score, 1.0),
    "neg_mean_squared_error": (mean_squared_error, -1.0),
    "neg_root_mean_squared_error": (root_mean_squared_error, -1.0),
    "neg_mean_absolute_error": (mean_absolute_error, -1.0),
    "neg_median_absolute_error": (median_absolute_error, -1.0),
    "neg_mean_absolute_percentage_error": (mean_absolute_percentage_error, -1.0),
}
# Splitters whose folds depend on X's length (and groups) but not on y: their
# folds are the same for every permutation of y, so they are drawn once.
# What check_cv makes of an iterable of splits, whose folds are fixed: its
# class is private to scikit-learn, check_cv is not.
_FIXED_SPLITS = type(check_cv([(np.array([0]), np.array([1]))]))
# Exact types: a subclass may split on y. Any other splitter (stratified, or
# a user's) is re-run on every permuted y, as ``permutation_test_score``
# does.
_Y_FREE_SPLITTERS = (
    KFold,
    GroupKFold,
    TimeSeriesSplit,
    LeaveOneOut,
    LeavePOut,
    LeaveOneGroupOut,
    LeavePGroupsOut,
    ShuffleSplit,
    GroupShuffleSplit,
    PredefinedSplit,
    RepeatedKFold,
    _FIXED_SPLITS,
)


def _splits_ignore_y(cv):
    """Whether the folds of splitter ``cv`` (after ``check_cv``) ignore y."""
    return type(cv) in _Y_FREE_SPLITTERS


def _split_rows(cv, X, y, groups):
    """``cv.split``, with groups only for a splitter that uses them."""
    if not uses_groups(cv):
        groups = None
    n_samples = X.shape[0]
    # Integer indices from here on, as the batched paths index rows with
    # them (masks and negative indices are read as X[rows] would read them).
    splits = [
        (
            fold_rows(train, n_samples, fold, "training"),
            fold_rows(test, n_samples, fold, "test"),
        )
        for fold, (train, test) in enumerate(cv.split(X, y, groups))
    ]
    if not splits:
        raise ValueError(f"cv={cv!r} gave no train/test split")
    for train, test in splits:
        if len(train) == 0 or len(test) == 0:
            raise ValueError(
                f"cv={cv!r} gave an empty training or test fold (train "
                f"{len(train)} rows, test {len(test)} rows)"
            )
    return splits


def _metrics(scoring):
    """The metrics of ``scoring``: name -> single scoring, ``{None: scoring}``
    for a single one.

    A list, tuple or set of unique scorer names, or a dict of name to scorer
    (a name or a callable), as :func:`sklearn.model_selection.cross_validate`
    takes several metrics.
    """
    if isinstance(scoring, dict):
        if not scoring or not all(isinstance(name, str) for name in scoring):
            raise ValueError(
                f"scoring as a dict must map at least one metric name (a str) to "
                f"a scorer, got {scoring!r}"
            )
        return dict(scoring)
    if isinstance(scoring, list | tuple | set | frozenset):
        names = list(scoring)
        if (
            not names
            or not all(isinstance(name, str) for name in names)
            or len(set(names)) != len(names)
        ):
            raise ValueError(
                f"scoring as a list, tuple or set must hold at least one scorer "
                f"name, each once, got {scoring!r}"
            )
        return {name: name for name in names}
    return {None: scoring}


def _per_target_score(value, y):
    """A callable scorer's value, checked to hold one score per target."""
    value = np.asarray(value, dtype=np.float64)
    n_targets = 1 if np.ndim(y) == 1 else np.shape(y)[1]
    if value.shape != (n_targets,) and not (value.shape == () and n_targets == 1):
        raise ValueError(
            f"With multioutput='raw_values' a callable scoring must return one "
            f"score per target, an array of shape ({n_targets},); it returned "
            f"shape {value.shape}. Or use one of the per-target scorings "
            f"{tuple(_PER_TARGET_METRICS)}."
        )
    return value.reshape(n_targets)


def _flipped(y, signs):
    """The rows of ``y`` (array, Series or DataFrame) times ``signs``."""
    if hasattr(y, "mul"):
        return y.mul(signs, axis=0)
    y = np.asarray(y)
    return y * signs.reshape(-1, *(1,) * (y.ndim - 1))


def _check_scoring(scoring, where, multioutput):
    """Refuse a single scoring (``where``: "scoring" or a metric's name)."""
    if where != "scoring":
        where = f"scoring[{where!r}]"
    if isinstance(scoring, str):
        if scoring not in get_scorer_names() and scoring != "correlation":
            raise ValueError(
                f"{where} must be None, a callable, 'correlation' or a name "
                f"from sklearn.metrics.get_scorer_names(), got {scoring!r}"
            )
    elif scoring is not None and not callable(scoring):
        raise ValueError(
            f"{where} must be None, a callable or a scorer name, got {scoring!r}"
        )
    if (
        multioutput == "raw_values"
        and isinstance(scoring, str)
        and scoring not in _PER_TARGET_METRICS
    ):
        raise ValueError(
            f"multioutput='raw_values' needs a scoring with a value per "
            f"target: None, a callable returning one score per target, or "
            f"one of {tuple(_PER_TARGET_METRICS)}, got {where}={scoring!r}"
        )
