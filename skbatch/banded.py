"""BandedRidge: one regularisation per feature space, chosen per target."""

import dataclasses
import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.linear_model import Ridge
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from . import _linalg
from ._base import (
    DeviceMixin,
    as_output,
    atomic_fit,
    check_max_memory_gb,
    check_verbose,
    host_input,
)
from ._engine import _say
from ._ridge.banded import (
    BandedDesign,
    BandedSpec,
    band_candidates,
    check_band_weights,
    check_bands,
    check_candidate_count,
    check_candidate_scales,
    check_concentration,
    check_search_memory,
    n_candidates,
    search_bands,
)
from ._ridge.banded_bootstrap import HeldBands
from ._ridge.cv import cv_scheme
from ._ridge.problems import fit_flops
from ._ridge.spec import batched_ridge_spec, check_alphas, resolve_dtype
from .backend import resolve_backend
from .random import DEFAULT_RANDOM_STATE, check_groups
from .ridge import (
    DEFAULT_ALPHAS,
    BatchedRidge,
    LinearPredictMixin,
    checked_targets,
    fit_data,
    no_model_scores,
    score_weights,
    warn_at_grid_edges,
    warn_if_autocorrelated,
)
from .scoring import correlation_split

__all__ = ["BandedRidge", "HeldBandedRidge", "held_banded_ridge"]

# Weights of the Dirichlet draws: sparse (0.1, near the vertices of the
# simplex, one band dominating) and flat (1.0, the interior), as himalaya's
# random search cycles them.
DEFAULT_CONCENTRATION = (0.1, 1.0)
# After fit, warn that the candidates look too coarse when more than this
# share of targets chose the candidate that weighs some band the most (more
# than the equal weight) ...
COARSE_SHARE = 0.5
# ... while that candidate is still this far from the vertex of that band
# (its weight below 1 - COARSE_VERTEX_GAP): the targets point at a corner of
# the simplex that no candidate reaches.
COARSE_VERTEX_GAP = 0.05
# Targets scored per block in score_per_band: n_bands x n_samples x this many
# predictions at once.
SCORE_BLOCK = 256
# The scores score_per_band splits among the bands.
SPLIT_SCORINGS = ("r2", "correlation")


def _warn_coarse_candidates(candidates, chosen):
    """Warn when most targets chose the grid's most extreme candidate of a band."""
    n_candidates, n_bands = candidates.shape
    if n_bands < 2 or n_candidates < 2:
        return
    for b in range(n_bands):
        extreme = int(np.argmax(candidates[:, b]))
        weight = candidates[extreme, b]
        share = np.mean(chosen == extreme)
        leans = 1 / n_bands < weight < 1 - COARSE_VERTEX_GAP
        if leans and share > COARSE_SHARE:
            warnings.warn(
                f"{share:.0%} of targets chose candidate {extreme}, the one that "
                f"weighs band {b} the most ({weight:.3g}): the candidates look too "
                f"coarse towards that band alone. Add candidates closer to it "
                f"(e.g. a row of band_weights with band {b} only), or draw more "
                f"(band_weights) with a smaller concentration.",
                UserWarning,
                # Past this function, fit and its atomic wrapper.
                stacklevel=4,
            )
            return


