"""Banded ridge: one regularisation per feature space, found by a search.

The penalty ``sum_b alpha / gamma_b ||w_b||^2`` over bands ``b`` with band
weights ``gamma`` on the simplex is ordinary ridge at ``alpha`` on ``Z``,
whose band-b columns are ``sqrt(gamma_b) X_b`` (``w_b = sqrt(gamma_b) v_b``
for the ridge solution ``v`` on ``Z``). So each candidate ``gamma`` is one
rescaling of X and one :class:`~skbatch._ridge.problems.RidgeSolver` (one
SVD, or one per fold), serving every target and every alpha. A band of
weight 0 is left out of ``Z``: its coefficients are exactly 0.

- :func:`check_bands`, :func:`check_band_weights`, :func:`check_concentration`,
  :func:`check_candidate_count` and :func:`band_candidates`: the parameters,
  checked before any work (the count of candidates before any is drawn), and
  the candidates (the first equal, then Dirichlet draws);
- :class:`BandedDesign`: the rescaled design of each candidate;
- :class:`BandedSearchProblem`: the targets, each keeping its best
  (candidate, alpha) pair while the candidates run over its batch;
- :class:`BandedRefitProblem`: the targets' coefficients at their choice;
- :func:`search_bands`: the solvers, the search and the refit of a fit, and
  :func:`shared_pair`, the one pair of every target (``local_alpha=False``).

Both problems are :class:`~skbatch._ridge.problems.TargetProblem` s: they
read targets the same way (from memory or disk, one batch at a time, on a
dask cluster as its tasks) and state their memory to the engine.
"""

import numbers
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from array_api_compat import array_namespace

from .._backends.side_by_side import cpu_workers, map_threads
from .._engine import Portable, run_problem
from .._kernels import linalg as _linalg
from ..backend import to_numpy
from ..random import resolve_entropy
from .covariance import covariance_solver
from .cv import _Fold
from .problems import (
    CV_WORKSPACE_OVERHEAD,
    PermutedRidgeProblem,
    RidgeSolver,
    TargetProblem,
    check_held_memory,
    device_scores,
    fit_targets,
    mean_over_scored_targets,
)
from .spec import RidgeSpec, centred_column_norms, decomposed_dtype, smallest_alpha

# Band weights below this share of their candidate's largest are 0 (drawn or
# given: himalaya's draws hold weights of 1e-15): such a band's alpha is
# 1e12 times the others', which leaves its coefficients at 0 to within
# rounding, while its columns, rescaled by the square root of the weight,
# would be beyond what the SVD resolves beside the others
# (skbatch._kernels.linalg.svd_decompose refuses such a spread of column norms).
WEIGHT_FLOOR = 1e-12

__all__ = [
    "BandedDesign",
    "CandidateBasis",
    "SharedFactors",
    "BandedPermutedProblem",
    "BandedSpec",
    "BandedRefitProblem",
    "BandedSearchProblem",
    "band_candidates",
    "banded_spec",
    "n_candidates",
    "check_band_weights",
    "check_bands",
    "check_candidate_count",
    "check_candidate_scales",
    "check_concentration",
    "check_search_memory",
    "permuted_problem",
    "search_bands",
    "shared_pair",
]


def check_bands(bands, n_features):
    """Column indices of each band and the bands' names.

    Parameters
    ----------
    bands : None, array-like of shape (n_features,) or list of array-like
        A label (int >= 0 or str) per column, in any order (columns of one
        band may be interleaved), or one array of column indices per band.
        None: one band of every column.
    n_features : int

    Returns
    -------
    columns : list of ndarray of int
        The columns of each band, increasing.
    names : ndarray of shape (n_bands,)
        The labels sorted (as ``np.unique`` sorts them, and himalaya orders
        its groups), or 0 .. n_bands - 1 for index arrays and None. Band b
        is column b of ``band_weights``.

    Raises
    ------
    ValueError, TypeError
        Naming ``bands``, for anything that is not a partition of the columns.
    """
    if bands is None:
        return [np.arange(n_features)], np.arange(1)
    if isinstance(bands, str | Mapping | Set) or np.isscalar(bands):
        raise TypeError(
            f"bands must be None, a label per column of X or a list of column "
            f"index arrays, got {type(bands).__name__}: {bands!r}"
        )
    items = list(bands)
    if not items:
        raise ValueError(
            "bands is empty: give a label per column of X or a list of column "
            "index arrays, or None for one band"
        )
    if any(np.ndim(item) != 0 for item in items):
        for b, item in enumerate(items):
            if isinstance(item, str) or np.ndim(item) != 1:
                raise TypeError(
                    f"bands as a list of column index arrays needs a 1-D array "
                    f"per band; bands[{b}] is {item!r} (shape {np.shape(item)}). "
                    f"For a label per column, give scalar labels only."
                )
        return _bands_from_indices(items, n_features), np.arange(len(items))
    strings = [isinstance(item, str) for item in items]
    if any(strings) and not all(strings):
        # numpy would read the numbers as strings too.
        raise TypeError(
            f"bands labels must all be int or all be str, got "
            f"{sorted({type(item).__name__ for item in items})}"
        )
    labels = np.asarray(items)
    if labels.dtype.kind not in "iuUSO":
        raise TypeError(
            f"bands must be int or str labels (one per column of X) or a list "
            f"of 1-D column index arrays, got labels of dtype {labels.dtype}"
        )
    if labels.dtype.kind == "O" and not all(isinstance(v, str) for v in labels):
        raise TypeError(
            f"bands labels must all be int or all be str, got "
            f"{sorted({type(v).__name__ for v in labels})}"
        )
    if labels.size != n_features:
        raise ValueError(
            f"bands must have one label per column of X ({n_features} columns), "
            f"got {labels.size} labels"
        )
    if labels.dtype.kind == "i" and np.any(labels < 0):
        raise ValueError(
            f"bands has negative label {int(labels[labels < 0][0])}: labels are "
            f"ints >= 0 or strings. Every column is in a band (in himalaya a "
            f"negative label leaves a column out: drop those columns from X)"
        )
    names, inverse = np.unique(labels, return_inverse=True)
    inverse = inverse.ravel()
    columns = [np.flatnonzero(inverse == b) for b in range(names.size)]
    return columns, names


