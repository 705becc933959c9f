"""Freedman–Lane nulls of a band's unique variance: permuted residuals as
extra targets.

Under the null "band b adds nothing to the other bands", the reduced model
(every band but b) is fit on all rows (:func:`reduced_fit`); target ``t``
of permutation ``i`` is ``y*_t = fitted_t + P_i residuals_t``
(:func:`permuted_targets`), ``P_i`` row ``i`` of
:func:`skbatch._resampling.signed.signed_rows` (a permutation within runs,
or sign flips), the same for every target. The design never changes, so
every permutation is one more set of targets of the decompositions the
observed fits already need, and band b's unique variance is recomputed on
``y*`` with the same outer folds and the same score
(:func:`skbatch._ridge.partition_inference.held_out_scores`'s ``average``).

Two treatments of the hyperparameters:

- ``"held"`` (:class:`HeldNullProblem`): every target keeps, on every outer
  fold, the (band weights, alpha) that the full and the reduced models chose
  there on the data. Predictions are then linear in ``y*``: per fold one
  product ``X'Wy*`` serves both models and every candidate, and each
  candidate's SVD gives its targets' predictions at their own alphas
  (:func:`skbatch._kernels.linalg.held_ridge_predictions`).
- ``"searched"`` (:func:`searched_null_scores`): the models are refit on
  ``y*`` with their searches, the permuted targets as extra targets of one
  fit per fold (per permutation with ``local_alpha=False``, whose one choice
  is shared by the targets of a fit).

Both are joblib tasks of :func:`skbatch._engine.run_parallel`: functions of
item ids, numpy in and numpy out.
"""

import functools
import warnings
from typing import NamedTuple

import numpy as np
from sklearn.base import clone

from .._kernels import linalg as _linalg
from .._resampling.signed import signed_rows
from .banded import BandedDesign, check_bands
from .partition_inference import held_out_r2, held_out_scores

__all__ = [
    "HYPERPARAMETERS",
    "NULLS",
    "HeldModel",
    "HeldNullProblem",
    "band_null_task",
    "item_bytes",
    "null_bytes",
    "task_bytes",
    "held_fold",
    "permuted_targets",
    "reduced_fit",
    "searched_null_scores",
]

# variance_partitioning's ``null``: band b's rows permuted (the design
# changes), or the reduced model's residuals (Freedman and Lane, 1983).
NULLS = ("band_rows", "freedman_lane")
# variance_partitioning's ``null_hyperparameters`` under "freedman_lane".
HYPERPARAMETERS = ("held", "searched")
# Copies of a resample's held-out rows that its searched refits hold: the
# held-out predictions and targets (partition_inference.HELD_OUT_COPIES) and
# the search's own copies of a fold's targets (centred, projected, their
# errors; BandedRidge's preflight bounds the search itself).
SEARCHED_COPIES = 6
# Copies of a resample's test rows that its held null holds at its peak: the
# two models' predictions, a fold's prediction and its sum with the mean,
# and the scoring's copy of the targets, their errors and squares
# (tracemalloc: 8.1 copies of the targets' rows in all with 160 rows, all
# tested once; HELD_TARGET_COPIES more of all rows: the targets and a fold's
# training rows).
HELD_COPIES = 7
HELD_TARGET_COPIES = 2


def reduced_fit(model, X, Y, *, sample_weight=None, groups=None, fit_intercept=True):
    """In-sample fitted values and residuals of the reduced model.

    ``model`` (unfitted; None for the empty set of bands, an intercept
    alone, or nothing without ``fit_intercept``) is fit on every row of
    ``X`` (the reduced model's columns), ``groups`` given to its search.

    Returns
    -------
    fitted, residuals : ndarray of shape (n_samples, n_targets)

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._ridge.freedman_lane import reduced_fit
    >>> Y = np.array([[1.0], [2.0], [6.0]])
    >>> fitted, residuals = reduced_fit(None, np.empty((3, 0)), Y)
    >>> fitted.ravel().tolist(), residuals.ravel().tolist()
    ([3.0, 3.0, 3.0], [-2.0, -1.0, 3.0])
    """
    Y = np.asarray(Y, dtype=np.float64)
    if model is None:
        mean = (
            np.average(Y, axis=0, weights=sample_weight)
            if fit_intercept
            else np.zeros(Y.shape[1])
        )
        fitted = np.broadcast_to(mean, Y.shape).copy()
    else:
        fit = clone(model).fit(X, Y, sample_weight=sample_weight, groups=groups)
        fitted = np.asarray(fit.predict(X), dtype=np.float64).reshape(Y.shape)
    return fitted, Y - fitted


