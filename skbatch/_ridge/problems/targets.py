"""The targets of ``BatchedRidge`` in batches through one solver
(:class:`TargetProblem`, :func:`fit_targets`), and predictions of a fitted
model in batches (:class:`PredictionProblem`)."""

import copy

import numpy as np

from ..._engine import run_problem
from ..._engine.targets import TargetColumns
from .solver import CV_WORKSPACE_OVERHEAD, results_bytes

# A GEMM over this many targets already runs at the BLAS peak; larger target
# batches only add page faults and cache misses (chunked targets were faster
# and used half the memory). torch's CPU GEMM peaks at smaller batches: its
# K-fold fit took 6.2 s at 512 targets, 6.8 s at 2048.
MAX_TARGETS_PER_BATCH = 2048
MAX_TARGETS_PER_BATCH_TORCH_CPU = 512


class TargetProblem:
    """The targets of a fit: alpha chosen and coefficients fit per target.

    ``problem(ids)`` gives coefficients, intercepts, the best alpha's index,
    its score and the scores of every alpha of targets ``ids``; with a fixed
    ``alpha``, only coefficients and intercepts. ``Y`` is a host ndarray or
    a :class:`~skbatch._engine.targets.TargetColumns` (targets read from disk one
    batch at a time, whose ``chunk_width`` batches follow).
    """

    desc = "targets"
    # The kernels are pure functions of their batch.
    threads = True

    def __init__(self, solver, Y, alpha=None):
        if not isinstance(Y, TargetColumns):
            Y = TargetColumns(Y)
        self.solver, self.Y, self.alpha = solver, Y, alpha
        self.backend = solver.backend
        self.n_items = Y.shape[1]
        self.out_of_core, self.chunk_width = Y.out_of_core, Y.chunk_width
        p = solver.n_features
        n_alphas = solver.alphas.size
        itemsize = np.dtype(solver.dtype).itemsize
        self.fixed_bytes = solver.fixed_bytes
        if not self.backend.is_gpu:
            # The results of every target (fit_targets) share host memory.
            self.fixed_bytes += results_bytes(self.n_items, p, n_alphas)
        self.device_bytes_per_item = (
            CV_WORKSPACE_OVERHEAD * itemsize * solver.values_per_target()
        )
        # Its coefficients, intercept, best alpha and score, and all scores,
        # and its column as read from disk.
        self.host_bytes_per_item = 8 * (p + 3 + n_alphas) + Y.host_bytes_per_column
        backend = self.backend
        self.max_batch_size = (
            MAX_TARGETS_PER_BATCH_TORCH_CPU
            if backend.library == "torch" and not backend.is_gpu
            else MAX_TARGETS_PER_BATCH
        )

    # Id of the first column of Y: 0, or the first target of a batch that a
    # task on another process received alone (task_inputs, bind).
    first = 0

    def _to_device(self, ids):
        # The engine hands out consecutive ids: a slice is a view, where a
        # gather would copy every target once more before centring copies it.
        start, stop = int(ids[0]) - self.first, int(ids[-1]) + 1 - self.first
        block = self.Y.read(start, stop)
        if stop - start != len(ids):
            block = block[:, ids - self.first - start]
        return self.solver.backend.asarray(block, self.solver.dtype)

    def task_inputs(self, ids):
        """The columns of targets ``ids``, for a task elsewhere.

        The problem sent to a dask worker leaves the targets behind
        (``__getstate__``): each task receives the columns of its own batch
        (``skbatch._engine.run_on_cluster``), so a worker gets its share of
        ``Y`` rather than all of it. Files on this host are read here; a dask
        array's columns are computed on the cluster, next to its chunks
        (:meth:`~skbatch._engine.targets.TargetColumns.task_block`).
        """
        start, stop = int(ids[0]), int(ids[-1]) + 1
        return start, self.Y.task_block(start, stop)

    def bind(self, first, block):
        """This problem on the columns ``block`` of targets ``first`` on."""
        bound = copy.copy(self)
        bound.Y, bound.first = TargetColumns(block), first
        return bound

    def __getstate__(self):
        return {name: value for name, value in vars(self).items() if name != "Y"}

    def __call__(self, ids):
        Y = self._to_device(ids)
        if self.alpha is None:
            return self.solver.select_and_fit(Y)
        return self.solver.fit_fixed(Y, self.alpha)


