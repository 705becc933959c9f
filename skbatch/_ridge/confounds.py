"""Freedman–Lane nulls of a score beyond confounds, as extra targets.

The reduced model is ordinary least squares of ``Y`` on the confounds ``Z``
with an intercept, as in nilearn's ``permuted_ols(confounding_vars=...)``,
FSL randomise and R's permuco: :func:`confound_fit` gives its in-sample
fitted values ``F`` and residuals ``R``. Resample ``i`` of the null has the
targets ``F + P_i R`` (:func:`skbatch._ridge.freedman_lane.permuted_targets`,
``P_i`` a permutation within runs or sign flips of
:mod:`skbatch._resampling.signed`), and its statistic is the cross-validated
score of the full model (the estimator on ``X`` with ``Z`` as its last
columns) less that of the reduced model, both refit on those targets with
the same outer folds.

The full design never changes, so on the ridge fast path every resample is
one more set of targets of the decompositions of each fold
(:class:`ConfoundedPermutedProblem`): the full model's, and the reduced
model's (ridge at alpha 0 on the confounds, which is
``LinearRegression``'s fit).
"""

import numpy as np
from sklearn.linear_model import LinearRegression

from .._engine import plan_batches
from .cv import cv_scheme
from .problems import CV_WORKSPACE_OVERHEAD, PermutedRidgeProblem
from .spec import ridge_spec

__all__ = [
    "ConfoundedPermutedProblem",
    "FreedmanLaneTargets",
    "confound_fit",
    "confounds_model",
]


def confounds_model():
    """The reduced model: least squares on the confounds, with an intercept.

    Examples
    --------
    >>> from skbatch._ridge.confounds import confounds_model
    >>> confounds_model()
    LinearRegression()
    """
    return LinearRegression()


def confound_fit(confounds, Y, sample_weight=None):
    """In-sample fitted values and residuals of :func:`confounds_model`.

    Parameters
    ----------
    confounds : ndarray of shape (n_samples, n_confounds)
    Y : ndarray of shape (n_samples, n_targets)
    sample_weight : ndarray of shape (n_samples,) or None
        Weights of the least-squares fit.

    Returns
    -------
    fitted, residuals : ndarray of shape (n_samples, n_targets)

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._ridge.confounds import confound_fit
    >>> Z = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> Y = np.array([[1.0], [2.0], [4.0], [5.0]])
    >>> fitted, residuals = confound_fit(Z, Y)
    >>> np.round(residuals.ravel(), 12).tolist()
    [0.1, -0.3, 0.3, -0.1]
    """
    Y = np.asarray(Y, dtype=np.float64)
    fit = confounds_model().fit(confounds, Y, sample_weight=sample_weight)
    fitted = np.asarray(fit.predict(confounds), dtype=np.float64).reshape(Y.shape)
    return fitted, Y - fitted


class FreedmanLaneTargets(PermutedRidgeProblem):
    """:class:`~skbatch._ridge.problems.PermutedRidgeProblem` whose resample
    ``k`` has the targets ``fitted + P_k residuals``.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        The model's design.
    fitted, residuals : ndarray of shape (n_samples, t)
        The reduced model's (:func:`confound_fit`).
    splits, spec, inner_scheme, backend, dtype, scoring, n_permutations, \
permutation :
        As for :class:`~skbatch._ridge.problems.PermutedRidgeProblem`.
    """

    def __init__(
        self,
        X,
        fitted,
        residuals,
        splits,
        spec,
        inner_scheme,
        backend,
        dtype,
        scoring,
        *,
        n_permutations,
        permutation,
    ):
        super().__init__(
            X,
            residuals,
            splits,
            spec,
            inner_scheme,
            backend,
            dtype,
            scoring,
            n_permutations=n_permutations,
            permutation=permutation,
        )
        self.fitted = backend.asarray(np.asarray(fitted, dtype=np.float64), dtype)
        itemsize = np.dtype(dtype).itemsize
        # The fitted values beside the residuals, and the sum of a batch's
        # gathered residuals and the fitted values beside the gathered copy.
        self.fixed_bytes += itemsize * self.n_samples * self.n_targets
        self.device_bytes_per_item += itemsize * self.n_samples * self.n_targets

    def _permute(self, indices):
        """``fitted + P_k residuals`` for every row code ``k`` of
        ``indices``, as columns ``k * t + j`` (those of
        :func:`skbatch._ridge.freedman_lane.permuted_targets`)."""
        xp = self.xp
        gathered = super()._permute(indices)
        gathered = xp.reshape(gathered, (self.n_samples, -1, self.n_targets))
        return xp.reshape(gathered + self.fitted[:, None, :], (self.n_samples, -1))