def permuted_targets(fitted, residuals, codes):
    """``fitted + P residuals`` for each resample's signed row codes.

    Code ``r`` of row j puts ``+residuals[r]`` there, ``~r`` puts
    ``-residuals[r]`` (:mod:`skbatch._resampling.signed`).

    Returns
    -------
    Y_star : ndarray of shape (n_samples, len(codes) * n_targets)
        Column ``k * n_targets + t`` is target t under resample k.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._ridge.freedman_lane import permuted_targets
    >>> fitted, residuals = np.zeros((3, 1)), np.array([[1.0], [2.0], [3.0]])
    >>> permuted_targets(fitted, residuals, np.array([[2, 0, 1], [0, ~1, 2]]))
    array([[ 3.,  1.],
           [ 1., -2.],
           [ 2.,  3.]])
    """
    codes = np.atleast_2d(np.asarray(codes, dtype=np.int64))
    n_samples, n_targets = fitted.shape
    out = np.empty((n_samples, len(codes), n_targets))
    for k, code in enumerate(codes):
        flipped = code < 0
        np.take(residuals, np.where(flipped, ~code, code), axis=0, out=out[:, k])
        out[flipped, k] *= -1.0
        out[:, k] += fitted
    return out.reshape(n_samples, -1)


class HeldModel:
    """One model on one outer fold at every target's held choice.

    Candidate c (a distinct row of the targets' band weights) is ridge on
    X's columns ``columns[c]`` times their scales ``sqrt(gamma_b)``: the
    training rows' centred, weighted design has the SVD
    ``U diag(s[c]) V_c'``; ``Vt[c]`` is ``V_c'`` times the scales (so that
    it applies to X's own products), and ``test_basis[c]`` is the scaled
    test rows (centred by the training means) times ``V_c``.

    Attributes
    ----------
    columns, s, Vt, test_basis : list of ndarray, one per candidate
    candidate : ndarray of shape (n_targets,)
        Each target's candidate.
    alpha : ndarray of shape (n_targets,)
    """

    def __init__(self, columns, s, Vt, test_basis, candidate, alpha):
        self.columns = columns
        self.s, self.Vt, self.test_basis = s, Vt, test_basis
        self.candidate, self.alpha = candidate, alpha

    def predict(self, XtWY, n_targets):
        """Centred test predictions of ``XtWY`` (X's columns by the columns
        ``k * n_targets + t`` of :func:`permuted_targets`), target t at its
        choice."""
        n_columns = XtWY.shape[1]
        repeats = n_columns // n_targets
        out = np.empty((self.test_basis[0].shape[0], n_columns))
        alpha = np.tile(self.alpha, repeats)
        for c, columns in enumerate(self.columns):
            (mine,) = np.nonzero(np.tile(self.candidate == c, repeats))
            if not mine.size:
                continue
            products = (
                XtWY[columns] if mine.size == n_columns else XtWY[np.ix_(columns, mine)]
            )
            prediction = _linalg.held_ridge_predictions(
                self.test_basis[c], self.Vt[c], self.s[c], products, alpha[mine], xp=np
            )
            if mine.size == n_columns:
                out = prediction
            else:
                out[:, mine] = prediction
        return out


def held_fold(
    X, train, test, sample_weight, model_columns, bands, choice, *, fit_intercept
):
    """The :class:`HeldModel` of a model on one outer fold.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    train, test : ndarray of int
    sample_weight : ndarray of shape (n_samples,) or None
    model_columns : ndarray of int
        The model's columns of X.
    bands : list of ndarray
        The model's bands, as positions in ``model_columns``.
    choice : (ndarray, ndarray)
        Each target's band weights (n_targets, n_bands) and alpha, as the
        model fit on ``train`` chose them (``band_weights_``, ``alpha_``).
    fit_intercept : bool
    """
    weights, alpha = choice
    candidates, chosen = np.unique(np.atleast_2d(weights), axis=0, return_inverse=True)
    design = BandedDesign(X[:1, model_columns], bands, candidates)
    X_train, X_test, w = X[train], X[test], _train_weights(sample_weight, train)
    offset = _offset(X_train, w, fit_intercept)
    root = np.sqrt(w)[:, None]
    columns, s_all, Vt_all, bases = [], [], [], []
    for c in range(len(candidates)):
        kept = model_columns[design.kept[c]]
        scale = design.scales[c]
        _, s, Vt = np.linalg.svd(
            root * (X_train[:, kept] - offset[kept]) * scale, full_matrices=False
        )
        columns.append(kept)
        s_all.append(s)
        Vt_all.append(Vt * scale)
        bases.append(((X_test[:, kept] - offset[kept]) * scale) @ Vt.T)
    return HeldModel(
        columns, s_all, Vt_all, bases, chosen.ravel(), np.asarray(alpha, float)
    )


