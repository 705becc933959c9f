"""The rescaled design of each candidate (:class:`BandedDesign`), the QR
factors candidates share (:class:`SharedFactors`, :class:`CandidateBasis`)
and the memory checks of a search."""

import numpy as np

from ..._backends.side_by_side import cpu_workers, map_threads
from ..._engine import Portable
from ..._kernels import linalg as _linalg
from ..cv import _Fold
from ..problems import (
    RidgeSolver,
    check_held_memory,
)
from .bands import n_candidates

# Copies of the candidates' table (n_candidates x n_bands, float64) at the
# peak of band_candidates: the Dirichlet blocks, their interleaved copy and
# the two of the floor's normalisation.
CANDIDATE_TABLE_COPIES = 4


class BandedDesign:
    """The rescaled design of every candidate, built one at a time.

    Candidate c keeps the bands of positive weight; its design is those
    columns of X times ``sqrt(gamma_b)``, band by band.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    columns : list of ndarray
        The columns of each band (:func:`check_bands`).
    candidates : ndarray of shape (n_candidates, n_bands)
    """

    def __init__(self, X, columns, candidates):
        self.X, self.columns, self.candidates = X, columns, candidates
        n_features = X.shape[1]
        self.kept, self.scales = [], []
        for c, gamma in enumerate(candidates):
            bands = np.flatnonzero(gamma > 0)
            if bands.size == 0 or not np.all(np.isfinite(gamma)):
                # check_band_weights and band_candidates give none such.
                raise ValueError(
                    f"band_weights: candidate {c} ({gamma!r}) has no band of "
                    f"positive weight or a weight that is not finite; every "
                    f"candidate needs finite non-negative weights, one positive"
                )
            kept = np.concatenate([columns[b] for b in bands])
            order = np.argsort(kept)
            scale = np.concatenate(
                [np.full(columns[b].size, np.sqrt(gamma[b])) for b in bands]
            )
            self.kept.append(kept[order])
            self.scales.append(scale[order])
        self.n_features = n_features

    def n_columns(self, c):
        return self.kept[c].size

    def design(self, c, *, shape_only=False):
        """Candidate ``c``'s design matrix; X itself when nothing changes.

        ``shape_only``: a read-only view of its shape, for a solver given the
        candidate's decompositions (``RidgeSolver(basis=...)`` reads its
        design for the shape alone), not a copy of X's columns.
        """
        kept, scale = self.kept[c], self.scales[c]
        if shape_only:
            return np.broadcast_to(self.X[:1, :1], (self.X.shape[0], kept.size))
        if kept.size == self.n_features and np.all(scale == 1.0):
            return self.X
        return self.X[:, kept] * scale.astype(self.X.dtype)


