"""What a ridge fit says about its data: the warnings after ``fit``.

For ``BatchedRidge`` and ``BandedRidge``: :class:`AlphaEdgeWarning` when
many targets chose an edge of the grid of alphas while their score was
still improving there (:func:`warn_at_grid_edges`, with the score of no
model from :func:`no_model_scores`), :class:`AutocorrelationWarning`
when leave-one-out or GCV chose on autocorrelated residuals
(:func:`warn_if_autocorrelated`), and :class:`DegenerateDataWarning` when
the score of some targets at the chosen alpha is NaN
(:func:`warn_undefined_best_scores`). The warnings are public API, as
``skbatch.AlphaEdgeWarning``, ``skbatch.AutocorrelationWarning`` and
``skbatch.DegenerateDataWarning``.
"""

import warnings

import numpy as np

from .._engine import active_dask_client
from .._kernels.linalg import MIN_SCORED_ROWS
from .._kernels.timeseries import autocorrelation_warning
from ..exceptions import (
    AlphaEdgeWarning,
    AutocorrelationWarning,
    DegenerateDataWarning,
)

__all__ = [
    "AlphaEdgeWarning",
    "AutocorrelationWarning",
    "no_model_scores",
    "warn_at_grid_edges",
    "warn_if_autocorrelated",
    "warn_undefined_best_scores",
]

# After fit, warn when more than this share of targets chose the smallest or
# the largest alpha ...
EDGE_SHARE = 0.05
# ... while their score there still beat the next alpha's by more than this
# share of their score's range over the grid (a flat tail is not a reason to
# extend the grid: pure-noise targets flatten out at the largest alpha).
EDGE_IMPROVEMENT = 0.01
# Leave-one-out and GCV warn when the median over targets of the lag-1
# autocorrelation of the fit's residuals (within runs) exceeds both figures.
# 0.3, above the resampling floor of
# skbatch._kernels.timeseries.AUTOCORRELATION_WARN:
# LOO is misled only once a row's neighbours predict its leave-one-out
# residual (median alpha 4.6e3 by LOO where leave-one-run-out chose 1e6 on
# AR(0.9) noise), not at the milder dependence that biases standard errors.
LOO_AUTOCORRELATION_WARN = 0.3
# Targets whose residuals the check reads, evenly spaced over the targets:
# a median over this many is steady, at the cost of one (n x p) @ (p x 64)
# product.
AUTOCORRELATION_TARGETS = 64


def warn_if_autocorrelated(
    X, targets, coef, intercept, groups, cv, *, n_alphas, n_candidates=1, stacklevel
):
    """Warn when LOO or GCV chose anything on autocorrelated residuals.

    Something is chosen when there is more than one alpha (``n_alphas``) or
    more than one candidate of band weights (``n_candidates``, a
    ``BandedRidge`` search); nothing is checked otherwise, nor under a
    K-fold ``cv`` (a splitter by runs is the remedy). The residuals of the
    fit of up to :data:`AUTOCORRELATION_TARGETS` targets (evenly spaced;
    the first ones of targets on disk, one read),
    their lag-1 autocorrelation within the runs ``groups``
    (:func:`skbatch._kernels.timeseries.lag1_autocorrelation`), and its median over
    those targets against :data:`LOO_AUTOCORRELATION_WARN` and
    standard errors of white noise
    (:func:`skbatch._kernels.timeseries.autocorrelation_warning`).
    A dask ``y`` with a cluster active is not checked: its blocks are
    computed on the workers only, never in the calling process.
    """
    chosen = [
        name
        for name, count in (("alpha", n_alphas), ("band weights", n_candidates))
        if count > 1
    ]
    if not chosen or not (cv is None or isinstance(cv, str)):
        return
    if targets.kind == "dask" and active_dask_client() is not None:
        return
    n_targets = coef.shape[0]
    count = min(n_targets, AUTOCORRELATION_TARGETS)
    if targets.out_of_core:
        columns = np.arange(count)
        Y = targets.read(0, count)
    else:
        columns = np.unique(np.linspace(0, n_targets - 1, count).round().astype(int))
        Y = targets.Y[:, columns]
    residuals = np.asarray(Y, dtype=np.float64) - (
        X @ coef[columns].T.astype(X.dtype, copy=False) + intercept[columns]
    )
    found = autocorrelation_warning(residuals, groups, floor=LOO_AUTOCORRELATION_WARN)
    if found is None or found[0] <= found[1]:
        return
    median, threshold, n_series = found
    scheme = "leave-one-out" if cv is None else "generalized cross-validation"
    where = "within the runs of groups" if groups is not None else "over all rows"
    what = " and ".join(chosen)
    verb = "were" if chosen[-1] == "band weights" else "was"
    warnings.warn(
        f"{what} {verb} chosen by {scheme} (cv={cv!r}) on targets whose residuals "
        f"are autocorrelated: median lag-1 autocorrelation {median:.2f} {where} "
        f"over {n_series} targets, above {threshold:.2f}. Neighbouring rows of a "
        f"time series predict a left-out row, so {scheme} favours too little "
        f"regularisation. Use cv=LeaveOneGroupOut() (or GroupKFold) with "
        f"fit(X, y, groups=runs).",
        AutocorrelationWarning,
        stacklevel=stacklevel,
    )