class BandedRidge(
    DeviceMixin, LinearPredictMixin, MultiOutputMixin, RegressorMixin, BaseEstimator
):
    """Banded ridge: one alpha per feature space (band), chosen per target.

    The model of each target minimises ``||y - sum_b X_b w_b||^2 + sum_b
    alpha_b ||w_b||^2`` over bands ``X_1 ... X_k`` of the columns of X. With
    ``alpha_b = alpha / gamma_b`` and band weights ``gamma`` on the simplex
    (non-negative, summing to 1), it is ridge at one ``alpha`` on ``Z``,
    whose band-b columns are ``sqrt(gamma_b) X_b``. Each candidate ``gamma``
    is one rescaling of X, decomposed once (one thin SVD, one per fold for
    K-fold) for every target and alpha, as in :class:`BatchedRidge`; each
    target keeps the (candidate, alpha) pair of best cross-validated score.

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
        ``band_weights``. A mapping or a set is refused (its order is not
        that of X's columns).
    alphas : float or array-like of shape (n_alphas,), default=DEFAULT_ALPHAS
        Positive values of the overall alpha to choose from, as for
        :class:`BatchedRidge`.
    band_weights : int or array-like of shape (n_candidates, n_bands), \
default=100
        int m: m candidates, the first weighting every band equally, the
        others Dirichlet draws whose concentration cycles through
        ``concentration`` (candidate k at ``concentration[k % len]``), from
        ``random_state``: for an int ``random_state`` below 2**32, exactly
        himalaya's random search's candidates (see
        :func:`skbatch._ridge.banded.band_candidates`). A count whose
        candidates cannot fit the memory budget is refused before any is
        drawn. An array: explicit candidates, non-negative and finite, no
        row all zero, each row divided by its largest value and then by its
        sum (so ``[[1e308, 1e308]]`` is ``[[0.5, 0.5]]``). With one band
        there is one candidate, weight 1. A weight below
        1e-12 of its row's largest is taken as 0 (that band's alpha would be
        1e12 times the others', its coefficients 0 to rounding, and its
        rescaled columns beyond what the SVD resolves).
    concentration : float or sequence of float, default=(0.1, 1.0)
        Concentrations of the Dirichlet draws: small values give candidates
        near the vertices of the simplex (one band dominating), 1.0 uniform
        ones over it.
    local_alpha : bool, default=True
        True: each target chooses its (candidate, alpha) pair. False: one
        pair for all targets, that of the best CV score averaged over the
        targets (those scored at some pair; a pair where one of them scores
        NaN ranks last), ties to the first candidate, then the first alpha:
        every band's alpha is shared, for data too small or too noisy to
        choose per target. The scores of every pair of every target are then
        held (as with ``store_cv_results``). Unlike himalaya's
        ``solver_params=dict(local_alpha=False)``, which shares the alpha of
        each candidate but lets each target choose its candidate, the band
        weights are shared too.
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
        :data:`skbatch.random.DEFAULT_RANDOM_STATE` (0), the one default of
        every skbatch estimator, makes a rerun draw the same candidates; None
        draws fresh ones every fit.
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
    backend_ : Backend
    fit_report_ : FitReport
        A stage for the search over the targets and one for their refit.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)

    See Also
    --------
    BatchedRidge : One alpha for all columns.

    Notes
    -----
    **Choice.** Each target chooses the pair with the best CV score; ties go
    to the first candidate, then to the first alpha, and NaN scores rank
    last. Targets are searched in batches: every candidate's decomposition
    runs over a batch before the next batch is read, and each target keeps
    a running best, so memory never holds candidates x alphas x targets
    scores (unless ``store_cv_results``).

    **Warnings.** As :class:`BatchedRidge`, a warning when a notable share of
    targets chose an edge of ``alphas`` (at their chosen candidate); and one
    when more than half of the targets chose the candidate that weighs one
    band the most while it is still 5% or more from that band's vertex:
    the candidates are then too coarse towards that band.

    **Per-band scores.** :meth:`score_per_band` splits each target's R^2
    with the product measure (himalaya's ``r2_score_split``), on data
    centred on its means; see there for the intercept's part.

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
        # From the count alone: a count too large is refused before its draw.
        check_candidate_count(
            weights,
            columns,
            n_samples,
            scheme,
            self.dtype_,
            self.backend_,
            self.max_memory_gb,
            n_targets=n_targets,
            n_alphas=alphas.size,
            store_cv_results=self.store_cv_results or not self.local_alpha,
        )
        candidates = band_candidates(
            weights, len(columns), concentration, self.random_state
        )
        check_candidate_scales(
            X,
            columns,
            candidates,
            self.dtype_,
            self.backend_,
            fit_intercept=self.fit_intercept,
            sample_weight=sample_weight,
            alphas=alphas,
        )
        targets = checked_targets(X, Y, self.dtype_, out_of_core)
        design = BandedDesign(X, columns, candidates)
        check_search_memory(
            design,
            n_samples,
            scheme,
            self.dtype_,
            self.backend_,
            self.max_memory_gb,
            n_targets=n_targets,
            n_alphas=alphas.size,
            store_cv_results=self.store_cv_results or not self.local_alpha,
        )
        with self.backend_.context():
            found = search_bands(
                X,
                targets,
                design,
                sample_weight,
                alphas,
                scheme,
                self.backend_,
                self.dtype_,
                fit_intercept=self.fit_intercept,
                scoring=self.scoring,
                store=self.store_cv_results or not self.local_alpha,
                local_alpha=self.local_alpha,
                run_args=dict(
                    max_memory_gb=self.max_memory_gb,
                    batch_size=self.n_targets_batch,
                    verbose=self.verbose,
                ),
            )
        chosen, best, best_score, scores = (
            found.candidate,
            found.alpha,
            found.score,
            found.scores,
        )
        coef, intercept, stored, shared = (
            found.coef,
            found.intercept,
            found.stored,
            found.shared,
        )
        no_model = no_model_scores(
            scheme,
            Y,
            targets,
            sample_weight,
            self.scoring,
            self.fit_intercept,
            found.batch_size,
        )
        if self.local_alpha:
            warn_at_grid_edges(alphas, best, scores, no_model)
        else:
            # As BatchedRidge(alpha_per_target=False): the shared pair's mean.
            def mean_no_model(_):
                limit = no_model(slice(None))
                return None if limit is None else np.mean(limit[shared.scored])[None]

            warn_at_grid_edges(
                alphas, best[:1], shared.mean[shared.candidate][None], mean_no_model
            )
        _warn_coarse_candidates(candidates, chosen)
        warn_if_autocorrelated(
            X,
            targets,
            coef,
            intercept,
            groups,
            self.cv,
            n_alphas=alphas.size,
            n_candidates=len(candidates),
            stacklevel=4,
        )
        if self.verbose:
            counts = np.bincount(chosen, minlength=len(candidates))
            top = np.argsort(-counts, kind="stable")[:5]
            shares = ", ".join(
                f"candidate {c} {np.round(candidates[c], 3).tolist()}: "
                f"{counts[c] / n_targets:.0%}"
                for c in top
                if counts[c]
            )
            _say(self.verbose, f"band weights chosen: {shares}")
        one_target = not out_of_core and y.ndim == 1
        band_weights = candidates[chosen]
        alpha = alphas[best]
        with np.errstate(divide="ignore"):
            band_alphas = alpha[:, None] / band_weights
        if not self.fit_intercept:
            intercept[:] = 0
        self.candidates_ = candidates
        self.band_names_ = names
        self.coef_ = coef[0] if one_target else coef
        self.intercept_ = float(intercept[0]) if one_target else intercept
        self.alpha_ = float(alpha[0]) if one_target else alpha
        self.band_weights_ = band_weights[0] if one_target else band_weights
        self.band_alphas_ = band_alphas[0] if one_target else band_alphas
        self.best_score_ = float(best_score[0]) if one_target else best_score
        self._band_columns = columns
        if self.store_cv_results:
            self.cv_results_ = {
                "alphas": alphas,
                "candidates": candidates,
                "scores": stored[0] if one_target else stored,
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
        return as_output(self._per_band(X, np.atleast_2d(self.coef_)), source)

    def _per_band(self, X, coef):
        dtype = np.result_type(X.dtype, self.dtype_)
        parts = np.stack(
            [X[:, cols].astype(dtype) @ coef[:, cols].T for cols in self._band_columns]
        )
        return parts[:, :, 0] if np.ndim(self.coef_) == 1 else parts

    def score_per_band(self, X, y, sample_weight=None, scoring="r2"):
        """Each band's share of the R^2 (or correlation) of every target.

        The product measure (himalaya's ``r2_score_split``): with ``y_c``
        the target centred on its mean, ``P_b`` band b's prediction
        (:meth:`predict_per_band`) centred on its mean, ``P = sum_b P_b``
        and ``S = ||y_c||^2``, band b's centred share is ``c_b = <P_b, 2 y_c
        - P> / S``; they sum to the R^2 of the centred prediction. The
        intercept enters only through the mean error ``d = mean(y_pred) -
        mean(y)``, which costs ``n d^2 / S`` of R^2; it is split among the
        bands in proportion to their share of the prediction's variance,
        ``pi_b = <P_b, P> / ||P||^2`` (equal shares when ``P`` is 0):
        ``share_b = c_b + pi_b (R^2 - sum_b c_b)``. On the training rows with
        an intercept ``d`` is 0, and the shares are himalaya's. A target
        constant on the rows scored (``S`` = 0 to rounding, weighted, as
        every score decides it) has ``c_b = 0``: its R^2 (1 or 0, as
        :meth:`score_per_target` gives it) is split by ``pi_b``.

        With ``sample_weight``, every mean, inner product and norm above is
        weighted (``sum_i w_i ...``; ``n`` becomes the total weight), as
        ``r2_score(sample_weight=...)`` weighs R^2: the shares then sum to
        the weighted R^2, and integer weights equal repeated rows.

        With ``scoring="correlation"``, the split correlation
        (:func:`skbatch.correlation_score_split`, himalaya's
        ``correlation_score_split``): band b's share is ``cov(y, P_b) /
        (std(y) std(P))``, the shares summing to the correlation of the
        prediction; NaN where that correlation is undefined.

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
            scoring=scoring)`` (to rounding).

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
        y, _ = host_input(y)
        y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
        Y = y.reshape(y.shape[0], -1)
        coef = np.atleast_2d(self.coef_)
        if Y.shape != (X.shape[0], coef.shape[0]):
            raise ValueError(
                f"y must have one row per sample of X and one column per target, "
                f"shape {(X.shape[0], coef.shape[0])}, got {y.shape}"
            )
        weight = score_weights(sample_weight, X)
        intercept = np.atleast_1d(np.asarray(self.intercept_, dtype=np.float64))
        shares = np.empty((len(self._band_columns), coef.shape[0]))
        for start in range(0, coef.shape[0], SCORE_BLOCK):
            block = slice(start, start + SCORE_BLOCK)
            parts = np.stack(
                [
                    X[:, cols].astype(np.float64) @ coef[block, cols].T.astype(float)
                    for cols in self._band_columns
                ]
            )
            if scoring == "correlation":
                shares[:, block] = correlation_split(parts, Y[:, block], weight)
            else:
                shares[:, block] = _product_measure(
                    parts, Y[:, block], intercept[block], weight
                )
        # Once for all blocks: the R^2 of fewer than 2 rows is undefined.
        _linalg.warn_undefined(
            shares.sum(axis=0), scoring, n_rows=X.shape[0], stacklevel=2
        )
        return shares


