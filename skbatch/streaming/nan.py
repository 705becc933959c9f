"""Why an interval bound or a standard error is NaN: the accumulators'
``nan_reasons`` and :func:`describe_nan`."""

import numpy as np

# Why an element's interval bounds or standard error are NaN, as the
# accumulators' ``nan_reasons`` list them, most basic first: an element is
# explained by the first reason that holds for it (see describe_nan).
NAN_REPLICATE = "a replicate is NaN"
NAN_ESTIMATE = "the estimate is NaN"
EQUAL_REPLICATES = "every replicate is equal"
ONE_SIDED_REPLICATES = "every replicate lies on one side of the estimate"
UNDEFINED_ACCELERATION = "the jackknife acceleration is 0/0 or NaN"
# What each reason means for the user, once per message.
_NAN_HINTS = {
    NAN_REPLICATE: (
        "A NaN replicate is a resample whose fit gave NaN (return_samples=True "
        "keeps them); np.percentile and scipy.stats.bootstrap give NaN too."
    ),
    NAN_ESTIMATE: "A NaN estimate is a fit on all data that gave NaN.",
    EQUAL_REPLICATES: (
        "BCa is undefined for a degenerate (constant) bootstrap distribution: "
        "z0 or the acceleration is not finite. scipy.stats.bootstrap("
        "method='BCa') gives NaN there and warns, and so does skbatch, for "
        "comparable numbers; ci_method='percentile' gives the exact interval "
        "[c, c] of a constant c."
    ),
    ONE_SIDED_REPLICATES: (
        "BCa is then undefined (z0 infinite), as in scipy.stats.bootstrap("
        "method='BCa'); ci_method='percentile' is defined."
    ),
    UNDEFINED_ACCELERATION: (
        "BCa is then undefined (every leave-one-out estimate equal, or NaN), "
        "as in scipy.stats.bootstrap(method='BCa'); ci_method='percentile' is "
        "defined."
    ),
}


def describe_nan(results):
    """Which elements have a NaN bound or standard error, and why, in words.

    Parameters
    ----------
    results : dict of str to (sequence of ndarray, list of (str, ndarray))
        Per attribute name: its bounds and standard error (arrays of one
        shape), and the reasons its accumulator's ``nan_reasons`` gives. An
        element NaN in any of the arrays is explained by the first reason
        that holds for it.

    Returns
    -------
    str or None
        One message for every attribute, naming how many of its elements
        are NaN and why, then what each reason means; None when nothing is
        NaN.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch.streaming import BootstrapAccumulator, describe_nan
    >>> replicates = [[0.0, 1.0], [0.0, 3.0], [np.nan, 2.0]]
    >>> acc = BootstrapAccumulator((2,), 3).update(replicates)
    >>> lower, upper = acc.interval()
    >>> values = (lower, upper, acc.std)
    >>> print(describe_nan({"coef_": (values, acc.nan_reasons())}))
    ... # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
    NaN interval bounds or standard errors for coef_: 1 of 2 elements,
    1 where a replicate is NaN. A NaN replicate is ...
    """
    parts, seen = [], []
    for name, (values, reasons) in results.items():
        undefined = np.zeros(np.shape(values[0]), dtype=bool)
        for value in values:
            undefined |= np.isnan(value)
        if not undefined.any():
            continue
        left = undefined.copy()
        counts = []
        for reason, mask in reasons:
            count = int((left & mask).sum())
            left &= ~mask
            if count:
                counts.append(f"{count} where {reason}")
                if reason not in seen:
                    seen.append(reason)
        if left.any():
            counts.append(f"{int(left.sum())} for another reason")
        size = undefined.size
        parts.append(
            f"{name}: {int(undefined.sum())} of {size} "
            f"{'element' if size == 1 else 'elements'}, {', '.join(counts)}"
        )
    if not parts:
        return None
    hints = " ".join(_NAN_HINTS[reason] for reason in seen)
    listed = "; ".join(parts)
    return f"NaN interval bounds or standard errors for {listed}. {hints}"
