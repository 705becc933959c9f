"""skbatch: batched ridge, bootstrap and permutation inference for scikit-learn.

Four estimators do resampling-heavy, many-target linear work on numpy,
PyTorch or JAX within a memory budget: :class:`BatchedRidge`,
:class:`BandedRidge`, :class:`BootstrapEstimator` and
:class:`PermutationScorer`.
"""

from ._engine.report import FitReport, FitStage
from .backend import Backend, check_gpu_available, resolve_backend
from .banded import BandedRidge
from .bootstrap import BootstrapEstimator, BootstrapResult
from .delays import Delayer
from .exceptions import (
    AlphaEdgeWarning,
    AutocorrelationWarning,
    DegenerateDataWarning,
)
from .memory import (
    auto_batch_size,
    auto_n_jobs,
    compute_batch_size,
    get_available_memory_gb,
    memory_budget,
)
from .oom import compute_oom_safe, is_oom_error
from .partitioning import variance_partitioning
from .permutation import PermutationScorer
from .ridge import BatchedRidge
from .scoring import (
    correlation_score_split,
    explainable_variance,
    r2_score_split,
    score_per_target,
)
from .trf import TRF, trf_from_estimator

__version__ = "0.1.0.dev0"

__all__ = [
    "AlphaEdgeWarning",
    "AutocorrelationWarning",
    "BandedRidge",
    "Backend",
    "BatchedRidge",
    "BootstrapEstimator",
    "BootstrapResult",
    "DegenerateDataWarning",
    "Delayer",
    "FitReport",
    "FitStage",
    "PermutationScorer",
    "TRF",
    "auto_batch_size",
    "auto_n_jobs",
    "check_gpu_available",
    "compute_batch_size",
    "compute_oom_safe",
    "correlation_score_split",
    "explainable_variance",
    "get_available_memory_gb",
    "is_oom_error",
    "memory_budget",
    "r2_score_split",
    "resolve_backend",
    "score_per_target",
    "trf_from_estimator",
    "variance_partitioning",
]
