"""BatchedRidge: ridge regression for one to hundreds of thousands of targets."""

import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.metrics import r2_score
from sklearn.model_selection import check_cv
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import (
    _check_sample_weight,
    check_array,
    check_is_fitted,
    validate_data,
)

from . import _linalg
from ._base import (
    DeviceMixin,
    as_output,
    atomic_fit,
    check_input_device,
    check_max_memory_gb,
    check_verbose,
    host_input,
)
from ._engine import map_threads, run_batched
from ._linalg import MIN_SCORED_ROWS
from .backend import resolve_backend
from .memory import GB, memory_budget

__all__ = ["BatchedRidge"]

# A GEMM over this many targets already runs at the BLAS peak; larger target
# batches only add page faults and cache misses (PERFORMANCE.md: chunked
# targets were faster and used half the memory). torch's CPU GEMM peaks at
# smaller batches: its K-fold fit took 6.2 s at 512 targets, 6.8 s at 2048.
MAX_TARGETS_PER_BATCH = 2048
MAX_TARGETS_PER_BATCH_TORCH_CPU = 512
# Temporaries a kernel holds besides the arrays counted per target (copies
# made by casts, centring, broadcasting).
WORKSPACE_OVERHEAD = 2.0
# Fewest rows (or rows of non-zero weight) a fit accepts: one row has no
# deviation from its mean, so nothing to fit and nothing to cross-validate.
MIN_SAMPLES = 2
_SCORINGS = (None, "r2", "neg_mean_squared_error", "correlation")
# Half decades from 0.1 to 1e5: small alphas for clean targets, up to the
# 1e4-1e5 that noisy targets with thousands of standardised rows need.
DEFAULT_ALPHAS = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1e3, 3e3, 1e4, 3e4, 1e5)
# After fit, warn when more than this share of targets chose the smallest or
# the largest alpha ...
EDGE_SHARE = 0.05
# ... while their score there still beat the next alpha's by more than this
# share of their score's range over the grid (a flat tail is not a reason to
# extend the grid: pure-noise targets flatten out at the largest alpha).
EDGE_IMPROVEMENT = 0.01
_DTYPES = {"float32": np.float32, "float64": np.float64}


def _check_alphas(alphas):
    try:
        values = None if isinstance(alphas, str) else np.asarray(alphas)
    except (TypeError, ValueError):
        values = None
    # np.asarray would read "1" and True as numbers: a string or a bool is a
    # mistake, which sklearn refuses with a TypeError too.
    if values is None or values.dtype.kind not in "iuf":
        raise TypeError(
            f"alphas must be a positive float or a 1-D array-like of positive "
            f"floats, got {type(alphas).__name__}: {alphas!r}"
        )
    values = values.astype(np.float64)
    values = np.atleast_1d(values)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(
            f"alphas must be a positive float or a non-empty 1-D array-like of "
            f"positive floats, got {alphas!r}"
        )
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError(f"alphas must be positive and finite, got {alphas!r}")
    return values


def _warn_at_grid_edges(alphas, best, scores, no_model):
    """Warn when many targets chose an edge of ``alphas`` while improving there.

    ``scores`` (n_targets, n_alphas) and ``best`` (n_targets,) index the
    alphas. ``no_model(columns)`` gives the score without a model (the limit
    of an infinite alpha) of the targets ``columns``, or None when there is
    none. A score that approaches that limit from below, close to it, is a
    target with nothing to predict: pure noise always prefers the largest
    alpha, whatever the grid, and does not say that the grid stops too
    early. The limit takes a pass over the targets, so it is asked only when
    the share of targets at the largest alpha would otherwise warn, and only
    for them.
    """
    if alphas.size < 2:
        return
    order = np.argsort(alphas)
    with np.errstate(invalid="ignore"):
        span = np.nanmax(scores, axis=1) - np.nanmin(scores, axis=1)
    for edge, neighbour, which in (
        (order[0], order[1], "smallest"),
        (order[-1], order[-2], "largest"),
    ):
        with np.errstate(invalid="ignore"):
            tolerance = EDGE_IMPROVEMENT * span
            counted = (best == edge) & (
                scores[:, edge] - scores[:, neighbour] > tolerance
            )
        if which == "largest" and np.mean(counted) > EDGE_SHARE:
            (columns,) = np.nonzero(counted)
            limit = no_model(columns)
            if limit is not None:
                with np.errstate(invalid="ignore"):
                    gap = limit - scores[columns, edge]
                    counted[columns] = ~((gap >= 0) & (gap <= tolerance[columns]))
        share = np.mean(counted)
        if share > EDGE_SHARE:
            direction = "smaller" if which == "smallest" else "larger"
            warnings.warn(
                f"{share:.0%} of targets chose the {which} alpha "
                f"({alphas[edge]:g}) while their cross-validated score was still "
                f"improving there: extend `alphas` to {direction} values.",
                UserWarning,
                # Past this function, fit and its atomic wrapper.
                stacklevel=4,
            )


