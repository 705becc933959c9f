"""Permutation nulls: exceedance counts per target and of the max
statistic, :class:`PermutationCounter`; :func:`fdr_adjusted`."""

import numpy as np

from .._kernels.rules import (
    adjust_pvalues,
    bh_adjusted,
    check_alternative,
    family_extreme,
    maxstat_pvalue,
    permutation_pvalue,
    reaches,
    sides,
    threshold,
)
from ._common import (
    _BOOL_BYTES,
    _COUNT_BYTES,
    _FLOAT_BYTES,
    _check_complete,
    _check_ids,
    _check_n_total,
    _check_room,
    _check_same,
    _RowStore,
    _RunningMoments,
)

# Float64 arrays per target that PermutationCounter holds beside what it
# retains, whatever the batch: the moments' update (the batch's mean and M2,
# Chan's update of them, numpy's buffers) or the p-values and their
# adjustment (sorted copies, ranks, running minimum). Measured 8 with
# batches of one permutation, whose own temporaries are among them.
COUNTER_TRANSIENT_ARRAYS = 10


class PermutationCounter:
    """Exceedance counts and p-values of permutation null scores.

    For each target, counts the null scores at least as extreme as the
    observed one on the side(s) of ``alternative``: greater than or equal
    to it for "greater" (ties count, as in
    :func:`sklearn.model_selection.permutation_test_score`), less than or
    equal for "less", both for "two-sided"; and the permutations whose
    maximum (minimum) over targets reaches it, for family-wise
    (max-statistic) p-values. The null distribution itself is kept only when
    asked. The p-value rules are those of :mod:`skbatch._kernels.rules`.

    A null score within ``tolerance`` of the observed one counts as a tie,
    on either side: a permutation that reproduces the observed data (the
    identity, or a permutation within blocks of equal values) must count as
    reaching the observed score whatever the round-off of the arithmetic
    that scored it.

    Parameters
    ----------
    observed : float or array-like of shape (n_targets,)
        Score with the true labels; higher is better. Outputs are scalars for
        a scalar, arrays of shape (n_targets,) otherwise.
    n_total : int
        Number of permutations that will be received, at least 1.
    keep_null : bool, default=False
        Also keep every null score, in :attr:`null`.
    tolerance : float or array-like of shape (n_targets,), default=0.0
        Null scores ``>= observed - tolerance`` count as reaching the
        observed score; 0 compares exactly, as scikit-learn does.
    exact : bool, default=False
        The ``n_total`` permutations are every distinct permutation of the
        scheme, enumerated once, the identity among them: the p-values are
        then ``counts / n_total``, the exact share of permutations reaching
        the observed score (the identity counts itself), without the
        ``+ 1`` that Monte Carlo draws add for the observed data.
    alternative : {"greater", "less", "two-sided"}, default="greater"
        The side a null score must reach, as in
        :func:`scipy.stats.permutation_test`: "greater" (the observed score
        is higher than chance), "less", or "two-sided" (twice the smaller
        one-sided p-value, clipped to 1).

    Attributes
    ----------
    n_seen : int
        Number of permutations received so far, merged ones included.
    null : ndarray of shape (n_total,) or (n_total, n_targets) or None
        Null scores at rows ``ids``; None unless ``keep_null=True``.

    Notes
    -----
    Undefined scores never make a p-value small. A NaN observed score gives
    NaN p-values for that target, and the target is left out of the maximum
    over targets. A NaN null score of a target whose observed score is
    defined counts as reaching it (it could have been anything), and as
    reaching every target in the maximum over targets; it makes that
    target's null mean and std NaN.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch.streaming import PermutationCounter
    >>> null = np.random.default_rng(0).normal(size=(99, 2))
    >>> counter = PermutationCounter([2.5, 0.0], n_total=99).update(null)
    >>> counter.counts
    array([ 0, 53])
    >>> counter.pvalue()
    array([0.01, 0.54])
    >>> counter.pvalue_fwer()
    array([0.01, 0.76])
    >>> PermutationCounter([2.5, 0.0], 99, alternative="less").update(null).pvalue()
    array([1.  , 0.47])
    """

    def __init__(
        self,
        observed,
        n_total,
        *,
        keep_null=False,
        tolerance=0.0,
        exact=False,
        alternative="greater",
    ):
        observed = np.array(observed, dtype=np.float64)
        if observed.ndim > 1:
            raise ValueError(
                f"observed must be a scalar or a 1-D array, got shape {observed.shape}"
            )
        _check_n_total(n_total, minimum=1)
        tolerance = np.array(tolerance, dtype=np.float64)
        if tolerance.ndim > observed.ndim or tolerance.shape not in (
            (),
            observed.shape,
        ):
            raise ValueError(
                f"tolerance must be a scalar or have the shape of observed "
                f"{observed.shape}, got shape {tolerance.shape}"
            )
        if not np.all(np.isfinite(tolerance) & (tolerance >= 0)):
            raise ValueError(f"tolerance must be finite and >= 0, got {tolerance!r}")
        self.observed = observed
        self.tolerance = np.broadcast_to(tolerance, observed.shape).copy()
        self.n_total = n_total
        self.keep_null = keep_null
        self.exact = bool(exact)
        self.alternative = check_alternative(alternative)
        # NaN for an undefined observed score: nothing reaches it.
        self._limits = {
            side: threshold(observed, self.tolerance, side).reshape(-1)
            for side in sides(alternative)
        }
        self._undefined = np.isnan(observed).reshape(-1)
        self.n_seen = 0
        n_targets = observed.size
        # Per side: null scores reaching the observed one, and permutations
        # whose most extreme score over the family reaches it.
        self._counts = {
            side: np.zeros(n_targets, dtype=np.int64) for side in self._limits
        }
        self._family_counts = {
            side: np.zeros(n_targets, dtype=np.int64) for side in self._limits
        }
        self._moments = _RunningMoments(n_targets)
        self._store = _RowStore(n_total, observed.shape) if keep_null else None

    @staticmethod
    def nbytes_needed(n_targets, n_total, *, keep_null=False, alternative="greater"):
        """Bytes a counter with these parameters retains, and its p-values'
        temporaries.

        Observed scores, their tolerance and undefined mask, per side
        ``alternative`` counts the limit and both counts, null mean and M2,
        the null scores when kept, and ``COUNTER_TRANSIENT_ARRAYS`` float64
        arrays of the moments' update or the p-values; for the memory
        preflight before any work. An :meth:`update` of m permutations
        holds at most 3 m float64 values per target more (a copy of the
        family's scores, the comparisons), which belong to its batch, and
        the counter's Python objects (a few kB, whatever the targets).

        Parameters
        ----------
        n_targets : int
            Size of ``observed``, 1 for a scalar.
        n_total, keep_null, alternative
            As for the constructor.

        Returns
        -------
        nbytes : int
        """
        n_sides = len(sides(alternative))
        per_side = _FLOAT_BYTES + 2 * _COUNT_BYTES
        per_target = (4 + COUNTER_TRANSIENT_ARRAYS) * _FLOAT_BYTES + _BOOL_BYTES
        nbytes = n_targets * (per_target + n_sides * per_side)
        if keep_null:
            nbytes += n_total * (n_targets * _FLOAT_BYTES + _BOOL_BYTES)
        return nbytes

    def _unpack(self, values):
        return values[0] if self.observed.ndim == 0 else values

    def update(self, null_scores, ids=None):
        """Count a batch of permutations.

        Parameters
        ----------
        null_scores : array-like of shape (m,) or (m, n_targets)
            Scores of m permutations, shaped like ``observed`` per permutation.
        ids : array-like of int of shape (m,), default=None
            Row of :attr:`null` for each permutation; only used when
            ``keep_null=True``. None numbers them from :attr:`n_seen` on,
            which is only right when a single counter sees every permutation.

        Returns
        -------
        self : PermutationCounter
        """
        null_scores = np.asarray(null_scores, dtype=np.float64)
        if (
            null_scores.ndim != 1 + self.observed.ndim
            or null_scores.shape[1:] != self.observed.shape
        ):
            raise ValueError(
                f"null_scores must have shape (m, *{self.observed.shape}) to "
                f"match observed of shape {self.observed.shape}, got "
                f"{null_scores.shape}"
            )
        n_new = len(null_scores)
        _check_room(self.n_seen, n_new, self.n_total)
        if self._store is not None:
            self._store.put(
                null_scores, _check_ids(ids, n_new, self.n_seen, self.n_total)
            )
        scores = null_scores.reshape(n_new, -1)
        # The family is the targets with a defined observed score; within it
        # an undefined null score is extreme on either side, so the family
        # counts are never below the counts.
        family = scores[:, ~self._undefined]
        for side, limit in self._limits.items():
            self._counts[side] += np.count_nonzero(reaches(scores, limit, side), axis=0)
            if family.shape[1]:
                extreme = family_extreme(family, side)
                self._family_counts[side] += np.count_nonzero(
                    reaches(extreme, limit, side), axis=0
                )
        self._moments.update(scores)
        self._moments.advance(len(scores))
        self.n_seen += n_new
        return self

    def merge(self, other):
        """Add the permutations seen by another counter.

        Parameters
        ----------
        other : PermutationCounter
            Built with the same observed, n_total and keep_null, and having
            seen other permutations than this one.

        Returns
        -------
        self : PermutationCounter
        """
        for name in ("observed", "tolerance"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if not np.array_equal(mine, theirs, equal_nan=True):
                _check_same(name, mine.tolist(), np.asarray(theirs).tolist())
        _check_same("n_total", self.n_total, other.n_total)
        _check_same("keep_null", self.keep_null, other.keep_null)
        _check_same("exact", self.exact, other.exact)
        _check_same("alternative", self.alternative, other.alternative)
        _check_room(self.n_seen, other.n_seen, self.n_total)
        if self._store is not None:
            self._store.merge(other._store)
        for side in self._limits:
            self._counts[side] += other._counts[side]
            self._family_counts[side] += other._family_counts[side]
        self._moments.merge(other._moments)
        self.n_seen += other.n_seen
        return self

    def _read(self, counts, side):
        return self._unpack(counts[side].copy()) if side in counts else None

    @property
    def counts(self):
        """Per target, the number of null scores >= observed; None when
        ``alternative="less"``."""
        return self._read(self._counts, "greater")

    @property
    def counts_less(self):
        """Per target, the number of null scores <= observed; None when
        ``alternative="greater"``."""
        return self._read(self._counts, "less")

    @property
    def max_counts(self):
        """Per target, the permutations whose max over targets >= observed;
        None when ``alternative="less"``."""
        return self._read(self._family_counts, "greater")

    @property
    def min_counts(self):
        """Per target, the permutations whose min over targets <= observed;
        None when ``alternative="greater"``."""
        return self._read(self._family_counts, "less")

    @property
    def null_mean(self):
        """Per target, the mean of the null scores seen."""
        return self._unpack(self._moments.current_mean())

    @property
    def null_std(self):
        """Per target, the standard deviation (ddof=1) of the null scores."""
        return self._unpack(np.sqrt(self._moments.variance()))

    @property
    def null(self):
        """ndarray of shape (n_total, ...) or None: null score i at row ids[i]."""
        return None if self._store is None else self._store.rows

    def pvalue(self):
        """Per-target p-value for ``alternative``.

        "greater": ``(counts + 1) / (n_total + 1)``, "less" the same of
        :attr:`counts_less`, "two-sided" twice the smaller of the two,
        clipped to 1 (:func:`skbatch._kernels.rules.permutation_pvalue`). With
        ``exact``, ``counts / n_total``.

        Returns
        -------
        pvalue : float or ndarray of shape (n_targets,)
            NaN where the observed score is NaN.
        """
        _check_complete(self.n_seen, self.n_total)
        return self._defined(
            permutation_pvalue(
                self.n_total,
                **self._counts,
                alternative=self.alternative,
                exact=self.exact,
            )
        )

    def _defined(self, pvalue):
        pvalue[self._undefined] = np.nan
        return self._unpack(pvalue)

    def pvalue_fwer(self):
        """Family-wise p-value by the max statistic, for ``alternative``.

        "greater": ``(max_counts + 1) / (n_total + 1)``; "less": the same of
        :attr:`min_counts` (the min statistic); "two-sided": twice the
        smaller of the two, clipped to 1
        (:func:`skbatch._kernels.rules.maxstat_pvalue`). With ``exact``,
        ``max_counts / n_total``.

        Controls the family-wise error rate over targets (max-statistic
        method); never below :meth:`pvalue`.

        Returns
        -------
        pvalue : float or ndarray of shape (n_targets,)
        """
        _check_complete(self.n_seen, self.n_total)
        return self._defined(
            maxstat_pvalue(
                self.n_total,
                max_counts=self._family_counts.get("greater"),
                min_counts=self._family_counts.get("less"),
                alternative=self.alternative,
                exact=self.exact,
            )
        )

    def pvalue_adjusted(self, method):
        """:meth:`pvalue` adjusted for multiple testing over targets.

        Parameters
        ----------
        method : {"holm", "bh", "by"}
            Holm's step-down (family-wise error rate, any dependence),
            Benjamini–Hochberg (false discovery rate, independent or
            positively dependent tests) or Benjamini–Yekutieli (false
            discovery rate, any dependence); see
            :func:`skbatch._kernels.rules.adjust_pvalues`.

        Returns
        -------
        pvalue : float or ndarray of shape (n_targets,)
            NaN where the observed score is NaN, left out of the family; a
            scalar equals :meth:`pvalue` (a family of one).
        """
        return self._unpack(adjust_pvalues(np.atleast_1d(self.pvalue()), method))

    def pvalue_fdr(self):
        """Benjamini–Hochberg adjusted p-values of :meth:`pvalue`.

        Controls the false discovery rate over targets when their tests are
        independent or positively dependent; see :func:`fdr_adjusted`.

        Returns
        -------
        pvalue : float or ndarray of shape (n_targets,)
            NaN where the observed score is NaN; a scalar equals
            :meth:`pvalue` (a family of one).
        """
        return self.pvalue_adjusted("bh")


def fdr_adjusted(pvalues):
    """Benjamini–Hochberg adjusted p-values, NaNs left out of the family.

    The definition of :func:`scipy.stats.false_discovery_control` (method
    "bh"), computed the same way so that the values agree to the last digit:
    sorted p-values times ``m / i`` (rank ``i`` of ``m``), the running
    minimum from the largest down, clipped to [0, 1]. Rejecting where the
    adjusted value is at most ``q`` controls the false discovery rate at
    ``q`` for independent or positively dependent tests. The same as
    :func:`skbatch._kernels.rules.bh_adjusted`, where the rule lives.

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
    >>> from skbatch.streaming import fdr_adjusted
    >>> fdr_adjusted([0.01, 0.04, float("nan"), 0.03])
    array([0.03, 0.04,  nan, 0.04])
    """
    return bh_adjusted(pvalues)
