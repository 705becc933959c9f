"""What fit hands the loops of :mod:`skbatch._bootstrap`: the parameters
(:class:`Settings`) and the data (:class:`FitInputs`)."""

import dataclasses
from typing import Any, NamedTuple


@dataclasses.dataclass(frozen=True)
class Settings:
    """The parameters of a :class:`~skbatch.BootstrapEstimator` as its fit
    reads them, passed down to the loops of :mod:`skbatch._bootstrap`.

    ``block_size`` is the block size used, ``block_size_``: None until the fit
    on all data resolves it. ``keep_samples_share`` is the share of the host
    budget below which BCa keeps every replicate
    (``skbatch.bootstrap.BCA_KEEP_SAMPLES_SHARE``, read when the fit starts).
    """

    n_bootstrap: int
    confidence_level: float
    ci_method: str
    alternative: str
    return_samples: bool
    block_scheme: str
    n_jobs: int | None
    max_memory_gb: float | None
    verbose: int
    keep_samples_share: float
    block_size: int | None = None

    @classmethod
    def of(cls, estimator, keep_samples_share):
        """The settings of a BootstrapEstimator ``estimator``, before its
        ``block_size_`` is known."""
        return cls(
            n_bootstrap=estimator.n_bootstrap,
            confidence_level=estimator.confidence_level,
            ci_method=estimator.ci_method,
            alternative=estimator.alternative,
            return_samples=estimator.return_samples,
            block_scheme=estimator.block_scheme,
            n_jobs=estimator.n_jobs,
            max_memory_gb=estimator.max_memory_gb,
            verbose=estimator.verbose,
            keep_samples_share=keep_samples_share,
        )


class FitInputs(NamedTuple):
    """The data of one fit as the loops take them.

    ``X`` and ``y`` validated on the host (numpy, or sparse X); ``X_fit``
    and ``y_fit`` as the wrapped estimator gets them (DataFrames kept);
    ``groups``; ``fit_params`` as ``fit`` checked them; ``data``, the
    :class:`~skbatch._engine.preflight.DataBytes` these hold.
    """

    X: Any
    y: Any
    X_fit: Any
    y_fit: Any
    groups: Any
    fit_params: dict
    data: Any