class ConfoundedPermutedProblem(FreedmanLaneTargets):
    """The score of X beyond the confounds on Freedman–Lane targets.

    The full model's problem (:class:`FreedmanLaneTargets` on the design
    ``[X, Z]``) holds the reduced model's (the same on ``Z``, ridge at alpha
    0 with an intercept: :func:`confounds_model`'s fit, one decomposition
    per fold); ``problem(ids)`` gives the full model's scores less the
    reduced model's, on the same targets and folds.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features + n_confounds)
        The full design, the confounds last.
    confounds : ndarray of shape (n_samples, n_confounds)
    fitted, residuals, splits, spec, inner_scheme, backend, dtype, scoring, \
n_permutations, permutation :
        As for :class:`FreedmanLaneTargets`; ``spec`` is the full model's.
    """

    def __init__(
        self,
        X,
        confounds,
        fitted,
        residuals,
        splits,
        spec,
        inner_scheme,
        backend,
        dtype,
        scoring,
        *,
        n_permutations,
        permutation,
    ):
        super().__init__(
            X,
            fitted,
            residuals,
            splits,
            spec,
            inner_scheme,
            backend,
            dtype,
            scoring,
            n_permutations=n_permutations,
            permutation=permutation,
        )
        self.reduced = FreedmanLaneTargets(
            confounds,
            fitted,
            residuals,
            splits,
            reduced_spec(),
            reduced_scheme,
            backend,
            dtype,
            scoring,
            n_permutations=n_permutations,
            permutation=permutation,
        )
        # One copy of the targets' fitted values and residuals serves both;
        # both problems' decompositions and both batches' work are held.
        self.reduced.Y, self.reduced.fitted = self.Y, self.fitted
        itemsize = np.dtype(dtype).itemsize
        self.fixed_bytes += (
            self.reduced.fixed_bytes - 2 * itemsize * self.n_samples * self.n_targets
        )
        self.device_bytes_per_item += self.reduced.device_bytes_per_item

    def scores(self, indices):
        """The full model's scores less the reduced model's: device array
        of shape (len(indices), n_scorings * n_targets)."""
        return super().scores(indices) - self.reduced.scores(indices)

    @classmethod
    def check_memory(
        cls,
        X,
        confounds,
        Y,
        splits,
        spec,
        schemes,
        backend,
        dtype,
        *,
        n_permutations,
        max_memory_gb,
    ):
        """Refuse, before any decomposition, resamples whose data and work
        cannot fit the budget: both models' decompositions of every fold
        (every rank at its bound), the targets' fitted values and residuals,
        and per resample both batches' work and the sums
        (:meth:`PermutedRidgeProblem.item_bytes`), through the engine's plan
        (:func:`skbatch._engine.plan_batches`), which raises."""
        n_samples, n_targets = Y.shape
        itemsize = np.dtype(dtype).itemsize
        held, per_target = cls.held_bytes(X, splits, spec, schemes, itemsize)
        reduced_schemes = [
            reduced_scheme(confounds[train], Y[train], train) for train, _ in splits
        ]
        reduced_held, _ = cls.held_bytes(
            confounds, splits, reduced_spec(), reduced_schemes, itemsize
        )
        n_alphas = 1 if spec.fixed_per_target else spec.alphas.size
        device, host = cls.item_bytes(
            n_samples, n_targets, min(X.shape), n_alphas, dtype
        )
        reduced_device, _ = cls.item_bytes(
            n_samples, n_targets, min(confounds.shape), 1, dtype
        )
        plan_batches(
            n_permutations,
            backend=backend,
            device_bytes_per_item=device
            + reduced_device
            + 2 * itemsize * n_samples * n_targets
            + CV_WORKSPACE_OVERHEAD * itemsize * n_targets * per_target,
            host_bytes_per_item=host,
            fixed_bytes=2 * itemsize * Y.size + held + reduced_held,
            max_memory_gb=max_memory_gb,
        )


def reduced_spec():
    """The ridge problem of :func:`confounds_model`'s fit (alpha 0)."""
    return ridge_spec(confounds_model())


def reduced_scheme(X_train, Y_train, train):
    """The reduced model's inner scheme: none to choose from (one alpha)."""
    spec = reduced_spec()
    return cv_scheme(spec.cv, spec.scoring).split(X_train, Y_train, groups=None)
