"""The replicates of ``BootstrapEstimator``'s linear path, as row weights of
one batched weighted solve (:class:`BootstrapRidgeProblem`)."""

import numpy as np
from array_api_compat import device as array_device

from ... import _backends
from ..._backends.side_by_side import cpu_workers
from ..._engine import Portable
from ..._kernels import linalg as _linalg
from ...random import bootstrap_counts

# Temporaries of the bootstrap kernel beyond the arrays counted per replicate
# (copies made by broadcasting, transposes and LAPACK's Fortran-order
# inputs). With it, numpy peaks at 0.29-0.39 of the planned bytes per
# replicate (same benchmark).
BOOTSTRAP_WORKSPACE_OVERHEAD = 1.5
# Largest working set of one bootstrap batch. The batch GEMM runs at the BLAS
# rate long before this (n=1000, p=100, 1000 targets: 28 replicates; the
# kernel alone reaches 66-70% of the one-thread GEMM rate from 4 to 28, and
# smaller caps did not change the whole fit, benchmarks/RESULTS.md); bigger
# batches only add page faults for their temporaries.
MAX_BOOTSTRAP_BATCH_BYTES = 256e6
# Least work (flops of all replicates) for which the bootstrap runs batches
# side by side on the BLAS threads: below it, starting the threads costs more
# than the second core gives (2 or 100 replicates of 40 rows, 1e6 flops at
# most: 3.0 ms in turn against 3.6 ms side by side); from 5e7 (10,000
# replicates of 40 rows, 100,000 of 16) both are as fast at best and side by
# side faster in median.
SIDE_BY_SIDE_MIN_FLOPS = 1e7


def bootstrap_flops_per_replicate(n_samples, n_features, n_targets):
    """Floating-point work of one bootstrap replicate, for ``device="auto"``."""
    rank = min(n_samples, n_features)
    return (
        2.0 * n_samples * (n_features * n_targets + rank * max(n_samples, n_features))
    )


def check_replicate_weights(ids, weights):
    """Refuse replicates whose rows all have sample_weight 0: no fit exists."""
    empty = np.flatnonzero(weights.sum(axis=1) <= 0)
    if empty.size:
        raise ValueError(
            f"Bootstrap replicate {int(ids[empty[0]])} drew only samples whose "
            f"sample_weight is 0, so its weighted fit is undefined. Give more "
            f"samples a positive sample_weight, or leave out the samples of "
            f"weight 0 before fitting."
        )


