"""PermutationScorer: cross-validated score with a permutation p-value, per target.

The definitions are those of scikit-learn's ``permutation_test_score``: the
score is the mean over folds of the scorer on the test rows, the null
distribution is that score with ``y`` permuted (within groups when given),
and ``p = (C + 1) / (n_permutations + 1)`` with C the number of permuted
scores at least as high as the true one (``alternative="greater"``; "less"
and "two-sided" as :func:`scipy.stats.permutation_test` defines them, the
rules in :mod:`skbatch._rules`); when the scheme has at most
``n_permutations`` distinct permutations, each is scored once and
``p = C / (their number)``, exact. ``permutation_type="sign_flip"`` is the
one-sample test instead: the rows of ``y`` (or whole groups of rows) are
multiplied by random signs, with the same scores and p-value rules.

Two paths compute the null with the same permutations (one seed stream per
permutation, see :mod:`skbatch.random`):

- ridge family (``BatchedRidge``, ``Ridge``, ``RidgeCV``,
  ``LinearRegression``): permuting ``y`` (or flipping the signs of its
  rows) leaves the decomposition of every fold's ``X`` unchanged, so each
  outer fold is decomposed once and a batch of permutations goes through it
  as extra target columns, alpha selection included, on the device and in
  batches sized by the engine;
- any other estimator: refits through joblib, in bounded windows.
"""

import contextlib
import functools
import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone, is_classifier
from sklearn.metrics import check_scoring
from sklearn.model_selection import check_cv

# Private to scikit-learn, without a public twin: the row slicing of its own
# cross-validation. The folds and permutations slice X, y and the fit
# parameters as permutation_test_score does (DataFrames by position, a
# precomputed kernel on both axes, only the per-sample parameters);
# tests/test_private_names.py checks what is relied on here.
from sklearn.utils import _safe_indexing, get_tags
from sklearn.utils.metaestimators import _safe_split
from sklearn.utils.validation import _check_method_params

from . import _backends
from ._base import (
    WrapperMixin,
    atomic_fit,
    check_max_memory_gb,
    check_verbose,
    estimator_input,
    refit_params,
)
from ._engine import _say, run_parallel, run_problem
from ._permutation_cv import (
    _PER_TARGET_METRICS,
    _check_scoring,
    _flipped,
    _metrics,
    _per_target_score,
    _split_rows,
    _splits_ignore_y,
)

# Read here by skbatch/partitioning.py.
from ._permutation_plan import TIE_ULPS as TIE_ULPS
from ._permutation_plan import (
    _check_host_memory,
    _check_refit_memory,
    _counter,
    _fast_path,
    _plan_resamples,
    _plan_ridge,
)
from ._preflight import DataBytes
from ._resampling.sign_flip import split_signed_rows
from ._resampling.signed import check_resampling_type, signed_rows
from ._ridge.banded import permuted_problem
from ._ridge.problems import DEVICE_SCORINGS, PermutedRidgeProblem
from ._rules import check_alternative
from .backend import resolve_backend, to_numpy
from .random import DEFAULT_RANDOM_STATE, resolve_entropy
from .ridge import AlphaEdgeWarning, AutocorrelationWarning, BatchedRidge
from .streaming import PermutationCounter

__all__ = ["PermutationScorer"]

# Below this much work (FLOPs of the whole fast path) every product is small
# and BLAS / torch threads synchronise more than they compute: 2-20x slower
# than one thread on busy cores (torch's SVD of a 400 x 50 fold: 0.5 ms
# alone, 250 ms beside one other process), while one
# thread costs at most a few ms here; drawing the permutations dominates.
SMALL_FIT_FLOPS = 1e9
_MULTIOUTPUTS = ("uniform_average", "raw_values")


def _cv_score(estimator, X, y, splits, scorers, fit_params):
    """Mean over folds of the test score, as ``permutation_test_score`` does,
    for each ``(scorer, metric)`` of ``scorers``: a list, one per scorer.

    One clone is refit on every fold, as scikit-learn does, so an estimator
    holding a random state draws the same sequence; every scorer scores
    that fit. ``metric`` (a function and a sign) gives per-target scores of
    the fold's predictions; otherwise ``scorer`` gives one, or with
    ``metric="scorer"`` one per target.
    """
    estimator = clone(estimator)
    scores = [[] for _ in scorers]
    for train, test in splits:
        X_train, y_train = _safe_split(estimator, X, y, train)
        X_test, y_test = _safe_split(estimator, X, y, test, train)
        with warnings.catch_warnings():
            # The fit on all data has said it once; not once per refit.
            warnings.simplefilter("ignore", AutocorrelationWarning)
            warnings.simplefilter("ignore", AlphaEdgeWarning)
            estimator.fit(
                X_train, y_train, **_check_method_params(X, fit_params, indices=train)
            )
        predictions = None
        for (scorer, metric), fold_scores in zip(scorers, scores):
            if metric is None:
                fold_scores.append(scorer(estimator, X_test, y_test))
            elif metric == "scorer":
                value = scorer(estimator, X_test, y_test)
                fold_scores.append(_per_target_score(value, y))
            else:
                function, sign = metric
                if predictions is None:
                    predictions = estimator.predict(X_test)
                fold_scores.append(
                    sign * function(y_test, predictions, multioutput="raw_values")
                )
    # A scorer's values flattened, as scikit-learn averages whatever it returns.
    return [
        np.mean(fold_scores) if metric is None else np.mean(fold_scores, axis=0)
        for (_, metric), fold_scores in zip(scorers, scores)
    ]