def _no_model_score(Y, sample_weight, *, scoring, cv, fit_intercept):
    """Each target's CV score without a model: the limit of an infinite alpha.

    The target's (weighted) mean, or 0 without an intercept, predicts every
    row: R^2 about 0, and a squared error of the spread around it, inflated
    by ``(n / (n - 1))^2`` for leave-one-out and GCV (the mean of the other
    rows). A correlation has no such limit: None.
    """
    if scoring == "correlation":
        return None
    kfold = _is_kfold(cv)
    if scoring == "r2" or (scoring is None and kfold):
        return np.zeros(Y.shape[1])
    center = np.average(Y, axis=0, weights=sample_weight) if fit_intercept else 0.0
    spread = np.average((Y - center) ** 2, axis=0, weights=sample_weight)
    n = Y.shape[0]
    if not kfold and fit_intercept:
        spread *= (n / (n - 1)) ** 2
    return -spread


def _resolve_dtype(dtype, backend, input_dtype=None):
    """The compute dtype: ``dtype`` checked, or "auto" resolved.

    "auto" keeps float32 input in float32, as scikit-learn's Ridge does, and
    computes float32 on a GPU; everything else in float64.
    """
    requested = dtype
    if isinstance(dtype, str) and dtype == "auto":
        single = backend.is_gpu or input_dtype == np.float32
        dtype = np.float32 if single else np.float64
    try:
        # np.dtype(None) is float64: None must not pass for a choice.
        dtype = None if dtype is None else np.dtype(_DTYPES.get(dtype, dtype))
    except TypeError:
        dtype = None
    if dtype is None or dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(
            f"dtype must be 'auto', 'float32' or 'float64', got {requested!r}"
        )
    if dtype == np.float64 and backend.device == "mps":
        raise ValueError(
            "dtype float64 is not available on MPS; pass dtype='float32' or run "
            "on another device"
        )
    return dtype


def _is_kfold(cv):
    """Whether ``cv`` (validated) asks for K-fold rather than LOO or GCV."""
    return cv is not None and not isinstance(cv, str)


def _check_weights(sample_weight, n_samples):
    """Sample weights as float64, refused before any work if unusable."""
    if isinstance(sample_weight, numbers.Number):
        sample_weight = np.full(n_samples, sample_weight, dtype=np.float64)
    sample_weight = check_array(
        sample_weight, ensure_2d=False, dtype=np.float64, input_name="sample_weight"
    )
    if sample_weight.shape != (n_samples,):
        raise ValueError(
            f"sample_weight must have shape ({n_samples},), one weight per "
            f"sample of X ({n_samples} samples), got shape {sample_weight.shape}"
        )
    negative = sample_weight < 0
    if np.any(negative):
        raise ValueError(
            f"sample_weight must be non-negative, got {np.count_nonzero(negative)} "
            f"negative weight(s), the smallest {float(sample_weight.min())!r}"
        )
    n_weighted = np.count_nonzero(sample_weight)
    if n_weighted < MIN_SAMPLES:
        # Rows of weight 0 are no rows: as few samples as fit refuses.
        raise ValueError(
            f"sample_weight must have at least {MIN_SAMPLES} non-zero weights, "
            f"got {n_weighted} among {n_samples} samples"
        )
    return sample_weight


def _check_splits(splits, cv, sample_weight, scoring):
    """Refuse folds no ridge can be fit or scored on; warn of undefined scores."""
    if not splits:
        raise ValueError(
            f"cv must yield at least one train/test split, got none from cv={cv!r} "
            "(an empty list or an exhausted generator?)"
        )
    for i, (train, test) in enumerate(splits):
        if len(test) == 0:
            raise ValueError(
                f"cv yielded an empty test fold (fold {i}, with {len(train)} "
                "training rows): every fold must hold out at least one row"
            )
        if len(train) < MIN_SAMPLES:
            raise ValueError(
                f"cv fold {i} has {len(train)} training row(s): a ridge fit needs "
                f"at least {MIN_SAMPLES} samples; use fewer folds"
            )
        if sample_weight is not None and not np.any(sample_weight[train]):
            raise ValueError(
                f"sample_weight is 0 on all {len(train)} training rows of cv fold "
                f"{i}: that fold has nothing to fit; give some of its training "
                "rows a positive weight or use another cv"
            )
    sizes = np.array([len(test) for _, test in splits])
    if scoring != "neg_mean_squared_error" and np.any(sizes < MIN_SCORED_ROWS):
        name = "correlation" if scoring == "correlation" else "R^2"
        warnings.warn(
            f"cv has test folds of fewer than {MIN_SCORED_ROWS} rows (test fold "
            f"sizes {np.array2string(sizes, threshold=20)}): their {name} is "
            "undefined (NaN), so every alpha scores NaN, the first alpha is "
            "kept and best_score_ is NaN. Use fewer folds, cv=None (exact "
            "leave-one-out) or scoring='neg_mean_squared_error'.",
            UserWarning,
            # Past fit and its atomic_fit wrapper, to the caller's line.
            stacklevel=4,
        )