class SharedFactors(Portable):
    """The QR of X's centred rows, once, for the SVDs of every candidate.

    A candidate's design is X's kept columns times their scales: its SVD is
    that of the small ``R[:, kept] * scale`` (:func:`_linalg.qr_factor`),
    and its targets' coordinates ``U'Y`` are ``coords' (Q'Y)``, one product
    of the shared ``Q'Y`` by a small matrix. So a batch of targets is
    centred and projected on Q once for all candidates (:meth:`project`),
    and each candidate costs a p x p SVD, not an n x p one. The same for
    each fold's training rows with a K-fold scheme.

    Used when it saves work (:meth:`applies`): several candidates and fewer
    columns than rows in every factorised set of rows.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Host design matrix.
    sample_weight : ndarray or None
    scheme : skbatch._ridge.cv.CVScheme
        Split already.
    backend : Backend
    dtype : numpy dtype
    fit_intercept : bool
    """

    def __init__(self, X, sample_weight, scheme, backend, dtype, *, fit_intercept):
        xp = backend.xp
        self.xp, self.backend, self.dtype = xp, backend, dtype
        self.n_samples = X.shape[0]
        sample_weight, _ = scheme.weights(sample_weight)
        X = backend.asarray(X, dtype)
        weight = (
            None if sample_weight is None else backend.asarray(sample_weight, dtype)
        )

        def full():
            X_centered, X_offset = _linalg.center(
                X, weight, fit_intercept=fit_intercept, xp=xp
            )
            return X_offset, *_linalg.qr_factor(X_centered, xp=xp)

        def fold(train, test):
            rows = backend.asarray(train)
            X_centered, X_offset = _linalg.center(
                xp.take(X, rows, axis=0),
                None if weight is None else xp.take(weight, rows, axis=0),
                fit_intercept=fit_intercept,
                xp=xp,
            )
            Q, R = _linalg.qr_factor(X_centered, xp=xp)
            X_test = xp.take(X, backend.asarray(test), axis=0) - X_offset
            # Q'Y over the fold's training rows as the fold's own basis
            # projects them (by runs of rows, with the training mean).
            projector = _Fold(
                X,
                weight,
                train,
                test,
                backend,
                fit_intercept=fit_intercept,
                basis=lambda: (Q, None, None, None),
            )
            return projector, R, X_test, len(train)

        parts = [full, *(lambda split=split: fold(*split) for split in _splits(scheme))]
        (self.X_offset, self.Q, self.R), *self.folds = map_threads(
            lambda part: part(), parts, backend
        )
        self.fit_intercept = fit_intercept
        self.reads_norms = scheme.reads_norms
        self.forms_basis = self.holds_basis(scheme, np.dtype(dtype).itemsize)

    @staticmethod
    def applies(n_candidates, n_samples, n_features, scheme):
        """Whether sharing saves work: more than one candidate, and fewer
        columns than rows in all rows and in every fold's training rows."""
        rows = [n_samples, *(len(train) for train, _ in _splits(scheme))]
        return n_candidates > 1 and n_features < min(rows)

    @staticmethod
    def nbytes(n_samples, n_features, scheme, itemsize):
        """Device bytes held, from the shapes: Q and R of all rows and of each
        fold's training rows (R in float64), each fold's centred test rows."""
        p = n_features
        count = n_samples * p
        for train, test in _splits(scheme):
            count += (len(train) + len(test)) * p
        n_factors = 1 + len(_splits(scheme))
        return itemsize * (count + p) + 8 * n_factors * p * p

    @staticmethod
    def workspace(n_samples, n_features, scheme, itemsize, backend=None):
        """Transient device bytes of the QRs running at once (all rows and
        each fold's training rows, as many as the backend runs side by side;
        ``backend`` None: all at once): each a centred copy of the rows,
        their float64 copy for float32 on the CPU, and LAPACK's copy and Q
        in float64, at most n x p each."""
        n_factors = 1 + len(_splits(scheme))
        if backend is not None:
            n_factors = min(n_factors, cpu_workers(backend))
        on_gpu = backend is not None and backend.is_gpu
        widened = 8 if itemsize != 8 and not on_gpu else 0
        per_factor = (itemsize + widened + 2 * 8) * n_samples * n_features
        return n_factors * per_factor

    @staticmethod
    def holds_basis(scheme, itemsize):
        """Whether each candidate forms its U on all rows (``Q @ coords``),
        for a scheme that reads it on every batch (LOO), or that forms every
        float32 batch's residual with it (GCV: once, not per batch). K-fold
        scores from the folds alone, and the refit maps Q'Y: no U."""
        return scheme.reads_basis or (scheme.reads_projection and itemsize != 8)

    @staticmethod
    def bytes_per_target(n_features, scheme):
        """Device values per target of :meth:`project`'s results."""
        n_folds = len(_splits(scheme))
        return (1 + n_folds) * (n_features + 1)

    def project(self, Y_centered, *, full):
        """A batch's shared projections: ``Q'Y`` on all rows when ``full``
        (else None), and what the scheme's scores read of the batch alike
        for every candidate: each fold's ``(Q_k'Y[train], training mean)``,
        the targets' squared norms in float64 for a scheme that reads them
        (GCV), or None."""
        xp = self.xp
        QtY = _linalg.project(self.Q, Y_centered, xp=xp) if full else None
        if not self.folds:
            norms = None
            if self.reads_norms and Y_centered.dtype == xp.float64:
                norms = _linalg.column_sq_norms(Y_centered, xp)
            return QtY, norms
        return QtY, [
            projector.project(Y_centered, with_mean=self.fit_intercept)
            for projector, *_ in self.folds
        ]

    def basis(self, kept, scale):
        """The :class:`CandidateBasis` of the design ``X[:, kept] * scale``."""
        return CandidateBasis(self, kept, scale)


def _projected(solvers, factors, Y, *, full):
    """``(solver, Y_centered, Y_offset, UtY, shared)`` of each candidate for
    a batch ``Y``, one candidate at a time.

    Every candidate centres the targets alike (the same weights and
    intercept): once for the batch, and projected once on the shared
    ``factors`` (if any), each candidate's ``U'Y`` then mapped from
    ``Q'Y``. ``UtY`` is None when the scheme does not read it (not
    ``full``); ``shared`` the folds' projections for its scores.
    """
    Y_centered, Y_offset = solvers[0].center(Y)
    QtY = shared = None
    if factors is not None:
        QtY, shared = factors.project(Y_centered, full=full)
    for solver in solvers:
        UtY = None
        if full:
            UtY = (
                _linalg.project(solver.U, Y_centered, xp=solver.xp)
                if QtY is None
                else solver.coords.T @ QtY
            )
        yield solver, Y_centered, Y_offset, UtY, shared


