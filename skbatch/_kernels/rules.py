"""P-value rules: pure functions of accumulated permutation statistics.

The one place where ``alternative`` is read (as in
:func:`scipy.stats.permutation_test`): which side of the observed score a
null score must reach (:func:`sides`, :func:`reaches`, :func:`family_extreme`,
used by :class:`skbatch.streaming.PermutationCounter` while it counts), and
how counts become p-values (:func:`permutation_pvalue`,
:func:`maxstat_pvalue`). The multiple-testing corrections of p-values
(Holm, Benjamini–Hochberg, Benjamini–Yekutieli) form a small table,
:data:`CORRECTIONS`, read by :func:`adjust_pvalues`, as statsmodels'
``multipletests(method=...)`` reads its own.
"""

import numpy as np

__all__ = [
    "ALTERNATIVES",
    "CORRECTIONS",
    "adjust_pvalues",
    "bh_adjusted",
    "by_adjusted",
    "check_alternative",
    "family_extreme",
    "holm_adjusted",
    "maxstat_pvalue",
    "permutation_pvalue",
    "reaches",
    "sides",
    "threshold",
]

ALTERNATIVES = ("greater", "less", "two-sided")
# The one-sided counts each alternative needs: a two-sided p-value is built
# from both tails, as scipy's permutation_test builds it.
_SIDES = {"greater": ("greater",), "less": ("less",), "two-sided": ("greater", "less")}
# A two-sided p-value is this many times the smaller one-sided one (scipy's
# permutation_test): a union bound over the two tails.
TWO_SIDED_FACTOR = 2.0


def check_alternative(alternative):
    """``alternative``, refused unless one of :data:`ALTERNATIVES`.

    Parameters
    ----------
    alternative : str
        "greater", "less" or "two-sided".

    Returns
    -------
    alternative : str

    Raises
    ------
    ValueError
        Naming the value received and those allowed.

    Examples
    --------
    >>> from skbatch._kernels.rules import check_alternative
    >>> check_alternative("less")
    'less'
    """
    if not isinstance(alternative, str) or alternative not in ALTERNATIVES:
        raise ValueError(
            f"alternative must be one of {ALTERNATIVES}, got {alternative!r}"
        )
    return alternative


def sides(alternative):
    """The tails whose counts ``alternative`` needs, of "greater" and "less".

    Examples
    --------
    >>> from skbatch._kernels.rules import sides
    >>> sides("two-sided")
    ('greater', 'less')
    """
    return _SIDES[check_alternative(alternative)]


def threshold(observed, tolerance, side):
    """The value a null score must reach on ``side`` to count as at least as
    extreme as ``observed``: ``observed - tolerance`` for "greater",
    ``observed + tolerance`` for "less".

    ``tolerance`` (>= 0) widens the comparison by the round-off of the
    arithmetic that scored the null, so that a tie counts in either
    direction. NaN where ``observed`` is NaN: nothing reaches it.

    Examples
    --------
    >>> from skbatch._kernels.rules import threshold
    >>> float(threshold(0.5, 0.01, "less"))
    0.51
    """
    if side == "greater":
        return np.subtract(observed, tolerance)
    return np.add(observed, tolerance)


def reaches(scores, limit, side):
    """Where null ``scores`` are at least as extreme as ``limit`` on ``side``.

    ``scores >= limit`` for "greater", ``scores <= limit`` for "less"; an
    undefined (NaN) null score counts as reaching (it could have been
    anything), so undefined scores never make a p-value small.

    Parameters
    ----------
    scores : ndarray of shape (m, n_targets)
    limit : ndarray of shape (n_targets,)
        From :func:`threshold`.
    side : {"greater", "less"}

    Returns
    -------
    reached : ndarray of bool of shape (m, n_targets)

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._kernels.rules import reaches
    >>> reaches(np.array([[0.2], [0.5], [np.nan]]), np.array([0.5]), "less")[:, 0]
    array([ True,  True,  True])
    """
    compared = scores >= limit if side == "greater" else scores <= limit
    return compared | np.isnan(scores)


def family_extreme(scores, side):
    """Per permutation, the most extreme score over the family of targets.

    The maximum for "greater", the minimum for "less" (the max- and
    min-statistic of family-wise p-values); an undefined score is extreme
    on either side, as :func:`reaches` counts it.

    Parameters
    ----------
    scores : ndarray of shape (m, n_family)
        Null scores of the targets in the family, n_family >= 1.
    side : {"greater", "less"}

    Returns
    -------
    extreme : ndarray of shape (m, 1)

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._kernels.rules import family_extreme
    >>> family_extreme(np.array([[0.1, np.nan, 0.3]]), "greater")
    array([[inf]])
    """
    undefined = np.isnan(scores)
    if side == "greater":
        return np.where(undefined, np.inf, scores).max(axis=1, keepdims=True)
    return np.where(undefined, -np.inf, scores).min(axis=1, keepdims=True)


