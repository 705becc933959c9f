"""The search of a banded ridge: each target keeps its best (candidate,
alpha) pair (:class:`BandedSearchProblem`), then its coefficients at that
choice (:class:`BandedRefitProblem`); :func:`search_bands` runs both."""

from typing import NamedTuple

import numpy as np

from ..._backends.side_by_side import map_threads
from ..._engine import run_problem
from ..._kernels import linalg as _linalg
from ...backend import to_numpy
from ..covariance import covariance_solver
from ..problems import (
    CV_WORKSPACE_OVERHEAD,
    RidgeSolver,
    TargetProblem,
    fit_targets,
    mean_over_scored_targets,
)
from .factors import SharedFactors, _projected, results_bytes


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
    #: The decomposition the search ran on: "svd" or "covariance".
    decomposition: str = "svd"


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
    solver="auto",
):
    """The search of ``BandedRidge.fit`` and its refit, parameters checked.

    The candidates' solvers (on :class:`SharedFactors` where they apply, made
    side by side), the search of every target in batches
    (:class:`BandedSearchProblem`), the pair of all targets for
    ``local_alpha=False`` (:func:`shared_pair`), and the refit of every
    target at its pair (:class:`BandedRefitProblem`), each run by the engine
    with ``run_args``. Called inside the backend's context. ``solver``
    (``BandedRidge``'s) decomposes one band, X itself, as ``BatchedRidge``
    decomposes it; several candidates on the covariance are
    :func:`~skbatch._ridge.banded.covariance_search.search_covariance`'s.

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
            solver=solver,
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
        "covariance",
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


def best_pairs(candidate_scores, m, n_candidates, n_alphas, *, store, xp):
    """Each target's best (candidate, alpha) pair from the scores (n_alphas,
    m) of each candidate in turn, as :class:`BandedSearchProblem` returns it:
    the chosen candidate, its alpha, the pair's score, the scores of every
    alpha at that candidate and, with ``store``, of every pair. Ties go to
    the first candidate, then the first alpha; NaN scores rank last."""
    candidate = np.zeros(m, dtype=np.int64)
    alpha = np.zeros(m, dtype=np.int64)
    running = np.full(m, -np.inf)
    rows = np.full((m, n_alphas), np.nan)
    stored = np.empty((m, n_candidates, n_alphas)) if store else None
    for c, scores in enumerate(candidate_scores):
        best, best_score = _linalg.select_alpha(scores, xp=xp)
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
        first = self.solvers[0]
        return best_pairs(
            self._scores(Y),
            Y.shape[1],
            len(self.solvers),
            first.alphas.size,
            store=self.store,
            xp=first.xp,
        )

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
