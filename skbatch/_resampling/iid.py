"""The iid bootstrap: ``n_samples`` rows drawn uniformly with replacement."""

import numpy as np

from .base import Scheme
from .registry import register
from .streams import check_items, integers

__all__ = ["IIDBootstrap"]


@register("iid")
class IIDBootstrap(Scheme):
    """Rows drawn uniformly with replacement, in the order drawn.

    Each item draws ``n_samples`` integers in ``[0, n_samples)`` from its
    stream; they are its rows as they are.

    Examples
    --------
    >>> from skbatch._resampling.iid import IIDBootstrap
    >>> rows = IIDBootstrap(5).rows(0, [0, 1])
    >>> rows.shape, bool(((rows >= 0) & (rows < 5)).all())
    ((2, 5), True)
    """

    def __init__(self, n_samples, groups=None):
        if groups is not None:
            raise ValueError(
                "the iid bootstrap draws rows, not groups; got groups, which the "
                "'cluster' scheme draws whole"
            )
        super().__init__(n_samples)

    def rows(self, entropy, items):
        items = check_items(items)
        return integers(entropy, items, np.full(self.n_samples, self.n_samples))
