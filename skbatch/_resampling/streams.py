"""Per-item windows of one counter-based generator, and what schemes draw
from them: uniform integers and uniform permutations.

The layout of the windows, of the integers and of the permutations is
frozen and documented in the docstring of ``skbatch/random.py``; every
scheme of this package draws through these functions alone.
"""

import numpy as np

__all__ = ["check_items", "integers", "item_words", "sorted_positions", "stream_keys"]

# Philox4x64 gives four 64-bit words per counter value.
_WORDS_PER_COUNTER = 4
# Lemire's method maps 32-bit words, whose product with the bound fits in
# 64 bits: bounds up to 2**32 (more samples than any host holds).
_MAX_BOUND = 2**32


def stream_keys(entropy):
    """Philox keys of the main stream and of the redraws of rejected integers."""
    state = np.random.SeedSequence(entropy).generate_state(4, np.uint64)
    return state[:2], state[2:]


def item_words(key, items, n_words):
    """Words ``0 .. n_words - 1`` of each item's window, of shape (len(items),
    n_words), dtype uint64; the layout is in the docstring of skbatch/random.py."""
    counters = -(-n_words // _WORDS_PER_COUNTER)
    width = counters * _WORDS_PER_COUNTER
    out = np.empty((items.shape[0], width), dtype=np.uint64)
    # One generator per run of consecutive ids: the engine's batches are one.
    bounds = [0, *(np.flatnonzero(np.diff(items) != 1) + 1), items.shape[0]]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if hi > lo:
            generator = np.random.Philox(key=key, counter=int(items[lo]) * counters)
            out[lo:hi] = generator.random_raw((hi - lo) * width).reshape(hi - lo, -1)
    return out[:, :n_words]


def check_items(items):
    """Item ids as a 1-D int64 array; refuse a negative one."""
    items = np.asarray(items, dtype=np.int64).reshape(-1)
    if items.size and items.min() < 0:
        raise ValueError(f"items must be >= 0, got {items[items < 0][0]}")
    return items


def integers(entropy, items, bounds):
    """Uniform integers: column ``j`` in ``[0, bounds[j])``, one row per item.

    Lemire's multiply-shift on 32-bit words, with rejection: exactly uniform.
    Returns an int64 array of shape (len(items), len(bounds)).
    """
    bounds = np.asarray(bounds, dtype=np.uint64)
    if bounds.size and int(bounds.max()) > _MAX_BOUND:
        raise ValueError(
            f"at most {_MAX_BOUND} samples or groups can be resampled, got "
            f"{int(bounds.max())}"
        )
    main, redraw = stream_keys(entropy)
    n_draws = bounds.shape[0]
    words = item_words(main, items, -(-n_draws // 2))
    # Little-endian 32-bit halves: the low half of each word first.
    halves = words.astype("<u8", copy=False).view("<u4")[:, :n_draws]
    product = halves * bounds
    # 2**32 mod m: low halves below it would favour some values.
    threshold = ((_MAX_BOUND - bounds) % bounds).astype(np.uint32)
    out = (product >> np.uint64(32)).astype(np.int64)
    rejected = product.astype(np.uint32) < threshold
    for row, j in zip(*np.nonzero(rejected)):
        out[row, j] = _redraw(redraw, int(items[row]), j, int(bounds[j]))
    return out


def _redraw(key, item, j, bound):
    """Draw ``j`` of ``item`` again, after a rejection (see integers)."""
    generator = np.random.Philox(key=key, counter=(item << 128) + (int(j) << 64))
    threshold = (_MAX_BOUND - bound) % bound
    while True:
        word = int(generator.random_raw())
        for half in (word & (_MAX_BOUND - 1), word >> 32):
            product = half * bound
            if product % _MAX_BOUND >= threshold:
                return product >> 32


def sorted_positions(keys):
    """Positions ``0 .. m - 1`` in the order of ``keys``, one row of keys per
    item: a uniform permutation per item for independent uniform keys.

    Each key's low bits are replaced by its position, so that one sort of
    the values (1.6x faster than a stable argsort) orders by the random high
    bits and breaks their ties by position.
    """
    n = keys.shape[1]
    low = np.uint64((1 << max(1, (n - 1).bit_length())) - 1)
    tagged = keys & ~low
    tagged |= np.arange(n, dtype=np.uint64)
    tagged.sort(axis=1)
    tagged &= low
    return tagged.view(np.int64)
