"""Variance partitioning: which band explains which target uniquely.

One :class:`~skbatch.BandedRidge` per non-empty subset of the bands, each
scored on held-out folds; the set-theoretic maths on those scores is in
:mod:`skbatch._ridge.partition`.
"""

import functools
import numbers
import warnings
from typing import NamedTuple

import joblib
import numpy as np
from sklearn.base import clone
from sklearn.model_selection import KFold, LeaveOneGroupOut, check_cv
from sklearn.utils import check_X_y

from ._engine import run_parallel
from ._engine.preflight import DataBytes, refit_window, refuse
from ._estimators.base import check_max_memory_gb, check_n_jobs, check_verbose
from ._estimators.fit_checks import _check_weights
from ._kernels.rules import check_alternative
from ._kernels.timeseries import autocorrelation_warning
from ._resampling.sign_flip import SIGN_FLIP
from ._resampling.signed import check_resampling_type, count_resamples, signed_rows
from ._ridge.banded import (
    WEIGHT_FLOOR,
    check_band_weights,
    check_bands,
    n_candidates,
)
from ._ridge.cv import MIN_SAMPLES, check_fold_weights, fold_rows, uses_groups
from ._ridge.freedman_lane import (
    HYPERPARAMETERS,
    NULLS,
    band_null_task,
    null_bytes,
    task_bytes,
)
from ._ridge.partition import subsets as _subsets
from ._ridge.partition import unique_variance, venn_regions
from ._ridge.partition_bootstrap_held import (
    check_bootstrap_hyperparameters,
    held_bootstrap_bytes,
    held_bootstrap_statistics,
)
from ._ridge.partition_inference import (
    HELD_OUT_COPIES,
    band_null_scores,
    band_shares,
    bootstrap_statistics,
    check_replicable,
    held_out_scores,
)
from .banded import BandedRidge
from .exceptions import AutocorrelationWarning
from .permutation import TIE_ULPS
from .random import (
    DEFAULT_RANDOM_STATE,
    _check_permutation_type,
    check_groups,
    resolve_entropy,
)
from .streaming import BootstrapAccumulator, PermutationCounter

__all__ = ["VariancePartition", "variance_partitioning"]

# 2**8 - 1 = 255 BandedRidge searches per fold: past that the subset models
# cost more than any study of unique variance is worth, and 2**k grows fast.
MAX_BANDS = 8
# How the folds' held-out predictions make one score (variance_partitioning's
# ``average``).
AVERAGES = ("rows", "folds")
# Outer folds without groups, as cross_val_score's default.
DEFAULT_N_SPLITS = 5
# Fewest runs at which benchmarks/calibration_partitioning.py measured the
# bootstrap intervals' coverage at their level (of the unique variance that
# the data set's own models reach on new data: 90% with 10 and 20 runs, 200
# data sets); fewer runs warn.
MIN_CALIBRATED_RUNS = 10
# What that calibration measured below MIN_CALIBRATED_RUNS, for the warning.
FEW_RUNS_COVERAGE = (
    "a nominal 90% interval of the unique variance covered 74% of the time "
    "with 4 runs and 82% with 5, against 90% with 10"
)


# What the calibration of the Freedman–Lane null measured with autocorrelated
# residuals, for the warning.
FREEDMAN_LANE_FWER = (
    "family-wise error 8-11% for a nominal 5% with AR runs and circular "
    "shifts of the residuals, held or searched hyperparameters"
)


# Refits of the models warn (alphas at an edge of the grid, coarse
# candidates, autocorrelated residuals) as their fits on the data already
# did: once, there.
_QUIET = (UserWarning,)
# What an interval or p-value field holds when it was not asked for.
_NOT_ASKED = None


class _Fields(NamedTuple):
    subsets: list
    scores: np.ndarray
    regions: np.ndarray
    unique: np.ndarray
    band_names: np.ndarray


