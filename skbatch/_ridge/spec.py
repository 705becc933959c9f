"""Which estimators are ridge problems, and the checks every ridge path shares.

:func:`ridge_spec` is the one fast-path rule: every batched path (the
targets of ``BatchedRidge``, the permutations of ``PermutationScorer``, the
replicates of ``BootstrapEstimator``) asks it whether an estimator's ``fit``
solves an exact ridge problem, and which one. Each path then solves the
problems it knows (the bootstrap path, for one, solves ridge at fixed
alphas only) and sends the others to the generic joblib path.
"""

from dataclasses import dataclass

import numpy as np
from array_api_compat import array_namespace
from sklearn.linear_model import LinearRegression, Ridge, RidgeCV
from sklearn.pipeline import Pipeline

from .._kernels import linalg as _linalg
from .covariance import DECOMPOSITIONS
from .cv import cv_scheme

__all__ = ["RidgeSpec", "check_alphas", "refit_reason", "resolve_dtype", "ridge_spec"]

# Scorings of the alpha choice that the CV schemes compute on the device;
# None is each scheme's default (squared error for leave-one-out and GCV,
# R^2 for K-fold).
SCORINGS = (None, "r2", "neg_mean_squared_error", "correlation")
# sklearn Ridge solvers that give the exact ridge solution, which the batched
# paths compute; the iterative ones stop at a tolerance and are refit.
EXACT_RIDGE_SOLVERS = ("auto", "svd", "cholesky")
# Scorings RidgeCV accepts that mean what the schemes compute.
RIDGECV_SCORINGS = (None, "r2", "neg_mean_squared_error")
_DTYPES = {"float32": np.float32, "float64": np.float64}
# Rows centred at once by check_column_scales: a bounded temporary, at most
# SCALE_CHECK_BYTES of float64 (tall designs of a thousand columns would
# otherwise copy a quarter of X, more than the covariance path holds).
SCALE_CHECK_BYTES = 2**22


@dataclass(frozen=True)
class RidgeSpec:
    """The ridge problem an estimator's ``fit`` solves.

    Attributes
    ----------
    alphas : ndarray of shape (n_alphas,)
        Alphas to choose from (one: no choice). With ``fixed_per_target``,
        one fixed alpha per target instead.
    cv : object
        The estimator's CV value, a key of :data:`skbatch._ridge.cv.CV_SCHEMES`
        or a K-fold splitter; irrelevant with one alpha.
    scoring : str or None
        Criterion of the alpha choice.
    alpha_per_target : bool
        Whether each target chooses its alpha.
    fit_intercept : bool
    dtype : str or numpy dtype
        The requested compute dtype, for :func:`resolve_dtype`: "auto"
        (``BatchedRidge``'s rule), "input" (as scikit-learn computes: float32
        for float32 input), or a dtype.
    fixed_per_target : bool
        ``alphas`` holds one fixed alpha per target (``Ridge(alpha=array)``).
    solver : {"svd", "auto", "covariance"}
        The decomposition asked for (``BatchedRidge(solver=...)``), which
        :func:`skbatch._ridge.covariance.choose_decomposition` settles;
        "svd" for scikit-learn's estimators.
    """

    alphas: np.ndarray
    cv: object = None
    scoring: object = None
    alpha_per_target: bool = True
    fit_intercept: bool = True
    dtype: object = "input"
    fixed_per_target: bool = False
    solver: str = "svd"

    @property
    def tunes(self):
        """Whether ``fit`` chooses an alpha by cross-validation."""
        return self.alphas.size > 1 and not self.fixed_per_target


def check_alphas(alphas):
    """``alphas`` as a non-empty 1-D float64 array of positive finite values.

    Raises
    ------
    TypeError
        For a string, a bool or anything that is not numbers.
    ValueError
        For an empty, multi-dimensional, non-positive or non-finite value.
    """
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
    values = np.atleast_1d(values.astype(np.float64))
    if values.ndim != 1 or values.size == 0:
        raise ValueError(
            f"alphas must be a positive float or a non-empty 1-D array-like of "
            f"positive floats, got {alphas!r}"
        )
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError(f"alphas must be positive and finite, got {alphas!r}")
    return values


def resolve_dtype(dtype, backend, input_dtype=None):
    """The compute dtype of a ridge path: ``dtype`` checked, or resolved.

    "auto" keeps float32 input in float32, as scikit-learn's Ridge does, and
    computes float32 on a GPU; "input" only the former. Everything else in
    float64, except on MPS, which has no float64: there "auto" and "input"
    give float32 and an explicit float64 is refused.
    """
    requested = dtype
    single_input = input_dtype == np.float32
    if isinstance(dtype, str) and dtype in ("auto", "input"):
        single = single_input or backend.device == "mps"
        if dtype == "auto":
            single = single or backend.is_gpu
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


