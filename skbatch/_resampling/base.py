"""What every resampling scheme implements.

A scheme is built once from the data's layout (``n_samples``, ``groups``
and its own parameters, checked there) and then turns (entropy, item ids)
into each item's rows in drawn order; it never sees the data. Counts, the
weights of a fit that does not depend on the order of its rows, are derived
from those rows.
"""

import numpy as np

__all__ = ["Scheme", "row_counts"]


def row_counts(rows, lengths, n_samples):
    """How often each of ``0 .. n_samples - 1`` occurs in each replicate of
    ``rows``, the replicates' rows one after another (``lengths`` each)."""
    n_items = lengths.shape[0]
    offset = rows + n_samples * np.repeat(np.arange(n_items), lengths)
    counts = np.bincount(offset, minlength=n_items * n_samples)
    return counts.astype(np.int64, copy=False).reshape(n_items, n_samples)


class Scheme:
    """A resampling scheme of ``n_samples`` rows. Subclasses implement
    :meth:`rows`; enumerable ones (the permutations) also ``n_distinct``.

    Subclasses take ``(n_samples, groups=None, **params)`` and check them
    in ``__init__``, so that a bad layout is refused before anything is
    drawn; :func:`skbatch._resampling.registry.scheme` builds them by name.
    """

    #: The estimator parameter whose value names this scheme in
    #: :data:`~skbatch._resampling.registry.SCHEMES` ("block_scheme",
    #: "permutation_type"), or None for a scheme chosen otherwise (the iid
    #: and cluster bootstraps by ``groups``, enumeration by ``exact``).
    parameter = None
    #: Whether the scheme takes ``block_size`` (and then needs it).
    uses_block_size = False

    def __init__(self, n_samples, groups=None):
        self.n_samples = n_samples
        self.groups = groups

    def rows(self, entropy, items):
        """Each item's rows in drawn order.

        Parameters
        ----------
        entropy : int
            From :func:`skbatch.random.resolve_entropy`.
        items : array-like of int
            Item ids (replicates, permutations); item ``i``'s rows depend
            on ``entropy`` and ``i`` alone.

        Returns
        -------
        rows : ndarray of shape (len(items), m), dtype int64, or list
            Row ``k`` holds item ``k``'s rows; a list of 1-D int64 arrays
            where items draw different numbers of rows.
        """
        raise NotImplementedError

    def flat_rows(self, entropy, items):
        """``(rows, lengths)``: the items' rows one after another, ``lengths[k]``
        rows for item ``k``."""
        rows = self.rows(entropy, items)
        if isinstance(rows, np.ndarray):
            return rows.ravel(), np.full(rows.shape[0], rows.shape[1])
        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        flat = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
        return flat, lengths

    def counts(self, entropy, items):
        """How often each row occurs in each item, of shape (len(items),
        n_samples), dtype int64: :meth:`rows` counted."""
        rows, lengths = self.flat_rows(entropy, items)
        return row_counts(rows, lengths, self.n_samples)
