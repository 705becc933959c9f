"""Bootstrap solves: a batch of replicates at once, bootstrap counts as
row weights, in the primal (Gram) or dual form, ill-conditioned replicates
solved stably."""

import threading
import warnings
import weakref

import numpy as np
from array_api_compat import device as array_device
from scipy.linalg import LinAlgWarning

from ... import _backends
from ._arrays import _matmul, _namespace, _transpose, one_thread

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
# A solve by the inverse (or Cholesky factors) of a scaled system of
# condition k keeps digits down to about k * eps: above eps ** -0.5 fewer
# than half of them, and the replicate takes the stable solve instead.
SPD_COND_EPS_POWER = 0.5


def weighted_primal_coef(
    X,
    Y,
    w,
    alpha,
    fixed_alpha,
    *,
    fit_intercept,
    xp,
    scratch=None,
    results=None,
    products=None,
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
    products : tuple of arrays, optional
        ``(X' W X, X' W Y)`` of every replicate, shapes (b, q, q) and
        (b, q, t), when the caller has them (:func:`run_weighted_products`);
        overwritten. Otherwise formed here from the rows.

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
    if products is None:
        products = _weighted_products(X, Y, w, xp, scratch)
    gram, rhs = products
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


def run_products(X, Y, runs, sample_weight, *, xp):
    """``X_r' W_r X_r`` and ``X_r' W_r Y_r`` of each run of rows.

    Parameters
    ----------
    X : array of shape (n, q)
    Y : array of shape (n, t)
    runs : list of index arrays
        The rows of each run.
    sample_weight : array of shape (n,) or None
        ``W``'s diagonal; ones if None.

    Returns
    -------
    gram, rhs : arrays of shapes (R, q, q) and (R, q, t)
    """
    xp = _namespace(xp, X)
    grams, rhs = [], []
    for rows in runs:
        X_run, Y_run = xp.take(X, rows, axis=0), xp.take(Y, rows, axis=0)
        weighted = X_run
        if sample_weight is not None:
            weighted = X_run * xp.take(sample_weight, rows)[:, None]
        Xt = xp.permute_dims(weighted, (1, 0))
        grams.append(Xt @ X_run)
        rhs.append(Xt @ Y_run)
    return xp.stack(grams), xp.stack(rhs)


def run_weighted_products(counts, gram, rhs, xp):
    """``(X' W X, X' W Y)`` of replicates that weight whole runs: the runs'
    products (:func:`run_products`) summed with each replicate's count of
    each run, one GEMM ``(b, R) @ (R, q * q)`` each, no pass over the rows.

    Parameters
    ----------
    counts : array of shape (b, R)
    gram, rhs : arrays of shapes (R, q, q) and (R, q, t)

    Returns
    -------
    gram, rhs : arrays of shapes (b, q, q) and (b, q, t)
    """
    b, (R, q, t) = counts.shape[0], rhs.shape
    summed_gram = counts @ xp.reshape(gram, (R, q * q))
    summed_rhs = counts @ xp.reshape(rhs, (R, q * t))
    return xp.reshape(summed_gram, (b, q, q)), xp.reshape(summed_rhs, (b, q, t))


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