def _splits(scheme):
    """The ``(train, test)`` splits of a K-fold scheme, none for LOO and GCV."""
    return getattr(scheme, "splits", None) or ()


class CandidateBasis:
    """One candidate's decompositions from :class:`SharedFactors`.

    Given as ``basis`` to :class:`~skbatch._ridge.problems.RidgeSolver`:
    ``full()`` gives ``(X_offset, U, s, Vt)`` of the candidate's design (U
    None where :meth:`SharedFactors.holds_basis` says so: n x rank values
    per candidate not held),
    ``folds`` a callable per fold giving ``(None, s, X_test_V, coords)``
    (the fold's U is ``Q_k coords``, never formed: it is scored from the
    projections of :meth:`SharedFactors.project` only), and
    ``coords`` (set by ``full()``) maps the shared ``Q'Y`` to ``U'Y``.
    """

    @staticmethod
    def nbytes(n_samples, n_features, n_columns, scheme, itemsize):
        """Device bytes a candidate of ``n_columns`` holds on shared factors
        of X's ``n_features`` columns, from the shapes, its rank at its bound:
        Vt, s and ``coords`` (Q's coordinates of U), U itself where it is
        formed (:meth:`SharedFactors.holds_basis`), and per fold its
        coordinates and test rows in its basis. No copy of X: its SVDs are of
        the small R."""
        rank = min(n_features, n_columns)
        count = rank * (n_columns + n_features + 1)
        if SharedFactors.holds_basis(scheme, itemsize):
            count += n_samples * rank
        for _, test in _splits(scheme):
            count += rank * (n_features + len(test) + 1)
        return itemsize * count

    @staticmethod
    def workspace(n_features, n_columns, itemsize, backend=None):
        """Transient bytes of one candidate's SVD of its p x k rescaled R:
        the rescaled copy (in float64, R's dtype) and the SVD's own
        (:meth:`RidgeSolver.svd_workspace` of a float64 p x k matrix), and
        its factors in float64 before they are cast to ``itemsize``."""
        rank = min(n_features, n_columns)
        factors = 8 * rank * (n_features + n_columns) if itemsize != 8 else 0
        return (
            8 * n_features * n_columns
            + RidgeSolver.svd_workspace(n_features, n_columns, 8, backend=backend)
            + factors
        )

    def __init__(self, factors, kept, scale):
        self.factors = factors
        backend, xp = factors.backend, factors.xp
        self.kept = backend.asarray(kept)
        # In the working dtype, as the candidate's design would be rounded.
        self.scale = backend.asarray(scale, factors.dtype)
        self.coords = None
        self.folds = [
            lambda fold=fold, alpha=0.0: self._fold(*fold, alpha=alpha)
            for fold in factors.folds
        ] or None
        self._xp = xp

    def _svd(self, R, n_rows, alpha):
        xp, dtype = self._xp, self.scale.dtype
        scale = xp.astype(self.scale, R.dtype, copy=False)
        columns = xp.take(R, self.kept, axis=1) * scale
        coords, s, Vt = _linalg.svd_decompose(
            columns, n_rows=n_rows, alpha=alpha, xp=xp
        )
        return (xp.astype(a, dtype, copy=False) for a in (coords, s, Vt))

    def full(self, alpha=0.0):
        """The SVD of the candidate's design, for alphas from ``alpha`` on."""
        factors, xp = self.factors, self._xp
        coords, s, Vt = self._svd(factors.R, factors.n_samples, alpha)
        self.coords = coords
        X_offset = xp.take(factors.X_offset, self.kept, axis=0) * self.scale
        U = factors.Q @ coords if factors.forms_basis else None
        return X_offset, U, s, Vt

    def _fold(self, projector, R, X_test, n_train, alpha):
        xp = self._xp
        coords, s, Vt = self._svd(R, n_train, alpha)
        X_test_V = (xp.take(X_test, self.kept, axis=1) * self.scale) @ Vt.T
        # No U of its own: the search scores the fold from the shared Q'Y.
        return None, s, X_test_V, coords


