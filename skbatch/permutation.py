"""PermutationScorer: cross-validated score with a permutation p-value, per target.

The definitions are those of scikit-learn's ``permutation_test_score``: the
score is the mean over folds of the scorer on the test rows, the null
distribution is that score with ``y`` permuted (within groups when given),
and ``p = (C + 1) / (n_permutations + 1)`` with C the number of permuted
scores at least as high as the true one (``alternative="greater"``; "less"
and "two-sided" as :func:`scipy.stats.permutation_test` defines them, the
rules in :mod:`skbatch._kernels.rules`); when the scheme has at most
``n_permutations`` distinct permutations, each is scored once and
``p = C / (their number)``, exact. ``permutation_type="sign_flip"`` is the
one-sample test instead: the rows of ``y`` (or whole groups of rows) are
multiplied by random signs, with the same scores and p-value rules. With
``confounds``, the statistic is the score beyond them and the null moves
the residuals of ``y`` on them (Freedman and Lane;
:mod:`skbatch._permutation.confounds`).

Two paths compute the null with the same permutations (one seed stream per
permutation, see :mod:`skbatch.random`): the ridge family
(``BatchedRidge``, ``BandedRidge``, ``Ridge``, ``RidgeCV``,
``LinearRegression``) takes permutations as extra target columns through
one decomposition per fold; any other estimator is refit through joblib,
in bounded windows.

This module holds the estimator: its parameters and their validation, the
choice of problem (which path scores each metric) and of resampling scheme,
and the fitted attributes. What the score is made of (metrics, folds) is in
:mod:`skbatch._permutation.cv`, the checks and plans made before any work in
:mod:`skbatch._permutation.plan`, the two paths in
:mod:`skbatch._permutation.paths`, and the records passed between them in
:mod:`skbatch._permutation.inputs`.
"""

import numbers

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, is_classifier
from sklearn.model_selection import check_cv
from sklearn.utils import get_tags

from ._estimators.base import (
    WrapperMixin,
    atomic_fit,
    check_max_memory_gb,
    check_verbose,
    estimator_input,
    fit_under_budget,
    refit_params,
)
from ._kernels.rules import check_alternative
from ._permutation.confounds import (
    check_confounded_memory,
    confounded_inputs,
    run_confounded_paths,
)
from ._permutation.cv import _check_scoring, _metrics, _split_rows
from ._permutation.inputs import FitInputs, Paths, Resamples, Settings
from ._permutation.paths import run_paths, warn_if_undefined

# Read here by skbatch/partitioning.py.
from ._permutation.plan import TIE_ULPS as TIE_ULPS
from ._permutation.plan import (
    _check_host_memory,
    _check_refit_memory,
    _fast_path,
    _plan_resamples,
    _plan_ridge,
    _split_metrics,
)
from ._resampling.signed import check_resampling_type
from .backend import resolve_backend
from .random import DEFAULT_RANDOM_STATE, resolve_entropy
from .ridge import BatchedRidge
from .streaming import PermutationCounter

__all__ = ["PermutationScorer"]

_MULTIOUTPUTS = ("uniform_average", "raw_values")


