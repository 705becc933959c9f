"""BandedRidge: one regularisation per feature space, chosen per target."""

import dataclasses
import numbers

import numpy as np
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.utils._param_validation import Interval

from ._estimators.banded_held import HeldBandedRidge, held_banded_ridge
from ._estimators.banded_scores import SPLIT_SCORINGS, band_predictions, band_shares
from ._estimators.base import (
    DeviceMixin,
    as_output,
    atomic_fit,
    check_max_memory_gb,
    check_verbose,
    host_input,
)
from ._kernels import linalg as _linalg
from ._ridge.banded import (
    BandedSpec,
    check_band_weights,
    check_bands,
    check_concentration,
    n_candidates,
)
from ._ridge.banded.fit import fit_banded_ridge
from ._ridge.covariance import check_decomposition
from ._ridge.cv import cv_scheme
from ._ridge.problems import fit_flops
from ._ridge.spec import batched_ridge_spec, check_alphas, resolve_dtype
from .backend import resolve_backend
from .random import DEFAULT_RANDOM_STATE, check_groups
from .ridge import (
    DEFAULT_ALPHAS,
    BatchedRidge,
    LinearPredictMixin,
    fit_data,
)

__all__ = ["BandedRidge", "HeldBandedRidge", "held_banded_ridge"]

# Weights of the Dirichlet draws: sparse (0.1, near the vertices of the
# simplex, one band dominating) and flat (1.0, the interior), as himalaya's
# random search cycles them.
DEFAULT_CONCENTRATION = (0.1, 1.0)


