"""BatchedRidge: ridge regression for one to hundreds of thousands of targets."""

import functools
import numbers
import warnings

import numpy as np
from scipy import sparse
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin

# Private to scikit-learn, without a public twin: the parameter constraints
# its estimators declare (_parameter_constraints, checked by
# _validate_params, raising InvalidParameterError), and its check of
# sample_weight, as Ridge checks it. tests/test_private_names.py checks what
# is relied on here.
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import (
    _check_sample_weight,
    check_array,
    check_is_fitted,
    validate_data,
)

from . import _linalg
from ._base import (
    DeviceMixin,
    as_output,
    atomic_fit,
    check_input_device,
    check_max_memory_gb,
    check_verbose,
    host_input,
)
from ._engine import active_dask_client, run_problem
from ._ridge.cv import MIN_SAMPLES, cv_scheme
from ._ridge.problems import (
    PredictionProblem,
    RidgeSolver,
    check_solver_memory,
    fit_flops,
    fit_targets,
    mean_over_scored_targets,
)
from ._ridge.spec import (
    SCORINGS,
    batched_ridge_spec,
    check_alphas,
    check_column_scales,
    resolve_dtype,
)
from ._targets import (
    NUMERIC_KINDS,
    ColumnWriter,
    TargetColumns,
    check_target_array,
    out_of_core_kind,
    shares_data,
)
from ._timeseries import autocorrelation_warning
from .backend import resolve_backend
from .random import check_groups

__all__ = ["AlphaEdgeWarning", "AutocorrelationWarning", "BatchedRidge"]

# Half decades from 0.1 to 1e5: small alphas for clean targets, up to the
# 1e4-1e5 that noisy targets with thousands of standardised rows need.
DEFAULT_ALPHAS = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1e3, 3e3, 1e4, 3e4, 1e5)
# After fit, warn when more than this share of targets chose the smallest or
# the largest alpha ...
EDGE_SHARE = 0.05
# ... while their score there still beat the next alpha's by more than this
# share of their score's range over the grid (a flat tail is not a reason to
# extend the grid: pure-noise targets flatten out at the largest alpha).
EDGE_IMPROVEMENT = 0.01
# Leave-one-out and GCV warn when the median over targets of the lag-1
# autocorrelation of the fit's residuals (within runs) exceeds both figures.
# 0.3, above the resampling floor of skbatch._timeseries.AUTOCORRELATION_WARN:
# LOO is misled only once a row's neighbours predict its leave-one-out
# residual (median alpha 4.6e3 by LOO where leave-one-run-out chose 1e6 on
# AR(0.9) noise), not at the milder dependence that biases standard errors.
LOO_AUTOCORRELATION_WARN = 0.3
# Targets whose residuals the check reads, evenly spaced over the targets:
# a median over this many is steady, at the cost of one (n x p) @ (p x 64)
# product.
AUTOCORRELATION_TARGETS = 64


class AutocorrelationWarning(UserWarning):
    """The data are autocorrelated where the chosen method assumes they are not.

    Raised by :class:`BatchedRidge` (and :class:`BandedRidge`) when exact
    leave-one-out or GCV chooses alpha (or band weights) on targets whose
    residuals are clearly autocorrelated (time series): a leave-one-run-out
    CV is then the right choice. A subclass of
    ``UserWarning``, so that ``warnings.filterwarnings`` can single it out.
    """


def warn_if_autocorrelated(
    X, targets, coef, intercept, groups, cv, *, n_alphas, n_candidates=1, stacklevel
):
    """Warn when LOO or GCV chose anything on autocorrelated residuals.

    Something is chosen when there is more than one alpha (``n_alphas``) or
    more than one candidate of band weights (``n_candidates``, a
    ``BandedRidge`` search); nothing is checked otherwise, nor under a
    K-fold ``cv`` (a splitter by runs is the remedy). The residuals of the
    fit of up to :data:`AUTOCORRELATION_TARGETS` targets (evenly spaced;
    the first ones of targets on disk, one read),
    their lag-1 autocorrelation within the runs ``groups``
    (:func:`skbatch._timeseries.lag1_autocorrelation`), and its median over
    those targets against :data:`LOO_AUTOCORRELATION_WARN` and
    standard errors of white noise
    (:func:`skbatch._timeseries.autocorrelation_warning`).
    A dask ``y`` with a cluster active is not checked: its blocks are
    computed on the workers only, never in the calling process.
    """
    chosen = [
        name
        for name, count in (("alpha", n_alphas), ("band weights", n_candidates))
        if count > 1
    ]
    if not chosen or not (cv is None or isinstance(cv, str)):
        return
    if targets.kind == "dask" and active_dask_client() is not None:
        return
    n_targets = coef.shape[0]
    count = min(n_targets, AUTOCORRELATION_TARGETS)
    if targets.out_of_core:
        columns = np.arange(count)
        Y = targets.read(0, count)
    else:
        columns = np.unique(np.linspace(0, n_targets - 1, count).round().astype(int))
        Y = targets.Y[:, columns]
    residuals = np.asarray(Y, dtype=np.float64) - (
        X @ coef[columns].T.astype(X.dtype, copy=False) + intercept[columns]
    )
    found = autocorrelation_warning(residuals, groups, floor=LOO_AUTOCORRELATION_WARN)
    if found is None or found[0] <= found[1]:
        return
    median, threshold, n_series = found
    scheme = "leave-one-out" if cv is None else "generalized cross-validation"
    where = "within the runs of groups" if groups is not None else "over all rows"
    what = " and ".join(chosen)
    verb = "were" if chosen[-1] == "band weights" else "was"
    warnings.warn(
        f"{what} {verb} chosen by {scheme} (cv={cv!r}) on targets whose residuals "
        f"are autocorrelated: median lag-1 autocorrelation {median:.2f} {where} "
        f"over {n_series} targets, above {threshold:.2f}. Neighbouring rows of a "
        f"time series predict a left-out row, so {scheme} favours too little "
        f"regularisation. Use cv=LeaveOneGroupOut() (or GroupKFold) with "
        f"fit(X, y, groups=runs).",
        AutocorrelationWarning,
        stacklevel=stacklevel,
    )


