"""The covariance decomposition of a ridge design: many rows, few features.

Beside the SVD of each training fold (:class:`~skbatch._ridge.problems.RidgeSolver`),
a design with many more rows than columns is decomposed through its p x p
covariance (:class:`CovarianceSolver`): the weighted moments of each fold's
test rows (``sum w``, ``sum w x``, ``sum w x x'``) are formed once, a fold's
training moments are the total less its test rows' (when its training rows
are the rest), and one ``eigh`` of each fold's training covariance serves
every alpha. A batch of targets adds its cross-moments (``sum w y``,
``sum w x y'``) the same way. In float64, a test fold of at least
``MOMENT_SCORING_ROWS_PER_FEATURE`` rows per column is scored from its
moments, kept centred on the training means (every alpha's sums of squares
and products of the predictions are quadratic forms in them:
:func:`~skbatch._kernels.linalg.moment_scores`), where that costs fewer
products than predicting its rows; otherwise, and for the
targets whose scores those sums round too coarsely, the test rows are
predicted from each alpha's coefficients and scored by the function that
scores every path. No n x p factor is formed: the solver holds X as given,
one p x p eigenbasis per fold and of all rows, the test moments it scores
from, and transient blocks of at most
:data:`~skbatch._kernels.linalg.COVARIANCE_ROW_BLOCK` rows.

The covariance squares the condition number of the design: its coefficients
carry a relative error of about ``eps * cond(C + alpha I)`` (C the centred
covariance, alpha the smallest solved), the SVD's about the square root of
that. :func:`choose_decomposition` is the one rule choosing between the two
(as scikit-learn's ``gcv_mode="auto"`` chooses between its eigen and svd
modes): the covariance for K-fold schemes whose every training fold has at
least ``COVARIANCE_MIN_ROWS_PER_FEATURE`` rows per column, and, once the
covariances are decomposed, only where that error stays below
``COVARIANCE_MAX_ERROR``; the SVD otherwise.
"""

import numpy as np
from array_api_compat import device as array_device

from .._backends.side_by_side import cpu_workers, map_threads
from .._engine import Portable
from .._kernels import linalg as _linalg
from .cv import KFold

__all__ = [
    "COVARIANCE_MAX_ERROR",
    "COVARIANCE_MIN_ROWS_PER_FEATURE",
    "DECOMPOSITIONS",
    "CovarianceSolver",
    "check_decomposition",
    "choose_decomposition",
    "covariance_solver",
]

#: Values of ``BatchedRidge(solver=...)``.
DECOMPOSITIONS = ("auto", "svd", "covariance")
# Training rows per column from which "auto" decomposes the covariance: X'X
# costs 2 n p^2 and one eigh per fold ~9 p^3, the SVD ~6 n p^2 per fold and
# an n x p factor each; from 2 rows per feature on, the covariance was as
# fast or faster at every shape timed (benchmarks/bench_covariance.py), and
# below it the encoding shapes (p >= n per fold) keep their SVD.
COVARIANCE_MIN_ROWS_PER_FEATURE = 2
# Largest eps * cond(C + alpha I) at which "auto" keeps the covariance: its
# coefficients and scores then agree with the SVD's to 1e-10 relative in
# float64 (tests/test_covariance.py; measured errors are 0.06-0.7 times
# eps * cond, benchmarks/accuracy_covariance.py).
COVARIANCE_MAX_ERROR = 1e-10
# Column norms whose squares (and sums of a few thousand of them, the
# cross-moments) stay normal float64 numbers: 1e-140^2 keeps 1e-280 above the
# subnormals (2.2e-308) with room for the weights, 1e140^2 stays below 1.8e308.
COVARIANCE_NORM_RANGE = (1e-140, 1e140)
# Test rows per feature from which a fold keeps its test moments and is
# scored from them (CovarianceSolver._moments_cheaper decides per batch).
MOMENT_SCORING_ROWS_PER_FEATURE = 2
# Rows of X between breaks that make a fold's rows one slice each run rather
# than gathered indices.
MIN_RUN_ROWS = 64


