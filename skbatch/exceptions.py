"""Warnings that skbatch raises about the data it was given."""

__all__ = ["DegenerateDataWarning"]


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