def _bands_from_indices(items, n_features):
    owner = np.full(n_features, -1)
    columns = []
    for b, item in enumerate(items):
        indices = np.asarray(item)
        if indices.size == 0:
            raise ValueError(f"bands[{b}] is empty: every band needs a column")
        if indices.dtype.kind not in "iu":
            raise TypeError(
                f"bands[{b}] must hold integer column indices, got dtype "
                f"{indices.dtype}"
            )
        outside = indices[(indices < 0) | (indices >= n_features)]
        if outside.size:
            raise ValueError(
                f"bands[{b}] has column index {int(outside[0])}, out of range "
                f"for X of {n_features} columns (0 to {n_features - 1})"
            )
        values, counts = np.unique(indices, return_counts=True)
        if np.any(counts > 1):
            raise ValueError(
                f"bands[{b}] lists column {int(values[counts > 1][0])} more than "
                f"once; each column is in one band, once"
            )
        taken = owner[indices] >= 0
        if taken.any():
            column = int(indices[taken][0])
            raise ValueError(
                f"bands: column {column} is in bands[{int(owner[column])}] and "
                f"bands[{b}]; bands must be disjoint"
            )
        owner[indices] = b
        columns.append(np.sort(indices).astype(np.intp))
    missing = np.flatnonzero(owner < 0)
    if missing.size:
        raise ValueError(
            f"bands must cover every column of X: {missing.size} column(s) are "
            f"in no band, the first {int(missing[0])}"
        )
    return columns


def _numbers(value):
    """``value`` as an ndarray of ints or floats, or None for what numpy
    cannot read as numbers (bools included). The caller refuses first what
    numpy would read as numbers by mistake (a string: ``"1"``)."""
    try:
        values = np.asarray(value)
    except (TypeError, ValueError):
        return None
    return values if values.dtype.kind in "iuf" else None


def check_concentration(concentration):
    """``concentration`` as a non-empty 1-D float64 array of positive values."""
    values = None if isinstance(concentration, str) else _numbers(concentration)
    if values is None:
        raise TypeError(
            f"concentration must be a positive float or a 1-D sequence of "
            f"positive floats, got {type(concentration).__name__}: "
            f"{concentration!r}"
        )
    values = np.atleast_1d(values.astype(np.float64))
    if (
        values.ndim != 1
        or values.size == 0
        or not np.all(np.isfinite(values))
        or np.any(values <= 0)
    ):
        raise ValueError(
            f"concentration must be positive and finite, one value or a "
            f"non-empty 1-D sequence of them, got {concentration!r}"
        )
    return values


def check_band_weights(band_weights, n_bands):
    """An int of candidates to draw, or explicit candidates normalised.

    Returns
    -------
    int or ndarray of shape (n_candidates, n_bands)
        Rows of an explicit array divided by their sums.
    """
    if isinstance(band_weights, numbers.Integral) and not isinstance(
        band_weights, bool
    ):
        if band_weights < 1:
            raise ValueError(
                f"band_weights must be an int >= 1 (candidates to draw) or an "
                f"array of candidates, got {band_weights!r}"
            )
        return int(band_weights)
    values = None
    if not isinstance(band_weights, str | bool | numbers.Number):
        values = _numbers(band_weights)
    if values is None:
        raise TypeError(
            f"band_weights must be an int >= 1 (candidates to draw) or an array "
            f"of shape (n_candidates, n_bands) of non-negative weights, got "
            f"{type(band_weights).__name__}: {band_weights!r}"
        )
    values = values.astype(np.float64)
    if values.ndim != 2 or values.shape[0] == 0 or values.shape[1] != n_bands:
        raise ValueError(
            f"band_weights as an array must have shape (n_candidates, {n_bands}), "
            f"one column per band, got shape {values.shape}"
        )
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError(
            "band_weights must be non-negative and finite, got "
            f"{np.count_nonzero(~(values >= 0) | ~np.isfinite(values))} value(s) "
            "that are not"
        )
    zero = np.flatnonzero(values.max(axis=1) == 0)
    if zero.size:
        raise ValueError(
            f"band_weights row {int(zero[0])} is all zero: every candidate needs "
            f"a band of positive weight"
        )
    return _normalised(values)


