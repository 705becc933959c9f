"""Resampling schemes: a scheme turns (seed stream, item id) into rows.

Each scheme is a small object one layer below the estimators. Given the
entropy of a fit and a batch of item ids, it gives each item's rows in drawn
order (a bootstrap replicate, a permutation, a rotation) or its signs (a
sign flip); counts or weights are derived from rows where a linear path
wants them. Estimators choose a scheme; they do not draw.

- ``streams.py``: the per-item windows of one counter-based generator, and
  the uniform integers and permutations drawn from them;
- ``groups.py``: the check of group labels, the rows of each group;
- ``base.py``: :class:`Scheme`, what every scheme implements;
- ``iid.py``, ``cluster.py``, ``block_bootstrap.py``: the bootstraps;
- ``permutations.py``: shuffles, circular shifts and block shuffles within
  groups; ``enumeration.py``: each of their distinct permutations once;
- ``sign_flip.py``: sign flips of rows or of whole groups;
- ``signed.py``: any ``permutation_type``'s resamples as signed row codes
  (``~r`` for ``-y[r]``), the one form ``PermutationScorer`` reads;
- ``registry.py``: :data:`SCHEMES`, name to class, into which each scheme
  registers itself, and the factories.

The public functions of :mod:`skbatch.random` draw through these schemes.
"""

# Each scheme module registers its classes on import (the registry imports
# none of them), in this order: the order SCHEMES and error messages list.
# isort: off
from . import iid, cluster, block_bootstrap  # noqa: F401
from . import permutations, enumeration, sign_flip  # noqa: F401

# isort: on
from .base import Scheme
from .registry import (
    BLOCK_SCHEMES,
    PERMUTATION_TYPES,
    SCHEMES,
    bootstrap_scheme,
    permutation_scheme,
    scheme,
)

__all__ = [
    "BLOCK_SCHEMES",
    "PERMUTATION_TYPES",
    "SCHEMES",
    "Scheme",
    "bootstrap_scheme",
    "permutation_scheme",
    "scheme",
]
