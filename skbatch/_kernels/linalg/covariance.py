"""The covariance path of the ridge solver: sufficient statistics of blocks of
rows (X'WX, X'WY and weighted sums), one eigendecomposition of each fold's
training covariance serving every alpha. For n_samples >> n_features the
p x p covariance is the small object; no n x p factor is formed."""

import scipy.linalg
from array_api_compat import device as array_device
from array_api_compat import is_numpy_array

from ._arrays import (
    _as_float_array,
    _criterion_dtype,
    _matmul,
    _multiply,
    _namespace,
    _out_namespace,
    _scratch,
    _subtract,
    one_thread,
)
from .scores import _check_scoring, _score_errors, holdout_spread

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
