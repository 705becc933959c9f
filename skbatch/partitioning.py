"""Variance partitioning: which band explains which target uniquely.

One :class:`~skbatch.BandedRidge` per non-empty subset of the bands, each
scored on held-out folds; the set-theoretic maths on those scores is in
:mod:`skbatch._ridge.partition`.
"""

import numbers
from typing import NamedTuple

import numpy as np
from sklearn.base import clone
from sklearn.model_selection import KFold, LeaveOneGroupOut, check_cv
from sklearn.utils import check_array, check_X_y

from ._linalg import score_per_target
from ._ridge.banded import WEIGHT_FLOOR, check_band_weights, check_bands
from ._ridge.cv import MIN_SAMPLES, fold_rows, uses_groups
from ._ridge.partition import subsets as _subsets
from ._ridge.partition import unique_variance, venn_regions
from .banded import BandedRidge
from .random import check_groups

__all__ = ["VariancePartition", "variance_partitioning"]

# 2**8 - 1 = 255 BandedRidge searches per fold: past that the subset models
# cost more than any study of unique variance is worth, and 2**k grows fast.
MAX_BANDS = 8
# Outer folds without groups, as cross_val_score's default.
DEFAULT_N_SPLITS = 5


class VariancePartition(NamedTuple):
    """What :func:`variance_partitioning` returns.

    Attributes
    ----------
    subsets : list of tuple
        Every non-empty subset of the bands, as tuples of band names
        (``BandedRidge.band_names_``), by size, then lexicographic in band
        order.
    scores : ndarray of shape (n_subsets, n_targets)
        Held-out R^2 of the model on each subset, the mean over the folds.
    regions : ndarray of shape (n_subsets, n_targets)
        The Venn region of each subset: the variance shared by exactly its
        bands (for a single band, its unique variance).
    unique : ndarray of shape (n_bands, n_targets)
        Unique variance of each band, ``f(all) - f(all but that band)``.
    band_names : ndarray of shape (n_bands,)
        The bands, in the order of the rows of ``unique``.
    """

    subsets: list
    scores: np.ndarray
    regions: np.ndarray
    unique: np.ndarray
    band_names: np.ndarray