def warn_at_grid_edges(alphas, best, scores, no_model, *, stacklevel=4):
    """Warn when many targets chose an edge of ``alphas`` while improving there.

    ``scores`` (n_targets, n_alphas) and ``best`` (n_targets,) index the
    alphas. ``no_model(columns)`` gives the score without a model (the limit
    of an infinite alpha) of the targets ``columns``, or None when there is
    none. A score that approaches that limit from below, close to it, is a
    target with nothing to predict: pure noise always prefers the largest
    alpha, whatever the grid, and does not say that the grid stops too
    early. The limit takes a pass over the targets, so it is asked only when
    the share of targets at the largest alpha would otherwise warn, and only
    for them. The warning names the caller ``stacklevel`` frames up: by
    default that of a ``fit`` (past this function, ``fit`` and its atomic
    wrapper).
    """
    if alphas.size < 2:
        return
    order = np.argsort(alphas)
    # The range of each target's defined scores; -inf where none is (not
    # nanmax's warning about every constant target of a correlation).
    scored = ~np.isnan(scores)
    span = np.max(np.where(scored, scores, -np.inf), axis=1) - np.min(
        np.where(scored, scores, np.inf), axis=1
    )
    for edge, neighbour, which in (
        (order[0], order[1], "smallest"),
        (order[-1], order[-2], "largest"),
    ):
        with np.errstate(invalid="ignore"):
            tolerance = EDGE_IMPROVEMENT * span
            counted = (best == edge) & (
                scores[:, edge] - scores[:, neighbour] > tolerance
            )
        if which == "largest" and np.mean(counted) > EDGE_SHARE:
            (columns,) = np.nonzero(counted)
            limit = no_model(columns)
            if limit is not None:
                with np.errstate(invalid="ignore"):
                    gap = limit - scores[columns, edge]
                    counted[columns] = ~((gap >= 0) & (gap <= tolerance[columns]))
        share = np.mean(counted)
        if share > EDGE_SHARE:
            direction = "smaller" if which == "smallest" else "larger"
            warnings.warn(
                f"{share:.0%} of targets chose the {which} alpha "
                f"({alphas[edge]:g}) while their cross-validated score was still "
                f"improving there: extend `alphas` to {direction} values.",
                AlphaEdgeWarning,
                stacklevel=stacklevel,
            )


def no_model_scores(scheme, Y, targets, sample_weight, scoring, fit_intercept, batch):
    """``no_model(columns)`` of :func:`warn_at_grid_edges` for a fit's targets.

    ``Y`` is the host array (or, with ``targets`` out of core, the array on
    disk, read again in batches of ``batch``).
    """

    def score(block):
        return scheme.no_model_score(block, sample_weight, scoring, fit_intercept)

    def no_model(columns):
        if not targets.out_of_core:
            return score(Y[:, columns])
        # Another pass over the targets, in the fit's batches.
        parts = []
        for block in targets.blocks(np.arange(Y.shape[1])[columns], batch):
            part = score(block)
            if part is None:
                return None
            parts.append(part)
        return np.concatenate(parts)

    return no_model


def warn_undefined_best_scores(best_score, scoring, cv, *, shared, stacklevel):
    """Warn once when the score of some targets at the chosen alpha is NaN.

    The rule of every NaN a result holds for a reason in the data
    (:func:`skbatch._kernels.linalg.warn_undefined`): one
    :class:`DegenerateDataWarning` naming how many targets and why. Under a
    K-fold ``cv`` a target's score is the mean over the folds, NaN where
    any fold's is (as ``cross_val_score(...).mean()``): a correlation of a
    target constant on one test fold. ``shared``: one alpha for all
    targets, chosen by the mean over the targets scored, which leaves these
    out; else each such target scored NaN at every alpha and kept the
    first, as ``GridSearchCV`` does.
    """
    undefined = np.isnan(best_score)
    count = int(undefined.sum())
    if count == 0:
        return
    name = "R^2" if scoring == "r2" else scoring
    if cv is None or isinstance(cv, str):
        where = "on the rows scored"
    else:
        where = (
            "on the test rows of at least one fold of cv (a target's score is "
            "the mean over the folds, NaN where any fold's is, as with "
            "cross_val_score)"
        )
    if scoring == "correlation":
        why = (
            f"the target or its prediction is constant (to rounding) {where}, "
            f"or their weights are all 0"
        )
    else:
        why = (
            f"fewer than {MIN_SCORED_ROWS} rows, or rows whose weights are all "
            f"0, are scored {where}"
        )
    if shared:
        then = (
            "They were left out of the mean over the targets that chose the "
            "shared alpha; their own score there is NaN."
        )
    else:
        then = (
            "Every alpha scored NaN for them, so each kept the first alpha (as "
            "GridSearchCV does) and its best_score_ is NaN."
        )
    warnings.warn(
        f"{name} is undefined (NaN) at the chosen alpha for {count} of "
        f"{best_score.shape[0]} targets: {why}. {then}",
        DegenerateDataWarning,
        stacklevel=stacklevel,
    )
