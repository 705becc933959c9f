"""The batched linear path: ridge replicates solved in batches on a device.

A linear model (ridge or least squares at fixed alphas, a banded ridge held
at its choices) whose ``coef_`` / ``intercept_`` are bootstrapped takes this
path: a resample is the count of each row as its weight, and a batch of
replicates is a batch of weighted Gram matrices and solves (for a bootstrap
of whole runs, each replicate's Gram matrix is its counts of the runs times
the runs' own, formed once)
(:class:`~skbatch._ridge.problems.BootstrapRidgeProblem`,
:class:`~skbatch._ridge.banded.bootstrap.BandedBootstrapProblem`) that the
engine runs under the memory budget.
"""

import contextlib
import functools

import numpy as np
from scipy import sparse

# Private to scikit-learn, without a public twin: sample_weight is checked
# as Ridge checks it; tests/test_private_names.py checks what is relied on
# here.
from sklearn.utils.validation import _check_sample_weight

from .. import _backends
from .._engine.preflight import batched_budget
from .._ridge.banded.bootstrap import (
    BandedBootstrapProblem,
    HeldBands,
    banded_bootstrap_nbytes,
)
from .._ridge.problems import BootstrapRidgeProblem, bootstrap_flops_per_replicate
from .._ridge.problems import replicates as _replicates
from .._ridge.spec import check_column_scales, resolve_dtype, ridge_spec
from ..banded import BandedRidge
from ..memory import GB
from .attributes import LINEAR_ATTRIBUTES
from .jackknife import check_linear_jackknife
from .summaries import accumulator_bytes, refuse_replicates


def _n_runs(n_samples, n_columns, groups, block_size):
    """Runs whose products the replicates sum
    (:meth:`BootstrapRidgeProblem.moment_runs`), 0 when they are formed
    from the rows."""
    runs = BootstrapRidgeProblem.moment_runs(n_samples, n_columns, groups, block_size)
    return 0 if runs is None else len(runs)


def linear_shapes(estimator, attributes, tune_per_replicate, X, y):
    """Shapes of coef_ / intercept_ before fitting, for the batched path.

    None when the replicates will not take the batched path (not a ridge
    problem, other attributes, re-tuning per replicate, X not dense numbers):
    the shapes are then known only after the fit. A ``BandedRidge`` takes
    the batched path at its choices held fixed.
    """
    spec = ridge_spec(estimator)
    banded = isinstance(estimator, BandedRidge) and not tune_per_replicate
    if not banded and (spec is None or (tune_per_replicate and spec.tunes)):
        return None
    if sparse.issparse(X) or X.dtype.kind not in "biuf" or callable(attributes):
        return None
    if isinstance(attributes, str):
        names = LINEAR_ATTRIBUTES if attributes == "auto" else (attributes,)
    else:
        names = tuple(attributes)
    if not set(names) <= set(LINEAR_ATTRIBUTES):
        return None
    n_features = X.shape[1]
    if y.ndim == 1:
        return {"coef_": (n_features,), "intercept_": ()}
    n_targets = y.shape[1]
    all_shapes = {"coef_": (n_targets, n_features), "intercept_": (n_targets,)}
    return {name: all_shapes[name] for name in names}


def linear_model(estimator, names, X, y, fit_params):
    """``(spec, dtype)`` of the replicates' ridge problem at fixed alphas when
    the batched path solves it, else None: a :class:`RidgeSpec`, or the
    :class:`HeldBands` of a banded ridge held at its choices."""
    if names is None or not set(names) <= set(LINEAR_ATTRIBUTES):
        return None
    if not set(fit_params) <= {"sample_weight"}:
        return None
    if sparse.issparse(X) or X.dtype.kind not in "biuf":
        return None
    held = getattr(estimator, "__skbatch_held_bands__", None)
    if held is not None:
        held = held(X.shape[1], 1 if y.ndim == 1 else y.shape[1])
        return held, held.dtype
    spec = ridge_spec(estimator)
    if spec is None or spec.tunes:
        return None
    n_targets = 1 if y.ndim == 1 else y.shape[1]
    if spec.alphas.size not in (1, n_targets):
        # The estimator's fit refuses a wrong number of alphas.
        return None
    return spec, spec.dtype


def linear_flops(shapes, n_bootstrap, X, y):
    """Flops of the replicates on the batched path; None when they do not
    take it (``shapes`` from :func:`linear_shapes` is None)."""
    if shapes is None:
        return None
    n_targets = 1 if y.ndim == 1 else y.shape[1]
    return n_bootstrap * bootstrap_flops_per_replicate(
        X.shape[0], X.shape[1], n_targets
    )


def full_fit_threads(flops, n_bootstrap, max_flops):
    """The BLAS threads of the fit on all data: one when it costs at most
    ``max_flops`` per replicate (``skbatch.bootstrap``'s
    FULL_FIT_ONE_THREAD_MAX_FLOPS) and the replicates' batches run side by
    side (SIDE_BY_SIDE_MIN_FLOPS); otherwise the threads as they are."""
    if (
        flops is not None
        and flops >= _replicates.SIDE_BY_SIDE_MIN_FLOPS
        and flops / n_bootstrap <= max_flops
    ):
        return _backends.get("numpy").one_thread()
    return contextlib.nullcontext()


