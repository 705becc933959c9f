"""Every target of a ``BandedRidge`` fit: checked, searched, and warned about.

:func:`fit_banded_ridge` runs ``BandedRidge.fit`` past its checks of the
input (the bands and band weights checked, the scheme split, the backend and
the compute dtype resolved): the checks that need the compute dtype and the
memory budget (the count of candidates before any is drawn), the candidates,
the search of every target and its refit (:func:`~skbatch._ridge.banded.search_bands`),
and the warnings about what the fit says of the grid of alphas, of the
candidates and of the rows.
"""

import warnings
from typing import NamedTuple

import numpy as np

from ..._engine.planner import _say
from ..fit_warnings import (
    no_model_scores,
    warn_at_grid_edges,
    warn_if_autocorrelated,
    warn_undefined_best_scores,
)
from ..magnitudes import checked_targets
from .bands import band_candidates, check_candidate_scales
from .covariance import banded_covariance, choose_banded_decomposition
from .covariance_search import check_covariance_search_memory, search_covariance
from .factors import BandedDesign, check_candidate_count, check_search_memory
from .search import search_bands

__all__ = ["BandedFit", "fit_banded_ridge"]

# After fit, warn that the candidates look too coarse when more than this
# share of targets chose the candidate that weighs some band the most (more
# than the equal weight) ...
COARSE_SHARE = 0.5
# ... while that candidate is still this far from the vertex of that band
# (its weight below 1 - COARSE_VERTEX_GAP): the targets point at a corner of
# the simplex that no candidate reaches.
COARSE_VERTEX_GAP = 0.05
# Past the warning's function, _warn_about_fit, fit_banded_ridge, fit and its
# atomic wrapper: the warnings name the caller of BandedRidge.fit.
FIT_STACKLEVEL = 6


def _warn_coarse_candidates(candidates, chosen):
    """Warn when most targets chose the grid's most extreme candidate of a band."""
    n_candidates, n_bands = candidates.shape
    if n_bands < 2 or n_candidates < 2:
        return
    for b in range(n_bands):
        extreme = int(np.argmax(candidates[:, b]))
        weight = candidates[extreme, b]
        share = np.mean(chosen == extreme)
        leans = 1 / n_bands < weight < 1 - COARSE_VERTEX_GAP
        if leans and share > COARSE_SHARE:
            warnings.warn(
                f"{share:.0%} of targets chose candidate {extreme}, the one that "
                f"weighs band {b} the most ({weight:.3g}): the candidates look too "
                f"coarse towards that band alone. Add candidates closer to it "
                f"(e.g. a row of band_weights with band {b} only), or draw more "
                f"(band_weights) with a smaller concentration.",
                UserWarning,
                stacklevel=FIT_STACKLEVEL,
            )
            return


class BandedFit(NamedTuple):
    """What :func:`fit_banded_ridge` found, every array over the targets."""

    #: The candidates searched, (n_candidates, n_bands), rows summing to 1.
    candidates: np.ndarray
    #: Each target's chosen candidate, (n_targets, n_bands).
    band_weights: np.ndarray
    #: Each target's chosen alpha.
    alpha: np.ndarray
    #: ``alpha / band_weights``: inf for a band of weight 0.
    band_alphas: np.ndarray
    best_score: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    #: The scores of every pair, (n_targets, n_candidates, n_alphas), or None.
    stored: object
    #: The decomposition the search ran on: "svd" or "covariance".
    decomposition: str = "svd"