def _train_weights(sample_weight, train):
    return (
        np.ones(len(train))
        if sample_weight is None
        else np.asarray(sample_weight, dtype=np.float64)[train]
    )


def _offset(A, w, fit_intercept):
    """Weighted column means of ``A`` (zeros without an intercept)."""
    if not fit_intercept:
        return np.zeros(A.shape[1])
    return (w @ A) / w.sum()


class HeldNullProblem:
    """Band b's unique variance on Freedman–Lane targets, choices held.

    Item ``i`` is resample ``i`` of :func:`signed_rows` (``entropy``,
    ``groups`` and ``permutation``); its targets are
    :func:`permuted_targets` of the reduced model's ``fitted`` values and
    ``residuals``. On each outer fold the full and the reduced models
    (:class:`HeldModel`, from :func:`held_fold`) predict the test rows from
    one product ``X'W y*`` of the training rows (all rows less the fold's
    held-out ones), and the held-out R^2 of
    each is the one of
    :func:`skbatch._ridge.partition_inference.held_out_scores` (``average``).

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    fitted, residuals : ndarray of shape (n_samples, n_targets)
    splits : list of (ndarray, ndarray)
    sample_weight, groups : ndarray of shape (n_samples,) or None
    full, reduced : list of HeldModel
        One per fold; ``reduced`` None for the empty set of bands (score 0).
    columns : ndarray of int
        X's columns that either model reads.
    entropy : int
    permutation : dict
        ``permutation_type``, ``block_size``, ``exact``.
    fit_intercept : bool
    average : {"rows", "folds"}
    """

    def __init__(
        self,
        X,
        full,
        reduced,
        *,
        fitted,
        residuals,
        splits,
        sample_weight,
        groups,
        entropy,
        permutation,
        fit_intercept,
        average,
    ):
        self.fitted, self.residuals = fitted, residuals
        self.splits, self.sample_weight, self.groups = splits, sample_weight, groups
        self.full, self.reduced = full, reduced
        self.entropy, self.permutation = entropy, permutation
        self.fit_intercept, self.average = fit_intercept, average
        # A fold's products X'Wy* are the products of all rows less those of
        # the rows it does not train on (the covariance path's total minus
        # held-out runs): one product of every row per batch and one of each
        # fold's held-out rows, 2 n p (1 + 1 / (k - 1)) per target for k folds
        # instead of 2 n p over the training rows of each. X is centred on
        # its overall mean first, so that the fold's centring subtracts a
        # small correction (it leaves the centred products as they are).
        n_samples = X.shape[0]
        self.w = _train_weights(sample_weight, np.arange(n_samples))
        X = X - _offset(X, self.w, fit_intercept)
        self.weighted = (X * self.w[:, None]).T.copy()
        self.folds = []
        for train, _ in splits:
            outside = np.setdiff1d(np.arange(n_samples), train)
            w = self.w[train]
            offset = _offset(X[train], w, fit_intercept)
            # Repeated training rows, or more rows outside than in, take the
            # training rows' own products.
            subtract = len(train) + len(outside) == n_samples and len(outside) < len(
                train
            )
            self.folds.append(
                _FoldProducts(
                    train,
                    outside,
                    offset,
                    w.sum(),
                    self.weighted[:, outside].copy() if subtract else None,
                    None if subtract else ((X[train] - offset) * w[:, None]).T.copy(),
                )
            )

    def __call__(self, ids):
        """Unique variance of the band under resamples ``ids``: an ndarray
        of shape (len(ids), n_targets)."""
        n_samples, n_targets = self.fitted.shape
        codes = signed_rows(
            self.entropy, ids, n_samples, self.groups, **self.permutation
        )
        Y = permuted_targets(self.fitted, self.residuals, codes)
        rows = np.concatenate([test for _, test in self.splits])
        predicted = [np.empty((len(rows), Y.shape[1])) for _ in range(2)]
        scores = [np.empty((len(self.splits), Y.shape[1])) for _ in range(2)]
        end = 0
        totals = None
        for fold, (_, test) in enumerate(self.splits):
            if totals is None and self.folds[fold].outside_weighted is not None:
                totals = self.weighted @ Y, self.w @ Y
            XtWY, mean = self._products(self.folds[fold], Y, totals)
            at = slice(end, end + len(test))
            end += len(test)
            for k, models in enumerate((self.full, self.reduced)):
                if models is None:
                    continue
                prediction = models[fold].predict(XtWY, n_targets) + mean
                if self.average == "rows":
                    predicted[k][at] = prediction
                else:
                    scores[k][fold] = held_out_r2(
                        Y, test, prediction, self.sample_weight, warn=False
                    )
        f = []
        for k, models in enumerate((self.full, self.reduced)):
            if models is None:
                f.append(0.0)
            elif self.average == "rows":
                f.append(
                    held_out_r2(Y, rows, predicted[k], self.sample_weight, warn=False)
                )
            else:
                f.append(scores[k].mean(axis=0))
        return (f[0] - f[1]).reshape(len(ids), n_targets)

    def _products(self, fold, Y, totals):
        """``((X_train - mean)' W Y_train, weighted mean of Y_train)``."""
        if fold.outside_weighted is None:
            Y_train = Y[fold.train]
            mean = _offset(Y_train, self.w[fold.train], self.fit_intercept)
            return fold.train_weighted @ Y_train, mean
        Y_out = Y[fold.outside]
        XtWY = totals[0] - fold.outside_weighted @ Y_out
        sums = totals[1] - self.w[fold.outside] @ Y_out
        if not self.fit_intercept:
            return XtWY, 0.0
        XtWY -= np.outer(fold.offset, sums)
        return XtWY, sums / fold.total