def _null_scores_task(
    ids,
    *,
    estimator,
    X,
    y,
    cv,
    splits,
    groups,
    entropy,
    permutation,
    scorers,
    fit_params,
):
    """Scores of permutations ``ids``: a joblib task, numpy in, numpy out.

    One row per permutation: the values of every scorer, flattened in turn.
    ``splits`` None re-splits every permuted ``y`` with ``cv``, whose folds
    then depend on it (stratified splitters).
    """
    codes = signed_rows(entropy, ids, y.shape[0], groups, **permutation)
    scores = []
    for code in codes:
        perm, signs = split_signed_rows(code)
        permuted = _safe_indexing(y, perm)
        if signs is not None:
            permuted = _flipped(permuted, signs)
        if hasattr(y, "index") and hasattr(permuted, "set_axis"):
            # The permuted values on y's own index: pandas code that aligns
            # on it (X.join(y)) would otherwise put the rows back in order.
            # A frame that is only row-sliceable (``iloc``, as scikit-learn
            # slices it) has no index to keep, and is passed as sliced.
            permuted = permuted.set_axis(y.index, axis=0)
        folds = splits
        if folds is None:
            folds = _split_rows(cv, X, permuted, groups)
        values = _cv_score(estimator, X, permuted, folds, scorers, fit_params)
        scores.append(np.concatenate([np.ravel(value) for value in values]))
    return np.stack(scores)