def check_decomposition(solver, scheme):
    """Refuse a ``solver`` value, or the covariance for a scheme without folds.

    Raises
    ------
    ValueError
        Naming the value and what is allowed.
    """
    if not isinstance(solver, str) or solver not in DECOMPOSITIONS:
        raise ValueError(f"solver must be one of {DECOMPOSITIONS}, got {solver!r}")
    if solver == "covariance" and not isinstance(scheme, KFold):
        raise ValueError(
            "solver='covariance' decomposes the training covariance of each "
            "fold and needs a K-fold cv (an int, a CV splitter or an iterable "
            f"of splits), got cv={scheme.cv!r}; use solver='svd' or 'auto'"
        )


def choose_decomposition(solver, scheme, X):
    """``"svd"`` or ``"covariance"`` by shape and scale, for a split ``scheme``.

    ``"auto"`` chooses the covariance for a K-fold scheme whose smallest
    training fold has at least ``COVARIANCE_MIN_ROWS_PER_FEATURE`` rows per
    column and a host design ``X`` whose column norms square within the
    float64 range (:func:`squares_in_range`);
    :meth:`CovarianceSolver.accurate` then says whether its conditioning
    keeps it.

    Leave-one-out and GCV keep the SVD: their hat diagonal from the
    covariance's eigenbasis, ``sum_k (X V)_ik^2 / (s_k + alpha)``, needs
    every row in V's basis (n p^2 products, in blocks of rows) and each
    alpha's residuals of every row (n p per target and alpha), which the
    covariance path does not compute; the SVD's factor gives both.

    Raises
    ------
    ValueError
        For ``solver="covariance"`` and an X whose squares leave that range.
    """
    if solver == "svd":
        return solver
    if solver == "covariance":
        if not squares_in_range(X):
            raise ValueError(
                "solver='covariance' squares X's columns, whose norms (from "
                f"{_norm_range(X)}) leave the float64 range once squared; use "
                "solver='svd' or 'auto'"
            )
        return solver
    if not isinstance(scheme, KFold):
        return "svd"
    smallest = min(len(train) for train, _ in scheme.splits)
    if smallest < COVARIANCE_MIN_ROWS_PER_FEATURE * X.shape[1]:
        return "svd"
    return "covariance" if squares_in_range(X) else "svd"


def covariance_solver(
    X, sample_weight, alphas, scheme, backend, dtype, *, fit_intercept, scoring, solver
):
    """A :class:`CovarianceSolver` of ``X`` where ``solver`` and the rule
    (:func:`choose_decomposition`, :meth:`CovarianceSolver.accurate`) choose
    the covariance, else None (decompose by SVD). Called inside the backend's
    context, after the memory check of the decomposition chosen."""
    if choose_decomposition(solver, scheme, X) != "covariance":
        return None
    decomposed = CovarianceSolver(
        X,
        sample_weight,
        alphas,
        scheme,
        backend,
        dtype,
        fit_intercept=fit_intercept,
        scoring=scoring,
    )
    # "auto" keeps the covariance only where squaring the condition number
    # keeps the SVD's accuracy.
    if solver == "auto" and not decomposed.accurate():
        return None
    return decomposed


def _column_norms(X):
    return _linalg.column_norms(np.asarray(X, dtype=np.float64), np)


def squares_in_range(X):
    """Whether every non-zero column norm of ``X`` lies within
    ``COVARIANCE_NORM_RANGE``: its square, the covariance's diagonal, then
    keeps every digit in float64."""
    norms = _column_norms(X)
    norms = norms[norms > 0]
    if norms.size == 0:
        return True
    low, high = COVARIANCE_NORM_RANGE
    return bool(
        np.all(np.isfinite(norms)) and norms.min() >= low and norms.max() <= high
    )


