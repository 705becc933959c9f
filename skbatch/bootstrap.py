"""BootstrapEstimator: bootstrap standard errors and confidence intervals.

A replicate refits the wrapped estimator on rows drawn with replacement (on
whole groups, for a cluster bootstrap, or on blocks of consecutive rows, for
a moving-block bootstrap) and reads some of its fitted attributes.
Replicate ``i`` draws its rows, in order, from its own seed stream
(:func:`skbatch.random.bootstrap_rows`), so the result depends on
``random_state`` only, never on batch sizes, OOM splits or workers.

Two paths compute the replicates:

- linear models (:class:`~skbatch.BatchedRidge`, sklearn ``Ridge`` and
  ``LinearRegression``, :class:`~skbatch.BandedRidge` at its chosen band
  weights and alphas) take a batched device path: a resample is the count
  of each row (:func:`skbatch.random.bootstrap_counts`) as its weight, and
  a batch of replicates is a batch of weighted Gram matrices and one
  (batch x n_features, n_samples) @ (n_samples, n_targets) product, with
  no copy of the targets per replicate;
- any other estimator is refit on the resampled rows in the order drawn
  (whole blocks of consecutive rows, whole clusters), in joblib windows.

Either way replicates stream into one
:class:`~skbatch.streaming.BootstrapAccumulator` per attribute, so memory
does not grow with ``n_bootstrap`` unless the samples are asked for.
"""

import contextlib
import functools
import math
import numbers
import operator
import warnings
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
from scipy import linalg, sparse
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.linear_model import Ridge, RidgeCV

# Private to scikit-learn, without a public twin: the refits slice X, y and
# the fit parameters as its own cross-validation does (DataFrames by
# position, only the per-sample parameters), and sample_weight is checked as
# Ridge checks it; tests/test_private_names.py checks what is relied on here.
from sklearn.utils import _safe_indexing, get_tags
from sklearn.utils.validation import _check_method_params, _check_sample_weight

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
from ._preflight import (
    DataBytes,
    batched_budget,
    bca_summary_bytes,
    check_jackknife,
    gb_up,
    linear_jackknife_bytes,
    refit_window,
    refuse,
)
from ._ridge import problems as _problems
from ._ridge.banded_bootstrap import (
    BandedBootstrapProblem,
    HeldBands,
    banded_bootstrap_nbytes,
)
from ._ridge.problems import (
    BootstrapRidgeProblem,
    bootstrap_flops_per_replicate,
    check_replicate_weights,
)
from ._ridge.spec import check_column_scales, refit_reason, resolve_dtype, ridge_spec
from ._rules import check_alternative
from ._timeseries import (
    autocorrelation_warning,
    min_rows_for_block_length,
    optimal_block_length,
)
from .backend import resolve_backend, to_numpy
from .banded import BandedRidge, held_banded_ridge
from .exceptions import DegenerateDataWarning
from .memory import GB, memory_budget
from .random import (
    DEFAULT_RANDOM_STATE,
    bootstrap_counts,
    bootstrap_rows,
    check_block_scheme,
    resolve_entropy,
)
from .ridge import AlphaEdgeWarning, AutocorrelationWarning, BatchedRidge
from .streaming import (
    BCaAccumulator,
    BootstrapAccumulator,
    bca_acceleration,
    describe_nan,
)

__all__ = ["BootstrapEstimator", "BootstrapResult"]

_CI_METHODS = ("percentile", "basic", "bca")
# BCa keeps every replicate, in one pass, when they take at most this share
# of the host budget; otherwise it runs the replicates twice (see ci_method).
BCA_KEEP_SAMPLES_SHARE = 0.5
# The closed-form jackknife of the linear path needs the leave-one-out fits
# well defined: every unit's leverage gap 1 - h_i above this, and the
# penalised Gram matrix's condition number below BCA_MAX_CONDITION (a loss
# of at most 6 of float64's 16 digits); otherwise it refits.
BCA_MIN_LEVERAGE_GAP = 1e-8
BCA_MAX_CONDITION = 1e10
# The attributes the batched linear path computes.
_LINEAR_ATTRIBUTES = ("coef_", "intercept_")
# What attributes="auto" bootstraps of a model without coef_ (trees, forests,
# boosting): the one per-feature summary such models have.
_IMPORTANCES = "feature_importances_"
# results_ key of a callable ``attributes`` that returns a single array.
STATISTIC_KEY = "statistic"
# Attributes that only exist through hyperparameter tuning: with tuning held
# fixed across replicates they would be constant (or absent from the frozen
# estimator), so asking for them needs tune_per_replicate=True.
_TUNED_ATTRIBUTES = (
    "alpha_",
    "band_weights_",
    "band_alphas_",
    "best_score_",
    "cv_results_",
    "best_params_",
    "best_index_",
)
# Largest n_bootstrap: replicate ids are int64 (the engine's np.arange and the
# accumulators' percentile arithmetic).
MAX_N_BOOTSTRAP = np.iinfo(np.int64).max
# Before batches side by side (SIDE_BY_SIDE_MIN_FLOPS), the fit on all data
# runs on one BLAS thread when it costs at most this many flops (one
# replicate's, about 0.1 s of one core): after a parallel call, OpenBLAS's
# helper threads spin for about 0.1 s before they sleep, and took a core
# from the batches that follow (10-15% of a 0.65 s fit,
# benchmarks/RESULTS.md).
FULL_FIT_ONE_THREAD_MAX_FLOPS = 5e9


class BootstrapResult(NamedTuple):
    """Bootstrap summary of one fitted attribute.

    Attributes
    ----------
    estimate : ndarray
        The attribute of ``estimator_``, fit on all data.
    standard_error : ndarray
        Standard deviation (ddof=1) of the replicates.
    ci_lower, ci_upper : ndarray
        Confidence interval bounds; ``ci_lower`` is -inf for
        ``alternative="less"``, ``ci_upper`` inf for ``"greater"``.
    samples : ndarray of shape (n_bootstrap, *estimate.shape) or None
        Every replicate, with ``return_samples=True``; None otherwise.
    """

    estimate: np.ndarray
    standard_error: np.ndarray
    ci_lower: np.ndarray
    ci_upper: np.ndarray
    samples: np.ndarray | None


