"""Bootstrap replicates of a banded ridge held at its chosen weights and alphas.

A target at band weights ``gamma`` and alpha ``alpha`` is ridge at
``alpha`` on the design whose band-b columns are ``sqrt(gamma_b) X_b``, the
bands of weight 0 left out (:mod:`skbatch._ridge.banded`). So the targets
that share a ``gamma`` are the targets of one
:class:`~skbatch._ridge.problems.BootstrapRidgeProblem` on that design, at
their own alphas, and a replicate of every target is one replicate of each
such problem, the coefficients mapped back through ``sqrt(gamma_b)`` (0 in
the bands left out).

- :class:`HeldBands`: the fixed problem (band columns, each target's weights
  and alpha);
- :class:`BandedBootstrapProblem`: its replicates, for the engine;
- :func:`banded_bootstrap_nbytes`: the memory of that problem, for the
  preflight before the fit on all data as for the run.
"""

from dataclasses import dataclass

import numpy as np

from ..._backends.side_by_side import cpu_workers
from ..._engine import Portable
from ...backend import to_numpy
from ..problems import (
    MAX_BOOTSTRAP_BATCH_BYTES,
    SIDE_BY_SIDE_MIN_FLOPS,
    BootstrapRidgeProblem,
    bootstrap_flops_per_replicate,
)
from .factors import BandedDesign

__all__ = ["BandedBootstrapProblem", "HeldBands", "banded_bootstrap_nbytes"]


@dataclass(frozen=True, eq=False)
class HeldBands:
    """A banded ridge at fixed band weights and alpha per target, no search.

    Attributes
    ----------
    columns : list of ndarray
        The columns of each band (:func:`skbatch._ridge.banded.check_bands`).
    band_weights : ndarray of shape (n_targets, n_bands)
        Each target's weights, rows on the simplex.
    alphas : ndarray of shape (n_targets,)
        Each target's overall alpha.
    fit_intercept : bool
    dtype : str or numpy dtype, default="input"
        The compute dtype requested, for
        :func:`skbatch._ridge.spec.resolve_dtype`.
    """

    columns: list
    band_weights: np.ndarray
    alphas: np.ndarray
    fit_intercept: bool = True
    dtype: object = "input"

    def design(self, X):
        """``(design, chosen)``: the :class:`BandedDesign` of X over the
        distinct rows of ``band_weights``, and the row of each target."""
        weights = np.atleast_2d(np.asarray(self.band_weights, dtype=np.float64))
        candidates, chosen = np.unique(weights, axis=0, return_inverse=True)
        return BandedDesign(X, list(self.columns), candidates), chosen.ravel()


def banded_bootstrap_nbytes(
    n_samples,
    n_features,
    n_targets,
    parts,
    itemsize,
    backend,
    *,
    fit_intercept,
    threads=True,
):
    """``(fixed, device per replicate, host per replicate)`` bytes.

    Parameters
    ----------
    n_samples, n_features, n_targets : int
        Of the whole problem.
    parts : list of (int, int)
        ``(columns, targets)`` of each candidate's problem, built in turn for
        each batch: its design and its targets' columns live while it runs.
    itemsize : int
        Of the compute dtype.
    backend : Backend
    fit_intercept : bool
    threads : bool, default=True
        Whether batches may run side by side, each building its own parts.

    Returns
    -------
    fixed, device, host : float
        ``fixed``: the largest part's data (its
        :meth:`BootstrapRidgeProblem.nbytes` with a copy of its targets, and
        its rescaled columns), once per batch in flight; ``device``: the
        largest part's working set per replicate; ``host``: a replicate's
        counts and weights, its result assembled over all targets, that
        result's float64 copy in the accumulator, and a part's result.
    """
    n = n_samples
    fixed = device = 0.0
    for columns, targets in parts:
        part_fixed, part_device, _ = BootstrapRidgeProblem.nbytes(
            n,
            columns,
            targets,
            itemsize,
            copies_y=True,
            gather_buffers=BootstrapRidgeProblem.gather_buffers(
                backend, n, columns + bool(fit_intercept), targets, threads=False
            ),
        )
        fixed = max(fixed, part_fixed + 8.0 * n * columns)
        device = max(device, part_device)
    if threads:
        fixed *= cpu_workers(backend)
    host = 8.0 * (2 * n + 3 * n_targets * (n_features + 1))
    return fixed, device, host