class VariancePartition(_Fields):
    """What :func:`variance_partitioning` returns.

    A named tuple ``(subsets, scores, regions, unique, band_names)``, with
    the shares and the inference on the unique variance as attributes (not
    tuple items, so that unpacking the five items keeps working; ``_replace``
    and ``_make`` drop them).

    Attributes
    ----------
    subsets : list of tuple
        Every non-empty subset of the bands, as tuples of band names
        (``BandedRidge.band_names_``), by size, then lexicographic in band
        order.
    scores : ndarray of shape (n_subsets, n_targets)
        Held-out R^2 of the model on each subset: with ``average="rows"``
        (the default), one R^2 over the test rows of all folds together,
        each row predicted by the model of its fold (as ``r2_score(y,
        cross_val_predict(...))``); with ``average="folds"``, the mean of
        the folds' R^2, each on its own test rows (as
        ``cross_val_score(...).mean()``).
    regions : ndarray of shape (n_subsets, n_targets)
        The Venn region of each subset: the variance shared by exactly its
        bands (for a single band, its unique variance).
    unique : ndarray of shape (n_bands, n_targets)
        Unique variance of each band, ``f(all) - f(all but that band)``.
    band_names : ndarray of shape (n_bands,)
        The bands, in the order of the rows of ``unique``.
    share : ndarray of shape (n_bands, n_targets)
        Each band's share of the full model: ``unique / f(all)``, NaN where
        ``f(all) <= 0``.
    pvalue : ndarray of shape (n_bands, n_targets) or None
        Permutation p-value of each band's unique variance, per target
        (None without ``n_permutations``).
    pvalue_fwer : ndarray of shape (n_bands, n_targets) or None
        Family-wise p-value over the targets, by the max statistic, per
        band.
    pvalue_fdr : ndarray of shape (n_bands, n_targets) or None
        Benjamini–Hochberg adjusted ``pvalue`` over the targets, per band.
    null_mean : ndarray of shape (n_bands, n_targets) or None
        Mean of the unique variance under the permutations.
    n_permutations : int
        Permutations scored per band (0: none; every distinct one when
        ``exact``).
    exact : bool
        Whether every distinct permutation of the scheme was enumerated once.
    unique_ci : ndarray of shape (2, n_bands, n_targets) or None
        Lower and upper bounds of the basic bootstrap interval of
        ``unique`` (None without ``n_bootstrap``): the percentile interval
        of the replicates reflected around ``unique``.
    share_ci : ndarray of shape (2, n_bands, n_targets) or None
        The same for ``share``.
    n_bootstrap : int
        Bootstrap replicates (0: none).
    """

    share = _NOT_ASKED
    pvalue = _NOT_ASKED
    pvalue_fwer = _NOT_ASKED
    pvalue_fdr = _NOT_ASKED
    null_mean = _NOT_ASKED
    n_permutations = 0
    exact = False
    unique_ci = _NOT_ASKED
    share_ci = _NOT_ASKED
    n_bootstrap = 0

    def __new__(cls, subsets, scores, regions, unique, band_names, **inference):
        self = super().__new__(cls, subsets, scores, regions, unique, band_names)
        for name, value in inference.items():
            if not hasattr(cls, name) or name in _Fields._fields:
                raise TypeError(f"VariancePartition has no attribute {name!r}")
            setattr(self, name, value)
        return self