class PermutationScorer(WrapperMixin, RegressorMixin, BaseEstimator):
    """Cross-validated score with a permutation p-value, per target.

    The estimator form of :func:`sklearn.model_selection.permutation_test_score`,
    with its definitions: ``score_`` is the mean over folds of the scorer on
    the test rows, the null distribution is that score with the rows of
    ``y`` permuted (within ``groups`` when given), and
    ``pvalue_ = (C + 1) / (n_permutations + 1)``, C the number of permuted
    scores greater than or equal to ``score_`` (ties count, whatever the
    round-off: see Notes); ``alternative`` tests the other tail or both, as
    :func:`scipy.stats.permutation_test` does. With
    ``multioutput="raw_values"`` every target gets its score and p-value, and
    ``pvalue_fwer_`` controls the family-wise error rate over targets
    (max-statistic method: every target's permuted score comes from the same
    row permutation).

    ``permutation_type="sign_flip"`` makes it a one-sample (group-level)
    test: under the null hypothesis the rows of ``y`` are symmetric about 0
    (one row per subject of a per-subject effect map, say, testing whether
    the mean map is 0). Each resample multiplies the rows of ``y`` by a sign
    vector ``s`` in ``{-1, +1}**n`` (one sign per group, all rows of a group
    flipped together, when ``groups`` is given), ``X`` unchanged, and the
    statistic is the same cross-validated score: the one-sample case of
    :func:`scipy.stats.permutation_test` with ``permutation_type="samples"``,
    of MNE's ``permutation_t_test`` and of nilearn's ``permuted_ols`` sign
    swaps. Every p-value attribute and ``alternative`` work as for
    permutations.

    Permuting ``y`` (or flipping the signs of its rows) leaves each fold's
    decomposition of X unchanged, so for ridge problems one SVD per fold
    serves every permutation: they go through it as a batch of extra
    targets, alpha chosen per permuted target by the estimator's own LOO,
    GCV or K-fold criterion on the fold's training rows (or held at
    ``Ridge``'s per-target ``alpha`` array),
    scored on the device (``device``), in batches sized from the memory
    budget and recovered from out-of-memory errors. This fast path is taken
    when all of these hold:

    - the estimator is exactly ``BatchedRidge`` (valid parameters),
      ``Ridge`` (solver "auto", "svd" or "cholesky", ``positive=False``,
      ``alpha`` a number or one per target), ``RidgeCV`` (scoring None,
      "r2" or "neg_mean_squared_error"; K-fold only with
      ``alpha_per_target=False``) or ``LinearRegression``
      (``positive=False``); not a subclass, not a ``Pipeline``;
    - no ``fit_params``, X dense;
    - ``scoring`` among None, "r2", "correlation",
      "neg_mean_squared_error", "neg_root_mean_squared_error" and
      "neg_mean_absolute_error";
    - ``cv`` and the estimator's own K-fold splitter have folds that do
      not depend on ``y``, and every training fold has 2 rows or more.

    Any other estimator is refit on every fold of every permutation through
    joblib (``n_jobs``); for a ridge-like one (those above, their
    subclasses, a ``Pipeline`` ending in one), ``verbose >= 1`` prints the
    rule it missed. Both paths draw the same permutations: the same
    ``random_state`` gives the same null distribution and p-values for any
    batch size, budget, ``n_jobs`` and path.

    Parameters
    ----------
    estimator : estimator object, default=None
        Regressor to score; None means :class:`~skbatch.BatchedRidge` with
        its defaults.
    n_permutations : int, default=1000
        Number of permutations of ``y``, at least 1. The smallest p-value is
        ``1 / (n_permutations + 1)``: scikit-learn's default of 100 cannot
        go below 0.0099, too coarse for a family-wise threshold of 0.05 over
        many targets to be read with any precision, hence 1000 here (the
        ridge fast path makes them cheap). When the scheme has no more
        distinct permutations than this (see
        :func:`skbatch.random.count_permutations`: ``n`` rotations of a run
        of ``n`` rows, the product over runs; ``k!`` orders of ``k``
        blocks; ``n!`` orders of ``n`` rows, per run; ``2**n_units`` sign
        vectors of ``n_units`` rows or groups for "sign_flip"), each is
        enumerated once instead of drawn, the identity among them, and the
        p-values are exact (``exact_``, ``n_permutations_``).
    scoring : str, callable, list, tuple, dict or None, default=None
        Scorer name (:func:`sklearn.metrics.get_scorer_names`),
        ``"correlation"`` (Pearson correlation of predictions and targets,
        per target, the score encoding-model studies report), or callable
        ``scorer(estimator, X, y)``; None uses ``estimator.score`` (R^2 for
        regressors). With ``multioutput="raw_values"`` it must have a
        per-target value: None (R^2), "r2", "correlation",
        "explained_variance", "neg_mean_squared_error",
        "neg_root_mean_squared_error", "neg_mean_absolute_error",
        "neg_median_absolute_error", "neg_mean_absolute_percentage_error", or
        a callable returning an array of one score per target (generic
        path). R^2 and correlation are undefined (NaN) on test folds of
        fewer than 2 rows. Several metrics, as
        :func:`~sklearn.model_selection.cross_validate` takes them: a list
        (or tuple, set) of unique names, or a dict of name to scorer (a name
        or a callable). They score the same fits of the same permutations,
        and ``score_``, ``pvalue_``, ``pvalue_fwer_``, ``pvalue_fdr_``,
        ``pvalue_holm_``, ``pvalue_by_``, ``null_mean_``, ``null_std_`` and
        ``permutation_scores_`` are then dicts keyed by metric name, each
        value what a fit with that metric alone and the same
        ``random_state`` gives. On the ridge fast path
        (every metric among its scorings) the metrics score the same
        predictions of each permutation. The alpha the estimator chooses
        in its own CV stays chosen by its own scoring.
    cv : int, CV splitter or iterable, default=5
        Outer cross-validation, as in ``permutation_test_score`` (``groups``
        are passed to a splitter that uses them). A splitter whose folds
        ignore ``y`` (``KFold``, ``GroupKFold``, ``TimeSeriesSplit``,
        ``LeaveOneOut``, ``ShuffleSplit``, ``PredefinedSplit``, an
        iterable of splits...) is split once and its folds are shared by all
        permutations; any other (``StratifiedKFold``, the default for
        classifiers, or your own) is re-split on every permuted ``y``, as
        scikit-learn does, on the generic path. Inner splits of a K-fold
        ``RidgeCV`` / ``BatchedRidge`` are drawn once per outer fold.
    multioutput : {"uniform_average", "raw_values"}, default="uniform_average"
        "uniform_average": one score, the scorer's (for several targets, the
        mean over targets of the per-target scores, as ``r2_score`` does).
        "raw_values": a score, p-value and null per target.
    alternative : {"greater", "less", "two-sided"}, default="greater"
        Which permuted scores count as at least as extreme as ``score_``,
        with the definitions of :func:`scipy.stats.permutation_test`:

        - ``"greater"``: those ``>= score_``, the test that the model
          predicts better than chance (scorers are higher-is-better), as
          :func:`~sklearn.model_selection.permutation_test_score`;
        - ``"less"``: those ``<= score_``, the test that it predicts worse
          than chance (an anti-correlated prediction, with
          ``scoring="correlation"``);
        - ``"two-sided"``: twice the smaller of the two one-sided
          p-values, clipped to 1.

        Ties count on either side, whatever the round-off (see Notes).
        Every p-value attribute follows it: ``pvalue_fwer_`` uses the
        maximum over targets for "greater", the minimum for "less", and for
        "two-sided" twice the smaller of the two one-sided family-wise
        p-values, clipped to 1 (valid by the union bound over the two
        tails); the other corrections adjust ``pvalue_``.
    permutation_type : {"shuffle", "circular_shift", "block_shuffle", \
"sign_flip"}, default="shuffle"
        How the rows of ``y`` move within each group (each run), or within
        the whole series without groups, or ("sign_flip") change sign:

        - ``"shuffle"``: a uniform random permutation, valid when rows are
          exchangeable (independent trials). Invalid for autocorrelated rows
          (fMRI, EEG time series): it breaks the autocorrelation that the
          observed data keep, and the test becomes far too liberal. An
          :class:`~skbatch.AutocorrelationWarning` says so when the median
          over targets of the lag-1 autocorrelation of ``y`` within groups
          exceeds both 0.2 and 4 standard deviations of the statistic on
          white noise, ``4 / sqrt(n_samples - n_groups)``
          (:func:`skbatch._timeseries.autocorrelation_warning`).
        - ``"circular_shift"``: rotate each run by a random offset; keeps
          the autocorrelation except at the wrap-around. Exact when each run
          is a stationary circular process; close for runs much longer than
          the autocorrelation.
        - ``"block_shuffle"``: cut each run into blocks of ``block_size``
          consecutive rows and permute the blocks; exact when the process
          restarts at block boundaries (a block per trial), close when
          blocks are much longer than the autocorrelation.
        - ``"sign_flip"``: multiply the rows by random signs: one sign per
          row without ``groups``, one per group with them (all rows of a
          run or subject flipped together, which keeps their dependence:
          valid for autocorrelated rows within a run). Valid when, under
          the null hypothesis, ``y`` is symmetric about 0: ``s * y`` has
          the distribution of ``y`` for every sign vector ``s``
          (independent subjects' effects centred on 0); not for a
          regressor's usual ``y``, whose mean is not 0 under the null.
          Needs a numeric ``y`` (not a classifier). Unit ``u`` (a row, or
          the ``u``-th group in sorted label order) of resample ``i`` draws
          one integer in ``[0, 2)`` from that resample's seed stream;
          exact enumeration flips unit ``u`` of resample ``i`` when bit
          ``u`` of ``i`` is set (resample 0 is the identity; ``s`` and
          ``-s`` both count, as :func:`scipy.stats.permutation_test` counts
          them).

        See the user guide's permutation page for the calibration of each
        (family-wise error under the null).
    block_size : int or None, default=None
        Rows per block, required by and only allowed with
        ``permutation_type="block_shuffle"`` (a ValueError with
        "sign_flip": pass runs as ``groups`` to flip them whole); at most
        the smallest group.
    return_null : bool, default=False
        Keep every permuted score in ``permutation_scores_``. Without it
        memory does not grow with ``n_permutations``.
    random_state : int, RandomState instance, Generator or None, default=0
        Seeds the permutations: permutation i depends on this and i alone.
        The default, :data:`skbatch.random.DEFAULT_RANDOM_STATE` (0), the
        one default of every skbatch estimator and the value of
        ``permutation_test_score``, makes a rerun give the same p-values;
        None draws fresh permutations every fit.
    n_jobs : int or None, default=None
        Workers of the generic path (joblib convention; wrap ``fit`` in
        ``joblib.parallel_config`` to choose the joblib backend). The ridge
        fast path runs on ``device`` and ignores it.
    device : str or Backend, default="auto"
        Where the ridge fast path computes; see
        :func:`skbatch.resolve_backend`. Float64 unless the estimator is a
        ``BatchedRidge`` whose ``dtype`` says otherwise (float32 on MPS).
    max_memory_gb : float or None, default=None
        Memory budget in GB, for device batches, generic-path windows and
        the retained null; None measures free memory.
    verbose : int, default=0
        1: print the plan of each loop before it runs and a summary after it
        (plain lines on stdout), and a progress bar over the permutations on a
        terminal or in a notebook; where no bar shows (a log file), a line of
        progress (done, elapsed, left) at every 10% of a loop estimated to
        take 10 s or more and at least every 30 s; 2: also log the plans,
        every batch and the out-of-memory recoveries on the ``skbatch``
        logger.

    Attributes
    ----------
    score_ : float or ndarray of shape (n_targets,)
        Cross-validated score on the true ``y`` (per target for
        "raw_values"). With several metrics in ``scoring``, this and the
        p-values, null moments and ``permutation_scores_`` are dicts of such
        values keyed by metric name.
    pvalue_ : float or ndarray of shape (n_targets,)
        ``(C + 1) / (n_permutations + 1)``; with ``exact_``,
        ``C / n_permutations_``, C then counting every distinct permutation
        scoring at least ``score_``, the identity included (the smallest
        value is ``1 / n_permutations_``, with no Monte Carlo error). C
        counts the scores at most ``score_`` for ``alternative="less"``;
        "two-sided" is twice the smaller of the two, clipped to 1.
    pvalue_fwer_ : float or ndarray of shape (n_targets,)
        Family-wise p-value: the proportion (with the same +1) of
        permutations whose best score over targets reaches the target's
        ``score_`` (the worst score for ``alternative="less"``; twice the
        smaller of the two, clipped to 1, for "two-sided"). Never below
        ``pvalue_``. For "uniform_average" there is a single statistic and
        it equals ``pvalue_``. With ``exact_``, the proportion over all
        distinct permutations, as for ``pvalue_``.
    pvalue_fdr_ : float or ndarray of shape (n_targets,)
        Benjamini–Hochberg adjusted p-values of ``pvalue_``, equal to
        :func:`scipy.stats.false_discovery_control` (``method="bh"``);
        targets whose ``pvalue_`` is NaN stay NaN and are left out of the
        family. Rejecting where ``pvalue_fdr_ <= q`` controls the false
        discovery rate at ``q`` when the targets' tests are independent or
        positively dependent (noise correlated positively across targets);
        under arbitrary dependence use ``pvalue_fwer_``, the stricter
        choice, which controls the chance of any false discovery. For
        "uniform_average" it equals ``pvalue_`` (a family of one).
    pvalue_holm_ : float or ndarray of shape (n_targets,)
        Holm's step-down adjusted p-values of ``pvalue_``, equal to
        statsmodels' ``multipletests(method="holm")``; NaN targets left out
        of the family as for ``pvalue_fdr_``. Controls the family-wise
        error rate under any dependence, without the permutations' joint
        null: usually less powerful than ``pvalue_fwer_`` for correlated
        targets. For "uniform_average" it equals ``pvalue_``.
    pvalue_by_ : float or ndarray of shape (n_targets,)
        Benjamini–Yekutieli adjusted p-values of ``pvalue_``, equal to
        :func:`scipy.stats.false_discovery_control` (``method="by"``); NaN
        targets left out of the family. Controls the false discovery rate
        under any dependence between the targets' tests, at the price of a
        factor ``1 + 1/2 + ... + 1/n_targets`` over ``pvalue_fdr_``. For
        "uniform_average" it equals ``pvalue_``.
    null_mean_ : float or ndarray of shape (n_targets,)
        Mean of the permuted scores.
    null_std_ : float or ndarray of shape (n_targets,)
        Standard deviation (ddof=1) of the permuted scores.
    permutation_scores_ : ndarray
        Of shape ``(n_permutations_,)``, or ``(n_permutations_, n_targets)``
        with ``multioutput="raw_values"``. Every permuted score, row i from
        permutation i (with ``exact_``, the i-th of the enumeration, row 0
        the identity); only with ``return_null=True``.
    n_permutations_ : int
        Permutations scored: ``n_permutations``, or with ``exact_`` the
        number of distinct permutations of the scheme.
    exact_ : bool
        Whether every distinct permutation was enumerated once (the scheme
        has at most ``n_permutations``) rather than ``n_permutations``
        drawn at random.
    estimator_ : estimator object
        Clone of ``estimator`` fit on all data; ``predict`` and ``score``
        delegate to it.
    backend_ : Backend
        Where the fast path computed (resolved from ``device``).
    fit_report_ : FitReport
        How the fit ran: the permutations' batches (or joblib windows),
        their size, out-of-memory splits, planned peak memory and time,
        with the loops of the fit of ``estimator_``.
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen in fit, when X has string column names.

    See Also
    --------
    sklearn.model_selection.permutation_test_score : Same test, one score,
        refitting the estimator for every permutation.

    Notes
    -----
    The ridge fast path solves every fold exactly (SVD, rank-truncated like
    ``numpy.linalg.matrix_rank``), so its scores match scikit-learn's to
    rounding; ``LinearRegression`` is its ``alpha = 0`` limit (the
    pseudo-inverse). An estimator choosing one alpha for all targets
    (``RidgeCV``'s default ``alpha_per_target=False``, or
    ``BatchedRidge(alpha_per_target=False)``) chooses it per permutation,
    over that permutation's targets, as its refit on permuted data would.

    All targets of a permutation share one row permutation (as
    ``permutation_test_score`` permutes the rows of a 2-D ``y``), or one
    sign vector with "sign_flip", which keeps their dependence and makes the
    max-statistic ``pvalue_fwer_`` valid.

    A p-value is never smaller than its definition allows. A permuted score
    within ``1000`` units in the last place of the compute dtype (relative
    to 1 for R^2 and correlation, to the score otherwise) below ``score_``
    (above it, for ``alternative="less"``; either, for the two tails of
    "two-sided") counts as reaching it, so that a permutation that
    reproduces the data (the identity) counts whatever the round-off of the
    batch that scored it. An undefined (NaN) ``score_`` gives a NaN p-value
    with a warning; an undefined permuted score counts as reaching
    ``score_``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import Ridge
    >>> from sklearn.model_selection import GroupKFold
    >>> from skbatch import PermutationScorer
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((60, 4))
    >>> signal = X[:, 0] + 0.5 * rng.standard_normal(60)
    >>> Y = np.column_stack([signal, rng.standard_normal(60)])
    >>> perm = PermutationScorer(
    ...     Ridge(alpha=1.0), n_permutations=99, multioutput="raw_values",
    ...     random_state=0,
    ... ).fit(X, Y)
    >>> float(perm.pvalue_[0])  # the smallest possible: 1 / (99 + 1)
    0.01
    >>> bool(perm.pvalue_[1] > 0.05), bool(perm.score_[0] > 0.5)
    (True, True)

    Autocorrelated rows (three runs of a time series): rotate each run
    instead of shuffling it.

    >>> runs = np.repeat([0, 1, 2], 20)
    >>> perm = PermutationScorer(
    ...     Ridge(alpha=1.0), n_permutations=99, permutation_type="circular_shift",
    ...     cv=GroupKFold(3), random_state=0,
    ... ).fit(X, signal, groups=runs)
    >>> bool(perm.pvalue_ <= 0.05)
    True

    A one-sample test, ``y`` symmetric about 0 under the null hypothesis:
    flip the signs of its rows (of whole runs, given ``groups``) instead.

    >>> flips = PermutationScorer(
    ...     Ridge(alpha=1.0), n_permutations=99, permutation_type="sign_flip",
    ...     random_state=0,
    ... ).fit(X, signal)
    >>> float(flips.pvalue_)
    0.01
    >>> flips = PermutationScorer(
    ...     Ridge(alpha=1.0), n_permutations=99, permutation_type="sign_flip",
    ...     cv=GroupKFold(3),
    ... ).fit(X, signal, groups=runs)
    >>> flips.exact_, flips.n_permutations_  # 2**3 sign vectors of 3 runs
    (True, 8)
    """

    def __init__(
        self,
        estimator=None,
        *,
        n_permutations=1000,
        scoring=None,
        cv=5,
        multioutput="uniform_average",
        alternative="greater",
        permutation_type="shuffle",
        block_size=None,
        return_null=False,
        random_state=DEFAULT_RANDOM_STATE,
        n_jobs=None,
        device="auto",
        max_memory_gb=None,
        verbose=0,
    ):
        self.estimator = estimator
        self.n_permutations = n_permutations
        self.scoring = scoring
        self.cv = cv
        self.multioutput = multioutput
        self.alternative = alternative
        self.permutation_type = permutation_type
        self.block_size = block_size
        self.return_null = return_null
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.device = device
        self.max_memory_gb = max_memory_gb
        self.verbose = verbose

    def _default_estimator(self):
        return BatchedRidge()

    def _check_params(self):
        estimator = self.estimator
        if estimator is not None and not (
            hasattr(estimator, "fit") and hasattr(estimator, "get_params")
        ):
            raise TypeError(
                f"estimator must be None or a scikit-learn estimator (with fit and "
                f"get_params), got {type(estimator).__name__}: {estimator!r}"
            )
        n_permutations = self.n_permutations
        if (
            isinstance(n_permutations, bool)
            or not isinstance(n_permutations, numbers.Integral)
            or n_permutations < 1
        ):
            raise ValueError(
                f"n_permutations must be an int >= 1, got {n_permutations!r}"
            )
        if self.multioutput not in _MULTIOUTPUTS:
            raise ValueError(
                f"multioutput must be one of {_MULTIOUTPUTS}, got {self.multioutput!r}"
            )
        for name, scoring in _metrics(self.scoring).items():
            _check_scoring(
                scoring, "scoring" if name is None else name, self.multioutput
            )
        check_alternative(self.alternative)
        # Type and block_size here; block_size against the groups in fit.
        check_resampling_type(self.permutation_type, self.block_size)
        if not isinstance(self.return_null, bool | np.bool_):
            raise ValueError(f"return_null must be a bool, got {self.return_null!r}")
        check_max_memory_gb(self.max_memory_gb)
        check_verbose(self.verbose)

    @atomic_fit
    def fit(self, X, y, groups=None, **fit_params):
        """Score the estimator and its permutation null distribution.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data, passed to the estimator as given (a DataFrame
            stays one); its values are validated by the estimator.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets, passed to the estimator as given (a pandas Series
            stays one; a permuted one keeps the index of ``y``).
        groups : array-like of shape (n_samples,), default=None
            Exchangeability blocks: ``y`` is permuted (or shifted, or its
            blocks shuffled) within each group only; with
            ``permutation_type="sign_flip"``, all rows of a group share one
            sign. Also passed to a ``cv``
            splitter that uses groups, and to every fit of an estimator that
            takes ``groups`` (under metadata routing, one that requests
            them), sliced to its rows: ``PermutationScorer(BatchedRidge(
            cv=LeaveOneGroupOut()), cv=LeaveOneGroupOut())`` runs nested
            leave-one-run-out, on both paths.
        **fit_params : dict
            Passed to ``estimator.fit`` (sliced to the training rows of each
            fold); any of them sends the work to the generic path. Under
            metadata routing, those the estimator requests (see
            :meth:`get_metadata_routing`).

        Returns
        -------
        self : object
            Fitted estimator.
        """
        self._check_params()
        estimator = self._get_estimator()
        raw = self.multioutput == "raw_values"
        inner_tags = get_tags(estimator).input_tags
        X_input, y_input, X_valid, y, groups, fit_params = self._check_fit_input(
            X,
            y,
            groups,
            fit_params,
            # Row-indexable formats, for slicing folds.
            accept_sparse=["csr", "csc"] if inner_tags.sparse else False,
            y_numeric=not is_classifier(estimator),
        )
        # A DataFrame or Series reaches the estimator as the user gave it.
        X = estimator_input(X_input, X_valid)
        y_fit = estimator_input(y_input, y)
        n_samples = X_valid.shape[0]
        n_targets = 1 if y.ndim == 1 else y.shape[1]
        metrics = _metrics(self.scoring)
        n_stats = len(metrics) * (n_targets if raw else 1)
        _check_host_memory(self, n_stats)
        permutation, n_items = _plan_resamples(self, estimator, y, groups)
        entropy = resolve_entropy(self.random_state)
        # The folds, the device and the memory may refuse: before any fit.
        cv = check_cv(self.cv, y, classifier=is_classifier(estimator))
        splits = _split_rows(cv, X, y, groups)
        # The generic path's; the fast path's weighs its work ("auto").
        backend = resolve_backend(self.device)
        spec, reason = _fast_path(
            self, estimator, X_valid, cv, splits, fit_params, n_targets
        )
        if reason is not None:
            _say(
                self.verbose,
                f"PermutationScorer refits {type(estimator).__name__} on every "
                f"fold of every permutation (the generic path): {reason}.",
            )
        # Metrics the fast path scores there, the others by refits.
        fast = {
            name: scoring
            for name, scoring in metrics.items()
            if spec is not None and scoring in DEVICE_SCORINGS
        }
        slow = {name: s for name, s in metrics.items() if name not in fast}
        if fast and slow:
            _say(
                self.verbose,
                f"PermutationScorer refits {type(estimator).__name__} for the "
                f"metrics {sorted(slow)}: the fast path scores only "
                f"{DEVICE_SCORINGS}.",
            )
        # The estimator's fits get the rows' groups when they take them.
        refits = refit_params(estimator, groups, fit_params)
        if fast:
            ridge = _plan_ridge(
                self, X_valid, y, splits, spec, n_items, refits.get("groups")
            )
        if slow:
            data = DataBytes.of(X_input, y_input, X_valid, y, fit_params)
            _check_refit_memory(self, data, n_samples, n_stats)
        estimator_ = clone(estimator).fit(X, y_fit, **refits)
        counters = {}
        if fast:
            backend, counters = self._fit_ridge(
                X_valid,
                y,
                groups,
                splits,
                ridge,
                entropy,
                raw,
                permutation,
                n_items,
                fast,
            )
        if slow:
            generic = self._fit_generic(
                estimator,
                X,
                y_fit,
                groups,
                cv,
                splits if _splits_ignore_y(cv) else None,
                entropy,
                raw,
                permutation,
                refits,
                n_items,
                slow,
            )
            counters = {name: {**counters, **generic}[name] for name in metrics}
        for name, counter in counters.items():
            undefined = np.isnan(counter.observed)
            if undefined.any():
                warnings.warn(
                    f"The cross-validated score"
                    f"{'' if name is None else f' {name!r}'} is undefined (NaN) for "
                    f"{int(undefined.sum())} of {undefined.size} "
                    f"{'target' if undefined.size == 1 else 'targets'}, for example "
                    f"R^2 or correlation on test folds of fewer than 2 rows, or a "
                    f"constant target; their p-values are NaN. Use folds with more "
                    f"test rows (cv) or another scoring.",
                    UserWarning,
                    stacklevel=3,
                )

        def each(value):
            # One metric: its value; several: a dict by metric name.
            values = {name: value(counter) for name, counter in counters.items()}
            return values[None] if None in values else values

        self.score_ = each(lambda c: c.observed if raw else float(c.observed))
        self.pvalue_ = each(PermutationCounter.pvalue)
        self.pvalue_fwer_ = each(PermutationCounter.pvalue_fwer)
        self.pvalue_fdr_ = each(PermutationCounter.pvalue_fdr)
        self.pvalue_holm_ = each(lambda c: c.pvalue_adjusted("holm"))
        self.pvalue_by_ = each(lambda c: c.pvalue_adjusted("by"))
        self.null_mean_ = each(lambda c: c.null_mean)
        self.null_std_ = each(lambda c: c.null_std)
        if self.return_null:
            self.permutation_scores_ = each(lambda c: c.null)
        self.n_permutations_ = n_items
        self.exact_ = permutation["exact"]
        self.backend_ = backend
        self.estimator_ = estimator_
        return self

    def _fit_ridge(
        self, X, y, groups, splits, ridge, entropy, raw, permutation, n_items, metrics
    ):
        """Fast path: permutations as extra targets through one SVD per fold.

        ``ridge`` is what :func:`~skbatch._permutation_plan._plan_ridge`
        planned; ``metrics`` (name -> scoring) are among
        ``DEVICE_SCORINGS``. Returns the backend and a counter per metric.
        """
        X, Y, spec = ridge["X"], ridge["Y"], ridge["spec"]
        backend, dtype = ridge["backend"], ridge["dtype"]
        flops, inner_scheme = ridge["flops"], ridge["inner_scheme"]
        problem_class = permuted_problem(spec)
        # The problem scores every metric on the same predictions where its
        # scores() is PermutedRidgeProblem's; otherwise one pass per metric.
        if len(metrics) > 1 and problem_class.scores is PermutedRidgeProblem.scores:
            passes = [list(metrics)]
        else:
            passes = [[name] for name in metrics]
        problem = functools.partial(
            problem_class, X, Y, splits, spec, inner_scheme, backend, dtype
        )
        counters = {}
        for names in passes:
            scorings = tuple(metrics[name] for name in names)
            counters.update(
                self._ridge_pass(
                    problem,
                    backend,
                    dtype,
                    flops,
                    dict(entropy=entropy, groups=groups, **permutation),
                    n_items,
                    raw,
                    dict(zip(names, scorings)),
                )
            )
        return backend, counters

    def _ridge_pass(
        self, problem, backend, dtype, flops, permutation, n_items, raw, metrics
    ):
        """One run of the fast path's problem over every permutation, scoring
        ``metrics`` (name -> scoring) on the same predictions: their counters.

        ``problem(scoring, n_permutations=, permutation=)`` builds it: the
        problem class with the data, folds, spec, inner scheme, backend and
        dtype of :meth:`_fit_ridge` already bound.
        """
        scorings = tuple(metrics.values())
        with contextlib.ExitStack() as stack:
            stack.enter_context(backend.context())
            if flops < SMALL_FIT_FLOPS:
                stack.enter_context(_backends.get(backend.library).one_thread())
            problem = problem(
                scorings[0] if len(scorings) == 1 else scorings,
                n_permutations=n_items,
                permutation=permutation,
            )
            n_targets = problem.n_targets
            observed = np.asarray(to_numpy(problem.observed()), dtype=np.float64)
            # Metric k's scores are columns k * n_targets ... of every row.
            counters = {}
            for k, (name, scoring) in enumerate(metrics.items()):
                part = observed[k * n_targets : (k + 1) * n_targets]
                counters[name] = _counter(
                    self,
                    part if raw else part.mean(),
                    dtype,
                    n_items,
                    permutation["exact"],
                    scoring,
                )

            def reduce(ids, scores):
                for k, counter in enumerate(counters.values()):
                    part = scores[:, k * n_targets : (k + 1) * n_targets]
                    counter.update(part if raw else part.mean(axis=1), ids)

            run_problem(
                problem, reduce, max_memory_gb=self.max_memory_gb, verbose=self.verbose
            )
        return counters

    def _fit_generic(
        self,
        estimator,
        X,
        y,
        groups,
        cv,
        splits,
        entropy,
        raw,
        permutation,
        fit_params,
        n_items,
        metrics,
    ):
        """Generic path: refits of clones in joblib windows, a counter per
        metric of ``metrics`` (name -> scoring).

        ``splits`` None: folds depend on ``y`` and are drawn anew for every
        permuted ``y``.
        """
        scorers = []
        for scoring in metrics.values():
            scorer = metric = None
            if raw and callable(scoring):
                scorer, metric = scoring, "scorer"
            elif raw or scoring == "correlation":
                metric = _PER_TARGET_METRICS[scoring or "r2"]
            else:
                scorer = check_scoring(estimator, scoring)
            scorers.append((scorer, metric))
        args = dict(
            estimator=estimator,
            X=X,
            scorers=scorers,
            fit_params=fit_params,
        )
        observed = _cv_score(
            y=y, splits=splits or _split_rows(cv, X, y, groups), **args
        )
        shapes = [np.shape(value) for value in observed]
        sizes = [int(np.prod(shape)) for shape in shapes]
        host_bytes_per_item = 8 * sum(sizes)
        bounds = np.cumsum([0, *sizes])
        counters = {
            name: _counter(
                self,
                # A per-target metric averaged over targets, as r2_score does.
                value if raw else np.mean(value),
                np.float64,
                n_items,
                permutation["exact"],
                scoring,
            )
            for (name, scoring), value in zip(metrics.items(), observed)
        }
        task = functools.partial(
            _null_scores_task,
            y=y,
            # The splitter travels only when the folds are drawn per permutation.
            cv=cv if splits is None else None,
            splits=splits,
            groups=groups,
            entropy=entropy,
            permutation=permutation,
            **args,
        )

        def reduce(ids, scores):
            scores = scores.reshape(len(ids), -1)
            for counter, shape, lo, hi in zip(
                counters.values(), shapes, bounds[:-1], bounds[1:]
            ):
                part = scores[:, lo:hi]
                if raw:
                    counter.update(part.reshape(len(ids), *shape), ids)
                else:
                    counter.update(part.mean(axis=1), ids)

        run_parallel(
            task,
            reduce,
            n_items=n_items,
            host_bytes_per_item=host_bytes_per_item,
            n_jobs=self.n_jobs,
            max_memory_gb=self.max_memory_gb,
            verbose=self.verbose,
            desc="permutations",
        )
        return counters