def check_linear_budget(settings, estimator, inputs, shapes, backend):
    """The batched path's preflight, before the fit on all data: in float64
    and with a copy of y, the most that path can take (for a banded ridge,
    every target at one candidate of all columns); with BCa, its jackknife
    too. Then the scales of X's columns."""
    X, y, groups, data = inputs.X, inputs.y, inputs.groups, inputs.data
    n_samples, n_features = X.shape
    n_targets = 1 if y.ndim == 1 else y.shape[1]
    if isinstance(estimator, BandedRidge):
        fit_intercept = estimator.fit_intercept
        # Every band's penalty is alpha over a weight of at most 1.
        alphas = estimator.alphas
        planned = banded_bootstrap_nbytes(
            n_samples,
            n_features,
            n_targets,
            [(n_features, n_targets)],
            8,
            backend,
            fit_intercept=fit_intercept,
        )
    else:
        spec = ridge_spec(estimator)
        fit_intercept, alphas = spec.fit_intercept, spec.alphas
        runs = _n_runs(n_samples, n_features + 1, groups, settings.block_size)
        planned = BootstrapRidgeProblem.nbytes(
            n_samples,
            n_features,
            n_targets,
            8,
            copies_y=True,
            gather_buffers=BootstrapRidgeProblem.gather_buffers(
                backend, n_samples, n_features + 1, n_targets, runs=runs
            ),
            runs=runs,
        )
    summaries = accumulator_bytes(settings, shapes)
    batched_budget(
        backend,
        settings.max_memory_gb,
        data,
        summaries,
        *planned,
        functools.partial(refuse_replicates, settings),
    )
    if settings.ci_method == "bca":
        check_linear_jackknife(
            settings,
            X,
            y,
            groups,
            data,
            summaries,
            shapes,
            banded=isinstance(estimator, BandedRidge),
        )
    # As BatchedRidge checks them: spreads past what the SVD resolves are
    # refused only where the smallest alpha does not shrink the smaller
    # features to within rounding (every replicate solves at one of these
    # alphas or a larger one).
    sample_weight = inputs.fit_params.get("sample_weight")
    if sample_weight is not None:
        sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64)
    check_column_scales(
        X,
        np.float64,
        backend,
        fit_intercept=fit_intercept,
        sample_weight=sample_weight,
        alphas=alphas,
    )


def run_linear(settings, linear, inputs, entropy, backend, run, accumulators):
    """The batched path: solve every replicate of the problem ``linear`` (from
    :func:`linear_model`) in batches on ``backend``, each into ``accumulators``
    (name -> accumulator). ``run`` is :func:`skbatch._engine.run_problem`."""
    X, y, groups, fit_params = inputs.X, inputs.y, inputs.groups, inputs.fit_params
    data = inputs.data
    spec, dtype = linear
    dtype = resolve_dtype(dtype, backend, X.dtype)
    sample_weight = fit_params.get("sample_weight")
    if sample_weight is not None:
        sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64)
    n_targets = 1 if y.ndim == 1 else y.shape[1]
    summaries = accumulator_bytes(
        settings, {name: acc.shape for name, acc in accumulators.items()}
    )
    resampling = dict(
        fit_intercept=spec.fit_intercept,
        sample_weight=sample_weight,
        groups=groups,
        block_size=settings.block_size,
        block_scheme=settings.block_scheme,
        entropy=entropy,
        backend=backend,
        dtype=dtype,
        n_bootstrap=settings.n_bootstrap,
    )
    banded = isinstance(spec, HeldBands)
    if banded:
        del resampling["fit_intercept"]
        planned = BandedBootstrapProblem.nbytes(
            X, y, spec, backend, dtype, settings.n_bootstrap
        )
    else:
        n_columns = X.shape[1] + spec.fit_intercept
        runs = _n_runs(X.shape[0], n_columns, groups, settings.block_size)
        planned = BootstrapRidgeProblem.nbytes(
            *X.shape,
            n_targets,
            dtype.itemsize,
            copies_y=backend.library != "numpy" or y.dtype != dtype,
            gather_buffers=BootstrapRidgeProblem.gather_buffers(
                backend, X.shape[0], n_columns, n_targets, runs=runs
            ),
            runs=runs,
        )
    batch_gb, max_items = batched_budget(
        backend,
        settings.max_memory_gb,
        data,
        summaries,
        *planned,
        functools.partial(refuse_replicates, settings),
    )

    def reduce(ids, result):
        coef, intercept = result
        for name, accumulator in accumulators.items():
            shape = (len(ids), *accumulator.shape)
            if name == "coef_":
                block = coef.reshape(shape)
            elif spec.fit_intercept:
                block = intercept.reshape(shape)
            else:
                # Shaped like the estimator's own (0.0 for sklearn).
                block = np.zeros(shape)
            accumulator.update(block, ids=ids)

    with backend.context():
        if banded:
            problem = BandedBootstrapProblem(
                X, y, spec, **resampling, max_batch_size=max_items
            )
        else:
            problem = BootstrapRidgeProblem(
                X, y, spec.alphas, **resampling, max_batch_size=max_items
            )
        # batch_gb is what the preflight left for the batches once all
        # that is held is counted; the engine takes the problem's fixed
        # bytes off the budget it is given.
        run(
            problem,
            reduce,
            max_memory_gb=batch_gb + problem.fixed_bytes / GB,
            verbose=settings.verbose,
        )
