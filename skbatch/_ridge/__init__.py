"""The ridge solver layer, below the estimators and above the engine.

- :mod:`~skbatch._ridge.spec`: which estimators solve an exact ridge
  problem (:func:`ridge_spec`, the one fast-path rule) and the checks every
  ridge path shares (alphas, compute dtype);
- :mod:`~skbatch._ridge.cv`: the cross-validation schemes that score alphas
  (leave-one-out, GCV, K-fold) and their registry keyed by ``cv``;
- :mod:`~skbatch._ridge.problems`: the problems the engine runs in batches
  of item ids (targets, permutations, bootstrap replicates), each stating
  its memory;
- :mod:`~skbatch._ridge.magnitudes`: data the compute dtype cannot
  represent, refused before any work;
- :mod:`~skbatch._ridge.batched`: every target of a ``BatchedRidge`` fit,
  checked, solved and warned about;
- :mod:`~skbatch._ridge.banded.fit`: every target of a ``BandedRidge`` fit,
  checked, searched and warned about;
- :mod:`~skbatch._ridge.partition` and
  :mod:`~skbatch._ridge.partition_inference`: Venn regions of subset
  scores, and the refits of permuted and resampled designs for their
  p-values and intervals;
- :mod:`~skbatch._ridge.freedman_lane`: the Freedman–Lane nulls of a
  band's unique variance, the reduced model's permuted residuals as extra
  targets (choices held, or searched again); the held null's GEMMs per
  fold in :mod:`~skbatch._ridge.freedman_lane_held`, each model's
  decompositions and squared errors per fold in
  :mod:`~skbatch._ridge.held_model`.

The estimators (``ridge.py``, ``permutation.py``, ``bootstrap.py``) import
from here and never from each other's private names. The kernels are pure
functions of ``xp`` arrays in :mod:`skbatch._kernels.linalg`.
"""

from .cv import CV_SCHEMES, cv_scheme
from .problems import (
    BootstrapRidgeProblem,
    PermutedRidgeProblem,
    RidgeSolver,
    TargetProblem,
    fit_targets,
)
from .spec import RidgeSpec, check_alphas, resolve_dtype, ridge_spec

__all__ = [
    "CV_SCHEMES",
    "BootstrapRidgeProblem",
    "PermutedRidgeProblem",
    "RidgeSolver",
    "RidgeSpec",
    "TargetProblem",
    "check_alphas",
    "cv_scheme",
    "fit_targets",
    "resolve_dtype",
    "ridge_spec",
]
