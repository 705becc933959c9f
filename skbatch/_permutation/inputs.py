"""What a PermutationScorer fit hands its plans and paths.

The parameters as the fit reads them (:class:`Settings`), the data
(:class:`FitInputs`), the resamples to score (:class:`Resamples`) and the
path chosen for each metric with what it needs (:class:`Paths`).
:mod:`skbatch.permutation` fills them in; :mod:`skbatch._permutation.plan`
and :mod:`skbatch._permutation.paths` read them.
"""

import dataclasses
from typing import Any, NamedTuple


@dataclasses.dataclass(frozen=True)
class Settings:
    """The parameters of a :class:`~skbatch.PermutationScorer` as its fit
    reads them, passed down to the plans and paths."""

    n_permutations: int
    scoring: Any
    multioutput: str
    alternative: str
    permutation_type: str
    block_size: int | None
    return_null: bool
    n_jobs: int | None
    device: Any
    max_memory_gb: float | None
    verbose: int

    @classmethod
    def of(cls, scorer):
        """The settings of a PermutationScorer ``scorer``."""
        return cls(
            n_permutations=scorer.n_permutations,
            scoring=scorer.scoring,
            multioutput=scorer.multioutput,
            alternative=scorer.alternative,
            permutation_type=scorer.permutation_type,
            block_size=scorer.block_size,
            return_null=scorer.return_null,
            n_jobs=scorer.n_jobs,
            device=scorer.device,
            max_memory_gb=scorer.max_memory_gb,
            verbose=scorer.verbose,
        )

    @property
    def raw(self):
        """Whether every target has its own score and p-value."""
        return self.multioutput == "raw_values"


class FitInputs(NamedTuple):
    """The data of one fit.

    ``X`` and ``y`` validated on the host (numpy, or sparse X); ``X_fit``
    and ``y_fit`` as the wrapped estimator gets them (a DataFrame or Series
    as given); ``X_given`` and ``y_given`` as ``fit`` received them, on the
    host; ``groups``; ``fit_params`` as ``fit`` checked them.
    """

    X: Any
    y: Any
    X_fit: Any
    y_fit: Any
    X_given: Any
    y_given: Any
    groups: Any
    fit_params: dict

    @property
    def n_targets(self):
        return 1 if self.y.ndim == 1 else self.y.shape[1]


class Resamples(NamedTuple):
    """The resamples of ``y`` to score: ``n_items`` of them, drawn from
    ``entropy`` (that of ``random_state``) as ``permutation`` says (the
    scheme's ``permutation_type`` and ``block_size``, and ``exact``: every
    distinct one enumerated once)."""

    entropy: Any
    permutation: dict
    n_items: int


class Paths(NamedTuple):
    """The path of each metric and what it needs, settled before any fit.

    ``cv`` (after ``check_cv``) and its ``splits`` (integer rows);
    ``backend``, the generic path's (the fast path's is in ``ridge``);
    ``metrics``, every metric (name -> scoring) in order, of which ``fast``
    are scored on the ridge fast path, planned in ``ridge`` (see
    :func:`skbatch._permutation.plan._plan_ridge`; None without ``fast``),
    and ``slow`` by refits; ``refits``, the parameters of every fit of the
    estimator (``fit_params``, with the rows' groups when it takes them).
    """

    cv: Any
    splits: list
    backend: Any
    metrics: dict
    fast: dict
    slow: dict
    ridge: dict | None
    refits: dict
