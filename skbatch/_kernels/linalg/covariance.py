"""The covariance path of the ridge solver: sufficient statistics of blocks of
rows (X'WX, X'WY and weighted sums), one eigendecomposition of each fold's
training covariance serving every alpha. For n_samples >> n_features the
p x p covariance is the small object; no n x p factor is formed."""

from array_api_compat import device as array_device

from ._arrays import (
    _as_float_array,
    _criterion_dtype,
    _matmul,
    _multiply,
    _namespace,
    _out_namespace,
    _scratch,
    _subtract,
    column_sq_norms,
    one_thread,
)
from .scores import _check_scoring, _score_errors, holdout_spread

# Rows of X centred (and weight-scaled) at once when forming covariances: the
# transient copy of a block stays bounded (2048 x 1105 float64: 18 MB) while
# the product over it runs at the BLAS rate.
COVARIANCE_ROW_BLOCK = 2048
# Rows of X centred at once for the targets' cross-moments, whose product has
# a batch's few columns: a quarter of the block above keeps the product at
# the BLAS rate, and the copy (side by side with other batches) small.
CROSS_ROW_BLOCK = 512


def _split(selection, size):
    """A block of rows (a slice or device indices) in parts of ``size``."""
    if isinstance(selection, slice):
        return [
            slice(start, min(start + size, selection.stop))
            for start in range(selection.start, selection.stop, size)
        ]
    return [
        selection[start : start + size] for start in range(0, selection.shape[0], size)
    ]


def _block_rows(A, selection, xp):
    """Rows of ``A``: a slice (a view) or device indices (a copy)."""
    if isinstance(selection, slice):
        return A[selection]
    return xp.take(A, selection, axis=0)


