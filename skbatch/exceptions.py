"""Warnings that skbatch raises about the data it was given."""

__all__ = ["AlphaEdgeWarning", "AutocorrelationWarning", "DegenerateDataWarning"]


class DegenerateDataWarning(RuntimeWarning):
    """A result is undefined (NaN) because the data cannot define it.

    Raised where a statistic comes back NaN for a reason in the data rather
    than an error: an interval of a statistic that does not vary across
    resamples, an R^2 of fewer than two rows, a correlation with a constant
    target. Named and placed in the hierarchy as
    :class:`scipy.stats.DegenerateDataWarning` (a ``RuntimeWarning``), so
    that ``warnings.filterwarnings`` can single it out.

    Examples
    --------
    >>> import warnings
    >>> from skbatch.exceptions import DegenerateDataWarning
    >>> issubclass(DegenerateDataWarning, RuntimeWarning)
    True
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warnings.warn("R^2 of one row is undefined", DegenerateDataWarning)
    >>> caught[0].category.__name__
    'DegenerateDataWarning'
    """


class AutocorrelationWarning(UserWarning):
    """The data are autocorrelated where the chosen method assumes they are not.

    Raised by :class:`BatchedRidge` (and :class:`BandedRidge`) when exact
    leave-one-out or GCV chooses alpha (or band weights) on targets whose
    residuals are clearly autocorrelated (time series): a leave-one-run-out
    CV is then the right choice. A subclass of
    ``UserWarning``, so that ``warnings.filterwarnings`` can single it out.

    Examples
    --------
    >>> import warnings
    >>> from skbatch.exceptions import AutocorrelationWarning
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("error", AutocorrelationWarning)
    ...     try:
    ...         warnings.warn("example", AutocorrelationWarning)
    ...     except AutocorrelationWarning as caught:
    ...         print(type(caught).__name__)
    AutocorrelationWarning
    """


class AlphaEdgeWarning(UserWarning):
    """Many targets chose an edge of ``alphas`` while still improving there.

    Raised after fit by :class:`BatchedRidge` (and :class:`BandedRidge`):
    the grid likely stops too early, and extending it may change the chosen
    alphas. A subclass of ``UserWarning``, so that
    ``warnings.filterwarnings`` can single it out. The wrappers'
    (:class:`PermutationScorer`, :class:`BootstrapEstimator`) refits on
    permuted or resampled data do not raise it: their fit on all data has
    said it once, and a permuted target is noise by design.

    Examples
    --------
    >>> import warnings
    >>> from skbatch.exceptions import AlphaEdgeWarning
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("error", AlphaEdgeWarning)
    ...     try:
    ...         warnings.warn("example", AlphaEdgeWarning)
    ...     except AlphaEdgeWarning as caught:
    ...         print(type(caught).__name__)
    AlphaEdgeWarning
    """