class BootstrapEstimator(WrapperMixin, RegressorMixin, BaseEstimator):
    """Bootstrap standard errors and confidence intervals of a fitted model.

    Fits ``estimator`` on all data (``estimator_``), then refits it on
    ``n_bootstrap`` resamples of the rows drawn with replacement, of whole
    groups when ``groups`` is given (cluster bootstrap), or of blocks of
    consecutive rows with ``block_size`` (moving-block bootstrap, for time
    series), and summarises the replicates of the chosen fitted attributes in
    ``results_``.

    Linear models (:class:`~skbatch.BatchedRidge`,
    :class:`~sklearn.linear_model.Ridge`,
    :class:`~sklearn.linear_model.LinearRegression`,
    :class:`~sklearn.linear_model.RidgeCV` once tuned, and
    :class:`~skbatch.BandedRidge` at its chosen band weights and alphas)
    with attributes ``coef_`` / ``intercept_`` take a batched path on
    ``device``: each resample is a vector of integer weights and a batch of
    replicates costs one matrix product with the targets (for a
    ``BandedRidge``, one per chosen candidate). Every other estimator is refit on
    the resampled rows through joblib (``n_jobs``); wrapping ``fit`` in
    ``joblib.parallel_config`` chooses the joblib backend (dask, ray...).
    Both paths draw identical resamples.

    Parameters
    ----------
    estimator : estimator object, default=None
        The model to bootstrap. None means ``BatchedRidge(alphas=1.0)``.
    n_bootstrap : int, default=1000
        Number of bootstrap replicates, >= 2.
    confidence_level : float, default=0.95
        Coverage of the intervals, in the open interval (0, 1).
    ci_method : {"percentile", "basic", "bca"}, default="percentile"
        "percentile": the ``(1 - c) / 2`` and ``(1 + c) / 2`` percentiles of
        the replicates (``np.percentile``, linear interpolation). "basic":
        the percentile interval reflected around the estimate,
        ``(2 * estimate - upper, 2 * estimate - lower)``. "bca": bias
        corrected and accelerated, as ``scipy.stats.bootstrap(method="BCa")``
        defines it: per element, ``z0 = ndtri(share of replicates below the
        estimate, ties counted half)`` and the acceleration ``a = sum d^3 /
        (6 (sum d^2)^(3/2))`` of the jackknife deviations ``d_i`` (mean of
        the leave-one-out estimates minus the i-th; with ``groups``, leave
        one group out); the bounds are the replicates' percentiles (linear
        interpolation) at ``ndtr(z0 + (z0 + z) / (1 - a (z0 + z)))`` for
        ``z = ndtri((1 -+ c) / 2)``. NaN where z0 or ``a`` is undefined
        (every replicate on one side of the estimate, or no spread in the
        jackknife), as scipy's. A constant bootstrap distribution (a
        constant target, a band of weight 0) is such a case: its exact
        interval would be ``[c, c]``, which "percentile" and "basic" give,
        but BCa gives NaN there, as scipy's does, so that the numbers
        compare across libraries. Not with ``block_size``.

        Any NaN bound or standard error (those of BCa above, or of a
        replicate whose fit gave NaN, with any method) comes with one
        :class:`~skbatch.DegenerateDataWarning` per fit, as scipy's
        ``bootstrap`` warns its own: it names each attribute, how many of
        its elements are NaN, and why.

        Cost: the jackknife is a few matrix products on the linear path
        (closed-form leave-one-out updates of the fit on all data, for
        ridge and least squares at fixed alphas, ``n_features + 1 <
        n_samples``), otherwise ``n_samples`` refits (or one per group) on
        the joblib path. The levels are known per element only once every
        replicate is in: when every replicate fits in half the host budget
        (or ``return_samples=True``) they are kept and read once; otherwise
        the replicates are computed twice from their seeds (about twice the
        time of "percentile"), the first pass keeping ``64 + n_bootstrap /
        4`` values per element and the second about ``2 (3 n_bootstrap / 32
        + 44)`` (:mod:`skbatch.streaming`'s ``BCA_FOLD``, ``BCA_SPACING``):
        for ``n_bootstrap=1000``, about a third of the replicates' memory,
        against an eighth for "percentile".
    alternative : {"two-sided", "less", "greater"}, default="two-sided"
        The interval, as ``scipy.stats.bootstrap(alternative=...)`` defines
        it: "two-sided" as above; "less" gives ``(-inf, upper]`` and
        "greater" ``[lower, inf)``, one-sided intervals of coverage
        ``confidence_level`` whose finite bound is that of a two-sided
        interval at level ``2 * confidence_level - 1`` (alpha not halved):
        for "percentile", the ``confidence_level`` percentile of the
        replicates ("less") or the ``1 - confidence_level`` one
        ("greater"); "basic" reflects the other one, ``2 * estimate -``
        the ``1 - confidence_level`` percentile ("less") or the
        ``confidence_level`` one ("greater"); "bca" reads the level of
        that bound with ``z = ndtri(1 - confidence_level)``. The
        replicates' tails are kept on the side of the finite bound only,
        ``ceil((n_bootstrap - 1) (1 - confidence_level)) + 1`` values per
        element (51 for ``n_bootstrap=1000`` at 0.95).
    attributes : "auto", str, sequence of str or callable, default="auto"
        What to bootstrap. "auto": if the fitted estimator has ``coef_``,
        ``coef_`` and ``intercept_`` (those it has); else
        ``feature_importances_`` if it has that (forests, gradient boosting);
        else an error. A name or names of fitted attributes; a dotted name
        reads an attribute of an attribute as :func:`operator.attrgetter`
        does (scikit-learn's convention for ``SelectFromModel``'s
        ``importance_getter``), so ``"named_steps.ridge.coef_"`` bootstraps
        the coefficients of a pipeline's ``ridge`` step (refit, as any
        pipeline, on the generic path). ``results_`` keys are the names as
        given; a name the fit on all data lacks is refused before any
        replicate. A callable taking a fitted estimator and returning an
        array (stored under ``results_["statistic"]``) or a dict of name to
        array. Attributes are read from the fitted estimator, or from its
        ``best_estimator_`` when it is a hyperparameter search such as
        :class:`~sklearn.model_selection.GridSearchCV`.
    return_samples : bool, default=False
        Keep every replicate in ``results_[name].samples``. Memory then grows
        with ``n_bootstrap``.
    block_size : int >= 1, "auto" or None, default=None
        None resamples rows (or groups) independently, which is valid only
        when rows are independent; fit warns when the residuals of the fit
        on all data are clearly autocorrelated (see Notes). With
        autocorrelated rows (time series, fMRI runs) the iid bootstrap
        understates the variability: an int gives a block bootstrap of
        ``block_size`` consecutive rows (the mean length, for
        ``block_scheme="stationary"``), drawn as ``block_scheme`` says (see
        :func:`skbatch.random.bootstrap_counts`). With ``groups``, a block
        never crosses a group boundary (each group a run), and must fit in
        the smallest group.

        "auto" chooses it by Politis and White's (2004) rule with Patton,
        Politis and White's (2009) correction, as
        ``arch.bootstrap.optimal_block_length`` computes it (its ``b_sb``
        for "stationary", ``b_cb`` for "circular" and "moving", whose
        optimal lengths are the same), applied to the residuals ``y -
        estimator_.predict(X)`` of each target: on each group separately
        (each at least 11 rows), averaged over the groups weighted by their
        lengths; then the median over targets (constant targets left out),
        rounded up, at least 1 and at most the smallest group. The value
        used is ``block_size_``. The rule costs about ``2 (sqrt(n) + 5)``
        passes over the residuals.

        Choosing it: a block should span the lag beyond which rows are
        nearly independent, that is where the autocorrelation of the
        residuals falls below about 0.1 (``log(0.1) / log(phi)`` lags for an
        AR(1) with coefficient ``phi``: 22 for ``phi = 0.9``), and leave at
        least 20 blocks, ``block_size <= n_samples / 20``; take the smaller
        of the two. With 400 rows of AR(1) data with ``phi = 0.9`` this
        gives 20, and 95% intervals then cover 88% of the time, where the
        iid bootstrap covers 47% (1000 simulated series,
        ``benchmarks/calibration.py``). Longer
        blocks keep more of the dependence but leave too few blocks to vary.
    block_scheme : {"moving", "circular", "stationary"}, default="moving"
        How a block bootstrap draws its blocks (needs ``block_size``), as
        arch's ``MovingBlockBootstrap``, ``CircularBlockBootstrap`` and
        ``StationaryBootstrap`` define them, with blocks kept inside groups:

        - "moving": ``round(n_samples / block_size)`` blocks of
          ``block_size`` rows, with starts drawn among all positions that
          leave a whole block inside the group (rows near a group's ends
          are drawn less often);
        - "circular": each group of ``m`` rows is rebuilt from ``ceil(m /
          block_size)`` blocks starting anywhere in it and wrapping around
          its end, the last one cut so that the group keeps ``m`` rows;
        - "stationary" (Politis and Romano): as "circular", with block
          lengths drawn from a geometric law of mean ``block_size``.

        Every scheme takes the batched linear path.
    tune_per_replicate : bool, default=False
        Hyperparameters chosen by cross-validation are tuned once, on all
        data, and held fixed across replicates (False), or tuned again in
        each replicate (True). Held fixed: a ``BatchedRidge`` with several
        alphas refits with its chosen ``alpha_`` per target; a ``RidgeCV``
        as ``Ridge(alpha=alpha_)``; a ``BandedRidge`` at each target's
        ``band_weights_`` and ``alpha_``, that is ``Ridge(alpha=alpha_)`` on
        the columns of each band ``b`` scaled by ``sqrt(band_weights_[b])``
        (bands of weight 0 left out, their coefficients 0), coefficients
        scaled back (on the batched path, the targets that chose one
        candidate solved together); a ``GridSearchCV`` or
        ``RandomizedSearchCV`` as its ``best_estimator_`` (the best
        parameters). Other self-tuning estimators (``LassoCV``...) re-tune
        in every replicate either way.
    random_state : int, RandomState instance or None, default=0
        Seeds the resamples. The same value gives the same replicates for
        any batch size, memory budget, ``n_jobs`` or joblib backend. The
        default, :data:`skbatch.random.DEFAULT_RANDOM_STATE` (0), the one
        default of every skbatch estimator, makes a rerun give the same
        intervals; None draws fresh resamples every fit.
    n_jobs : int or None, default=None
        Workers of the generic (joblib) path; the batched linear path uses
        the BLAS threads instead.
    device : str or Backend, default="auto"
        Where the batched linear path computes; see
        :func:`skbatch.resolve_backend`.
    max_memory_gb : float or None, default=None
        Memory budget in GB, for the replicates kept on the host and for
        the device batches; None measures free memory.
    verbose : int, default=0
        1: print the plan of each loop before it runs and a summary after it
        (plain lines on stdout), and a progress bar over the replicates on a
        terminal or in a notebook; where no bar shows (a log file), a line of
        progress (done, elapsed, left) at every 10% of a loop estimated to
        take 10 s or more and at least every 30 s; 2: also log the plans,
        every batch and the out-of-memory recoveries on the ``skbatch``
        logger.

    Attributes
    ----------
    estimator_ : estimator object
        Clone of ``estimator`` fit on all data; ``predict`` and ``score``
        delegate to it.
    results_ : dict of str to BootstrapResult
        Per bootstrapped attribute: ``estimate`` (from ``estimator_``),
        ``standard_error``, ``ci_lower``, ``ci_upper`` and ``samples``.
    block_size_ : int or None
        The block size used: ``block_size``, or the value "auto" chose; None
        for the iid (row or cluster) bootstrap.
    backend_ : Backend
        Where the batched path ran (numpy for the generic path with
        ``device="auto"``).
    fit_report_ : FitReport
        How the fit ran: the fit of ``estimator_``'s loops, then the
        replicates' batches (or joblib windows), their size, out-of-memory
        splits, planned peak memory and time.
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen in fit, when X has string column names.

    See Also
    --------
    skbatch.streaming.BootstrapAccumulator : The streaming reducer.

    Notes
    -----
    Before any replicate, fit checks that everything held at the peak of the
    run fits the full memory budget: the summaries it keeps (percentile
    tails of every element, and the samples when asked), the validated data
    and its copies, and one replicate per batch in flight (on the generic
    path, one refit per worker); otherwise it raises ValueError with the
    figures and the knobs to turn. The cap on measured budgets
    (:func:`skbatch.memory_budget` with ``for_batching=True``) bounds the
    batches only. For linear estimators the check comes before anything is
    fit; for others, after the single fit on all data that gives the
    shapes of the attributes (a request that cannot fit even one element
    is refused before it). With ``ci_method="bca"`` the summaries count at
    the peak of both passes and of reading the interval, and on the linear
    path the jackknife after the replicates is checked with them: its
    closed form, and the refits it falls back on when a leave-one-out fit
    is ill-defined.

    An iid bootstrap of rows (neither ``block_size`` nor ``groups``) warns
    when the residuals of ``estimator_`` on the training data are clearly
    autocorrelated: the median over targets of their lag-1 autocorrelation
    above both 0.2 and ``4 / sqrt(n_samples - 1)`` (4 standard errors of
    white noise; :func:`skbatch._timeseries.autocorrelation_warning`). The
    warning says to set ``block_size`` (and ``block_scheme``). A cluster bootstrap
    (``groups`` alone) keeps each group whole, with its dependence, and does
    not warn.

    The linear path solves each replicate's normal equations from its
    weighted Gram matrix (Cholesky, or an eigendecomposition when alphas
    differ per target or are zero); ``LinearRegression`` gets the
    minimum-norm least-squares solution, as with ``lstsq``. With more
    features than samples it works with the n x n kernel instead. It
    computes in the precision of the wrapped estimator: float32 for float32
    ``X`` with scikit-learn's estimators, ``dtype_`` for ``BatchedRidge``
    (float32 on MPS). Forming the Gram matrix squares the condition number
    of X, as ``Ridge``'s own Cholesky solver does. A batch whose Gram (or
    kernel) matrix with alpha is singular to working precision is solved
    instead through an SVD of each replicate's weighted rows, with a
    :class:`~scipy.linalg.LinAlgWarning`, as ``Ridge`` falls back on its SVD
    solver. With alpha 0 and nearly collinear features (condition number of
    X above about 1e7 in float64), the replicates still lose accuracy that
    ``LinearRegression``'s ``lstsq`` keeps.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import Ridge
    >>> from skbatch import BootstrapEstimator
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((100, 3))
    >>> y = X @ [1.0, 0.0, -2.0] + rng.standard_normal(100)
    >>> boot = BootstrapEstimator(Ridge(), n_bootstrap=200, random_state=0)
    >>> boot = boot.fit(X, y)
    >>> sorted(boot.results_)
    ['coef_', 'intercept_']
    >>> coef = boot.results_["coef_"]
    >>> coef.standard_error.shape
    (3,)
    >>> bool(np.all(coef.ci_lower < coef.estimate))
    True
    >>> boot.predict(X[:2]).shape
    (2,)

    A one-sided 95% upper bound for each coefficient of a pipeline's step:

    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> boot = BootstrapEstimator(
    ...     make_pipeline(StandardScaler(), Ridge()),
    ...     attributes="named_steps.ridge.coef_",
    ...     alternative="less",
    ...     n_bootstrap=200,
    ... ).fit(X, y)
    >>> coef = boot.results_["named_steps.ridge.coef_"]
    >>> coef.ci_lower
    array([-inf, -inf, -inf])
    >>> bool(np.all(coef.estimate < coef.ci_upper))
    True
    """

    def __init__(
        self,
        estimator=None,
        *,
        n_bootstrap=1000,
        confidence_level=0.95,
        ci_method="percentile",
        alternative="two-sided",
        attributes="auto",
        return_samples=False,
        block_size=None,
        block_scheme="moving",
        tune_per_replicate=False,
        random_state=DEFAULT_RANDOM_STATE,
        n_jobs=None,
        device="auto",
        max_memory_gb=None,
        verbose=0,
    ):
        self.estimator = estimator
        self.n_bootstrap = n_bootstrap
        self.confidence_level = confidence_level
        self.ci_method = ci_method
        self.alternative = alternative
        self.attributes = attributes
        self.return_samples = return_samples
        self.block_size = block_size
        self.block_scheme = block_scheme
        self.tune_per_replicate = tune_per_replicate
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.device = device
        self.max_memory_gb = max_memory_gb
        self.verbose = verbose

    def _default_estimator(self):
        return BatchedRidge(alphas=1.0)

    def _check_params(self):
        n_bootstrap = self.n_bootstrap
        if (
            isinstance(n_bootstrap, bool)
            or not isinstance(n_bootstrap, numbers.Integral)
            or n_bootstrap < 2
        ):
            raise ValueError(f"n_bootstrap must be an int >= 2, got {n_bootstrap!r}")
        if n_bootstrap > MAX_N_BOOTSTRAP:
            raise ValueError(
                f"n_bootstrap must be at most 2**63 - 1 (replicates are numbered "
                f"by int64), got {n_bootstrap!r}"
            )
        level = self.confidence_level
        if (
            isinstance(level, bool)
            or not isinstance(level, numbers.Real)
            or not 0 < level < 1
        ):
            raise ValueError(
                f"confidence_level must be a float in the open interval (0, 1), "
                f"got {level!r}"
            )
        if self.ci_method not in _CI_METHODS:
            raise ValueError(
                f"ci_method must be one of {_CI_METHODS}, got {self.ci_method!r}"
            )
        check_alternative(self.alternative)
        _check_attributes_param(self.attributes)
        block_size = self.block_size
        if not (isinstance(block_size, str) and block_size == "auto") and (
            block_size is not None
            and (
                isinstance(block_size, bool)
                or not isinstance(block_size, numbers.Integral)
                or block_size < 1
            )
        ):
            raise ValueError(
                f"block_size must be None, 'auto' or an int >= 1, got {block_size!r}"
            )
        check_block_scheme(self.block_scheme, block_size)
        if self.ci_method == "bca" and block_size is not None:
            raise ValueError(
                f"ci_method='bca' needs the jackknife of independent rows or "
                f"groups, which a block bootstrap does not have; got "
                f"ci_method='bca' with block_size={block_size!r}. Use "
                f"ci_method='percentile' with block_size, or block_size=None"
            )
        for name in ("return_samples", "tune_per_replicate"):
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        n_jobs = self.n_jobs
        if n_jobs is not None and (
            isinstance(n_jobs, bool)
            or not isinstance(n_jobs, numbers.Integral)
            or n_jobs == 0
        ):
            raise ValueError(f"n_jobs must be None or a nonzero int, got {n_jobs!r}")
        if self.estimator is not None and not hasattr(self.estimator, "fit"):
            raise ValueError(
                f"estimator must be None or an estimator with a fit method, got "
                f"{self.estimator!r}"
            )
        check_max_memory_gb(self.max_memory_gb)
        check_verbose(self.verbose)

    @atomic_fit
    def fit(self, X, y, groups=None, **fit_params):
        """Fit on all data, then bootstrap the chosen attributes.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data (numpy, torch or jax arrays, DataFrames, and sparse
            matrices when the estimator accepts them).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets.
        groups : array-like of shape (n_samples,), default=None
            Cluster labels: whole clusters are resampled with replacement
            (cluster bootstrap) instead of rows. With ``block_size``, runs
            that blocks of rows never cross. They also reach every fit of an
            estimator that takes ``groups`` (a ``BatchedRidge`` with
            ``cv=LeaveOneGroupOut()``, for one; under metadata routing, one
            that requests them), each replicate's rows with their own labels:
            a group drawn twice keeps one label, so that an inner
            leave-one-group-out never trains on a copy of the rows it tests.
        **fit_params : dict
            Passed to the estimator's ``fit``; those with one value per
            sample (``sample_weight``...) are resampled with the rows. Under
            metadata routing, those the estimator requests (see
            :meth:`get_metadata_routing`).

        Returns
        -------
        self : object
            Fitted estimator.
        """
        self._check_params()
        entropy = resolve_entropy(self.random_state)
        estimator = self._get_estimator()
        inner_tags = get_tags(estimator)
        X, y, X_checked, y_checked, groups, fit_params = self._check_fit_input(
            X,
            y,
            groups,
            fit_params,
            accept_sparse="csr" if inner_tags.input_tags.sparse else False,
        )
        n_samples = X_checked.shape[0]
        if self.block_size == "auto":
            _check_auto_groups(groups, n_samples)
        else:
            # Draws no replicate: checks block_size against the groups.
            bootstrap_counts(
                entropy,
                [],
                n_samples,
                groups,
                block_size=self.block_size,
                block_scheme=self.block_scheme,
            )
        # DataFrames go to the estimator as they are, so that column names
        # (and a ColumnTransformer selecting by them) keep working.
        X_fit = estimator_input(X, X_checked)
        y_fit = estimator_input(y, y_checked)
        data = DataBytes.of(X, y, X_checked, y_checked, fit_params)

        shapes = _linear_shapes(
            estimator, self.attributes, self.tune_per_replicate, X_checked, y_checked
        )
        # Until the fit on all data, the smallest possible attribute stands in
        # for the unknown ones: a hopeless n_bootstrap is refused before it.
        self._check_host_memory({STATISTIC_KEY: ()} if shapes is None else shapes)
        flops = None
        if shapes is not None:
            n_targets = 1 if y_checked.ndim == 1 else y_checked.shape[1]
            flops = self.n_bootstrap * bootstrap_flops_per_replicate(
                n_samples, X_checked.shape[1], n_targets
            )
        backend = resolve_backend(self.device, flops=flops)
        if shapes is not None:
            # The batched path's preflight, before the fit on all data: in
            # float64 and with a copy of y, the most that path can take (for
            # a banded ridge, every target at one candidate of all columns).
            n_features = X_checked.shape[1]
            if isinstance(estimator, BandedRidge):
                fit_intercept = estimator.fit_intercept
                planned = banded_bootstrap_nbytes(
                    n_samples,
                    n_features,
                    n_targets,
                    [(n_features, n_targets)],
                    8,
                    backend,
                    fit_intercept=fit_intercept,
                )
            else:
                fit_intercept = ridge_spec(estimator).fit_intercept
                planned = BootstrapRidgeProblem.nbytes(
                    n_samples,
                    n_features,
                    n_targets,
                    8,
                    copies_y=True,
                    gather_buffers=BootstrapRidgeProblem.gather_buffers(
                        backend, n_samples, n_features + 1, n_targets
                    ),
                )
            summaries = self._accumulator_bytes(shapes)
            batched_budget(
                backend, self.max_memory_gb, data, summaries, *planned, self._refuse
            )
            if self.ci_method == "bca":
                self._check_linear_jackknife(
                    X_checked,
                    y_checked,
                    groups,
                    data,
                    summaries,
                    shapes,
                    banded=isinstance(estimator, BandedRidge),
                )
            check_column_scales(
                X_checked, np.float64, backend, fit_intercept=fit_intercept
            )

        one_thread = contextlib.nullcontext()
        if (
            flops is not None
            and flops >= _problems.SIDE_BY_SIDE_MIN_FLOPS
            and flops / self.n_bootstrap <= FULL_FIT_ONE_THREAD_MAX_FLOPS
        ):
            one_thread = _backends.get("numpy").one_thread()
        with one_thread:
            self.estimator_ = clone(estimator).fit(
                X_fit, y_fit, **refit_params(estimator, groups, fit_params)
            )
        self.block_size_ = self._resolve_block_size(X_fit, y_checked, groups)
        source = _unwrap_search(self.estimator_)
        names = self._attribute_names(source)
        replicate_estimator = _replicate_estimator(
            self.estimator_, estimator, self.tune_per_replicate, names
        )
        if replicate_estimator is not None and names is not None:
            _check_not_tuned(names)
        if replicate_estimator is None:
            replicate_estimator = clone(estimator)
        estimates = _statistic(source, self.attributes if names is None else names)
        shapes = {name: value.shape for name, value in estimates.items()}
        self._check_host_memory(shapes)

        accumulators = self._make_accumulators(shapes, estimates)
        linear = _linear_model(
            replicate_estimator, names, X_checked, y_checked, fit_params
        )
        reason = None if linear is not None else refit_reason(replicate_estimator)
        if reason is not None:
            _say(
                self.verbose,
                f"BootstrapEstimator refits {type(replicate_estimator).__name__} "
                f"on every replicate (the generic path): {reason}.",
            )

        def run_replicates(reducers):
            if linear is not None:
                self._run_linear(
                    linear,
                    X_checked,
                    y_checked,
                    groups,
                    entropy,
                    fit_params,
                    reducers,
                    backend,
                    data,
                )
            else:
                self._run_generic(
                    replicate_estimator,
                    X_fit,
                    y_fit,
                    groups,
                    entropy,
                    # Each replicate's rows carry their groups.
                    refit_params(replicate_estimator, groups, fit_params),
                    self.attributes if names is None else names,
                    shapes,
                    reducers,
                    data,
                )

        run_replicates(accumulators)
        if self.ci_method == "bca":
            acceleration = self._jackknife_acceleration(
                linear,
                replicate_estimator,
                X_checked,
                y_checked,
                X_fit,
                y_fit,
                groups,
                fit_params,
                self.attributes if names is None else names,
                estimates,
                data,
            )
            second = {
                name: accumulator.second_pass(acceleration[name])
                for name, accumulator in accumulators.items()
            }
            if all(reducer is not None for reducer in second.values()):
                # The same replicates again, from their seeds.
                run_replicates(second)
            intervals = {
                name: accumulator.interval(
                    # Samples nobody asked for are sorted in place.
                    second[name],
                    overwrite_samples=not self.return_samples,
                )
                for name, accumulator in accumulators.items()
            }
        else:
            intervals = {
                name: accumulator.interval(self.ci_method, estimates[name])
                for name, accumulator in accumulators.items()
            }
        results = {}
        for name, accumulator in accumulators.items():
            lower, upper = intervals[name]
            results[name] = BootstrapResult(
                estimate=estimates[name],
                standard_error=accumulator.std,
                ci_lower=lower,
                ci_upper=upper,
                samples=accumulator.samples if self.return_samples else None,
            )
        self._warn_if_nan(results, accumulators)
        self.results_ = results
        self.backend_ = backend
        return self

    def _warn_if_nan(self, results, accumulators):
        """One DegenerateDataWarning for every NaN bound or standard error of
        the fit, saying where and why; none when there is none."""
        message = describe_nan(
            {
                name: (
                    (result.ci_lower, result.ci_upper, result.standard_error),
                    accumulators[name].nan_reasons(result.estimate),
                )
                for name, result in results.items()
            }
        )
        if message is not None:
            warnings.warn(
                f"BootstrapEstimator(ci_method={self.ci_method!r}): {message}",
                DegenerateDataWarning,
                # _warn_if_nan, fit, atomic_fit, the caller.
                stacklevel=4,
            )

    def _residuals(self, X, y):
        """``y - estimator_.predict(X)``, of shape (n_samples, n_targets), or
        None when the estimator does not predict numbers."""
        if not hasattr(self.estimator_, "predict") or y.dtype.kind not in "biuf":
            return None
        predicted = np.asarray(to_numpy(self.estimator_.predict(X)), dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if predicted.size != y.size:
            return None
        return (y - predicted.reshape(y.shape)).reshape(y.shape[0], -1)

    def _resolve_block_size(self, X, y, groups):
        """``block_size_``: as given, or chosen by "auto" from the residuals;
        warns when an iid row bootstrap meets autocorrelated residuals."""
        if self.block_size is None:
            if groups is None:
                residuals = self._residuals(X, y)
                if residuals is not None:
                    _warn_if_autocorrelated(residuals)
            return None
        if self.block_size != "auto":
            return int(self.block_size)
        residuals = self._residuals(X, y)
        if residuals is None:
            raise ValueError(
                f"block_size='auto' chooses the block size from the residuals "
                f"of the fit on all data, but {type(self.estimator_).__name__} "
                f"does not predict numeric targets; pass an int block_size"
            )
        lengths = optimal_block_length(residuals, groups, self.block_scheme)
        lengths = lengths[np.isfinite(lengths)]
        smallest = n_samples = residuals.shape[0]
        if groups is not None:
            smallest = int(np.unique(groups, return_counts=True)[1].min())
        if not lengths.size:
            return 1
        chosen = math.ceil(float(np.median(lengths)))
        return int(min(max(chosen, 1), smallest, n_samples))

    def _attribute_names(self, source):
        """Names to read from each fit (None for a callable), checked on ``source``."""
        attributes = self.attributes
        if callable(attributes):
            return None
        if isinstance(attributes, str) and attributes == "auto":
            if hasattr(source, "coef_"):
                return tuple(a for a in _LINEAR_ATTRIBUTES if hasattr(source, a))
            if hasattr(source, _IMPORTANCES):
                return (_IMPORTANCES,)
            raise ValueError(
                f"attributes='auto' bootstraps coef_ and intercept_, or else "
                f"{_IMPORTANCES}, but the fitted {type(source).__name__} has "
                f"neither coef_ nor {_IMPORTANCES}; pass attribute names or a "
                f"callable"
            )
        names = (attributes,) if isinstance(attributes, str) else tuple(attributes)
        for name in names:
            missing = _missing_attribute(source, name)
            if missing is not None:
                raise ValueError(
                    f"attributes names {name!r}, but {missing}; got "
                    f"attributes={attributes!r}"
                )
        return names

    def _accumulator_bytes(self, shapes):
        if self.ci_method == "bca":
            keep = self._bca_keeps_samples(shapes)
            return sum(
                bca_summary_bytes(
                    shape,
                    self.n_bootstrap,
                    self.confidence_level,
                    keep_samples=keep,
                    copy_samples=bool(self.return_samples),
                    n_bounds=1 if self.alternative != "two-sided" else 2,
                )
                for shape in shapes.values()
            )
        return sum(
            BootstrapAccumulator.nbytes_needed(
                shape,
                self.n_bootstrap,
                self.confidence_level,
                keep_samples=bool(self.return_samples),
                alternative=self.alternative,
                method=self.ci_method,
            )
            for shape in shapes.values()
        )

    def _bca_keeps_samples(self, shapes):
        """Whether BCa keeps every replicate (one pass) rather than two passes."""
        if self.return_samples:
            return True
        need = sum(
            BCaAccumulator.nbytes_needed(
                shape, self.n_bootstrap, self.confidence_level, keep_samples=True
            )
            for shape in shapes.values()
        )
        budget = memory_budget(None, self.max_memory_gb)
        return need <= BCA_KEEP_SAMPLES_SHARE * budget * GB

    def _make_accumulators(self, shapes, estimates):
        if self.ci_method == "bca":
            keep = self._bca_keeps_samples(shapes)
            return {
                name: BCaAccumulator(
                    shape,
                    self.n_bootstrap,
                    self.confidence_level,
                    estimates[name],
                    keep_samples=keep,
                    alternative=self.alternative,
                )
                for name, shape in shapes.items()
            }
        return {
            name: BootstrapAccumulator(
                shape,
                self.n_bootstrap,
                self.confidence_level,
                keep_samples=bool(self.return_samples),
                alternative=self.alternative,
                method=self.ci_method,
            )
            for name, shape in shapes.items()
        }

    def _check_host_memory(self, shapes):
        """Refuse to start when the retained replicates exceed the host budget."""
        need = self._accumulator_bytes(shapes)
        budget = memory_budget(None, self.max_memory_gb)
        if need > budget * GB:
            n_elements = sum(int(np.prod(shape)) for shape in shapes.values())
            kept = "every sample" if self.return_samples else "the percentile tails"
            raise ValueError(
                f"BootstrapEstimator needs {gb_up(need):.3g} GB of host memory to "
                f"keep {kept} of {n_elements} bootstrapped elements over "
                f"n_bootstrap={self.n_bootstrap} replicates, but the host budget is "
                f"{budget:.3g} GB (max_memory_gb={self.max_memory_gb!r}). Lower "
                f"n_bootstrap, use fewer targets, set return_samples=False, or "
                f"raise max_memory_gb."
            )

    def _check_linear_jackknife(self, X, y, groups, data, summaries, shapes, banded):
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
        check_jackknife(
            self.max_memory_gb, data, summaries, jackknife, self._refuse_bca
        )
        size = sum(math.prod(shape) for shape in shapes.values())
        refit_window(
            self.max_memory_gb,
            self.n_jobs,
            data,
            summaries,
            n_samples,
            size,
            self._refuse_bca,
        )

    def _jackknife_acceleration(
        self,
        linear,
        estimator,
        X,
        y,
        X_fit,
        y_fit,
        groups,
        fit_params,
        attributes,
        estimates,
        data,
    ):
        """BCa acceleration per attribute, from leave-one-unit-out fits.

        A unit is a row, or a group with ``groups``. Closed-form updates of
        the fit on all data on the linear path when they are well defined;
        otherwise one refit per unit through joblib.
        """
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
                sums = _banded_jackknife_sums(X, y, spec, *args)
            else:
                sums = _linear_jackknife_sums(
                    X, y, spec.alphas, spec.fit_intercept, *args
                )
        if sums is None:
            sums = self._jackknife_refits(
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

    def _jackknife_refits(
        self,
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
        bounds, run = self._refit_window(X, shapes, data)
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
                power[k, bounds[j] : bounds[j + 1]].reshape(shapes[name])
                for k in range(3)
            )
            for j, name in enumerate(shapes)
        }

    def _refuse(self, need, budget, where, parts):
        refuse(
            "BootstrapEstimator",
            self.max_memory_gb,
            "Lower n_bootstrap, set return_samples=False, use fewer targets or "
            "samples, or raise max_memory_gb.",
            need,
            budget,
            where,
            parts,
        )

    def _refuse_bca(self, need, budget, where, parts):
        refuse(
            "BootstrapEstimator",
            self.max_memory_gb,
            "Use fewer targets or samples, lower n_bootstrap, use "
            "ci_method='percentile', or raise max_memory_gb.",
            need,
            budget,
            where,
            parts,
        )

    def _run_linear(
        self, linear, X, y, groups, entropy, fit_params, accumulators, backend, data
    ):
        spec, dtype = linear
        dtype = resolve_dtype(dtype, backend, X.dtype)
        sample_weight = fit_params.get("sample_weight")
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64)
        n_targets = 1 if y.ndim == 1 else y.shape[1]
        summaries = self._accumulator_bytes(
            {name: acc.shape for name, acc in accumulators.items()}
        )
        resampling = dict(
            fit_intercept=spec.fit_intercept,
            sample_weight=sample_weight,
            groups=groups,
            block_size=self.block_size_,
            block_scheme=self.block_scheme,
            entropy=entropy,
            backend=backend,
            dtype=dtype,
            n_bootstrap=self.n_bootstrap,
        )
        banded = isinstance(spec, HeldBands)
        if banded:
            del resampling["fit_intercept"]
            planned = BandedBootstrapProblem.nbytes(
                X, y, spec, backend, dtype, self.n_bootstrap
            )
        else:
            planned = BootstrapRidgeProblem.nbytes(
                *X.shape,
                n_targets,
                dtype.itemsize,
                copies_y=backend.library != "numpy" or y.dtype != dtype,
                gather_buffers=BootstrapRidgeProblem.gather_buffers(
                    backend, X.shape[0], X.shape[1] + spec.fit_intercept, n_targets
                ),
            )
        batch_gb, max_items = batched_budget(
            backend, self.max_memory_gb, data, summaries, *planned, self._refuse
        )

        def reduce(ids, result):
            coef, intercept = result
            for name, accumulator in accumulators.items():
                shape = (len(ids), *accumulator.shape)
                if name == "coef_":
                    block = coef.reshape(shape)
                elif spec.fit_intercept:
                    block = intercept.reshape(shape)
                else:
                    # Shaped like the estimator's own (0.0 for sklearn).
                    block = np.zeros(shape)
                accumulator.update(block, ids=ids)

        with backend.context():
            if banded:
                problem = BandedBootstrapProblem(
                    X, y, spec, **resampling, max_batch_size=max_items
                )
            else:
                problem = BootstrapRidgeProblem(
                    X, y, spec.alphas, **resampling, max_batch_size=max_items
                )
            # batch_gb is what the preflight left for the batches once all
            # that is held is counted; the engine takes the problem's fixed
            # bytes off the budget it is given.
            run_problem(
                problem,
                reduce,
                max_memory_gb=batch_gb + problem.fixed_bytes / GB,
                verbose=self.verbose,
            )

    def _run_generic(
        self,
        estimator,
        X,
        y,
        groups,
        entropy,
        fit_params,
        attributes,
        shapes,
        accumulators,
        data,
    ):
        bounds, run = self._refit_window(X, shapes, data)
        task = functools.partial(
            _refit_replicates,
            estimator=estimator,
            X=X,
            y=y,
            groups=groups,
            block_size=self.block_size_,
            block_scheme=self.block_scheme,
            entropy=entropy,
            fit_params=fit_params,
            attributes=attributes,
            shapes=shapes,
        )

        def reduce(ids, result):
            for k, accumulator in enumerate(accumulators.values()):
                block = result[:, bounds[k] : bounds[k + 1]]
                accumulator.update(
                    block.reshape((len(ids), *accumulator.shape)), ids=ids
                )

        run(task, reduce, n_items=self.n_bootstrap, desc="replicates")

    def _refit_window(self, X, shapes, data):
        """``(bounds, run)`` of the generic path's refits.

        ``bounds``: where each attribute of ``shapes`` starts in a refit's
        flat row of estimates (and where the last ends). ``run(task, reduce,
        n_items=..., desc=...)``: :func:`skbatch._engine.run_parallel` within
        the memory window that :func:`skbatch._preflight.refit_window` grants
        (or refuses now, before any refit).
        """
        sizes = [int(np.prod(shape)) for shape in shapes.values()]
        bounds = np.cumsum([0, *sizes])
        window_gb, item_bytes = refit_window(
            self.max_memory_gb,
            self.n_jobs,
            data,
            self._accumulator_bytes(shapes),
            X.shape[0],
            bounds[-1],
            self._refuse,
        )
        run = functools.partial(
            run_parallel,
            host_bytes_per_item=item_bytes,
            n_jobs=self.n_jobs,
            max_memory_gb=window_gb,
            verbose=self.verbose,
        )
        return bounds, run

    def __sklearn_is_fitted__(self):
        return hasattr(self, "results_")