def _norm_range(X):
    norms = _column_norms(X)
    return f"{norms.min():.3g} to {norms.max():.3g}"


def row_selections(rows, backend, block=_linalg.COVARIANCE_ROW_BLOCK):
    """Rows (host indices) as blocks of at most ``block`` rows: slices of
    consecutive runs, else device index arrays."""
    rows = np.asarray(rows, dtype=np.intp)
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    if rows.size and (breaks.size + 1) * MIN_RUN_ROWS <= rows.size:
        bounds = np.concatenate(([0], breaks, [rows.size]))
        return [
            slice(
                int(rows[start]) + offset,
                int(rows[start]) + min(offset + block, stop - start),
            )
            for start, stop in zip(bounds[:-1], bounds[1:])
            for offset in range(0, stop - start, block)
        ]
    return [
        backend.asarray(rows[start : start + block])
        for start in range(0, rows.size, block)
    ]


def _test_rows(A, selections, xp):
    """The rows of ``A`` of a fold's test selections, a view when one run."""
    if len(selections) == 1:
        return _linalg._block_rows(A, selections[0], xp)
    return xp.concat([_linalg._block_rows(A, rows, xp) for rows in selections], axis=0)


def _centred(rows, shift, offset, xp):
    """``(rows - shift) - offset``, the second in place where possible."""
    centred = rows - shift
    library = _linalg._out_namespace(centred)
    if library is None or isinstance(offset, float):
        return centred - offset
    library.subtract(centred, offset, out=centred)
    return centred


def _covers(n, *indices):
    """Whether ``indices`` (of n rows, n of them in all) name every row."""
    seen = np.zeros(n, dtype=bool)
    for rows in indices:
        seen[rows] = True
    return bool(seen.all())


def _subtract(total, part):
    return tuple(a - b for a, b in zip(total, part))


class _CovarianceFold(Portable):
    """One split: its training covariance decomposed, its rows located."""

    def __init__(self, moments, train, test, complement, weight, backend):
        self.weight, self.sums = moments[0], moments[1]
        self.complement = complement
        self.train = None if complement else row_selections(train, backend)
        # Bounded blocks for the moments; whole runs (views) for the scores.
        self.blocks = row_selections(test, backend)
        self.test = row_selections(test, backend, block=max(len(test), 1))
        self.n_test = len(test)
        self.test_weight = (
            None if weight is None else backend.xp.take(weight, backend.asarray(test))
        )


class CovarianceDesign(Portable):
    """What every covariance decomposition sets up before its moments: X in
    the compute dtype, the work dtype of its moments, the weights and the
    row the moments are taken about."""

    def _set_design(
        self, X, sample_weight, alphas, scheme, backend, dtype, fit_intercept, scoring
    ):
        """Set the design's attributes; return the sample weights in the
        work dtype (or None)."""
        xp = backend.xp
        self.backend, self.dtype, self.xp = backend, dtype, xp
        self.alphas, self.scheme = alphas, scheme
        self.fit_intercept, self.scoring = fit_intercept, scoring
        self.n_samples, self.n_features = X.shape
        self.X = backend.asarray(X, dtype)
        work = self.work_dtype = _linalg.decomposition_dtype(self.X, xp)
        # The work dtype as the backend takes dtypes: numpy's.
        self._work_numpy = np.dtype(np.float64 if work == xp.float64 else dtype)
        self.root_weight = weight = None
        if sample_weight is not None:
            weight = backend.asarray(sample_weight, self._work_numpy)
            self.root_weight = xp.sqrt(weight)
        # Moments about X's first row of positive weight: within the spread of
        # the rows that count, so the centring subtracts moments of one scale
        # and a target constant on them centres to exact zeros (as
        # _linalg.center shifts).
        self.anchor = _linalg._first_weighed_row(weight, xp)
        shift = (
            xp.astype(self.X[self.anchor], work)
            if fit_intercept
            else xp.zeros(self.n_features, dtype=work, device=array_device(self.X))
        )
        self.x_shift_work, self.x_shift = shift, xp.astype(shift, self.X.dtype)
        return weight