def check_candidate_count(
    band_weights,
    columns,
    n_samples,
    scheme,
    dtype,
    backend,
    max_memory_gb,
    *,
    n_targets,
    n_alphas,
    store_cv_results,
):
    """Refuse, from the count of candidates alone, before any is drawn, a
    ``band_weights`` whose search cannot fit the budget.

    What any candidates of that count hold at the least, each keeping only
    the narrowest band (a drawn candidate's bands are known once drawn: the
    exact figure is :func:`check_search_memory`'s, after the draw): on the
    host, the candidates' table (:data:`CANDIDATE_TABLE_COPIES` copies at
    the draw), each design's kept columns and scales, and the results of
    every target; on the device, each candidate's decompositions
    (:meth:`CandidateBasis.nbytes` on shared factors, with the factors; else
    :meth:`RidgeSolver.held_nbytes`). The arithmetic is on Python ints: any
    count is refused in microseconds.

    Parameters
    ----------
    band_weights : int or ndarray
        As :func:`check_band_weights` returns it.
    columns : list of ndarray
        The columns of each band (:func:`check_bands`).

    Raises
    ------
    ValueError
        Naming ``band_weights``, the bytes needed, the budget and the fix.
    """
    count = n_candidates(band_weights, len(columns))
    itemsize = np.dtype(dtype).itemsize
    n_features = sum(cols.size for cols in columns)
    narrowest = min(cols.size for cols in columns)
    if SharedFactors.applies(count, n_samples, n_features, scheme):
        device = SharedFactors.nbytes(
            n_samples, n_features, scheme, itemsize
        ) + count * CandidateBasis.nbytes(
            n_samples, n_features, narrowest, scheme, itemsize
        )
    else:
        device = count * RidgeSolver.held_nbytes(n_samples, narrowest, scheme, itemsize)
    table = 8 * count * len(columns) * CANDIDATE_TABLE_COPIES
    designs = count * (np.dtype(np.intp).itemsize + 8) * narrowest
    stored = count if store_cv_results else 0
    host = table + designs + results_bytes(n_targets, n_features, n_alphas, stored)
    given = (
        f"band_weights={band_weights}"
        if isinstance(band_weights, int)
        else f"band_weights of {count:,} rows"
    )
    check_held_memory(
        "BandedRidge",
        device,
        host,
        backend,
        max_memory_gb,
        held=(
            f"{given}: at least the table of {count:,} candidates and their "
            f"decompositions of X ({n_samples} x {n_features})"
        ),
        results=f"{given}: at least the table of {count:,} candidates",
        fix=(
            "use fewer candidates (band_weights; the default draws 100), or "
            "raise max_memory_gb (or free memory)"
        ),
    )


def check_search_memory(
    design,
    n_samples,
    scheme,
    dtype,
    backend,
    max_memory_gb,
    *,
    n_targets,
    n_alphas,
    store_cv_results,
):
    """Refuse, before any SVD, a search whose held memory exceeds the budget.

    Held whatever the target batch (:func:`check_held_memory`): every
    candidate's decompositions, made side by side with the working set of
    the SVDs running at once (:meth:`RidgeSolver.nbytes_side_by_side`), on
    the device, the results of all targets on the host. On shared factors, the factors
    (:meth:`SharedFactors.nbytes`) and the larger of the QRs' transient
    (:meth:`SharedFactors.workspace`) and what the candidates then hold
    (:meth:`CandidateBasis.nbytes`) beside their SVDs' transient
    (:meth:`CandidateBasis.workspace`).
    """
    itemsize = np.dtype(dtype).itemsize
    n_candidates = len(design.candidates)
    widths = [design.n_columns(c) for c in range(n_candidates)]
    p = design.n_features
    if SharedFactors.applies(n_candidates, n_samples, p, scheme):
        # The QRs first, then the candidates' SVDs of the small R side by
        # side, beside the factors held throughout.
        candidates = sum(
            CandidateBasis.nbytes(n_samples, p, k, scheme, itemsize) for k in widths
        )
        n_svds = min(n_candidates, cpu_workers(backend))
        svds = n_svds * max(
            CandidateBasis.workspace(p, k, itemsize, backend) for k in widths
        )
        qr = SharedFactors.workspace(n_samples, p, scheme, itemsize, backend)
        device = SharedFactors.nbytes(n_samples, p, scheme, itemsize) + max(
            qr, candidates + svds
        )
    else:
        device = RidgeSolver.nbytes_side_by_side(
            n_samples, widths, scheme, itemsize, backend=backend
        )
    host = results_bytes(
        n_targets,
        design.n_features,
        n_alphas,
        n_candidates if store_cv_results else 0,
    )
    check_held_memory(
        "BandedRidge",
        device,
        host,
        backend,
        max_memory_gb,
        held=(
            f"the decompositions of {n_candidates} candidates of X ({n_samples} x "
            f"{design.n_features}) and the results of {n_targets:,} targets"
        ),
        results=f"the results of {n_targets:,} targets",
        fix=(
            "raise max_memory_gb (or free memory), fit the targets in parts, or "
            "use fewer candidates (band_weights)"
        ),
    )


def results_bytes(n_targets, n_features, n_alphas, n_stored_candidates=0):
    """Host bytes of the results of every target, held for the whole fit.

    Coefficients, intercept, chosen candidate, alpha and score, the scores of
    every alpha at the chosen candidate (for the edge warning), and with
    stored results the score of every (candidate, alpha) pair, in float64.
    """
    per_target = n_features + 4 + n_alphas + n_stored_candidates * n_alphas
    return 8 * n_targets * per_target