class BandedRidge(
    DeviceMixin, LinearPredictMixin, MultiOutputMixin, RegressorMixin, BaseEstimator
):
    """Banded ridge: one alpha per feature space (band), chosen per target.

    The model of each target minimises ``||y - sum_b X_b w_b||^2 + sum_b
    alpha_b ||w_b||^2`` over bands ``X_b`` of the columns of X, with
    ``alpha_b = alpha / gamma_b`` for band weights ``gamma`` on the simplex:
    ridge at one ``alpha`` on X's bands rescaled by ``sqrt(gamma_b)``. Each
    candidate ``gamma`` is decomposed once for every target and alpha, as in
    :class:`BatchedRidge`; each target keeps the (candidate, alpha) pair of
    best cross-validated score. Read more in the :ref:`User Guide <banded>`.

    Parameters
    ----------
    bands : None, array-like of shape (n_features,) or list of array-like, \
default=None
        A label (int >= 0 or str) per column of X, columns of one band
        possibly interleaved, or a list of arrays of column indices, one per
        band, disjoint and covering every column. None: one band, which is
        :class:`BatchedRidge`. Labels are ordered as ``np.unique`` sorts
        them (himalaya's order of ``groups``), index arrays as listed: that
        order is ``band_names_``, and band b is column b of
        ``band_weights``. A mapping or a set is refused.
    alphas : float or array-like of shape (n_alphas,), default=DEFAULT_ALPHAS
        Positive values of the overall alpha to choose from, as for
        :class:`BatchedRidge`.
    band_weights : int or array-like of shape (n_candidates, n_bands), \
default=100
        int m: m candidates, the first weighting every band equally, the
        others Dirichlet draws whose concentration cycles through
        ``concentration``, from ``random_state`` (himalaya's random search's
        candidates for an int ``random_state`` below 2**32); a count whose
        candidates cannot fit the memory budget is refused before any is
        drawn. An array: explicit candidates, non-negative and finite, no
        row all zero, each row normalised to sum to 1; a weight below 1e-12
        of its row's largest is taken as 0. With one band there is one
        candidate, weight 1. See the :ref:`User Guide <banded-candidates>`.
    concentration : float or sequence of float, default=(0.1, 1.0)
        Concentrations of the Dirichlet draws: small values give candidates
        near the vertices of the simplex (one band dominating), 1.0 uniform
        ones over it.
    local_alpha : bool, default=True
        True: each target chooses its (candidate, alpha) pair. False: one
        pair for all targets, that of the best CV score averaged over the
        targets, band weights included; the scores of every pair of every
        target are then held (as with ``store_cv_results``). See the
        :ref:`User Guide <banded-shared>`.
    cv : None, "gcv", int, CV splitter or iterable of splits, default=None
        None: exact leave-one-out; ``"gcv"``: generalized cross-validation;
        else K-fold, the same folds for every candidate. As
        :class:`BatchedRidge`.
    fit_intercept : bool, default=True
        Whether to fit an intercept.
    scoring : {None, "r2", "neg_mean_squared_error", "correlation"}, \
default=None
        Criterion of the choice, as for :class:`BatchedRidge`.
    dtype : {"auto", "float32", "float64"}, default="auto"
        Compute dtype, as for :class:`BatchedRidge`.
    solver : {"auto", "svd", "covariance"}, default="auto"
        How the design is decomposed, as for :class:`BatchedRidge`. "svd":
        a thin SVD of each candidate's rescaled design on all rows and on
        each training fold (through one QR of X's rows where that saves
        work). "covariance" (K-fold ``cv`` only): X's weighted moments
        formed once, each fold's training covariance ``C`` as all rows'
        less its test rows', and per candidate and fold one ``eigh`` of
        ``D C D`` (``D`` the square roots of the band weights), serving
        every alpha: no product over the rows per candidate and no n x p
        factor, far faster when the rows outnumber the features (EEG and
        MEG temporal response functions of several feature spaces). Its
        relative error is about ``eps * cond(D C D + alpha I)`` at the
        smallest alpha. "auto": the covariance for K-fold ``cv`` when every
        training fold has at least 20 times as many rows as X has columns
        (the SVD search shares one QR of each fold's rows among the
        candidates: below that it was as fast or faster) and the bound
        ``eps * (g_max l_max + alpha) / (g_min l_min + alpha)`` of that
        error over every candidate and fold (``g`` the candidate's
        positive band weights, ``l`` the eigenvalues of the fold's ``C``)
        is at most 1e-10 (then the choices and coefficients agree with the
        SVD's to 1e-10 relative), the SVD otherwise. One band (``bands=None``)
        is :class:`BatchedRidge`'s rule. See the
        :ref:`User Guide <banded-solver>`.
    n_targets_batch : "auto" or int, default="auto"
        Targets per batch; "auto" sizes batches from the memory budget.
    store_cv_results : bool, default=False
        Keep the score of every (candidate, alpha) pair of every target in
        ``cv_results_``; its memory is counted before the fit.
    device : str or Backend, default="auto"
        Where to compute; see :func:`skbatch.resolve_backend`.
    max_memory_gb : float or None, default=None
        Memory budget in GB; None measures free memory.
    random_state : int, RandomState instance, Generator or None, default=0
        Seeds the Dirichlet draws of the candidates. The default,
        :data:`skbatch.random.DEFAULT_RANDOM_STATE` (0), makes a rerun draw
        the same candidates; None draws fresh ones every fit.
    verbose : int, default=0
        1: the plan of each loop, progress bars over the target batches and a
        summary (the share of targets per winning candidate); 2: also logs.

    Attributes
    ----------
    coef_ : ndarray of shape (n_targets, n_features) or (n_features,)
        Coefficients over X's columns, in ``dtype_``; exactly 0 in a band of
        weight 0. 1-D for 1-D ``y``; a 2-D ``y`` of one column keeps 2-D
        attributes, as for :class:`BatchedRidge`.
    intercept_ : ndarray of shape (n_targets,) or float
        Intercepts (0.0 without ``fit_intercept``).
    alpha_ : ndarray of shape (n_targets,) or float
        The chosen overall alpha; a float for 1-D ``y``. With
        ``local_alpha=False`` every target's is the same, as are its rows of
        ``band_weights_`` and ``band_alphas_``.
    band_weights_ : ndarray of shape (n_targets, n_bands) or (n_bands,)
        The chosen candidate ``gamma`` of each target.
    band_alphas_ : ndarray of shape (n_targets, n_bands) or (n_bands,)
        ``alpha_ / band_weights_``, the alpha of each band: inf for a band
        of weight 0 (left out of the model).
    best_score_ : ndarray of shape (n_targets,) or float
        Cross-validated score of the chosen pair (NaN where every pair
        scored NaN); with ``local_alpha=False``, each target's score at the
        shared pair.
    candidates_ : ndarray of shape (n_candidates, n_bands)
        The candidates searched, rows summing to 1.
    band_names_ : ndarray of shape (n_bands,)
        The labels of ``bands`` sorted, or 0 .. k-1 for index arrays and
        None: the order of the columns of ``band_weights``, ``candidates_``
        and ``band_alphas_``.
    cv_results_ : dict
        With ``store_cv_results=True``: ``"alphas"``, ``"candidates"`` and
        ``"scores"`` of shape (n_targets, n_candidates, n_alphas) (or
        (n_candidates, n_alphas) for 1-D y).
    dtype_ : numpy dtype
    solver_ : {"svd", "covariance"}
        The decomposition the fit used (see ``solver``).
    backend_ : Backend
    fit_report_ : FitReport
        A stage for the search over the targets and one for their refit.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)

    See Also
    --------
    BatchedRidge : One alpha for all columns.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch import BandedRidge
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((200, 30))
    >>> bands = ["motion"] * 10 + ["semantic"] * 20
    >>> w = np.concatenate([rng.standard_normal(10), np.zeros(20)])
    >>> y = X @ w + 0.5 * rng.standard_normal(200)
    >>> model = BandedRidge(bands, band_weights=20, alphas=np.logspace(-2, 3, 6))
    >>> model = model.fit(X, y)
    >>> model.band_names_.tolist()
    ['motion', 'semantic']
    >>> bool(model.band_alphas_[0] < model.band_alphas_[1])
    True
    >>> bool(np.isclose(model.score_per_band(X, y).sum(), model.score(X, y)))
    True
    """

    def __init__(
        self,
        bands=None,
        *,
        alphas=DEFAULT_ALPHAS,
        band_weights=100,
        concentration=DEFAULT_CONCENTRATION,
        local_alpha=True,
        cv=None,
        fit_intercept=True,
        scoring=None,
        dtype="auto",
        solver="auto",
        n_targets_batch="auto",
        store_cv_results=False,
        device="auto",
        max_memory_gb=None,
        random_state=DEFAULT_RANDOM_STATE,
        verbose=0,
    ):
        self.bands = bands
        self.alphas = alphas
        self.band_weights = band_weights
        self.concentration = concentration
        self.local_alpha = local_alpha
        self.cv = cv
        self.fit_intercept = fit_intercept
        self.scoring = scoring
        self.dtype = dtype
        self.solver = solver
        self.n_targets_batch = n_targets_batch
        self.store_cv_results = store_cv_results
        self.device = device
        self.max_memory_gb = max_memory_gb
        self.random_state = random_state
        self.verbose = verbose

    _parameter_constraints = {
        **{
            name: constraint
            for name, constraint in BatchedRidge._parameter_constraints.items()
            if name != "alpha_per_target"
        },
        # Checked with the data (the number of columns) by
        # skbatch._ridge.banded, naming the parameter.
        "bands": "no_validation",
        "band_weights": "no_validation",
        "concentration": "no_validation",
        "local_alpha": ["boolean"],
        # As resolve_entropy reads it (skbatch.random), the other
        # estimators' seeds: any int >= 0, a RandomState or a Generator.
        "random_state": [
            Interval(numbers.Integral, 0, None, closed="left"),
            np.random.RandomState,
            np.random.Generator,
            None,
        ],
    }

    # Under metadata routing, groups given to a meta-estimator reach fit
    # unasked, as for BatchedRidge.
    __metadata_request__fit = {"groups": True}

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.array_api_support = False
        return tags

    def __skbatch_banded_spec__(self):
        """The banded problem ``fit`` solves, for the permutation fast path
        (:func:`skbatch._ridge.banded.banded_spec`); None when the parameters
        are invalid (``fit`` then says why), for a subclass, when every
        fit draws other candidates (``random_state`` not an int), or for a
        pair shared by all targets (``local_alpha=False``), which that path
        does not choose."""
        if type(self) is not BandedRidge or self.local_alpha is not True:
            return None
        params = self.get_params(deep=False)
        drawn = isinstance(self.band_weights, numbers.Integral)
        if drawn and not isinstance(self.random_state, numbers.Integral):
            return None
        spec = batched_ridge_spec({**params, "alpha_per_target": True})
        if spec is None:
            return None
        return BandedSpec(
            **dataclasses.asdict(spec),
            bands=self.bands,
            band_weights=self.band_weights,
            concentration=self.concentration,
            random_state=self.random_state,
        )

    def _check_params(self):
        self._validate_params()
        alphas = check_alphas(self.alphas)
        scheme = cv_scheme(self.cv, self.scoring)
        check_decomposition(self.solver, scheme)
        concentration = check_concentration(self.concentration)
        check_max_memory_gb(self.max_memory_gb)
        check_verbose(self.verbose)
        return alphas, scheme, concentration

    @atomic_fit
    def fit(self, X, y, sample_weight=None, groups=None):
        """Search the band weights and alphas, and fit every target.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data (numpy, torch or jax arrays are accepted).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets; 2-D targets on disk are read one batch at a time, as
            for :class:`BatchedRidge`.
        sample_weight : float or array-like of shape (n_samples,), default=None
            Non-negative sample weights, as for :class:`BatchedRidge`.
        groups : array-like of shape (n_samples,), default=None
            Group (run) of each sample, for a ``cv`` splitter that uses
            groups (``GroupKFold``, ``LeaveOneGroupOut``...), as for
            :class:`BatchedRidge`: time series in runs should be fit with
            ``cv=LeaveOneGroupOut()`` and ``groups=runs``.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        alphas, scheme, concentration = self._check_params()
        X, y, Y, sample_weight, out_of_core = fit_data(self, X, y, sample_weight)
        n_samples, n_features = X.shape
        columns, names = check_bands(self.bands, n_features)
        weights = check_band_weights(self.band_weights, len(columns))
        count = n_candidates(weights, len(columns))
        n_targets = Y.shape[1]
        groups = check_groups(host_input(groups)[0], n_samples)
        scheme.split(
            X, None if out_of_core else y, sample_weight, self.scoring, groups=groups
        )
        flops = fit_flops(n_samples, n_features, n_targets, alphas.size, scheme, count)
        self.backend_ = resolve_backend(self.device, flops=flops)
        self.dtype_ = resolve_dtype(self.dtype, self.backend_, X.dtype)
        found = fit_banded_ridge(
            X,
            Y,
            sample_weight,
            groups,
            alphas,
            scheme,
            columns,
            weights,
            concentration,
            self.backend_,
            self.dtype_,
            out_of_core=out_of_core,
            cv=self.cv,
            fit_intercept=self.fit_intercept,
            scoring=self.scoring,
            local_alpha=self.local_alpha,
            store_cv_results=self.store_cv_results,
            random_state=self.random_state,
            batch_size=self.n_targets_batch,
            max_memory_gb=self.max_memory_gb,
            verbose=self.verbose,
            solver=self.solver,
        )
        self.solver_ = found.decomposition
        one_target = not out_of_core and y.ndim == 1
        if not self.fit_intercept:
            found.intercept[:] = 0
        self.candidates_ = found.candidates
        self.band_names_ = names
        coef, intercept, alpha = found.coef, found.intercept, found.alpha
        band_weights, band_alphas = found.band_weights, found.band_alphas
        self.coef_ = coef[0] if one_target else coef
        self.intercept_ = float(intercept[0]) if one_target else intercept
        self.alpha_ = float(alpha[0]) if one_target else alpha
        self.band_weights_ = band_weights[0] if one_target else band_weights
        self.band_alphas_ = band_alphas[0] if one_target else band_alphas
        self.best_score_ = (
            float(found.best_score[0]) if one_target else found.best_score
        )
        self._band_columns = columns
        if self.store_cv_results:
            self.cv_results_ = {
                "alphas": alphas,
                "candidates": found.candidates,
                "scores": found.stored[0] if one_target else found.stored,
            }
        return self

    def predict_per_band(self, X):
        """The prediction of each band, without the intercept.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        y_pred : array of shape (n_bands, n_samples, n_targets) or \
