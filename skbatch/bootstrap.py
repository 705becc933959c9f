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

This module holds the estimator: its parameters and their validation, the
choice of problem and resampling scheme, and the fitted attributes. The
paths, the accumulators and the jackknife live in :mod:`skbatch._bootstrap`.
"""

import dataclasses
import functools
import numbers
from typing import NamedTuple

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.utils import get_tags

from ._bootstrap.attributes import (
    STATISTIC_KEY,
    attribute_names,
    check_attributes_param,
    check_not_tuned,
    statistic,
    unwrap_search,
)
from ._bootstrap.blocks import (
    check_block_params,
    check_blocks_fit,
    resolve_block_size,
)
from ._bootstrap.inputs import FitInputs, Settings
from ._bootstrap.jackknife import (
    banded_jackknife_sums,
    jackknife_acceleration,
    linear_jackknife_sums,
)
from ._bootstrap.linear import (
    check_linear_budget,
    full_fit_threads,
    linear_flops,
    linear_model,
    linear_shapes,
    run_linear,
)
from ._bootstrap.refit import replicate_estimator, run_refits
from ._bootstrap.summaries import (
    check_host_memory,
    intervals,
    make_accumulators,
    warn_if_nan,
)
from ._engine import run_problem
from ._engine.planner import _say
from ._engine.preflight import DataBytes
from ._estimators.base import (
    WrapperMixin,
    atomic_fit,
    check_max_memory_gb,
    check_n_jobs,
    check_verbose,
    estimator_input,
    fit_under_budget,
    refit_params,
)
from ._kernels.rules import check_alternative
from ._ridge.spec import refit_reason
from .backend import resolve_backend
from .random import DEFAULT_RANDOM_STATE, resolve_entropy
from .ridge import BatchedRidge

__all__ = ["BootstrapEstimator", "BootstrapResult"]

_CI_METHODS = ("percentile", "basic", "bca")
# BCa keeps every replicate, in one pass, when they take at most this share
# of the host budget; otherwise it runs the replicates twice (see ci_method).
BCA_KEEP_SAMPLES_SHARE = 0.5
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
# The closed-form jackknife sums of BCa, also read from this module
# (tests/test_preflight_undercounts.py, tests/test_bootstrap.py).
_linear_jackknife_sums = linear_jackknife_sums
_banded_jackknife_sums = banded_jackknife_sums


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
    ``results_``. Linear models bootstrapping ``coef_`` / ``intercept_``
    (:class:`~skbatch.BatchedRidge`, :class:`~skbatch.BandedRidge`,
    scikit-learn's ``Ridge``, ``LinearRegression``, ``RidgeCV``) take a
    batched path on ``device``; every other estimator is refit through joblib
    (``n_jobs``, ``joblib.parallel_config``). Both paths draw identical
    resamples. Read more in the :ref:`User Guide <bootstrap>`.

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
        defines it, the acceleration from the jackknife (leave one row out,
        or one group with ``groups``); NaN where undefined, as scipy's. Not
        with ``block_size``. A NaN bound or standard error comes with one
        :class:`~skbatch.DegenerateDataWarning` per fit.
    alternative : {"two-sided", "less", "greater"}, default="two-sided"
        The interval, as ``scipy.stats.bootstrap(alternative=...)`` defines
        it: "less" gives ``(-inf, upper]`` and "greater" ``[lower, inf)``,
        one-sided intervals of coverage ``confidence_level`` whose finite
        bound is that of a two-sided interval at level ``2 *
        confidence_level - 1``, with each ``ci_method``.
    attributes : "auto", str, sequence of str or callable, default="auto"
        What to bootstrap. "auto": ``coef_`` and ``intercept_`` (those the
        fitted estimator has), else ``feature_importances_``, else an error.
        A name or names of fitted attributes, dotted names read as
        :func:`operator.attrgetter` does (``"named_steps.ridge.coef_"``); a
        name the fit on all data lacks is refused before any replicate. A
        callable taking a fitted estimator and returning an array (stored
        under ``results_["statistic"]``) or a dict of name to array.
        Attributes are read from the fitted estimator, or from the
        ``best_estimator_`` of a hyperparameter search.
    return_samples : bool, default=False
        Keep every replicate in ``results_[name].samples``. Memory then grows
        with ``n_bootstrap``.
    block_size : int >= 1, "auto" or None, default=None
        None resamples rows (or groups) independently; fit warns when the
        residuals of the fit on all data are clearly autocorrelated. An int
        gives a block bootstrap of ``block_size`` consecutive rows (the mean
        length, for "stationary") that never cross a group boundary. "auto"
        chooses it by Politis and White's rule, as
        ``arch.bootstrap.optimal_block_length`` computes it, on the residuals
        of the fit on all data; the value used is ``block_size_``.
    block_scheme : {"moving", "circular", "stationary"}, default="moving"
        How a block bootstrap draws its blocks (needs ``block_size``), as
        arch's ``MovingBlockBootstrap``, ``CircularBlockBootstrap`` and
        ``StationaryBootstrap`` define them, blocks kept inside groups. Every
        scheme takes the batched linear path.
    tune_per_replicate : bool, default=False
        Hyperparameters chosen by cross-validation are tuned once, on all
        data, and held fixed across replicates (False: a ``BatchedRidge``,
        ``RidgeCV`` or ``BandedRidge`` at its choices, a ``GridSearchCV`` or
        ``RandomizedSearchCV`` as its ``best_estimator_``), or tuned again
        in each replicate (True). Other self-tuning estimators
        (``LassoCV``...) re-tune in every replicate either way.
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
        the device batches; None measures free memory. Also the budget of
        the fit of ``estimator_`` on all data, for an estimator that takes
        ``max_memory_gb`` and was given none (``estimator_`` then holds it).
    verbose : int, default=0
        1: print the plan of each loop before it runs and a summary after
        it, and show progress; 2: also log the plans, every batch and the
        out-of-memory recoveries on the ``skbatch`` logger.

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
    The :ref:`User Guide <bootstrap>` gives the formulas of the intervals,
    the block schemes and the "auto" rule, the cost of BCa, the memory
    checks fit runs before any replicate, and how the linear path solves.

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
        check_attributes_param(self.attributes)
        check_block_params(self.block_size, self.block_scheme, self.ci_method)
        for name in ("return_samples", "tune_per_replicate"):
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        check_n_jobs(self.n_jobs)
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
        settings = Settings.of(self, BCA_KEEP_SAMPLES_SHARE)
        inner_tags = get_tags(estimator)
        X, y, X_checked, y_checked, groups, fit_params = self._check_fit_input(
            X,
            y,
            groups,
            fit_params,
            accept_sparse="csr" if inner_tags.input_tags.sparse else False,
        )
        check_blocks_fit(
            entropy, X_checked.shape[0], groups, self.block_size, self.block_scheme
        )
        # DataFrames go to the estimator as they are, so that column names
        # (and a ColumnTransformer selecting by them) keep working.
        inputs = FitInputs(
            X_checked,
            y_checked,
            estimator_input(X, X_checked),
            estimator_input(y, y_checked),
            groups,
            fit_params,
            DataBytes.of(X, y, X_checked, y_checked, fit_params),
        )
        backend, flops = self._preflight(settings, estimator, inputs)
        with full_fit_threads(flops, self.n_bootstrap, FULL_FIT_ONE_THREAD_MAX_FLOPS):
            self.estimator_ = fit_under_budget(estimator, settings.max_memory_gb).fit(
                inputs.X_fit,
                inputs.y_fit,
                **refit_params(estimator, groups, fit_params),
            )
        self.block_size_ = resolve_block_size(
            self.estimator_,
            self.block_size,
            self.block_scheme,
            inputs.X_fit,
            y_checked,
            groups,
        )
        settings = dataclasses.replace(settings, block_size=self.block_size_)
        results, accumulators = self._bootstrap(
            settings, estimator, inputs, entropy, backend
        )
        warn_if_nan(settings, results, accumulators)
        self.results_ = results
        self.backend_ = backend
        return self

    def _preflight(self, settings, estimator, inputs):
        """``(backend, flops)``: where the batched path runs, chosen from its
        flops (None when the replicates refit), once what is held fits."""
        X, y = inputs.X, inputs.y
        shapes = linear_shapes(
            estimator, self.attributes, self.tune_per_replicate, X, y
        )
        # Until the fit on all data, the smallest possible attribute stands in
        # for the unknown ones: a hopeless n_bootstrap is refused before it.
        check_host_memory(settings, {STATISTIC_KEY: ()} if shapes is None else shapes)
        flops = linear_flops(shapes, self.n_bootstrap, X, y)
        backend = resolve_backend(self.device, flops=flops)
        if shapes is not None:
            check_linear_budget(settings, estimator, inputs, shapes, backend)
        return backend, flops

    def _bootstrap(self, settings, estimator, inputs, entropy, backend):
        """Choose the replicates' problem (batched linear, else refits), run
        them and summarise each attribute: ``(results, accumulators)``."""
        source = unwrap_search(self.estimator_)
        names = attribute_names(source, self.attributes)
        replicate = replicate_estimator(
            self.estimator_, estimator, self.tune_per_replicate, names
        )
        if replicate is not None and names is not None:
            check_not_tuned(names)
        if replicate is None:
            replicate = clone(estimator)
        attributes = self.attributes if names is None else names
        estimates = statistic(source, attributes)
        shapes = {name: value.shape for name, value in estimates.items()}
        check_host_memory(settings, shapes)
        accumulators = make_accumulators(settings, shapes, estimates)
        linear = linear_model(replicate, names, inputs.X, inputs.y, inputs.fit_params)
        if linear is not None:
            # run_problem is read here at each fit: tests/test_solvers.py spies
            # on skbatch.bootstrap.run_problem.
            run_replicates = functools.partial(
                run_linear, settings, linear, inputs, entropy, backend, run_problem
            )
        else:
            reason = refit_reason(replicate)
            if reason is not None:
                _say(
                    self.verbose,
                    f"BootstrapEstimator refits {type(replicate).__name__} "
                    f"on every replicate (the generic path): {reason}.",
                )
            run_replicates = functools.partial(
                run_refits, settings, replicate, inputs, entropy, attributes, shapes
            )
        run_replicates(accumulators)
        acceleration = functools.partial(
            jackknife_acceleration,
            settings,
            linear,
            replicate,
            inputs,
            attributes,
            estimates,
        )
        bounds = intervals(
            settings, accumulators, estimates, run_replicates, acceleration
        )
        results = {
            name: BootstrapResult(
                estimate=estimates[name],
                standard_error=accumulator.std,
                ci_lower=bounds[name][0],
                ci_upper=bounds[name][1],
                samples=accumulator.samples if self.return_samples else None,
            )
            for name, accumulator in accumulators.items()
        }
        return results, accumulators

    def __sklearn_is_fitted__(self):
        return hasattr(self, "results_")