class BootstrapRidgeProblem(Portable):
    """Data on the device, solving batches of bootstrap replicates as weights.

    ``problem(ids)`` returns the coefficients, of shape (batch, n_targets,
    n_features), and intercepts, (batch, n_targets), of replicates ``ids``,
    whose bootstrap counts (:func:`skbatch.random.bootstrap_counts`) weight
    the rows.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Host design matrix, computed on in float64 unless float32.
    y : ndarray of shape (n_samples,) or (n_samples, n_targets)
    alpha : float or ndarray of shape (n_targets,)
    fit_intercept : bool
    sample_weight : ndarray of shape (n_samples,) or None
    groups, block_size, block_scheme, entropy :
        The resampling scheme of :func:`skbatch.random.bootstrap_counts`.
    backend, dtype :
    n_bootstrap : int
    max_batch_size : int or None, default=None
        Fewer replicates per batch than the kernel's own bound (the host's
        room for their results, on a GPU).
    """

    desc = "replicates"

    def __init__(
        self,
        X,
        y,
        alpha,
        *,
        fit_intercept,
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
        xp = backend.xp
        self.backend, self.dtype, self.xp = backend, dtype, xp
        self.fit_intercept = fit_intercept
        self.sample_weight = sample_weight
        self.groups, self.block_size, self.entropy = groups, block_size, entropy
        self.block_scheme = block_scheme
        self.n_items = n_bootstrap
        X = np.asarray(X, dtype=np.float64 if X.dtype != np.float32 else None)
        Y = np.asarray(y, dtype=dtype).reshape(X.shape[0], -1)
        self.n_samples, n_features = X.shape
        n_targets = Y.shape[1]
        flops = n_bootstrap * bootstrap_flops_per_replicate(
            self.n_samples, n_features, n_targets
        )
        self.threads = flops >= SIDE_BY_SIDE_MIN_FLOPS
        self.runs = self.moment_runs(
            self.n_samples, n_features + bool(fit_intercept), groups, block_size
        )
        n_runs = 0 if self.runs is None else len(self.runs)
        self.fixed_bytes, self.device_bytes_per_item, self.host_bytes_per_item = (
            self.nbytes(
                self.n_samples,
                n_features,
                n_targets,
                np.dtype(dtype).itemsize,
                copies_y=backend.library != "numpy" or Y.dtype != y.dtype,
                gather_buffers=self.gather_buffers(
                    backend,
                    self.n_samples,
                    n_features + bool(fit_intercept),
                    n_targets,
                    threads=self.threads,
                    runs=n_runs,
                ),
                runs=n_runs,
            )
        )
        alpha = np.array(
            np.broadcast_to(np.asarray(alpha, dtype=np.float64).ravel(), (n_targets,))
        )
        largest = max(1, int(MAX_BOOTSTRAP_BATCH_BYTES // self.device_bytes_per_item))
        self.max_batch_size = (
            largest if max_batch_size is None else min(largest, max_batch_size)
        )
        self.dual = n_features > self.n_samples
        if fit_intercept:
            # Centring X on its overall mean once keeps each replicate's mean
            # small, so the algebraic centring in the kernels loses no digits.
            offset = X.mean(axis=0, dtype=np.float64)
            self.x_offset = backend.asarray(offset, dtype)
            X = X - offset
            if not self.dual:
                # A column of ones makes the weighted sums of X and Y fall out
                # of the two batch GEMMs as one more row.
                X = np.hstack([X, np.ones((self.n_samples, 1))])
        self.run_products = None
        if self.runs is not None:
            # Each run's X'WX and X'WY (the ones column included), in float64
            # once: a replicate's products are then its counts of the runs
            # times these, no pass over its rows.
            self.run_products = tuple(
                backend.asarray(product, dtype)
                for product in _linalg.run_products(
                    np.asarray(X, dtype=np.float64),
                    np.asarray(Y, dtype=np.float64),
                    self.runs,
                    sample_weight,
                    xp=np,
                )
            )
            self.run_starts = np.array([rows[0] for rows in self.runs])
        library = _backends.get(backend.library)
        if not self.dual and not _linalg.gathers_drawn_rows(
            library, backend.device, self.n_samples, X.shape[1], n_targets
        ):
            # Column-major, so that X' is contiguous for the stacked products:
            # the kernel weights X' row by row, 3x faster than through a
            # strided view for few samples, 25% for n=1000. Products over each
            # replicate's drawn rows gather whole rows instead, 2-4% faster
            # from a row-major X.
            X = np.asfortranarray(X)
        self.X = backend.asarray(X, dtype)
        del X
        self.Y = backend.asarray(Y, dtype)
        self.K0 = self.X @ self.X.T if self.dual else None
        self.scratch = _linalg.Scratch()
        self.results = _linalg.ResultPool()
        same = bool(np.all(alpha == alpha[0]))
        self.fixed_alpha = float(alpha[0]) if same and alpha[0] > 0 else None
        self.alpha = backend.asarray(alpha, dtype)

    @staticmethod
    def moment_runs(n_samples, n_columns, groups, block_size):
        """The rows of each run when replicates draw whole runs, for products
        summed from the runs' own: a cluster bootstrap (``groups`` without
        ``block_size``) of runs whose products (runs x ``n_columns``^2) take
        no more memory than X (``n_samples`` x ``n_columns``); else None.

        Forming a replicate's X'WX from its rows costs ``2 n q^2`` and from
        its runs' ``2 R q^2``: with R runs of many rows, far less.
        """
        if groups is None or block_size is not None or n_columns > n_samples:
            return None
        _, labels = np.unique(np.asarray(groups), return_inverse=True)
        labels = labels.reshape(-1)
        n_runs = int(labels.max()) + 1
        if n_runs * n_columns > n_samples:
            return None
        order = np.argsort(labels, kind="stable")
        bounds = np.cumsum(np.bincount(labels, minlength=n_runs))[:-1]
        return np.split(order, bounds)

    @staticmethod
    def gather_buffers(backend, n_samples, n_columns, n_targets, threads=True, runs=0):
        """Buffers of Y's drawn rows held at once, for :meth:`nbytes`.

        One per thread that runs batches
        (:func:`skbatch._backends.side_by_side.cpu_workers`
        when ``threads``, else one) where the kernel gathers drawn rows, none
        where it stacks its products (:func:`skbatch._kernels.linalg.
        gathers_drawn_rows`; ``n_columns`` counts the ones column) or sums
        those of ``runs`` runs (:meth:`moment_runs`).
        """
        library = _backends.get(backend.library)
        if runs or not _linalg.gathers_drawn_rows(
            library, backend.device, n_samples, n_columns, n_targets
        ):
            return 0
        return cpu_workers(backend) if threads else 1

    @staticmethod
    def nbytes(
        n_samples,
        n_features,
        n_targets,
        itemsize,
        copies_y,
        gather_buffers=1,
        runs=0,
    ):
        """``(fixed, device per replicate, host per replicate)`` bytes.

        ``gather_buffers``: see :meth:`gather_buffers`. ``runs``: the runs
        whose products the replicates sum (:meth:`moment_runs`), 0 when
        they are formed from the rows.
        """
        n, p, t = n_samples, n_features, n_targets
        # X centred (with a ones column in the primal) on the device, and the
        # centred float64 copy it is made from.
        fixed = (itemsize + 8) * n * (p + 1)
        if copies_y:
            fixed += itemsize * n * t
        if p > n:
            fixed += itemsize * n**2
            elements = 5 * n * n + 5 * n * p + 3 * n * t + 3 * p * t + 4 * n + 2 * t
        else:
            elements = 2 * p * n + 4 * p * p + 5 * p * t + 4 * n + 2 * t
            # The drawn rows of Y gathered for one replicate at a time, on the
            # CPU, into a buffer per thread (skbatch/_kernels/linalg/weighted.py,
            # _weighted_products).
            fixed += gather_buffers * min(itemsize * n * t, _linalg.MAX_GATHER_BYTES)
            if runs:
                # Every run's products held (and, while they are formed, in
                # float64 beside one run's rows of X and Y), no replicate's
                # weighted copy of X.
                q = p + 1
                products = runs * q * (q + t)
                fixed += itemsize * products + 8 * (products + n * (q + t))
                elements = 4 * p * p + 5 * p * t + 4 * n + 2 * t + runs
        device = BOOTSTRAP_WORKSPACE_OVERHEAD * itemsize * elements
        # Counts and weights of one replicate, and its result in the compute
        # dtype with what the accumulator makes of it: a float64 copy of a
        # batch neither float64 nor float32, or BCa's squared deviations
        # (skbatch/streaming/): at most two float64 copies.
        host = 8.0 * (2 * n + 2 * t * (p + 1))
        return fixed, device, host

    def weights(self, ids):
        """Row weights (len(ids), n_samples) of replicates ``ids``."""
        return self._draw(ids)[0]

    def _draw(self, ids):
        """Row weights of replicates ``ids`` and, when the replicates sum
        the runs' products, their count of each run (else None)."""
        counts = bootstrap_counts(
            self.entropy,
            ids,
            self.n_samples,
            self.groups,
            block_size=self.block_size,
            block_scheme=self.block_scheme,
        )
        weights = counts.astype(np.float64)
        if self.sample_weight is not None:
            weights *= self.sample_weight
            check_replicate_weights(ids, weights)
        run_counts = None
        if self.run_products is not None:
            run_counts = self.backend.asarray(
                np.ascontiguousarray(counts[:, self.run_starts]), self.dtype
            )
        return self.backend.asarray(weights, self.dtype), run_counts

    def __call__(self, ids):
        xp = self.xp
        w, run_counts = self._draw(ids)
        args = (w, self.alpha, self.fixed_alpha)
        if self.dual:
            coef, x_mean, y_mean = _linalg.weighted_dual_coef(
                self.X, self.K0, self.Y, *args, fit_intercept=self.fit_intercept, xp=xp
            )
        else:
            products = None
            if run_counts is not None:
                products = _linalg.run_weighted_products(
                    run_counts, *self.run_products, xp
                )
            coef, x_mean, y_mean = _linalg.weighted_primal_coef(
                self.X,
                self.Y,
                *args,
                fit_intercept=self.fit_intercept,
                xp=xp,
                scratch=self.scratch,
                results=self.results,
                products=products,
            )
        if self.fit_intercept:
            offset = x_mean + self.x_offset
            with _linalg.one_thread(coef):
                intercept = y_mean - (coef @ offset[:, :, None])[:, :, 0]
        else:
            shape = coef.shape[:2]
            intercept = xp.zeros(shape, dtype=coef.dtype, device=array_device(coef))
        return coef, intercept

    def recycle(self, result):
        """Take back a result once reduced: its coefficients serve again."""
        self.results.give(result[0])