class CovarianceSolver(CovarianceDesign):
    """A design decomposed through its covariance, taking device targets.

    The interface of :class:`~skbatch._ridge.problems.RidgeSolver` that
    :class:`~skbatch._ridge.problems.TargetProblem` reads (``select_and_fit``,
    ``fit_fixed``, the sizes and memory), for a K-fold ``scheme``.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Host design matrix.
    sample_weight : ndarray of shape (n_samples,) or None
    alphas : ndarray of shape (n_alphas,)
    scheme : skbatch._ridge.cv.KFold
        Split already.
    backend : Backend
    dtype : numpy dtype
        The compute dtype: of the products with the targets and of the
        results, as the SVD path projects them. X's moments and their
        ``eigh`` run in :func:`skbatch._kernels.linalg.decomposition_dtype` (float64
        for float32 on the CPU), where the squared condition number lives.
    fit_intercept : bool
    scoring : str or None
    """

    def __init__(
        self,
        X,
        sample_weight,
        alphas,
        scheme,
        backend,
        dtype,
        *,
        fit_intercept,
        scoring,
    ):
        weight = self._set_design(
            X, sample_weight, alphas, scheme, backend, dtype, fit_intercept, scoring
        )
        xp, work, root_weight = self.xp, self.work_dtype, self.root_weight
        n, p = X.shape
        shift = self.x_shift_work
        splits = scheme.splits
        tests = np.concatenate([test for _, test in splits])
        # Test folds that cover every row once: all rows' moments are their sum.
        self.partition = tests.size == n and _covers(n, tests)
        self.all_rows = (
            None if self.partition else row_selections(np.arange(n), backend)
        )

        def moments(rows):
            return _linalg.gram_moments(self.X, rows, root_weight, shift, work, xp=xp)

        tests = [moments(row_selections(test, backend)) for _, test in splits]
        total = (
            tuple(sum(parts) for parts in zip(*tests))
            if self.partition
            else moments(self.all_rows)
        )
        complements = [
            train.size + test.size == n and _covers(n, train, test)
            for train, test in splits
        ]
        alpha = float(np.min(alphas))
        # Held-out scores from the test rows' moments (float64 only: in
        # float32 the rows are scored in the compute dtype, as the SVD path
        # scores them).
        self.moment_scoring = np.dtype(dtype) == np.float64 and (
            self._work_numpy == np.float64
        )

        def test_moments(k, weight, sums):
            # The fold's test moments about its training means, kept for
            # the scores; None where the rows are scored. The moments cost
            # 2 p^2 per target and alpha, the rows at least (n_test + p) p:
            # from n_test = 2p on, the p x p they hold saves a third or more
            # (at 10 s trials of the TRF benchmark, n_test = 1.16 p, they
            # saved 7% of the products and cost 78 MB).
            n_test = len(splits[k][1])
            if (
                not self.moment_scoring
                or n_test < _linalg.MIN_SCORED_ROWS
                or n_test < MOMENT_SCORING_ROWS_PER_FEATURE * p
            ):
                return None
            t_weight, t_sums, t_gram = tests[k]
            if fit_intercept:
                t_gram, t_sums = _linalg.moments_about(
                    t_gram, t_sums, t_weight, sums / weight, xp=xp
                )
            return t_sums, t_gram

        def decompose(k):
            # A fold's moments formed here and its test fold's dropped once
            # used: the p x p matrices alive stay near one per fold.
            if k is None:
                part = total
            elif complements[k]:
                part = _subtract(total, tests[k])
            else:
                part = moments(row_selections(splits[k][0], backend))
            weight, sums, gram = part
            del part
            held = None if k is None else test_moments(k, weight, sums)
            if k is not None:
                tests[k] = None
            # The fold's own moments (all rows' once every fold has read
            # them): overwritten by the centring and by eigh.
            covariance = _linalg.centred_gram(
                gram, sums, weight, fit_intercept=fit_intercept
            )
            del gram
            eigenvalues, V = _linalg.covariance_eigh(covariance, overwrite=True, xp=xp)
            condition = _linalg.covariance_condition(eigenvalues, alpha, xp=xp)
            # The targets' cross-moments meet V in the work dtype: their
            # rounding would be amplified by the squared condition number. The
            # predictions and coefficients, amplified by nothing, run in the
            # compute dtype, as the SVD path's do.
            cast = [xp.astype(a, self.X.dtype, copy=False) for a in (eigenvalues, V)]
            return condition, (weight, sums), (*cast, V), held

        fold_bases = map_threads(decompose, range(len(splits)), backend)
        # All rows last, in place of their moments: one p x p fewer at the
        # peak (and with 8 folds on 2 threads, as many rounds of eigh).
        full = decompose(None)
        total = None
        self.condition = max(part[0] for part in [*fold_bases, full])
        _, self.total, (self.eigenvalues, self.V, self.V_work), _ = full
        self.folds = []
        for (train, test), complement, (_, moments_k, basis, held) in zip(
            splits, complements, fold_bases
        ):
            fold = _CovarianceFold(moments_k, train, test, complement, weight, backend)
            fold.eigenvalues, fold.V, fold.V_work = basis
            fold.test_moments = held
            self.folds.append(fold)
        # The full eigenvalues, as the SVD's singular values, size the problem.
        self.s = self.eigenvalues

    def accurate(self):
        """Whether ``eps * cond(C + alpha I)`` of every covariance, at the
        smallest alpha, stays below ``COVARIANCE_MAX_ERROR``."""
        eps = float(self.xp.finfo(self.work_dtype).eps)
        return eps * self.condition <= COVARIANCE_MAX_ERROR

    @staticmethod
    def nbytes(n_samples, n_features, scheme, itemsize, *, backend=None):
        """Device bytes at the solver's peak, from the shapes, before any
        moment is formed: X in the compute dtype; in float64, the moments of
        every test fold and of all rows and one eigenbasis per fold and of
        all rows (p x p each); and for each fold decomposed side by side
        (:func:`~skbatch._backends.side_by_side.cpu_workers`) its training
        moments, ``eigh``'s copy of them and its workspace (4 p x p), and
        two blocks of rows being multiplied."""
        n_folds = len(scheme.splits)
        p = n_features
        workers = 1 if backend is None else cpu_workers(backend)
        workers = min(workers, n_folds + 1)
        square = 8 * (2 * (n_folds + 1) * (p * p + p) + 4 * workers * p * p + 2)
        block = 8 * 2 * min(n_samples, _linalg.COVARIANCE_ROW_BLOCK) * p
        return itemsize * n_samples * n_features + square + block

    @property
    def fixed_bytes(self):
        """Device bytes held once decomposed: X, the eigenbases and moments
        (in float64, the p x p moments of each test fold scored from them),
        and
        while a fold is scored from its rows its centred test rows and their
        coordinates in V's basis."""
        n_folds = len(self.folds)
        p = self.n_features
        n_test = max(fold.n_test for fold in self.folds)
        itemsize = np.dtype(self.dtype).itemsize
        held = (n_folds + 1) * (p * p + 3 * p) + 2 * n_test * p
        # Test moments are kept in float64 (the compute dtype then).
        held += sum(p * p + p for fold in self.folds if fold.test_moments is not None)
        return itemsize * (self.n_samples * p + held)

    def values_per_target(self):
        """Device values of one target in a batch: its column and a block's
        centred copy, the cross-moments of every test fold and of all rows, a
        fold's training cross-moments in V's basis, one alpha's filtered
        coordinates and coefficients, the test targets, predictions and
        errors, and the scores of every alpha; in float64, every alpha's
        coefficients and their product with the test moments."""
        n_test = max(fold.n_test for fold in self.folds)
        values = (
            2 * self.n_samples
            + (len(self.folds) + 5) * self.n_features
            + 4 * n_test
            + 2 * self.alphas.size
        )
        if any(fold.test_moments is not None for fold in self.folds):
            values += (2 * self.alphas.size + 2) * self.n_features
        return values

    def _shift(self, Y):
        """The targets' shift (their first row of positive weight, or 0), in
        the work dtype."""
        xp, work = self.xp, self.work_dtype
        if self.fit_intercept:
            return xp.astype(Y[self.anchor], work)
        return xp.zeros(Y.shape[1], dtype=work, device=array_device(Y))

    def _cross(self, Y, rows, y_shift):
        """Cross-moments of the targets ``Y`` over ``rows``, in the work dtype."""
        return _linalg.cross_moments(
            self.X,
            Y,
            rows,
            self.root_weight,
            self.x_shift_work,
            y_shift,
            self.work_dtype,
            xp=self.xp,
        )

    def _targets(self, Y):
        """The batch's shift and cross-moments of every fold and of all rows."""
        y_shift = self._shift(Y)
        tested = [self._cross(Y, fold.blocks, y_shift) for fold in self.folds]
        total = (
            tuple(sum(parts) for parts in zip(*tested))
            if self.partition
            else self._cross(Y, self.all_rows, y_shift)
        )
        return y_shift, tested, total

    def _projection(self, V_work, moments, sums):
        """The centred cross-moments in V's basis (p, m), in the compute dtype."""
        xp = self.xp
        weight, x_sums = moments
        y_sums, cross = sums
        centred = _linalg.centred_cross(
            cross, x_sums, y_sums, weight, fit_intercept=self.fit_intercept
        )
        return xp.astype(xp.permute_dims(V_work, (1, 0)) @ centred, self.X.dtype)

    def _offsets(self, moments, y_sums, y_shift):
        """``(x_shift, x_offset), (y_shift, y_offset)`` in the compute dtype:
        the (weighted) means over the rows of ``moments`` as a row of the data
        (exact in its dtype) and the small mean of the deviations from it.

        Rows are centred by subtracting both in turn: the first difference is
        exact, so the mean's rounding in float32 (6e-5 on targets near 1e3)
        does not shift every centred row.
        """
        xp, dtype = self.xp, self.X.dtype
        shifts = self.x_shift, xp.astype(y_shift, dtype)
        if not self.fit_intercept:
            return (shifts[0], 0.0), (shifts[1], 0.0)
        weight, x_sums = moments
        x_offset = xp.astype(x_sums / weight, dtype)
        return (shifts[0], x_offset), (shifts[1], xp.astype(y_sums / weight, dtype))

    def scores(self, Y, y_shift, tested, total):
        """Scores (n_alphas, m) of one batch of device targets, averaged over
        folds as :class:`~skbatch._ridge.cv.KFold` averages them.

        In float64 each fold's test rows enter through their moments
        (:func:`~skbatch._kernels.linalg.moment_scores`: the test targets
        are read, X is not), and only the targets whose scores those
        moments round too coarsely are scored from the rows.
        """
        xp = self.xp
        result = 0.0
        for fold, test_sums in zip(self.folds, tested):
            if fold.complement:
                sums = _subtract(total, test_sums)
            else:
                sums = self._cross(Y, fold.train, y_shift)
            moments = (fold.weight, fold.sums)
            VtXtY = self._projection(fold.V_work, moments, sums)
            x_means, y_means = self._offsets(moments, sums[0], y_shift)
            y_true = _centred(_test_rows(Y, fold.test, xp), *y_means, xp)
            arguments = (VtXtY, y_true, Y.dtype)
            if fold.test_moments is None or not self._moments_cheaper(fold, Y):
                result = result + self._row_scores(fold, x_means, *arguments)
                continue
            fold_scores, rows_needed = self._moment_scores(
                fold, moments, sums, test_sums, *arguments[:2]
            )
            if bool(xp.any(rows_needed)):
                rows = self._row_scores(fold, x_means, *arguments)
                fold_scores = xp.where(rows_needed[None, :], rows, fold_scores)
            result = result + fold_scores
        return result / len(self.folds)

    def _moments_cheaper(self, fold, Y):
        """Whether a batch of targets ``Y`` costs fewer products scored from
        the fold's test moments (2 p^2 per target and alpha) than from its
        rows, in :func:`~skbatch._kernels.linalg.covariance_holdout_scores`'
        cheaper order."""
        p, n_test = self.n_features, fold.n_test
        per_target = self.alphas.size * Y.shape[1]
        rows = min(n_test * p * (p + per_target), per_target * p * (p + n_test))
        return 2 * per_target * p * p < rows

    def _moment_scores(self, fold, moments, sums, test_sums, VtXtY, y_true):
        """A fold's scores from its test moments, and the targets to score
        from the rows."""
        xp = self.xp
        x_sums, gram = fold.test_moments
        y_sums, cross = test_sums
        if self.fit_intercept:
            # The test cross-moments about the training means of X and y.
            weight, train_x_sums = moments
            x_offset = train_x_sums / weight
            y_offset = sums[0] / weight
            cross = (
                cross
                - x_offset[:, None] * y_sums[None, :]
                - x_sums[:, None] * y_offset[None, :]
            )
        return _linalg.moment_scores(
            fold.V_work,
            xp.astype(fold.eigenvalues, self.work_dtype),
            xp.astype(VtXtY, self.work_dtype),
            gram,
            x_sums,
            cross,
            xp.astype(y_true, self.work_dtype),
            self.alphas,
            scoring=self.scoring or "r2",
            sample_weight=fold.test_weight,
            xp=xp,
        )

    def _row_scores(self, fold, x_means, VtXtY, y_true, y_dtype):
        """A fold's scores from its test rows."""
        xp = self.xp
        X_test = _centred(_test_rows(self.X, fold.test, xp), *x_means, xp)
        return _linalg.covariance_holdout_scores(
            X_test,
            fold.V,
            fold.eigenvalues,
            VtXtY,
            y_true,
            self.alphas,
            scoring=self.scoring or "r2",
            sample_weight=fold.test_weight,
            y_dtype=y_dtype,
            xp=xp,
        )

    def refit(self, y_shift, total, alpha):
        """Coefficients (m, n_features) and intercepts (m,) on all rows."""
        xp = self.xp
        VtXtY = self._projection(self.V_work, self.total, total)
        coef = _linalg.covariance_coef(self.V, self.eigenvalues, VtXtY, alpha, xp=xp)
        (x_shift, x_offset), (y_shift, y_offset) = self._offsets(
            self.total, total[0], y_shift
        )
        intercept = (y_shift + y_offset) - (x_shift + x_offset) @ coef
        return xp.permute_dims(coef, (1, 0)), intercept

    def select_and_fit(self, Y):
        """Scores of every alpha, the best per target, its coefficients."""
        xp = self.xp
        y_shift, tested, total = self._targets(Y)
        scores = self.scores(Y, y_shift, tested, total)
        best, best_score = _linalg.select_alpha(scores, xp=xp)
        alphas = self.backend.asarray(self.alphas, self.dtype)
        alpha = xp.take(alphas, best)
        return (*self.refit(y_shift, total, alpha), best, best_score, scores.T)

    def fit_fixed(self, Y, alpha):
        """Coefficients at one alpha for all targets of ``Y``."""
        y_shift = self._shift(Y)
        rows = self.all_rows or [
            selection for fold in self.folds for selection in fold.blocks
        ]
        return self.refit(y_shift, self._cross(Y, rows, y_shift), alpha)