(n_bands, n_samples)
            ``X_b @ coef_b`` for every band b; summed over bands and plus
            ``intercept_`` they are ``predict(X)``. numpy for numpy input,
            else the input's library.

        Examples
        --------
        >>> import numpy as np
        >>> from skbatch import BandedRidge
        >>> rng = np.random.default_rng(0)
        >>> X, Y = rng.standard_normal((40, 6)), rng.standard_normal((40, 2))
        >>> model = BandedRidge([0, 0, 1, 1, 1, 1], band_weights=5).fit(X, Y)
        >>> parts = model.predict_per_band(X)
        >>> parts.shape
        (2, 40, 2)
        >>> bool(np.allclose(parts.sum(0) + model.intercept_, model.predict(X)))
        True
        """
        X, source = self._validated_X(X)
        parts = band_predictions(X, self.coef_, self._band_columns, self.dtype_)
        return as_output(parts, source)

    def score_per_band(self, X, y, sample_weight=None, scoring="r2"):
        """Each band's share of the R^2 (or correlation) of every target.

        R^2 is split by the product measure (himalaya's ``r2_score_split``),
        the correlation as :func:`skbatch.correlation_score_split` splits it;
        with ``sample_weight``, every mean, inner product and norm is
        weighted, as ``r2_score(sample_weight=...)`` weighs R^2. The
        :ref:`User Guide <banded-scores>` gives the formulas.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights of the rows in every target's score.
        scoring : {"r2", "correlation"}, default="r2"
            The score split.

        Returns
        -------
        scores : ndarray of shape (n_bands, n_targets)
            Summed over bands, ``score_per_target(X, y, sample_weight,
            scoring=scoring)`` (to rounding); NaN for the correlation where
            the prediction's is undefined.

        Examples
        --------
        >>> import numpy as np
        >>> from skbatch import BandedRidge
        >>> rng = np.random.default_rng(0)
        >>> X = rng.standard_normal((60, 6))
        >>> Y = X[:, :2] @ rng.standard_normal((2, 3)) + rng.standard_normal((60, 3))
        >>> model = BandedRidge([0, 0, 1, 1, 1, 1], band_weights=5).fit(X, Y)
        >>> shares = model.score_per_band(X, Y)
        >>> shares.shape
        (2, 3)
        >>> bool(np.allclose(shares.sum(0), model.score_per_target(X, Y)))
        True
        """
        if scoring not in SPLIT_SCORINGS:
            raise ValueError(
                f"scoring must be one of {SPLIT_SCORINGS} for score_per_band, got "
                f"{scoring!r}"
            )
        X, _ = self._validated_X(X)
        shares = band_shares(
            X,
            y,
            sample_weight,
            self.coef_,
            self.intercept_,
            self._band_columns,
            scoring,
        )
        # Once for all blocks: the R^2 of fewer than 2 rows is undefined.
        _linalg.warn_undefined(
            shares.sum(axis=0), scoring, n_rows=X.shape[0], stacklevel=2
        )
        return shares
