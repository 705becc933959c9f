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

One module per concern: ``bands.py`` (the bands, band weights and
candidates, checked), ``factors.py`` (the rescaled designs, the shared QR
factors and the memory checks of a search), ``search.py`` (the search and
refit problems), ``permuted.py`` (the permutation fast path's problem);
``covariance.py`` and ``covariance_search.py`` (the search on X's
covariance, for many more rows than columns); ``fit.py`` (``BandedRidge``'s
fit) and ``bootstrap.py`` (replicates at held choices) build on them.
"""

from .bands import (
    WEIGHT_FLOOR,
    _floored,
    band_candidates,
    check_band_weights,
    check_bands,
    check_candidate_scales,
    check_concentration,
    n_candidates,
)
from .factors import (
    BandedDesign,
    CandidateBasis,
    SharedFactors,
    check_candidate_count,
    check_search_memory,
    results_bytes,
)
from .permuted import (
    BandedPermutedProblem,
    BandedSpec,
    banded_spec,
    permuted_problem,
)
from .search import (
    BandedRefitProblem,
    BandedSearchProblem,
    search_bands,
)

__all__ = [
    "BandedDesign",
    "BandedPermutedProblem",
    "BandedRefitProblem",
    "BandedSearchProblem",
    "BandedSpec",
    "CandidateBasis",
    "SharedFactors",
    "WEIGHT_FLOOR",
    "_floored",
    "band_candidates",
    "banded_spec",
    "check_band_weights",
    "check_bands",
    "check_candidate_count",
    "check_candidate_scales",
    "check_concentration",
    "check_search_memory",
    "n_candidates",
    "permuted_problem",
    "results_bytes",
    "search_bands",
]