def _fixed_bytes(n_samples, n_features, splits, dtype):
    """Device bytes X and its decompositions hold whatever the target batch.

    X and its centred copy (2np), the thin SVD (nr + rp), and per fold the
    training basis and the test rows in it, with the rank r at its bound
    min(n, p): counted from the shapes, before anything is decomposed.
    """
    rank = min(n_samples, n_features)
    count = 2 * n_samples * n_features + (n_samples + n_features) * rank
    for train, test in splits or ():
        count += (len(train) + len(test)) * min(len(train), n_features)
    return np.dtype(dtype).itemsize * count


def _check_fixed_memory(n_samples, n_features, splits, dtype, backend, max_memory_gb):
    """Refuse, before any SVD runs, data whose decompositions exceed the budget.

    Against the full budget: the 8 GB cap of ``memory_budget(for_batching=
    True)`` bounds one target batch, not the data (DESIGN.md, Memory).
    """
    needed = _fixed_bytes(n_samples, n_features, splits, dtype)
    budget_gb = memory_budget(backend, max_memory_gb)
    if needed > budget_gb * GB:
        raise ValueError(
            f"BatchedRidge needs {needed / GB:.3g} GB on {backend.name} for X "
            f"({n_samples} x {n_features}) and its decompositions before any "
            f"target, but the memory budget is {budget_gb:.3g} GB; raise "
            "max_memory_gb (or free memory), or reduce n_samples, n_features "
            "or the number of folds"
        )


def _column_magnitudes(A):
    """Largest absolute value of each column, without an abs() copy of A."""
    return np.maximum(np.max(A, axis=0), -np.min(A, axis=0))


def _check_magnitudes(X, Y, dtype, *, chooses_alpha):
    """Refuse data whose scale the computation cannot represent.

    The SVD path never squares X (see ``skbatch._linalg._ridge_factors``):
    X only has to fit the compute dtype, with room for its column sums (the
    means), and no column may be subnormal there (the cast to float32 would
    flush it to zero). When alphas are chosen, the CV scores square the
    errors of y (in the compute dtype before they are summed in float64):
    squares that overflow make every score inf or NaN, squares that
    underflow make them noise, and either way the alpha choice would be
    arbitrary.
    """
    finfo = np.finfo(dtype)
    n_samples = X.shape[0]
    largest_sum = float(finfo.max) / n_samples
    smallest = float(finfo.smallest_normal)
    fix = "rescale it, e.g. with sklearn.preprocessing.StandardScaler"
    columns = _column_magnitudes(X)
    largest = float(columns.max())
    if largest > largest_sum:
        raise ValueError(
            f"X has values up to {largest:.3g} in magnitude, beyond what the "
            f"{finfo.dtype} computation can sum over {n_samples} samples "
            f"({largest_sum:.3g}); {fix}."
        )
    tiny = columns[(columns > 0) & (columns < smallest)]
    if tiny.size:
        raise ValueError(
            f"X has columns whose values are all below {smallest:.3g} in "
            f"magnitude (the largest of them {float(tiny.max()):.3g}), which "
            f"{finfo.dtype} cannot hold without losing them; {fix}."
        )
    if not chooses_alpha:
        return
    fix = (
        "rescale y, e.g. with sklearn.compose.TransformedTargetRegressor and a "
        "StandardScaler"
    )
    high, low = np.sqrt(largest_sum), np.sqrt(smallest)
    columns = _column_magnitudes(Y)
    largest = float(columns.max())
    if largest > high:
        raise ValueError(
            f"y has values up to {largest:.3g} in magnitude: the squared errors "
            f"that choose alpha would overflow {finfo.dtype} (the limit is "
            f"{high:.3g} for {n_samples} samples); {fix}."
        )
    tiny = columns[(columns > 0) & (columns < low)]
    if tiny.size:
        raise ValueError(
            f"y has targets whose values are all below {low:.3g} in magnitude "
            f"(the largest of them {float(tiny.max()):.3g}): the squared errors "
            f"that choose alpha would underflow {finfo.dtype}; {fix}."
        )


