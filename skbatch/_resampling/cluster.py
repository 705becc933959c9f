"""The cluster bootstrap: whole groups drawn uniformly with replacement."""

import numpy as np

from .base import Scheme
from .groups import group_codes
from .registry import register
from .streams import check_items, integers

__all__ = ["ClusterBootstrap"]


@register("cluster")
class ClusterBootstrap(Scheme):
    """Groups drawn uniformly with replacement, each with all its rows.

    Each item draws one integer in ``[0, n_groups)`` per group; its rows
    are the drawn groups' rows one after another in the order drawn, each
    group's rows in their order in the data. Items thus draw different
    numbers of rows where groups differ in size.

    Examples
    --------
    >>> from skbatch._resampling.cluster import ClusterBootstrap
    >>> rows = ClusterBootstrap(5, [0, 0, 0, 1, 1]).rows(0, [0, 1])
    >>> [len(r) in (4, 5, 6) for r in rows]
    [True, True]
    """

    def __init__(self, n_samples, groups):
        if groups is None:
            raise ValueError(
                "the cluster bootstrap draws whole groups: groups must be given, "
                "got groups=None"
            )
        super().__init__(n_samples, groups)
        self.codes = group_codes(groups, n_samples)

    def rows(self, entropy, items):
        rows, lengths = self.flat_rows(entropy, items)
        return np.split(rows, np.cumsum(lengths)[:-1]) if lengths.size else []

    def flat_rows(self, entropy, items):
        items = check_items(items)
        codes = self.codes
        n_groups = codes.max() + 1
        draws = integers(entropy, items, np.full(n_groups, n_groups)).ravel()
        members = np.argsort(codes, kind="stable")
        sizes = np.bincount(codes, minlength=n_groups)
        firsts = np.cumsum(sizes) - sizes
        taken = sizes[draws]
        # Output position p of a group placed at ``placed`` reads
        # ``members[first + p - placed]``.
        placed = np.cumsum(taken) - taken
        shift = np.repeat(firsts[draws] - placed, taken)
        rows = members[shift + np.arange(shift.shape[0])]
        return rows, taken.reshape(items.shape[0], n_groups).sum(axis=1)
