"""The search of a banded ridge on X's covariance: the problems that run a
:class:`~skbatch._ridge.banded.covariance.BandedCovariance` over the
targets in batches.

- :class:`BandedCovarianceSearch` and :class:`BandedCovarianceRefit`: the
  search of each batch of targets (the cross-moments of the batch formed
  once for every candidate) and the refit at each target's pair;
- :func:`check_covariance_search_memory`, the preflight, and
  :func:`search_covariance`, the search and refit of a fit.
"""

import numpy as np

from ..._backends.side_by_side import map_threads
from ..._engine import run_problem
from ...backend import to_numpy
from ..problems import TargetProblem, check_held_memory
from .covariance import BandedCovariance
from .factors import results_bytes
from .search import BandSearch, best_pairs, shared_pair

__all__ = [
    "BandedCovarianceRefit",
    "BandedCovarianceSearch",
    "check_covariance_search_memory",
    "search_covariance",
]


class BandedCovarianceSearch(TargetProblem):
    """The search of each batch of targets on a :class:`BandedCovariance`:
    the batch's cross-moments once, then every candidate (side by side on
    the CPU's threads, each decomposing its folds), each target keeping its
    best pair as :func:`~skbatch._ridge.banded.search.best_pairs` keeps it.
    ``problem(ids)`` returns what :class:`BandedSearchProblem` returns."""

    desc = "searched targets"
    # One batch at a time, its candidates side by side (map_threads): batches
    # side by side would each decompose every candidate's folds.
    threads = False

    def __init__(self, decomposed, Y, *, store):
        super().__init__(decomposed, Y)
        self.store = store
        n_alphas = decomposed.alphas.size
        n_stored = decomposed.n_candidates if store else 0
        p = decomposed.n_features
        self.fixed_bytes = decomposed.fixed_bytes
        if not self.backend.is_gpu:
            self.fixed_bytes += results_bytes(self.n_items, p, n_alphas, n_stored)
        self.host_bytes_per_item = (
            8 * (3 + 2 * n_alphas + n_stored * n_alphas) + self.Y.host_bytes_per_column
        )

    def __call__(self, ids):
        Y = self._to_device(ids)
        decomposed = self.solver
        prepared = decomposed.prepare(Y)
        scores = map_threads(
            lambda c: decomposed.candidate_scores(c, Y, prepared),
            range(decomposed.n_candidates),
            decomposed.backend,
        )
        return best_pairs(
            scores,
            Y.shape[1],
            decomposed.n_candidates,
            decomposed.alphas.size,
            store=self.store,
            xp=decomposed.xp,
        )


class BandedCovarianceRefit(TargetProblem):
    """Coefficients and intercepts of targets at their chosen pair, on a
    :class:`BandedCovariance`: each candidate chosen in a batch decomposes
    the covariance of all rows once and refits the targets that chose it.
    ``problem(ids)`` returns what :class:`BandedRefitProblem` returns."""

    desc = "refit targets"
    # As the search: the chosen candidates side by side, not the batches.
    threads = False

    def __init__(self, decomposed, Y, candidate, alpha):
        super().__init__(decomposed, Y)
        self.candidate, self.alpha = candidate, alpha
        p = decomposed.n_features
        self.fixed_bytes = decomposed.fixed_bytes
        self.host_bytes_per_item = 8 * (p + 1) + self.Y.host_bytes_per_column

    def __call__(self, ids):
        Y = self._to_device(ids)
        decomposed = self.solver
        dtype, backend = decomposed.dtype, decomposed.backend
        prepared = decomposed.prepare(Y)
        candidate = self.candidate[ids]
        coef = np.zeros((len(ids), decomposed.n_features), dtype=dtype)
        intercept = np.empty(len(ids), dtype=dtype)

        def refit(c):
            (rows,) = np.nonzero(candidate == c)
            alpha = backend.asarray(self.alpha[ids][rows], dtype)
            picked = backend.asarray(rows) if rows.size != len(ids) else None
            return rows, decomposed.refit(c, prepared, alpha, picked)

        chosen = np.unique(candidate).tolist()
        for c, (rows, (coef_c, intercept_c)) in zip(
            chosen, map_threads(refit, chosen, backend)
        ):
            coef[np.ix_(rows, decomposed.host_kept[c])] = to_numpy(coef_c)
            intercept[rows] = to_numpy(intercept_c)
        return coef, intercept


def check_covariance_search_memory(
    n_samples,
    n_features,
    scheme,
    dtype,
    backend,
    max_memory_gb,
    *,
    n_candidates,
    n_targets,
    n_alphas,
    store_cv_results,
):
    """Refuse, before any moment is formed, a covariance search whose held
    memory exceeds the budget: :meth:`BandedCovariance.nbytes` on the
    device (X, the p x p moments of every fold, a p x p eigenbasis per
    candidate in flight), the results of every target on the host."""
    device = BandedCovariance.nbytes(
        n_samples, n_features, scheme, np.dtype(dtype).itemsize, backend=backend
    )
    host = results_bytes(
        n_targets, n_features, n_alphas, n_candidates if store_cv_results else 0
    )
    check_held_memory(
        "BandedRidge",
        device,
        host,
        backend,
        max_memory_gb,
        held=(
            f"X ({n_samples} x {n_features}), the covariances of its "
            f"{len(scheme.splits)} folds and all rows and the eigenbases of the "
            f"candidates in flight, and the results of {n_targets:,} targets"
        ),
        results=f"the results of {n_targets:,} targets",
        fix=(
            "raise max_memory_gb (or free memory), fit the targets in parts, or "
            "use fewer folds"
        ),
    )


def search_covariance(decomposed, targets, *, store, local_alpha, run_args):
    """:func:`~skbatch._ridge.banded.search_bands` on a
    :class:`BandedCovariance`: the search of every target in batches, the
    pair of all targets for ``local_alpha=False``, and the refit of every
    target at its pair, each run by the engine with ``run_args``. Called
    inside the backend's context.

    Returns
    -------
    BandSearch
    """
    n_targets = targets.shape[1]
    n_alphas = decomposed.alphas.size
    chosen = np.empty(n_targets, dtype=np.int64)
    best = np.empty(n_targets, dtype=np.int64)
    best_score = np.empty(n_targets)
    scores = np.empty((n_targets, n_alphas))
    stored = np.empty((n_targets, decomposed.n_candidates, n_alphas)) if store else None

    def reduce_search(ids, result):
        chosen[ids], best[ids], best_score[ids], scores[ids] = result[:4]
        if stored is not None:
            stored[ids] = result[4]

    coef = np.empty((n_targets, decomposed.n_features), dtype=decomposed.dtype)
    intercept = np.empty(n_targets, dtype=decomposed.dtype)

    def reduce_refit(ids, result):
        coef[ids], intercept[ids] = result

    search = BandedCovarianceSearch(decomposed, targets, store=store)
    plan = run_problem(search, reduce_search, **run_args)
    shared = None
    if not local_alpha:
        shared = shared_pair(stored)
        chosen[:], best[:] = shared.candidate, shared.alpha
        best_score[:] = stored[:, shared.candidate, shared.alpha]
        scores[:] = stored[:, shared.candidate]
    refit = BandedCovarianceRefit(decomposed, targets, chosen, decomposed.alphas[best])
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
        "covariance",
    )
