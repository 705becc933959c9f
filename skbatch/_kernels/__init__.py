"""Pure functions on arrays: the linear algebra and the p-value rules.

- :mod:`~skbatch._kernels.linalg`: ridge kernels written once against the
  array API (SVD, leave-one-out, K-fold, weighted solves, the one scoring
  function), taking ``xp`` arrays, holding no estimator state and doing no
  budget arithmetic;
- :mod:`~skbatch._kernels.rules`: p-value and interval rules of accumulated
  statistics (``alternative``, the max statistic, Holm / BH / BY);
- :mod:`~skbatch._kernels.blas`: scipy's BLAS where numpy has no call for
  it (an in-place GEMM that releases the GIL).

Nothing here imports another skbatch layer but the device layer's
exceptions and backends.
"""
