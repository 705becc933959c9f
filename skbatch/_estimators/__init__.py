"""What the estimators share, below the public classes.

The estimators (``ridge.py``, ``banded.py``, ``bootstrap.py``,
``permutation.py``) validate their parameters, choose a problem of the
solver layer and store the fitted attributes; what more than one of them
needs lives here:

- :mod:`~skbatch._estimators.base`: device moves, array I/O, atomic fits and
  the checks of the common parameters (``verbose``, ``max_memory_gb``,
  ``n_jobs``), the wrappers' mixin;
- :mod:`~skbatch._estimators.fit_checks`: the inputs of a ridge ``fit``,
  checked before any work;
- :mod:`~skbatch._ridge.fit_warnings`: what a ridge fit says about its
  data (alphas at the grid's edge, autocorrelated residuals);
- :mod:`~skbatch._estimators.predict`: predictions and scores of a fitted
  linear model of many targets, in batches;
- :mod:`~skbatch._kernels.timeseries`: lag-1 autocorrelation and block
  lengths of residuals, for warnings and ``block_size="auto"``;
- :mod:`~skbatch._estimators.banded_scores` and
  :mod:`~skbatch._estimators.banded_held`: ``BandedRidge``'s per-band scores
  and the replicate estimator a bootstrap holds at its choices.
"""