def _product_measure(parts, Y, intercept, weight=None):
    """Shares (n_bands, t) of R^2 from band predictions (n_bands, n, t), the
    rows weighted by ``weight`` (n,) or not.

    R^2 and the targets' deviations and constancy are those of every score
    (:func:`skbatch._linalg.score_per_target`, :func:`~skbatch._linalg.target_spread`).
    """
    predictions = parts.sum(axis=0) + intercept
    r2 = _linalg.score_per_target(
        Y, predictions, "r2", sample_weight=weight, warn=False, xp=np
    )
    spread = _linalg.target_spread(Y, weight, deviations=True, xp=np)
    w = np.ones((Y.shape[0], 1)) if weight is None else weight[:, None]
    Y_c = spread.deviations
    P_b = parts - np.average(parts, axis=1, weights=weight)[:, None, :]
    P = P_b.sum(axis=0)
    S = np.sum(w * Y_c**2, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        centred = np.sum(w * P_b * (2 * Y_c - P), axis=1) / S
        centred = np.where(spread.constant, 0.0, centred)
        power = np.sum(w * P**2, axis=0)
        pi = np.sum(w * P_b * P, axis=1) / power
        pi = np.where(power > 0, pi, 1.0 / parts.shape[0])
    return centred + pi * (r2 - centred.sum(axis=0))


class HeldBandedRidge(MultiOutputMixin, RegressorMixin, BaseEstimator):
    """Banded ridge at fixed band weights and alpha per target, no search.

    The replicate estimator of :class:`~skbatch.BootstrapEstimator` around
    a :class:`BandedRidge` whose choices are held fixed (see
    :func:`held_banded_ridge`), which solves its replicates in batches from
    the problem it states (``__skbatch_held_bands__``) and refits it where
    that path does not apply (a callable ``attributes``, the jackknife of
    BCa when its closed form does not). Target j is
    scikit-learn's ``Ridge(alpha=alpha[j])`` on X's columns rescaled band by
    band by ``sqrt(band_weights[j])``, bands of weight 0 left out (their
    coefficients 0), the coefficients mapped back to X's columns.

    Parameters
    ----------
    bands : array-like of shape (n_features,) or list of ndarray
        A band label per column, or the columns of each band, as
        :class:`BandedRidge` takes them.
    band_weights : array-like of shape (n_targets, n_bands)
        Each target's weights (non-negative, no row all zero; rows are
        divided by their sums), band b in column b.
    alphas : array-like of shape (n_targets,)
        Each target's overall alpha, positive.
    fit_intercept : bool, default=True

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch.banded import HeldBandedRidge
    >>> rng = np.random.default_rng(0)
    >>> X, Y = rng.standard_normal((30, 4)), rng.standard_normal((30, 2))
    >>> held = HeldBandedRidge(
    ...     [np.array([0, 1]), np.array([2, 3])],
    ...     np.array([[0.5, 0.5], [1.0, 0.0]]),
    ...     np.array([1.0, 10.0]),
    ... ).fit(X, Y)
    >>> held.coef_[1, 2:].tolist()
    [0.0, 0.0]
    """

    def __init__(self, bands, band_weights, alphas, *, fit_intercept=True):
        self.bands = bands
        self.band_weights = band_weights
        self.alphas = alphas
        self.fit_intercept = fit_intercept

    def __skbatch_held_bands__(self, n_features, n_targets):
        """The fixed problem ``fit`` solves on X of ``n_features`` columns and
        ``n_targets`` targets, for the bootstrap's batched path
        (:class:`skbatch._ridge.banded_bootstrap.HeldBands`), checked: bands a
        partition of the columns (:func:`check_bands`), a row of band weights
        (:func:`check_band_weights`, none all zero) and a positive alpha per
        target."""
        columns, _ = check_bands(self.bands, n_features)
        if isinstance(self.band_weights, numbers.Integral):
            raise TypeError(
                f"band_weights of HeldBandedRidge must be an array of shape "
                f"(n_targets, {len(columns)}), one row per target, got "
                f"{self.band_weights!r}"
            )
        weights = check_band_weights(self.band_weights, len(columns))
        alphas = check_alphas(self.alphas)
        for name, size in (("band_weights", weights.shape[0]), ("alphas", alphas.size)):
            if size != n_targets:
                raise ValueError(
                    f"{name} has {size} row(s) or value(s), one per target is "
                    f"needed ({n_targets} targets)"
                )
        return HeldBands(columns, weights, alphas, fit_intercept=self.fit_intercept)

    def fit(self, X, y, sample_weight=None):
        """Fit every target at its band weights and alpha.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self : object
        """
        X, y = validate_data(self, X, y, multi_output=True, y_numeric=True)
        Y = y.reshape(X.shape[0], -1)
        held = self.__skbatch_held_bands__(X.shape[1], Y.shape[1])
        alphas = held.alphas
        design, chosen = held.design(X)
        coef = np.zeros((Y.shape[1], X.shape[1]))
        intercept = np.zeros(Y.shape[1])
        for c in range(len(design.kept)):
            (columns,) = np.nonzero(chosen == c)
            ridge = Ridge(
                alpha=alphas[columns], fit_intercept=self.fit_intercept, solver="svd"
            ).fit(design.design(c), Y[:, columns], sample_weight=sample_weight)
            coef[np.ix_(columns, design.kept[c])] = ridge.coef_ * design.scales[c]
            intercept[columns] = ridge.intercept_
        one_target = y.ndim == 1
        self.coef_ = coef[0] if one_target else coef
        self.intercept_ = float(intercept[0]) if one_target else intercept
        return self

    def predict(self, X):
        """Predictions ``X @ coef_.T + intercept_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        y_pred : ndarray of shape (n_samples,) or (n_samples, n_targets)
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        return X @ self.coef_.T + self.intercept_


def held_banded_ridge(fitted):
    """The replicate estimator of a fitted :class:`BandedRidge` whose
    choices a bootstrap holds fixed: a :class:`HeldBandedRidge` at every
    target's band weights and alpha."""
    return HeldBandedRidge(
        fitted._band_columns,
        np.atleast_2d(fitted.band_weights_),
        np.atleast_1d(fitted.alpha_),
        fit_intercept=fitted.fit_intercept,
    )