def _one_sided(counts, n_total, exact):
    # Exact enumeration counts the identity among its n_total permutations;
    # Monte Carlo draws add the observed data to numerator and denominator.
    if exact:
        return counts / n_total
    return (counts + 1) / (n_total + 1)


def permutation_pvalue(n_total, *, greater=None, less=None, alternative, exact):
    """P-value from exceedance counts, for ``alternative``.

    The definitions of :func:`scipy.stats.permutation_test` (and of
    :func:`sklearn.model_selection.permutation_test_score` for "greater"):
    a one-sided p-value is ``(C + 1) / (n_total + 1)`` for ``n_total``
    random permutations, ``C / n_total`` when ``exact`` (every distinct
    permutation enumerated once, the identity among them), C the number of
    null scores at least as extreme as the observed one on that side (ties
    count). "two-sided" is twice the smaller one-sided p-value, clipped
    to 1.

    Parameters
    ----------
    n_total : int
        Number of permutations counted.
    greater, less : int or ndarray of int, default=None
        Counts of null scores ``>=`` and ``<=`` the observed one; only those
        of the sides ``alternative`` needs (:func:`sides`) are read.
    alternative : {"greater", "less", "two-sided"}
    exact : bool

    Returns
    -------
    pvalue : float or ndarray of float

    Examples
    --------
    >>> from skbatch._kernels.rules import permutation_pvalue
    >>> float(permutation_pvalue(99, greater=4, less=96, alternative="two-sided",
    ...                          exact=False))
    0.1
    """
    counts = {"greater": greater, "less": less}
    pvalues = [_one_sided(counts[side], n_total, exact) for side in sides(alternative)]
    if len(pvalues) == 1:
        return pvalues[0]
    return np.minimum(TWO_SIDED_FACTOR * np.minimum(*pvalues), 1.0)


def maxstat_pvalue(n_total, *, max_counts=None, min_counts=None, alternative, exact):
    """Family-wise p-values by the max statistic, for ``alternative``.

    ``max_counts`` counts, per target, the permutations whose maximum null
    score over the family reaches the target's observed score;
    ``min_counts`` those whose minimum falls to it ("less": the min
    statistic). Each one-sided value is :func:`permutation_pvalue` of those
    counts (Westfall & Young's single-step max-T adjustment). "two-sided"
    is twice the smaller of the two, clipped to 1: each one-sided procedure
    rejects any true null with probability at most ``alpha / 2`` at level
    ``alpha / 2``, so by the union bound the two-sided one keeps the
    family-wise error at ``alpha``; and it is never below the per-target
    two-sided p-value.

    Parameters
    ----------
    n_total : int
    max_counts, min_counts : ndarray of int of shape (n_targets,)
        Only those of the sides ``alternative`` needs are read.
    alternative : {"greater", "less", "two-sided"}
    exact : bool

    Returns
    -------
    pvalue : ndarray of float of shape (n_targets,)

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._kernels.rules import maxstat_pvalue
    >>> maxstat_pvalue(9, min_counts=np.array([0, 4]), alternative="less",
    ...                exact=False)
    array([0.1, 0.5])
    """
    return permutation_pvalue(
        n_total,
        greater=max_counts,
        less=min_counts,
        alternative=alternative,
        exact=exact,
    )


def _family(pvalues):
    """The defined p-values of ``pvalues`` in ascending order, with their
    positions; refuses values outside [0, 1]."""
    pvalues = np.asarray(pvalues, dtype=np.float64)
    if pvalues.ndim != 1:
        raise ValueError(f"pvalues must be 1-D, got shape {pvalues.shape}")
    outside = np.flatnonzero((pvalues < 0) | (pvalues > 1))
    if outside.size:
        first = int(outside[0])
        raise ValueError(
            f"pvalues must lie in [0, 1] (NaN for an undefined test), got "
            f"{float(pvalues[first])!r} at index {first} ({outside.size} of "
            f"{pvalues.size} outside)"
        )
    defined = np.flatnonzero(~np.isnan(pvalues))
    order = np.argsort(pvalues[defined])
    return pvalues[defined][order], defined[order]


def _step_up(pvalues, factor):
    """Benjamini–Hochberg's step-up on ``pvalues`` times ``factor``, computed
    as :func:`scipy.stats.false_discovery_control` computes it, so that the
    values agree to the last digit."""
    ps, positions = _family(pvalues)
    adjusted = np.full(np.shape(pvalues), np.nan)
    m = ps.size
    if m == 0:
        return adjusted
    ranks = np.arange(1, m + 1, dtype=np.float64)
    ps *= m / ranks
    if factor is not None:
        ps *= factor(ranks)
    np.minimum.accumulate(ps[::-1], out=ps[::-1])
    adjusted[positions] = np.clip(ps, 0.0, 1.0)
    return adjusted


