"""Ridge kernels written once against the array API (numpy, torch, jax).

Every function here is pure: it receives arrays of one namespace ``xp`` and
returns arrays of that namespace on the same device. Targets are the columns
of a 2-D ``Y`` of shape (n_samples, n_targets); batching them, choosing the
device and sizing the work belong to the callers.

The design matrix is decomposed once (thin SVD of the centred X); targets are
projected onto that basis once, and every alpha is evaluated from the
projection. This is the svd path of scikit-learn's ``_RidgeGCV``, with one
alpha per target and without forming coefficients for every alpha.

The bootstrap kernels (:func:`weighted_primal_coef`,
:func:`weighted_dual_coef`) solve a whole batch of replicates at once from
bootstrap counts used as row weights; Y is never copied whole per replicate
(the primal kernel gathers a replicate's drawn rows a block at a time).
"""

import contextlib
import threading
import warnings
import weakref
from typing import NamedTuple

import numpy as np
import scipy.linalg
from array_api_compat import array_namespace, is_numpy_array
from array_api_compat import device as array_device
from scipy.linalg import LinAlgWarning

from . import _backends
from .exceptions import DegenerateDataWarning

# Rows of Y gathered at once by the bootstrap kernel (_weighted_products), per
# batch in flight: large enough for full-speed GEMMs over them.
MAX_GATHER_BYTES = 2**23
# Per replicate, the products above which skipping a replicate's undrawn rows
# (a third of the flops) outweighs a Python loop over the replicates.
GATHER_MIN_FLOPS = 1e7
# Columns of X (the ones column included) below which one replicate's X'WY
# alone runs far below the BLAS rate, reading Y's rows for few output rows:
# skipping rows made a fit 2x slower at 21 columns and 3% slower at 51, and a
# batch's products 10% faster at 76 and 17% at 101 (float64, one thread,
# benchmarks/RESULTS.md).
GATHER_MIN_COLUMNS = 64
# float64 bytes of each widened operand block of accumulated_matmul: large
# enough for full-rate GEMMs, a bounded temporary beside a batch.
ACCUMULATION_BLOCK_BYTES = 2**23
# An empty array whose namespace is array_api_compat's numpy (_namespace).
_NUMPY_PROBE = np.empty(0)
# Names accepted by the scoring functions; higher is better for all three.
_SCORINGS = ("neg_mean_squared_error", "r2", "correlation")
# R^2 and correlation need deviations from a mean: one row has none.
MIN_SCORED_ROWS = 2


def center(A, sample_weight=None, *, fit_intercept=True, xp=None):
    """Centre columns on their (weighted) means and scale rows by sqrt(weight).

    The same preprocessing as scikit-learn's ``_preprocess_data`` with
    ``rescale_with_sw=True``: weighted least squares becomes ordinary least
    squares on the returned array.

    Parameters
    ----------
    A : array of shape (n_samples, n_columns)
        Design matrix or targets.
    sample_weight : array of shape (n_samples,), default=None
        Non-negative weights.
    fit_intercept : bool, default=True
        Whether to subtract the column means.

    Returns
    -------
    A_centered : array of shape (n_samples, n_columns)
    offset : array of shape (n_columns,)
        Subtracted means (zeros when ``fit_intercept`` is False).
    """
    xp = _namespace(xp, A)
    if sample_weight is not None:
        sample_weight = xp.astype(sample_weight, A.dtype, copy=False)
    if fit_intercept:
        # The mean of the columns shifted by their first row: a constant
        # column is then exactly 0 once centred and its offset exactly its
        # value, whatever order its mean is summed in (which depends on the
        # batch it is in). Rounding noise in its place made its CV scores
        # noise, and the alpha chosen depend on the batch size.
        A_centered = A - A[:1]
        shift = _average(A_centered, sample_weight, xp)
        offset = A[0] + shift
        library = _out_namespace(A_centered)
        if library is None:
            A_centered = A_centered - shift
        else:
            library.subtract(A_centered, shift, out=A_centered)
    else:
        offset = xp.zeros(A.shape[1], dtype=A.dtype, device=array_device(A))
        A_centered = A - offset
    if sample_weight is not None:
        A_centered = A_centered * xp.sqrt(sample_weight)[:, None]
    return A_centered, offset


def svd_decompose(X, *, n_rows=None, alpha=0.0, xp=None):
    """Thin SVD of ``X`` without its numerically null directions.

    Singular values at or below ``s_max * max(n, p) * eps`` (the rank rule of
    ``numpy.linalg.matrix_rank``) are rounding noise of a rank-deficient X
    (duplicated columns, p > n after centring); dropping them leaves a basis
    of the column space only.

    float32 on the CPU is decomposed in float64, as numpy's own SVD and
    scikit-learn's Ridge do: LAPACK's float32 SVD left coefficients 7x less
    accurate than theirs.

    Columns whose norms differ by more than ``GRADED_COLUMNS_RATIO`` (a
    timestamp in nanoseconds beside standardised features) are decomposed
    largest first: LAPACK's Householder steps then never mix the large
    column into the small ones' digits, and the small columns' directions
    keep their relative accuracy. Their directions are then null below
    ``max(n, p) * eps`` times the norms of the columns they combine, not
    times ``s_max``, and the decomposition is checked: a direction's error
    (its residual ``||X v - s u||``) must keep half the digits of the larger
    of its columns' norms and ``sqrt(alpha)``. Ridge shrinks a direction
    of singular value s by ``s / (s^2 + alpha) <= 1 / (2 sqrt(alpha))``:
    the computed factors are exact for X less their residuals, and an
    error below that scale moves the coefficients by as little against
    their largest value, so columns far below ``sqrt(alpha)`` need not be
    resolved (scikit-learn's Ridge shrinks them alike). A direction that
    fails raises ``ValueError`` naming the smallest alpha that would pass.

    Parameters
    ----------
    X : array of shape (n_samples, n_features)
        Centred (and weight-scaled) design matrix.
    n_rows : int, default=None
        Rows of the matrix whose SVD this is, for the rank rule, when ``X``
        is its triangular factor R (:func:`qr_factor`): the rounding of the
        QR of n rows is that of n rows. None: ``X``'s own.
    alpha : float, default=0.0
        The smallest alpha the factors are solved with (0: least squares),
        for the check of graded columns.

    Returns
    -------
    U : array of shape (n_samples, rank)
    s : array of shape (rank,)
        Singular values, decreasing.
    Vt : array of shape (rank, n_features)
        In ``X``'s dtype, as ``U`` and ``s``.

    Raises
    ------
    ValueError
        When a column's directions cannot be resolved beside the largest
        column (see :func:`check_column_spread`), or graded columns are
        resolved too coarsely for ``alpha`` (see :func:`resolution_message`).
    """
    xp = _namespace(xp, X)
    dtype = X.dtype
    norms = column_norms(X, xp)
    ratio, largest, smallest = column_spread(norms, xp)
    graded = ratio > GRADED_COLUMNS_RATIO
    if graded:
        order = xp.argsort(-norms, stable=True)
        A = xp.take(X, order, axis=1)
    else:
        A = X
    A = xp.astype(A, decomposition_dtype(A, xp), copy=False)
    check_column_spread(
        ratio,
        largest,
        smallest,
        A.dtype,
        alpha=alpha,
        norm=frobenius_norm(norms, xp),
    )
    # Multi-threaded LAPACK SVD is erratic on small CPU hosts (0.4 to 10 s
    # for 2000 x 500 on two cores, against 0.15 s on one thread); the SVD is
    # a small share of a fit, so it runs on one thread there.
    with one_thread(A):
        U, s, Vt = _backends.of_array(A).svd(A)
    eps = xp.finfo(dtype).eps
    size = max(X.shape[0] if n_rows is None else n_rows, X.shape[1])
    if not graded:
        rank = int(xp.sum(s > s[0] * size * eps))
        return (
            _cast(U[:, :rank], dtype, xp),
            _cast(s[:rank], dtype, xp),
            _cast(Vt[:rank, :], dtype, xp),
        )
    Vt = xp.take(Vt, xp.argsort(order, stable=True), axis=1)
    A = xp.astype(X, A.dtype, copy=False)
    # The scale of each direction's rounding: the norms of the columns it
    # combines.
    norms = xp.astype(norms, A.dtype, copy=False)
    floor = xp.sqrt(column_sq_norms(xp.permute_dims(Vt, (1, 0)) * norms[:, None], xp))
    kept = s > floor * (size * eps)
    (kept,) = xp.nonzero(kept)
    U, s, Vt, floor = (
        xp.take(U, kept, axis=1),
        xp.take(s, kept, axis=0),
        xp.take(Vt, kept, axis=0),
        xp.take(floor, kept, axis=0),
    )
    # An entry of the bidiagonal form neglected by LAPACK (a column coupled
    # to the largest one too weakly for its precision), or the rounding of
    # the largest columns spread into the small ones by the reduction's
    # right transforms (one of many columns 1e8 times others), shows as a
    # residual X v - s u above the rounding of X v. It matters only beside
    # sqrt(alpha) where that exceeds the columns' norms (see docstring).
    # The difference written into U s: two n x rank temporaries, not three.
    residual = xp.sqrt(
        column_sq_norms(_subtract(A @ xp.permute_dims(Vt, (1, 0)), U * s), xp)
    )
    tolerance = float(xp.finfo(dtype).eps) ** RESIDUAL_EPS_POWER
    failed = residual > xp.clip(floor, min=float(alpha) ** 0.5) * tolerance
    if bool(xp.any(failed)):
        # The alpha from which every direction's error is below tolerance.
        needed = float(xp.max(xp.where(failed, residual, 0.0))) / tolerance
        raise ValueError(
            resolution_message(
                ratio, largest, smallest, A.dtype, alpha, needed * needed
            )
        )
    return _cast(U, dtype, xp), _cast(s, dtype, xp), _cast(Vt, dtype, xp)


# Centred columns whose norms spread by more than this factor are decomposed
# largest first and checked (svd_decompose); below it LAPACK's normwise error
# costs them no digit that matters (1e-12 relative at a spread of 1e3).
GRADED_COLUMNS_RATIO = 1e2
# LAPACK's bidiagonal SVD (dbdsqr, dbdsdc) sets an off-diagonal entry to zero
# below max(10, min(100, eps**(-1/8))) eps times its neighbours: a column
# smaller than 1 / (this * eps) times the largest is coupled to it below
# that, and its share of the largest column's coefficient is lost (the
# predictions of one column 1e14 times the others in float64: 4% off).
BIDIAGONAL_DEFLATION = 100
# Largest residual ||X v - s u|| of a direction of graded columns, relative
# to the norms of the columns it combines, as a power of the dtype's eps:
# half its digits kept; larger ones are a neglected coupling (above).
RESIDUAL_EPS_POWER = 0.5


def decomposition_dtype(X, xp):
    """float64 for float32 ``X`` on the CPU where the library has it, else X's."""
    if X.dtype != xp.float32 or _backends.of_array(X).device_of(X) != "cpu":
        return X.dtype
    return _criterion_dtype(X, xp)


