"""The implementation of :class:`~skbatch.BootstrapEstimator`, below it.

The estimator (``bootstrap.py``) validates its parameters, chooses the
problem (batched linear or refits) and the resampling scheme, and stores
the fitted attributes; the work lives here:

- :mod:`~skbatch._bootstrap.inputs`: what fit hands the loops, the
  parameters (``Settings``) and the data (``FitInputs``);
- :mod:`~skbatch._bootstrap.attributes`: what is read of each fitted model
  (names, checks, :func:`~skbatch._bootstrap.attributes.statistic`);
- :mod:`~skbatch._bootstrap.blocks`: the block size (its checks, the "auto"
  rule) and the autocorrelation warning of an iid bootstrap of rows;
- :mod:`~skbatch._bootstrap.summaries`: the accumulators the replicates
  stream into, their memory checks, the intervals and the NaN warning;
- :mod:`~skbatch._bootstrap.linear`: the batched linear path;
- :mod:`~skbatch._bootstrap.refit`: the generic path, refits through joblib;
- :mod:`~skbatch._bootstrap.jackknife`: BCa's acceleration from the
  jackknife, closed form on the linear path, refits otherwise.

Resampling (:mod:`skbatch.random`), the interval rules
(:mod:`skbatch.streaming`, :mod:`skbatch._kernels.rules`) and the ridge problems
(:mod:`skbatch._ridge`) are layers below, shared with the other estimators.
"""