def fit_targets(solver, Y, *, alpha_per_target, batch_size, max_memory_gb, verbose):
    """Choose alphas and fit all targets of ``Y`` (n_samples x t).

    ``Y`` is a host ndarray or a :class:`~skbatch._engine.targets.TargetColumns`.

    Returns
    -------
    coef, intercept, best, best_score, scores : ndarrays
        Of shapes (t, p), (t,), (t,) (indices into the alphas), (t,) and
        (t, n_alphas).
    batch_size : int
        The batch size the targets were read in (for targets read from
        disk, whole chunks of theirs).
    """
    n_targets = Y.shape[1]
    n_alphas = solver.alphas.size
    # In the compute dtype, as scikit-learn's Ridge keeps float32 input's.
    coef = np.empty((n_targets, solver.n_features), dtype=solver.dtype)
    intercept = np.empty(n_targets, dtype=solver.dtype)
    best = np.empty(n_targets, dtype=np.int64)
    best_score = np.empty(n_targets)
    scores = np.empty((n_targets, n_alphas))

    def reduce_all(ids, result):
        coef[ids], intercept[ids], best[ids], best_score[ids], scores[ids] = result

    def reduce_coef(ids, result):
        coef[ids], intercept[ids] = result

    problem = TargetProblem(solver, Y)
    run_args = dict(max_memory_gb=max_memory_gb, batch_size=batch_size, verbose=verbose)
    plan = run_problem(problem, reduce_all, **run_args)
    if not alpha_per_target and n_targets > 1:
        mean, _ = mean_over_scored_targets(scores)
        shared = int(np.argmax(np.nan_to_num(mean, nan=-np.inf)))
        alpha = float(solver.alphas[shared])
        run_problem(TargetProblem(solver, Y, alpha), reduce_coef, **run_args)
        best[:] = shared
        best_score[:] = scores[:, shared]
    return coef, intercept, best, best_score, scores, plan.batch_size


def mean_over_scored_targets(scores):
    """Mean score of each alpha over the targets that have a score.

    A target NaN at every alpha (a constant target scored by correlation)
    says nothing about which alpha is best: it is left out, rather than
    making every mean NaN and the first alpha the choice.

    Parameters
    ----------
    scores : ndarray of shape (n_targets, n_alphas)

    Returns
    -------
    mean : ndarray of shape (n_alphas,)
        NaN everywhere when no target has a score.
    scored : ndarray of bool of shape (n_targets,)
        The targets averaged.
    """
    scored = ~np.all(np.isnan(scores), axis=1)
    if not scored.any():
        return np.full(scores.shape[1], np.nan), scored
    return scores[scored].mean(axis=0), scored


def fit_flops(n_samples, n_features, n_targets, n_alphas, scheme, n_candidates=1):
    """Floating-point work of a ridge fit, for ``device="auto"``.

    The thin SVD of ``n_candidates`` designs of (``n_samples``,
    ``n_features``) and their projection of every target at every alpha,
    on the full data and on each fold of the split ``scheme`` (one fit when
    it has no folds: leave-one-out, GCV).
    """
    rank = min(n_samples, n_features)
    n_fits = 1 + len(getattr(scheme, "splits", None) or ())
    return (
        2.0
        * n_fits
        * n_candidates
        * (n_samples * n_features * rank + n_samples * rank * n_targets * n_alphas)
    )


class PredictionProblem:
    """Predictions of fitted coefficients, in batches of targets.

    ``problem(ids)`` gives the predictions (len(ids), n_rows) of targets
    ``ids`` for the rows of ``X``.

    ``out_of_core`` (whether the reducer writes the predictions to, or
    compares them with, an out-of-core array), ``chunk_width`` (columns per
    chunk of that array) and ``reader_bytes_per_item`` (host bytes the
    reducer holds per target beyond the predictions) describe what the
    reducer does with each batch.
    """

    desc = "predicted targets"
    threads = True
    max_batch_size = None

    def __init__(
        self,
        X,
        coef,
        intercept,
        backend,
        dtype,
        *,
        out_of_core=False,
        chunk_width=None,
        reader_bytes_per_item=0,
    ):
        self.backend, self.dtype = backend, dtype
        self.out_of_core, self.chunk_width = out_of_core, chunk_width
        self.coef, self.intercept = coef, intercept
        self.n_items = coef.shape[0]
        self.X = backend.asarray(X, dtype)
        itemsize = np.dtype(dtype).itemsize
        out_itemsize = np.result_type(X.dtype, dtype).itemsize
        self.fixed_bytes = X.nbytes
        # A target's coefficients and its predictions, on the device...
        self.device_bytes_per_item = itemsize * (X.shape[0] + X.shape[1])
        # ... and its predictions on the host.
        self.host_bytes_per_item = out_itemsize * X.shape[0] + reader_bytes_per_item

    def __call__(self, ids):
        backend, dtype = self.backend, self.dtype
        coef = backend.asarray(self.coef[ids], dtype)
        return coef @ self.X.T + backend.asarray(self.intercept[ids], dtype)[:, None]