def _normalised_weights(sample_weight):
    """Weights rescaled to sum to the number of rows of non-zero weight.

    GCV divides by that number (see :func:`skbatch._linalg.gcv_scores`):
    with weights normalised to it, only their ratios matter, and a row of
    weight 0 is the same as no row.
    """
    n_effective = np.count_nonzero(sample_weight)
    return sample_weight * (n_effective / np.sum(sample_weight)), n_effective


class BatchedRidge(DeviceMixin, MultiOutputMixin, RegressorMixin, BaseEstimator):
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
        ``"gcv"``: generalized cross-validation, cheaper still.
        int, splitter or iterable of (train, test) index arrays: K-fold;
        per-target alpha is supported with it. The score of each alpha is
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
        terminal or in a notebook; 2: also log the plans and out-of-memory
        recoveries on the ``skbatch`` logger.

    Attributes
    ----------
    coef_ : ndarray of shape (n_targets, n_features) or (n_features,)
        Coefficients at the chosen alphas; 1-D for 1-D ``y``.
    intercept_ : ndarray of shape (n_targets,) or float
        Intercepts (0.0 when ``fit_intercept=False``).
    alpha_ : ndarray of shape (n_targets,) or float
        Chosen alpha per target; a float for 1-D ``y`` or
        ``alpha_per_target=False``.
    best_score_ : ndarray of shape (n_targets,) or float
        Cross-validated score at the chosen alpha (higher is better; minus
        the mean squared error when ``scoring=None`` with LOO or GCV). NaN
        where every alpha scored NaN; with one alpha for all targets, the
        mean over targets, NaN if any is.
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

    **Sample weights.** They weight the training rows in every fit, as in
    ``Ridge``, and the scores as ``RidgeCV`` uses them: leave-one-out
    weights each sample's squared error (or the named scoring's means), and
    K-fold weights the held-out rows of each fold (``RidgeCV(cv=K)`` since
    scikit-learn 1.7). With ``cv="gcv"`` they are first normalised to sum to
    ``n_eff``, the number of rows of non-zero weight, and the criterion is
    ``(sum_i w_i r_i^2 / n_eff) / (1 - tr(H) / n_eff)^2``, with ``tr(H)``
    the effective degrees of freedom (+1 for the intercept). A row of weight
    0 is then the same as no row, and multiplying all weights by a constant
    changes nothing (equal weights are no weights), whereas ``Ridge`` itself
    reads weights times c as alpha divided by c.

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
        "cv": ["cv_object", StrOptions({"gcv"})],
        "alpha_per_target": ["boolean"],
        "fit_intercept": ["boolean"],
        "scoring": [StrOptions(set(_SCORINGS) - {None}), None],
        "dtype": [StrOptions({"auto", "float32", "float64"}), type, np.dtype],
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
        alphas = _check_alphas(self.alphas)
        if isinstance(self.cv, str) and self.scoring is not None:
            raise ValueError(
                f"cv='gcv' supports only scoring=None, got scoring={self.scoring!r}"
            )
        check_max_memory_gb(self.max_memory_gb)
        check_verbose(self.verbose)
        return alphas

    @atomic_fit
    def fit(self, X, y, sample_weight=None):
        """Fit the model and choose alphas.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data (numpy, torch or jax arrays are accepted).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets.
        sample_weight : float or array-like of shape (n_samples,), default=None
            Non-negative sample weights, not all 0; see Notes for how each
            ``cv`` uses them.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        alphas = self._check_params()
        X, _ = host_input(X)
        y, _ = host_input(y)
        X, y = validate_data(
            self,
            X,
            y,
            multi_output=True,
            y_numeric=True,
            dtype=[np.float64, np.float32],
        )
        n_samples, n_features = X.shape
        if n_samples < MIN_SAMPLES:
            raise ValueError(
                f"BatchedRidge needs at least {MIN_SAMPLES} samples, got "
                f"{n_samples} sample"
            )
        if sample_weight is not None:
            sample_weight = _check_weights(host_input(sample_weight)[0], n_samples)
        Y = y.reshape(n_samples, -1) if y.ndim == 1 else y
        n_targets = Y.shape[1]
        splits = None
        if _is_kfold(self.cv):
            splits = list(check_cv(self.cv).split(X, y))
            _check_splits(splits, self.cv, sample_weight, self.scoring)
        rank = min(n_samples, n_features)
        n_fits = 1 if splits is None else len(splits) + 1
        flops = (
            2.0
            * n_fits
            * (
                n_samples * n_features * rank
                + n_samples * rank * n_targets * alphas.size
            )
        )
        self.backend_ = resolve_backend(self.device, flops=flops)
        self.dtype_ = _resolve_dtype(self.dtype, self.backend_, X.dtype)
        _check_magnitudes(X, Y, self.dtype_, chooses_alpha=alphas.size > 1)
        _check_fixed_memory(
            n_samples,
            n_features,
            splits,
            self.dtype_,
            self.backend_,
            self.max_memory_gb,
        )

        with self.backend_.context():
            problem = _RidgeProblem(
                X,
                sample_weight,
                alphas,
                splits,
                self.backend_,
                self.dtype_,
                fit_intercept=self.fit_intercept,
                scoring=self.scoring,
                cv=self.cv,
            )
            results = problem.solve(
                Y,
                alpha_per_target=self.alpha_per_target,
                batch_size=self.n_targets_batch,
                max_memory_gb=self.max_memory_gb,
                verbose=self.verbose,
            )
        coef, intercept, best, best_score, scores = results

        def no_model(columns):
            return _no_model_score(
                Y[:, columns],
                sample_weight,
                scoring=self.scoring,
                cv=self.cv,
                fit_intercept=self.fit_intercept,
            )

        if self.alpha_per_target:
            _warn_at_grid_edges(alphas, best, scores, no_model)
        else:

            def mean_no_model(_):
                limit = no_model(slice(None))
                return None if limit is None else np.mean(limit)[None]

            _warn_at_grid_edges(
                alphas, best[:1], np.nanmean(scores, axis=0)[None], mean_no_model
            )
        one_target = y.ndim == 1
        if not self.alpha_per_target or one_target:
            self.alpha_ = float(alphas[best[0]])
            self.best_score_ = float(np.mean(best_score))
        else:
            self.alpha_ = alphas[best]
            self.best_score_ = best_score
        self.coef_ = coef[0] if one_target else coef
        self.intercept_ = float(intercept[0]) if one_target else intercept
        if not self.fit_intercept:
            self.intercept_ = 0.0 if one_target else np.zeros(n_targets)
        if self.store_cv_results:
            self.cv_results_ = {
                "alphas": alphas,
                "scores": scores[0] if one_target else scores,
            }
        return self

    def _predict_host(self, X):
        check_is_fitted(self)
        self.backend_.check_available()
        X, source = host_input(X)
        check_input_device(source, self.backend_)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        coef = np.atleast_2d(self.coef_)
        intercept = np.atleast_1d(np.asarray(self.intercept_, dtype=np.float64))
        out_dtype = np.result_type(X.dtype, self.dtype_)
        out = np.empty((X.shape[0], coef.shape[0]), dtype=out_dtype)
        backend, dtype = self.backend_, self.dtype_
        itemsize = np.dtype(dtype).itemsize
        with backend.context():
            X_device = backend.asarray(X, dtype)

            def kernel(ids):
                coef_batch = backend.asarray(coef[ids], dtype)
                return (
                    coef_batch @ X_device.T
                    + backend.asarray(intercept[ids], dtype)[:, None]
                )

            def reduce(ids, block):
                out[:, ids] = block.T

            run_batched(
                kernel,
                reduce,
                n_items=coef.shape[0],
                backend=backend,
                device_bytes_per_item=itemsize * (X.shape[0] + X.shape[1]),
                host_bytes_per_item=out.itemsize * X.shape[0],
                fixed_bytes=X.nbytes,
                max_memory_gb=self.max_memory_gb,
                batch_size=self.n_targets_batch,
                threads=True,
            )
        if np.ndim(self.coef_) == 1:
            out = out[:, 0]
        return out, source

    def predict(self, X):
        """Predict with the fitted coefficients, batched over targets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            numpy, torch or jax array. A torch or jax array must sit on the
            model's device (else ValueError: nothing moves silently).

        Returns
        -------
        y_pred : array of shape (n_samples,) or (n_samples, n_targets)
            numpy for numpy input; otherwise the input's library, on its
            device.
        """
        out, source = self._predict_host(X)
        return as_output(out, source)

    def score(self, X, y, sample_weight=None):
        """Uniform average of the per-target R^2, so that GridSearchCV works.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Test samples.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            True values.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights.

        Returns
        -------
        score : float
            Mean over targets of R^2.
        """
        y, _ = host_input(y)
        predictions, _ = self._predict_host(X)
        return float(r2_score(y, predictions, sample_weight=sample_weight))

    def score_per_target(self, X, y, sample_weight=None, scoring="r2"):
        """Score of each target's predictions, where ``score`` averages R^2.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Test samples.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            True values.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights, in every mean of the score.
        scoring : {"r2", "correlation", "neg_mean_squared_error"}, default="r2"
            ``"r2"``: as ``sklearn.metrics.r2_score(multioutput="raw_values")``
            (a constant target scores 1.0 if predicted exactly, else 0.0).
            ``"correlation"``: Pearson's r (weighted with ``sample_weight``).
            ``"neg_mean_squared_error"``: minus
            ``sklearn.metrics.mean_squared_error(multioutput="raw_values")``.
            R^2 and correlation are NaN where undefined: fewer than 2
            samples, or, for correlation, a constant target or prediction.

        Returns
        -------
        scores : ndarray of shape (n_targets,)
            Score per target, higher is better.

        Examples
        --------
        >>> import numpy as np
        >>> from skbatch import BatchedRidge
        >>> rng = np.random.default_rng(0)
        >>> X = rng.standard_normal((50, 4))
        >>> Y = X[:, :2] + 0.5 * rng.standard_normal((50, 2))
        >>> model = BatchedRidge(alphas=1.0).fit(X, Y)
        >>> model.score_per_target(X, Y).shape
        (2,)
        >>> bool(np.all(model.score_per_target(X, Y, scoring="correlation") > 0.8))
        True
        """
        if scoring not in _linalg._SCORINGS:
            raise ValueError(
                f"scoring must be one of {_linalg._SCORINGS}, got {scoring!r}"
            )
        y, _ = host_input(y)
        predictions, _ = self._predict_host(X)
        n_samples = predictions.shape[0]
        predictions = predictions.reshape(n_samples, -1).astype(np.float64)
        y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
        Y = y.reshape(y.shape[0], -1)
        if Y.shape != predictions.shape:
            raise ValueError(
                f"y must have one row per sample of X and one column per target, "
                f"shape {predictions.shape} (or ({n_samples},) for one target), "
                f"got {y.shape}"
            )
        if sample_weight is not None:
            sample_weight = _check_sample_weight(
                host_input(sample_weight)[0],
                Y,
                dtype=np.float64,
                ensure_non_negative=True,
            )
        return _linalg.score_per_target(
            Y, predictions, scoring, sample_weight=sample_weight
        )


class _RidgeProblem:
    """A design matrix decomposed once, ready to take targets in batches."""

    def __init__(
        self,
        X,
        sample_weight,
        alphas,
        splits,
        backend,
        dtype,
        *,
        fit_intercept,
        scoring,
        cv,
    ):
        xp = backend.xp
        self.backend, self.dtype, self.xp = backend, dtype, xp
        self.alphas = alphas
        self.fit_intercept, self.cv = fit_intercept, cv
        self.scoring = scoring
        self.n_samples, self.n_features = X.shape
        # Rows that count in the GCV criterion: those of non-zero weight.
        self.n_effective = self.n_samples
        if sample_weight is not None and isinstance(cv, str):
            sample_weight, self.n_effective = _normalised_weights(sample_weight)
        X = backend.asarray(X, dtype)
        weight = (
            None if sample_weight is None else backend.asarray(sample_weight, dtype)
        )
        self.sample_weight = weight

        def decompose(split):
            if split is not None:
                return _Fold(X, weight, *split, backend, fit_intercept=fit_intercept)
            X_centered, X_offset = _linalg.center(
                X, weight, fit_intercept=fit_intercept, xp=xp
            )
            return X_offset, *_linalg.svd_decompose(X_centered, xp=xp)

        # All rows and every fold: independent decompositions, side by side.
        full, *self.folds = map_threads(decompose, [None, *(splits or ())], backend)
        self.X_offset, self.U, self.s, self.Vt = full

    def _scores(self, Y, Y_centered, Y_offset, UtY):
        """Scores (n_alphas, n_targets) of one batch of targets."""
        xp = self.xp
        if self.cv is None:
            return _linalg.loo_scores(
                self.U,
                self.s,
                UtY,
                Y_centered,
                self.alphas,
                fit_intercept=self.fit_intercept,
                sample_weight=self.sample_weight,
                scoring=self.scoring,
                xp=xp,
            )
        if isinstance(self.cv, str):
            sq_norm = _linalg.residual_sq_norm(
                self.U, UtY, Y_centered, fit_intercept=self.fit_intercept, xp=xp
            )
            return _linalg.gcv_scores(
                self.s,
                UtY,
                sq_norm,
                self.n_effective,
                self.alphas,
                fit_intercept=self.fit_intercept,
                xp=xp,
            )
        total = 0.0
        for fold in self.folds:
            # The fold's training rows of the targets centred on all rows:
            # U's columns are orthogonal to the (weighted) mean direction, so
            # projecting them equals projecting the rows centred on their own
            # means, and the training mean is one shift of the test targets.
            UtY_fold, train_mean = fold.project(
                Y_centered, with_mean=self.fit_intercept
            )
            # Offset first, then the small training mean: in float32 their sum
            # would round the mean away on targets far from zero.
            y_true = fold.test_rows(Y) - Y_offset
            y_true -= train_mean
            total = total + _linalg.holdout_scores(
                fold.s,
                fold.X_test_V,
                UtY_fold,
                y_true,
                self.alphas,
                scoring=self.scoring or "r2",
                sample_weight=fold.test_weight,
                xp=xp,
            )
        return total / len(self.folds)

    def project(self, Y):
        """Centre device targets ``Y`` (n_samples, m) and project them on U.

        Returns
        -------
        Y_centered, Y_offset, UtY : arrays
            Centred (and weight-scaled) targets, their offsets, and their
            coordinates in the basis.
        """
        Y_centered, Y_offset = _linalg.center(
            Y, self.sample_weight, fit_intercept=self.fit_intercept, xp=self.xp
        )
        return Y_centered, Y_offset, _linalg.project(self.U, Y_centered, xp=self.xp)

    def choose_alpha(self, Y, Y_centered, Y_offset, UtY, *, columns_per_choice=1):
        """Alpha chosen by the CV criterion for every column of ``Y``.

        Parameters
        ----------
        Y, Y_centered, Y_offset, UtY : arrays
            Targets as given to :meth:`project` and what it returned.
        columns_per_choice : int, default=1
            Consecutive columns that share one alpha, chosen on their mean
            score (``alpha_per_target=False`` for a block of targets).

        Returns
        -------
        alpha : array of shape (m,), or (1,) with a single alpha
            The single alpha broadcasts: one filter for every column of
            :meth:`predict`, not one per column.
        """
        xp = self.xp
        alphas = self.backend.asarray(self.alphas, self.dtype)
        if self.alphas.size == 1:
            return alphas
        scores = self._scores(Y, Y_centered, Y_offset, UtY)
        if columns_per_choice > 1:
            scores = xp.mean(
                xp.reshape(scores, (self.alphas.size, -1, columns_per_choice)),
                axis=2,
            )
        best, _ = _linalg.select_alpha(scores, xp=xp)
        if columns_per_choice > 1:
            best = xp.reshape(
                xp.broadcast_to(best[:, None], (best.shape[0], columns_per_choice)),
                (-1,),
            )
        return xp.take(alphas, best, axis=0)

    def rows_in_basis(self, X_new):
        """New rows (device, n_new x n_features), centred, times V."""
        return (X_new - self.X_offset) @ self.Vt.T

    def predict(self, X_new_V, UtY, Y_offset, alpha):
        """Predictions for rows given by :meth:`rows_in_basis`.

        The coefficients in the basis of V, ``diag(s / (s^2 + alpha)) U'Y``,
        are mapped by ``X_new V`` instead of ``V``: :func:`_linalg.ridge_coef`
        with ``X_new_V.T`` in place of ``Vt``, one product, no coefficients
        over the features.
        """
        return _linalg.ridge_coef(X_new_V.T, self.s, UtY, alpha, xp=self.xp) + Y_offset

    def _refit(self, UtY, Y_offset, alpha):
        coef = _linalg.ridge_coef(self.Vt, self.s, UtY, alpha, xp=self.xp)
        return coef.T, Y_offset - self.X_offset @ coef

    def _to_device(self, Y_host, ids):
        # The engine hands out consecutive ids: a slice is a view, where a
        # gather would copy every target once more before centring copies it.
        if ids[-1] - ids[0] + 1 == len(ids):
            return self.backend.asarray(Y_host[:, ids[0] : ids[-1] + 1], self.dtype)
        return self.backend.asarray(Y_host[:, ids], self.dtype)

    def _select_and_fit(self, Y):
        """Kernel: scores of every alpha, the best per target, its coefficients."""
        xp = self.xp
        Y_centered, Y_offset, UtY = self.project(Y)
        scores = self._scores(Y, Y_centered, Y_offset, UtY)
        best, best_score = _linalg.select_alpha(scores, xp=xp)
        alpha = xp.take(self.backend.asarray(self.alphas, self.dtype), best)
        return (*self._refit(UtY, Y_offset, alpha), best, best_score, scores.T)

    def _fit_fixed(self, Y, alpha):
        """Kernel: coefficients at one alpha for all targets of the batch."""
        _, Y_offset, UtY = self.project(Y)
        return self._refit(UtY, Y_offset, alpha)

    def solve(self, Y, *, alpha_per_target, batch_size, max_memory_gb, verbose):
        """Choose alphas and fit all targets of ``Y`` (host, n_samples x t)."""
        n_targets = Y.shape[1]
        n_alphas = self.alphas.size
        n, p, r = self.n_samples, self.n_features, self.s.shape[0]
        itemsize = np.dtype(self.dtype).itemsize
        coef = np.empty((n_targets, p))
        intercept = np.empty(n_targets)
        best = np.empty(n_targets, dtype=np.int64)
        best_score = np.empty(n_targets)
        scores = np.empty((n_targets, n_alphas))

        def reduce_all(ids, result):
            coef[ids], intercept[ids], best[ids], best_score[ids], scores[ids] = result

        def reduce_coef(ids, result):
            coef[ids], intercept[ids] = result

        fixed = itemsize * (2 * n * p + n * r + r * p)
        for fold in self.folds:
            fixed += itemsize * (fold.U.shape[0] + fold.X_test_V.shape[0]) * r
        engine_args = dict(
            n_items=n_targets,
            backend=self.backend,
            device_bytes_per_item=WORKSPACE_OVERHEAD
            * itemsize
            * (4 * n + r + p + 2 * n_alphas),
            host_bytes_per_item=8 * (p + 3 + n_alphas),
            fixed_bytes=fixed,
            max_memory_gb=max_memory_gb,
            verbose=verbose,
            desc="targets",
            batch_size=batch_size,
            max_batch_size=(
                MAX_TARGETS_PER_BATCH_TORCH_CPU
                if self.backend.library == "torch" and not self.backend.is_gpu
                else MAX_TARGETS_PER_BATCH
            ),
            threads=True,
        )
        run_batched(
            lambda ids: self._select_and_fit(self._to_device(Y, ids)),
            reduce_all,
            **engine_args,
        )
        if not alpha_per_target and n_targets > 1:
            shared = int(np.argmax(np.nan_to_num(scores.mean(axis=0), nan=-np.inf)))
            alpha = float(self.alphas[shared])
            run_batched(
                lambda ids: self._fit_fixed(self._to_device(Y, ids), alpha),
                reduce_coef,
                **engine_args,
            )
            best[:] = shared
            best_score[:] = scores[:, shared]
        return coef, intercept, best, best_score, scores


# Row indices that form at most this many runs of consecutive rows (KFold
# without shuffling: two) are read as slices, views rather than copies.
MAX_ROW_RUNS = 4


def _row_runs(indices):
    """``[(position, row, length), ...]`` of consecutive runs, or None if many."""
    indices = np.asarray(indices)
    breaks = np.flatnonzero(np.diff(indices) != 1) + 1
    if indices.size == 0 or breaks.size >= MAX_ROW_RUNS:
        return None
    bounds = np.concatenate(([0], breaks, [indices.size]))
    return [
        (int(start), int(indices[start]), int(stop - start))
        for start, stop in zip(bounds[:-1], bounds[1:])
    ]


class _Fold:
    """One train/test split: its training rows decomposed, its rows located."""

    def __init__(self, X, weight, train, test, backend, *, fit_intercept):
        xp = backend.xp
        self.xp = xp
        self.train_runs, self.test_runs = _row_runs(train), _row_runs(test)
        self.train, self.test = backend.asarray(train), backend.asarray(test)
        self.n_train = len(train)
        self.root_weight = self.test_weight = None
        train_weight = None
        if weight is not None:
            # Test rows are scored with their weights, as RidgeCV(cv=K) does.
            self.test_weight = xp.take(weight, self.test, axis=0)
            train_weight = xp.take(weight, self.train, axis=0)
            self.root_weight = xp.sqrt(train_weight)
            self.total_weight = xp.sum(train_weight)
        self.U, self.s, self.X_test_V = _linalg.fold_basis(
            xp.take(X, self.train, axis=0),
            xp.take(X, self.test, axis=0),
            fit_intercept=fit_intercept,
            sample_weight=train_weight,
            xp=xp,
        )

    def _blocks(self, A, runs, indices):
        """``(positions, rows of A)`` pairs covering the fold's rows of ``A``."""
        if runs is None:
            return [(slice(None), self.xp.take(A, indices, axis=0))]
        return [
            (slice(position, position + length), A[row : row + length])
            for position, row, length in runs
        ]

    def project(self, Y_centered, *, with_mean):
        """``U' Y_centered[train]``, one product per run of rows.

        With ``with_mean``, also the (weighted) mean of those rows, unscaled,
        read in the same pass: ``Y_centered`` rows carry sqrt(w), so
        ``sqrt(w)' Y_centered[train] / sum(w[train])`` is the training mean
        of ``Y - Y_offset``. Without it the mean is 0.0.
        """
        xp = self.xp
        UtY = total = 0.0
        for positions, rows in self._blocks(Y_centered, self.train_runs, self.train):
            UtY = UtY + self.U[positions].T @ rows
            if not with_mean:
                continue
            if self.root_weight is None:
                total = total + xp.sum(rows, axis=0)
            else:
                total = total + self.root_weight[positions] @ rows
        if not with_mean:
            return UtY, 0.0
        if self.root_weight is None:
            return UtY, total / self.n_train
        return UtY, total / self.total_weight

    def test_rows(self, Y):
        """``Y[test]``: a view when the test rows are one run."""
        blocks = self._blocks(Y, self.test_runs, self.test)
        if len(blocks) == 1:
            return blocks[0][1]
        return self.xp.concat([rows for _, rows in blocks], axis=0)