class AlphaEdgeWarning(UserWarning):
    """Many targets chose an edge of ``alphas`` while still improving there.

    Raised after fit by :class:`BatchedRidge` (and :class:`BandedRidge`):
    the grid likely stops too early, and extending it may change the chosen
    alphas. A subclass of ``UserWarning``, so that
    ``warnings.filterwarnings`` can single it out. The wrappers'
    (:class:`PermutationScorer`, :class:`BootstrapEstimator`) refits on
    permuted or resampled data do not raise it: their fit on all data has
    said it once, and a permuted target is noise by design.
    """


def warn_at_grid_edges(alphas, best, scores, no_model):
    """Warn when many targets chose an edge of ``alphas`` while improving there.

    ``scores`` (n_targets, n_alphas) and ``best`` (n_targets,) index the
    alphas. ``no_model(columns)`` gives the score without a model (the limit
    of an infinite alpha) of the targets ``columns``, or None when there is
    none. A score that approaches that limit from below, close to it, is a
    target with nothing to predict: pure noise always prefers the largest
    alpha, whatever the grid, and does not say that the grid stops too
    early. The limit takes a pass over the targets, so it is asked only when
    the share of targets at the largest alpha would otherwise warn, and only
    for them.
    """
    if alphas.size < 2:
        return
    order = np.argsort(alphas)
    # The range of each target's defined scores; -inf where none is (not
    # nanmax's warning about every constant target of a correlation).
    scored = ~np.isnan(scores)
    span = np.max(np.where(scored, scores, -np.inf), axis=1) - np.min(
        np.where(scored, scores, np.inf), axis=1
    )
    for edge, neighbour, which in (
        (order[0], order[1], "smallest"),
        (order[-1], order[-2], "largest"),
    ):
        with np.errstate(invalid="ignore"):
            tolerance = EDGE_IMPROVEMENT * span
            counted = (best == edge) & (
                scores[:, edge] - scores[:, neighbour] > tolerance
            )
        if which == "largest" and np.mean(counted) > EDGE_SHARE:
            (columns,) = np.nonzero(counted)
            limit = no_model(columns)
            if limit is not None:
                with np.errstate(invalid="ignore"):
                    gap = limit - scores[columns, edge]
                    counted[columns] = ~((gap >= 0) & (gap <= tolerance[columns]))
        share = np.mean(counted)
        if share > EDGE_SHARE:
            direction = "smaller" if which == "smallest" else "larger"
            warnings.warn(
                f"{share:.0%} of targets chose the {which} alpha "
                f"({alphas[edge]:g}) while their cross-validated score was still "
                f"improving there: extend `alphas` to {direction} values.",
                AlphaEdgeWarning,
                # Past this function, fit and its atomic wrapper.
                stacklevel=4,
            )


def _check_weights(sample_weight, n_samples):
    """Sample weights as float64, refused before any work if unusable."""
    if isinstance(sample_weight, numbers.Number):
        sample_weight = np.full(n_samples, sample_weight, dtype=np.float64)
    sample_weight = check_array(
        sample_weight, ensure_2d=False, dtype=np.float64, input_name="sample_weight"
    )
    if sample_weight.shape != (n_samples,):
        raise ValueError(
            f"sample_weight must have shape ({n_samples},), one weight per "
            f"sample of X ({n_samples} samples), got shape {sample_weight.shape}"
        )
    negative = sample_weight < 0
    if np.any(negative):
        raise ValueError(
            f"sample_weight must be non-negative, got {np.count_nonzero(negative)} "
            f"negative weight(s), the smallest {float(sample_weight.min())!r}"
        )
    n_weighted = np.count_nonzero(sample_weight)
    if n_weighted < MIN_SAMPLES:
        # Rows of weight 0 are no rows: as few samples as fit refuses.
        raise ValueError(
            f"sample_weight must have at least {MIN_SAMPLES} non-zero weights, "
            f"got {n_weighted} among {n_samples} samples"
        )
    return sample_weight


def _column_magnitudes(A):
    """Largest absolute value of each column, without an abs() copy of A.

    In float64 whatever A holds: booleans cannot be negated, and the most
    negative integer has no positive counterpart.
    """
    high = np.max(A, axis=0).astype(np.float64, copy=False)
    low = np.min(A, axis=0).astype(np.float64, copy=False)
    return np.maximum(high, -low)