def variance_partitioning(
    X,
    y,
    *,
    bands=None,
    estimator=None,
    cv=None,
    groups=None,
    sample_weight=None,
):
    """Held-out R^2 of every subset of bands, and its Venn regions.

    For each non-empty subset ``U`` of the bands, a clone of ``estimator``
    restricted to the columns of ``U`` is fit on each training fold of
    ``cv`` and scored by R^2 per target on the fold's test rows; ``f(U)``
    is the mean over the folds. With ``B`` all bands and ``f(∅) = 0``, band
    b's unique variance is ``f(B) - f(B minus b)``, and for two bands the
    shared part is ``f(0) + f(1) - f(01)``; for k bands every region of the
    Venn diagram follows by Möbius inversion
    (:func:`skbatch._ridge.partition.venn_regions`). That is
    ``2**k - 1`` :class:`~skbatch.BandedRidge` fits per fold, each its own
    search.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The features of every band.
    y : array-like of shape (n_samples,) or (n_samples, n_targets)
        Targets; 1-D ``y`` is one target (the results keep a target axis of
        length 1).
    bands : None, array-like of shape (n_features,) or list of array-like, \
default=None
        The bands, as for :class:`~skbatch.BandedRidge` (a label per column
        or a list of column index arrays). None takes ``estimator.bands``;
        when both are given they must be the same partition of the columns.
    estimator : BandedRidge or None, default=None
        The model of every subset, cloned: its alphas, inner ``cv``,
        ``fit_intercept``, ``random_state`` ... are kept, ``bands`` and
        ``band_weights`` set per subset. None: ``BandedRidge()``. An int
        ``band_weights`` is kept as given (that many candidates over the
        subset's bands). An explicit array is restricted to the subset's
        columns: weights below ``WEIGHT_FLOOR`` of their row's largest
        count as 0 (as the full model reads them), rows with no weight left
        in the subset are dropped, repeated rows kept once, and
        :class:`~skbatch.BandedRidge` renormalises the rows; a subset that no
        row weighs is refused before any fit.
    cv : None, int, CV splitter or iterable of splits, default=None
        The outer folds. None: ``LeaveOneGroupOut()`` when ``groups`` are
        given (held-out runs), else ``KFold(5)``. Drawn once: every subset
        is scored on the same folds.
    groups : array-like of shape (n_samples,), default=None
        Run (group) of each sample, given to the outer splitter when it
        uses groups and, on each training fold, to the inner fit.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights, given to every fit (training rows) and to the
        R^2 of every fold (test rows).

    Returns
    -------
    result : VariancePartition
        A named tuple ``(subsets, scores, regions, unique, band_names)``;
        ``scores[i]``, ``regions[i]`` belong to ``subsets[i]``, subsets by
        size then lexicographic in band order.

    Raises
    ------
    TypeError
        If ``estimator`` is not a :class:`~skbatch.BandedRidge`.
    ValueError
        For more than ``MAX_BANDS`` (8) bands, ``bands`` that do not
        partition X's columns, and unusable folds, groups or weights; all
        before any fit.

    Notes
    -----
    The score of a subset is the plain mean of its per-fold R^2, every fold
    weighing the same, as ``cross_val_score(...).mean()``; a fold where R^2
    is undefined (fewer than 2 test rows) makes it NaN. Held-out scores are
    not exactly additive, so a region can come out slightly negative: no
    region is clipped.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch import BandedRidge, variance_partitioning
    >>> from sklearn.model_selection import LeaveOneGroupOut
    >>> rng = np.random.default_rng(0)
    >>> runs = np.repeat([0, 1, 2, 3], 60)
    >>> X = rng.standard_normal((240, 10))
    >>> bands = ["motion"] * 5 + ["semantic"] * 5
    >>> Y = np.column_stack([X[:, :5].sum(1), X[:, 5:].sum(1), X.sum(1)])
    >>> Y = Y + rng.standard_normal((240, 3))
    >>> model = BandedRidge(band_weights=5, alphas=np.logspace(-2, 3, 6))
    >>> result = variance_partitioning(
    ...     X, Y, bands=bands, estimator=model, groups=runs
    ... )
    >>> result.subsets
    [('motion',), ('semantic',), ('motion', 'semantic')]
    >>> result.unique.shape          # bands x targets
    (2, 3)
    >>> bool(result.unique[0, 0] > 0.5 > result.unique[1, 0])
    True
    >>> bool(np.allclose(result.regions.sum(axis=0), result.scores[-1]))
    True
    """
    estimator = BandedRidge() if estimator is None else estimator
    if not isinstance(estimator, BandedRidge):
        raise TypeError(
            f"estimator must be a BandedRidge (or None for BandedRidge()), got "
            f"{type(estimator).__name__}: {estimator!r}"
        )
    X, Y = check_X_y(
        X, y, multi_output=True, y_numeric=True, dtype=[np.float64, np.float32]
    )
    Y = Y.reshape(X.shape[0], -1)
    n_samples, n_features = X.shape
    columns, names = _check_bands(bands, estimator.bands, n_features)
    n_bands = len(columns)
    if n_bands > MAX_BANDS:
        raise ValueError(
            f"variance_partitioning fits every non-empty subset of bands: "
            f"2**{n_bands} - 1 = {2**n_bands - 1} models for {n_bands} bands; "
            f"at most {MAX_BANDS} bands are allowed. Merge bands first."
        )
    weights = check_band_weights(estimator.band_weights, n_bands)
    groups = check_groups(groups, n_samples)
    sample_weight = _check_sample_weight(sample_weight, n_samples)
    splits = _outer_splits(cv, X, Y, groups)
    models = [
        clone(estimator).set_params(
            bands=_positions(columns, subset),
            band_weights=_restricted(weights, subset, names),
        )
        for subset in _subsets(n_bands)
    ]
    scores = np.empty((len(models), len(splits), Y.shape[1]))
    for i, (model, subset) in enumerate(zip(models, _subsets(n_bands))):
        keep = np.sort(np.concatenate([columns[b] for b in subset]))
        for fold, (train, test) in enumerate(splits):
            model.fit(
                X[np.ix_(train, keep)],
                Y[train],
                sample_weight=None if sample_weight is None else sample_weight[train],
                groups=None if groups is None else groups[train],
            )
            scores[i, fold] = score_per_target(
                Y[test],
                model.predict(X[np.ix_(test, keep)]),
                "r2",
                sample_weight=None if sample_weight is None else sample_weight[test],
            )
    scores = scores.mean(axis=1)
    return VariancePartition(
        subsets=[tuple(names[b].item() for b in s) for s in _subsets(n_bands)],
        scores=scores,
        regions=venn_regions(scores, n_bands),
        unique=unique_variance(scores, n_bands),
        band_names=names,
    )


