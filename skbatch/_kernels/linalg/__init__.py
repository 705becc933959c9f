"""Ridge kernels written once against the array API (numpy, torch, jax).

Every function here is pure: it receives arrays of one namespace ``xp`` and
returns arrays of that namespace on the same device. Targets are the columns
of a 2-D ``Y`` of shape (n_samples, n_targets); batching them, choosing the
device and sizing the work belong to the callers.

The design matrix is decomposed once (thin SVD of the centred X); targets are
projected onto that basis once, and every alpha is evaluated from the
projection. This is the svd path of scikit-learn's ``_RidgeGCV``, with one
alpha per target and without forming coefficients for every alpha.

The bootstrap kernels (:func:`weighted_primal_coef`,
:func:`weighted_dual_coef`) solve a whole batch of replicates at once from
bootstrap counts used as row weights; Y is never copied whole per replicate
(the primal kernel gathers a replicate's drawn rows a block at a time).

The kernels live in one module per concern; this package presents the
names the solver layer and the estimators call:

- ``_arrays.py``: the namespace of arrays, scratch buffers, products
  accumulated in a wider dtype, weighted centring;
- ``svd.py``: the thin SVD of a design, its QR variant, fold bases, and the
  checks of column spread;
- ``cv.py``: ridge on the SVD basis: projections, coefficients,
  leave-one-out, GCV and K-fold scores;
- ``scores.py``: the one scoring function and the choice of alpha;
- ``weighted.py``: the bootstrap's batched weighted solves;
- ``covariance.py``: the covariance path (moments of blocks of rows, one
  eigendecomposition per fold).
"""

from ._arrays import (
    _criterion_dtype,
    _first_weighed_row,
    _out_namespace,
    center,
    column_sq_norms,
    decomposition_dtype,
    one_thread,
)
from .covariance import (
    COVARIANCE_ROW_BLOCK,
    _block_rows,
    centred_cross,
    centred_gram,
    covariance_coef,
    covariance_condition,
    covariance_eigh,
    covariance_holdout_scores,
    cross_moments,
    gram_moments,
    moment_scores,
    moments_about,
)
from .cv import (
    gcv_scores,
    holdout_scores,
    loo_scores,
    project,
    residual_sq_norm,
    ridge_coef,
)
from .scores import (
    _SCORINGS,
    MIN_SCORED_ROWS,
    holdout_spread,
    score_per_target,
    select_alpha,
    target_spread,
    warn_undefined,
)
from .svd import (
    check_column_spread,
    column_norms,
    column_spread,
    fold_basis,
    frobenius_norm,
    max_column_spread,
    qr_factor,
    shrinking_alpha,
    svd_decompose,
)
from .weighted import (
    MAX_GATHER_BYTES,
    ResultPool,
    Scratch,
    gathers_drawn_rows,
    run_products,
    run_weighted_products,
    weighted_dual_coef,
    weighted_primal_coef,
)

__all__ = [
    "COVARIANCE_ROW_BLOCK",
    "MAX_GATHER_BYTES",
    "MIN_SCORED_ROWS",
    "ResultPool",
    "Scratch",
    "_SCORINGS",
    "_block_rows",
    "_criterion_dtype",
    "_first_weighed_row",
    "_out_namespace",
    "center",
    "centred_cross",
    "centred_gram",
    "check_column_spread",
    "column_norms",
    "column_spread",
    "column_sq_norms",
    "covariance_coef",
    "covariance_condition",
    "covariance_eigh",
    "covariance_holdout_scores",
    "moment_scores",
    "moments_about",
    "cross_moments",
    "decomposition_dtype",
    "fold_basis",
    "frobenius_norm",
    "gathers_drawn_rows",
    "gcv_scores",
    "gram_moments",
    "holdout_scores",
    "holdout_spread",
    "loo_scores",
    "max_column_spread",
    "one_thread",
    "project",
    "qr_factor",
    "residual_sq_norm",
    "ridge_coef",
    "run_products",
    "run_weighted_products",
    "score_per_target",
    "select_alpha",
    "shrinking_alpha",
    "svd_decompose",
    "target_spread",
    "warn_undefined",
    "weighted_dual_coef",
    "weighted_primal_coef",
]