class BandedBootstrapProblem(Portable):
    """Replicates of a :class:`HeldBands`, every target at once.

    ``problem(ids)`` returns the coefficients, of shape (batch, n_targets,
    n_features), and intercepts, (batch, n_targets), of replicates ``ids``:
    for each distinct band weights, a
    :class:`~skbatch._ridge.problems.BootstrapRidgeProblem` on the rescaled
    design of the targets at those weights (built for the batch, so that one
    candidate's copy of the data is held at a time), its coefficients scaled
    back into X's columns. Every part draws replicate i's rows from its seed
    stream alone, so the result does not depend on the batches.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,) or (n_samples, n_targets)
    held : HeldBands
    sample_weight, groups, block_size, block_scheme, entropy, backend, dtype, \
n_bootstrap, max_batch_size :
        As for :class:`~skbatch._ridge.problems.BootstrapRidgeProblem`.
    """

    desc = "replicates"

    def __init__(
        self,
        X,
        y,
        held,
        *,
        sample_weight,
        groups,
        block_size,
        entropy,
        backend,
        dtype,
        n_bootstrap,
        max_batch_size=None,
        block_scheme="moving",
    ):
        self.backend, self.dtype = backend, dtype
        self.X = X
        self.Y = y.reshape(X.shape[0], -1)
        self.held = held
        self.n_items = n_bootstrap
        self.resampling = dict(
            fit_intercept=held.fit_intercept,
            sample_weight=sample_weight,
            groups=groups,
            block_size=block_size,
            block_scheme=block_scheme,
            entropy=entropy,
            backend=backend,
            dtype=dtype,
            n_bootstrap=n_bootstrap,
        )
        self.design, self.parts, self.threads, planned = self._plan(
            X, self.Y, held, backend, dtype, n_bootstrap
        )
        self.fixed_bytes, self.device_bytes_per_item, self.host_bytes_per_item = planned
        largest = max(1, int(MAX_BOOTSTRAP_BATCH_BYTES // self.device_bytes_per_item))
        self.max_batch_size = (
            largest if max_batch_size is None else min(largest, max_batch_size)
        )

    @staticmethod
    def _plan(X, Y, held, backend, dtype, n_bootstrap):
        """``(design, parts, threads, nbytes)``: the parts are ``(candidate,
        its targets)``, ``nbytes`` as :func:`banded_bootstrap_nbytes` gives."""
        design, chosen = held.design(X)
        parts = [(c, np.flatnonzero(chosen == c)) for c in range(len(design.kept))]
        n_samples, n_features = X.shape
        sizes = [(design.n_columns(c), targets.size) for c, targets in parts]
        flops = n_bootstrap * sum(
            bootstrap_flops_per_replicate(n_samples, columns, targets)
            for columns, targets in sizes
        )
        threads = flops >= SIDE_BY_SIDE_MIN_FLOPS
        planned = banded_bootstrap_nbytes(
            n_samples,
            n_features,
            Y.shape[1],
            sizes,
            np.dtype(dtype).itemsize,
            backend,
            fit_intercept=held.fit_intercept,
            threads=threads,
        )
        return design, parts, threads, planned

    @classmethod
    def nbytes(cls, X, y, held, backend, dtype, n_bootstrap):
        """``(fixed, device per replicate, host per replicate)`` bytes of the
        problem these arguments build, before building it."""
        Y = y.reshape(X.shape[0], -1)
        return cls._plan(X, Y, held, backend, dtype, n_bootstrap)[3]

    def __call__(self, ids):
        n_targets = self.Y.shape[1]
        coef = np.zeros((len(ids), n_targets, self.X.shape[1]), dtype=self.dtype)
        intercept = np.zeros((len(ids), n_targets), dtype=self.dtype)
        alphas = np.asarray(self.held.alphas, dtype=np.float64)
        for c, targets in self.parts:
            part = BootstrapRidgeProblem(
                self.design.design(c),
                self.Y[:, targets],
                alphas[targets],
                **self.resampling,
            )
            coef_c, intercept_c = part(ids)
            kept, scale = self.design.kept[c], self.design.scales[c]
            coef[:, targets[:, None], kept] = to_numpy(coef_c) * scale.astype(
                self.dtype
            )
            intercept[:, targets] = to_numpy(intercept_c)
        return coef, intercept