def _check_magnitudes(X, dtype):
    """Refuse an X whose scale the computation cannot represent.

    The SVD path never squares X (see ``skbatch._linalg._ridge_factors``):
    X only has to fit the compute dtype, with room for its column sums (the
    means), and no column may be subnormal there (the cast to float32 would
    flush it to zero).
    """
    finfo = np.finfo(dtype)
    n_samples = X.shape[0]
    largest_sum = float(finfo.max) / n_samples
    smallest = float(finfo.smallest_normal)
    fix = "rescale it, e.g. with sklearn.preprocessing.StandardScaler"
    columns = _column_magnitudes(X)
    largest = float(columns.max())
    if largest > largest_sum:
        raise ValueError(
            f"X has values up to {largest:.3g} in magnitude, beyond what the "
            f"{finfo.dtype} computation can sum over {n_samples} samples "
            f"({largest_sum:.3g}); {fix}."
        )
    tiny = columns[(columns > 0) & (columns < smallest)]
    if tiny.size:
        raise ValueError(
            f"X has columns whose values are all below {smallest:.3g} in "
            f"magnitude (the largest of them {float(tiny.max()):.3g}), which "
            f"{finfo.dtype} cannot hold without losing them; {fix}."
        )


def _check_target_magnitudes(Y, start=0, *, dtype):
    """Refuse targets (columns ``start`` on of y) whose CV scores would be noise.

    The CV scores square the errors of y (in the compute dtype before they
    are summed in float64): squares that overflow make every score inf or
    NaN, squares that underflow make them noise, and either way the alpha
    choice would be arbitrary and ``best_score_`` meaningless (with a single
    alpha too). The error names the first target at fault.
    """
    finfo = np.finfo(dtype)
    n_samples = Y.shape[0]
    largest_sum = float(finfo.max) / n_samples
    smallest = float(finfo.smallest_normal)
    fix = (
        "rescale y, e.g. with sklearn.compose.TransformedTargetRegressor and a "
        "StandardScaler"
    )
    high, low = np.sqrt(largest_sum), np.sqrt(smallest)
    columns = _column_magnitudes(Y)
    largest = float(columns.max())
    if largest > high:
        first = start + int(np.argmax(columns > high))
        raise ValueError(
            f"y has values up to {largest:.3g} in magnitude (target {first} is "
            f"the first): the squared errors that score alpha would overflow "
            f"{finfo.dtype} (the limit is {high:.3g} for {n_samples} samples); "
            f"{fix}."
        )
    tiny = (columns > 0) & (columns < low)
    if tiny.any():
        first = start + int(np.argmax(tiny))
        raise ValueError(
            f"y has targets whose values are all below {low:.3g} in magnitude "
            f"(the largest of them {float(columns[tiny].max()):.3g}; target "
            f"{first} is the first): the squared errors that score alpha "
            f"would underflow {finfo.dtype}; {fix}."
        )


def fit_data(estimator, X, y, sample_weight):
    """``fit``'s inputs checked once: ``(X, y, Y, sample_weight, out_of_core)``.

    ``X`` validated (``n_features_in_`` set on ``estimator``), ``y`` as
    given or validated, ``Y`` its 2-D view (the array on disk for targets
    read one batch at a time, ``out_of_core``), weights as float64.
    """
    X, _ = host_input(X)
    # 2-D targets on disk are read one batch at a time, checked as they
    # are read; a single target is read whole, like any array-like. Asked
    # first: a closed h5py dataset is refused naming y.
    out_of_core = out_of_core_kind(y) is not None and len(y.shape) != 1
    y, _ = host_input(y)
    if out_of_core:
        X = validate_data(estimator, X, dtype=[np.float64, np.float32])
        check_target_array(y, X.shape[0])
        Y = y
    else:
        if sparse.issparse(y):
            raise TypeError(
                "Sparse data was passed for y, but dense data is required. "
                "Use '.toarray()' to convert to a dense numpy array."
            )
        X, y = validate_data(
            estimator,
            X,
            y,
            multi_output=True,
            y_numeric=True,
            dtype=[np.float64, np.float32],
        )
        if y.dtype.kind not in NUMERIC_KINDS:
            # Numbers written as strings, which Ridge reads as numbers.
            try:
                y = y.astype(np.float64)
            except ValueError as error:
                raise ValueError(f"y must hold numbers: {error}") from None
        Y = y.reshape(X.shape[0], -1) if y.ndim == 1 else y
    n_samples = X.shape[0]
    if n_samples < MIN_SAMPLES:
        raise ValueError(
            f"{type(estimator).__name__} needs at least {MIN_SAMPLES} samples, got "
            f"{n_samples} sample"
        )
    if sample_weight is not None:
        sample_weight = _check_weights(host_input(sample_weight)[0], n_samples)
    return X, y, Y, sample_weight, out_of_core


def checked_targets(X, Y, dtype, out_of_core):
    """``Y`` as :class:`~skbatch._targets.TargetColumns`, ``X`` and ``Y``'s
    magnitudes checked for ``dtype`` (targets on disk as they are read)."""
    _check_magnitudes(X, dtype)
    # With one alpha too: the squared errors give best_score_.
    check_y = functools.partial(_check_target_magnitudes, dtype=dtype)
    if out_of_core:
        return TargetColumns(Y, check_y)
    check_y(Y)
    return TargetColumns(Y)


def no_model_scores(scheme, Y, targets, sample_weight, scoring, fit_intercept, batch):
    """``no_model(columns)`` of :func:`warn_at_grid_edges` for a fit's targets.

    ``Y`` is the host array (or, with ``targets`` out of core, the array on
    disk, read again in batches of ``batch``).
    """

    def score(block):
        return scheme.no_model_score(block, sample_weight, scoring, fit_intercept)

    def no_model(columns):
        if not targets.out_of_core:
            return score(Y[:, columns])
        # Another pass over the targets, in the fit's batches.
        parts = []
        for block in targets.blocks(np.arange(Y.shape[1])[columns], batch):
            part = score(block)
            if part is None:
                return None
            parts.append(part)
        return np.concatenate(parts)

    return no_model