def column_norms(A, xp):
    """Euclidean norm of every column, without overflow for entries past 1e154."""
    norms = xp.sqrt(column_sq_norms(A, xp))
    if bool(xp.all(xp.isfinite(norms))):
        return norms
    largest = xp.max(xp.abs(A), axis=0)
    safe = xp.where(largest > 0, largest, 1.0)
    return largest * xp.sqrt(column_sq_norms(A / safe, xp))


def frobenius_norm(norms, xp):
    """The Frobenius norm of a matrix of column ``norms``, without overflow."""
    return float(column_norms(norms[:, None], xp)[0])


def column_spread(norms, xp):
    """``(ratio, largest, smallest)`` of the non-zero column ``norms``.

    The ratio of the largest to the smallest non-zero norm (1.0 with fewer
    than two), and their column indices. Columns of norm 0 (constant, once
    centred) add no direction and do not count.
    """
    nonzero = norms > 0
    if int(xp.sum(xp.astype(nonzero, xp.int32))) < 2:
        return 1.0, 0, 0
    largest = int(xp.argmax(norms))
    smallest = int(xp.argmin(xp.where(nonzero, norms, xp.inf)))
    return float(norms[largest] / norms[smallest]), largest, smallest


def max_column_spread(dtype):
    """The largest spread of column norms a ridge decomposition in ``dtype``
    resolves whatever alpha (:func:`shrinking_alpha` for the others).

    ``dtype`` is a numpy dtype or its name ("float32", "float64").
    """
    return 1.0 / (BIDIAGONAL_DEFLATION * float(np.finfo(_dtype_name(dtype)).eps))


def shrinking_alpha(norm, dtype):
    """The smallest alpha for which a ridge decomposition in ``dtype`` of X
    of Frobenius norm ``norm`` solves any spread of column norms.

    LAPACK's bidiagonal SVD neglects couplings below ``BIDIAGONAL_DEFLATION
    * eps`` times ``s_max <= norm``; beside ``sqrt(alpha)`` such an error
    keeps the digits :func:`svd_decompose` requires (``eps **
    RESIDUAL_EPS_POWER``) once alpha is this large: the columns it could
    lose are those alpha shrinks to nothing (as scikit-learn's Ridge does).
    """
    eps = float(np.finfo(_dtype_name(dtype)).eps)
    root = BIDIAGONAL_DEFLATION * eps * norm / eps**RESIDUAL_EPS_POWER
    return root * root


def _dtype_name(dtype):
    """The name, float32 or float64, of a numpy, torch or jax dtype."""
    return str(dtype).rsplit(".", 1)[-1]


def scale_message(ratio, largest, smallest, dtype, names=None, *, alpha=None):
    """The refusal of columns on scales too far apart, naming them and the
    fix; ``alpha``: ``(smallest alpha given, smallest that solves)``."""

    def name(j):
        return f"{names[j]!r}" if names is not None else str(j)

    shrink = ""
    if alpha is not None and np.isfinite(alpha[1]):
        shrink = (
            f" Alphas from {alpha[1]:.2g} on (the smallest is {alpha[0]:.3g}) "
            "would shrink the smaller features' share to within rounding."
        )
    return (
        f"X's feature {name(largest)} has a norm (once centred) {ratio:.3g} times "
        f"that of feature {name(smallest)}: a ridge solve in {_dtype_name(dtype)} "
        f"resolves the smaller feature's share of the fit only up to a ratio of "
        f"about {max_column_spread(dtype):.2g}.{shrink} Rescale the features, "
        "e.g. with sklearn.preprocessing.StandardScaler (or a timestamp in "
        "seconds rather than nanoseconds)."
    )


def resolution_message(ratio, largest, smallest, dtype, alpha, needed):
    """The refusal of graded columns that the SVD resolved too coarsely for
    the smallest ``alpha`` (:func:`svd_decompose`), with the smallest alpha,
    ``needed``, that it resolves them for."""
    return (
        f"The smallest alpha, {alpha:.3g}, is too small for X's features on "
        f"scales far apart (feature {largest} has a norm, once centred, "
        f"{ratio:.3g} times that of feature {smallest}): the SVD in "
        f"{_dtype_name(dtype)} keeps too few digits of the smaller features' "
        f"directions for a fit that alpha leaves them a share of. Use alphas "
        f"of at least {needed:.2g}, or rescale the features, e.g. with "
        "sklearn.preprocessing.StandardScaler."
    )


def check_column_spread(
    ratio, largest, smallest, dtype, names=None, *, alpha=0.0, norm=np.inf
):
    """Refuse a spread of column norms (:func:`column_spread`) ``dtype`` cannot
    solve for alphas from ``alpha`` on, X of Frobenius norm ``norm``.

    Raises
    ------
    ValueError
        Naming the largest and the smallest column, the ratio and the fix.
    """
    if ratio <= max_column_spread(dtype):
        return
    needed = shrinking_alpha(norm, dtype)
    if alpha < needed:
        raise ValueError(
            scale_message(ratio, largest, smallest, dtype, names, alpha=(alpha, needed))
        )


def _cast(A, dtype, xp):
    return xp.astype(A, dtype, copy=False)


def project(U, Y, *, xp=None):
    """Coordinates of the targets in the basis ``U``, computed once per batch.

    Parameters
    ----------
    U : array of shape (n_samples, rank)
    Y : array of shape (n_samples, n_targets)
        Centred (and weight-scaled) targets.

    Returns
    -------
    UtY : array of shape (rank, n_targets)
        In ``Y``'s dtype; float32 on the CPU accumulated in float64
        (:func:`accumulated_matmul`).
    """
    xp = _namespace(xp, U, Y)
    return accumulated_matmul(xp.permute_dims(U, (1, 0)), Y, xp)


