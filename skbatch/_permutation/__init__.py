"""The implementation of :class:`~skbatch.PermutationScorer`, below it.

The estimator (``permutation.py``) validates its parameters, fits
``estimator_`` and stores the fitted attributes; the work lives here:

- :mod:`~skbatch._permutation.inputs`: the records a fit hands its plans and
  paths (settings, inputs, resamples, paths);
- :mod:`~skbatch._permutation.cv`: the metrics of ``scoring`` and the outer
  folds the score is made of;
- :mod:`~skbatch._permutation.plan`: what a fit settles before any work (the
  scheme against the data, the fast-path rule, the memory preflights);
- :mod:`~skbatch._permutation.paths`: the ridge fast path (permutations as
  extra targets through one decomposition per fold) and the refit path.

Resampling (:mod:`skbatch._resampling`), the p-value rules
(:mod:`skbatch._kernels.rules`) and the ridge problems (:mod:`skbatch._ridge`)
are layers below, shared with the other estimators.
"""