def _centred_block(A, selection, shift, root_weight, dtype, xp):
    """``(A[selection] - shift) * sqrt(w)``, in ``dtype``: one copy of the
    rows (the subtraction's)."""
    block = xp.astype(_block_rows(A, selection, xp), dtype, copy=False) - shift
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
    for selection in (
        part for rows in selections for part in _split(rows, CROSS_ROW_BLOCK)
    ):
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
    ``overwrite``, the caller gives ``covariance`` up: it may be destroyed.
    """
    xp = _namespace(xp, covariance)
    # eigh reads one triangle: the rounding that makes the two halves differ
    # in their last bits does not reach it.
    with one_thread(covariance):
        # numpy's eigh (divide and conquer, as scipy's driver="evd"), not
        # scipy's: scipy's LAPACK calls hold the GIL, so folds decomposed
        # side by side on threads ran one after the other (8 eigh of
        # p = 1,105 on 2 threads: 1.57 s with scipy in place, 0.79 s with
        # numpy, whose copy and workspace add 3 p^2 per thread in flight).
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


def moments_about(gram, sums, weight, offset, *, xp=None):
    """Moments ``sum w (x - offset)(x - offset)'`` and ``sum w (x - offset)``
    from those about 0 (``gram``, ``sums``, ``weight = sum w``): a rank-2
    update, written over ``gram`` where the library writes in place (one
    p x p temporary)."""
    xp = _namespace(xp, gram)
    outer = sums[:, None] * offset[None, :]
    library = _out_namespace(gram)
    if library is None:
        gram = (
            gram
            - (outer + xp.permute_dims(outer, (1, 0)))
            + (weight * offset)[:, None] * offset[None, :]
        )
    else:
        library.subtract(gram, outer, out=gram)
        library.subtract(gram, outer.T, out=gram)
        library.multiply((weight * offset)[:, None], offset[None, :], out=outer)
        library.add(gram, outer, out=gram)
    return gram, sums - weight * offset


def moment_scores(
    V,
    eigenvalues,
    VtXtY,
    gram,
    x_sums,
    cross,
    y_true,
    alphas,
    *,
    scoring="r2",
    sample_weight=None,
    spread=None,
    precision=1e-11,
    xp=None,
):
    """Test-set score of every alpha from the test rows' moments, and where
    their rounding is too coarse to trust.

    Each alpha's predictions ``x' W`` (``W = V diag(1 / (eigenvalues +
    alpha)) V' X'Y``) enter every score through sums over the test rows:
    ``sum w p^2 = diag(W' G W)``, ``sum w p y = diag(W' X'y)``, ``sum w p =
    s' W``, with ``G``, ``X'y`` and ``s`` the test rows' moments. That costs
    2 p^2 per target and alpha, independent of the number of test rows (the
    rows cost n_test p). The sums of squares of the errors come as
    ``y'y - 2 p'y + p'p``: their rounding is ``eps`` times the terms, not
    the errors, so a target whose score that rounding could move by more
    than ``precision`` (in units of R^2 or correlation; relative to the
    error for the mean squared error) is flagged, to be scored from its
    rows; so are the targets whose score decides constancy up to rounding
    (a constant target's R^2, a correlation whose predictions barely vary).

    Parameters
    ----------
    V, eigenvalues, VtXtY : arrays
        As :func:`covariance_holdout_scores`, float64.
    gram : array of shape (n_features, n_features)
        ``sum w x x'`` over the test rows, centred on the training means.
    x_sums : array of shape (n_features,)
        ``sum w x`` over those rows.
    cross : array of shape (n_features, n_targets)
        ``sum w x y'`` over those rows, ``y`` centred on the training means.
    y_true : array of shape (n_test, n_targets)
        The test targets, centred on the training means, float64.
    alphas : array-like of shape (n_alphas,)
    scoring : {"r2", "neg_mean_squared_error", "correlation"}, default="r2"
    sample_weight : array of shape (n_test,), default=None
    spread : TargetSpread, default=None
        :func:`holdout_spread` of ``y_true`` (computed if None).
    precision : float, default=1e-11

    Returns
    -------
    scores : array of shape (n_alphas, n_targets)
    rows_needed : array of bool of shape (n_targets,)
        Targets to score from their rows.
    """
    xp = _namespace(xp, V, eigenvalues, VtXtY, gram, y_true)
    _check_scoring(scoring)
    alphas = _as_float_array(alphas, eigenvalues, xp)
    n_alphas, (n_test, n_targets) = alphas.shape[0], y_true.shape
    n_features = eigenvalues.shape[0]
    if sample_weight is None:
        weight = float(n_test)
        yy = column_sq_norms(y_true, xp)
        sy = xp.sum(y_true, axis=0)
    else:
        sample_weight = xp.astype(sample_weight, y_true.dtype, copy=False)
        weight = float(xp.sum(sample_weight))
        yy = sample_weight @ (y_true * y_true)
        sy = sample_weight @ y_true
    if spread is None:
        spread = holdout_spread(y_true, scoring, sample_weight, xp=xp)
    # factors[k, a] = 1 / (eigenvalues[k] + alphas[a]); every alpha's
    # coefficients at once, one product with V and one with the test gram.
    factors = 1.0 / (eigenvalues[:, None] + alphas[None, :])
    filtered = xp.reshape(
        factors[:, :, None] * VtXtY[:, None, :], (n_features, n_alphas * n_targets)
    )
    W = V @ filtered
    del filtered
    GW = gram @ W
    GW = _multiply(GW, W, None if _out_namespace(GW) is None else GW)
    pp = xp.reshape(xp.sum(GW, axis=0), (n_alphas, n_targets))
    del W, GW
    Vt = xp.permute_dims(V, (1, 0))
    py = xp.permute_dims(factors, (1, 0)) @ (VtXtY * (Vt @ cross))
    sp = xp.permute_dims(factors, (1, 0)) @ (VtXtY * (Vt @ x_sums)[:, None])
    sse = yy - 2.0 * py + pp
    # The rounding of each sum over the rows and the features is eps times
    # the sum of its terms' magnitudes (pairwise and blocked sums err by far
    # less than n eps): at most sqrt(y'y p'p) for p'y (Cauchy-Schwarz).
    eps = float(xp.finfo(y_true.dtype).eps) * (4.0 + n_test**0.5)
    root = xp.sqrt(yy * pp)
    if scoring == "neg_mean_squared_error":
        scores = -sse / weight
        coarse = eps * (yy + 2.0 * root + pp) > precision * xp.abs(sse)
    elif scoring == "r2":
        variance = xp.where(spread.constant, 1.0, spread.variance)
        scores = 1.0 - (sse / weight) / variance
        rounding = eps * (yy + 2.0 * root + pp) / weight
        coarse = (rounding > precision * variance) | spread.constant
    else:
        covariance = (py - sp * (sy / weight)) / weight
        p_variance = (pp - sp * (sp / weight)) / weight
        positive = p_variance > 0
        p_variance = xp.where(positive, p_variance, 1.0)
        y_variance = xp.where(spread.constant, 1.0, spread.variance)
        scale = xp.sqrt(p_variance * y_variance)
        correlation = xp.clip(covariance / scale, -1.0, 1.0)
        covariance_rounding = eps * (root + xp.abs(sp * sy) / weight) / weight
        variance_rounding = eps * (pp + sp * sp / weight) / weight
        coarse = (~positive) | (
            covariance_rounding / scale
            + xp.abs(correlation) * variance_rounding / p_variance
            > precision
        )
        scores = xp.where(spread.constant, xp.nan, correlation)
        coarse = coarse & ~spread.constant
    rows_needed = xp.any(coarse | ~xp.isfinite(sse), axis=0)
    return scores, rows_needed
