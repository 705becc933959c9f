"""One model on one outer fold at every target's held choice: the
candidates' decompositions and the held-out squared errors of
:class:`~skbatch._ridge.freedman_lane_held.HeldNullProblem`'s targets.

Per fold and model the targets are taken in the order of their held
candidate and alpha (:class:`HeldModel`, sorted once), a block of rows at a
time: the block's products ``X'Wy*`` and test rows are gathered, two GEMMs
per block (``V'(X'Wy*)`` and the test rows' predictions, from the
candidate's decomposition, computed once per fold by :func:`held_fold`)
subtract the training means and predictions in place, and the block's sums
of squares are taken while it is in cache. The targets of one candidate
and alpha whose rows are many go through one GEMM instead: their products
times the hat matrix ``S D B'`` (the candidate's map to coordinates, the
alpha's damping, the test basis), made once per call, which takes fewer
flops than coordinates and predictions when the model keeps about as many
columns as it has test rows or more. The last model through a fold's
test rows of ``y*`` subtracts from them where they are when it has one
candidate (the reduced model of one band): its targets in their own order,
each damped by its alpha's row of a table, with no copy of its rows or
products in candidate order. The test rows' own means, where the fold
trains on all rows but them, come from the products (all rows' weighted
sums less the training ones), and the rows are centred on them in place
for their sum of squares. The GEMMs release the GIL:
parts of the targets run side by side on threads
(:func:`~skbatch._ridge.freedman_lane_held.held_parts`).

A model of few columns and small rank next to the test rows (a reduced
model of one small band) scores from products alone where the fold trains
on every row but its test rows (:meth:`HeldModel.moment_errors`): the test
rows' products are all rows' less the training ones, and the squared errors
follow from them, the test rows' moments and the Gram matrix of the test
basis, with no pass over the test rows.
"""

import copy
import math

import numpy as np

from .._kernels import linalg as _linalg
from .._kernels.blas import gemm_update
from .banded import BandedDesign

__all__ = ["BLOCK_BYTES", "HeldModel", "held_fold"]

# Bytes of the blocks of rows that a fold's squared errors and moments go
# through: a block's products, coordinates and test rows are gathered,
# multiplied and summed while in cache, instead of each step being a pass
# over every row in memory. The coordinates' GEMM writes the block's rows
# as columns (HeldModel.coordinates), and runs faster the more rows a
# block holds: on the benchmark's host (benchmarks/bench_gemm_shapes.py,
# benchmarks/RESULTS.md) 84 GFLOP/s at 2,048 rows of 331 columns against
# 76 at 544 (4 MiB), the reference GEMM at 83.5.
BLOCK_BYTES = 16 << 20