def _check_bands(bands, estimator_bands, n_features):
    """``check_bands`` of ``bands``, or of the estimator's when None; both
    given must agree."""
    if bands is None:
        return check_bands(estimator_bands, n_features)
    columns, names = check_bands(bands, n_features)
    if estimator_bands is not None:
        other, other_names = check_bands(estimator_bands, n_features)
        same = (
            len(other) == len(columns)
            and all(np.array_equal(a, b) for a, b in zip(columns, other))
            and np.array_equal(names, other_names)
        )
        if not same:
            raise ValueError(
                f"bands={bands!r} and the estimator's bands="
                f"{estimator_bands!r} are different bands; give them once "
                f"(either one)"
            )
    return columns, names


def _check_sample_weight(sample_weight, n_samples):
    if sample_weight is None:
        return None
    if isinstance(sample_weight, numbers.Number):
        sample_weight = np.full(n_samples, sample_weight, dtype=np.float64)
    sample_weight = check_array(
        sample_weight, ensure_2d=False, dtype=np.float64, input_name="sample_weight"
    )
    if sample_weight.shape != (n_samples,):
        raise ValueError(
            f"sample_weight must have shape ({n_samples},), one weight per "
            f"sample, got shape {sample_weight.shape}"
        )
    if np.any(sample_weight < 0):
        raise ValueError(
            f"sample_weight must be non-negative, got "
            f"{np.count_nonzero(sample_weight < 0)} negative weight(s)"
        )
    return sample_weight


def _outer_splits(cv, X, Y, groups):
    """The outer folds as int row indices, drawn once and checked."""
    if cv is None:
        cv = LeaveOneGroupOut() if groups is not None else KFold(DEFAULT_N_SPLITS)
    splitter = check_cv(cv)
    splits = [
        (
            fold_rows(train, X.shape[0], fold, "training"),
            fold_rows(test, X.shape[0], fold, "test"),
        )
        for fold, (train, test) in enumerate(
            splitter.split(X, Y, groups if uses_groups(splitter) else None)
        )
    ]
    if not splits:
        raise ValueError(f"cv={cv!r} gave no train/test split")
    for fold, (train, test) in enumerate(splits):
        if len(train) < MIN_SAMPLES or len(test) == 0:
            raise ValueError(
                f"cv={cv!r} fold {fold} has {len(train)} training and "
                f"{len(test)} test rows: a fit needs at least {MIN_SAMPLES} "
                f"training rows and a score at least one test row"
            )
    return splits


def _positions(columns, subset):
    """The subset's bands as index arrays into its columns, sorted as X's."""
    keep = np.sort(np.concatenate([columns[b] for b in subset]))
    return [np.searchsorted(keep, columns[b]) for b in subset]


def _restricted(weights, subset, names):
    """``band_weights`` of the model on ``subset``: an int as given; explicit
    candidates restricted to the subset's columns (see
    :func:`variance_partitioning`)."""
    if isinstance(weights, int):
        return weights
    floored = np.where(
        weights >= WEIGHT_FLOOR * weights.max(axis=1, keepdims=True), weights, 0.0
    )
    kept = floored[:, list(subset)]
    kept = kept[kept.max(axis=1) > 0]
    if not len(kept):
        raise ValueError(
            f"band_weights gives no candidate a positive weight on the bands "
            f"{[names[b].item() for b in subset]}: the model of that subset has "
            f"no candidate. Give each band a positive weight in some row, or an "
            f"int of candidates"
        )
    kept = kept / kept.sum(axis=1, keepdims=True)
    _, first = np.unique(kept, axis=0, return_index=True)
    return kept[np.sort(first)]