def bh_adjusted(pvalues):
    """Benjamini–Hochberg adjusted p-values, NaNs left out of the family.

    The definition of :func:`scipy.stats.false_discovery_control` (method
    "bh") and of statsmodels' ``multipletests(method="fdr_bh")``, computed
    as scipy does so that the values agree to the last digit: sorted
    p-values times ``m / i`` (rank ``i`` of ``m``), the running minimum from
    the largest down, clipped to [0, 1]. Rejecting where the adjusted value
    is at most ``q`` controls the false discovery rate at ``q`` for
    independent or positively dependent tests.

    Parameters
    ----------
    pvalues : array-like of shape (m,)
        Values in [0, 1]; NaN marks an undefined test.

    Returns
    -------
    adjusted : ndarray of shape (m,)
        NaN where ``pvalues`` is NaN; the other values are adjusted as a
        family of their own number.

    Raises
    ------
    ValueError
        If ``pvalues`` is not 1-D, or holds a value outside [0, 1]
        (infinity included), as :func:`scipy.stats.false_discovery_control`
        refuses them.

    Examples
    --------
    >>> from skbatch._kernels.rules import bh_adjusted
    >>> bh_adjusted([0.01, 0.04, float("nan"), 0.03])
    array([0.03, 0.04,  nan, 0.04])
    """
    return _step_up(pvalues, None)


def by_adjusted(pvalues):
    """Benjamini–Yekutieli adjusted p-values, NaNs left out of the family.

    :func:`bh_adjusted` times ``c(m) = 1 + 1/2 + ... + 1/m`` before the
    running minimum, clipped to [0, 1]: the definition of
    :func:`scipy.stats.false_discovery_control` (method "by") and of
    statsmodels' ``multipletests(method="fdr_by")``. Controls the false
    discovery rate under any dependence between the tests.

    Parameters
    ----------
    pvalues : array-like of shape (m,)
        Values in [0, 1]; NaN marks an undefined test.

    Returns
    -------
    adjusted : ndarray of shape (m,)
        NaN where ``pvalues`` is NaN.

    Raises
    ------
    ValueError
        As :func:`bh_adjusted`.

    Examples
    --------
    >>> from skbatch._kernels.rules import by_adjusted
    >>> by_adjusted([0.01, 0.02])
    array([0.03, 0.03])
    """
    return _step_up(pvalues, lambda ranks: np.sum(1 / ranks))


def holm_adjusted(pvalues):
    """Holm's step-down adjusted p-values, NaNs left out of the family.

    Sorted p-values times ``m - i + 1`` (rank ``i`` of ``m``), the running
    maximum from the smallest up, clipped to [0, 1]: statsmodels'
    ``multipletests(method="holm")``. Rejecting where the adjusted value is
    at most ``alpha`` controls the family-wise error rate at ``alpha``
    under any dependence.

    Parameters
    ----------
    pvalues : array-like of shape (m,)
        Values in [0, 1]; NaN marks an undefined test.

    Returns
    -------
    adjusted : ndarray of shape (m,)
        NaN where ``pvalues`` is NaN.

    Raises
    ------
    ValueError
        As :func:`bh_adjusted`.

    Examples
    --------
    >>> from skbatch._kernels.rules import holm_adjusted
    >>> holm_adjusted([0.01, 0.04, 0.03])
    array([0.03, 0.06, 0.06])
    """
    ps, positions = _family(pvalues)
    adjusted = np.full(np.shape(pvalues), np.nan)
    ps *= np.arange(ps.size, 0, -1, dtype=np.float64)
    np.maximum.accumulate(ps, out=ps)
    adjusted[positions] = np.clip(ps, 0.0, 1.0)
    return adjusted


# Multiple-testing corrections of p-values, by name: "holm" controls the
# family-wise error rate, "bh" and "by" the false discovery rate.
CORRECTIONS = {"holm": holm_adjusted, "bh": bh_adjusted, "by": by_adjusted}


def adjust_pvalues(pvalues, method):
    """P-values adjusted for multiple testing by ``method`` of
    :data:`CORRECTIONS`, NaNs left out of the family.

    Parameters
    ----------
    pvalues : array-like of shape (m,)
        Values in [0, 1]; NaN marks an undefined test.
    method : {"holm", "bh", "by"}

    Returns
    -------
    adjusted : ndarray of shape (m,)

    Raises
    ------
    ValueError
        For an unknown ``method``, or as :func:`bh_adjusted`.

    Examples
    --------
    >>> from skbatch._kernels.rules import adjust_pvalues
    >>> adjust_pvalues([0.01, 0.04, 0.03], "holm")
    array([0.03, 0.06, 0.06])
    """
    if not isinstance(method, str) or method not in CORRECTIONS:
        raise ValueError(f"method must be one of {tuple(CORRECTIONS)}, got {method!r}")
    return CORRECTIONS[method](pvalues)
