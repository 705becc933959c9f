"""The thin SVD of a design and what its column scales allow: the
decomposition, its QR variant, fold bases, and the checks of column spread."""

import numpy as np

from ... import _backends
from ._arrays import (
    _cast,
    _namespace,
    _subtract,
    center,
    column_sq_norms,
    decomposition_dtype,
    one_thread,
)

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
