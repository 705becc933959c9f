"""Permutation schemes: the rows of each group move among themselves.

- :class:`Shuffle`: a uniform random order of each group's rows;
- :class:`CircularShift`: each group rotated by a uniform offset;
- :class:`BlockShuffle`: each group cut into blocks of ``block_size`` rows,
  the blocks in a uniform random order.

Each also enumerates its distinct permutations (:meth:`~GroupPermutation.n_distinct`,
:meth:`~GroupPermutation.ranked`) for :class:`~skbatch._resampling.enumeration.Exact`.
The definitions users read are in :func:`skbatch.random.permutation_indices`.
"""

import numpy as np

from .base import Scheme
from .enumeration import MAX_ENUMERATED, capped_product, unranked
from .groups import check_block_size, group_rows
from .registry import register
from .streams import check_items, integers, item_words, sorted_positions, stream_keys

__all__ = ["BlockShuffle", "CircularShift", "GroupPermutation", "Shuffle"]


class GroupPermutation(Scheme):
    """A permutation within each group (of all rows without groups).

    Subclasses implement :meth:`rows` and :meth:`ranked`, and say in
    :meth:`units` how many rows or blocks each group orders.
    """

    parameter = "permutation_type"

    def __init__(self, n_samples, groups=None, *, block_size=None):
        super().__init__(n_samples, groups)
        self.members = group_rows(groups, n_samples)
        if block_size is not None and not self.uses_block_size:
            raise ValueError(
                f"block_size is not used by {type(self).__name__}, got "
                f"block_size={block_size!r}"
            )
        self.block_size = block_size

    def units(self):
        """Per group, the number of units (rows) whose order is permuted."""
        return [len(rows) for rows in self.members]

    def group_counts(self, cap):
        """Per group, its distinct permutations under the scheme, or None once
        the product over groups exceeds ``cap``.

        Orders of ``k`` units are ``k!`` distinct permutations: blocks are
        disjoint sets of rows, so two orders of them never give the same
        rows, whatever their sizes.
        """
        counts = []
        for size in self.units():
            # Every factor is at least 1: m! exceeds the cap as soon as a
            # partial product of it does.
            count = capped_product(range(2, size + 1), cap)
            if count is None:
                return None
            counts.append(count)
        return counts if capped_product(counts, cap) is not None else None

    def n_distinct(self, cap=None):
        """How many distinct permutations the scheme produces, or None once
        above ``cap`` (None: the largest int64)."""
        cap = MAX_ENUMERATED if cap is None else min(int(cap), MAX_ENUMERATED)
        counts = self.group_counts(cap)
        return None if counts is None else capped_product(counts, cap)

    def ranked(self, rows, rank):
        """The permutations of group ``rows`` of each ``rank`` (below the
        group's count), one row per rank: how enumeration decodes a digit."""
        raise NotImplementedError


@register("shuffle")
class Shuffle(GroupPermutation):
    """A uniform random permutation of each group's rows.

    Each item draws ``n_samples`` words; each group sorts its own rows' words.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._resampling.permutations import Shuffle
    >>> rows = Shuffle(6, [0, 0, 0, 1, 1, 1]).rows(0, [3])
    >>> bool(np.all(np.sort(rows[0, :3]) == [0, 1, 2]))
    True
    """

    def rows(self, entropy, items):
        items = check_items(items)
        keys = item_words(stream_keys(entropy)[0], items, self.n_samples)
        if self.groups is None:
            return sorted_positions(keys)
        out = np.empty((items.shape[0], self.n_samples), dtype=np.int64)
        for rows in self.members:
            out[:, rows] = rows[sorted_positions(keys[:, rows])]
        return out

    def ranked(self, rows, rank):
        return rows[unranked(rank, len(rows))]


@register("circular_shift")
class CircularShift(GroupPermutation):
    """Each group rotated by an offset drawn uniformly in ``0 .. m - 1``.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch._resampling.permutations import CircularShift
    >>> rows = CircularShift(5).rows(0, [3])
    >>> bool(np.all(np.diff(rows[0]) % 5 == 1))
    True
    """

    def rows(self, entropy, items):
        items = check_items(items)
        members = self.members
        offsets = integers(entropy, items, [len(rows) for rows in members])
        out = np.empty((items.shape[0], self.n_samples), dtype=np.int64)
        for g, rows in enumerate(members):
            positions = np.arange(len(rows)) + offsets[:, g : g + 1]
            out[:, rows] = rows[positions % len(rows)]
        return out

    def group_counts(self, cap):
        """Per group of ``m`` rows, its ``m`` rotations; None once the product
        over groups exceeds ``cap``."""
        sizes = self.units()
        return sizes if capped_product(sizes, cap) is not None else None

    def ranked(self, rows, rank):
        return rows[(np.arange(len(rows)) + rank[:, None]) % len(rows)]


def blocks_in_order(order, rows, block_size):
    """``rows`` cut into blocks of ``block_size`` (the last may be shorter),
    block ``order[k, j]`` placed j-th in row k."""
    starts = np.arange(0, len(rows), block_size)
    lengths = np.diff([*starts, len(rows)])
    taken = lengths[order]
    # Output position j in a block moved from ``start`` to ``placed`` reads
    # row ``j + start - placed``.
    placed = np.cumsum(taken, axis=1) - taken
    shift = np.repeat((starts[order] - placed).ravel(), taken.ravel())
    return rows[shift.reshape(len(order), len(rows)) + np.arange(len(rows))]


@register("block_shuffle")
class BlockShuffle(GroupPermutation):
    """Each group cut in row order into blocks of ``block_size`` rows (the
    last may be shorter), the blocks in a uniform random order.

    Each item draws one word per block, the blocks of each group in group
    order; a group's blocks follow the stable order of their words.

    Examples
    --------
    >>> from skbatch._resampling.permutations import BlockShuffle
    >>> BlockShuffle(5, block_size=2).n_distinct()
    6
    """

    uses_block_size = True

    def __init__(self, n_samples, groups=None, *, block_size):
        super().__init__(n_samples, groups, block_size=block_size)
        self.block_size = check_block_size(block_size, self.members)

    def units(self):
        """Per group, its number of blocks."""
        return [-(-len(rows) // self.block_size) for rows in self.members]

    def rows(self, entropy, items):
        items = check_items(items)
        block_size = self.block_size
        counts = self.units()
        keys = item_words(stream_keys(entropy)[0], items, sum(counts))
        out = np.empty((items.shape[0], self.n_samples), dtype=np.int64)
        first = 0
        for rows, count in zip(self.members, counts):
            order = np.argsort(keys[:, first : first + count], axis=1, kind="stable")
            out[:, rows] = blocks_in_order(order, rows, block_size)
            first += count
        return out

    def ranked(self, rows, rank):
        order = unranked(rank, -(-len(rows) // self.block_size))
        return blocks_in_order(order, rows, self.block_size)