def _normalised(values):
    """Rows of non-negative finite values, none all zero, divided by their
    sums. Each row is first scaled by the power of two that brings its
    largest value into [0.5, 1), so that its sum is at most n_bands: a row of
    finite values whose sum overflows (``[1e308, 1e308]``) is normalised
    exactly (``[0.5, 0.5]``). A power of two scales without rounding, so
    every other row is divided by its sum to the last bit as before (only
    values below 2**-1000 of their row's largest, far below
    :data:`WEIGHT_FLOOR`, can lose bits as subnormals)."""
    _, exponent = np.frexp(values.max(axis=1, keepdims=True))
    values = np.ldexp(values, -exponent)
    return values / values.sum(axis=1, keepdims=True)


def n_candidates(band_weights, n_bands):
    """The number of candidates of checked ``band_weights``
    (:func:`check_band_weights`), from the count or the array alone,
    nothing drawn: a count draws one with one band (:func:`band_candidates`)."""
    if not isinstance(band_weights, int):
        return len(band_weights)
    return 1 if n_bands == 1 else band_weights


def band_candidates(band_weights, n_bands, concentration, random_state):
    """The candidates (n_candidates, n_bands), rows on the simplex.

    For an int m: m candidates, the first weighting every band equally, the
    others Dirichlet draws whose concentration cycles through
    ``concentration`` (candidate k draws at ``concentration[k % len]``), as
    himalaya's random search (``himalaya.ridge.solve_banded_ridge_random_search``)
    draws them: its ``generate_dirichlet_samples(m, n_bands, concentration,
    random_state)``, every concentration's draws in one block of
    ``ceil(m / len)`` from a legacy ``numpy.random.RandomState``, the rows
    interleaved, the first then replaced by the equal weights. The draws
    equal himalaya's for an int ``random_state`` below 2**32 (a
    ``RandomState(random_state)`` both); another ``random_state`` seeds the
    RandomState with the entropy it gives
    (:func:`skbatch.random.resolve_entropy`), where himalaya would draw from
    a RandomState instance itself. Unlike himalaya, a draw that float64
    cannot hold (a tiny concentration: every weight 0 or NaN) is a vertex
    of the simplex, drawn after all the others, and weights below
    :data:`WEIGHT_FLOOR` of their row's largest are 0. One band has one
    candidate, weight 1.
    """
    if not isinstance(band_weights, int):
        return _floored(band_weights)
    if n_bands == 1:
        return np.ones((1, 1))
    rng = _legacy_rng(resolve_entropy(random_state))
    per_concentration = -(-band_weights // concentration.size)
    blocks = np.stack(
        [
            rng.dirichlet(np.full(n_bands, scale), per_concentration)
            for scale in concentration
        ]
    )
    # (concentration, draw, band) -> draw k at concentration k % len.
    candidates = np.swapaxes(blocks, 0, 1).reshape(-1, n_bands)[:band_weights]
    candidates[0] = 1.0 / n_bands
    # A tiny concentration can draw all weights as 0 or NaN in float64: the
    # limit, a vertex of the simplex.
    lost = np.flatnonzero(
        ~(np.all(np.isfinite(candidates), axis=1) & (candidates.sum(axis=1) > 0))
    )
    candidates[lost] = np.eye(n_bands)[rng.randint(n_bands, size=lost.size)]
    return _floored(candidates)


# Seeds that numpy's legacy RandomState takes as one 32-bit word (MT19937's
# init_genrand, as himalaya's RandomState(int) seeds): below this.
LEGACY_SEED_LIMIT = 2**32


def _legacy_rng(entropy):
    """The RandomState that himalaya's ``check_random_state(entropy)`` gives
    for an entropy below :data:`LEGACY_SEED_LIMIT`; larger entropy seeds
    MT19937 through a SeedSequence."""
    if entropy < LEGACY_SEED_LIMIT:
        return np.random.RandomState(entropy)
    return np.random.RandomState(np.random.MT19937(entropy))


def check_candidate_scales(
    X,
    columns,
    candidates,
    dtype,
    backend,
    *,
    fit_intercept,
    sample_weight=None,
    alphas=None,
):
    """Refuse, before any work, X or a candidate whose rescaled columns are on
    scales too far apart for the SVD (:func:`skbatch._kernels.linalg.
    check_column_spread`, for alphas from the smallest of ``alphas`` on;
    None: least squares): X's own spread first, as every ridge refuses it,
    then each candidate's, its bands' columns times the square roots of
    their weights. The second names ``band_weights``, the candidate and both
    spreads: a weight small beside X's spread makes a design that the weight
    alone does not explain.
    """
    norms = centred_column_norms(X, fit_intercept, sample_weight)
    if norms is None:
        # The estimator's own check of X refuses NaN and inf, naming them.
        return
    decomposed = decomposed_dtype(dtype, backend)
    alpha = smallest_alpha(alphas)
    # array_api_compat's numpy namespace: numpy 1.x has no astype function.
    xp = array_namespace(norms)
    spread = _linalg.column_spread(norms, xp)
    _linalg.check_column_spread(
        *spread, decomposed, alpha=alpha, norm=_linalg.frobenius_norm(norms, xp)
    )
    limit = _linalg.max_column_spread(decomposed)
    for c, gamma in enumerate(candidates):
        scaled = np.concatenate(
            [norms[cols] * np.sqrt(gamma[b]) for b, cols in enumerate(columns)]
        )
        ratio = _linalg.column_spread(scaled, xp)[0]
        norm = _linalg.frobenius_norm(scaled, xp)
        needed = _linalg.shrinking_alpha(norm, decomposed)
        if ratio > limit and alpha < needed:
            raise ValueError(
                f"band_weights: candidate {c} ({np.array2string(gamma, precision=3)}) "
                f"rescales X's columns to norms {ratio:.3g} times apart (X's own: "
                f"{spread[0]:.3g}), beyond the {limit:.2g} a ridge solve in "
                f"{decomposed} resolves for alphas below {needed:.2g} (the "
                f"smallest is {alpha:.3g}). Rescale the bands to similar scales "
                f"(e.g. sklearn.preprocessing.StandardScaler), or give "
                f"band_weights without weights that small (drawn candidates: a "
                f"larger concentration)."
            )


def _floored(candidates):
    """Rows with the weights below :data:`WEIGHT_FLOOR` of their largest at 0,
    normalised again."""
    candidates = np.where(
        candidates < WEIGHT_FLOOR * candidates.max(axis=1, keepdims=True),
        0.0,
        candidates,
    )
    return _normalised(candidates)


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


# Copies of the candidates' table (n_candidates x n_bands, float64) at the
# peak of band_candidates: the Dirichlet blocks, their interleaved copy and
# the two of the floor's normalisation.
CANDIDATE_TABLE_COPIES = 4


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


class BandSearch(NamedTuple):
    """What :func:`search_bands` found, every array over the targets."""

    candidate: np.ndarray
    alpha: np.ndarray
    score: np.ndarray
    #: The scores of every alpha at the chosen candidate, (n_targets, n_alphas).
    scores: np.ndarray
    #: The scores of every pair, (n_targets, n_candidates, n_alphas), or None.
    stored: object
    coef: np.ndarray
    intercept: np.ndarray
    #: The pair of every target (local_alpha=False), else None.
    shared: object
    batch_size: int


def search_bands(
    X,
    targets,
    design,
    sample_weight,
    alphas,
    scheme,
    backend,
    dtype,
    *,
    fit_intercept,
    scoring,
    store,
    local_alpha,
    run_args,
):
    """The search of ``BandedRidge.fit`` and its refit, parameters checked.

    The candidates' solvers (on :class:`SharedFactors` where they apply, made
    side by side), the search of every target in batches
    (:class:`BandedSearchProblem`), the pair of all targets for
    ``local_alpha=False`` (:func:`shared_pair`), and the refit of every
    target at its pair (:class:`BandedRefitProblem`), each run by the engine
    with ``run_args``. Called inside the backend's context.

    Returns
    -------
    BandSearch
    """
    n_samples, n_features = X.shape
    n_targets = targets.shape[1]
    n_candidates = len(design.candidates)
    chosen = np.empty(n_targets, dtype=np.int64)
    best = np.empty(n_targets, dtype=np.int64)
    best_score = np.empty(n_targets)
    scores = np.empty((n_targets, alphas.size))
    stored = np.empty((n_targets, n_candidates, alphas.size)) if store else None

    def reduce_search(ids, result):
        chosen[ids], best[ids], best_score[ids], scores[ids] = result[:4]
        if stored is not None:
            stored[ids] = result[4]

    coef = np.empty((n_targets, n_features), dtype=dtype)
    intercept = np.empty(n_targets, dtype=dtype)

    def reduce_refit(ids, result):
        coef[ids], intercept[ids] = result

    if n_candidates == 1 and design.design(0) is X:
        # One band (bands=None): X itself, decomposed as BatchedRidge
        # decomposes it, by the same rule.
        decomposed = covariance_solver(
            X,
            sample_weight,
            alphas,
            scheme,
            backend,
            dtype,
            fit_intercept=fit_intercept,
            scoring=scoring,
            solver="auto",
        )
        if decomposed is not None:
            return _search_one_design(decomposed, targets, store, local_alpha, run_args)
    factors = None
    if SharedFactors.applies(n_candidates, n_samples, n_features, scheme):
        factors = SharedFactors(
            X, sample_weight, scheme, backend, dtype, fit_intercept=fit_intercept
        )
    # Independent factorisations, side by side.
    solvers = map_threads(
        lambda c: RidgeSolver(
            design.design(c, shape_only=factors is not None),
            sample_weight,
            alphas,
            scheme,
            backend,
            dtype,
            fit_intercept=fit_intercept,
            scoring=scoring,
            basis=None
            if factors is None
            else factors.basis(design.kept[c], design.scales[c]),
        ),
        range(n_candidates),
        backend,
    )
    search = BandedSearchProblem(
        solvers, targets, store=stored is not None, factors=factors
    )
    plan = run_problem(search, reduce_search, **run_args)
    shared = None
    if not local_alpha:
        shared = shared_pair(stored)
        chosen[:], best[:] = shared.candidate, shared.alpha
        best_score[:] = stored[:, shared.candidate, shared.alpha]
        scores[:] = stored[:, shared.candidate]
    refit = BandedRefitProblem(
        solvers, design, targets, chosen, alphas[best], factors=factors
    )
    run_problem(refit, reduce_refit, **run_args)
    return BandSearch(
        chosen,
        best,
        best_score,
        scores,
        stored,
        coef,
        intercept,
        shared,
        plan.batch_size,
    )


def _search_one_design(solver, targets, store, local_alpha, run_args):
    """:func:`search_bands` of one candidate, X itself, through ``solver``:
    the fit of ``BatchedRidge`` (:func:`~skbatch._ridge.problems.fit_targets`)."""
    coef, intercept, best, best_score, scores, batch_size = fit_targets(
        solver, targets, alpha_per_target=local_alpha, **run_args
    )
    shared = None
    if not local_alpha:
        mean, scored = mean_over_scored_targets(scores)
        shared = SharedPair(0, int(best[0]), mean[None], scored)
    return BandSearch(
        np.zeros(targets.shape[1], dtype=np.int64),
        best,
        best_score,
        scores,
        scores[:, None, :] if store else None,
        coef,
        intercept,
        shared,
        batch_size,
    )


class SharedPair(NamedTuple):
    """The (candidate, alpha) pair of every target (:func:`shared_pair`)."""

    candidate: int
    alpha: int
    #: Mean score of every pair, (n_candidates, n_alphas).
    mean: np.ndarray
    #: The targets averaged (scored at some pair), (n_targets,).
    scored: np.ndarray


def shared_pair(scores):
    """The pair of best mean score over the targets, from every target's
    scores (n_targets, n_candidates, n_alphas).

    The mean of :func:`~skbatch._ridge.problems.mean_over_scored_targets`
    over the pairs: a target scored at no pair is left out, a pair NaN for
    some target averaged ranks last. Ties go to the first candidate, then
    the first alpha, as each target's own choice; every pair NaN keeps the
    first.
    """
    n_targets, n_candidates, n_alphas = scores.shape
    mean, scored = mean_over_scored_targets(scores.reshape(n_targets, -1))
    best = int(np.argmax(np.where(np.isnan(mean), -np.inf, mean)))
    return SharedPair(
        best // n_alphas,
        best % n_alphas,
        mean.reshape(n_candidates, n_alphas),
        scored,
    )


class BandedSearchProblem(TargetProblem):
    """Every candidate over each batch of targets, a running best per target.

    ``problem(ids)`` gives, for targets ``ids``: the index of the chosen
    candidate, of its alpha, the score of that pair, the scores of every
    alpha at that candidate (len(ids), n_alphas) and, with ``store``, of
    every pair (len(ids), n_candidates, n_alphas). Ties go to the first
    candidate, then the first alpha; NaN scores rank last.

    Parameters
    ----------
    solvers : list of RidgeSolver
        One per candidate, in order.
    Y : ndarray or TargetColumns
    store : bool
        Return the score of every pair.
    factors : SharedFactors, default=None
        The factorisation the solvers were built from, if any: each batch is
        then projected on it once for all candidates.
    """

    desc = "searched targets"

    def __init__(self, solvers, Y, *, store, factors=None):
        super().__init__(solvers[0], Y)
        self.solvers, self.store, self.factors = solvers, store, factors
        n_candidates = len(solvers)
        n_alphas = solvers[0].alphas.size
        solver = solvers[0]
        n, p = solver.n_samples, max(s.n_features for s in solvers)
        rank = max(s.s.shape[0] for s in solvers)
        itemsize = np.dtype(solver.dtype).itemsize
        self.fixed_bytes = sum(s.fixed_bytes for s in solvers)
        n_stored = n_candidates if store else 0
        if not self.backend.is_gpu:
            self.fixed_bytes += results_bytes(self.n_items, p, n_alphas, n_stored)
        # One candidate at a time: a target's column, centred copy,
        # projection, residuals and scores, as TargetProblem counts them, and
        # the running best.
        shared = 0
        if factors is not None:
            self.fixed_bytes += factors.nbytes(n, p, solver.scheme, itemsize)
            shared = factors.bytes_per_target(p, solver.scheme)
        self.device_bytes_per_item = (
            CV_WORKSPACE_OVERHEAD * itemsize * (4 * n + rank + 2 * n_alphas + shared)
        )
        if factors is not None and factors.folds:
            # K-fold scores every candidate of a batch at once, in float64.
            self.device_bytes_per_item += 8 * n_candidates * n_alphas
        self.host_bytes_per_item = (
            8 * (3 + 2 * n_alphas + n_stored * n_alphas) + self.Y.host_bytes_per_column
        )

    def __call__(self, ids):
        Y = self._to_device(ids)
        m = Y.shape[1]
        first = self.solvers[0]
        n_alphas = first.alphas.size
        candidate = np.zeros(m, dtype=np.int64)
        alpha = np.zeros(m, dtype=np.int64)
        running = np.full(m, -np.inf)
        rows = np.full((m, n_alphas), np.nan)
        stored = np.empty((m, len(self.solvers), n_alphas)) if self.store else None
        for c, scores in enumerate(self._scores(Y)):
            best, best_score = _linalg.select_alpha(scores, xp=first.xp)
            best, scores = to_numpy(best), to_numpy(scores).T
            best_score = to_numpy(best_score).astype(np.float64)
            filled = np.where(np.isnan(best_score), -np.inf, best_score)
            better = filled > running if c else np.ones(m, dtype=bool)
            candidate[better], alpha[better] = c, best[better]
            running[better], rows[better] = filled[better], scores[better]
            if stored is not None:
                stored[:, c] = scores
        score = np.where(np.isneginf(running), np.nan, running)
        if stored is None:
            return candidate, alpha, score, rows
        return candidate, alpha, score, rows, stored

    def _scores(self, Y):
        """Scores (n_alphas, m) of each candidate, in order, for a batch.

        K-fold on shared factors scores every candidate of a fold at once
        (:meth:`skbatch._ridge.cv.KFold.shared_scores`); the other schemes
        one candidate at a time.
        """
        first = self.solvers[0]
        if self.factors is not None and self.factors.folds:
            Y_centered, Y_offset = first.center(Y)
            _, shared = self.factors.project(Y_centered, full=False)
            del Y_centered
            yield from first.scheme.shared_scores(self.solvers, Y, Y_offset, shared)
            return
        projected = _projected(
            self.solvers, self.factors, Y, full=first.scheme.reads_projection
        )
        for solver, Y_centered, Y_offset, UtY, shared in projected:
            yield solver.scores(Y, Y_centered, Y_offset, UtY, shared=shared)


class BandedRefitProblem(TargetProblem):
    """Coefficients and intercepts of targets at their chosen pair.

    ``problem(ids)`` gives coefficients (len(ids), n_features) over X's
    columns (0 in the bands of weight 0) and intercepts (len(ids),): each
    candidate refits the targets that chose it, at their alphas, and maps its
    coefficients back through ``sqrt(gamma_b)``.

    Parameters
    ----------
    solvers : list of RidgeSolver
    design : BandedDesign
    Y : ndarray or TargetColumns
    candidate : ndarray of int of shape (n_targets,)
    alpha : ndarray of shape (n_targets,)
        The chosen alpha of each target.
    factors : SharedFactors, default=None
        The factorisation the solvers were built from, if any: each batch is
        then centred and projected on it once, and each candidate maps the
        ``Q'Y`` of its own targets (a product by a p x p matrix) instead of
        projecting them on its U.
    """

    desc = "refit targets"

    def __init__(self, solvers, design, Y, candidate, alpha, *, factors=None):
        super().__init__(solvers[0], Y)
        self.solvers, self.candidate, self.alpha = solvers, candidate, alpha
        self.factors = factors
        self.kept, self.scales = design.kept, design.scales
        self.n_features = design.n_features
        self.fixed_bytes = sum(s.fixed_bytes for s in solvers)
        solver = solvers[0]
        itemsize = np.dtype(solver.dtype).itemsize
        n, p = solver.n_samples, self.n_features
        rank = max(s.s.shape[0] for s in solvers)
        # A target's column, its gathered copy, centred copy, projection and
        # coefficients, on the device; coefficients and intercept on the host.
        self.device_bytes_per_item = (
            CV_WORKSPACE_OVERHEAD * itemsize * (3 * n + rank + 2 * p)
        )
        self.host_bytes_per_item = 8 * (p + 1) + self.Y.host_bytes_per_column

    def __call__(self, ids):
        Y = self._to_device(ids)
        candidate = self.candidate[ids]
        dtype = self.solver.dtype
        xp = self.solver.xp
        coef = np.zeros((len(ids), self.n_features), dtype=dtype)
        intercept = np.empty(len(ids), dtype=dtype)
        if self.factors is not None:
            Y_centered, Y_offset = self.solver.center(Y)
            QtY = _linalg.project(self.factors.Q, Y_centered, xp=xp)
        for c in np.unique(candidate):
            solver = self.solvers[c]
            (rows,) = np.nonzero(candidate == c)
            alpha = self.backend.asarray(self.alpha[ids][rows], dtype)
            some = rows.size != len(ids)
            picked = self.backend.asarray(rows) if some else None
            if self.factors is None:
                block = xp.take(Y, picked, axis=1) if some else Y
                coef_c, intercept_c = solver.fit_fixed(block, alpha)
            else:
                UtY, offset = QtY, Y_offset
                if some:
                    UtY = xp.take(QtY, picked, axis=1)
                    offset = xp.take(Y_offset, picked, axis=0)
                coef_c, intercept_c = solver.refit(solver.coords.T @ UtY, offset, alpha)
            kept, scale = self.kept[c], self.scales[c].astype(dtype)
            coef[np.ix_(rows, kept)] = to_numpy(coef_c) * scale
            intercept[rows] = to_numpy(intercept_c)
        return coef, intercept


@dataclass(frozen=True)
class BandedSpec(RidgeSpec):
    """The banded ridge problem a ``BandedRidge`` fit solves.

    A :class:`~skbatch._ridge.spec.RidgeSpec` (the search's alphas, cv,
    scoring, intercept and dtype) with the parameters that give the bands
    and the candidates once the number of columns is known
    (:meth:`design`).
    """

    bands: object = None
    band_weights: object = 100
    concentration: object = (0.1, 1.0)
    random_state: object = 0

    def design(self, X):
        """The :class:`BandedDesign` of X's candidates, parameters checked."""
        columns, _ = check_bands(self.bands, X.shape[1])
        weights = check_band_weights(self.band_weights, len(columns))
        concentration = check_concentration(self.concentration)
        candidates = band_candidates(
            weights, len(columns), concentration, self.random_state
        )
        return BandedDesign(X, columns, candidates)


def banded_spec(estimator):
    """The :class:`BandedSpec` of an estimator that states one (a
    ``__skbatch_banded_spec__()`` method: ``BandedRidge``), else None."""
    own = getattr(estimator, "__skbatch_banded_spec__", None)
    return None if own is None else own()


def permuted_problem(spec):
    """The class of the permutation fast path's problem for ``spec``."""
    return (
        BandedPermutedProblem
        if isinstance(spec, BandedSpec)
        else (PermutedRidgeProblem)
    )


class BandedPermutedProblem(PermutedRidgeProblem):
    """The permutation fast path of ``BandedRidge``: the search redone per
    permuted target.

    As :class:`~skbatch._ridge.problems.PermutedRidgeProblem`, with one
    solver per candidate in every outer fold (the candidate's rescaled
    training rows, the fold's inner scheme): each permuted column keeps the
    (candidate, alpha) pair of best inner score, as ``BandedRidge.fit``
    chooses it on that fold's training rows, and that pair predicts the
    fold's test rows. The null is that of refits of the estimator.

    Parameters
    ----------
    As :class:`~skbatch._ridge.problems.PermutedRidgeProblem`; ``spec`` is a
    :class:`BandedSpec`.
    """

    def __init__(
        self,
        X,
        Y,
        splits,
        spec,
        inner_scheme,
        backend,
        dtype,
        scoring,
        *,
        n_permutations,
        permutation,
    ):
        self._hold_targets(X, Y, backend, dtype, scoring, n_permutations, permutation)
        self.alphas = backend.asarray(spec.alphas, dtype)
        design = spec.design(X)
        n_candidates = len(design.candidates)
        schemes = [inner_scheme(X[train], Y[train], train) for train, _ in splits]
        # Each outer fold's training rows factorised once for its candidates,
        # as BandedRidge.fit factorises X.
        factors = [
            SharedFactors(
                X[train],
                None,
                scheme,
                backend,
                dtype,
                fit_intercept=spec.fit_intercept,
            )
            if SharedFactors.applies(n_candidates, len(train), X.shape[1], scheme)
            else None
            for (train, _), scheme in zip(splits, schemes)
        ]
        solvers = [[] for _ in splits]
        tests = [[] for _ in splits]
        for c in range(n_candidates):
            Z = design.design(c)
            for k, ((train, test), scheme) in enumerate(zip(splits, schemes)):
                solver = RidgeSolver(
                    Z[train],
                    None,
                    spec.alphas,
                    scheme,
                    backend,
                    dtype,
                    fit_intercept=spec.fit_intercept,
                    scoring=spec.scoring,
                    basis=None
                    if factors[k] is None
                    else factors[k].basis(design.kept[c], design.scales[c]),
                )
                solvers[k].append(solver)
                tests[k].append(solver.rows_in_basis(backend.asarray(Z[test], dtype)))
        self.folds = [
            (backend.asarray(train), backend.asarray(test), *fold)
            for (train, test), *fold in zip(splits, solvers, tests, factors)
        ]
        rank = max(s.s.shape[0] for fold in solvers for s in fold)
        self._plan_items(rank, spec.alphas.size)
        # The shared factors, held, and their projections of each batch (as
        # check_memory charges them).
        itemsize = np.dtype(dtype).itemsize
        self.fixed_bytes += sum(
            SharedFactors.nbytes(len(train), X.shape[1], scheme, itemsize)
            for (train, _), scheme, fold_factors in zip(splits, schemes, factors)
            if fold_factors is not None
        )
        _, per_target = self.held_bytes(X, splits, spec, schemes, itemsize)
        self.device_bytes_per_item += (
            CV_WORKSPACE_OVERHEAD * itemsize * self.n_targets * per_target
        )

    @classmethod
    def check_memory(
        cls,
        X,
        Y,
        splits,
        spec,
        schemes,
        backend,
        dtype,
        *,
        n_permutations,
        max_memory_gb,
    ):
        """As :meth:`PermutedRidgeProblem.check_memory`, after a check of the
        count of candidates alone on the largest outer fold
        (:func:`check_candidate_count`): :meth:`held_bytes` draws them."""
        columns, _ = check_bands(spec.bands, X.shape[1])
        weights = check_band_weights(spec.band_weights, len(columns))
        largest = max(range(len(splits)), key=lambda k: len(splits[k][0]))
        check_candidate_count(
            weights,
            columns,
            len(splits[largest][0]),
            schemes[largest],
            dtype,
            backend,
            max_memory_gb,
            n_targets=Y.shape[1],
            n_alphas=spec.alphas.size,
            store_cv_results=False,
        )
        super().check_memory(
            X,
            Y,
            splits,
            spec,
            schemes,
            backend,
            dtype,
            n_permutations=n_permutations,
            max_memory_gb=max_memory_gb,
        )

    @classmethod
    def held_bytes(cls, X, splits, spec, schemes, itemsize):
        """Every outer fold's decompositions, once per candidate: on the
        fold's shared factors (as :meth:`__init__` builds them) the factors
        (:meth:`SharedFactors.nbytes`) and each candidate's
        :meth:`CandidateBasis.nbytes`, with the factors' projections of every
        permuted target (:meth:`SharedFactors.bytes_per_target`); else each
        candidate's own SVD of its rescaled training rows. Every candidate
        holds its test rows in its basis. Ranks at their bounds."""
        design = spec.design(X[:1])
        n_candidates = len(design.candidates)
        widths = [design.n_columns(c) for c in range(n_candidates)]
        p = X.shape[1]
        held = per_target = 0
        for (train, test), scheme in zip(splits, schemes):
            n_train, n_test = len(train), len(test)
            if not SharedFactors.applies(n_candidates, n_train, p, scheme):
                held += sum(
                    cls.solver_bytes(n_train, n_test, k, scheme, itemsize)
                    for k in widths
                )
                continue
            held += SharedFactors.nbytes(n_train, p, scheme, itemsize)
            for k in widths:
                held += CandidateBasis.nbytes(n_train, p, k, scheme, itemsize)
                held += itemsize * n_test * min(n_train, k)
            per_target = max(per_target, SharedFactors.bytes_per_target(p, scheme))
        return held, per_target

    def _held_solvers(self):
        """``(solver, test rows in its basis)`` of every candidate of every
        outer fold."""
        for _, _, solvers, tests, _ in self.folds:
            yield from zip(solvers, tests)

    def scores(self, indices):
        xp = self.xp
        permuted = self._permute(indices)
        total = 0.0
        for train, test, solvers, tests, factors in self.folds:
            Y_train = xp.take(permuted, train, axis=0)
            best = predictions = None
            projected = _projected(solvers, factors, Y_train, full=True)
            for (solver, Y_centered, Y_offset, UtY, shared), X_test_V in zip(
                projected, tests
            ):
                scores = solver.scores(
                    Y_train, Y_centered, Y_offset, UtY, shared=shared
                )
                index, score = _linalg.select_alpha(scores, xp=xp)
                score = xp.where(xp.isnan(score), -xp.inf, score)
                alpha = xp.take(self.alphas, index, axis=0)
                candidate = solver.predict(X_test_V, UtY, Y_offset, alpha)
                if best is None:
                    best, predictions = score, candidate
                    continue
                # Ties keep the first candidate, as the fit's search does.
                better = score > best
                best = xp.where(better, score, best)
                predictions = xp.where(better[None, :], candidate, predictions)
            Y_test = xp.take(permuted, test, axis=0)
            total = total + device_scores(Y_test, predictions, self.scoring, xp)
        return xp.reshape(total / len(self.folds), (indices.shape[0], self.n_targets))