class PermutationScorer(WrapperMixin, RegressorMixin, BaseEstimator):
    """Cross-validated score with a permutation p-value, per target.

    The estimator form of :func:`sklearn.model_selection.permutation_test_score`,
    with its definitions: ``score_`` is the mean over folds of the scorer on
    the test rows, the null distribution is that score with the rows of
    ``y`` permuted (within ``groups`` when given), and ``pvalue_`` is
    ``(C + 1) / (n_permutations + 1)``, C the number of permuted scores at
    least as high; per target with ``multioutput="raw_values"``. Ridge
    estimators take a fast path on ``device`` (one decomposition per fold
    serves every permutation), others are refit through joblib, on the
    same permutations. The :ref:`User Guide <permutation>` gives the fast
    path's rules, how ties count, and when each scheme is valid. With
    ``fit(X, y, confounds=Z)``, the score tested is that of X beyond the
    nuisance variables ``Z``, against Freedman and Lane's null (the
    residuals of ``y`` on ``Z`` permuted), as nilearn's
    ``permuted_ols(confounding_vars=...)`` tests it.

    Parameters
    ----------
    estimator : estimator object, default=None
        Regressor to score; None means :class:`~skbatch.BatchedRidge` with
        its defaults.
    n_permutations : int, default=1000
        Number of permutations of ``y``, at least 1; the smallest p-value is
        ``1 / (n_permutations + 1)``. When the scheme has no more distinct
        permutations (:func:`skbatch.random.count_permutations`), each is
        scored once instead, and the p-values are exact (``exact_``).
    scoring : str, callable, list, tuple, dict or None, default=None
        Scorer name (:func:`sklearn.metrics.get_scorer_names`),
        ``"correlation"`` (Pearson's r of predictions and targets) or
        callable ``scorer(estimator, X, y)``; None uses ``estimator.score``
        (R^2). With ``multioutput="raw_values"``, one with a value per
        target: None, "r2", "correlation", "explained_variance",
        "neg_mean_squared_error", "neg_root_mean_squared_error",
        "neg_mean_absolute_error", "neg_median_absolute_error",
        "neg_mean_absolute_percentage_error", or a callable returning one
        score per target. Several metrics, as
        :func:`~sklearn.model_selection.cross_validate` takes them (a list,
        tuple or set of names, or a dict of name to scorer), score the same
        fits of the same permutations.
    cv : int, CV splitter or iterable, default=5
        Outer cross-validation, as in ``permutation_test_score``; ``groups``
        reach a splitter that uses them. Folds that depend on ``y``
        (``StratifiedKFold``) are drawn again for every permutation.
    multioutput : {"uniform_average", "raw_values"}, default="uniform_average"
        "uniform_average": one score, the scorer's (the mean over targets,
        as ``r2_score`` does). "raw_values": a score, p-value and null per
        target.
    alternative : {"greater", "less", "two-sided"}, default="greater"
        Which permuted scores count as at least as extreme as ``score_``,
        as :func:`scipy.stats.permutation_test` defines it: those ``>=
        score_`` (better than chance), those ``<= score_``, or twice the
        smaller one-sided p-value, clipped to 1. Every p-value follows it.
    permutation_type : {"shuffle", "circular_shift", "block_shuffle", \
"sign_flip"}, default="shuffle"
        How the rows of ``y`` move within each group (or the whole series):
        a uniform random permutation, for exchangeable rows only (an
        :class:`~skbatch.AutocorrelationWarning` when ``y`` is clearly
        autocorrelated); each run rotated by a random offset; blocks of
        ``block_size`` rows permuted; or, for a one-sample test of a numeric
        ``y`` symmetric about 0, rows (all rows of a group together) times
        random signs.
    block_size : int or None, default=None
        Rows per block, required by and only allowed with
        ``permutation_type="block_shuffle"``; at most the smallest group.
    return_null : bool, default=False
        Keep every permuted score in ``permutation_scores_``. Without it
        memory does not grow with ``n_permutations``.
    random_state : int, RandomState instance, Generator or None, default=0
        Seeds the permutations: permutation i depends on this and i alone,
        whatever the batches, ``n_jobs`` or path. The default,
        :data:`skbatch.random.DEFAULT_RANDOM_STATE`, makes a rerun give the
        same p-values; None draws fresh permutations every fit.
    n_jobs : int or None, default=None
        Workers of the generic path (joblib convention, and
        ``joblib.parallel_config``); the ridge fast path ignores it.
    device : str or Backend, default="auto"
        Where the ridge fast path computes; see
        :func:`skbatch.resolve_backend`.
    max_memory_gb : float or None, default=None
        Memory budget in GB, for device batches, generic-path windows and
        the retained null; None measures free memory. Also the budget of
        the fit of ``estimator_`` on all data, for an estimator that takes
        ``max_memory_gb`` and was given none (``estimator_`` then holds
        it), so that every stage of ``fit_report_`` is planned against it.
    verbose : int, default=0
        1: print each loop's plan and summary, why a ridge-like estimator
        is refit, and progress; 2: also log every batch and out-of-memory
        recovery on the ``skbatch`` logger.

    Attributes
    ----------
    score_ : float or ndarray of shape (n_targets,)
        Cross-validated score on the true ``y``. With several metrics, this
        and every p-value, null moment and ``permutation_scores_`` are dicts
        keyed by metric name, each as a fit with that metric alone.
    pvalue_ : float or ndarray of shape (n_targets,)
        ``(C + 1) / (n_permutations + 1)``, C counting the permuted scores
        at least as extreme (``alternative``), ties included; with
        ``exact_``, ``C / n_permutations_``, the identity among them.
    pvalue_fwer_ : float or ndarray of shape (n_targets,)
        Family-wise p-value by the max statistic: the share (with the same
        +1) of permutations whose most extreme score over targets (per
        ``alternative``) reaches the target's ``score_``. This and the
        other corrections equal ``pvalue_`` for "uniform_average".
    pvalue_fdr_ : float or ndarray of shape (n_targets,)
        Benjamini–Hochberg adjusted ``pvalue_``, as
        :func:`scipy.stats.false_discovery_control`; NaN targets left out.
    pvalue_holm_ : float or ndarray of shape (n_targets,)
        Holm's step-down adjusted ``pvalue_``; NaN targets left out.
    pvalue_by_ : float or ndarray of shape (n_targets,)
        Benjamini–Yekutieli adjusted ``pvalue_``; NaN targets left out.
    null_mean_ : float or ndarray of shape (n_targets,)
        Mean of the permuted scores.
    null_std_ : float or ndarray of shape (n_targets,)
        Standard deviation (ddof=1) of the permuted scores.
    permutation_scores_ : ndarray
        Of shape ``(n_permutations_,)``, or ``(n_permutations_, n_targets)``
        with ``multioutput="raw_values"``. Every permuted score, row i from
        permutation i (row 0 the identity with ``exact_``); only with
        ``return_null=True``.
    n_permutations_ : int
        Permutations scored: ``n_permutations``, or the number of distinct
        ones with ``exact_``.
    exact_ : bool
        Whether every distinct permutation was scored once, not drawn.
    estimator_ : estimator object
        Clone of ``estimator`` fit on all data; ``predict`` and ``score``
        delegate to it.
    backend_ : Backend
        Where the fast path computed (resolved from ``device``).
    fit_report_ : FitReport
        How the fit ran: the loops of the fit of ``estimator_``, then the
        permutations' batches (or joblib windows).
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen in fit, when X has string column names.

    See Also
    --------
    sklearn.model_selection.permutation_test_score : Same test, one score,
        refitting the estimator for every permutation.
    skbatch.plotting.PermutationTestDisplay : The null and the p-values.

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
    ... ).fit(X, Y)
    >>> float(perm.pvalue_[0])  # the smallest possible: 1 / (99 + 1)
    0.01
    >>> bool(perm.pvalue_[1] > 0.05), bool(perm.score_[0] > 0.5)
    (True, True)

    Autocorrelated rows (three runs of a time series): rotate each run
    instead of shuffling it. A one-sample test (``y`` symmetric about 0
    under the null hypothesis): flip the signs of whole runs.

    >>> runs = np.repeat([0, 1, 2], 20)
    >>> perm = PermutationScorer(
    ...     Ridge(alpha=1.0), n_permutations=99, permutation_type="circular_shift",
    ...     cv=GroupKFold(3),
    ... ).fit(X, signal, groups=runs)
    >>> bool(perm.pvalue_ <= 0.05)
    True
    >>> flips = PermutationScorer(
    ...     Ridge(alpha=1.0), n_permutations=99, permutation_type="sign_flip",
    ...     cv=GroupKFold(3),
    ... ).fit(X, signal, groups=runs)
    >>> flips.exact_, flips.n_permutations_  # 2**3 sign vectors of 3 runs
    (True, 8)

    Beyond a confound: the target adds a nuisance variable (``motion``) to
    ``signal``; X still predicts it beyond that variable.

    >>> motion = rng.standard_normal((60, 1))
    >>> beyond = PermutationScorer(Ridge(alpha=1.0), n_permutations=99).fit(
    ...     X, signal + motion[:, 0], confounds=motion
    ... )
    >>> float(beyond.pvalue_), bool(beyond.score_ > 0.1)
    (0.01, True)
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
    def fit(self, X, y, groups=None, confounds=None, **fit_params):
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
            sign. Also passed to a ``cv`` splitter that uses groups, and to
            every fit of an estimator that takes ``groups`` (under metadata
            routing, one that requests them), sliced to its rows: nested
            leave-one-run-out, on both paths.
        confounds : array-like of shape (n_samples, n_confounds), default=None
            Nuisance variables (nilearn's ``confounding_vars``): test the
            score of X beyond them, by Freedman and Lane's scheme. The
            statistic is the cross-validated score of the estimator on X
            with the confounds as its last columns, less that of least
            squares on the confounds with an intercept, on the same folds;
            the null permutes (or sign-flips, within ``groups``) the
            residuals of the least-squares fit of ``y`` on the confounds
            (all rows, weighted by a ``sample_weight`` fit parameter) and
            adds them back to its fitted values. ``score_`` and every
            p-value and null are then of that gain; ``estimator_`` is fit
            on ``np.column_stack([X, confounds])``, which ``predict`` and
            ``score`` take; a pipeline transforms the confound columns as
            it does X's (a ``Delayer`` delays them too). See the
            :ref:`User Guide <permutation-confounds>`.
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
        settings = Settings.of(self)
        estimator = self._get_estimator()
        inputs = self._fit_inputs(estimator, X, y, groups, fit_params)
        nuisance = None
        if confounds is not None:
            inputs, nuisance = confounded_inputs(estimator, inputs, confounds)
        metrics = _metrics(self.scoring)
        n_stats = len(metrics) * (inputs.n_targets if settings.raw else 1)
        _check_host_memory(settings, n_stats)
        # With confounds, the reduced model's residuals are what moves.
        permutation, n_items = _plan_resamples(
            settings,
            estimator,
            inputs.y if nuisance is None else nuisance.residuals,
            inputs.groups,
            "y" if nuisance is None else "y's residuals on the confounds",
        )
        entropy = resolve_entropy(self.random_state)
        resamples = Resamples(entropy, permutation, n_items)
        # The folds, the device and the memory may refuse: before any fit.
        paths = self._choose_paths(
            settings, estimator, inputs, metrics, n_items, n_stats
        )
        if nuisance is not None:
            check_confounded_memory(settings, paths, nuisance, n_items)
        self.estimator_ = fit_under_budget(estimator, settings.max_memory_gb).fit(
            inputs.X_fit, inputs.y_fit, **paths.refits
        )
        if nuisance is None:
            backend, counters = run_paths(settings, estimator, inputs, resamples, paths)
        else:
            backend, counters = run_confounded_paths(
                settings, estimator, inputs, resamples, paths, nuisance
            )
        warn_if_undefined(counters)
        self._set_results(settings, counters, resamples)
        self.backend_ = backend
        return self

    def _fit_inputs(self, estimator, X, y, groups, fit_params):
        """The data of the fit, validated before any work (:class:`FitInputs`)."""
        inner_tags = get_tags(estimator).input_tags
        X_given, y_given, X_valid, y_valid, groups, fit_params = self._check_fit_input(
            X,
            y,
            groups,
            fit_params,
            # Row-indexable formats, for slicing folds.
            accept_sparse=["csr", "csc"] if inner_tags.sparse else False,
            y_numeric=not is_classifier(estimator),
        )
        # A DataFrame or Series reaches the estimator as the user gave it.
        X_fit = estimator_input(X_given, X_valid)
        y_fit = estimator_input(y_given, y_valid)
        return FitInputs(
            X_valid, y_valid, X_fit, y_fit, X_given, y_given, groups, fit_params
        )

    def _choose_paths(self, settings, estimator, inputs, metrics, n_items, n_stats):
        """The outer folds and the path of each metric (:class:`Paths`), each
        path planned and its memory checked: the ridge fast path for an
        estimator and data it serves (see
        :func:`~skbatch._permutation.plan._fast_path`) and the scorings it
        computes, refits otherwise."""
        cv = check_cv(self.cv, inputs.y, classifier=is_classifier(estimator))
        splits = _split_rows(cv, inputs.X_fit, inputs.y, inputs.groups)
        # The generic path's; the fast path's weighs its work ("auto").
        backend = resolve_backend(self.device)
        spec, reason = _fast_path(settings, estimator, inputs, cv, splits)
        fast, slow = _split_metrics(settings, estimator, spec, reason, metrics)
        # The estimator's fits get the rows' groups when they take them.
        refits = refit_params(estimator, inputs.groups, inputs.fit_params)
        ridge = None
        if fast:
            ridge = _plan_ridge(
                settings, inputs, splits, spec, n_items, refits.get("groups")
            )
        if slow:
            _check_refit_memory(settings, inputs, n_stats)
        return Paths(cv, splits, backend, metrics, fast, slow, ridge, refits)

    def _set_results(self, settings, counters, resamples):
        """The fitted scores, p-values and null of every metric's counter."""

        def each(value):
            # One metric: its value; several: a dict by metric name.
            values = {name: value(counter) for name, counter in counters.items()}
            return values[None] if None in values else values

        raw = settings.raw
        self.score_ = each(lambda c: c.observed if raw else float(c.observed))
        self.pvalue_ = each(PermutationCounter.pvalue)
        self.pvalue_fwer_ = each(PermutationCounter.pvalue_fwer)
        self.pvalue_fdr_ = each(PermutationCounter.pvalue_fdr)
        self.pvalue_holm_ = each(lambda c: c.pvalue_adjusted("holm"))
        self.pvalue_by_ = each(lambda c: c.pvalue_adjusted("by"))
        self.null_mean_ = each(lambda c: c.null_mean)
        self.null_std_ = each(lambda c: c.null_std)
        if settings.return_null:
            self.permutation_scores_ = each(lambda c: c.null)
        self.n_permutations_ = resamples.n_items
        self.exact_ = resamples.permutation["exact"]