def score_weights(sample_weight, rows):
    """Weights of the rows of ``rows`` in a score, checked; None stays None."""
    if sample_weight is None:
        return None
    return _check_sample_weight(
        host_input(sample_weight)[0], rows, dtype=np.float64, ensure_non_negative=True
    )


class LinearPredictMixin:
    """``predict`` and the scores of a fitted linear model of many targets.

    For estimators with host ``coef_`` (n_targets, n_features) or
    (n_features,), ``intercept_``, ``backend_``, ``dtype_``,
    ``max_memory_gb`` and ``n_targets_batch``: predictions are computed in
    batches of targets by the engine.
    """

    def _validated_X(self, X):
        """Host X checked against the fit, and the backend it came from."""
        check_is_fitted(self)
        self.backend_.check_available()
        X, source = host_input(X)
        check_input_device(source, self.backend_)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        return X, source

    def _predict_batches(self, X, reduce, **problem_args):
        """Predict every target in batches, ``reduce(ids, block)`` on each.

        ``block`` is of shape (len(ids), n_rows); ``problem_args`` describe
        the reducer (see :class:`~skbatch._ridge.problems.PredictionProblem`).
        """
        coef = np.atleast_2d(self.coef_)
        intercept = np.atleast_1d(np.asarray(self.intercept_, dtype=np.float64))
        problem = PredictionProblem(
            X, coef, intercept, self.backend_, self.dtype_, **problem_args
        )
        with self.backend_.context():
            run_problem(
                problem,
                reduce,
                max_memory_gb=self.max_memory_gb,
                batch_size=self.n_targets_batch,
            )

    def _predict_host(self, X, out=None):
        X, source = self._validated_X(X)
        n_targets = np.atleast_2d(self.coef_).shape[0]
        one_target = np.ndim(self.coef_) == 1
        dtype = np.result_type(X.dtype, self.dtype_)
        shape = (X.shape[0],) if one_target else (X.shape[0], n_targets)
        if out is None:
            result = np.empty((X.shape[0], n_targets), dtype=dtype)
        else:
            _check_out(out, shape, dtype)
            result = out
            if shares_data(X, out):
                # Batches of predictions are written into out while later
                # batches still read X: they are computed from X as given,
                # as numpy's own out= computes from overlapping inputs.
                X = X.copy()
        writer = ColumnWriter(result)

        def reduce(ids, block):
            # The engine's batches are consecutive ids: one slice of columns.
            writer.write(int(ids[0]), block.T)

        self._predict_batches(
            X,
            reduce,
            out_of_core=writer.out_of_core,
            chunk_width=writer.chunk_width,
            reader_bytes_per_item=writer.host_bytes_per_column,
        )
        if out is None and one_target:
            result = result[:, 0]
        return result, source

    def predict(self, X, out=None):
        """Predict with the fitted coefficients, batched over targets.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            numpy, torch or jax array. A torch or jax array must sit on the
            model's device (else ValueError: nothing moves silently).
        out : ndarray, numpy.memmap, h5py.Dataset or zarr array, default=None
            Writable array of shape (n_samples, n_targets) (or (n_samples,)
            for a model of one target) and a floating dtype that the
            predictions cast to as numpy's ``out=`` allows (``same_kind``),
            written one batch of targets at a time: predictions larger than
            memory go to disk. Checked before any prediction is computed.

        Returns
        -------
        y_pred : array of shape (n_samples,) or (n_samples, n_targets)
            ``out`` when given. Otherwise numpy for numpy input, or the
            input's library, on its device.

        Examples
        --------
        >>> import numpy as np
        >>> from skbatch import BatchedRidge
        >>> rng = np.random.default_rng(0)
        >>> X, Y = rng.standard_normal((30, 4)), rng.standard_normal((30, 3))
        >>> model = BatchedRidge(alphas=1.0).fit(X, Y)
        >>> out = np.empty((30, 3))
        >>> model.predict(X, out=out) is out
        True
        >>> bool(np.allclose(out, model.predict(X)))
        True
        """
        result, source = self._predict_host(X, out)
        if out is not None:
            return out
        return as_output(result, source)

    def score(self, X, y, sample_weight=None):
        """Uniform average of the per-target R^2, so that GridSearchCV works.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Test samples.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            True values.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights.

        Returns
        -------
        score : float
            Mean over targets of R^2.
        """
        # One definition of R^2 for targets in memory and on disk: that of
        # score_per_target, whose constant targets score exactly as r2_score
        # defines them (r2_score's weighted mean leaves rounding noise).
        return float(np.mean(self.score_per_target(X, y, sample_weight)))

    def score_per_target(self, X, y, sample_weight=None, scoring="r2"):
        """Score of each target's predictions, where ``score`` averages R^2.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Test samples.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            True values; 2-D ``y`` on disk (``numpy.memmap``, ``h5py.Dataset``,
            ``zarr`` or ``dask`` array) is read one batch of targets at a time.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights, in every mean of the score.
        scoring : {"r2", "correlation", "neg_mean_squared_error"}, default="r2"
            ``"r2"``: as ``sklearn.metrics.r2_score(multioutput="raw_values")``
            (a constant target scores 1.0 if predicted exactly, else 0.0).
            ``"correlation"``: Pearson's r (weighted with ``sample_weight``).
            ``"neg_mean_squared_error"``: minus
            ``sklearn.metrics.mean_squared_error(multioutput="raw_values")``.
            R^2 and correlation are NaN where undefined: fewer than 2
            samples, or, for correlation, a constant target or prediction.

        Returns
        -------
        scores : ndarray of shape (n_targets,)
            Score per target, higher is better.

        Examples
        --------
        >>> import numpy as np
        >>> from skbatch import BatchedRidge
        >>> rng = np.random.default_rng(0)
        >>> X = rng.standard_normal((50, 4))
        >>> Y = X[:, :2] + 0.5 * rng.standard_normal((50, 2))
        >>> model = BatchedRidge(alphas=1.0).fit(X, Y)
        >>> model.score_per_target(X, Y).shape
        (2,)
        >>> bool(np.all(model.score_per_target(X, Y, scoring="correlation") > 0.8))
        True
        """
        if scoring not in _linalg._SCORINGS:
            raise ValueError(
                f"scoring must be one of {_linalg._SCORINGS}, got {scoring!r}"
            )
        # Before host_input: a closed h5py dataset is refused naming y.
        if out_of_core_kind(y) is not None and len(y.shape) != 1:
            return self._score_out_of_core(X, y, sample_weight, scoring)
        y, _ = host_input(y)
        predictions, _ = self._predict_host(X)
        n_samples = predictions.shape[0]
        predictions = predictions.reshape(n_samples, -1).astype(np.float64)
        y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
        Y = y.reshape(y.shape[0], -1)
        if Y.shape != predictions.shape:
            raise ValueError(
                f"y must have one row per sample of X and one column per target, "
                f"shape {predictions.shape} (or ({n_samples},) for one target), "
                f"got {y.shape}"
            )
        sample_weight = score_weights(sample_weight, Y)
        return _linalg.score_per_target(
            Y, predictions, scoring, sample_weight=sample_weight
        )

    def _score_out_of_core(self, X, y, sample_weight, scoring):
        """:meth:`score_per_target` of targets read from disk, batch by batch."""
        X, _ = self._validated_X(X)
        n_samples = X.shape[0]
        n_targets = np.atleast_2d(self.coef_).shape[0]
        check_target_array(y, n_samples)
        if y.shape[1] != n_targets:
            raise ValueError(
                f"y must have one column per target, shape ({n_samples}, "
                f"{n_targets}), got {tuple(y.shape)}"
            )
        sample_weight = score_weights(sample_weight, X)
        targets = TargetColumns(y)
        scores = np.empty(n_targets)

        def reduce(ids, block):
            start, stop = int(ids[0]), int(ids[-1]) + 1
            scores[start:stop] = _linalg.score_per_target(
                targets.read(start, stop).astype(np.float64),
                block.T.astype(np.float64),
                scoring,
                sample_weight=sample_weight,
                warn=False,
            )

        self._predict_batches(
            X,
            reduce,
            out_of_core=True,
            chunk_width=targets.chunk_width,
            # The targets as read and their float64 copy, and that of the
            # predictions.
            reader_bytes_per_item=targets.host_bytes_per_column + 16 * n_samples,
        )
        # Once for all batches, past this method and score_per_target.
        _linalg.warn_undefined(scores, scoring, n_rows=n_samples, stacklevel=3)
        return scores