def accumulated_matmul(A, B, xp):
    """``A @ B`` in ``B``'s dtype, accumulated in float64 where float32 is
    decomposed in float64 (:func:`decomposition_dtype`: the CPU).

    The products that turn the factors into coefficients (:func:`project`,
    :func:`ridge_coef`) summed in float32 left coefficients up to 3x the
    error of scikit-learn's float32 ``Ridge`` (its SVD solver; 1.2x summed
    in float64). Both operands are widened a block at a time, at most
    ``ACCUMULATION_BLOCK_BYTES`` each, the sum over the inner dimension
    kept in float64.
    """
    wide = decomposition_dtype(B, xp)
    if wide == B.dtype:
        return A @ B
    m, k = A.shape
    t = B.shape[1]
    rows = max(1, ACCUMULATION_BLOCK_BYTES // (8 * m))
    width = max(1, ACCUMULATION_BLOCK_BYTES // (8 * max(m, min(rows, k))))
    out = _scratch((m, t), B.dtype, B, xp) if width < t else None
    columns = []
    for start in range(0, t, width):
        total = None
        for inner in range(0, k, rows):
            part = xp.astype(A[:, inner : inner + rows], wide) @ xp.astype(
                B[inner : inner + rows, start : start + width], wide
            )
            total = part if total is None else _add(total, part)
        if out is None:
            columns.append(xp.astype(total, B.dtype))
        else:
            out[:, start : start + width] = total
    if out is not None:
        return out
    return columns[0] if len(columns) == 1 else xp.concat(columns, axis=1)


def _add(A, B):
    """``A + B``, written into ``A`` where the library allows it."""
    library = _out_namespace(A)
    if library is None:
        return A + B
    return library.add(A, B, out=A)


def residual_sq_norm(
    U, UtY, Y, *, fit_intercept=True, total=None, coords=None, xp=None
):
    """Squared norm, per target, of the part of ``Y`` outside the span of ``U``.

    This is the residual of the least-squares fit, the alpha-free part of the
    ridge residual used by :func:`gcv_scores`. In float64 it is
    ``||Y||^2 - ||U'Y||^2``, which saves an n x rank x n_targets product,
    wherever that subtraction keeps at least three of the digits the residual
    has (its relative error is at most about ``n * eps / OUTSIDE_CUTOFF``);
    targets fitted closer than that, and every target in float32, get the
    residual ``Y - U U'Y`` formed explicitly.

    Parameters
    ----------
    U : array of shape (n_samples, rank)
        The orthonormal basis; with ``coords``, the orthonormal Q of shape
        (n_samples, k) of which U is ``Q @ coords``.
    UtY : array of shape (rank, n_targets)
    Y : array of shape (n_samples, n_targets)
        Centred (and weight-scaled) targets.
    fit_intercept : bool, default=True
        Whether ``Y`` was centred.
    total : array of shape (n_targets,), default=None
        ``||Y||^2`` per target, when computed once for several bases of the
        same targets (read in float64 only); None computes it.
    coords : array of shape (k, rank), default=None
        U's coordinates in ``U`` given as Q (orthonormal columns): U is then
        never formed, its residuals are ``Y - Q (coords U'Y)``.

    Returns
    -------
    sq_norm : array of shape (n_targets,)
        In float64 where the device supports it.
    """
    xp = _namespace(xp, U, UtY, Y)
    dtype = _criterion_dtype(Y, xp)
    if _spans_centered_targets(Y.shape[0], UtY.shape[0], fit_intercept):
        # Forming a residual known to be zero would only add rounding noise,
        # enough to swamp small-alpha residuals in float32.
        return xp.zeros(Y.shape[1], dtype=dtype, device=array_device(Y))
    if Y.dtype != xp.float64:
        return _explicit_sq_norm(U, UtY, Y, dtype, xp, coords)
    if total is None:
        total = column_sq_norms(Y, xp)
    sq_norm = total - column_sq_norms(UtY, xp)
    cancelled = sq_norm <= OUTSIDE_CUTOFF * total
    if not bool(xp.any(cancelled)):
        return sq_norm
    (columns,) = xp.nonzero(cancelled)
    explicit = _explicit_sq_norm(
        U,
        xp.take(UtY, columns, axis=1),
        xp.take(Y, columns, axis=1),
        dtype,
        xp,
        coords,
    )
    if hasattr(sq_norm, "at"):  # jax: immutable arrays
        return sq_norm.at[columns].set(explicit)
    sq_norm[columns] = explicit
    return sq_norm


def _explicit_sq_norm(U, UtY, Y, dtype, xp, coords=None):
    """``||Y - U U'Y||^2`` per column, the residual formed, squared in ``dtype``
    (U given as ``Q`` and ``coords``: ``Q (coords U'Y)``)."""
    if coords is not None:
        UtY = coords @ UtY
    residual = _subtract(Y, _matmul(U, UtY, _scratch(Y.shape, Y.dtype, Y, xp)))
    squares = _multiply(residual, residual, _scratch(Y.shape, dtype, Y, xp))
    return xp.sum(squares, axis=0)


def ridge_coef(Vt, s, UtY, alpha, *, xp=None):
    """Ridge coefficients ``V diag(s / (s^2 + alpha)) U'Y``, one alpha per target.

    Parameters
    ----------
    Vt : array of shape (rank, n_features)
    s : array of shape (rank,)
    UtY : array of shape (rank, n_targets)
    alpha : float or array of shape (n_targets,)

    Returns
    -------
    coef : array of shape (n_features, n_targets)
        Coefficients of the centred problem; the intercept is
        ``Y_offset - X_offset @ coef``.
    """
    xp = _namespace(xp, Vt, s, UtY)
    alpha = _as_float_array(alpha, s, xp)
    # Targets share the few alphas of a grid: the factors of each distinct
    # alpha, gathered per target, cost rank x n_alphas operations instead of
    # rank x n_targets (for 2,000 targets and rank 300, 14 ms beside a 7 ms
    # product). Computed elementwise either way, they are the same numbers.
    values, inverse = xp.unique_inverse(alpha)
    _, _, filtered = _ridge_factors(s[:, None], values[None, :], xp)
    return accumulated_matmul(
        xp.permute_dims(Vt, (1, 0)), xp.take(filtered, inverse, axis=1) * UtY, xp
    )


def _ridge_factors(s, alpha, xp):
    """``alpha / (s^2 + alpha)``, ``s^2 / (s^2 + alpha)`` and ``s / (s^2 + alpha)``.

    ``s`` and ``alpha`` broadcast against each other. The three are computed
    from ``t = min(s / sqrt(alpha), sqrt(alpha) / s)``, whose square never
    exceeds 1: ``s^2`` itself overflows above 1e154 (an X of entries near
    1e155) and loses its digits below 1e-154, which turned the coefficients
    of such an X into zeros. Squares of t that underflow are the exact limit.
    """
    root_alpha = xp.sqrt(alpha)
    small = s <= root_alpha
    # Divisors that are never 0: sqrt(alpha) >= s > 0 where s is small, and
    # s > 0 elsewhere (alpha 0, least squares, lands there).
    safe_root_alpha = xp.where(small, root_alpha, 1.0)
    t = xp.where(small, s / safe_root_alpha, root_alpha / s)
    damping = 1.0 / (1.0 + t * t)
    damped_t_sq = t * t * damping
    shrinkage = xp.where(small, damping, damped_t_sq)
    kept = xp.where(small, damped_t_sq, damping)
    filtered = xp.where(small, t / safe_root_alpha, 1.0 / s) * damping
    return shrinkage, kept, filtered


def loo_scores(
    U,
    s,
    UtY,
    Y,
    alphas,
    *,
    fit_intercept=True,
    sample_weight=None,
    scoring=None,
    xp=None,
):
    """Exact leave-one-out score of every alpha for every target.

    Equal in value to scikit-learn's ``RidgeCV(alphas, alpha_per_target=True,
    gcv_mode="svd", scoring=scoring)``. The LOO error of sample i is its ridge
    residual divided by ``1 - h_ii``, h the hat matrix (plus the intercept's
    leverage ``w_i / sum(w)``). Each alpha costs one n x rank x n_targets
    product: the residual is ``Y - U diag(s^2 / (s^2 + alpha)) U'Y``, or
    ``U diag(alpha / (s^2 + alpha)) U'Y`` where U spans the targets.

    Parameters
    ----------
    U : array of shape (n_samples, rank)
    s : array of shape (rank,)
    UtY : array of shape (rank, n_targets)
    Y : array of shape (n_samples, n_targets)
        Targets as returned by :func:`center`.
    alphas : array-like of shape (n_alphas,)
    fit_intercept : bool, default=True
    sample_weight : array of shape (n_samples,), default=None
        The weights given to :func:`center`.
    scoring : {None, "neg_mean_squared_error", "r2", "correlation"}
        None is scikit-learn's default criterion: minus the mean over samples
        of ``w_i * e_i^2``. The named scorings compare the LOO predictions
        with the targets, weighted by ``sample_weight`` in every mean, as
        ``RidgeCV`` passes its weights to the scorer.

    Returns
    -------
    scores : array of shape (n_alphas, n_targets)
        Higher is better. In float64 where the device supports it, so that a
        float32 problem picks the alphas float64 would.
    """
    xp = _namespace(xp, U, s, UtY, Y)
    _check_scoring(scoring, allow_none=True)
    alphas = _as_float_array(alphas, s, xp)
    dtype = _criterion_dtype(Y, xp)
    shrinkage, kept, _ = _ridge_factors(s, alphas[:, None], xp)
    spans = _spans_centered_targets(*U.shape, fit_intercept)
    # Where U spans the targets the residual is exactly U diag(shrinkage) U'Y;
    # elsewhere Y - U diag(s^2 / (s^2 + alpha)) U'Y, one product per alpha.
    factors = shrinkage if spans else kept
    loo_denominators = _loo_denominators(U, shrinkage, fit_intercept, sample_weight, xp)
    loo_denominators = xp.astype(loo_denominators, dtype, copy=False)
    if scoring is None:
        # mean((residual / d)^2) as a product with 1 / d^2: no n x t quotient.
        inverse_sq_denominators = 1.0 / loo_denominators**2
    elif sample_weight is not None:
        # Scorers compare errors and targets on the original scale, weighted;
        # rows of zero weight are zero in Y and U, and stay out of the score.
        score_weight = xp.astype(sample_weight, dtype, copy=False)
        scale = xp.sqrt(score_weight)[:, None]
        scale = xp.where(scale == 0, 1.0, scale)
        loo_denominators = loo_denominators * scale
        y_true = xp.astype(Y, dtype, copy=False) / scale
    else:
        score_weight = None
        y_true = xp.astype(Y, dtype, copy=False)
    spread = None
    if scoring is not None and scoring != "neg_mean_squared_error":
        # The targets' spread does not depend on alpha; their values carry
        # the rounding of Y's dtype.
        spread = target_spread(
            y_true,
            score_weight,
            y_dtype=Y.dtype,
            deviations=scoring == "correlation",
            xp=xp,
        )

    # The factors scale U's columns or U'Y's rows, whichever is smaller.
    scale_basis = U.shape[0] < UtY.shape[1]
    scaled = _scratch(U.shape if scale_basis else UtY.shape, U.dtype, U, xp)
    residual_buffer = _scratch(Y.shape, Y.dtype, Y, xp)
    square_buffer = (
        residual_buffer if dtype == Y.dtype else _scratch(Y.shape, dtype, Y, xp)
    )
    scores = []
    for k in range(alphas.shape[0]):
        if scale_basis:
            left, right = _multiply(U, factors[k], scaled), UtY
        else:
            left, right = U, _multiply(factors[k, :, None], UtY, scaled)
        product = _matmul(left, right, residual_buffer)
        residual = product if spans else _subtract(Y, product)
        if scoring is None:
            squares = _multiply(residual, residual, square_buffer)
            scores.append(-(inverse_sq_denominators[:, k] @ squares) / Y.shape[0])
        else:
            residual = xp.astype(residual, dtype, copy=False)
            errors = residual / loo_denominators[:, k, None]
            scores.append(
                _score_errors(
                    errors,
                    y_true,
                    scoring,
                    score_weight,
                    xp,
                    spread=spread,
                    y_dtype=Y.dtype,
                )
            )
    return xp.stack(scores)


def gcv_scores(
    s, UtY, sq_norm_residual, n_samples, alphas, *, fit_intercept=True, xp=None
):
    """Generalized cross-validation score of every alpha for every target.

    ``-(RSS / n) / (1 - tr(H) / n)^2`` with ``tr(H) = sum s^2 / (s^2 +
    alpha)`` (+1 for the intercept). The residual splits into a part outside
    the span of U, independent of alpha, and ``alpha / (s^2 + alpha) U'Y``
    inside it, so all alphas cost one n_alphas x rank x n_targets product.

    With sample weights, U and Y are the weight-scaled arrays of
    :func:`center`, so RSS is the weighted ``sum w_i r_i^2``; ``n`` is then
    the number of rows of non-zero weight and the weights must sum to it.
    Both invariances a weighted fit owes its user then hold exactly: a row
    of weight 0 is the same as no row (it adds nothing to RSS, tr(H) or n),
    and weights multiplied by a constant are normalised back to the same
    values.

    Parameters
    ----------
    s : array of shape (rank,)
    UtY : array of shape (rank, n_targets)
    sq_norm_residual : array of shape (n_targets,)
        From :func:`residual_sq_norm`.
    n_samples : int
        Rows of non-zero weight (all rows without weights).
    alphas : array-like of shape (n_alphas,)
    fit_intercept : bool, default=True

    Returns
    -------
    scores : array of shape (n_alphas, n_targets)
        Higher is better; in float64 where the device supports it.
    """
    xp = _namespace(xp, s, UtY)
    s = xp.astype(s, _criterion_dtype(UtY, xp), copy=False)
    alphas = _as_float_array(alphas, s, xp)
    shrinkage, kept, _ = _ridge_factors(s, alphas[:, None], xp)
    UtY_sq = xp.astype(UtY, s.dtype, copy=False) ** 2
    sq_norm = xp.astype(sq_norm_residual, s.dtype, copy=False) + shrinkage**2 @ UtY_sq
    trace = xp.sum(kept, axis=1) + int(fit_intercept)
    return -(sq_norm / n_samples) / ((1.0 - trace / n_samples) ** 2)[:, None]


def qr_factor(X, *, xp=None):
    """Thin QR of a tall centred design, for the SVDs of its column scalings.

    ``X = Q R`` once; the SVD of ``X[:, kept] * scale`` is then that of the
    small ``R[:, kept] * scale`` (:func:`svd_decompose` with ``n_rows``),
    its left vectors mapped by ``Q``. Householder QR is backward stable
    column by column, so scaling R's columns keeps each column's relative
    accuracy, as decomposing the scaled X would.

    Parameters
    ----------
    X : array of shape (n_samples, n_features)
        Centred (and weight-scaled), ``n_samples >= n_features``.

    Returns
    -------
    Q : array of shape (n_samples, n_features)
        Orthonormal columns, in ``X``'s dtype.
    R : array of shape (n_features, n_features)
        Upper triangular, in the decomposition dtype
        (:func:`decomposition_dtype`).
    """
    xp = _namespace(xp, X)
    A = xp.astype(X, decomposition_dtype(X, xp), copy=False)
    with one_thread(A):
        Q, R = xp.linalg.qr(A)
    return _cast(Q, X.dtype, xp), R


def fold_basis(
    X_train, X_test, *, fit_intercept=True, sample_weight=None, alpha=0.0, xp=None
):
    """Decompose one fold's training rows and express its test rows in that basis.

    Done once per fold; :func:`fold_scores` then takes the targets in as many
    batches as memory requires.

    Parameters
    ----------
    X_train : array of shape (n_train, n_features)
    X_test : array of shape (n_test, n_features)
    fit_intercept : bool, default=True
    sample_weight : array of shape (n_train,), default=None
    alpha : float, default=0.0
        The smallest alpha solved (:func:`svd_decompose`).

    Returns
    -------
    U : array of shape (n_train, rank)
    s : array of shape (rank,)
    X_test_V : array of shape (n_test, rank)
        Test rows, centred on the training means, times V.
    """
    xp = _namespace(xp, X_train, X_test)
    X_centered, X_offset = center(
        X_train, sample_weight, fit_intercept=fit_intercept, xp=xp
    )
    U, s, Vt = svd_decompose(X_centered, alpha=alpha, xp=xp)
    return U, s, (X_test - X_offset) @ Vt.T


def holdout_spread(y_true, scoring, sample_weight=None, *, xp=None):
    """The spread of test targets that :func:`holdout_scores` reads, or None
    where its scoring reads none (mean squared error, fewer than 2 rows)."""
    xp = _namespace(xp, y_true)
    if scoring == "neg_mean_squared_error" or y_true.shape[0] < MIN_SCORED_ROWS:
        return None
    if sample_weight is not None:
        sample_weight = xp.astype(
            sample_weight, _criterion_dtype(y_true, xp), copy=False
        )
    return target_spread(
        y_true, sample_weight, deviations=scoring == "correlation", xp=xp
    )


def holdout_scores(
    s,
    X_test_V,
    UtY,
    y_true,
    alphas,
    *,
    scoring="r2",
    sample_weight=None,
    coords=None,
    spread=None,
    xp=None,
):
    """Test-set score of every alpha for targets already projected.

    Scores are those of :func:`score_per_target` (the same function scores
    both): a target constant on the test rows scores R^2 1.0 if predicted
    exactly, else 0.0, as ``r2_score`` does; R^2 and correlation of fewer
    than 2 test rows are NaN.

    Parameters
    ----------
    s, X_test_V : arrays
        From :func:`fold_basis`.
    UtY : array of shape (rank, n_targets)
        Centred (and weight-scaled) training targets projected on the fold's
        basis.
    y_true : array of shape (n_test, n_targets)
        Test targets minus the (weighted) training means.
    alphas : array-like of shape (n_alphas,)
    scoring : {"r2", "neg_mean_squared_error", "correlation"}, default="r2"
    sample_weight : array of shape (n_test,), default=None
        Weights of the test rows in every mean of the score.
    coords : array of shape (n_columns, rank), default=None
        The basis as coordinates in a larger one, ``U = Q coords``, with
        ``UtY`` then ``Q'Y`` (n_columns, n_targets): each alpha's filtered
        test rows are mapped to Q's coordinates (a small product), rather
        than ``Q'Y`` to U's (a product over all targets).
    spread : TargetSpread, default=None
        That of ``y_true`` (:func:`target_spread`, weighted by
        ``sample_weight``, with deviations for a correlation), when the same
        test targets are scored on several bases: computed here if None.

    Returns
    -------
    scores : array of shape (n_alphas, n_targets)
        Higher is better; in float64 where the device supports it.
    """
    xp = _namespace(xp, s, X_test_V, UtY, y_true)
    _check_scoring(scoring)
    alphas = _as_float_array(alphas, s, xp)
    dtype = _criterion_dtype(y_true, xp)
    _, _, filtered = _ridge_factors(s, alphas[:, None], xp)
    weight = None
    if sample_weight is not None:
        weight = xp.astype(sample_weight, dtype, copy=False)
    # The targets' spread does not depend on alpha: computed once, each alpha
    # then costs its product and one pass over the errors.
    if spread is None:
        spread = holdout_spread(y_true, scoring, weight, xp=xp)
    y_score = y_true
    if scoring == "correlation":
        y_score = xp.astype(y_true, dtype, copy=False)
    # The filter scales whichever factor of the product is smaller: the
    # (n_test, rank) test rows or the (rank, n_targets) projection.
    filter_rows = coords is not None or X_test_V.shape[0] <= UtY.shape[1]
    small = X_test_V if filter_rows else UtY
    filtered_buffer = _scratch(small.shape, small.dtype, small, xp)
    error_buffer = _scratch(y_true.shape, y_true.dtype, y_true, xp)
    square_buffer = (
        error_buffer
        if dtype == y_true.dtype
        else _scratch(y_true.shape, dtype, y_true, xp)
    )
    scores = []
    for k in range(alphas.shape[0]):
        if filter_rows:
            left = _multiply(X_test_V, filtered[k], filtered_buffer)
            if coords is not None:
                left = left @ coords.T
            right = UtY
        else:
            left = X_test_V
            right = _multiply(filtered[k, :, None], UtY, filtered_buffer)
        predictions = _matmul(left, right, error_buffer)
        # A difference of two floats is correctly rounded: float32 errors
        # squared and summed in float64 lose nothing that matters.
        errors = _subtract(y_true, predictions)
        scores.append(
            _score_errors(
                errors,
                y_score,
                scoring,
                weight,
                xp,
                spread=spread,
                y_dtype=y_true.dtype,
                out=square_buffer,
            )
        )
    return xp.stack(scores)


def score_per_target(
    y_true, y_pred, scoring, *, sample_weight=None, warn=True, xp=None
):
    """Score each target column separately; NaN where the score is undefined.

    - ``"r2"``: ``sklearn.metrics.r2_score(multioutput="raw_values")``,
      including its defaults for the degenerate cases: NaN for fewer than 2
      rows; for a constant ``y_true``, 1.0 when predicted exactly, else 0.0
      (``force_finite=True``). Constant and exact are decided up to the
      rounding of the values (:func:`target_spread`), where ``r2_score``
      compares sums of squares with 0 and scores the rounding of a weighted
      mean (R^2 of -1e31 for a constant target).
    - ``"neg_mean_squared_error"``: minus
      ``sklearn.metrics.mean_squared_error(multioutput="raw_values")``; NaN
      without rows.
    - ``"correlation"``: Pearson's r, weighted when ``sample_weight`` is
      given; NaN for fewer than 2 rows and where either column is constant,
      as ``numpy.corrcoef``.

    Every score of skbatch is this one: the cross-validation scores that
    choose alphas (:func:`holdout_scores`, :func:`loo_scores`), the scores
    per target and per band and those of the permutation fast paths.

    Parameters
    ----------
    y_true, y_pred : arrays of shape (n_samples, n_targets)
    scoring : {"r2", "neg_mean_squared_error", "correlation"}
    sample_weight : array of shape (n_samples,), default=None
        Weights of the rows in every mean, as in ``sklearn.metrics``.
    warn : bool, default=True
        Warn once (:class:`~skbatch.exceptions.DegenerateDataWarning`),
        naming how many targets, where a score is undefined; callers that
        score in batches warn once themselves (:func:`warn_undefined`).

    Returns
    -------
    scores : array of shape (n_targets,)
        In float64 where the device supports it.

    Examples
    --------
    >>> import numpy as np
    >>> y_true = np.array([[1.0, 0.3], [2.0, 0.3], [4.0, 0.3]])
    >>> y_pred = np.array([[1.5, 0.3], [2.0, 0.3], [3.5, 0.1]])
    >>> score_per_target(y_true, y_pred, "r2").round(3).tolist()
    [0.893, 0.0]
    """
    xp = _namespace(xp, y_true, y_pred)
    _check_scoring(scoring)
    dtype = _criterion_dtype(y_true, xp)
    y_dtype, pred_dtype = y_true.dtype, y_pred.dtype
    y_true = xp.astype(y_true, dtype, copy=False)
    y_pred = xp.astype(y_pred, dtype, copy=False)
    if sample_weight is not None:
        sample_weight = xp.astype(
            xp.asarray(sample_weight, device=array_device(y_true)), dtype, copy=False
        )
    scores = _score_errors(
        y_true - y_pred,
        y_true,
        scoring,
        sample_weight,
        xp,
        y_dtype=y_dtype,
        pred_dtype=pred_dtype,
    )
    if warn:
        # Past warn_undefined, this function and the estimator's method that
        # called it, to the user's line.
        warn_undefined(scores, scoring, n_rows=y_true.shape[0], stacklevel=4)
    return scores


def warn_undefined(scores, scoring, *, n_rows, stacklevel=2):
    """Warn once, naming how many targets, when some ``scores`` are NaN.

    Scores of finite data are NaN only where the data cannot define them:
    R^2 and correlation of fewer than 2 rows, the correlation of a constant
    target or prediction, any weighted score of rows whose weights are all 0.

    Parameters
    ----------
    scores : array of shape (n_targets,)
    scoring : str
    n_rows : int
        Rows scored.
    stacklevel : int, default=2
        As for ``warnings.warn``, counted from the caller.
    """
    xp = _namespace(None, scores)
    undefined = xp.isnan(scores)
    count = int(xp.sum(xp.astype(undefined, xp.int64)))
    if count == 0:
        return
    name = "R^2" if scoring == "r2" else scoring
    if n_rows < MIN_SCORED_ROWS and scoring != "neg_mean_squared_error":
        why = f"it needs at least {MIN_SCORED_ROWS} rows, got {n_rows}"
    elif scoring == "correlation":
        why = (
            "the target or its prediction is constant on the rows scored (to "
            "rounding), or their weights are all 0"
        )
    else:
        why = "the weights of the rows scored are all 0"
    warnings.warn(
        f"{name} is undefined (NaN) for {count} of {scores.shape[0]} targets: {why}.",
        DegenerateDataWarning,
        stacklevel=stacklevel + 1,
    )


def select_alpha(scores, *, xp=None):
    """Best alpha of each target: the first of ties, as scikit-learn keeps it.

    NaN scores rank last, as in ``GridSearchCV``; a target whose every score
    is NaN keeps the first alpha, and its best score is NaN.

    Parameters
    ----------
    scores : array of shape (n_alphas, n_targets)
        Higher is better.

    Returns
    -------
    best_index : array of int of shape (n_targets,)
    best_score : array of shape (n_targets,)
        NaN where every alpha scored NaN.
    """
    xp = _namespace(xp, scores)
    missing = xp.isnan(scores)
    filled = xp.where(missing, -xp.inf, scores)
    best_score = xp.where(xp.all(missing, axis=0), xp.nan, xp.max(filled, axis=0))
    return xp.argmax(filled, axis=0), best_score


# Deviations of a column from its mean up to this many units in the last
# place of its values (their root mean square) are rounding, not spread: a
# constant target scaled and unscaled row by row (times and over sqrt(w) in
# loo_scores) deviates by a few, and scored as spread it gives an R^2 of
# -1e31 or a correlation of noise.
CONSTANT_ULPS = 16


class TargetSpread(NamedTuple):
    """What every score needs of its targets, computed once per set of rows.

    deviations : array of shape (n_samples, n_targets) or None
        From the (weighted) mean, exactly 0 on a constant column.
    variance : array of shape (n_targets,)
        (Weighted) mean of the squared deviations.
    constant : array of bool of shape (n_targets,)
        Variance within the rounding of the values.
    rounding : array of shape (n_targets,)
        That rounding: ``(CONSTANT_ULPS * eps)^2`` times the mean square of
        the values, eps that of their dtype. A squared error up to it is no
        error (a constant target predicted exactly).
    """

    deviations: object
    variance: object
    constant: object
    rounding: object


def target_spread(y, sample_weight=None, *, y_dtype=None, deviations=False, xp=None):
    """Each column's (weighted) spread, and whether it is constant to rounding.

    The one test of constancy of every score. Deviations are taken from a
    row of the largest weight (the first row without weights) before the
    mean: a column constant on the rows of positive weight then deviates by
    exactly 0 there, whatever order its mean is summed in (the rounding of
    that mean would otherwise be its spread). A column is constant when its
    variance is at most ``(CONSTANT_ULPS * eps)^2`` times its mean square:
    relative to its level, not absolute, so a constant far from 0 and one at
    0 are both constant, in float32 as in float64.

    Parameters
    ----------
    y : array of shape (n_samples, n_targets)
    sample_weight : array of shape (n_samples,), default=None
    y_dtype : dtype, default=None
        The dtype whose rounding the values carry (``y.dtype`` if None): that
        of the data when ``y`` was cast to float64 after its arithmetic.
    deviations : bool, default=False
        Whether to keep the deviations (correlation reads them).

    Returns
    -------
    spread : TargetSpread
        In float64 where the device supports it.
    """
    xp = _namespace(xp, y)
    y_dtype = y.dtype if y_dtype is None else y_dtype
    dtype = _criterion_dtype(y, xp)
    if not xp.isdtype(y_dtype, "real floating"):
        y_dtype = dtype
    y = xp.astype(y, dtype, copy=False)
    if sample_weight is None:
        anchor = y[:1]
    else:
        anchor = xp.take(y, xp.reshape(xp.argmax(sample_weight), (1,)), axis=0)
    y_dev = y - anchor
    shift = _average(y_dev, sample_weight, xp)
    library = _out_namespace(y_dev)
    if library is None:
        y_dev = y_dev - shift
    else:
        library.subtract(y_dev, shift, out=y_dev)
    variance = _average(y_dev**2, sample_weight, xp)
    mean = anchor[0] + shift
    eps = float(xp.finfo(y_dtype).eps)
    rounding = (CONSTANT_ULPS * eps) ** 2 * (variance + mean**2)
    return TargetSpread(
        y_dev if deviations else None, variance, variance <= rounding, rounding
    )


def _score_errors(
    errors,
    y_true,
    scoring,
    sample_weight,
    xp,
    *,
    spread=None,
    y_dtype=None,
    pred_dtype=None,
    out=None,
):
    """Per-target score of predictions ``y_true - errors``: every path's.

    ``spread``: that of ``y_true`` (:func:`target_spread`), when already
    computed for these rows; ``y_dtype`` and ``pred_dtype``: the dtypes whose
    rounding targets and predictions carry (``y_true``'s if None); ``out``:
    a buffer for the squared errors, in the criterion dtype.
    """
    dtype = _criterion_dtype(y_true, xp)
    if scoring == "neg_mean_squared_error":
        return -_mean_square(errors, sample_weight, dtype, xp, out)
    if y_true.shape[0] < MIN_SCORED_ROWS:
        # No deviations from the mean: r2_score returns NaN, not a number.
        return xp.full(
            (y_true.shape[1],), xp.nan, dtype=dtype, device=array_device(y_true)
        )
    y_dtype = y_true.dtype if y_dtype is None else y_dtype
    if spread is None:
        spread = target_spread(
            y_true,
            sample_weight,
            y_dtype=y_dtype,
            deviations=scoring == "correlation",
            xp=xp,
        )
    if scoring == "r2":
        error_var = _mean_square(errors, sample_weight, dtype, xp, out)
        return _r2(error_var, spread, xp)
    predictions = xp.astype(y_true, dtype, copy=False) - xp.astype(
        errors, dtype, copy=False
    )
    predicted = target_spread(
        predictions,
        sample_weight,
        y_dtype=y_dtype if pred_dtype is None else pred_dtype,
        deviations=True,
        xp=xp,
    )
    covariance = _average(spread.deviations * predicted.deviations, sample_weight, xp)
    undefined = spread.constant | predicted.constant
    product = xp.where(undefined, 1.0, spread.variance * predicted.variance)
    correlation = xp.clip(covariance / xp.sqrt(product), -1.0, 1.0)
    return xp.where(undefined, xp.nan, correlation)


def _r2(error_var, spread, xp):
    """R^2 from the (weighted) mean squared error, as ``r2_score`` scores it.

    A constant target scores 1.0 when its error is within its rounding
    (predicted exactly), else 0.0: ``r2_score``'s ``force_finite=True``.
    """
    constant = spread.constant
    r2 = 1.0 - error_var / xp.where(constant, 1.0, spread.variance)
    exact = xp.where(error_var <= spread.rounding, 1.0, 0.0)
    return xp.where(constant, exact, r2)


def _mean_square(errors, sample_weight, dtype, xp, out=None):
    """(Weighted) mean of each column's squares, summed in ``dtype``.

    ``out``: a buffer for the squares, in ``dtype``; without one, the
    errors are cast to ``dtype`` first.
    """
    if sample_weight is None and is_numpy_array(errors) and errors.dtype == dtype:
        return column_sq_norms(errors, xp) / errors.shape[0]
    if out is None:
        errors = xp.astype(errors, dtype, copy=False)
    return _average(_multiply(errors, errors, out), sample_weight, xp)


def _average(A, sample_weight, xp):
    """Column means of ``A``, weighted by ``sample_weight`` when given."""
    if sample_weight is None:
        return xp.mean(A, axis=0)
    return sample_weight @ A / xp.sum(sample_weight)


def _spans_centered_targets(n_samples, rank, fit_intercept):
    """Whether a basis of ``rank`` columns spans every centred (weight-scaled)
    target of ``n_samples`` rows.

    True at rank n, or n - 1 after centring: the direction centring removes,
    sqrt(w), is orthogonal to both X and Y.
    """
    return rank + int(fit_intercept) == n_samples


def _loo_denominators(U, shrinkage, fit_intercept, sample_weight, xp):
    """``1 - h_ii`` for every sample (rows) and alpha (columns).

    Summed from non-negative parts, the leverage each alpha shrinks away and
    the leverage outside span(U) and the intercept, rather than computed as
    ``1 - h_ii``: at small alphas that subtraction is all rounding error.
    """
    U_sq = U**2
    shrunk_leverage = U_sq @ shrinkage.T
    if _spans_centered_targets(*U.shape, fit_intercept):
        return shrunk_leverage
    if not fit_intercept:
        intercept_leverage = 0.0
    elif sample_weight is None:
        intercept_leverage = 1.0 / U.shape[0]
    else:
        weight = xp.astype(sample_weight, U.dtype, copy=False)
        intercept_leverage = weight / xp.sum(weight)
    outside_leverage = 1.0 - xp.sum(U_sq, axis=1) - intercept_leverage
    return shrunk_leverage + outside_leverage[:, None]


# Targets whose squared residual outside span(U) is below this fraction of
# their squared norm get it formed explicitly (see residual_sq_norm).
OUTSIDE_CUTOFF = 1e-3


def _out_namespace(array):
    """numpy or torch, whose functions write results into existing arrays (out=)."""
    return _backends.of_array(array).out_namespace()


def _scratch(shape, dtype, like, xp):
    """An uninitialised array to receive a result, or None (jax: immutable).

    A fresh n x t array per alpha costs more in page faults (allocations of
    megabytes are mapped anew each time) than the pass that fills it: reusing
    one buffer made the K-fold loop 30% faster on the CPU.
    """
    if _out_namespace(like) is None:
        return None
    return xp.empty(shape, dtype=dtype, device=array_device(like))


def _matmul(A, B, out=None):
    """``A @ B``, written into ``out`` when given."""
    if out is None:
        return A @ B
    return _out_namespace(out).matmul(A, B, out=out)


def _multiply(A, B, out=None):
    """``A * B`` (broadcast), written into ``out`` (any wider dtype) when given."""
    if out is None:
        return A * B
    return _out_namespace(out).multiply(A, B, out=out)


def _subtract(A, B):
    """``A - B``, written into ``B`` where the library allows it."""
    library = _out_namespace(B)
    if library is None:
        return A - B
    return library.subtract(A, B, out=B)


def column_sq_norms(A, xp):
    """Squared norm of every column, in one pass without a temporary (numpy)."""
    if is_numpy_array(A):
        return np.einsum("ij,ij->j", A, A)
    return xp.sum(A * A, axis=0)


def _criterion_dtype(array, xp):
    """float64 where the device has it (not MPS, not jax without x64)."""
    available = xp.__array_namespace_info__().dtypes(
        kind="real floating", device=array_device(array)
    )
    return xp.float64 if "float64" in available else array.dtype


def _as_float_array(values, like, xp):
    """``values`` (scalar or sequence) as a 1-d array of ``like``'s dtype and device."""
    return xp.reshape(
        xp.asarray(values, dtype=like.dtype, device=array_device(like)), (-1,)
    )


def _check_scoring(scoring, allow_none=False):
    if scoring is None and allow_none:
        return
    if scoring not in _SCORINGS:
        allowed = ((None,) if allow_none else ()) + _SCORINGS
        raise ValueError(f"scoring must be one of {allowed!r}, got {scoring!r}")


def _namespace(xp, *arrays):
    if xp is None:
        return array_namespace(*arrays)
    # numpy 1.x is no array API namespace itself (no astype, no
    # __array_namespace_info__): callers passing numpy get its wrapper.
    return array_namespace(_NUMPY_PROBE) if xp is np else xp


def weighted_primal_coef(
    X, Y, w, alpha, fixed_alpha, *, fit_intercept, xp, scratch=None, results=None
):
    """Weighted ridge coefficients of a batch of replicates, p <= n.

    Parameters
    ----------
    X : array of shape (n, p + 1) or (n, p)
        Design matrix; with an intercept, centred on its overall mean and
        with a last column of ones.
    Y : array of shape (n, t)
        Targets, never copied.
    w : array of shape (b, n)
        Replicate weights (bootstrap counts times sample weights).
    alpha : array of shape (t,)
    fixed_alpha : float or None
        The alpha of every target when one positive alpha serves all.
    fit_intercept : bool
    scratch : Scratch, optional
        Buffers for the products, reused from call to call by each thread:
        nothing returned refers to them.
    results : ResultPool, optional
        Where the coefficients of one alpha for all targets go, on the CPU:
        the caller gives them back once done with them.

    Returns
    -------
    coef : array of shape (b, t, p)
        Laid out as the estimator's ``coef_`` of each replicate, so that the
        reducer reads it without a transposing copy.
    x_mean, y_mean : arrays of shape (b, p) and (b, t), or None
        Weighted means of X and Y in each replicate, with an intercept.
    """
    n = w.shape[1]
    q = X.shape[1]
    gram, rhs = _weighted_products(X, Y, w, xp, scratch)
    x_mean = y_mean = None
    p = q
    if fit_intercept:
        # The ones column gives S = sum(w), X'w and Y'w; centring is then the
        # rank-one update X_c' W Y_c = X' W Y - (X'w) y_mean', not a copy.
        p = q - 1
        total = gram[:, p, p][:, None]
        x_sum, y_sum = gram[:, :p, p], rhs[:, p, :]
        x_mean, y_mean = x_sum / total, y_sum / total
        gram = gram[:, :p, :p]
        # The update cancels digits of the uncentred Gram matrix, whose scale
        # is then the rounding floor of the centred one.
        scale = xp.max(xp.linalg.diagonal(gram), axis=1)
        # In place where the library allows (jax rebinds). The ones column
        # that x_sum views is left untouched.
        gram -= x_sum[:, :, None] * x_mean[:, None, :]
    else:
        scale = xp.max(xp.linalg.diagonal(gram), axis=1)
    if fixed_alpha is not None:
        eye = xp.eye(p, dtype=gram.dtype, device=array_device(gram))
        # rhs keeps its ones row (Y'w): the solve centres it, (X'w) y_mean' =
        # x_mean (Y'w)', inside its product rather than in a pass of its own.
        out = None
        if results is not None:
            out = results.empty((w.shape[0], Y.shape[1], p), X, xp)
        coef, ill = _solve_spd(
            gram + fixed_alpha * eye, rhs, xp, transposed=True, offset=x_mean, out=out
        )
        if ill is not None:
            coef = _resolve_ill_conditioned(
                coef, ill, X[:, :p], Y, w, alpha, fixed_alpha, x_mean, scale, xp
            )
        return coef, x_mean, y_mean
    if fit_intercept:
        # In place where the library allows: a fresh b x p x t array costs
        # page faults on top of the pass. The ones row that y_sum views is
        # left untouched.
        rhs = rhs[:, :p, :]
        rhs -= x_sum[:, :, None] * y_mean[:, None, :]
    with one_thread(gram):
        eigenvalues, vectors = xp.linalg.eigh(gram)
        rotated = xp.permute_dims(vectors, (0, 2, 1)) @ rhs
        rotated = rotated * _spectral_filter(eigenvalues, alpha, max(n, p), scale, xp)
        # (Q rotated)' computed as rotated' Q': BLAS transposes as it reads.
        coef = _transpose(rotated, xp) @ _transpose(vectors, xp)
        return coef, x_mean, y_mean


class Scratch:
    """Buffers a thread reuses from one batch to the next; pickles empty.

    A fresh array of a batch's products faulted its pages in on every batch:
    11-13 MB and 8 ms of system time in a 120 ms bootstrap batch, 7% of it
    (benchmarks/RESULTS.md). Each thread keeps the last buffer of each name,
    replaced when the shape or dtype changes (a batch split after an
    out-of-memory error), and drops them all with this object or the thread.
    """

    def __init__(self):
        self._local = threading.local()

    def __reduce__(self):
        return (Scratch, ())

    def empty(self, name, shape, like, xp):
        """An uninitialised array of ``like``'s dtype and device, kept for reuse."""
        buffers = vars(self._local)
        buffer = buffers.get(name)
        if buffer is None or tuple(buffer.shape) != shape or buffer.dtype != like.dtype:
            # The old buffer goes before the new one is made: never both.
            buffers.pop(name, None)
            buffer = xp.empty(shape, dtype=like.dtype, device=array_device(like))
            buffers[name] = buffer
        return buffer


class ResultPool:
    """Arrays a kernel returns, given back once reduced and handed out again.

    A fresh array of a batch's coefficients faulted its pages in on every
    batch: 16-23k minor faults and 50-100 ms of system time in a 0.67 s
    float64 bootstrap fit on two threads (benchmarks/RESULTS.md). The
    engine gives a kernel's results back through its ``recycle`` once they
    are reduced (:func:`skbatch._engine.run_batched`). Only arrays made here
    are kept, on the CPU, of the shape last asked for: a batch split after
    an out-of-memory error drops the others. A pickled pool is empty.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._free = []
        self._made = []

    def __reduce__(self):
        return (ResultPool, ())

    def empty(self, shape, like, xp):
        """An uninitialised array of ``like``'s dtype, or None off the CPU (jax).

        GPUs' own allocators keep what they free, and jax arrays are
        immutable: their results are allocated as usual.
        """
        library = _backends.of_array(like)
        if library.out_namespace() is None or library.device_of(like) != "cpu":
            return None
        with self._lock:
            while self._free:
                buffer = self._free.pop()
                if tuple(buffer.shape) == shape and buffer.dtype == like.dtype:
                    return buffer
            buffer = xp.empty(shape, dtype=like.dtype, device=array_device(like))
            self._made = [ref for ref in self._made if ref() is not None]
            self._made.append(weakref.ref(buffer))
            return buffer

    def give(self, *arrays):
        """Take back arrays that nothing refers to any more; others are ignored."""
        with self._lock:
            for array in arrays:
                if any(ref() is array for ref in self._made):
                    self._free.append(array)


def gathers_drawn_rows(library, device, n_samples, n_columns, n_targets):
    """Whether :func:`_weighted_products` runs each replicate over its drawn rows.

    ``library`` is the module of :mod:`skbatch._backends` the arrays belong
    to, ``n_columns`` counts X's columns with the ones column. Otherwise the
    products are stacked GEMMs over all rows, which read ``X'`` whole.
    """
    return (
        not library.COMPILES_PER_SHAPE
        and device == "cpu"
        and n_columns >= GATHER_MIN_COLUMNS
        and 2 * n_samples * n_columns * n_targets >= GATHER_MIN_FLOPS
    )


def _weighted_products(X, Y, w, xp, scratch=None):
    """``X' W X`` and ``X' W Y`` of every replicate of a batch, ``W = diag(w)``.

    On the CPU, with numpy or torch, for replicates of at least
    ``GATHER_MIN_FLOPS`` and ``GATHER_MIN_COLUMNS``, each replicate's
    products run over its rows of positive weight only: a bootstrap
    replicate leaves out about a third of the rows (a fraction
    ``(1 - 1/n) ** n``), a third of the work that a BLAS call over all rows
    would spend on zeros. The drawn rows of
    ``Y`` are gathered ``MAX_GATHER_BYTES`` at a time, one replicate after
    the other. Elsewhere each product is one GEMM over the whole batch, the
    replicates' ``X' W`` stacked: ``(b * q, n) @ (n, q)`` and ``(b * q, n) @
    (n, t)``, which GPUs run best, and whose shapes do not vary from batch to
    batch (jax compiles a kernel for every new shape).

    Returns
    -------
    gram : array of shape (b, q, q)
    rhs : array of shape (b, q, t)
        On the drawn-rows path, ``scratch``'s buffers when given: the caller
        must be done with them before its thread's next call.
    """
    b, n = w.shape
    q, t = X.shape[1], Y.shape[1]
    library = _backends.of_array(X)
    if not gathers_drawn_rows(library, library.device_of(X), n, q, t):
        Xt = xp.permute_dims(X, (1, 0))
        XtW = xp.reshape(Xt[None, :, :] * w[:, None, :], (b * q, n))
        return xp.reshape(XtW @ X, (b, q, q)), xp.reshape(XtW @ Y, (b, q, t))
    scratch = Scratch() if scratch is None else scratch
    gram = scratch.empty("gram", (b, q, q), X, xp)
    rhs = scratch.empty("rhs", (b, q, t), X, xp)
    # Y's drawn rows go into one buffer, reused: a fresh array per replicate
    # faulted its pages in, and the gather took twice as long.
    width = min(t, max(1, MAX_GATHER_BYTES // (n * Y.dtype.itemsize)))
    gathered = scratch.empty("drawn", (n * width,), Y, xp)
    for i in range(b):
        rows = xp.nonzero(w[i, :])[0]
        n_rows = rows.shape[0]
        # Rows gathered whole (contiguous), weighted, then read transposed:
        # BLAS transposes as it reads, where gathering columns of X' strides.
        drawn_X = xp.take(X, rows, axis=0)
        XtW = xp.permute_dims(drawn_X * xp.take(w[i, :], rows)[:, None], (1, 0))
        gram[i, ...] = XtW @ drawn_X
        for start in range(0, t, width):
            columns = Y[:, start : start + width]
            size = n_rows * columns.shape[1]
            drawn = xp.reshape(gathered[:size], (n_rows, columns.shape[1]))
            library.take_rows(columns, rows, drawn)
            _matmul(XtW, drawn, out=rhs[i, :, start : start + width])
    return gram, rhs


def weighted_dual_coef(X, K0, Y, w, alpha, fixed_alpha, *, fit_intercept, xp):
    """Weighted ridge coefficients of a batch of replicates, p > n, via kernels.

    With S = diag(sqrt(w)) and X_c the replicate-centred X, the coefficients
    are ``X_c' S (S K_c S + alpha I)^-1 S Y`` where ``K_c = X_c X_c'`` comes
    from ``K0 = X X'`` by a rank-2 update. The solve happens first, on the
    n x p right-hand side ``S X_c``, so that Y enters through one GEMM
    (b * p, n) @ (n, t). ``S Y`` need not be centred: its mean direction
    ``sqrt(w)`` is in the null space of ``X_c' S``.

    Parameters and returns as :func:`weighted_primal_coef`, with ``X`` of shape
    (n, p) (centred on its overall mean, no ones column) and ``K0 = X X'``.
    """
    b, n = w.shape
    p, t = X.shape[1], Y.shape[1]
    root = xp.sqrt(w)
    x_mean = y_mean = None
    if fit_intercept:
        total = xp.sum(w, axis=1)[:, None]
        x_mean, y_mean = (w @ X) / total, (w @ Y) / total
        # K_c = K0 - v 1' - 1 v' + c 1 1', v = X x_mean, c = x_mean' x_mean.
        v = (w @ K0) / total
        c = xp.sum(v * w, axis=1) / total[:, 0]
        kernel = K0[None, :, :] - v[:, :, None] - v[:, None, :] + c[:, None, None]
        scaled_X = root[:, :, None] * (X[None, :, :] - x_mean[:, None, :])
    else:
        kernel = K0[None, :, :]
        scaled_X = root[:, :, None] * X[None, :, :]
    kernel = kernel * root[:, :, None] * root[:, None, :]
    # Rounding floor of the centring update, as in weighted_primal_coef.
    scale = xp.max(xp.linalg.diagonal(K0)[None, :] * w, axis=1)
    if fixed_alpha is not None:
        eye = xp.eye(n, dtype=kernel.dtype, device=array_device(kernel))
        hat, ill = _solve_spd(kernel + fixed_alpha * eye, scaled_X, xp)
        hat = xp.reshape(xp.permute_dims(root[:, :, None] * hat, (0, 2, 1)), (b * p, n))
        coef = _transpose(xp.reshape(hat @ Y, (b, p, t)), xp)
        if ill is not None:
            coef = _resolve_ill_conditioned(
                coef, ill, X, Y, w, alpha, fixed_alpha, x_mean, scale, xp
            )
        return coef, x_mean, y_mean
    with one_thread(kernel):
        eigenvalues, vectors = xp.linalg.eigh(kernel)
    del kernel
    # Q' S Y as one GEMM (b * n, n) @ (n, t).
    QtS = xp.permute_dims(vectors, (0, 2, 1)) * root[:, None, :]
    rotated = xp.reshape(xp.reshape(QtS, (b * n, n)) @ Y, (b, n, t))
    del QtS
    rotated = rotated * _spectral_filter(eigenvalues, alpha, max(n, p), scale, xp)
    left = xp.permute_dims(scaled_X, (0, 2, 1)) @ vectors
    return _transpose(rotated, xp) @ _transpose(left, xp), x_mean, y_mean


def _spectral_filter(eigenvalues, alpha, size, scale, xp):
    """``1 / (lambda + alpha_t)`` per eigenvalue and target, 0 where null.

    An eigenvalue counts as zero below ``size * eps * max(lambda_max,
    scale)``: the rank rule of ``numpy.linalg.matrix_rank`` and LAPACK's
    ``gelsd`` (``max(n, p) * eps`` relative to the largest), with ``scale``,
    the largest diagonal entry of the matrix before centring, as the floor
    below which the centring update leaves only rounding noise. A replicate
    whose rows are all alike has a centred Gram matrix of pure noise, whose
    own largest eigenvalue is no reference. Dropping these directions,
    whatever alpha, removes noise rather than amplifying it by ``1 / alpha``,
    and at alpha 0 gives the minimum-norm solution, as ``lstsq`` does.

    Parameters
    ----------
    eigenvalues : array of shape (b, r)
    alpha : array of shape (t,)
    size : int
        ``max(n_samples, n_features)``.
    scale : array of shape (b,)

    Returns
    -------
    array of shape (b, r, t)
    """
    eps = xp.finfo(eigenvalues.dtype).eps
    reference = xp.maximum(xp.max(eigenvalues, axis=1), scale)
    tolerance = (reference * (size * eps))[:, None]
    keep = (eigenvalues > tolerance)[:, :, None]
    total = eigenvalues[:, :, None] + alpha[None, None, :]
    return xp.where(keep, 1.0 / xp.where(keep, total, 1.0), 0.0)


def _weighted_svd_coef(X, Y, w, alpha, x_mean, scale, xp):
    """Weighted ridge coefficients through an SVD of each replicate's rows.

    The stable solve for batches whose Gram (or kernel) matrix is singular to
    working precision: the SVD of ``S X_c`` (S = diag(sqrt(w)), X_c the
    replicate-centred X) does not square the condition number of X, as
    scikit-learn's ``Ridge`` falls back on its SVD solver and
    ``LinearRegression`` solves by ``lstsq``. Singular values below
    ``max(n, p) * eps`` times the largest, or times ``sqrt(scale)`` when the
    centring left only rounding noise, count as zero (LAPACK's ``gelsd``
    rule), which gives the minimum-norm solution at alpha 0.

    Parameters
    ----------
    X : array of shape (n, p)
        Design matrix, without a ones column.
    Y : array of shape (n, t)
    w : array of shape (b, n)
    alpha : array of shape (t,)
    x_mean : array of shape (b, p) or None
        Weighted means of X, None without an intercept.
    scale : array of shape (b,)
        Largest diagonal entry of the uncentred weighted Gram matrix.

    Returns
    -------
    coef : array of shape (b, t, p)
    """
    b, n = w.shape
    p, t = X.shape[1], Y.shape[1]
    root = xp.sqrt(w)
    centred = X[None, :, :] if x_mean is None else X[None, :, :] - x_mean[:, None, :]
    with one_thread(X):
        U, s, Vt = xp.linalg.svd(root[:, :, None] * centred, full_matrices=False)
    del centred
    r = s.shape[1]
    # U' S Y as one GEMM (b * r, n) @ (n, t). Y need not be centred: S 1 is
    # orthogonal to the columns of S X_c, hence to U.
    UtS = xp.reshape(xp.permute_dims(U, (0, 2, 1)) * root[:, None, :], (b * r, n))
    rotated = xp.reshape(UtS @ Y, (b, r, t))
    del UtS, U
    eps = xp.finfo(s.dtype).eps
    reference = xp.maximum(xp.max(s, axis=1), xp.sqrt(scale))
    keep = (s > (reference * (max(n, p) * eps))[:, None])[:, :, None]
    total = s[:, :, None] ** 2 + alpha[None, None, :]
    factor = xp.where(keep, s[:, :, None] / xp.where(keep, total, 1.0), 0.0)
    return _transpose(rotated * factor, xp) @ Vt


def _resolve_ill_conditioned(coef, ill, X, Y, w, alpha, fixed_alpha, x_mean, scale, xp):
    """``coef`` with the replicates ``ill`` solved again by :func:`_weighted_svd_coef`.

    ``ill`` holds the host indices of the replicates whose system
    :func:`_solve_spd` found too ill-conditioned; the others keep their
    solution, so that a replicate's result never depends on the batch it is
    in.
    """
    warnings.warn(
        f"Singular matrix (or one too ill-conditioned to invert accurately) in "
        f"bootstrap replicates (alpha={fixed_alpha!r}): those replicates are "
        f"solved by singular value decomposition instead, dropping the "
        f"directions below the rank cutoff, as a least-squares solver does.",
        LinAlgWarning,
        stacklevel=3,
    )
    rows = xp.asarray(ill, device=array_device(coef))
    stable = _weighted_svd_coef(
        X,
        Y,
        xp.take(w, rows, axis=0),
        alpha,
        None if x_mean is None else xp.take(x_mean, rows, axis=0),
        xp.take(scale, rows, axis=0),
        xp,
    )
    if hasattr(coef, "at"):  # jax: immutable arrays
        return coef.at[rows].set(stable)
    coef[rows] = stable
    return coef


def one_thread(array):
    """Context for LAPACK factorisations (SVD, eigh, inverse) on the CPU.

    numpy's LAPACK and torch run each factorisation, and each small product
    of a batch of p x p matrices, on all threads, whose synchronisation
    costs more than the work: 2-15x slower than one thread on two busy
    cores (torch's batched inverse: 3.3 s against 0.1 s for 200
    replicates; a 2000 x 500 SVD: 0.4-10 s against 0.15 s). The big GEMMs
    keep every thread. GPUs and jax schedule their own kernels.
    """
    library = _backends.of_array(array)
    if library.device_of(array) != "cpu":
        return contextlib.nullcontext()
    return library.one_thread()


def _transpose(A, xp):
    """The batch of transposed matrices, as a view."""
    return xp.permute_dims(A, (0, 2, 1))


def _solve_spd(A, B, xp, *, transposed=False, offset=None, out=None):
    """Solve ``A X = B`` for a batch of symmetric positive definite ``A``.

    With ``offset`` (shape (b, p) for A of shape (b, p, p)), B has one row
    more, and the system solved is ``A X = B[:p] - offset B[p]'``: B's last
    row holds the sums that centre the others (the products with an
    intercept's column of ones). On the CPU the centring then costs no pass
    over B: ``X = [A^-1, -A^-1 offset] B``, one product.

    The CPU route writes the solution into ``out`` when given.

    Each matrix is solved with its rows and columns scaled to a unit
    diagonal, which changes nothing in exact arithmetic and makes the
    accuracy independent of the features' scales (as Cholesky's is), and is
    judged on its own: a matrix whose condition number, so scaled, exceeds
    ``eps ** -SPD_COND_EPS_POWER`` would leave the solution fewer than half
    its digits, and is reported, whatever the other matrices of the batch.

    Returns
    -------
    X : array
        The solution, or ``X'`` (batch of transposes) when ``transposed``;
        rounding noise for the matrices reported.
    ill : ndarray of int or None
        Host indices of the matrices too ill-conditioned (or not positive
        definite) to solve this way, for the caller's stable solve; None
        when there are none.

    On a CUDA or jax GPU device, batched Cholesky. On the CPU, the batched
    Cholesky solves of torch and jax loop over the batch and run several
    times slower than inverting the small ``A`` (from Cholesky factors, the
    library's ``spd_inverse``) and multiplying, which is also what numpy
    does: it has no batched Cholesky solve. The inverse gives the 1-norm
    condition number for the price of two sums.
    """
    library = _backends.of_array(A)
    scaling = 1.0 / xp.sqrt(xp.linalg.diagonal(A))
    A = A * scaling[:, :, None] * scaling[:, None, :]
    limit = float(xp.finfo(A.dtype).eps) ** -SPD_COND_EPS_POWER
    if library.solves_by_cholesky(library.device_of(A)):
        if offset is not None:
            p = A.shape[-1]
            B = B[:, :p, :] - offset[:, :, None] * B[:, p:, :]
        factor, failed = _each_factorised(library.cholesky, A, xp)
        ill = np.flatnonzero(failed | _ill_factors(factor, limit, xp))
        solution = scaling[:, :, None] * library.cholesky_solve(
            factor, scaling[:, :, None] * B
        )
        solution = _transpose(solution, xp) if transposed else solution
        return solution, _none_if_empty(ill)
    with one_thread(A):
        inverse, failed = _each_factorised(library.spd_inverse, A, xp)
        condition = _norm_1(A, xp) * _norm_1(inverse, xp)
        condition = np.asarray(_backends.to_numpy(condition), dtype=np.float64)
        # Also catches jax, which returns infinities or NaNs for a singular
        # matrix rather than raising.
        ill = np.flatnonzero(failed | ~(condition <= limit))
        inverse = inverse * scaling[:, :, None] * scaling[:, None, :]
        if offset is not None:
            shift = -(inverse @ offset[:, :, None])
            inverse = xp.concat([inverse, shift], axis=2)
        if transposed:
            solution = _matmul(_transpose(B, xp), _transpose(inverse, xp), out=out)
        else:
            solution = _matmul(inverse, B, out=out)
        return solution, _none_if_empty(ill)


# A solve by the inverse (or Cholesky factors) of a scaled system of
# condition k keeps digits down to about k * eps: above eps ** -0.5 fewer
# than half of them, and the replicate takes the stable solve instead.
SPD_COND_EPS_POWER = 0.5


def _each_factorised(factorise, A, xp):
    """``factorise(A)`` of a batch, and a host mask of the matrices it failed on.

    ``factorise`` is a backend's ``spd_inverse`` or ``cholesky``, which
    return None when one matrix of the batch fails: the batch is then
    factorised one matrix at a time, so that one singular matrix costs the
    others nothing, and the identity (a valid inverse and factor) stands in
    for each failed one.
    """
    result = factorise(A)
    if result is not None:
        return result, np.zeros(A.shape[0], dtype=bool)
    eye = xp.eye(A.shape[-1], dtype=A.dtype, device=array_device(A))
    parts = [factorise(A[i : i + 1]) for i in range(A.shape[0])]
    failed = np.array([part is None for part in parts])
    return xp.concat([eye[None] if part is None else part for part in parts]), failed


def _ill_factors(factor, limit, xp):
    """Host mask of the Cholesky factors whose ``L L'`` is too ill-conditioned.

    ``(max diag L / min diag L) ** 2`` bounds the condition number of ``L L'``
    from below: the cheap test the factorisation offers, against ``limit``.
    A factor with NaNs (jax's failed factorisation) is ill.
    """
    diagonal = xp.linalg.diagonal(factor)
    ratio = xp.max(diagonal, axis=-1) / xp.min(diagonal, axis=-1)
    ratio = np.asarray(_backends.to_numpy(ratio), dtype=np.float64)
    return ~(ratio**2 <= limit)


def _none_if_empty(indices):
    return indices if indices.size else None


def _norm_1(A, xp):
    """The 1-norm (largest absolute column sum) of each matrix of a batch."""
    return xp.max(xp.sum(xp.abs(A), axis=-2), axis=-1)


# The covariance path of the ridge solver: sufficient statistics of blocks of
# rows (X'WX, X'WY and weighted sums), one eigendecomposition of each fold's
# training covariance serving every alpha. For n_samples >> n_features the
# p x p covariance is the small object; no n x p factor is formed.

# Rows of X centred (and weight-scaled) at once when forming covariances: the
# transient copy of a block stays bounded (2048 x 1105 float64: 18 MB) while
# the product over it runs at the BLAS rate.
COVARIANCE_ROW_BLOCK = 2048


def _block_rows(A, selection, xp):
    """Rows of ``A``: a slice (a view) or device indices (a copy)."""
    if isinstance(selection, slice):
        return A[selection]
    return xp.take(A, selection, axis=0)


def _centred_block(A, selection, shift, root_weight, dtype, xp):
    """``(A[selection] - shift) * sqrt(w)``, in ``dtype``."""
    block = xp.astype(_block_rows(A, selection, xp), dtype) - shift
    if root_weight is not None:
        block = block * _block_rows(root_weight, selection, xp)[:, None]
    return block


def gram_moments(X, selections, root_weight, shift, dtype, *, xp=None):
    """Weighted moments of the rows ``selections`` of ``X - shift``.

    Parameters
    ----------
    X : array of shape (n_samples, n_features)
    selections : list of slices or device index arrays
        The rows, in blocks of at most :data:`COVARIANCE_ROW_BLOCK`.
    root_weight : array of shape (n_samples,) or None
        Square roots of the sample weights, in ``dtype``.
    shift : array of shape (n_features,)
        Subtracted from every row before the products (a row of X, or 0
        without an intercept): the covariance is then the difference of two
        moments of the same scale, not of the squares of X's offsets.
    dtype : dtype
        That of the moments (:func:`decomposition_dtype`).

    Returns
    -------
    weight, sums, gram : arrays of shapes (), (n_features,), (n_features, n_features)
        ``sum w``, ``sum w (x - shift)`` and ``sum w (x - shift)(x - shift)'``.
    """
    xp = _namespace(xp, X)
    n_features = X.shape[1]
    device = array_device(X)
    weight = xp.zeros((), dtype=dtype, device=device)
    sums = xp.zeros(n_features, dtype=dtype, device=device)
    gram = xp.zeros((n_features, n_features), dtype=dtype, device=device)
    for selection in selections:
        block = _centred_block(X, selection, shift, root_weight, dtype, xp)
        if root_weight is None:
            weight = weight + block.shape[0]
            sums = sums + xp.sum(block, axis=0)
        else:
            root = xp.astype(_block_rows(root_weight, selection, xp), dtype)
            weight = weight + xp.sum(root * root)
            sums = sums + root @ block
        # A block times its own transpose: numpy's matmul runs it as one
        # symmetric rank-k update, half a general product.
        gram = gram + xp.permute_dims(block, (1, 0)) @ block
    return weight, sums, gram


def cross_moments(X, Y, selections, root_weight, x_shift, y_shift, dtype, *, xp=None):
    """``sum w (y - y_shift)`` and ``sum w (x - x_shift)(y - y_shift)'`` over
    the rows ``selections`` (as :func:`gram_moments`).

    Returns
    -------
    sums, cross : arrays of shapes (n_targets,) and (n_features, n_targets)
    """
    xp = _namespace(xp, X, Y)
    device = array_device(X)
    sums = xp.zeros(Y.shape[1], dtype=dtype, device=device)
    cross = xp.zeros((X.shape[1], Y.shape[1]), dtype=dtype, device=device)
    for selection in selections:
        x_block = _centred_block(X, selection, x_shift, root_weight, dtype, xp)
        y_block = _centred_block(Y, selection, y_shift, root_weight, dtype, xp)
        if root_weight is None:
            sums = sums + xp.sum(y_block, axis=0)
        else:
            root = xp.astype(_block_rows(root_weight, selection, xp), dtype)
            sums = sums + root @ y_block
        cross = cross + xp.permute_dims(x_block, (1, 0)) @ y_block
    return sums, cross


def centred_cross(cross, x_sums, y_sums, weight, *, fit_intercept):
    """Moments about the rows' own (weighted) means.

    ``cross - x_sums y_sums' / weight``.

    With ``cross`` the gram matrix (``y_sums`` = ``x_sums``) this is the
    covariance; without an intercept the moments are about 0, as given.
    """
    if not fit_intercept:
        return cross
    return cross - x_sums[:, None] * (y_sums[None, :] / weight)


def centred_gram(gram, sums, weight, *, fit_intercept, xp=None):
    """The covariance ``gram - sums sums' / weight``, written over ``gram``
    where the library writes in place (a p x p copy fewer at the peak)."""
    xp = _namespace(xp, gram)
    if not fit_intercept:
        return gram
    outer = sums[:, None] * (sums[None, :] / weight)
    library = _out_namespace(gram)
    if library is None:
        return gram - outer
    library.subtract(gram, outer, out=gram)
    return gram


def covariance_eigh(covariance, *, overwrite=False, xp=None):
    """``(eigenvalues, V)`` of a symmetric p x p covariance, eigenvalues >= 0.

    Rounding leaves the eigenvalues of null directions at about
    ``eps * max eigenvalue`` of either sign; ridge adds alpha > 0 to every
    one, so negative rounding is clipped to the exact limit 0. With
    ``overwrite``, a numpy ``covariance`` is destroyed: scipy's ``eigh``
    then works in it rather than in a copy, as numpy's would.
    """
    xp = _namespace(xp, covariance)
    # eigh reads one triangle: the rounding that makes the two halves differ
    # in their last bits does not reach it.
    with one_thread(covariance):
        if is_numpy_array(covariance):
            eigenvalues, V = scipy.linalg.eigh(
                covariance, overwrite_a=overwrite, check_finite=False
            )
        else:
            eigenvalues, V = xp.linalg.eigh(covariance)
    return xp.where(eigenvalues > 0, eigenvalues, xp.zeros_like(eigenvalues)), V


def covariance_condition(eigenvalues, alpha, *, xp=None):
    """Condition number of ``C + alpha I`` from C's eigenvalues (a float)."""
    xp = _namespace(xp, eigenvalues)
    largest = float(xp.max(eigenvalues))
    smallest = float(xp.min(eigenvalues))
    return (largest + alpha) / (smallest + alpha)


def covariance_coef(V, eigenvalues, VtXtY, alpha, *, xp=None):
    """Ridge coefficients ``V diag(1 / (eigenvalues + alpha)) V' X'Y``.

    Parameters
    ----------
    V : array of shape (n_features, n_features)
    eigenvalues : array of shape (n_features,)
    VtXtY : array of shape (n_features, n_targets)
        The centred training cross-moments in V's basis.
    alpha : float or array of shape (n_targets,)

    Returns
    -------
    coef : array of shape (n_features, n_targets)
    """
    xp = _namespace(xp, V, eigenvalues, VtXtY)
    alpha = _as_float_array(alpha, eigenvalues, xp)
    return V @ (VtXtY / (eigenvalues[:, None] + alpha[None, :]))


def covariance_holdout_scores(
    X_test,
    V,
    eigenvalues,
    VtXtY,
    y_true,
    alphas,
    *,
    scoring="r2",
    sample_weight=None,
    y_dtype=None,
    xp=None,
):
    """Test-set score of every alpha from a fold's eigenbasis.

    Each alpha's predictions ``X_test V diag(1 / (eigenvalues + alpha))
    V' X'Y`` are multiplied in the cheaper order: through the test rows in
    V's basis, formed once (n_test p^2), when the test rows are fewer than
    alphas x targets, else through each alpha's coefficients (p^2 per
    target). The errors are scored by the function that scores every path
    (:func:`_score_errors`).

    Parameters
    ----------
    X_test : array of shape (n_test, n_features)
        The fold's test rows centred on its training means.
    V, eigenvalues : arrays
        Of the training covariance (:func:`covariance_eigh`), in the dtype of
        the products.
    VtXtY : array of shape (n_features, n_targets)
        ``V'`` times the centred training cross-moments.
    y_true : array of shape (n_test, n_targets)
        Test targets minus the (weighted) training means.
    alphas : array-like of shape (n_alphas,)
    scoring : {"r2", "neg_mean_squared_error", "correlation"}, default="r2"
    sample_weight : array of shape (n_test,), default=None
    y_dtype : dtype, default=None
        The dtype whose rounding the targets carry (``y_true``'s if None).

    Returns
    -------
    scores : array of shape (n_alphas, n_targets)
        Higher is better; in float64 where the device supports it.
    """
    xp = _namespace(xp, X_test, V, eigenvalues, VtXtY, y_true)
    _check_scoring(scoring)
    alphas = _as_float_array(alphas, eigenvalues, xp)
    n_test, n_targets = y_true.shape
    dtype = _criterion_dtype(y_true, xp)
    weight = None
    if sample_weight is not None:
        weight = xp.astype(sample_weight, dtype, copy=False)
    spread = holdout_spread(y_true, scoring, weight, xp=xp)
    in_basis = n_test < alphas.shape[0] * n_targets
    left = X_test @ V if in_basis else X_test
    y_score = y_true
    if scoring == "correlation":
        y_score = xp.astype(y_true, dtype, copy=False)
    # Buffers reused from alpha to alpha, as holdout_scores reuses them.
    filtered_buffer = _scratch(VtXtY.shape, VtXtY.dtype, VtXtY, xp)
    error_buffer = _scratch(y_true.shape, y_true.dtype, y_true, xp)
    square_buffer = (
        error_buffer
        if dtype == y_true.dtype
        else _scratch(y_true.shape, dtype, y_true, xp)
    )
    scores = []
    for k in range(alphas.shape[0]):
        factors = 1.0 / (eigenvalues + alphas[k])
        filtered = _multiply(VtXtY, factors[:, None], filtered_buffer)
        right = filtered if in_basis else V @ filtered
        errors = _subtract(y_true, _matmul(left, right, error_buffer))
        scores.append(
            _score_errors(
                errors,
                y_score,
                scoring,
                weight,
                xp,
                spread=spread,
                y_dtype=y_true.dtype if y_dtype is None else y_dtype,
                out=square_buffer,
            )
        )
    return xp.stack(scores)
