"""BatchedRidge: ridge regression for one to hundreds of thousands of targets."""

import numbers

import numpy as np
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin

# Private to scikit-learn, without a public twin: the parameter constraints
# its estimators declare (_parameter_constraints, checked by
# _validate_params, raising InvalidParameterError). tests/test_private_names.py
# checks what is relied on here.
from sklearn.utils._param_validation import Interval, StrOptions

from ._estimators.base import (
    DeviceMixin,
    atomic_fit,
    check_max_memory_gb,
    check_verbose,
    host_input,
)

# Names banded.py imports from here.
from ._estimators.fit_checks import fit_data
from ._estimators.predict import LinearPredictMixin, score_weights  # noqa: F401
from ._ridge.batched import fit_batched_ridge
from ._ridge.covariance import DECOMPOSITIONS, check_decomposition
from ._ridge.cv import cv_scheme
from ._ridge.fit_warnings import (  # noqa: F401
    AlphaEdgeWarning,
    AutocorrelationWarning,
    no_model_scores,
    warn_at_grid_edges,
    warn_if_autocorrelated,
)
from ._ridge.magnitudes import checked_targets  # noqa: F401
from ._ridge.problems import fit_flops
from ._ridge.spec import SCORINGS, batched_ridge_spec, check_alphas, resolve_dtype
from .backend import resolve_backend
from .random import check_groups

__all__ = ["AlphaEdgeWarning", "AutocorrelationWarning", "BatchedRidge"]

# Half decades from 0.1 to 1e5: small alphas for clean targets, up to the
# 1e4-1e5 that noisy targets with thousands of standardised rows need.
DEFAULT_ALPHAS = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1e3, 3e3, 1e4, 3e4, 1e5)