class BatchedRidge(
    DeviceMixin, LinearPredictMixin, MultiOutputMixin, RegressorMixin, BaseEstimator
):
    """Ridge regression for many targets, with a per-target alpha chosen by CV.

    One thin SVD of the centred design matrix (one per fold for K-fold)
    serves every target and every alpha: targets are projected once onto
    the SVD basis and all alphas are evaluated from that projection. Targets
    are processed in batches sized from the measured memory budget, on
    numpy, PyTorch or JAX, and out-of-memory errors are recovered from by
    splitting batches, without changing the result.

    Parameters
    ----------
    alphas : float or array-like of shape (n_alphas,), default=DEFAULT_ALPHAS
        Positive regularisation strengths to choose from. The default, 13
        values from 0.1 to 1e5 in half decades (1, 3, 10...), serves
        standardised encoding-model data: with n rows of standardised
        features the data term of ridge grows like n, so hundreds to
        thousands of rows of noisy targets need alphas of 1e2 to 1e5, which
        scikit-learn's ``(0.1, 1, 10)`` (a default for small tabular data)
        never reaches. After fit, a warning says when a notable share of
        targets chose an edge of the grid (see Notes).
    cv : None, "gcv", int, CV splitter or iterable of splits, default=None
        None: exact leave-one-out (the choice of sklearn's ``RidgeCV``).
        ``"gcv"``: generalized cross-validation, cheaper still. Both assume
        independent rows: for time series in runs (fMRI, EEG) use
        ``LeaveOneGroupOut()`` with ``fit(X, y, groups=runs)`` (see Notes).
        int, splitter or iterable of (train, test) index arrays: K-fold;
        per-target alpha is supported with it. A group splitter gets the
        ``groups`` of ``fit``. The score of each alpha is
        the unweighted mean of its fold scores, as in ``GridSearchCV``.
        Every fold needs at least 2 training rows and 1 test row.
    alpha_per_target : bool, default=True
        Choose an alpha for each target; False chooses one alpha for all,
        maximising the score averaged over targets.
    fit_intercept : bool, default=True
        Whether to fit an intercept.
    scoring : {None, "r2", "neg_mean_squared_error", "correlation"}, \
default=None
        Criterion of the alpha choice, computed per target on the device.
        None: squared error for leave-one-out and GCV, R^2 for K-fold.
        GCV supports only None.
    dtype : {"auto", "float32", "float64"}, default="auto"
        Compute dtype. "auto": float32 for float32 ``X`` (as scikit-learn's
        ``Ridge``) and on a GPU, float64 otherwise; predictions are float32
        only for a float32 model and float32 ``X``.
    n_targets_batch : "auto" or int, default="auto"
        Targets per batch; "auto" sizes batches from the memory budget.
    store_cv_results : bool, default=False
        Keep the score of every alpha for every target in ``cv_results_``.
    device : str or Backend, default="auto"
        Where to compute; see :func:`skbatch.resolve_backend`.
    max_memory_gb : float or None, default=None
        Memory budget in GB; None measures free memory.
    verbose : int, default=0
        1: print the plan of each loop before it runs and a summary after it
        (plain lines on stdout), and a progress bar over the target batches on a
        terminal or in a notebook; where no bar shows (a log file), a line of
        progress (done, elapsed, left) at every 10% of a loop estimated to
        take 10 s or more and at least every 30 s; 2: also log the plans,
        every batch and the out-of-memory recoveries on the ``skbatch``
        logger.

    Attributes
    ----------
    coef_ : ndarray of shape (n_targets, n_features) or (n_features,)
        Coefficients at the chosen alphas, in ``dtype_``; 1-D for 1-D ``y``.
        A 2-D ``y`` of one column keeps 2-D attributes and predictions, as
        ``LinearRegression`` does (scikit-learn's ``Ridge`` ravels it).
    intercept_ : ndarray of shape (n_targets,) or float
        Intercepts, in ``dtype_`` (0.0 when ``fit_intercept=False``).
    alpha_ : ndarray of shape (n_targets,) or float
        Chosen alpha per target; a float for 1-D ``y`` or
        ``alpha_per_target=False``. With ``sample_weight``, leave-one-out
        and K-fold choose it on the scale of the weights as given
        (``coef_`` is that of ``Ridge(alpha=alpha_)`` fit with them);
        ``cv="gcv"`` on the scale of the weights normalised to sum to
        ``n_eff``, the number of rows of non-zero weight: ``coef_`` is then
        that of ``Ridge(alpha=alpha_ * sum(sample_weight) / n_eff)`` fit
        with the weights as given, and ``alpha_`` does not change when all
        weights are multiplied by a constant (see Notes).
    best_score_ : ndarray of shape (n_targets,) or float
        Cross-validated score at the chosen alpha (higher is better; minus
        the mean squared error when ``scoring=None`` with LOO or GCV). NaN
        where every alpha scored NaN; with one alpha for all targets, the
        mean over targets of the scores at that alpha. Targets NaN at every
        alpha (a constant target scored by correlation) are left out of
        that mean and of the choice of the shared alpha.
    cv_results_ : dict
        With ``store_cv_results=True``: ``"alphas"`` and ``"scores"``, the
        latter of shape (n_targets, n_alphas) (or (n_alphas,) for 1-D y).
    dtype_ : numpy dtype
        Dtype the model computes in.
    backend_ : Backend
        Where the model computes; ``predict`` raises if it is missing.
    fit_report_ : FitReport
        How the fit ran: per loop over targets, the batches, their size,
        out-of-memory splits, planned peak memory and time.
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen in fit, when X has string column names.

    See Also
    --------
    sklearn.linear_model.RidgeCV : Same model, one CPU, LOO or K-fold
        without per-target alpha for K-fold.

    Notes
    -----
    **Choice of alpha.** The best alpha maximises the CV score; ties go to
    the first in ``alphas``. An undefined score is NaN, never a number: R^2
    or correlation of a K-fold test fold of one row (a warning names the
    fold sizes), correlation of a constant target. As ``GridSearchCV`` ranks
    NaN last, alphas scoring NaN are chosen only when every alpha scores NaN;
    then the first alpha is kept and ``best_score_`` is NaN.

    **Edges of the grid.** After fit, a ``UserWarning`` names the edge when
    more than 5% of targets chose the smallest or the largest alpha while
    their score was still improving there (better than at the next alpha by
    more than 1% of the range of their scores over the grid): the grid then
    stops too early, and extending ``alphas`` would change those targets.
    At the largest alpha, targets whose score approaches from below, within
    that 1%, the score of no model at all (predicting the mean: the limit
    of an infinite alpha) are not counted: pure noise always prefers the
    largest alpha, whatever the grid. With ``alpha_per_target=False`` the
    rule applies to the mean score.

    **Time series.** Leave-one-out and GCV leave out one row at a time: with
    autocorrelated rows its neighbours, still in the fit, predict it, and
    the chosen alphas come out far too small (on noise in runs of AR(0.9),
    a median alpha of 4.6e3 where leave-one-run-out chose 1e6). With more
    than one alpha, after fit an :class:`AutocorrelationWarning` says so
    when the residuals are clearly autocorrelated: the median over up to 64
    targets (evenly spaced) of the lag-1 autocorrelation of their residuals,
    within the runs of ``groups`` when given, above 0.3 and above 4 standard
    errors of white noise (``4 / sqrt(n_samples - n_runs)``). Then use
    ``cv=LeaveOneGroupOut()`` (or ``GroupKFold``) and ``groups=runs``, as in
    the Examples.

    **Sample weights.** They weight the training rows in every fit, as in
    ``Ridge`` (with ``cv="gcv"``, once normalised as below), and the scores
    as ``RidgeCV`` uses them: leave-one-out weights each sample's squared
    error (or the named scoring's means), and K-fold weights the held-out
    rows of each fold (``RidgeCV(cv=K)`` since scikit-learn 1.7). With
    ``cv="gcv"`` they are first normalised to sum to ``n_eff``, the number
    of rows of non-zero weight, and the criterion is
    ``(sum_i w_i r_i^2 / n_eff) / (1 - tr(H) / n_eff)^2``, with ``tr(H)``
    the effective degrees of freedom (+1 for the intercept). A row of weight
    0 is then the same as no row, and multiplying all weights by a constant
    changes nothing (equal weights are no weights), whereas ``Ridge`` itself
    reads weights times c as alpha divided by c: ``alpha_`` is that of the
    normalised weights, ``Ridge``'s alpha for the weights as given times
    ``n_eff / sum(sample_weight)``.

    **Targets larger than memory.** A 2-D ``y`` on disk is never held
    whole: its shape, dtype and number of rows are checked first, and each
    batch of targets read is checked for NaN, infinity and magnitudes (the
    error names the first target at fault; the fit is atomic, so nothing is
    published). The fitted arrays stay host numpy, 8 x n_targets x
    (n_features + n_alphas + 3) bytes in all, counted against the memory
    budget before any target is read; past it, fit the targets in parts.

    **Scale.** Nothing squares X, so an X of entries near 1e155 (or 1e-160)
    gives what ``Ridge`` gives in exact arithmetic; data the compute dtype
    cannot represent (an X beyond float32, a y whose squared errors would
    overflow or underflow) is refused with a ValueError saying how to
    rescale it.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch import BatchedRidge
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((100, 5))
    >>> Y = X @ rng.standard_normal((5, 3)) + 0.1 * rng.standard_normal((100, 3))
    >>> model = BatchedRidge(alphas=np.logspace(-2, 2, 5)).fit(X, Y)
    >>> model.coef_.shape, model.alpha_.shape
    ((3, 5), (3,))
    >>> round(model.score(X, Y), 2)
    1.0

    Time series in runs (of unequal length): leave one run out.

    >>> from sklearn.model_selection import LeaveOneGroupOut
    >>> runs = np.repeat([0, 1, 2], [40, 35, 25])
    >>> model = BatchedRidge(cv=LeaveOneGroupOut()).fit(X, Y, groups=runs)
    >>> model.alpha_.shape
    (3,)
    """

    def __init__(
        self,
        alphas=DEFAULT_ALPHAS,
        *,
        cv=None,
        alpha_per_target=True,
        fit_intercept=True,
        scoring=None,
        dtype="auto",
        n_targets_batch="auto",
        store_cv_results=False,
        device="auto",
        max_memory_gb=None,
        verbose=0,
    ):
        self.alphas = alphas
        self.cv = cv
        self.alpha_per_target = alpha_per_target
        self.fit_intercept = fit_intercept
        self.scoring = scoring
        self.dtype = dtype
        self.n_targets_batch = n_targets_batch
        self.store_cv_results = store_cv_results
        self.device = device
        self.max_memory_gb = max_memory_gb
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        # Not sklearn's array-API convention: fitted arrays stay host numpy
        # (portable pickles) and the device is chosen by `device`, not by X.
        tags.array_api_support = False
        return tags

    _parameter_constraints = {
        "alphas": ["array-like", Interval(numbers.Real, 0, None, closed="neither")],
        # A string names a scheme of skbatch._ridge.cv.CV_SCHEMES ("gcv"),
        # checked in _check_params.
        "cv": ["cv_object", str],
        "alpha_per_target": ["boolean"],
        "fit_intercept": ["boolean"],
        "scoring": [StrOptions(set(SCORINGS) - {None}), None],
        "dtype": [StrOptions({"auto", "float32", "float64"}), type, np.dtype],
        "n_targets_batch": [
            StrOptions({"auto"}),
            Interval(numbers.Integral, 1, None, closed="left"),
        ],
        "store_cv_results": ["boolean"],
        # resolve_backend names what is wrong with a device or what is missing.
        "device": "no_validation",
        "max_memory_gb": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "verbose": [Interval(numbers.Integral, 0, None, closed="left")],
    }

    def _check_params(self):
        # Types and ranges as sklearn estimators check them (InvalidParameterError
        # is both a ValueError and a TypeError); then what constraints cannot say.
        self._validate_params()
        alphas = check_alphas(self.alphas)
        scheme = cv_scheme(self.cv, self.scoring)
        check_max_memory_gb(self.max_memory_gb)
        check_verbose(self.verbose)
        return alphas, scheme

    def __skbatch_ridge_spec__(self):
        """The ridge problem ``fit`` solves, for the batched paths of the other
        estimators (:func:`skbatch._ridge.spec.ridge_spec`); None when the
        parameters are invalid (``fit`` then says why) or for a subclass,
        whose ``fit`` may differ."""
        if type(self) is not BatchedRidge:
            return None
        return batched_ridge_spec(self.get_params(deep=False))

    # Under metadata routing, groups given to a meta-estimator reach fit
    # unasked, as they reach RidgeCV's splitter (group splitters request them).
    __metadata_request__fit = {"groups": True}

    @atomic_fit
    def fit(self, X, y, sample_weight=None, groups=None):
        """Fit the model and choose alphas.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data (numpy, torch or jax arrays are accepted).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets. 2-D targets on disk (``numpy.memmap``, ``h5py.Dataset``,
            ``zarr`` or ``dask`` array) are read one batch of targets at a
            time, in whole chunks of their columns, and their values are
            checked as they are read (see Notes).
        sample_weight : float or array-like of shape (n_samples,), default=None
            Non-negative sample weights, not all 0; see Notes for how each
            ``cv`` uses them.
        groups : array-like of shape (n_samples,), default=None
            Group (run) of each sample, passed to a ``cv`` splitter that uses
            groups (``GroupKFold``, ``LeaveOneGroupOut``,
            ``GroupShuffleSplit``...), which then needs them. Splitters that
            ignore groups (``KFold``), leave-one-out and GCV use them only
            for the residual autocorrelation check (see Notes), within runs.
            Under metadata routing they are requested by default.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        alphas, scheme = self._check_params()
        X, y, Y, sample_weight, out_of_core = fit_data(self, X, y, sample_weight)
        n_samples, n_features = X.shape
        n_targets = Y.shape[1]
        groups = check_groups(host_input(groups)[0], n_samples)
        # Splitters that read y (stratified ones) cannot split continuous
        # targets anyway; targets on disk are not read for them.
        scheme.split(
            X, None if out_of_core else y, sample_weight, self.scoring, groups=groups
        )
        flops = fit_flops(n_samples, n_features, n_targets, alphas.size, scheme)
        self.backend_ = resolve_backend(self.device, flops=flops)
        self.dtype_ = resolve_dtype(self.dtype, self.backend_, X.dtype)
        check_column_scales(
            X,
            self.dtype_,
            self.backend_,
            fit_intercept=self.fit_intercept,
            sample_weight=sample_weight,
            alphas=alphas,
        )
        targets = checked_targets(X, Y, self.dtype_, out_of_core)
        check_solver_memory(
            n_samples,
            n_features,
            scheme,
            self.dtype_,
            self.backend_,
            self.max_memory_gb,
            n_targets=n_targets,
            n_alphas=alphas.size,
        )

        with self.backend_.context():
            solver = RidgeSolver(
                X,
                sample_weight,
                alphas,
                scheme,
                self.backend_,
                self.dtype_,
                fit_intercept=self.fit_intercept,
                scoring=self.scoring,
            )
            results = fit_targets(
                solver,
                targets,
                alpha_per_target=self.alpha_per_target,
                batch_size=self.n_targets_batch,
                max_memory_gb=self.max_memory_gb,
                verbose=self.verbose,
            )
        coef, intercept, best, best_score, scores, batch_size = results

        no_model = no_model_scores(
            scheme,
            Y,
            targets,
            sample_weight,
            self.scoring,
            self.fit_intercept,
            batch_size,
        )
        if self.alpha_per_target:
            warn_at_grid_edges(alphas, best, scores, no_model)
        else:
            # The shared alpha's scores: the mean over the targets scored.
            mean_scores, scored = mean_over_scored_targets(scores)

            def mean_no_model(_):
                limit = no_model(slice(None))
                return None if limit is None else np.mean(limit[scored])[None]

            warn_at_grid_edges(alphas, best[:1], mean_scores[None], mean_no_model)
        warn_if_autocorrelated(
            X,
            targets,
            coef,
            intercept,
            groups,
            self.cv,
            n_alphas=alphas.size,
            stacklevel=4,
        )
        one_target = not out_of_core and y.ndim == 1
        if one_target:
            self.alpha_ = float(alphas[best[0]])
            self.best_score_ = float(best_score[0])
        elif not self.alpha_per_target:
            self.alpha_ = float(alphas[best[0]])
            self.best_score_ = float(mean_scores[best[0]])
        else:
            self.alpha_ = alphas[best]
            self.best_score_ = best_score
        self.coef_ = coef[0] if one_target else coef
        self.intercept_ = float(intercept[0]) if one_target else intercept
        if not self.fit_intercept:
            self.intercept_ = 0.0 if one_target else np.zeros(n_targets, self.dtype_)
        if self.store_cv_results:
            self.cv_results_ = {
                "alphas": alphas,
                "scores": scores[0] if one_target else scores,
            }
        return self


def _check_out(out, shape, dtype):
    """Refuse an ``out`` of predictions that cannot take them, before any work."""
    kind = out_of_core_kind(out, "out")
    if not isinstance(out, np.ndarray) and kind not in ("h5py", "zarr"):
        raise TypeError(
            f"out must be a numpy array (or memmap), an h5py.Dataset or a zarr "
            f"array, got {type(out).__name__}"
        )
    if tuple(out.shape) != shape:
        raise ValueError(
            f"out must have shape {shape}, one row per sample of X and one "
            f"column per target, got shape {tuple(out.shape)}"
        )
    out_dtype = np.dtype(out.dtype)
    if out_dtype.kind != "f" or not np.can_cast(dtype, out_dtype, "same_kind"):
        raise ValueError(
            f"out must have a floating dtype that {dtype} predictions cast to, "
            f"got dtype {out_dtype}"
        )
    read_only = (
        not out.flags.writeable
        if isinstance(out, np.ndarray)
        else (out.file.mode == "r" if kind == "h5py" else bool(out.read_only))
    )
    if read_only:
        raise ValueError("out must be writable, got a read-only array")