def _check_auto_groups(groups, n_samples):
    """Refuse block_size='auto' on groups too short for the rule."""
    least = min_rows_for_block_length()
    if groups is None:
        shortest, where = n_samples, f"n_samples={n_samples}"
    else:
        shortest = int(np.unique(groups, return_counts=True)[1].min())
        where = f"the smallest group has {shortest} rows"
    if shortest < least:
        raise ValueError(
            f"block_size='auto' needs at least {least} rows in every group for "
            f"the Politis-White rule, but {where}; pass an int block_size"
        )


def _warn_if_autocorrelated(residuals):
    """Warn when the residuals' lag-1 autocorrelation makes iid rows wrong."""
    found = autocorrelation_warning(residuals)
    if found is None:
        return
    median, threshold, n_series = found
    if median > threshold:
        warnings.warn(
            f"The residuals of the fit on all data are autocorrelated (median "
            f"lag-1 autocorrelation {median:.2f} over {n_series} target(s), above "
            f"{threshold:.2f}), so the iid bootstrap of rows understates the "
            f"variability. Set block_size (an int, or 'auto') and block_scheme "
            f"('moving', 'circular' or 'stationary') for a block bootstrap, or "
            f"pass the runs as groups.",
            AutocorrelationWarning,
            # _warn_if_autocorrelated, _resolve_block_size, fit, atomic_fit.
            stacklevel=5,
        )


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
            values = _statistic(_unwrap_search(fitted), attributes)
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