def variance_partitioning(
    X,
    y,
    *,
    bands=None,
    estimator=None,
    cv=None,
    average="rows",
    groups=None,
    sample_weight=None,
    n_permutations=0,
    null="band_rows",
    null_hyperparameters=None,
    permutation_type="circular_shift",
    block_size=None,
    alternative="greater",
    n_bootstrap=0,
    bootstrap_hyperparameters=None,
    confidence_level=0.95,
    random_state=DEFAULT_RANDOM_STATE,
    n_jobs=None,
    max_memory_gb=None,
    verbose=0,
):
    """Held-out R^2 of every subset of bands, its Venn regions, and tests
    and intervals of each band's unique variance.

    For each non-empty subset ``U`` of the bands, a clone of ``estimator``
    restricted to the columns of ``U`` is fit on each training fold of
    ``cv`` and predicts the fold's test rows; ``f(U)`` is, per target, the
    R^2 of those predictions over the test rows of all folds together
    (``average="rows"``, the default), or the mean of each fold's R^2 on
    its own test rows (``average="folds"``). With ``B`` all bands and ``f(∅) = 0``, band
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
    average : {"rows", "folds"}, default="rows"
        How the folds' held-out predictions make one R^2 per target:
        ``"rows"``, one R^2 over the test rows of every fold together (as
        ``r2_score(y, cross_val_predict(...))``); ``"folds"``, the mean of
        each fold's R^2 on its own test rows (as
        ``cross_val_score(...).mean()``). Each short test run centred on its
        own mean misses the slow part of an autocorrelated series, which
        ``"folds"`` then counts as unique variance; the user guide's page on
        variance partitioning gives the calibration of both.
    groups : array-like of shape (n_samples,), default=None
        Run (group) of each sample, given to the outer splitter when it
        uses groups and, on each training fold, to the inner fit.
    sample_weight : array-like of shape (n_samples,), default=None
        Non-negative weights, given to every fit (training rows) and to the
        R^2 (test rows). A fold whose training rows all weigh 0 is refused
        before any fit, naming it, and so, with ``average="folds"``, is a
        fold whose test rows all weigh 0 (its R^2 would be 0 / 0), as
        :class:`~skbatch.BandedRidge` refuses such folds of its ``cv``.
    n_permutations : int, default=0
        Permutations per band for the p-values of the unique variance; 0
        tests nothing. For band b, permutation i moves the rows of band b's
        columns relative to ``y`` and to the other bands (within each run of
        ``groups``) and refits the full model, its own search included, on
        the same folds; the statistic is the full model's R^2 minus that of
        the model without b (which does not see the permutation, so it is
        computed once). ``p = (1 + #{null >= observed}) / (1 +
        n_permutations)``, ties counting. When the scheme has no more
        distinct permutations than this, each is enumerated once and ``p``
        is exact, as for :class:`~skbatch.PermutationScorer`. Costs
        ``n_bands * n_permutations * n_folds`` searches. With
        ``null="freedman_lane"`` the targets are permuted instead (below).
    null : {"band_rows", "freedman_lane"}, default="band_rows"
        What a permutation moves. ``"band_rows"``: band b's rows, as above
        (the design changes; every permutation is a full refit).
        ``"freedman_lane"`` (Freedman and Lane, 1983; nilearn's
        ``permuted_ols`` with ``confounding_vars``, FSL randomise, permuco):
        the model without band b is fit on all rows, and permutation i's
        targets are its fitted values plus its residuals moved by the
        scheme (``y* = fitted + P_i residuals``, the same ``P_i`` for every
        target); band b's unique variance is recomputed on ``y*`` with the
        same outer folds. The design never changes, so the permutations are
        extra targets of the decompositions the fits already make. It tests
        that band b adds nothing to the other bands, whatever their
        correlation with it.
    null_hyperparameters : {"held", "searched"} or None, default=None
        Under ``null="freedman_lane"``: ``"held"`` (what None means there)
        keeps, on every outer fold, each target's band weights and alpha as
        the full and the reduced models chose them on the data, so that a
        permutation costs one product per fold and candidate, no search;
        ``"searched"`` refits both models with their searches on every
        ``y*`` (the permuted targets as extra targets of one search per
        fold). The band-row null always searches (None or "searched").
    permutation_type : {"circular_shift", "block_shuffle", "shuffle", \
"sign_flip"}, default="circular_shift"
        How band b's rows (or the residuals) move within each run (the
        whole series without ``groups``), as
        :func:`skbatch.random.permutation_indices`: ``"circular_shift"``
        rotates each run by a random offset, keeping its autocorrelation
        (the default, for time series); ``"block_shuffle"`` permutes blocks
        of ``block_size`` rows; ``"shuffle"`` permutes rows, valid only for
        exchangeable rows; ``"sign_flip"`` (``null="freedman_lane"`` only)
        flips the sign of the residuals of each run of ``groups`` (of each
        row without), valid for residuals symmetric about 0.
    block_size : int or None, default=None
        Rows per block, required by and only allowed with
        ``permutation_type="block_shuffle"``.
    alternative : {"greater", "less", "two-sided"}, default="greater"
        The side of the test, as :class:`~skbatch.PermutationScorer` reads
        it: "greater" tests that band b adds to the other bands.
    n_bootstrap : int, default=0
        Bootstrap replicates for the intervals of the unique variance and
        of the shares; 0, or at least 2. Replicate i resamples whole runs
        of ``groups`` with replacement (rows without groups), through
        :func:`skbatch.random.bootstrap_rows`; every outer fold keeps its
        sides (a copy of a test run is a test run: see Notes), and the full
        and leave-one-band-out models are refit, their searches included,
        on the replicate's training rows and scored on its test rows.
        Costs ``(1 + n_bands) * n_bootstrap * n_folds`` searches.
    bootstrap_hyperparameters : {"searched", "held"} or None, default=None
        How each replicate's models treat their hyperparameters.
        ``"searched"`` (what None means): refit with their searches, as
        above. ``"held"``: on each outer fold k that the replicate keeps, the
        full and every leave-one-band-out model keep, target by target, the
        band weights and alpha they chose on the data's fold k; a replicate
        is then one weighted ridge fit per fold, model and held candidate
        (no search; the held Freedman–Lane null's decompositions,
        :mod:`skbatch._ridge.partition_bootstrap_held`), scored as the
        searched replicate is. The replicates (rows and kept folds) are the
        same. Costs ``(1 + n_bands) * n_bootstrap * n_folds`` such fits and
        no search: at ``benchmarks/bench_encoding.py``'s shape (2,947 rows,
        bands of 30 and 300 columns, 20 candidates, 9 alphas, 10 runs) one
        replicate took 6 s at 2,000 targets against 99 s searched
        (``benchmarks/RESULTS.md``). Its intervals leave out the variability
        of the searches (they are narrower); the user guide's page on
        variance partitioning gives their coverage beside the searched
        ones'.
    confidence_level : float, default=0.95
        Coverage of the two-sided basic intervals (see Notes).
    random_state : int, RandomState instance, Generator or None, default=0
        Seeds the permutations and the replicates: item i depends on this
        and i alone, whatever ``n_jobs``. The estimator's own
        ``random_state`` still draws its band weights.
    n_jobs : int or None, default=None
        Workers for the refits of the permutations and replicates (joblib
        convention). With ``null_hyperparameters="held"`` or
        ``bootstrap_hyperparameters="held"``, one worker already runs parts
        of the targets side by side on every thread of numpy's BLAS: on one
        machine, more workers only copy the task to each (two worker
        processes ran the benchmark's held null at half the speed of one;
        ``benchmarks/RESULTS.md``).
    max_memory_gb : float or None, default=None
        Host memory budget in GB for the refits in flight and the retained
        summaries; None measures free memory. Checked before any fit.
    verbose : int, default=0
        1: progress over the permutations and replicates.

    Returns
    -------
    result : VariancePartition
        A named tuple ``(subsets, scores, regions, unique, band_names)``;
        ``scores[i]``, ``regions[i]`` belong to ``subsets[i]``, subsets by
        size then lexicographic in band order. Its attributes ``share``,
        ``pvalue``, ``pvalue_fwer``, ``pvalue_fdr``, ``null_mean``,
        ``unique_ci`` and ``share_ci`` hold the shares and the inference
        (None when not asked for).

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
    The score of a subset is, by default (``average="rows"``), the R^2 of
    its held-out predictions over the test rows of all folds together, each
    row predicted by the model of its fold; with ``average="folds"``, the
    plain mean of its per-fold R^2, every fold weighing the same, as
    ``cross_val_score(...).mean()``, and a fold where R^2 is undefined
    (fewer than 2 test rows) makes it NaN. Held-out scores are not exactly
    additive, so a region can come out slightly negative: no region is
    clipped.

    **P-values.** Permuting ``y`` would test that ``y`` is independent of
    every band; permuting band b's rows tests that band b is independent of
    ``y`` and of the other bands together. It is exact under that null
    (for ``"circular_shift"``, when each run is a stationary circular
    process; close for runs much longer than the autocorrelation). When
    band b is correlated with the other bands its permuted copy loses that
    correlation, and what the test rejects is then that null, not only
    "band b adds nothing". Every permutation permutes the rows of all
    targets alike, so ``pvalue_fwer`` (the max statistic over targets, per
    band) controls the family-wise error over targets; ``pvalue_fdr`` is
    Benjamini–Hochberg's adjustment of ``pvalue`` over targets
    (:func:`skbatch._kernels.rules.bh_adjusted`). Bands are separate families.

    **Freedman–Lane.** With ``null="freedman_lane"`` the reduced model's
    fitted values and residuals come from one fit on all rows (its search
    over the inner folds included), as nilearn and randomise residualise
    once; the permuted targets then run through the same outer folds as
    the data. The test is approximate (the residuals are estimates, and
    ridge's shrinkage leaves some of band b's signal in them when it is
    correlated with the other bands); the user guide's page on variance
    partitioning gives its calibration. Under ``"held"`` the identity
    permutation reproduces the observed statistic (the same fits on the
    same targets), so exact enumeration keeps its meaning.

    **Intervals.** The replicates resample runs (the clusters of
    ``groups``), rows keeping their run label and weight. A replicate's
    fold k trains on the copies of fold k's training rows and tests on the
    copies of its test rows; a fold is left out of the replicate's mean
    when no copy of its test rows was drawn or its training rows come from
    fewer than 2 distinct runs, and a draw without a fold left is redrawn.
    A replicate where R^2 is undefined is NaN, which makes the interval
    NaN, as ``np.percentile``. The inner fits
    receive the rows' run labels, so an inner cross-validation over runs
    (``BandedRidge(cv=LeaveOneGroupOut())``) holds out every copy of a run
    together; an inner leave-one-out over rows would not. A share is
    ``unique / f(all)``, the part of the full model's held-out R^2 that
    only band b explains (the shares and the shared regions sum to 1),
    NaN where ``f(all) <= 0``.

    The intervals are basic bootstrap intervals, as
    ``scipy.stats.bootstrap(method="basic")`` defines them: with ``q_lo``
    and ``q_hi`` the ``np.percentile`` of the replicates at ``(1 - c) / 2``
    and ``(1 + c) / 2``, the interval of an estimate ``t`` is ``(2 t -
    q_hi, 2 t - q_lo)``; it can reach past the values the replicates take
    (a share above 1). A replicate's models train on copies of fewer
    distinct runs than the data's, so they explain less: the replicates sit
    below the estimate, and a percentile interval (``(q_lo, q_hi)``)
    inherits that shift, while the basic interval reflects it. They
    include the variability of the searches; the user guide's page on
    variance partitioning gives their measured coverage: with 10 and 20
    runs, that of the unique variance the data set's own models reach on
    new data, at its level, and 84-87% of the population's value (a
    nominal 90%). With fewer than ``MIN_CALIBRATED_RUNS`` (10) runs a
    UserWarning says so: the interval comes out too narrow, as every
    scorable replicate draws most of the runs (with 3 runs and
    leave-one-run-out, every scorable replicate is the data itself).

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

    A subset's score is the R^2 of its held-out predictions over the test
    rows of all folds together (``average="rows"``), as scikit-learn's
    ``cross_val_predict`` assembles them; the full model's:

    >>> from sklearn.metrics import r2_score
    >>> from sklearn.model_selection import cross_val_predict
    >>> full = BandedRidge(bands=bands, band_weights=5, alphas=np.logspace(-2, 3, 6))
    >>> held_out = cross_val_predict(
    ...     full, X, Y, cv=LeaveOneGroupOut(), groups=runs, params={"groups": runs}
    ... )
    >>> r2 = r2_score(Y, held_out, multioutput="raw_values")
    >>> bool(np.allclose(result.scores[-1], r2))
    True

    P-values and intervals of the unique variance (band rows rotated
    within runs; whole runs resampled). Four runs are too few for intervals
    that keep their level, and a warning says so:

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     result = variance_partitioning(
    ...         X, Y[:, :2], bands=bands, estimator=model, groups=runs,
    ...         n_permutations=4, n_bootstrap=3,
    ...     )
    >>> any("with 4 runs" in str(w.message) for w in caught)
    True
    >>> result.pvalue.shape                        # bands x targets
    (2, 2)
    >>> float(result.pvalue[0, 0]), float(result.pvalue[1, 1])  # the least of 5
    (0.2, 0.2)
    >>> result.unique_ci.shape                     # (lower, upper) x bands x targets
    (2, 2, 2)

    The same replicates with each model at its choices on the data's folds
    (no search in a replicate):

    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     held = variance_partitioning(
    ...         X, Y[:, :2], bands=bands, estimator=model, groups=runs,
    ...         n_bootstrap=3, bootstrap_hyperparameters="held",
    ...     )
    >>> held.unique_ci.shape
    (2, 2, 2)
    >>> bool(np.allclose(held.unique, result.unique))
    True
    """
    estimator = BandedRidge() if estimator is None else estimator
    if not isinstance(estimator, BandedRidge):
        raise TypeError(
            f"estimator must be a BandedRidge (or None for BandedRidge()), got "
            f"{type(estimator).__name__}: {estimator!r}"
        )
    n_permutations = _check_count(n_permutations, "n_permutations", 1)
    n_bootstrap = _check_count(n_bootstrap, "n_bootstrap", 2)
    bootstrap_hyperparameters = check_bootstrap_hyperparameters(
        bootstrap_hyperparameters
    )
    null_hyperparameters = _check_null(
        null, null_hyperparameters, permutation_type, block_size
    )
    check_alternative(alternative)
    if not (
        isinstance(confidence_level, numbers.Real)
        and not isinstance(confidence_level, bool)
        and 0 < confidence_level < 1
    ):
        raise ValueError(
            f"confidence_level must be a float in the open interval (0, 1), got "
            f"{confidence_level!r}"
        )
    if average not in AVERAGES:
        raise ValueError(
            f"average must be one of {AVERAGES}, got {average!r}: 'rows' scores "
            f"the test rows of all folds together, 'folds' averages the folds' "
            f"scores"
        )
    entropy = resolve_entropy(random_state)
    check_n_jobs(n_jobs)
    check_max_memory_gb(max_memory_gb)
    check_verbose(verbose)
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
    weights = check_band_weights(estimator.band_weights, len(columns))
    groups = check_groups(groups, n_samples)
    if sample_weight is not None:
        sample_weight = _check_weights(sample_weight, n_samples)
    splits = _outer_splits(cv, X, Y, groups)
    # "folds" scores each fold on its own test rows, which must weigh.
    check_fold_weights(splits, sample_weight, scored_per_fold=average == "folds")
    if n_bootstrap:
        check_replicable(splits, groups, n_samples)
        _warn_few_runs(groups)
    permutation = dict(permutation_type=permutation_type, block_size=block_size)
    n_items, permutation["exact"] = _permutation_count(
        n_permutations, n_samples, groups, permutation
    )
    models = [
        clone(estimator).set_params(
            bands=_positions(columns, subset),
            band_weights=_restricted(weights, subset, names),
        )
        for subset in _subsets(n_bands)
    ]
    keeps = [
        np.sort(np.concatenate([columns[b] for b in subset]))
        for subset in _subsets(n_bands)
    ]
    # What a held bootstrap replicate holds while it is computed (each worker
    # computes one at a time).
    replicate_bytes = (
        held_bootstrap_bytes(
            X.shape, Y.shape[1], splits, groups, n_candidates(weights, n_bands)
        )
        if n_bootstrap and bootstrap_hyperparameters == "held"
        else 0.0
    )
    _check_memory(
        X,
        Y,
        n_bands,
        n_items,
        n_bootstrap,
        confidence_level,
        alternative,
        n_jobs,
        max_memory_gb,
        average,
        (
            0.0
            if null == "band_rows" or not n_items
            else null_bytes(
                X,
                Y.shape[1],
                splits,
                n_candidates(weights, n_bands),
                null_hyperparameters,
                joblib.effective_n_jobs(n_jobs),
            )
        )
        + joblib.effective_n_jobs(n_jobs) * replicate_bytes,
    )
    # The full model's held-out residuals, where a resampling treats rows
    # as exchangeable: what says whether they are.
    exchangeable = dict(
        bootstrap=bool(n_bootstrap) and groups is None,
        shuffle=bool(n_permutations)
        and null == "band_rows"
        and permutation_type == "shuffle",
        residual_rows=bool(n_permutations)
        and null == "freedman_lane"
        and (
            permutation_type == "shuffle"
            or (permutation_type == SIGN_FLIP and groups is None)
        ),
        residual_fwer=bool(n_permutations)
        and null == "freedman_lane"
        and Y.shape[1] > 1,
    )
    residuals = np.full(Y.shape, np.nan) if any(exchangeable.values()) else None
    # Each fold's choices of the full and leave-one-band-out models, which
    # the held Freedman–Lane null and the held bootstrap keep.
    held = (n_items and null_hyperparameters == "held") or (
        n_bootstrap and bootstrap_hyperparameters == "held"
    )
    chosen = [[] for _ in models] if held else [None for _ in models]
    scores = np.stack(
        [
            held_out_scores(
                model,
                X,
                Y,
                splits,
                sample_weight=sample_weight,
                groups=groups,
                columns=keep,
                residuals=residuals if model is models[-1] else None,
                average=average,
                chosen=choices,
            )
            for model, keep, choices in zip(models, keeps, chosen)
        ]
    )
    if residuals is not None:
        _warn_exchangeable_rows(residuals, X, columns, names, groups, **exchangeable)
    unique = unique_variance(scores, n_bands)
    inference = dict(share=band_shares(unique, scores[-1]))
    data = dict(
        X=X,
        Y=Y,
        splits=splits,
        sample_weight=sample_weight,
        groups=groups,
        entropy=entropy,
        average=average,
        quiet=_QUIET,
    )
    run = dict(n_jobs=n_jobs, max_memory_gb=max_memory_gb, verbose=verbose)
    if n_items:
        nulls = (
            functools.partial(
                _band_rows_nulls, models[-1], columns, scores[-1] - unique, data
            )
            if null == "band_rows"
            else functools.partial(
                _freedman_lane_nulls,
                models,
                keeps,
                chosen,
                null_hyperparameters,
                unique,
                data,
                {},
            )
        )
        inference.update(
            _permutation_test(nulls, unique, permutation, n_items, alternative, run),
            n_permutations=n_items,
            exact=permutation["exact"],
        )
    if n_bootstrap:
        inference.update(
            _bootstrap(
                models,
                keeps,
                np.stack([unique, inference["share"]]),
                data,
                n_bootstrap,
                confidence_level,
                run,
                chosen if bootstrap_hyperparameters == "held" else None,
                replicate_bytes,
            ),
            n_bootstrap=n_bootstrap,
        )
    return VariancePartition(
        subsets=[tuple(names[b].item() for b in s) for s in _subsets(n_bands)],
        scores=scores,
        regions=venn_regions(scores, n_bands),
        unique=unique,
        band_names=names,
        **inference,
    )


