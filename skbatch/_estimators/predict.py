"""Predictions and scores of a fitted linear model of many targets.

:class:`LinearPredictMixin` gives ``BatchedRidge`` and ``BandedRidge``
``predict`` (into ``out``, on disk if need be), ``score`` and
``score_per_target``, computed in batches of targets by the engine.
"""

import numpy as np

# Private to scikit-learn, without a public twin: its check of
# sample_weight, as Ridge checks it. tests/test_private_names.py checks what
# is relied on here.
from sklearn.utils.validation import (
    _check_sample_weight,
    check_array,
    check_is_fitted,
    validate_data,
)

from .._engine import run_problem
from .._engine.targets import (
    ColumnWriter,
    TargetColumns,
    check_target_array,
    out_of_core_kind,
    shares_data,
)
from .._kernels import linalg as _linalg
from .._ridge.problems import PredictionProblem
from .base import as_output, check_input_device, host_input

__all__ = ["LinearPredictMixin", "score_weights"]


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
