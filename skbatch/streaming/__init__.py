"""Streaming reducers for bootstrap and permutation replicates.

Replicates arrive in batches, possibly from different workers. The
accumulators here keep only what the final statistics need (running moments,
percentile tails, exceedance counts), so memory does not grow with the number
of replicates, and partial accumulators merge in any order.

- ``bootstrap.py``: :class:`BootstrapAccumulator`, running moments and the
  percentile tails of bootstrap replicates;
- ``bca.py``: :class:`BCaAccumulator` (BCa intervals in two passes) and
  :class:`OrderStatistics`;
- ``permutation.py``: :class:`PermutationCounter`, exceedance counts of a
  permutation null, and :func:`fdr_adjusted`;
- ``nan.py``: :func:`describe_nan`, why a bound or a standard error is NaN;
- ``_common.py``: what they share (checks, running moments, stored rows,
  the split of work between threads).
"""

from .bca import BCaAccumulator, OrderStatistics, bca_acceleration
from .bootstrap import BootstrapAccumulator
from .nan import describe_nan
from .permutation import PermutationCounter, fdr_adjusted

__all__ = [
    "BCaAccumulator",
    "BootstrapAccumulator",
    "OrderStatistics",
    "PermutationCounter",
    "bca_acceleration",
    "describe_nan",
    "fdr_adjusted",
]