def fit_banded_ridge(
    X,
    Y,
    sample_weight,
    groups,
    alphas,
    scheme,
    columns,
    weights,
    concentration,
    backend,
    dtype,
    *,
    out_of_core,
    cv,
    fit_intercept,
    scoring,
    local_alpha,
    store_cv_results,
    random_state,
    batch_size,
    max_memory_gb,
    verbose,
    solver="auto",
):
    """Choose band weights and alphas and fit all targets ``Y`` on ``X``, as
    ``BandedRidge``.

    ``X``, ``Y`` (a host array, or the array on disk with ``out_of_core``),
    ``sample_weight`` and ``groups`` are those of
    :func:`skbatch._estimators.fit_checks.fit_data`, ``scheme`` is split, ``columns``
    and ``weights`` are :func:`~skbatch._ridge.banded.check_bands`'s and
    :func:`~skbatch._ridge.banded.check_band_weights`'s; the other arguments
    are ``BandedRidge``'s parameters, checked, ``backend`` and ``dtype``
    resolved; ``solver`` chooses the decomposition of several candidates
    (:func:`~skbatch._ridge.banded.covariance.banded_covariance`) and of
    one band, X itself, as ``BatchedRidge``'s. Warnings name the caller of
    ``BandedRidge.fit``.

    Returns
    -------
    BandedFit
    """
    n_samples = X.shape[0]
    n_targets = Y.shape[1]
    # From the count alone: a count too large is refused before its draw.
    check_candidate_count(
        weights,
        columns,
        n_samples,
        scheme,
        dtype,
        backend,
        max_memory_gb,
        n_targets=n_targets,
        n_alphas=alphas.size,
        store_cv_results=store_cv_results or not local_alpha,
    )
    candidates = band_candidates(weights, len(columns), concentration, random_state)
    check_candidate_scales(
        X,
        columns,
        candidates,
        dtype,
        backend,
        fit_intercept=fit_intercept,
        sample_weight=sample_weight,
        alphas=alphas,
    )
    targets = checked_targets(X, Y, dtype, out_of_core)
    design = BandedDesign(X, columns, candidates)
    store = store_cv_results or not local_alpha
    run_args = dict(max_memory_gb=max_memory_gb, batch_size=batch_size, verbose=verbose)
    decomposed = None
    # One band, X itself, is decomposed as BatchedRidge decomposes it
    # (search_bands); several candidates share the moments of X.
    one_design = len(candidates) == 1 and design.design(0) is X
    if (
        not one_design
        and choose_banded_decomposition(solver, scheme, X) == "covariance"
    ):
        check_covariance_search_memory(
            n_samples,
            X.shape[1],
            scheme,
            dtype,
            backend,
            max_memory_gb,
            n_candidates=len(candidates),
            n_targets=n_targets,
            n_alphas=alphas.size,
            store_cv_results=store,
        )
        with backend.context():
            decomposed = banded_covariance(
                X,
                sample_weight,
                alphas,
                scheme,
                design,
                backend,
                dtype,
                fit_intercept=fit_intercept,
                scoring=scoring,
                solver=solver,
            )
    if decomposed is not None:
        with backend.context():
            found = search_covariance(
                decomposed,
                targets,
                store=store,
                local_alpha=local_alpha,
                run_args=run_args,
            )
        del decomposed
    else:
        check_search_memory(
            design,
            n_samples,
            scheme,
            dtype,
            backend,
            max_memory_gb,
            n_targets=n_targets,
            n_alphas=alphas.size,
            store_cv_results=store,
        )
        with backend.context():
            found = search_bands(
                X,
                targets,
                design,
                sample_weight,
                alphas,
                scheme,
                backend,
                dtype,
                fit_intercept=fit_intercept,
                scoring=scoring,
                store=store,
                local_alpha=local_alpha,
                run_args=run_args,
                solver=solver,
            )
    _warn_about_fit(
        X,
        Y,
        targets,
        sample_weight,
        groups,
        alphas,
        scheme,
        candidates,
        found,
        cv=cv,
        fit_intercept=fit_intercept,
        scoring=scoring,
        local_alpha=local_alpha,
    )
    if verbose:
        _say_chosen(candidates, found.candidate, verbose)
    band_weights = candidates[found.candidate]
    alpha = alphas[found.alpha]
    with np.errstate(divide="ignore"):
        band_alphas = alpha[:, None] / band_weights
    return BandedFit(
        candidates,
        band_weights,
        alpha,
        band_alphas,
        found.score,
        found.coef,
        found.intercept,
        found.stored,
        found.decomposition,
    )


def _warn_about_fit(
    X,
    Y,
    targets,
    sample_weight,
    groups,
    alphas,
    scheme,
    candidates,
    found,
    *,
    cv,
    fit_intercept,
    scoring,
    local_alpha,
):
    """The warnings of a fit about the grid of alphas, the candidates and the
    rows, from :func:`~skbatch._ridge.banded.search_bands`'s ``found``."""
    chosen, best, scores = found.candidate, found.alpha, found.scores
    coef, intercept, shared = found.coef, found.intercept, found.shared
    no_model = no_model_scores(
        scheme,
        Y,
        targets,
        sample_weight,
        scoring,
        fit_intercept,
        found.batch_size,
    )
    if local_alpha:
        warn_at_grid_edges(alphas, best, scores, no_model, stacklevel=FIT_STACKLEVEL)
    else:
        # As BatchedRidge(alpha_per_target=False): the shared pair's mean.
        def mean_no_model(_):
            limit = no_model(slice(None))
            return None if limit is None else np.mean(limit[shared.scored])[None]

        warn_at_grid_edges(
            alphas,
            best[:1],
            shared.mean[shared.candidate][None],
            mean_no_model,
            stacklevel=FIT_STACKLEVEL,
        )
    _warn_coarse_candidates(candidates, chosen)
    warn_if_autocorrelated(
        X,
        targets,
        coef,
        intercept,
        groups,
        cv,
        n_alphas=alphas.size,
        n_candidates=len(candidates),
        stacklevel=FIT_STACKLEVEL,
    )
    warn_undefined_best_scores(
        found.score, scoring, cv, shared=not local_alpha, stacklevel=FIT_STACKLEVEL
    )


def _say_chosen(candidates, chosen, verbose):
    """The verbose summary of a fit: the share of targets per winning
    candidate, the five most chosen."""
    n_targets = chosen.size
    counts = np.bincount(chosen, minlength=len(candidates))
    top = np.argsort(-counts, kind="stable")[:5]
    shares = ", ".join(
        f"candidate {c} {np.round(candidates[c], 3).tolist()}: "
        f"{counts[c] / n_targets:.0%}"
        for c in top
        if counts[c]
    )
    _say(verbose, f"band weights chosen: {shares}")