class _FoldProducts(NamedTuple):
    """What a fold's products ``X'Wy*`` need (:class:`HeldNullProblem`)."""

    train: np.ndarray
    outside: np.ndarray
    offset: np.ndarray
    total: float
    outside_weighted: np.ndarray
    train_weighted: np.ndarray


def searched_null_scores(
    ids,
    *,
    full,
    reduced,
    columns,
    X,
    fitted,
    residuals,
    splits,
    sample_weight,
    groups,
    entropy,
    permutation,
    average="rows",
    per_permutation=False,
    quiet=(),
):
    """Band b's unique variance on Freedman–Lane targets, the searches redone:
    a joblib task.

    Clones of ``full`` (every column of X) and ``reduced`` (X's ``columns``;
    None for the empty set, score 0) are scored by
    :func:`skbatch._ridge.partition_inference.held_out_scores` on the
    targets of every resample of ``ids`` together (:func:`permuted_targets`),
    or resample by resample with ``per_permutation`` (a search that makes one
    choice for all its targets). Warnings of the categories ``quiet`` are
    not repeated per refit.

    Returns
    -------
    unique : ndarray of shape (len(ids), n_targets)
    """
    n_samples, n_targets = fitted.shape
    codes = signed_rows(entropy, ids, n_samples, groups, **permutation)
    chunks = [[k] for k in range(len(codes))] if per_permutation else [slice(None)]
    out = np.empty((len(codes), n_targets))
    data = dict(splits=splits, sample_weight=sample_weight, groups=groups)
    with warnings.catch_warnings():
        for category in quiet:
            warnings.simplefilter("ignore", category)
        for chunk in chunks:
            Y = permuted_targets(fitted, residuals, codes[chunk])
            f_full = held_out_scores(clone(full), X, Y, average=average, **data)
            f_reduced = (
                0.0
                if reduced is None
                else held_out_scores(
                    clone(reduced), X, Y, columns=columns, average=average, **data
                )
            )
            out[chunk] = (f_full - f_reduced).reshape(-1, n_targets)
    return out