class HeldModel:
    """One model on one outer fold at every target's held choice.

    Candidate c (a distinct row of the targets' band weights) is ridge on
    X's columns ``columns[c]`` times their scales ``sqrt(gamma_b)``: the
    training rows' centred, weighted design has the SVD
    ``U diag(s[c]) V_c'``; ``Vt[c]`` is ``V_c'`` times the scales (so that
    it applies to X's own products), and ``test_basis[c]`` is the scaled
    test rows (centred by the training means) times ``V_c``.

    Attributes
    ----------
    columns, s, Vt, test_basis : list of ndarray, one per candidate
    candidate : ndarray of shape (n_targets,)
        Each target's candidate.
    alpha : ndarray of shape (n_targets,)
    order : ndarray of shape (n_targets,)
        The targets by candidate (stable): candidate c's targets are
        ``order[bounds[c]:bounds[c + 1]]``.
    bounds : ndarray of shape (n_candidates + 1,)
    from_moments : bool
        Whether :meth:`moment_errors` takes fewer flops than
        :meth:`squared_errors` for every candidate (:func:`_from_moments`).
    """

    def __init__(
        self,
        columns,
        s,
        Vt,
        test_basis,
        candidate,
        alpha,
        shift=None,
        mean_weight=0.0,
        test_weight=None,
    ):
        self.columns = columns
        self.s = s
        # V' and, in a last row, minus V' times the fold's training means
        # (``shift``, of X less its overall mean): the products of training
        # rows centred on X's overall mean, with their weighted sums in a last
        # column, give the coordinates of the fold's own centring in one GEMM.
        # A last column takes the weighted sum times ``mean_weight`` (1 / the
        # training weight, or 0 without an intercept): each row's training
        # mean, which the test basis's last column of ones subtracts from the
        # test rows in the same GEMM as the predictions.
        shift = [np.zeros(len(kept)) for kept in columns] if shift is None else shift
        self._solve = []
        for V, mean in zip(Vt, shift):
            solve = np.zeros((V.shape[1] + 1, V.shape[0] + 1))
            solve[:-1, :-1] = V.T
            solve[-1, :-1] = -(V @ mean)
            solve[-1, -1] = mean_weight
            self._solve.append(solve)
        # Fortran order, as BLAS reads it (a copy per product otherwise).
        self._test_basis = [
            np.asfortranarray(np.column_stack([basis, np.ones(len(basis))]))
            for basis in test_basis
        ]
        self._views()
        self.from_moments = all(
            _from_moments(len(s_c), len(kept), len(basis))
            for s_c, kept, basis in zip(s, columns, self.test_basis)
        )
        # The test basis's Gram matrix and weighted sums, the test rows
        # weighted (moment_errors): only where they are used (r x r each,
        # smaller than the test basis there), as workers receive them.
        self._gram, self._test_sums = [], []
        for basis in self.test_basis if self.from_moments else []:
            w = np.ones(len(basis)) if test_weight is None else test_weight
            self._gram.append(basis.T @ (basis * w[:, None]))
            self._test_sums.append(basis.T @ w)
        self._sort(candidate, alpha)

    def _sort(self, candidate, alpha):
        """Take the targets' ``candidate`` and ``alpha``, and the order,
        bounds and damping that follow from them."""
        self.candidate = np.asarray(candidate, dtype=np.intp)
        self.alpha = np.asarray(alpha, dtype=np.float64)
        # By candidate, then alpha: each (candidate, alpha) is one run of
        # rows, damped by one vector 1 / (s^2 + alpha) in place (and 1 for
        # the mean's column).
        n_candidates = len(self.columns)
        self.order = np.lexsort((self.alpha, self.candidate))
        self.bounds = np.searchsorted(
            self.candidate[self.order], np.arange(n_candidates + 1)
        )
        self._taken = [_as_slice(kept) for kept in self.columns]
        # A one-candidate model's damping per distinct alpha (_row_damping).
        self._alphas = np.unique(self.alpha)
        self._table = np.array(
            [np.append(1.0 / (self.s[0] ** 2 + a), 1.0) for a in self._alphas]
            if n_candidates == 1
            else []
        )
        sorted_alpha = self.alpha[self.order]
        self._damping = []
        for c in range(n_candidates):
            start, stop = self.bounds[c], self.bounds[c + 1]
            alphas, starts = np.unique(sorted_alpha[start:stop], return_index=True)
            stops = np.append(starts[1:], stop - start)
            self._damping.append(
                [
                    (int(a), int(b), np.append(1.0 / (self.s[c] ** 2 + alpha), 1.0))
                    for a, b, alpha in zip(starts, stops, alphas)
                ]
            )

    def targets(self, lo, hi):
        """The model for targets ``lo:hi`` alone: the same decompositions
        (not copied), those targets' choices."""
        part = copy.copy(self)
        part._sort(self.candidate[lo:hi], self.alpha[lo:hi])
        return part

    def _views(self):
        # V' and the test basis without the columns of the means: views, not
        # pickled (a view is pickled as a copy of its own).
        self.Vt = [solve[:-1, :-1].T for solve in self._solve]
        self.test_basis = [basis[:, :-1] for basis in self._test_basis]

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["Vt"], state["test_basis"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._views()

    def _sorted_rows(self, n_repeats):
        """The rows ``target * n_repeats + k`` in candidate order."""
        return (self.order[:, None] * n_repeats + np.arange(n_repeats)).ravel()

    def _row_damping(self, lo, hi, n_repeats):
        """The damping of rows ``lo:hi`` (``target * n_repeats + k``) of a
        one-candidate model, a row each."""
        first, last = lo // n_repeats, -(-hi // n_repeats)
        codes = np.searchsorted(self._alphas, self.alpha[first:last])
        table = np.repeat(self._table[codes], n_repeats, axis=0)
        return table[lo - first * n_repeats : hi - first * n_repeats]

    def _runs(self, c, n_repeats, start):
        """Candidate c's alpha runs as ``(first row, stop, damping)``."""
        return [
            (a * n_repeats + start, b * n_repeats + start, damping)
            for a, b, damping in self._damping[c]
        ]

    def squared_errors(
        self,
        products,
        test_rows,
        n_repeats,
        root_weight,
        buffers,
        moments=None,
        in_place=False,
    ):
        """Each target's held-out sum of (weighted) squared errors.

        The rows are taken in candidate order a block at a time (at most
        :data:`BLOCK_BYTES` of the block's products, coordinates and
        errors): each block's test rows are gathered, their training means
        and predictions subtracted by BLAS in place and their sums of
        squares taken while the block is in cache; no array of all rows in
        candidate order is made. A run of one candidate and alpha goes
        through its hat matrix (one GEMM of the block's products, no
        coordinates) where that takes fewer flops (:func:`_by_hat`).

        Parameters
        ----------
        products : ndarray of shape (n_targets * n_repeats, n_features + 1)
            ``X'W y*`` of the fold's training rows, X centred on its overall
            mean, and in the last column the weighted sums of ``y*``; row
            ``target * n_repeats + k``.
        test_rows : ndarray of shape (n_targets * n_repeats, n_test)
            The test rows of ``y*`` (a view is not copied).
        n_repeats : int
        root_weight : ndarray of shape (n_test,) or None
        buffers : dict
            Scratch arrays, reused from call to call.
        moments : tuple or None
            ``(mean, total, shift, squares, own)``: from each block's test
            rows, before the predictions are subtracted, their weighted mean
            less the training ``mean`` (the test rows' weight ``total``)
            into ``shift`` and their centred sum of squares into
            ``squares`` (all of shape (n_targets * n_repeats,)); ``own``:
            the test rows' weighted means where known (None: taken from the
            rows).
        in_place : bool, default=False
            Whether ``test_rows`` may be overwritten. A model of one
            candidate none of whose alphas goes through its hat matrix then
            takes the rows in their own order, each damped by its alpha's
            row of a table, and subtracts its predictions from them where
            they are: no copy of them, nor of the products, in candidate
            order.

        Returns
        -------
        ndarray of shape (n_targets * n_repeats,)
        """
        n_rows, n_test = test_rows.shape
        n_features = products.shape[1] - 1
        out = np.empty(n_rows)
        rank = max((len(s) for s in self.s), default=0)
        size = _block_rows(n_features + rank + n_test + 2)
        if (
            in_place
            and len(self._taken) == 1
            and not any(
                _by_hat(b - a, *self._solve[0].shape, n_test)
                for a, b, _ in self._runs(0, n_repeats, 0)
            )
        ):
            # Blocks of whole targets: each target's damping applies to its
            # rows by broadcasting.
            size = max(1, size // n_repeats) * n_repeats
            codes = np.searchsorted(self._alphas, self.alpha)
            for lo in range(0, n_rows, size):
                block = slice(lo, min(lo + size, n_rows))
                coords = self.coordinates(
                    0,
                    products[block],
                    _scratch(buffers, "coords", (rank + 1, block.stop - lo)),
                )
                damping = self._table[codes[lo // n_repeats : block.stop // n_repeats]]
                per_target = coords.reshape(-1, len(damping), n_repeats)
                per_target *= damping.T[:, :, None]
                self._subtract(
                    test_rows[block], coords, 0, block, root_weight, moments, out
                )
            return out
        rows = self._sorted_rows(n_repeats)
        # The largest block first: a buffer that grew block by block would be
        # held twice while it grows.
        _scratch(buffers, "block", (min(size, n_rows), n_features + 1))
        _scratch(buffers, "coords", (rank + 1, min(size, n_rows)))
        for c, taken in enumerate(self._taken):
            start = self.bounds[c] * n_repeats
            solve = self._solve[c]
            whole = isinstance(taken, slice) and taken.stop == n_features
            runs = self._runs(c, n_repeats, start)
            for first, last, hat in self._stretches(c, runs, n_test, buffers):
                for lo in range(first, last, size):
                    hi = min(lo + size, last)
                    block_rows = rows[lo:hi]
                    if whole:
                        # The block's rows whole (the kept columns run to the
                        # sums). mode="clip": np.take buffers its out= under
                        # the default "raise".
                        kept = np.take(
                            products,
                            block_rows,
                            axis=0,
                            out=_scratch(buffers, "block", (hi - lo, n_features + 1)),
                            mode="clip",
                        )[:, taken.start :]
                    else:
                        # Only the kept columns and the sums are gathered (a
                        # reduced model of a few columns reads few of them).
                        kept = _kept_rows(products, block_rows, taken, n_features)
                    # A copy of the block's test rows.
                    errors = test_rows[block_rows]
                    if hat is not None:
                        self._subtract_hat(
                            errors, kept, hat, block_rows, root_weight, moments, out
                        )
                        continue
                    coords = _scratch(buffers, "coords", (solve.shape[1], hi - lo))
                    np.matmul(solve.T, kept.T, out=coords)
                    _damp(coords, runs, lo, hi, columns=True)
                    self._subtract(
                        errors, coords, c, block_rows, root_weight, moments, out
                    )
        return out

    def _stretches(self, c, runs, n_test, buffers):
        """Candidate c's rows in candidate order as ``(first, stop, hat)``:
        an alpha run whose predictions take fewer flops through its hat
        matrix (:func:`_by_hat`) alone, with that matrix (:meth:`_hat`);
        the runs between them together, with None (coordinates, damped,
        then predictions)."""
        kept, rank = self._solve[c].shape
        stretch = None
        for a, b, damping in runs:
            if not _by_hat(b - a, kept, rank, n_test):
                stretch = (a if stretch is None else stretch[0], b)
                continue
            if stretch is not None:
                yield (*stretch, None)
                stretch = None
            yield a, b, self._hat(c, damping, buffers)
        if stretch is not None:
            yield (*stretch, None)

    def _hat(self, c, damping, buffers):
        """Candidate c's hat matrix at one alpha's ``damping``: ``S D B'``
        ((kept + 1) x n_test; S the candidate's map from a row's products to
        its coordinates and training mean, D the damping, B the test basis
        with its column of ones), which takes a row's products (its kept
        columns, its weighted sum last) to its test rows' predictions, the
        training mean in."""
        solve, basis = self._solve[c], self._test_basis[c].T
        scaled = _scratch(buffers, "damped basis", basis.shape)
        np.multiply(basis, damping[:, None], out=scaled)
        out = _scratch(buffers, "hat", (solve.shape[0], basis.shape[1]))
        return np.matmul(solve, scaled, out=out)

    def _subtract_hat(self, errors, kept, hat, rows, root_weight, moments, out):
        """:meth:`_subtract` by a hat matrix: the predictions of the block's
        products ``kept`` (its kept columns, the weighted sums last) in one
        GEMM."""
        centred = moments is not None and _block_moments(
            errors, rows, root_weight, *moments
        )
        gemm_update(errors, kept, hat)
        if centred:
            # The rows were centred on their own means: the errors are
            # those rows less the predictions, plus the means.
            errors += moments[-1][rows][:, None]
        out[rows] = _sum_of_squares(errors, root_weight)

    def _subtract(self, errors, coords, c, rows, root_weight, moments, out):
        """Take the moments of a block's test rows ``errors`` (rows
        ``rows``), subtract from them the means and predictions of candidate
        c's damped ``coords`` in place (BLAS's beta = 1, the GIL released:
        gemm_update), and their sums of squares into ``out[rows]``."""
        if moments is not None and _block_moments(errors, rows, root_weight, *moments):
            # The rows less their own mean: the GEMM subtracts the training
            # mean less it.
            coords[-1] -= moments[-1][rows]
        gemm_update(errors, coords.T, self._test_basis[c].T)
        out[rows] = _sum_of_squares(errors, root_weight)

    def coordinates(self, c, products, out):
        """Candidate c's coordinates ``V'(X'Wy*)`` (the fold's centring
        in) and training means of rows of ``products`` (every column, the
        weighted sums last), undamped, into ``out`` of shape (rank + 1,
        n_rows): a row's coordinates are a column.

        The GEMM so writes rows as long as the block, not rank + 1 wide:
        with its output's rows a few hundred long, BLAS ran 10% slower on
        the benchmark's host at 2,048 rows (75 against 84 GFLOP/s,
        ``benchmarks/bench_gemm_shapes.py``)."""
        taken, solve = self._taken[c], self._solve[c]
        n_features = products.shape[1] - 1
        if isinstance(taken, slice) and taken.stop == n_features:
            # The kept columns run to the sums: one GEMM centres too.
            return np.matmul(solve.T, products[:, taken.start :].T, out=out)
        np.matmul(solve[:-1].T, products[:, taken].T, out=out)
        out += solve[-1][:, None] * products[:, n_features]
        return out

    def moment_errors(self, products, totals, n_repeats, centred):
        """:meth:`squared_errors` from products alone, where the fold trains
        on every row but its test rows.

        With ``m`` the training mean, ``B`` the candidate's test basis and
        ``c`` the damped coordinates, the errors are ``(y - m) - B c``, so
        their weighted sum of squares is ``centred - 2 c'B'W(y - m) +
        c'(B'WB)c``. ``B'Wy`` is V' (times the scales) of the test rows'
        products, ``totals`` less ``products`` at the kept columns (X
        centred on its overall mean, less the fold's shift as the training
        products are), and ``B'W1`` and ``B'WB`` are the model's, made
        once.

        Parameters
        ----------
        products : ndarray of shape (n_targets * n_repeats, n_features + 1)
            The training rows' products, as :meth:`squared_errors` takes.
        totals : ndarray of the same shape
            All rows' products.
        n_repeats : int
        centred : ndarray of shape (n_targets * n_repeats,)
            Each row's weighted sum of squares of its test rows less its
            training mean.

        Returns
        -------
        ndarray of shape (n_targets * n_repeats,)
        """
        n_features = products.shape[1] - 1
        # One candidate (a model of one band): its rows in their own order,
        # contiguous, each damped by its alpha's row of a table.
        single = len(self._taken) == 1
        rows = None if single else self._sorted_rows(n_repeats)
        out = np.empty(products.shape[0])
        for c, taken in enumerate(self._taken):
            start, stop = self.bounds[c] * n_repeats, self.bounds[c + 1] * n_repeats
            solve, gram, sums = self._solve[c], self._gram[c], self._test_sums[c]
            runs = self._runs(c, n_repeats, start)
            size = _block_rows(4 * solve.shape[0] + 2 * solve.shape[1])
            for lo in range(start, stop, size):
                hi = min(lo + size, stop)
                block_rows = slice(lo, hi) if single else rows[lo:hi]
                train = _kept_rows(products, block_rows, taken, n_features)
                test = _kept_rows(totals, block_rows, taken, n_features)
                test -= train
                coords = train @ solve
                if single:
                    coords *= self._row_damping(lo, hi, n_repeats)
                else:
                    _damp(coords, runs, lo, hi)
                mean, coef = coords[:, -1], coords[:, :-1]
                # B'W(y - m), then the cross and the quadratic terms.
                cross = test @ solve[:, :-1]
                cross -= mean[:, None] * sums
                sse = centred[block_rows] - 2.0 * np.einsum("ij,ij->i", coef, cross)
                sse += np.einsum("ij,ij->i", coef @ gram, coef)
                out[block_rows] = sse
        return out


def _from_moments(rank, kept, n_test):
    """Whether a candidate of ``rank`` and ``kept`` columns scores in fewer
    flops from products (:meth:`HeldModel.moment_errors`: ``B'Wy`` and the
    Gram matrix, ``r (k + r + 1)`` per row) than from its ``n_test`` test
    rows (:meth:`HeldModel.squared_errors`' predictions, ``n_test (r + 1)``),
    which also take passes over the test rows besides."""
    return rank * (kept + rank + 1) <= n_test * (rank + 1)


def _by_hat(n_rows, kept, rank, n_test):
    """Whether ``n_rows`` rows of one candidate and alpha (``kept`` rows and
    ``rank`` columns of its map to coordinates, the means' included) take
    fewer flops to their ``n_test`` predictions through the hat matrix
    (:meth:`HeldModel._hat`: ``kept rank n_test`` to make it, ``kept
    n_test`` per row) than through coordinates (``rank (kept + n_test)``
    per row), its bytes at most :data:`BLOCK_BYTES`."""
    return 8 * kept * n_test <= BLOCK_BYTES and kept * n_test * (
        rank + n_rows
    ) < n_rows * rank * (kept + n_test)


def _damp(coords, runs, lo, hi, columns=False):
    """Scale the block ``lo:hi`` of rows of ``coords`` by each alpha run's
    damping; with ``columns``, of its columns (the rows' coordinates as
    columns: :meth:`HeldModel.coordinates`)."""
    for a, b, damping in runs:
        if a < hi and b > lo:
            run = slice(max(a, lo) - lo, min(b, hi) - lo)
            if columns:
                # Row by row, each a contiguous run of columns.
                coords[:, run] *= damping[:, None]
            else:
                coords[run] *= damping


def _kept_rows(A, rows, taken, n_features):
    """``A``'s ``rows`` (a slice or int positions) at the columns ``taken``
    and the last one (the weighted sums), a copy."""
    if isinstance(rows, slice):
        A, rows = A[rows], slice(None)
    if isinstance(taken, slice) and taken.stop == n_features:
        return np.array(A[rows, taken.start :])
    width = taken.stop - taken.start if isinstance(taken, slice) else len(taken)
    out = np.empty((A[rows, :1].shape[0], width + 1))
    if isinstance(taken, slice) or isinstance(rows, slice):
        out[:, :-1] = A[rows, taken]
    else:
        out[:, :-1] = A[np.ix_(rows, taken)]
    out[:, -1] = A[rows, n_features]
    return out


def _block_moments(rows, index, root_weight, mean, total, shift, squares, own=None):
    """``shift[index]``: the weighted mean of ``rows`` less ``mean[index]``;
    ``squares[index]``: the sum of squares of ``rows`` less their mean.

    With their means ``own[index]`` known, ``rows`` are centred in place (no
    pass to take the means, no copy to centre): returns True then."""
    if own is None:
        own = _weighted_mean(rows, root_weight, total)
        shift[index] = own - mean[index]
        squares[index] = _sum_of_squares(rows - own[:, None], root_weight)
        return False
    own = own[index]
    shift[index] = own - mean[index]
    rows -= own[:, None]
    if root_weight is None:
        squares[index] = np.einsum("ij,ij->i", rows, rows)
    else:
        squares[index] = np.einsum("ij,ij,j->i", rows, rows, root_weight**2)
    return True


def _weighted_mean(A, root_weight, total):
    """Each row's mean over its columns, weighted by ``root_weight**2``."""
    if root_weight is None:
        return A.mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (A @ root_weight**2) / total


def _block_rows(width):
    """Rows of a block of :data:`BLOCK_BYTES` whose rows hold ``width``
    doubles (at least one)."""
    return max(1, int(BLOCK_BYTES // (8 * max(width, 1))))


def _scratch(buffers, name, shape):
    """A buffer of ``shape`` kept in ``buffers`` under ``name`` (grown when
    too small): each call reuses its fold's arrays instead of mapping new
    megabytes for every fold and model."""
    size = math.prod(shape)
    held = buffers.get(name)
    if held is None or held.size < size:
        held = buffers[name] = np.empty(size)
    return held[:size].reshape(shape)


def _as_slice(index):
    """``index`` (sorted int) as a slice when it is a range, else itself."""
    index = np.asarray(index)
    if index.size and np.array_equal(index, np.arange(index[0], index[0] + index.size)):
        return slice(int(index[0]), int(index[0]) + index.size)
    return index


def _sum_of_squares(A, root_weight):
    """Each row's sum of squares, its columns weighted; scales ``A``."""
    if root_weight is not None:
        A *= root_weight
    return np.einsum("ij,ij->i", A, A)


def held_fold(
    X, train, test, sample_weight, model_columns, bands, choice, *, fit_intercept
):
    """The :class:`HeldModel` of a model on one outer fold.

    The training rows' centred, weighted design is factored once, ``QR``;
    candidate c's SVD is that of ``R``'s kept columns times their scales
    (the same singular values and right vectors as the design's own, from
    a p x p matrix).

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    train, test : ndarray of int
    sample_weight : ndarray of shape (n_samples,) or None
    model_columns : ndarray of int
        The model's columns of X.
    bands : list of ndarray
        The model's bands, as positions in ``model_columns``.
    choice : (ndarray, ndarray)
        Each target's band weights (n_targets, n_bands) and alpha, as the
        model fit on ``train`` chose them (``band_weights_``, ``alpha_``).
    fit_intercept : bool
    """
    weights, alpha = choice
    candidates, chosen = np.unique(np.atleast_2d(weights), axis=0, return_inverse=True)
    design = BandedDesign(X[:1, model_columns], bands, candidates)
    X_train = X[np.ix_(train, model_columns)]
    X_test = X[np.ix_(test, model_columns)]
    w = _train_weights(sample_weight, train)
    offset = _offset(X_train, w, fit_intercept)
    # The training means of X less its overall mean (HeldNullProblem's
    # products are of X so centred).
    overall = _offset(
        X[:, model_columns],
        _train_weights(sample_weight, np.arange(X.shape[0])),
        fit_intercept,
    )
    columns, s_all, Vt_all, bases, shift = [], [], [], [], []
    with _linalg.one_thread(X_train):
        R = np.linalg.qr(np.sqrt(w)[:, None] * (X_train - offset), mode="r")
        for c in range(len(candidates)):
            kept, scale = design.kept[c], design.scales[c]
            _, s, Vt = np.linalg.svd(R[:, kept] * scale, full_matrices=False)
            columns.append(model_columns[kept])
            s_all.append(s)
            Vt_all.append(Vt * scale)
            bases.append(((X_test[:, kept] - offset[kept]) * scale) @ Vt.T)
            shift.append((offset - overall)[kept])
    return HeldModel(
        columns,
        s_all,
        Vt_all,
        bases,
        chosen.ravel(),
        np.asarray(alpha, float),
        shift,
        1.0 / w.sum() if fit_intercept else 0.0,
        None if sample_weight is None else _train_weights(sample_weight, test),
    )


def _train_weights(sample_weight, train):
    return (
        np.ones(len(train))
        if sample_weight is None
        else np.asarray(sample_weight, dtype=np.float64)[train]
    )


def _offset(A, w, fit_intercept):
    """Weighted column means of ``A`` (zeros without an intercept)."""
    if not fit_intercept:
        return np.zeros(A.shape[1])
    return (w @ A) / w.sum()


def _columns(A, rows):
    """``A[:, rows]``: a view where ``rows`` is a slice."""
    return A[:, rows] if isinstance(rows, slice) else np.take(A, rows, axis=1)
