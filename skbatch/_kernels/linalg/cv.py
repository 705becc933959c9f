"""Ridge on the SVD basis: targets projected once, every alpha evaluated
from the projection (coefficients, leave-one-out, GCV and K-fold scores)."""

from array_api_compat import device as array_device

from ._arrays import (
    _as_float_array,
    _criterion_dtype,
    _matmul,
    _multiply,
    _namespace,
    _scratch,
    _subtract,
    accumulated_matmul,
    column_sq_norms,
)
from .scores import _check_scoring, _score_errors, holdout_spread, target_spread

# Targets whose squared residual outside span(U) is below this fraction of
# their squared norm get it formed explicitly (see residual_sq_norm).
OUTSIDE_CUTOFF = 1e-3


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


def _spans_centered_targets(n_samples, rank, fit_intercept):
    """Whether a basis of ``rank`` columns spans every centred (weight-scaled)
    target of ``n_samples`` rows.

    True at rank n, or n - 1 after centring: the direction centring removes,
    sqrt(w), is orthogonal to both X and Y.
    """
    return rank + int(fit_intercept) == n_samples


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