def _warn_few_runs(groups):
    """Warn where the bootstrap intervals are known to be too narrow."""
    n_runs = 0 if groups is None else np.unique(groups).size
    if groups is not None and n_runs < MIN_CALIBRATED_RUNS:
        warnings.warn(
            f"n_bootstrap with {n_runs} runs (groups): the bootstrap intervals "
            f"are too narrow with fewer than {MIN_CALIBRATED_RUNS} runs "
            f"({FEW_RUNS_COVERAGE}; benchmarks/calibration_partitioning.py). "
            f"Read them as a lower bound on the uncertainty, or give more runs.",
            UserWarning,
            stacklevel=3,
        )


def _warn_exchangeable_rows(
    residuals,
    X,
    columns,
    names,
    groups,
    *,
    bootstrap,
    shuffle,
    residual_rows,
    residual_fwer,
):
    """Warn where a resampling treats autocorrelated rows as exchangeable.

    The rule is the estimators'
    (:func:`skbatch._kernels.timeseries.autocorrelation_warning`), on the full
    model's held-out residuals (``residuals``, NaN on rows no fold tests),
    within the runs of ``groups``. Rows drawn independently (``bootstrap``,
    no groups) need residuals without autocorrelation; rows of band b
    shuffled (``shuffle``) need either band b's columns or the residuals
    without it; residuals shuffled or sign-flipped row by row
    (``residual_rows``, Freedman–Lane) need residuals without it, and the
    max statistic of Freedman–Lane nulls (``residual_fwer``) was too liberal
    with autocorrelated residuals in the calibration.
    """
    tested = ~np.isnan(residuals).any(axis=1)
    runs = None if groups is None else groups[tested]
    found = autocorrelation_warning(residuals[tested], runs)
    if found is None or found[0] <= found[1]:
        return
    median, threshold, n_series = found
    if bootstrap:
        warnings.warn(
            f"n_bootstrap without groups resamples rows independently, but the "
            f"full model's held-out residuals are autocorrelated (median lag-1 "
            f"autocorrelation {median:.2f} over {n_series} target(s), above "
            f"{threshold:.2f}): the intervals are then too narrow. Pass the "
            f"runs as groups to resample whole runs.",
            AutocorrelationWarning,
            stacklevel=3,
        )
    if residual_rows:
        warnings.warn(
            f"null='freedman_lane' shuffles or sign-flips the residuals row by "
            f"row, as exchangeable rows, but the full model's held-out residuals "
            f"are autocorrelated (median lag-1 autocorrelation {median:.2f} "
            f"over {n_series} target(s), above {threshold:.2f}): the p-values "
            f"are then too small. Use permutation_type='circular_shift' or "
            f"'block_shuffle' within runs, or sign flips of whole runs (groups).",
            AutocorrelationWarning,
            stacklevel=3,
        )
    if residual_fwer:
        warnings.warn(
            f"null='freedman_lane' with autocorrelated residuals (median lag-1 "
            f"autocorrelation {median:.2f} over {n_series} target(s), above "
            f"{threshold:.2f}): its family-wise p-values (pvalue_fwer) were too "
            f"small in the calibration ({FREEDMAN_LANE_FWER}; "
            f"benchmarks/calibration_partitioning.py), its per-target pvalue "
            f"within its level. For a family-wise error held at its level, use "
            f"null='band_rows'.",
            AutocorrelationWarning,
            stacklevel=3,
        )
    if not shuffle:
        return
    for name, band in zip(names, columns):
        own = autocorrelation_warning(X[np.ix_(tested, band)], runs)
        if own is not None and own[0] > own[1]:
            warnings.warn(
                f"permutation_type='shuffle' permutes rows as exchangeable, but "
                f"band {name.item()!r}'s columns and the full model's held-out "
                f"residuals are both autocorrelated (median lag-1 "
                f"autocorrelation {own[0]:.2f} and {median:.2f}, above "
                f"{threshold:.2f}): its p-values are then too small. Use "
                f"permutation_type='circular_shift' or 'block_shuffle', with "
                f"the runs as groups.",
                AutocorrelationWarning,
                stacklevel=3,
            )