def band_null_task(
    *,
    full,
    reduced,
    reduced_columns,
    chosen,
    hyperparameters,
    X,
    Y,
    splits,
    sample_weight,
    groups,
    entropy,
    permutation,
    average="rows",
    quiet=(),
):
    """The task of band b's Freedman–Lane null: ``task(ids) -> unique``.

    Fits the reduced model on all rows (:func:`reduced_fit`), then, for
    ``hyperparameters="held"``, the :class:`HeldModel` of the full and the
    reduced model on every fold from their ``chosen`` lists (of
    ``held_out_scores(..., chosen=...)``: ``chosen[0]`` the full model's,
    ``chosen[1]`` the reduced one's) in a :class:`HeldNullProblem`; for
    ``"searched"``, :func:`searched_null_scores` of the two models.

    Parameters
    ----------
    full, reduced : BandedRidge
        Unfitted, with their bands; ``reduced`` None for the empty set.
    reduced_columns : ndarray of int or None
        X's columns of the reduced model.
    """
    fit_intercept = full.fit_intercept
    if reduced is None:
        reduced_columns = np.arange(0)
    with warnings.catch_warnings():
        for category in quiet:
            warnings.simplefilter("ignore", category)
        fitted, residuals = reduced_fit(
            reduced,
            X[:, reduced_columns],
            Y,
            sample_weight=sample_weight,
            groups=groups,
            fit_intercept=fit_intercept,
        )
    data = dict(
        fitted=fitted,
        residuals=residuals,
        splits=splits,
        sample_weight=sample_weight,
        groups=groups,
        entropy=entropy,
        permutation=permutation,
    )
    if hyperparameters == "searched":
        return functools.partial(
            searched_null_scores,
            full=full,
            reduced=reduced,
            columns=reduced_columns,
            X=X,
            average=average,
            per_permutation=not full.local_alpha,
            quiet=quiet,
            **data,
        )
    X = np.asarray(X, dtype=np.float64)
    models = []
    for model, columns, choices in (
        (full, np.arange(X.shape[1]), chosen[0]),
        (reduced, reduced_columns, chosen[1]),
    ):
        if model is None:
            models.append(None)
            continue
        bands, _ = check_bands(model.bands, columns.size)
        models.append(
            [
                held_fold(
                    X,
                    train,
                    test,
                    sample_weight,
                    columns,
                    bands,
                    choice,
                    fit_intercept=fit_intercept,
                )
                for (train, test), choice in zip(splits, choices)
            ]
        )
    return HeldNullProblem(
        X, *models, fit_intercept=fit_intercept, average=average, **data
    )


def item_bytes(n_samples, n_features, n_rows, n_targets, hyperparameters):
    """Host bytes one resample holds while its null is computed.

    ``"held"``: :data:`HELD_TARGET_COPIES` copies of its targets, per fold
    their products with X (and the candidate's rescaled copy), and
    :data:`HELD_COPIES` copies of the ``n_rows`` test rows' (predictions,
    scoring). ``"searched"``: its targets and :data:`SEARCHED_COPIES`
    copies of the test rows'.

    Examples
    --------
    >>> from skbatch._ridge.freedman_lane import item_bytes
    >>> item_bytes(100, 10, 100, 1, "held")
    7360.0
    """
    if hyperparameters == "held":
        return (
            8.0
            * n_targets
            * (HELD_TARGET_COPIES * n_samples + 2 * n_features + HELD_COPIES * n_rows)
        )
    return 8.0 * n_targets * (n_samples + SEARCHED_COPIES * n_rows)


def task_bytes(task, n_targets):
    """:func:`item_bytes` of a task of :func:`band_null_task`."""
    if isinstance(task, HeldNullProblem):
        splits, fitted = task.splits, task.fitted
        n_features, treatment = task.weighted.shape[0], "held"
    else:
        splits, fitted = task.keywords["splits"], task.keywords["fitted"]
        n_features, treatment = task.keywords["X"].shape[1], "searched"
    n_rows = sum(len(test) for _, test in splits)
    return item_bytes(fitted.shape[0], n_features, n_rows, n_targets, treatment)


def null_bytes(X, n_targets, splits, n_candidates, hyperparameters, n_workers):
    """Host bytes of a band's Freedman–Lane null beside the observed fits,
    for the preflight: the reduced model's fitted values and residuals, one
    :func:`item_bytes` per worker and, held, every fold's weighted training
    rows and the decompositions of at most ``n_candidates`` candidates of
    both models (singular vectors and the test rows in their basis).

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._ridge.freedman_lane import null_bytes
    >>> splits = [(np.arange(50), np.arange(50, 100))]
    >>> null_bytes(np.empty((100, 10)), 1, splits, 2, "searched", 1)
    4800.0
    """
    n_samples, n_features = X.shape
    n_rows = sum(len(test) for _, test in splits)
    total = 16.0 * n_samples * n_targets + n_workers * item_bytes(
        n_samples, n_features, n_rows, n_targets, hyperparameters
    )
    if hyperparameters != "held":
        return total
    for train, test in splits:
        rank = min(len(train), n_features)
        total += 8.0 * n_features * len(train)
        total += (
            2 * 8.0 * min(n_candidates, n_targets) * rank * (n_features + len(test) + 1)
        )
    return total