def check_column_scales(
    X, dtype, backend, *, fit_intercept=True, sample_weight=None, alphas=None
):
    """Refuse, before any work, features on scales too far apart to solve.

    Every ridge path decomposes X by an SVD (:func:`skbatch._kernels.linalg.
    svd_decompose`), which resolves a feature only down to about
    ``1 / (BIDIAGONAL_DEFLATION * eps)`` times the norm of the largest one,
    once centred (4.5e13 in float64), unless the smallest of ``alphas``
    shrinks the features it cannot resolve to within rounding
    (:func:`skbatch._kernels.linalg.shrinking_alpha`; None: least squares).
    ``dtype`` is the compute dtype: float32 is decomposed in float64 on the
    CPU, in float32 on a GPU. Graded features the SVD resolves too coarsely
    for the smallest alpha are refused by the SVD itself.

    Raises
    ------
    ValueError
        Naming the largest and the smallest feature, their ratio and the fix
        (rescale, e.g. with ``StandardScaler``).

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch.backend import resolve_backend
    >>> from skbatch._ridge.spec import check_column_scales
    >>> X = np.random.default_rng(0).standard_normal((20, 3))
    >>> check_column_scales(X * [1, 1e6, 1], np.float64, resolve_backend("numpy"))
    >>> X[:, 1] *= 1e15
    >>> check_column_scales(X, np.float64, resolve_backend("numpy"))
    Traceback (most recent call last):
    ...
    ValueError: X's feature 1 has a norm (once centred) 1.03e+15 times that of ...

    Alphas that shrink the smaller features to within rounding solve it:

    >>> check_column_scales(X, np.float64, resolve_backend("numpy"), alphas=[1e20])
    """
    norms = centred_column_norms(X, fit_intercept, sample_weight)
    if norms is None:
        # The estimator's own check of X refuses NaN and inf, naming them.
        return
    # array_api_compat's numpy namespace: numpy 1.x has no astype function.
    xp = array_namespace(norms)
    spread = _linalg.column_spread(norms, xp)
    _linalg.check_column_spread(
        *spread,
        decomposed_dtype(dtype, backend),
        alpha=smallest_alpha(alphas),
        norm=_linalg.frobenius_norm(norms, xp),
    )


def smallest_alpha(alphas):
    """The smallest of ``alphas`` as a float; 0.0 (least squares) for None."""
    return 0.0 if alphas is None else float(np.min(alphas))


def decomposed_dtype(dtype, backend):
    """The dtype the SVDs of a ``dtype`` problem run in on ``backend``:
    float64 on the CPU, ``dtype`` on a GPU and on MPS."""
    if not backend.is_gpu and backend.device != "mps":
        return np.dtype(np.float64)
    return np.dtype(dtype)


