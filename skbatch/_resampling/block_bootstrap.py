"""Block bootstraps: blocks of consecutive rows, never crossing a group.

- :class:`MovingBlocks`: whole blocks, their starts drawn among all valid
  start positions pooled over groups, the blocks one after another;
- :class:`CircularBlocks` (arch's ``CircularBlockBootstrap``) and
  :class:`StationaryBlocks` (arch's ``StationaryBootstrap``): each group
  rebuilt at its place and length from blocks wrapping around its end.

The definitions users read are in :func:`skbatch.random.bootstrap_counts`.
"""

import numpy as np

from .base import Scheme
from .groups import check_block_size, group_rows
from .registry import register
from .streams import check_items, integers

__all__ = ["BlockBootstrap", "CircularBlocks", "MovingBlocks", "StationaryBlocks"]


def n_blocks(n_samples, block_size):
    """Blocks per moving-block replicate: n_samples / block_size rounded half up."""
    return max(1, (2 * n_samples + block_size) // (2 * block_size))


class BlockBootstrap(Scheme):
    """Blocks of ``block_size`` rows of one group; subclasses draw them."""

    parameter = "block_scheme"
    uses_block_size = True

    def __init__(self, n_samples, groups=None, *, block_size):
        super().__init__(n_samples, groups)
        self.members = group_rows(groups, n_samples)
        self.block_size = check_block_size(block_size, self.members)


@register("moving")
class MovingBlocks(BlockBootstrap):
    """Rows of moving-block replicates, block after block.

    Examples
    --------
    >>> from skbatch._resampling.block_bootstrap import MovingBlocks
    >>> MovingBlocks(10, block_size=3).rows(0, [0, 1]).shape
    (2, 9)
    """

    def rows(self, entropy, items):
        items = check_items(items)
        members, block_size = self.members, self.block_size
        # One row per valid start: the rows of the block starting there.
        blocks = np.concatenate(
            [
                np.lib.stride_tricks.sliding_window_view(rows, block_size)
                for rows in members
            ]
        )
        count = n_blocks(self.n_samples, block_size)
        starts = integers(entropy, items, np.full(count, len(blocks)))
        return blocks[starts].reshape(len(items), count * block_size)


@register("circular")
class CircularBlocks(BlockBootstrap):
    """Rows of circular-block replicates, at the positions of each group's rows.

    Examples
    --------
    >>> from skbatch._resampling.block_bootstrap import CircularBlocks
    >>> CircularBlocks(10, block_size=3).rows(0, [0, 1]).shape
    (2, 10)
    """

    def rows(self, entropy, items):
        items = check_items(items)
        members, block_size = self.members, self.block_size
        counts = [-(-len(rows) // block_size) for rows in members]
        bounds = np.repeat([len(rows) for rows in members], counts)
        starts = integers(entropy, items, bounds)
        out = np.empty((len(items), self.n_samples), dtype=np.int64)
        first = 0
        for rows, count in zip(members, counts):
            positions = np.arange(len(rows))
            # Position p of the group reads block p // block_size at offset
            # p % block_size from its start, wrapping around the group's end;
            # the last block is cut at the group's length.
            block_starts = starts[:, first + positions // block_size]
            out[:, rows] = rows[(block_starts + positions % block_size) % len(rows)]
            first += count
        return out


@register("stationary")
class StationaryBlocks(BlockBootstrap):
    """Rows of stationary-bootstrap replicates, at each group's rows' positions.

    As arch's ``StationaryBootstrap``: each row of a group starts a new
    block with probability ``1 / block_size`` (its draw in ``[0,
    block_size)`` is 0; a group's first row always does), at a start drawn
    uniformly among the group's rows; otherwise it reads the row after the
    previous one, wrapping around the group's end. Block lengths are thus
    geometric with mean ``block_size``, cut at the group's end.

    Examples
    --------
    >>> from skbatch._resampling.block_bootstrap import StationaryBlocks
    >>> StationaryBlocks(10, block_size=3).rows(0, [0, 1]).shape
    (2, 10)
    """

    def rows(self, entropy, items):
        items = check_items(items)
        members, n_samples = self.members, self.n_samples
        sizes = np.zeros(n_samples, dtype=np.int64)
        for rows in members:
            sizes[rows] = len(rows)
        draws = integers(
            entropy,
            items,
            np.concatenate([sizes, np.full(n_samples, self.block_size)]),
        )
        starts, renew = draws[:, :n_samples], draws[:, n_samples:] == 0
        out = np.empty((len(items), n_samples), dtype=np.int64)
        for rows in members:
            positions = np.arange(len(rows))
            new = renew[:, rows]
            new[:, 0] = True
            # The position where each position's block started.
            began = np.maximum.accumulate(np.where(new, positions, 0), axis=1)
            block_starts = np.take_along_axis(starts[:, rows], began, axis=1)
            out[:, rows] = rows[(block_starts + positions - began) % len(rows)]
        return out
