"""Ridge problems: data decomposed once, computing on batches of item ids.

A problem object is what the engine (:func:`skbatch._engine.run_problem`)
runs. It states its memory, so that no estimator does memory arithmetic:

- ``n_items``, ``backend``, ``desc``: what is batched, where, and its name;
- ``fixed_bytes``: device bytes held whatever the batch (data and
  decompositions);
- ``device_bytes_per_item`` and ``host_bytes_per_item``: the working set of
  one item on the device, and its result on the host until reduced;
- ``max_batch_size``: the batch past which the kernel is no faster;
- ``threads``: whether batches may run side by side on the BLAS threads;

and computes on item ids: ``problem(ids)`` returns device arrays whose axis 0
runs over ``ids``, drawing what item i needs (permutation, bootstrap counts)
from item i's seed stream alone.

- :class:`TargetProblem`: the targets of ``BatchedRidge``, through a
  :class:`RidgeSolver` (one SVD, or one per fold, and a CV scheme);
- :class:`PermutedRidgeProblem`: the permutations of ``PermutationScorer``'s
  ridge fast path, as extra targets through one solver per outer fold;
- :class:`BootstrapRidgeProblem`: the replicates of ``BootstrapEstimator``'s
  linear path, as row weights of one batched weighted solve.

The memory multipliers below are checked by ``benchmarks/bench_memory.py``
(measured peaks over planned bytes, ``benchmarks/RESULTS.md``) and by the
peak-memory tests of ``tests/test_bootstrap.py``.

One module per kind of problem: ``solver.py`` (:class:`RidgeSolver` and the
checks of its memory), ``targets.py`` (:class:`TargetProblem`,
:class:`PredictionProblem`), ``permuted.py`` (:class:`PermutedRidgeProblem`),
``replicates.py`` (:class:`BootstrapRidgeProblem`).
"""

from .permuted import (
    DEVICE_SCORINGS,
    PermutedRidgeProblem,
    device_scores,
)
from .replicates import (
    MAX_BOOTSTRAP_BATCH_BYTES,
    SIDE_BY_SIDE_MIN_FLOPS,
    BootstrapRidgeProblem,
    bootstrap_flops_per_replicate,
    check_replicate_weights,
)
from .solver import (
    CV_WORKSPACE_OVERHEAD,
    RidgeSolver,
    check_held_memory,
    check_solver_memory,
    results_bytes,
)
from .targets import (
    PredictionProblem,
    TargetProblem,
    fit_flops,
    fit_targets,
    mean_over_scored_targets,
)

__all__ = [
    "BootstrapRidgeProblem",
    "CV_WORKSPACE_OVERHEAD",
    "DEVICE_SCORINGS",
    "MAX_BOOTSTRAP_BATCH_BYTES",
    "PermutedRidgeProblem",
    "PredictionProblem",
    "RidgeSolver",
    "SIDE_BY_SIDE_MIN_FLOPS",
    "TargetProblem",
    "bootstrap_flops_per_replicate",
    "check_held_memory",
    "check_replicate_weights",
    "check_solver_memory",
    "device_scores",
    "fit_flops",
    "fit_targets",
    "mean_over_scored_targets",
    "results_bytes",
]