def _linear_jackknife_sums(X, y, alphas, fit_intercept, sample_weight, units, shapes):
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


def _banded_jackknife_sums(X, y, held, sample_weight, units, shapes):
    """:func:`_linear_jackknife_sums` of a :class:`HeldBands`, candidate by
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
        sums = _linear_jackknife_sums(
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


def _check_attributes_param(attributes):
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


def _missing_attribute(source, name):
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


def _check_not_tuned(names):
    tuned = [name for name in names if name in _TUNED_ATTRIBUTES]
    if tuned:
        raise ValueError(
            f"attributes {tuned} are chosen by hyperparameter tuning, which is "
            f"done once on all data and held fixed across replicates; set "
            f"tune_per_replicate=True to bootstrap the tuning too"
        )


# Replicate statistics, shared by both paths ----------------------------------


def _unwrap_search(fitted):
    """The model a hyperparameter search selected, or the estimator itself."""
    if hasattr(fitted, "best_params_") and hasattr(fitted, "best_estimator_"):
        return fitted.best_estimator_
    return fitted


def _statistic(source, attributes):
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


def _replicate_estimator(fitted, estimator, tune_per_replicate, names):
    """The unfitted estimator of each replicate when tuning is held fixed.

    None when nothing is tuned (or tuning is redone per replicate): the
    replicates then refit a clone of ``estimator`` as given. A
    ``BandedRidge`` that chose nothing (one candidate, one alpha) is held
    all the same when only ``coef_`` / ``intercept_`` (``names``) are
    bootstrapped, for the batched path.
    """
    if tune_per_replicate:
        return None
    if isinstance(fitted, BandedRidge):
        searched = len(fitted.candidates_) > 1 or np.size(fitted.alphas) > 1
        linear = names is not None and set(names) <= set(_LINEAR_ATTRIBUTES)
        return held_banded_ridge(fitted) if searched or linear else None
    if isinstance(fitted, BatchedRidge):
        if np.size(fitted.alphas) < 2:
            return None
        chosen = np.unique(fitted.alpha_)
        if chosen.size == 1:
            return clone(estimator).set_params(alphas=float(chosen[0]))
        return Ridge(
            alpha=np.asarray(fitted.alpha_), fit_intercept=fitted.fit_intercept
        )
    if type(fitted) is RidgeCV:
        return Ridge(alpha=fitted.alpha_, fit_intercept=fitted.fit_intercept)
    if hasattr(fitted, "best_params_"):
        if not hasattr(fitted, "best_estimator_"):
            raise ValueError(
                f"{type(fitted).__name__} must be built with refit=True for its "
                f"best parameters to be held fixed across replicates, or set "
                f"tune_per_replicate=True"
            )
        return clone(fitted.best_estimator_)
    return None


def _refit_replicates(
    ids,
    *,
    estimator,
    X,
    y,
    groups,
    block_size,
    block_scheme,
    entropy,
    fit_params,
    attributes,
    shapes,
):
    """Generic-path task: refit clones on the resampled rows of replicates ``ids``.

    Each refit gets X, y and the per-sample fit parameters (groups among
    them) indexed by its rows in the order drawn
    (:func:`skbatch.random.bootstrap_rows`): whole blocks of consecutive
    rows, whole clusters, so that an estimator that reads the rows' order
    (a delay, an inner time-series split) sees the resample as drawn.

    Returns an array of shape (len(ids), total size of the attributes), the
    attributes raveled and concatenated in the order of ``shapes``.
    """
    drawn = bootstrap_rows(
        entropy,
        ids,
        X.shape[0],
        groups,
        block_size=block_size,
        block_scheme=block_scheme,
    )
    sample_weight = fit_params.get("sample_weight")
    if sample_weight is not None:
        sample_weight = np.asarray(sample_weight)
        totals = np.array([sample_weight[rows].sum() for rows in drawn])
        check_replicate_weights(ids, totals[:, None])
    out = np.empty((len(ids), sum(int(np.prod(s)) for s in shapes.values())))
    for k, (item, indices) in enumerate(zip(ids, drawn)):
        try:
            with warnings.catch_warnings():
                # The fit on all data has said it once; not once per replicate.
                warnings.simplefilter("ignore", AutocorrelationWarning)
                warnings.simplefilter("ignore", AlphaEdgeWarning)
                fitted = clone(estimator).fit(
                    _safe_indexing(X, indices),
                    _safe_indexing(y, indices),
                    **_check_method_params(X, fit_params, indices),
                )
            values = _statistic(_unwrap_search(fitted), attributes)
            if list(values) != list(shapes):
                raise ValueError(
                    f"attributes gave {list(values)} but {list(shapes)} on all data"
                )
            for name, value in values.items():
                if value.shape != shapes[name]:
                    raise ValueError(
                        f"{name} has shape {value.shape} but {shapes[name]} on all data"
                    )
            out[k] = np.concatenate([v.ravel() for v in values.values()])
        except Exception as exc:
            # The estimator's own error, as scikit-learn's refits raise it,
            # with the replicate named in its traceback (Python 3.11 on).
            if hasattr(exc, "add_note"):
                exc.add_note(f"Raised in bootstrap replicate {int(item)}.")
            raise
    return out


# The batched linear path --------------------------------------------------------


def _linear_shapes(estimator, attributes, tune_per_replicate, X, y):
    """Shapes of coef_ / intercept_ before fitting, for the batched path.

    None when the replicates will not take the batched path (not a ridge
    problem, other attributes, re-tuning per replicate, X not dense numbers):
    the shapes are then known only after the fit. A ``BandedRidge`` takes
    the batched path at its choices held fixed.
    """
    spec = ridge_spec(estimator)
    banded = isinstance(estimator, BandedRidge) and not tune_per_replicate
    if not banded and (spec is None or (tune_per_replicate and spec.tunes)):
        return None
    if sparse.issparse(X) or X.dtype.kind not in "biuf" or callable(attributes):
        return None
    if isinstance(attributes, str):
        names = _LINEAR_ATTRIBUTES if attributes == "auto" else (attributes,)
    else:
        names = tuple(attributes)
    if not set(names) <= set(_LINEAR_ATTRIBUTES):
        return None
    n_features = X.shape[1]
    if y.ndim == 1:
        return {"coef_": (n_features,), "intercept_": ()}
    n_targets = y.shape[1]
    all_shapes = {"coef_": (n_targets, n_features), "intercept_": (n_targets,)}
    return {name: all_shapes[name] for name in names}


def _linear_model(estimator, names, X, y, fit_params):
    """``(spec, dtype)`` of the replicates' ridge problem at fixed alphas when
    the batched path solves it, else None: a :class:`RidgeSpec`, or the
    :class:`HeldBands` of a banded ridge held at its choices."""
    if names is None or not set(names) <= set(_LINEAR_ATTRIBUTES):
        return None
    if not set(fit_params) <= {"sample_weight"}:
        return None
    if sparse.issparse(X) or X.dtype.kind not in "biuf":
        return None
    held = getattr(estimator, "__skbatch_held_bands__", None)
    if held is not None:
        held = held(X.shape[1], 1 if y.ndim == 1 else y.shape[1])
        return held, held.dtype
    spec = ridge_spec(estimator)
    if spec is None or spec.tunes:
        return None
    n_targets = 1 if y.ndim == 1 else y.shape[1]
    if spec.alphas.size not in (1, n_targets):
        # The estimator's fit refuses a wrong number of alphas.
        return None
    return spec, spec.dtype