def _check_count(value, name, smallest):
    """An int that is 0 (nothing asked) or at least ``smallest``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or (value != 0 and value < smallest)
    ):
        raise ValueError(
            f"{name} must be 0 (none) or an int >= {smallest}, got {value!r}"
        )
    return int(value)


def _check_null(null, hyperparameters, permutation_type, block_size):
    """The hyperparameter treatment of ``null``, checked with its scheme:
    "searched" for the band-row null (its refits search), "held" by default
    under Freedman–Lane; sign flips only permute residuals."""
    if not isinstance(null, str) or null not in NULLS:
        raise ValueError(
            f"null must be one of {NULLS}, got {null!r}: 'band_rows' permutes "
            f"band b's rows, 'freedman_lane' the residuals of the model without "
            f"band b"
        )
    if hyperparameters is not None and (
        not isinstance(hyperparameters, str) or hyperparameters not in HYPERPARAMETERS
    ):
        raise ValueError(
            f"null_hyperparameters must be None or one of {HYPERPARAMETERS}, got "
            f"{hyperparameters!r}"
        )
    if null == "band_rows":
        if hyperparameters == "held":
            raise ValueError(
                "null_hyperparameters='held' needs null='freedman_lane': the "
                "band-row null changes the design, and its refits search their "
                "hyperparameters ('searched', the default with 'band_rows')"
            )
        if permutation_type == SIGN_FLIP:
            raise ValueError(
                f"permutation_type={SIGN_FLIP!r} needs null='freedman_lane' "
                f"(it flips the signs of residuals), got null='band_rows', which "
                f"permutes band b's rows: use 'circular_shift', 'block_shuffle' "
                f"or 'shuffle'"
            )
        _check_permutation_type(permutation_type, block_size)
        return "searched"
    check_resampling_type(permutation_type, block_size)
    return "held" if hyperparameters is None else hyperparameters


def _permutation_count(n_permutations, n_samples, groups, permutation):
    """``(n_items, exact)``: every distinct permutation of the scheme when
    there are at most ``n_permutations`` (each once), else that many draws.
    Checks the scheme against the groups (a block longer than a run)."""
    if not n_permutations:
        return 0, False
    signed_rows(0, [0], n_samples, groups, **permutation)
    n_distinct = count_resamples(n_samples, groups, **permutation, limit=n_permutations)
    if n_distinct is None:
        return n_permutations, False
    return n_distinct, True


def _check_memory(
    X,
    Y,
    n_bands,
    n_items,
    n_bootstrap,
    confidence_level,
    alternative,
    n_jobs,
    max_memory_gb,
    average,
    extra_bytes=0.0,
):
    """Refuse, before any fit, summaries and refits that exceed the host
    budget: each worker refits on its own permuted or resampled copy of the
    data, and with ``average="rows"`` holds the held-out predictions and
    targets of every row beside each fold's fit; a Freedman–Lane null holds
    ``extra_bytes`` besides (:func:`skbatch._ridge.freedman_lane.null_bytes`)."""
    n_targets = Y.shape[1]
    summaries = extra_bytes
    if n_items:
        summaries += 8 * n_items + n_bands * PermutationCounter.nbytes_needed(
            n_targets, n_items, alternative=alternative
        )
    if n_bootstrap:
        summaries += 8 * n_bootstrap + BootstrapAccumulator.nbytes_needed(
            (2, n_bands, n_targets), n_bootstrap, confidence_level
        )
    if not (n_items or n_bootstrap):
        return
    data = DataBytes.of(X, Y, X, Y, {})
    if average == "rows":
        data = data._replace(fit=data.fit + HELD_OUT_COPIES * 8.0 * Y.size)
    refit_window(
        max_memory_gb,
        n_jobs,
        data,
        summaries,
        X.shape[0],
        2 * n_bands * n_targets,
        functools.partial(
            refuse,
            "variance_partitioning",
            max_memory_gb,
            "Lower n_jobs, n_bootstrap or n_permutations, use fewer targets, or "
            "raise max_memory_gb.",
        ),
    )


def _band_rows_nulls(full, columns, reduced, data, b, permutation):
    """``(task, statistic, bytes per item)`` of band b's rows permuted, the
    full model refit; ``f(all but b)`` (``reduced[b]``) is the same under
    every permutation."""
    task = functools.partial(
        band_null_scores,
        model=full,
        columns=columns[b],
        permutation=permutation,
        **data,
    )
    return task, lambda null, ids: null - reduced[b], 8.0 * reduced.shape[1]


def _freedman_lane_nulls(
    models, keeps, chosen, hyperparameters, unique, data, cache, b, permutation
):
    """``(task, statistic, bytes per item)`` of band b's Freedman–Lane null:
    the full model and the model without b on the reduced model's permuted
    residuals (the full model's decompositions kept in ``cache`` for the
    next band). The identity (item 0 of an exact enumeration) gives back the
    data, ``y* = y``: its statistic is the observed one, not its round-off,
    so that it counts itself and no p-value falls below ``1 / n``."""
    n_bands = len(models[-1].bands)
    every = _subsets(n_bands)
    rest = tuple(c for c in range(n_bands) if c != b)
    at = every.index(rest) if rest else None
    task = band_null_task(
        full=models[-1],
        reduced=None if at is None else models[at],
        reduced_columns=None if at is None else keeps[at],
        chosen=(chosen[-1], None if at is None else chosen[at]),
        hyperparameters=hyperparameters,
        permutation=permutation,
        cache=cache,
        **data,
    )

    def statistic(null, ids):
        if permutation["exact"]:
            null[np.asarray(ids) == 0] = unique[b]
        return null

    return task, statistic, task_bytes(task, data["Y"].shape[1])


def _permutation_test(nulls, unique, permutation, n_items, alternative, run):
    """P-values of each band's unique variance under the null tasks of
    ``nulls(b, permutation)``: ``(task, statistic, bytes per item)``, the
    unique variance of a batch of permutations being
    ``statistic(task(ids), ids)``."""
    n_bands = unique.shape[0]
    # Ties within the round-off of the refits count, as PermutationScorer
    # counts them for R^2.
    tolerance = TIE_ULPS * np.finfo(np.float64).eps * np.maximum(np.abs(unique), 1.0)
    fields = {
        name: np.empty_like(unique)
        for name in ("pvalue", "pvalue_fwer", "pvalue_fdr", "null_mean")
    }
    for b in range(n_bands):
        counter = PermutationCounter(
            unique[b],
            n_total=n_items,
            tolerance=np.nan_to_num(tolerance[b]),
            exact=permutation["exact"],
            alternative=alternative,
        )
        task, statistic, item_bytes = nulls(b, permutation)
        run_parallel(
            task,
            lambda ids, null, counter=counter, statistic=statistic: counter.update(
                statistic(null, ids), ids
            ),
            n_items=n_items,
            host_bytes_per_item=item_bytes,
            desc=f"permutations of band {b}",
            **run,
        )
        fields["pvalue"][b] = counter.pvalue()
        fields["pvalue_fwer"][b] = counter.pvalue_fwer()
        fields["pvalue_fdr"][b] = counter.pvalue_fdr()
        fields["null_mean"][b] = counter.null_mean
    return fields


def _bootstrap(
    models,
    keeps,
    estimate,
    data,
    n_bootstrap,
    confidence_level,
    run,
    chosen=None,
    replicate_bytes=0.0,
):
    """Basic intervals of the unique variance and of the shares (``estimate``,
    of shape (2, n_bands, n_targets)) over cluster-bootstrap replicates; with
    ``chosen`` (every model's choices on every fold of the data, models in
    the order of ``models``), each replicate's models keep them, a replicate
    holding ``replicate_bytes`` while it is computed."""
    n_bands = estimate.shape[1]
    every = _subsets(n_bands)
    everything = tuple(range(n_bands))
    reduced, columns, choices = [], [], [None if chosen is None else chosen[-1]]
    for b in range(n_bands):
        rest = tuple(c for c in everything if c != b)
        if rest:
            reduced.append(models[every.index(rest)])
            columns.append(keeps[every.index(rest)])
            choices.append(None if chosen is None else chosen[every.index(rest)])
        else:
            reduced.append(None)
            columns.append(None)
            choices.append(None)
    n_targets = data["Y"].shape[1]
    accumulator = BootstrapAccumulator(
        (2, n_bands, n_targets), n_bootstrap, confidence_level
    )
    task = functools.partial(
        bootstrap_statistics if chosen is None else held_bootstrap_statistics,
        full=models[-1],
        reduced=reduced,
        columns=columns,
        n_items=n_bootstrap,
        **({} if chosen is None else dict(chosen=choices)),
        **data,
    )
    run_parallel(
        task,
        lambda ids, values: accumulator.update(values, ids),
        n_items=n_bootstrap,
        host_bytes_per_item=8 * 2 * n_bands * n_targets + replicate_bytes,
        desc="bootstrap replicates",
        **run,
    )
    lower, upper = accumulator.interval(method="basic", estimate=estimate)
    undefined = np.isnan(lower[0]) | np.isnan(upper[0])
    if undefined.any():
        warnings.warn(
            f"The bootstrap interval of the unique variance is undefined (NaN) "
            f"for {int(undefined.sum())} of {undefined.size} (band, target) "
            f"pairs: R^2 was undefined in a replicate (a test fold of fewer "
            f"than 2 rows, or a constant target).",
            UserWarning,
            stacklevel=3,
        )
    return dict(
        unique_ci=np.stack([lower[0], upper[0]]),
        share_ci=np.stack([lower[1], upper[1]]),
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