def centred_column_norms(X, fit_intercept, sample_weight=None):
    """The norm of each column of host ``X``, centred (with the intercept)
    and weight-scaled as the solvers decompose it, in float64; None where X
    holds NaN or inf.

    Two passes over blocks of whole rows (the means, then the deviations
    from them): a C-ordered X is read in order, where blocks of columns
    walked its rows with a stride (4x slower on a 61,440 x 1,105 design).
    """
    n_samples, n_features = X.shape
    rows = max(1, SCALE_CHECK_BYTES // (8 * max(n_features, 1)))
    starts = range(0, n_samples, rows)
    weight = None if sample_weight is None else np.asarray(sample_weight)

    def block(start):
        return np.asarray(X[start : start + rows], np.float64)

    mean = None
    if fit_intercept:
        total = np.zeros(n_features)
        for start in starts:
            values = block(start)
            if not np.isfinite(values).all():
                return None
            if weight is None:
                total += values.sum(axis=0)
            else:
                total += weight[start : start + rows] @ values
        mean = total / (n_samples if weight is None else weight.sum())
    root = None if weight is None else np.sqrt(weight)[:, None]
    # Each block's norms, then the norm of those: no overflow where the sum
    # of squares of a column would pass the float64 range.
    partial = np.empty((len(starts), n_features))
    for i, start in enumerate(starts):
        values = block(start)
        if mean is None:
            if not np.isfinite(values).all():
                return None
        else:
            values = values - mean
        if root is not None:
            # A new array: without the centring, values may be X itself.
            values = values * root[start : start + rows]
        partial[i] = _linalg.column_norms(values, np)
    return _linalg.column_norms(partial, np)


def _valid_alphas(alphas):
    try:
        return check_alphas(alphas)
    except (TypeError, ValueError):
        return None


def ridge_spec(estimator):
    """The ridge problem ``estimator.fit`` solves, or None for the generic path.

    Exact types only, since a subclass may override ``fit``:
    ``LinearRegression`` (ridge at alpha 0 on the numerical rank of X),
    ``Ridge`` with an exact solver, ``RidgeCV`` with a scoring and CV the
    schemes compute, and any estimator that states its own problem with a
    ``__skbatch_ridge_spec__()`` method (``BatchedRidge``). Anything the
    batched paths would compute differently (positive coefficients,
    iterative solvers, invalid parameters, which the estimator itself must
    report) gives None.
    """
    own = getattr(estimator, "__skbatch_ridge_spec__", None)
    if own is not None:
        return own()
    kind = type(estimator)
    params = estimator.get_params(deep=False)
    if kind is LinearRegression:
        if params["positive"]:
            return None
        return RidgeSpec(np.zeros(1), fit_intercept=params["fit_intercept"])
    if kind is Ridge:
        alpha = params["alpha"]
        if params["positive"] or params["solver"] not in EXACT_RIDGE_SOLVERS:
            return None
        values = np.asarray(alpha) if not isinstance(alpha, str | bool) else None
        if (
            values is None
            or values.dtype.kind not in "iuf"
            or values.ndim > 1
            or values.size == 0
            or not np.all(np.isfinite(values))
            or np.any(values < 0)
        ):
            return None
        return RidgeSpec(
            values.astype(np.float64).reshape(-1),
            fit_intercept=params["fit_intercept"],
            fixed_per_target=values.ndim == 1,
        )
    if kind is RidgeCV:
        alphas = _valid_alphas(params["alphas"])
        cv = params["cv"]
        if (
            alphas is None
            or params["scoring"] not in RIDGECV_SCORINGS
            or isinstance(cv, str)
            # RidgeCV refuses per-target alphas with K-fold.
            or (cv is not None and params["alpha_per_target"])
        ):
            return None
        return RidgeSpec(
            alphas,
            cv,
            params["scoring"],
            params["alpha_per_target"],
            params["fit_intercept"],
        )
    return None


def batched_ridge_spec(params):
    """The spec of ``BatchedRidge`` parameters ``params``, or None if invalid."""
    alphas = _valid_alphas(params["alphas"])
    scoring = params["scoring"]
    if alphas is None or scoring not in SCORINGS:
        return None
    solver = params.get("solver", "svd")
    if not isinstance(solver, str) or solver not in DECOMPOSITIONS:
        return None
    try:
        cv_scheme(params["cv"], scoring)
    except (TypeError, ValueError):
        return None
    return RidgeSpec(
        alphas,
        params["cv"],
        scoring,
        params["alpha_per_target"],
        params["fit_intercept"],
        params["dtype"],
        solver=solver,
    )


# The estimators a reader expects the batched paths to take.
_RIDGE_CLASSES = (LinearRegression, Ridge, RidgeCV)


def _ridge_like(estimator):
    return isinstance(estimator, _RIDGE_CLASSES) or hasattr(
        estimator, "__skbatch_ridge_spec__"
    )


def refit_reason(estimator):
    """Why a ridge-like ``estimator`` gets no ridge problem from :func:`ridge_spec`.

    For the wrappers' ``verbose`` output when they refit an estimator a
    reader would expect on a batched path: ``BatchedRidge``, ``Ridge``,
    ``RidgeCV``, ``LinearRegression``, their subclasses, and a ``Pipeline``
    ending in one. Each wrapper adds its own reasons (fit parameters, its
    scoring...).

    Returns
    -------
    reason : str or None
        None when :func:`ridge_spec` states the problem, or when the
        estimator is not ridge-like (nobody expects a batched path then).

    Examples
    --------
    >>> from sklearn.linear_model import Ridge
    >>> from skbatch._ridge.spec import refit_reason
    >>> print(refit_reason(Ridge(solver="sag")))  # doctest: +NORMALIZE_WHITESPACE
    Ridge(solver='sag') is iterative: only the exact solvers
    ('auto', 'svd', 'cholesky') are solved in batches
    >>> refit_reason(Ridge()) is None
    True
    """
    if isinstance(estimator, Pipeline):
        last = estimator.steps[-1][1] if estimator.steps else None
        if last is None or not _ridge_like(last):
            return None
        return (
            f"a Pipeline ending in {type(last).__name__} is refit as a whole: only "
            f"a bare ridge estimator is solved in batches (transform X beforehand "
            f"when the transform learns nothing from the rows)"
        )
    if not _ridge_like(estimator) or ridge_spec(estimator) is not None:
        return None
    name = type(estimator).__name__
    if hasattr(estimator, "__skbatch_ridge_spec__"):
        return f"{name}'s parameters are invalid (its fit says which)"
    if type(estimator) not in _RIDGE_CLASSES:
        return (
            f"{name} subclasses a scikit-learn ridge estimator and may override "
            f"fit: only the exact classes are solved in batches"
        )
    params = estimator.get_params(deep=False)
    if params.get("positive"):
        return f"{name}(positive=True) constrains the coefficients"
    if isinstance(estimator, Ridge):
        if params["solver"] not in EXACT_RIDGE_SOLVERS:
            return (
                f"{name}(solver={params['solver']!r}) is iterative: only the exact "
                f"solvers {EXACT_RIDGE_SOLVERS} are solved in batches"
            )
        return f"{name}(alpha={params['alpha']!r}) is not a number >= 0 or a 1-D array"
    if params["scoring"] not in RIDGECV_SCORINGS:
        return (
            f"{name}(scoring={params['scoring']!r}): only the scorings "
            f"{RIDGECV_SCORINGS} are computed in batches"
        )
    if isinstance(params["cv"], str) or (
        params["cv"] is not None and params["alpha_per_target"]
    ):
        return f"{name}(cv={params['cv']!r}) is refused or refit by {name} itself"
    return f"{name}(alphas={params['alphas']!r}) are not positive finite numbers"