class BatchedRidge(
    DeviceMixin, LinearPredictMixin, MultiOutputMixin, RegressorMixin, BaseEstimator
):
    """Ridge regression for many targets, with a per-target alpha chosen by CV.

    One thin SVD of the centred design matrix (one per fold for K-fold)
    serves every target and every alpha: targets are projected once onto
    the SVD basis and all alphas are evaluated from that projection. Targets
    are processed in batches sized from the measured memory budget, on
    numpy, PyTorch or JAX, and out-of-memory errors are recovered from by
    splitting batches, without changing the result.

    Parameters
    ----------
    alphas : float or array-like of shape (n_alphas,), default=DEFAULT_ALPHAS
        Positive regularisation strengths to choose from. The default, 13
        values from 0.1 to 1e5 in half decades (1, 3, 10...), serves
        standardised encoding-model data: with n rows of standardised
        features the data term of ridge grows like n, so hundreds to
        thousands of rows of noisy targets need alphas of 1e2 to 1e5, which
        scikit-learn's ``(0.1, 1, 10)`` (a default for small tabular data)
        never reaches. After fit, a warning says when a notable share of
        targets chose an edge of the grid (see Notes).
    cv : None, "gcv", int, CV splitter or iterable of splits, default=None
        None: exact leave-one-out (the choice of sklearn's ``RidgeCV``).
        ``"gcv"``: generalized cross-validation, cheaper still. Both assume
        independent rows: for time series in runs (fMRI, EEG) use
        ``LeaveOneGroupOut()`` with ``fit(X, y, groups=runs)`` (see Notes).
        int, splitter or iterable of (train, test) index arrays: K-fold;
        per-target alpha is supported with it. A group splitter gets the
        ``groups`` of ``fit``. The score of each alpha is
        the unweighted mean of its fold scores, as in ``GridSearchCV``.
        Every fold needs at least 2 training rows and 1 test row.
    alpha_per_target : bool, default=True
        Choose an alpha for each target; False chooses one alpha for all,
        maximising the score averaged over targets.
    fit_intercept : bool, default=True
        Whether to fit an intercept.
    scoring : {None, "r2", "neg_mean_squared_error", "correlation"}, \
default=None
        Criterion of the alpha choice, computed per target on the device.
        None: squared error for leave-one-out and GCV, R^2 for K-fold.
        GCV supports only None.
    dtype : {"auto", "float32", "float64"}, default="auto"
        Compute dtype. "auto": float32 for float32 ``X`` (as scikit-learn's
        ``Ridge``) and on a GPU, float64 otherwise; predictions are float32
        only for a float32 model and float32 ``X``.
    solver : {"auto", "svd", "covariance"}, default="auto"
        How the design is decomposed. "svd": a thin SVD of all rows and of
        each training fold. "covariance" (K-fold ``cv`` only): one ``eigh``
        of each training fold's p x p covariance, formed from the moments of
        its test rows subtracted from those of all rows, serving every alpha;
        no n x p factor is formed, which is far faster and smaller when the
        rows outnumber the features (EEG and MEG temporal response
        functions). It squares the condition number: its relative error is
        about ``eps * cond(X'X + alpha I)`` at the smallest alpha. "auto":
        the covariance for K-fold ``cv`` when every training fold has at
        least twice as many rows as features and that error is at most 1e-10
        (then alphas and coefficients agree with the SVD's to 1e-10
        relative), the SVD otherwise (leave-one-out, GCV, p > n / 2,
        ill-conditioned designs).
    n_targets_batch : "auto" or int, default="auto"
        Targets per batch; "auto" sizes batches from the memory budget.
    store_cv_results : bool, default=False
        Keep the score of every alpha for every target in ``cv_results_``.
    device : str or Backend, default="auto"
        Where to compute; see :func:`skbatch.resolve_backend`.
    max_memory_gb : float or None, default=None
        Memory budget in GB; None measures free memory.
    verbose : int, default=0
        1: print the plan of each loop before it runs and a summary after it
        (plain lines on stdout), and a progress bar over the target batches on a
        terminal or in a notebook; where no bar shows (a log file), a line of
        progress (done, elapsed, left) at every 10% of a loop estimated to
        take 10 s or more and at least every 30 s; 2: also log the plans,
        every batch and the out-of-memory recoveries on the ``skbatch``
        logger.

    Attributes
    ----------
    coef_ : ndarray of shape (n_targets, n_features) or (n_features,)
        Coefficients at the chosen alphas, in ``dtype_``; 1-D for 1-D ``y``.
        A 2-D ``y`` of one column keeps 2-D attributes and predictions, as
        ``LinearRegression`` does (scikit-learn's ``Ridge`` ravels it).
    intercept_ : ndarray of shape (n_targets,) or float
        Intercepts, in ``dtype_`` (0.0 when ``fit_intercept=False``).
    solver_ : {"svd", "covariance"}
        The decomposition the fit used (see ``solver``).
    alpha_ : ndarray of shape (n_targets,) or float
        Chosen alpha per target; a float for 1-D ``y`` or
        ``alpha_per_target=False``. With ``sample_weight``, leave-one-out
        and K-fold choose it on the scale of the weights as given
        (``coef_`` is that of ``Ridge(alpha=alpha_)`` fit with them);
        ``cv="gcv"`` on the scale of the weights normalised to sum to
        ``n_eff``, the number of rows of non-zero weight: ``coef_`` is then
        that of ``Ridge(alpha=alpha_ * sum(sample_weight) / n_eff)`` fit
        with the weights as given, and ``alpha_`` does not change when all
        weights are multiplied by a constant (see Notes).
    best_score_ : ndarray of shape (n_targets,) or float
        Cross-validated score at the chosen alpha (higher is better; minus
        the mean squared error when ``scoring=None`` with LOO or GCV). NaN
        where every alpha scored NaN; with one alpha for all targets, the
        mean over targets of the scores at that alpha. Targets NaN at every
        alpha (a constant target scored by correlation) are left out of
        that mean and of the choice of the shared alpha.
    cv_results_ : dict
        With ``store_cv_results=True``: ``"alphas"`` and ``"scores"``, the
        latter of shape (n_targets, n_alphas) (or (n_alphas,) for 1-D y).
    dtype_ : numpy dtype
        Dtype the model computes in.
    backend_ : Backend
        Where the model computes; ``predict`` raises if it is missing.
    fit_report_ : FitReport
        How the fit ran: per loop over targets, the batches, their size,
        out-of-memory splits, planned peak memory and time.
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen in fit, when X has string column names.

    See Also
    --------
    sklearn.linear_model.RidgeCV : Same model, one CPU, LOO or K-fold
        without per-target alpha for K-fold.

    Notes
    -----
    **Choice of alpha.** The best alpha maximises the CV score; ties go to
    the first in ``alphas``. An undefined score is NaN, never a number: R^2
    or correlation of a K-fold test fold of one row (a warning names the
    fold sizes), correlation of a constant target. As ``GridSearchCV`` ranks
    NaN last, alphas scoring NaN are chosen only when every alpha scores NaN;
    then the first alpha is kept and ``best_score_`` is NaN.

    **Edges of the grid.** After fit, a ``UserWarning`` names the edge when
    more than 5% of targets chose the smallest or the largest alpha while
    their score was still improving there (better than at the next alpha by
    more than 1% of the range of their scores over the grid): the grid then
    stops too early, and extending ``alphas`` would change those targets.
    At the largest alpha, targets whose score approaches from below, within
    that 1%, the score of no model at all (predicting the mean: the limit
    of an infinite alpha) are not counted: pure noise always prefers the
    largest alpha, whatever the grid. With ``alpha_per_target=False`` the
    rule applies to the mean score.

    **Time series.** Leave-one-out and GCV leave out one row at a time: with
    autocorrelated rows its neighbours, still in the fit, predict it, and
    the chosen alphas come out far too small (on noise in runs of AR(0.9),
    a median alpha of 4.6e3 where leave-one-run-out chose 1e6). With more
    than one alpha, after fit an :class:`AutocorrelationWarning` says so
    when the residuals are clearly autocorrelated: the median over up to 64
    targets (evenly spaced) of the lag-1 autocorrelation of their residuals,
    within the runs of ``groups`` when given, above 0.3 and above 4 standard
    errors of white noise (``4 / sqrt(n_samples - n_runs)``). Then use
    ``cv=LeaveOneGroupOut()`` (or ``GroupKFold``) and ``groups=runs``, as in
    the Examples.

    **Sample weights.** They weight the training rows in every fit, as in
    ``Ridge`` (with ``cv="gcv"``, once normalised as below), and the scores
    as ``RidgeCV`` uses them: leave-one-out weights each sample's squared
    error (or the named scoring's means), and K-fold weights the held-out
    rows of each fold (``RidgeCV(cv=K)`` since scikit-learn 1.7). With
    ``cv="gcv"`` they are first normalised to sum to ``n_eff``, the number
    of rows of non-zero weight, and the criterion is
    ``(sum_i w_i r_i^2 / n_eff) / (1 - tr(H) / n_eff)^2``, with ``tr(H)``
    the effective degrees of freedom (+1 for the intercept). A row of weight
    0 is then the same as no row, and multiplying all weights by a constant
    changes nothing (equal weights are no weights), whereas ``Ridge`` itself
    reads weights times c as alpha divided by c: ``alpha_`` is that of the
    normalised weights, ``Ridge``'s alpha for the weights as given times
    ``n_eff / sum(sample_weight)``.

    **Targets larger than memory.** A 2-D ``y`` on disk is never held
    whole: its shape, dtype and number of rows are checked first, and each
    batch of targets read is checked for NaN, infinity and magnitudes (the
    error names the first target at fault; the fit is atomic, so nothing is
    published). The fitted arrays stay host numpy, 8 x n_targets x
    (n_features + n_alphas + 3) bytes in all, counted against the memory
    budget before any target is read; past it, fit the targets in parts.

    **Scale.** Nothing squares X, so an X of entries near 1e155 (or 1e-160)
    gives what ``Ridge`` gives in exact arithmetic; data the compute dtype
    cannot represent (an X beyond float32, a y whose squared errors would
    overflow or underflow) is refused with a ValueError saying how to
    rescale it.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch import BatchedRidge
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((100, 5))
    >>> Y = X @ rng.standard_normal((5, 3)) + 0.1 * rng.standard_normal((100, 3))
    >>> model = BatchedRidge(alphas=np.logspace(-2, 2, 5)).fit(X, Y)
    >>> model.coef_.shape, model.alpha_.shape
    ((3, 5), (3,))
    >>> round(model.score(X, Y), 2)
    1.0

    Time series in runs (of unequal length): leave one run out.

    >>> from sklearn.model_selection import LeaveOneGroupOut
    >>> runs = np.repeat([0, 1, 2], [40, 35, 25])
    >>> model = BatchedRidge(cv=LeaveOneGroupOut()).fit(X, Y, groups=runs)
    >>> model.alpha_.shape
    (3,)
    """

    def __init__(
        self,
        alphas=DEFAULT_ALPHAS,
        *,
        cv=None,
        alpha_per_target=True,
        fit_intercept=True,
        scoring=None,
        dtype="auto",
        solver="auto",
        n_targets_batch="auto",
        store_cv_results=False,
        device="auto",
        max_memory_gb=None,
        verbose=0,
    ):
        self.alphas = alphas
        self.cv = cv
        self.alpha_per_target = alpha_per_target
        self.fit_intercept = fit_intercept
        self.scoring = scoring
        self.dtype = dtype
        self.solver = solver
        self.n_targets_batch = n_targets_batch
        self.store_cv_results = store_cv_results
        self.device = device
        self.max_memory_gb = max_memory_gb
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        # Not sklearn's array-API convention: fitted arrays stay host numpy
        # (portable pickles) and the device is chosen by `device`, not by X.
        tags.array_api_support = False
        return tags

    _parameter_constraints = {
        "alphas": ["array-like", Interval(numbers.Real, 0, None, closed="neither")],
        # A string names a scheme of skbatch._ridge.cv.CV_SCHEMES ("gcv"),
        # checked in _check_params.
        "cv": ["cv_object", str],
        "alpha_per_target": ["boolean"],
        "fit_intercept": ["boolean"],
        "scoring": [StrOptions(set(SCORINGS) - {None}), None],
        "dtype": [StrOptions({"auto", "float32", "float64"}), type, np.dtype],
        "solver": [StrOptions(set(DECOMPOSITIONS))],
        "n_targets_batch": [
            StrOptions({"auto"}),
            Interval(numbers.Integral, 1, None, closed="left"),
        ],
        "store_cv_results": ["boolean"],
        # resolve_backend names what is wrong with a device or what is missing.
        "device": "no_validation",
        "max_memory_gb": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "verbose": [Interval(numbers.Integral, 0, None, closed="left")],
    }

    def _check_params(self):
        # Types and ranges as sklearn estimators check them (InvalidParameterError
        # is both a ValueError and a TypeError); then what constraints cannot say.
        self._validate_params()
        alphas = check_alphas(self.alphas)
        scheme = cv_scheme(self.cv, self.scoring)
        check_decomposition(self.solver, scheme)
        check_max_memory_gb(self.max_memory_gb)
        check_verbose(self.verbose)
        return alphas, scheme

    def __skbatch_ridge_spec__(self):
        """The ridge problem ``fit`` solves, for the batched paths of the other
        estimators (:func:`skbatch._ridge.spec.ridge_spec`); None when the
        parameters are invalid (``fit`` then says why) or for a subclass,
        whose ``fit`` may differ."""
        if type(self) is not BatchedRidge:
            return None
        return batched_ridge_spec(self.get_params(deep=False))

    # Under metadata routing, groups given to a meta-estimator reach fit
    # unasked, as they reach RidgeCV's splitter (group splitters request them).
    __metadata_request__fit = {"groups": True}

    @atomic_fit
    def fit(self, X, y, sample_weight=None, groups=None):
        """Fit the model and choose alphas.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data (numpy, torch or jax arrays are accepted).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets. 2-D targets on disk (``numpy.memmap``, ``h5py.Dataset``,
            ``zarr`` or ``dask`` array) are read one batch of targets at a
            time, in whole chunks of their columns, and their values are
            checked as they are read (see Notes).
        sample_weight : float or array-like of shape (n_samples,), default=None
            Non-negative sample weights, not all 0; see Notes for how each
            ``cv`` uses them.
        groups : array-like of shape (n_samples,), default=None
            Group (run) of each sample, passed to a ``cv`` splitter that uses
            groups (``GroupKFold``, ``LeaveOneGroupOut``,
            ``GroupShuffleSplit``...), which then needs them. Splitters that
            ignore groups (``KFold``), leave-one-out and GCV use them only
            for the residual autocorrelation check (see Notes), within runs.
            Under metadata routing they are requested by default.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        alphas, scheme = self._check_params()
        X, y, Y, sample_weight, out_of_core = fit_data(self, X, y, sample_weight)
        n_samples, n_features = X.shape
        n_targets = Y.shape[1]
        groups = check_groups(host_input(groups)[0], n_samples)
        # Splitters that read y (stratified ones) cannot split continuous
        # targets anyway; targets on disk are not read for them.
        scheme.split(
            X, None if out_of_core else y, sample_weight, self.scoring, groups=groups
        )
        flops = fit_flops(n_samples, n_features, n_targets, alphas.size, scheme)
        self.backend_ = resolve_backend(self.device, flops=flops)
        self.dtype_ = resolve_dtype(self.dtype, self.backend_, X.dtype)
        fitted = fit_batched_ridge(
            X,
            Y,
            sample_weight,
            groups,
            alphas,
            scheme,
            self.backend_,
            self.dtype_,
            out_of_core=out_of_core,
            cv=self.cv,
            fit_intercept=self.fit_intercept,
            scoring=self.scoring,
            alpha_per_target=self.alpha_per_target,
            batch_size=self.n_targets_batch,
            max_memory_gb=self.max_memory_gb,
            verbose=self.verbose,
            solver=self.solver,
        )
        coef, intercept, best, best_score, scores, mean_scores, self.solver_ = fitted
        one_target = not out_of_core and y.ndim == 1
        if one_target:
            self.alpha_ = float(alphas[best[0]])
            self.best_score_ = float(best_score[0])
        elif not self.alpha_per_target:
            self.alpha_ = float(alphas[best[0]])
            self.best_score_ = float(mean_scores[best[0]])
        else:
            self.alpha_ = alphas[best]
            self.best_score_ = best_score
        self.coef_ = coef[0] if one_target else coef
        self.intercept_ = float(intercept[0]) if one_target else intercept
        if not self.fit_intercept:
            self.intercept_ = 0.0 if one_target else np.zeros(n_targets, self.dtype_)
        if self.store_cv_results:
            self.cv_results_ = {
                "alphas": alphas,
                "scores": scores[0] if one_target else scores,
            }
        return self
