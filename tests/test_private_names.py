"""The private names of scikit-learn and joblib that skbatch imports behave as
it relies on, on every version it supports (both legs of .ci/run).

Each has no public twin; the module importing it says why it is used.
"""

import numpy as np
import pytest
from numpy.testing import assert_array_equal
from scipy import sparse
from sklearn.linear_model import Ridge
from sklearn.svm import SVR

from skbatch import BatchedRidge


def test_row_slicing_of_sklearn_cross_validation():
    # _permutation_paths.py and _bootstrap/ (refit.py, jackknife.py) slice
    # folds and resampled rows so.
    from sklearn.utils import _safe_indexing
    from sklearn.utils.metaestimators import _safe_split
    from sklearn.utils.validation import _check_method_params

    X = np.arange(20.0).reshape(10, 2)
    rows = np.array([3, 3, 0])
    assert_array_equal(_safe_indexing(X, rows), X[rows])
    assert_array_equal(_safe_indexing(sparse.csr_matrix(X), rows).toarray(), X[rows])
    assert _safe_indexing(list(range(10)), rows) == [3, 3, 0]
    # A precomputed kernel is sliced on both axes, test rows by train columns.
    kernel = X @ X.T
    train, test = np.arange(6), np.arange(6, 10)
    X_test, _ = _safe_split(SVR(kernel="precomputed"), kernel, X[:, 0], test, train)
    assert_array_equal(X_test, kernel[np.ix_(test, train)])
    X_test, _ = _safe_split(Ridge(), X, X[:, 0], test, train)
    assert_array_equal(X_test, X[test])
    # Only the parameters with a value per sample are sliced.
    weight = np.linspace(1.0, 2.0, 10)
    params = _check_method_params(X, {"sample_weight": weight, "flag": 3}, rows)
    assert_array_equal(params["sample_weight"], weight[rows])
    assert params["flag"] == 3


def test_row_slicing_keeps_pandas_objects():
    pd = pytest.importorskip("pandas")
    from sklearn.utils import _safe_indexing

    frame = pd.DataFrame(np.arange(20.0).reshape(10, 2), index=np.arange(10) * 7)
    rows = np.array([4, 1])
    sliced = _safe_indexing(frame, rows)
    assert isinstance(sliced, pd.DataFrame)
    assert_array_equal(sliced.index, [28, 7])
    assert isinstance(_safe_indexing(frame[0], rows), pd.Series)


def test_sample_weight_check():
    # _bootstrap/linear.py and _predict.py check sample_weight as Ridge does.
    from sklearn.utils.validation import _check_sample_weight

    X = np.zeros((4, 2))
    assert_array_equal(_check_sample_weight(None, X, dtype=np.float64), np.ones(4))
    assert_array_equal(_check_sample_weight(2.0, X, dtype=np.float64), np.full(4, 2))
    with pytest.raises(ValueError, match="shape"):
        _check_sample_weight(np.ones(3), X, dtype=np.float64)
    with pytest.raises(ValueError, match="(?i)negative"):
        _check_sample_weight(-np.ones(4), X, ensure_non_negative=True)


def test_parameter_validation():
    # ridge.py declares BatchedRidge's constraints; _ridge/cv.py raises the
    # same error for a bad cv.
    from sklearn.utils._param_validation import InvalidParameterError

    assert issubclass(InvalidParameterError, ValueError)
    assert issubclass(InvalidParameterError, TypeError)
    X, y = np.ones((6, 2)), np.arange(6.0)
    for bad in ({"alphas": -1.0}, {"verbose": -1}, {"cv": "no-such-scheme"}):
        with pytest.raises(InvalidParameterError, match=next(iter(bad))):
            BatchedRidge(**bad).fit(X, y)


def test_joblib_backends():
    # skbatch/_engine/parallel.py names the active backend and tells local ones
    # from others.
    from joblib import parallel_config
    from joblib._parallel_backends import (
        LokyBackend,
        MultiprocessingBackend,
        ThreadingBackend,
    )
    from joblib.parallel import BACKENDS, get_active_backend

    for name, cls in [
        ("loky", LokyBackend),
        ("multiprocessing", MultiprocessingBackend),
        ("threading", ThreadingBackend),
    ]:
        assert BACKENDS[name] is cls
        with parallel_config(backend=name):
            assert type(get_active_backend()[0]) is cls


def test_joblib_dask_backend():
    # skbatch/_engine/cluster.py finds the client of joblib's dask backend in
    # joblib._dask.
    distributed = pytest.importorskip("distributed")
    from joblib import parallel_config

    from skbatch._engine import cluster

    assert cluster._dask_client() is None
    with distributed.Client(
        processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None
    ) as client:
        with parallel_config(backend="dask"):
            assert cluster._dask_client() is client
