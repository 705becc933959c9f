import itertools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_equal
from scipy import stats

from skbatch._resampling.streams import integers as _integers
from skbatch._resampling.streams import sorted_positions as _sorted_positions
from skbatch.random import (
    block_rows,
    bootstrap_counts,
    count_permutations,
    item_rng,
    permutation_indices,
    resolve_entropy,
)

SEED = 1234
N_SAMPLES = 10

group_labels = st.lists(st.integers(0, 4), min_size=1, max_size=30)


# --- resolve_entropy ---------------------------------------------------------


@pytest.mark.parametrize(
    "seed", [0, 1, 42, 2**32 - 1, 2**70, np.int64(7), np.uint32(9)]
)
def test_resolve_entropy_int_is_used_as_is(seed):
    entropy = resolve_entropy(seed)
    assert type(entropy) is int
    assert entropy == int(seed)


def test_resolve_entropy_none_draws_fresh_entropy():
    first, second = resolve_entropy(None), resolve_entropy(None)
    assert type(first) is int and first >= 0
    assert first != second


@pytest.mark.parametrize(
    "make",
    [np.random.RandomState, np.random.default_rng],
    ids=["RandomState", "Generator"],
)
def test_resolve_entropy_from_a_generator_is_reproducible_and_advances_it(make):
    state = make(0)
    first = resolve_entropy(state)
    assert type(first) is int
    assert 0 <= first < 2**128
    assert resolve_entropy(make(0)) == first
    assert resolve_entropy(state) != first  # the generator moved on
    assert resolve_entropy(make(1)) != first


@pytest.mark.parametrize("random_state", ["42", 1.5, True, [1], object])
def test_resolve_entropy_rejects_other_types(random_state):
    with pytest.raises(
        TypeError,
        match=rf"random_state must be None, .*got {type(random_state).__name__}",
    ):
        resolve_entropy(random_state)


@pytest.mark.parametrize("random_state", [-1, -(2**40), np.int64(-3)])
def test_resolve_entropy_rejects_negative_ints(random_state):
    with pytest.raises(
        ValueError,
        match=rf"random_state must be >= 0, got {re.escape(repr(random_state))}",
    ):
        resolve_entropy(random_state)


# --- item_rng ----------------------------------------------------------------


@pytest.mark.parametrize(
    "entropy", [0, SEED, resolve_entropy(np.random.RandomState(3))]
)
def test_item_stream_is_the_spawned_child_of_the_root(entropy):
    children = np.random.SeedSequence(entropy).spawn(12)
    for item in [0, 5, 11]:
        expected = np.random.default_rng(children[item]).random(5)
        np.testing.assert_array_equal(item_rng(entropy, item).random(5), expected)
        np.testing.assert_array_equal(
            item_rng(entropy, np.int64(item)).random(5), expected
        )


def test_item_streams_differ_between_items_and_seeds():
    draws = {(e, i): tuple(item_rng(e, i).random(3)) for e in (0, 1) for i in range(5)}
    assert len(set(draws.values())) == len(draws)


# --- bootstrap_counts --------------------------------------------------------


@pytest.mark.parametrize("groups", [None, [0, 0, 1, 1, 1, 2, 3, 3, 3, 3]])
def test_bootstrap_counts_depend_only_on_seed_and_item(groups):
    full = bootstrap_counts(SEED, range(12), N_SAMPLES, groups=groups)
    np.testing.assert_array_equal(
        bootstrap_counts(SEED, [5, 9], N_SAMPLES, groups=groups), full[[5, 9]]
    )
    np.testing.assert_array_equal(
        bootstrap_counts(SEED, np.array([9, 5]), N_SAMPLES, groups=groups), full[[9, 5]]
    )
    for start in range(0, 12, 5):
        np.testing.assert_array_equal(
            bootstrap_counts(
                SEED, range(start, min(start + 5, 12)), N_SAMPLES, groups=groups
            ),
            full[start : start + 5],
        )
    other = bootstrap_counts(SEED + 1, range(12), N_SAMPLES, groups=groups)
    assert not np.array_equal(other, full)


def test_bootstrap_counts_rows_sum_to_n():
    counts = bootstrap_counts(SEED, range(200), N_SAMPLES)
    assert counts.shape == (200, N_SAMPLES)
    assert counts.dtype == np.int64
    assert (counts >= 0).all()
    np.testing.assert_array_equal(counts.sum(axis=1), np.full(200, N_SAMPLES))
    assert len({tuple(row) for row in counts}) > 150


def test_bootstrap_counts_draw_with_replacement_uniformly():
    counts = bootstrap_counts(SEED, range(4000), N_SAMPLES)
    # Each sample is drawn once per replicate on average.
    np.testing.assert_allclose(counts.mean(axis=0), 1.0, atol=0.06)
    # P(a sample is left out) = (1 - 1/n)^n.
    expected_out = (1 - 1 / N_SAMPLES) ** N_SAMPLES
    assert abs((counts == 0).mean() - expected_out) < 0.02


@settings(max_examples=50, deadline=None)
@given(groups=group_labels, seed=st.integers(0, 2**32 - 1))
def test_cluster_bootstrap_draws_whole_groups(groups, seed):
    groups = np.asarray(groups)
    n_samples = len(groups)
    labels, sizes = np.unique(groups, return_counts=True)
    counts = bootstrap_counts(seed, range(8), n_samples, groups=groups)
    assert counts.shape == (8, n_samples)
    for row in counts:
        per_group = []
        for label in labels:
            values = row[groups == label]
            assert (values == values[0]).all()  # constant within a group
            per_group.append(values[0])
        # As many groups drawn (with replacement) as there are groups.
        assert sum(per_group) == len(labels)
        assert row.sum() == np.dot(per_group, sizes)


def test_cluster_bootstrap_accepts_string_labels():
    groups = np.array(["b", "a", "b", "c", "a"])
    counts = bootstrap_counts(SEED, range(50), 5, groups=groups)
    np.testing.assert_array_equal(counts[:, 0], counts[:, 2])
    np.testing.assert_array_equal(counts[:, 1], counts[:, 4])
    assert (counts[:, [0, 1, 3]].sum(axis=1) == 3).all()


@pytest.mark.parametrize("groups", [[0, 1, 2], [[0, 1], [2, 3]], np.zeros(11)])
def test_groups_must_label_each_sample(groups):
    with pytest.raises(
        ValueError, match=r"groups must be 1-D with one label per sample \(10\)"
    ):
        bootstrap_counts(SEED, [0], N_SAMPLES, groups=groups)
    with pytest.raises(
        ValueError, match=r"groups must be 1-D with one label per sample \(10\)"
    ):
        permutation_indices(SEED, [0], N_SAMPLES, groups=groups)


# --- permutation_indices -----------------------------------------------------


@pytest.mark.parametrize("groups", [None, [0, 1, 0, 1, 0, 1, 2, 2, 2, 2]])
def test_permutations_depend_only_on_seed_and_item(groups):
    full = permutation_indices(SEED, range(12), N_SAMPLES, groups=groups)
    np.testing.assert_array_equal(
        permutation_indices(SEED, [5, 9], N_SAMPLES, groups=groups), full[[5, 9]]
    )
    np.testing.assert_array_equal(
        permutation_indices(SEED, [9], N_SAMPLES, groups=groups), full[[9]]
    )
    assert not np.array_equal(
        permutation_indices(SEED + 1, range(12), N_SAMPLES, groups=groups), full
    )


def test_permutation_rows_are_permutations():
    perms = permutation_indices(SEED, range(100), N_SAMPLES)
    assert perms.shape == (100, N_SAMPLES)
    assert perms.dtype == np.int64
    for row in perms:
        np.testing.assert_array_equal(np.sort(row), np.arange(N_SAMPLES))
    assert len({tuple(row) for row in perms}) == 100


def test_permutations_cover_all_orders():
    perms = permutation_indices(SEED, range(600), 3)
    assert {tuple(row) for row in perms} == set(itertools.permutations(range(3)))


@settings(max_examples=50, deadline=None)
@given(groups=group_labels, seed=st.integers(0, 2**32 - 1))
def test_within_group_permutation_never_crosses_groups(groups, seed):
    groups = np.asarray(groups)
    n_samples = len(groups)
    perms = permutation_indices(seed, range(6), n_samples, groups=groups)
    assert perms.shape == (6, n_samples)
    for row in perms:
        np.testing.assert_array_equal(np.sort(row), np.arange(n_samples))
        np.testing.assert_array_equal(groups[row], groups)


def test_within_group_permutation_mixes_inside_groups():
    groups = np.repeat([0, 1], 3)
    perms = permutation_indices(SEED, range(400), 6, groups=groups)
    assert {tuple(row[:3]) for row in perms} == set(itertools.permutations(range(3)))
    assert {tuple(row[3:]) for row in perms} == set(itertools.permutations(range(3, 6)))


def _reference_words(entropy, item, n_words):
    """Item ``item``'s words, one Philox per item, as the module docstring lays
    them out."""
    key = np.random.SeedSequence(entropy).generate_state(4, np.uint64)[:2]
    counters = -(-n_words // 4)
    generator = np.random.Philox(key=key, counter=item * counters)
    return [int(w) for w in generator.random_raw(n_words)]


def _reference_integers(entropy, item, bounds):
    """Lemire's method draw by draw in Python integers, with the documented
    redraw stream."""
    words = _reference_words(entropy, item, -(-len(bounds) // 2))
    halves = [half for w in words for half in (w % 2**32, w >> 32)]
    redraw_key = np.random.SeedSequence(entropy).generate_state(4, np.uint64)[2:]
    out = []
    for j, bound in enumerate(bounds):
        threshold = 2**32 % bound
        product = halves[j] * bound
        if product % 2**32 < threshold:
            generator = np.random.Philox(
                key=redraw_key, counter=item * 2**128 + j * 2**64
            )
            candidates = (
                half
                for w in iter(generator.random_raw, None)
                for half in (int(w) % 2**32, int(w) >> 32)
            )
            product = next(
                c * bound for c in candidates if c * bound % 2**32 >= threshold
            )
        out.append(product >> 32)
    return out


def test_draws_follow_the_documented_stream_layout():
    groups = np.array([2, 0, 2, 1, 0, 2, 1, 1, 0, 2])
    items = [0, 4, 9]
    perms = permutation_indices(SEED, items, N_SAMPLES, groups=groups)
    for row, item in zip(perms, items):
        keys = _reference_words(SEED, item, N_SAMPLES)
        expected = np.arange(N_SAMPLES)
        for label in [0, 1, 2]:
            rows = np.flatnonzero(groups == label)
            # High 64 - b bits, b the bit length of len(rows) - 1; ties by position.
            bits = max(1, (len(rows) - 1).bit_length())
            order = sorted(range(len(rows)), key=lambda i: (keys[rows[i]] >> bits, i))
            expected[rows] = rows[order]
        np.testing.assert_array_equal(row, expected)
    counts = bootstrap_counts(SEED, items, 7)
    for row, item in zip(counts, items):
        draws = _reference_integers(SEED, item, [7] * 7)
        np.testing.assert_array_equal(row, np.bincount(draws, minlength=7))


def test_rejected_integers_are_redrawn_uniformly():
    # A bound of 3 * 2**30 rejects a quarter of the 32-bit words, which
    # exercises the redraw stream that realistic sizes reach rarely.
    bound = 3 * 2**30
    draws = _integers(SEED, np.arange(300), [bound] * 7)
    for item in [0, 1, 299]:
        assert list(draws[item]) == _reference_integers(SEED, item, [bound] * 7)
    assert draws.min() >= 0 and draws.max() < bound
    observed = np.bincount(draws.ravel() // 2**30, minlength=3)
    assert stats.chisquare(observed).pvalue > 1e-3


def test_streams_are_frozen():
    # Computed once: a changed value breaks every result users have stored.
    np.testing.assert_array_equal(
        bootstrap_counts(SEED, [0, 7], 10),
        [[0, 0, 2, 0, 1, 2, 0, 3, 2, 0], [1, 3, 1, 2, 1, 0, 0, 1, 0, 1]],
    )
    np.testing.assert_array_equal(
        bootstrap_counts(SEED, [3], 6, groups=[0, 0, 1, 1, 2, 2]), [[1, 1, 0, 0, 2, 2]]
    )
    np.testing.assert_array_equal(
        bootstrap_counts(SEED, [3], 10, block_size=3), [[1, 1, 1, 0, 0, 1, 1, 2, 1, 1]]
    )
    np.testing.assert_array_equal(
        permutation_indices(SEED, [0, 7], 10),
        [[8, 1, 6, 2, 0, 3, 5, 7, 4, 9], [2, 7, 4, 1, 0, 3, 9, 5, 6, 8]],
    )
    np.testing.assert_array_equal(
        permutation_indices(
            SEED, [5], 10, groups=[0, 1] * 5, permutation_type="circular_shift"
        ),
        [[8, 9, 0, 1, 2, 3, 4, 5, 6, 7]],
    )
    np.testing.assert_array_equal(
        permutation_indices(
            SEED, [2], 10, permutation_type="block_shuffle", block_size=3
        ),
        [[0, 1, 2, 9, 6, 7, 8, 3, 4, 5]],
    )


def test_shuffle_ties_go_by_position():
    # 4 elements: the low 2 bits are the position, so 7 << 40 and
    # (7 << 40) + 1 tie, as do 3 << 40 and (3 << 40) + 2.
    keys = np.array([[7 << 40, 3 << 40, (7 << 40) + 1, (3 << 40) + 2]], np.uint64)
    np.testing.assert_array_equal(_sorted_positions(keys), [[1, 3, 0, 2]])


def test_shuffle_positions_and_pairs_are_uniform():
    n_items = 12_000
    perms = permutation_indices(SEED, range(n_items), 5)
    # Each position takes each value 1/5 of the time.
    for position in range(5):
        observed = np.bincount(perms[:, position], minlength=5)
        assert stats.chisquare(observed).pvalue > 1e-3
    # Each ordered pair of values at positions (0, 1) 1/20 of the time.
    pairs = perms[:, 0] * 5 + perms[:, 1]
    observed = np.bincount(pairs, minlength=25)
    assert np.all(observed[:: 5 + 1] == 0)
    assert stats.chisquare(np.delete(observed, np.arange(0, 25, 6))).pvalue > 1e-3
    # And the 24 orders of 4 items each 1/24 of the time.
    perms = permutation_indices(SEED, range(n_items), 4)
    codes = perms @ [64, 16, 4, 1]
    _, observed = np.unique(codes, return_counts=True)
    assert observed.size == 24
    assert stats.chisquare(observed).pvalue > 1e-3


def test_items_need_not_be_consecutive_or_sorted():
    full = bootstrap_counts(SEED, range(40), N_SAMPLES)
    items = [39, 2, 3, 4, 17, 0]
    np.testing.assert_array_equal(bootstrap_counts(SEED, items, N_SAMPLES), full[items])


def test_items_must_be_non_negative():
    with pytest.raises(ValueError, match="items must be >= 0, got -1"):
        bootstrap_counts(SEED, [0, -1], N_SAMPLES)


# --- permutation_indices: circular shifts and block shuffles -----------------

time_series_schemes = pytest.mark.parametrize(
    "permutation_type, block_size",
    [("shuffle", None), ("circular_shift", None), ("block_shuffle", 2)],
)


@time_series_schemes
@pytest.mark.parametrize("groups", [None, [0, 1, 0, 1, 0, 1, 2, 2, 2, 2]])
def test_every_scheme_draws_per_item(permutation_type, block_size, groups):
    kwargs = dict(permutation_type=permutation_type, block_size=block_size)
    full = permutation_indices(SEED, range(12), N_SAMPLES, groups, **kwargs)
    np.testing.assert_array_equal(
        permutation_indices(SEED, [3, 7], N_SAMPLES, groups, **kwargs), full[[3, 7]]
    )
    for row in full:
        np.testing.assert_array_equal(np.sort(row), np.arange(N_SAMPLES))


def _shift_of(row_values, rows):
    """The offset o with row_values == rows[(arange(m) + o) % m], or None."""
    m = len(rows)
    offset = int(np.flatnonzero(rows == row_values[0])[0])
    expected = rows[(np.arange(m) + offset) % m]
    return offset if np.array_equal(row_values, expected) else None


def test_circular_shift_offsets_are_uniform():
    n_samples = 7
    perms = permutation_indices(
        SEED, range(700 * n_samples), n_samples, permutation_type="circular_shift"
    )
    offsets = [_shift_of(row, np.arange(n_samples)) for row in perms]
    assert None not in offsets
    frequencies = np.bincount(offsets, minlength=n_samples)
    assert frequencies.shape == (n_samples,)  # identity (0) included
    assert stats.chisquare(frequencies).pvalue > 0.001


@settings(max_examples=50, deadline=None)
@given(groups=group_labels, seed=st.integers(0, 2**32 - 1))
def test_circular_shift_rotates_each_group_in_row_order(groups, seed):
    groups = np.asarray(groups)
    n_samples = len(groups)
    perms = permutation_indices(
        seed, range(6), n_samples, groups=groups, permutation_type="circular_shift"
    )
    for row in perms:
        np.testing.assert_array_equal(np.sort(row), np.arange(n_samples))
        for label in np.unique(groups):
            rows = np.flatnonzero(groups == label)
            assert _shift_of(row[rows], rows) is not None


def test_circular_shift_draws_offsets_independently_per_group():
    groups = np.array([0, 1] * 4)  # interleaved, 4 rows each
    perms = permutation_indices(
        SEED, range(800), 8, groups=groups, permutation_type="circular_shift"
    )
    pairs = {
        (
            _shift_of(row[groups == 0], np.flatnonzero(groups == 0)),
            _shift_of(row[groups == 1], np.flatnonzero(groups == 1)),
        )
        for row in perms
    }
    assert pairs == set(itertools.product(range(4), range(4)))


def _block_order(row_values, rows, block_size):
    """Order of the blocks of ``rows`` in ``row_values``, or None if one is cut."""
    blocks = [tuple(rows[i : i + block_size]) for i in range(0, len(rows), block_size)]
    order, position = [], 0
    while position < len(row_values):
        starting = [
            b for b, block in enumerate(blocks) if block[0] == row_values[position]
        ]
        if not starting:
            return None
        block = blocks[starting[0]]
        if tuple(row_values[position : position + len(block)]) != block:
            return None
        order.append(starting[0])
        position += len(block)
    return order


@settings(max_examples=50, deadline=None)
@given(
    groups=group_labels, seed=st.integers(0, 2**32 - 1), block_size=st.integers(1, 4)
)
def test_block_shuffle_moves_whole_blocks_within_groups(groups, seed, block_size):
    groups = np.asarray(groups)
    block_size = min(block_size, np.unique(groups, return_counts=True)[1].min())
    n_samples = len(groups)
    perms = permutation_indices(
        seed,
        range(6),
        n_samples,
        groups=groups,
        permutation_type="block_shuffle",
        block_size=block_size,
    )
    for row in perms:
        np.testing.assert_array_equal(np.sort(row), np.arange(n_samples))
        for label in np.unique(groups):
            rows = np.flatnonzero(groups == label)
            order = _block_order(row[rows], rows, block_size)
            assert order is not None
            assert sorted(order) == list(range(-(-len(rows) // block_size)))


def test_block_shuffle_draws_every_block_order():
    # 7 rows in blocks of 3: [0 1 2] [3 4 5] [6], the short block moves too.
    perms = permutation_indices(
        SEED, range(600), 7, permutation_type="block_shuffle", block_size=3
    )
    orders = [tuple(_block_order(row, np.arange(7), 3)) for row in perms]
    assert set(orders) == set(itertools.permutations(range(3)))
    frequencies = np.unique(orders, axis=0, return_counts=True)[1]
    assert stats.chisquare(frequencies).pvalue > 0.001


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(permutation_type="roll"),
            r"permutation_type must be one of \('shuffle', 'circular_shift', "
            r"'block_shuffle'\), got 'roll'",
        ),
        (
            dict(permutation_type="block_shuffle"),
            r"permutation_type='block_shuffle' needs block_size, .*got "
            r"block_size=None",
        ),
        (
            dict(block_size=2),
            r"block_size is only used with permutation_type='block_shuffle', got "
            r"block_size=2 with permutation_type='shuffle'",
        ),
        (
            dict(permutation_type="circular_shift", block_size=2),
            r"block_size=2 with permutation_type='circular_shift'",
        ),
        (
            dict(permutation_type="block_shuffle", block_size=0),
            r"block_size must be an int >= 1, got 0",
        ),
        (
            dict(permutation_type="block_shuffle", block_size=2.0),
            r"block_size must be an int >= 1, got float: 2.0",
        ),
        (
            dict(permutation_type="block_shuffle", block_size=True),
            r"block_size must be an int >= 1, got bool: True",
        ),
        (
            dict(permutation_type="block_shuffle", block_size=11),
            r"block_size must be at most the size of every group, got "
            r"block_size=11 but n_samples=10",
        ),
        (
            dict(
                permutation_type="block_shuffle",
                block_size=4,
                groups=[0, 1, 0, 1, 0, 1, 1, 1, 1, 1],
            ),
            r"block_size=4 but the smallest group has 3 rows",
        ),
    ],
)
def test_permutation_scheme_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        permutation_indices(SEED, [0], N_SAMPLES, **kwargs)


# --- bootstrap_counts: moving blocks -----------------------------------------


def _block_starts(counts, rows, block_size):
    """Per position of ``rows``, how many blocks start there; None if ``counts``
    is not a sum of whole blocks inside ``rows``."""
    residual = counts[rows].copy()
    starts = np.zeros(len(rows), dtype=np.int64)
    for position in range(len(rows)):
        if residual[position] < 0:
            return None
        if residual[position] == 0:
            continue
        if position + block_size > len(rows):
            return None
        starts[position] = residual[position]
        residual[position : position + block_size] -= residual[position]
    return starts


@settings(max_examples=50, deadline=None)
@given(
    groups=group_labels, seed=st.integers(0, 2**32 - 1), block_size=st.integers(1, 4)
)
def test_moving_blocks_are_whole_and_inside_groups(groups, seed, block_size):
    groups = np.asarray(groups)
    block_size = min(block_size, np.unique(groups, return_counts=True)[1].min())
    n_samples = len(groups)
    counts = bootstrap_counts(
        seed, range(8), n_samples, groups=groups, block_size=block_size
    )
    n_blocks = max(1, int(np.floor(n_samples / block_size + 0.5)))
    for row in counts:
        assert row.sum() == n_blocks * block_size
        blocks = 0
        for label in np.unique(groups):
            starts = _block_starts(row, np.flatnonzero(groups == label), block_size)
            assert starts is not None
            blocks += starts.sum()
        assert blocks == n_blocks


@pytest.mark.parametrize(
    "groups", [None, np.array([0, 1, 0, 1, 0, 1, 0, 1, 1, 1, 1, 1])]
)
def test_moving_block_starts_are_uniform(groups):
    n_samples, block_size = 12, 3
    counts = bootstrap_counts(
        SEED, range(3000), n_samples, groups=groups, block_size=block_size
    )
    members = (
        [np.arange(n_samples)]
        if groups is None
        else [np.flatnonzero(groups == g) for g in (0, 1)]
    )
    starts = sum(
        np.concatenate([_block_starts(row, rows, block_size) for rows in members])
        for row in counts
    )
    # Only positions with a whole block after them inside their group.
    valid = np.concatenate(
        [np.arange(len(rows)) <= len(rows) - block_size for rows in members]
    )
    assert (starts[~valid] == 0).all()
    assert valid.sum() == (10 if groups is None else 2 + 6)
    assert stats.chisquare(starts[valid]).pvalue > 0.001


@pytest.mark.parametrize("groups", [None, [0, 0, 1, 1, 1, 2, 2, 3, 3, 3]])
def test_moving_block_counts_depend_only_on_seed_and_item(groups):
    full = bootstrap_counts(SEED, range(12), N_SAMPLES, groups, block_size=2)
    np.testing.assert_array_equal(
        bootstrap_counts(SEED, [3, 7], N_SAMPLES, groups, block_size=2), full[[3, 7]]
    )
    assert not np.array_equal(
        bootstrap_counts(SEED + 1, range(12), N_SAMPLES, groups, block_size=2), full
    )


def test_block_size_one_is_the_iid_bootstrap_in_distribution():
    counts = bootstrap_counts(SEED, range(4000), N_SAMPLES, block_size=1)
    np.testing.assert_array_equal(counts.sum(axis=1), N_SAMPLES)
    np.testing.assert_allclose(counts.mean(axis=0), 1.0, atol=0.06)
    expected_out = (1 - 1 / N_SAMPLES) ** N_SAMPLES
    assert abs((counts == 0).mean() - expected_out) < 0.02


@pytest.mark.parametrize(
    "block_size, groups, match",
    [
        (0, None, r"block_size must be an int >= 1, got 0"),
        (-2, None, r"block_size must be an int >= 1, got -2"),
        (2.5, None, r"block_size must be an int >= 1, got float: 2.5"),
        ("3", None, r"block_size must be an int >= 1, got str: '3'"),
        (11, None, r"block_size=11 but n_samples=10"),
        (
            3,
            [0, 0, 1, 1, 1, 1, 1, 1, 1, 1],
            r"block_size must be at most the size of every group, got "
            r"block_size=3 but the smallest group has 2 rows",
        ),
    ],
)
def test_moving_block_validation(block_size, groups, match):
    with pytest.raises(ValueError, match=match):
        bootstrap_counts(SEED, [0], N_SAMPLES, groups, block_size=block_size)


# --- exact enumeration --------------------------------------------------------


def hand_enumeration(permutation_type, sizes, block_size=None):
    """Every distinct row permutation of the scheme, by brute force: the
    product over runs of every rotation, row order or block order."""
    per_run, first = [], 0
    for size in sizes:
        rows = list(range(first, first + size))
        first += size
        if permutation_type == "circular_shift":
            options = [tuple(rows[k:] + rows[:k]) for k in range(size)]
        elif permutation_type == "shuffle":
            options = list(itertools.permutations(rows))
        else:
            blocks = [rows[k : k + block_size] for k in range(0, size, block_size)]
            options = [
                tuple(row for block in order for row in block)
                for order in itertools.permutations(blocks)
            ]
        per_run.append(options)
    return {sum(parts, ()) for parts in itertools.product(*per_run)}


ENUMERATED = [
    ("circular_shift", (7,), None),
    ("circular_shift", (3, 5, 2), None),
    ("shuffle", (4,), None),
    ("shuffle", (3, 1, 2), None),
    ("block_shuffle", (10,), 3),
    ("block_shuffle", (4, 6), 2),
]


@pytest.mark.parametrize("permutation_type, sizes, block_size", ENUMERATED)
def test_enumeration_is_complete_without_duplicates(
    permutation_type, sizes, block_size
):
    groups = np.repeat(np.arange(len(sizes)), sizes)
    n = len(groups)
    kwargs = dict(permutation_type=permutation_type, block_size=block_size)
    total = count_permutations(n, groups, **kwargs)
    expected = hand_enumeration(permutation_type, sizes, block_size)
    assert total == len(expected)
    perms = permutation_indices(SEED, range(total), n, groups, exact=True, **kwargs)
    assert len({tuple(row) for row in perms}) == total
    assert {tuple(row) for row in perms} == expected
    assert_array_equal_rows(perms[0], np.arange(n))
    # Item i is the same permutation in any batch and for any entropy.
    picked = [total - 1, 0, total // 2]
    assert np.array_equal(
        permutation_indices(SEED + 1, picked, n, groups, exact=True, **kwargs),
        perms[picked],
    )


def assert_array_equal_rows(row, expected):
    assert np.array_equal(row, expected), (row, expected)


def test_enumeration_refuses_items_past_the_count():
    with pytest.raises(ValueError, match="enumerates the 5 distinct"):
        permutation_indices(SEED, [5], 5, permutation_type="circular_shift", exact=True)


def test_count_permutations_stops_at_the_limit():
    assert count_permutations(20) == np.prod(np.arange(1, 21), dtype=object)
    assert count_permutations(21) is None
    assert count_permutations(10**5, limit=1000) is None
    rotations = dict(permutation_type="circular_shift")
    assert count_permutations(10, np.repeat([0, 1], 5), **rotations, limit=25) == 25
    assert count_permutations(10, np.repeat([0, 1], 5), **rotations, limit=24) is None


# --- bootstrap_counts: circular and stationary blocks ------------------------


def _blocks_of(drawn, rows):
    """The blocks of a circular/stationary replicate of one group: runs of
    consecutive positions of ``rows`` (wrapping around its end) in ``drawn``,
    as (start, length) pairs; None if a drawn row is outside the group."""
    position = {row: k for k, row in enumerate(rows)}
    if any(row not in position for row in drawn):
        return None
    blocks = [[position[drawn[0]], 1]]
    for previous, row in zip(drawn[:-1], drawn[1:]):
        if position[row] == (position[previous] + 1) % len(rows):
            blocks[-1][1] += 1
        else:
            blocks.append([position[row], 1])
    return blocks


@settings(max_examples=40, deadline=None)
@given(
    groups=group_labels,
    seed=st.integers(0, 2**32 - 1),
    block_size=st.integers(1, 4),
    block_scheme=st.sampled_from(["circular", "stationary"]),
)
def test_circular_and_stationary_blocks_stay_inside_groups(
    groups, seed, block_size, block_scheme
):
    groups = np.asarray(groups)
    block_size = min(block_size, np.unique(groups, return_counts=True)[1].min())
    n_samples = len(groups)
    drawn = block_rows(
        seed,
        range(8),
        n_samples,
        groups,
        block_size=block_size,
        block_scheme=block_scheme,
    )
    counts = bootstrap_counts(
        seed,
        range(8),
        n_samples,
        groups,
        block_size=block_size,
        block_scheme=block_scheme,
    )
    for row, count in zip(drawn, counts):
        assert_equal(np.bincount(row, minlength=n_samples), count)
        for label in np.unique(groups):
            rows = np.flatnonzero(groups == label)
            # Each group keeps its length, made of whole blocks of its own rows.
            assert count[rows].sum() == len(rows)
            blocks = _blocks_of(row[rows], rows)
            assert blocks is not None
            if block_scheme == "circular":
                # Blocks of block_size positions, the last one cut at the
                # group's length: consecutive rows within each, modulo m.
                # Positions in the group (labels may interleave).
                local = np.searchsorted(rows, row[rows])
                for start in range(0, len(rows), block_size):
                    block = local[start : start + block_size]
                    assert_equal(np.diff(block) % len(rows), 1)


def test_circular_blocks_wrap_around_their_group():
    # Two runs of 5 and 7 rows, blocks of 4: ceil(5/4) = 2 and 2 blocks.
    groups = np.repeat([0, 1], [5, 7])
    drawn = block_rows(
        SEED, range(400), 12, groups, block_size=4, block_scheme="circular"
    )
    members = [np.arange(5), np.arange(5, 12)]
    wrapped = 0
    for row in drawn:
        for rows in members:
            local = row[rows] - rows[0]
            for start in range(0, len(rows), 4):
                block = local[start : start + 4]
                # Consecutive modulo the group's length...
                assert_equal(np.diff(block) % len(rows), 1)
                # ... and starting anywhere, so some wrap to the group's start.
                wrapped += bool((np.diff(block) < 0).any())
    assert wrapped > 100
    # Every start is equally likely, the group's last row included.
    starts = drawn[:, [0, 4]].ravel()
    assert_equal(np.unique(starts), np.arange(5))
    assert stats.chisquare(np.bincount(starts)).pvalue > 0.001


def test_stationary_block_lengths_are_geometric():
    # One long run: a block is a run of consecutive rows started by a renewal;
    # its length is geometric with mean block_size (P(L = l) = (1-p)^(l-1) p,
    # p = 1 / block_size). Blocks cut by the run's end are left out, and runs
    # that continue by chance into the next block's start are rare
    # (probability 1 / n) and merged, as the test cannot tell them apart.
    n_samples, block_size = 4000, 5
    drawn = block_rows(
        SEED,
        range(20),
        n_samples,
        block_size=block_size,
        block_scheme="stationary",
    )
    lengths = []
    for row in drawn:
        breaks = np.flatnonzero(np.diff(row) % n_samples != 1) + 1
        lengths.extend(np.diff(breaks))
    lengths = np.asarray(lengths)
    p = 1 / block_size
    assert abs(lengths.mean() - block_size) < 0.15
    largest = 25
    observed = np.bincount(np.minimum(lengths, largest), minlength=largest + 1)[1:]
    law = (1 - p) ** np.arange(largest - 1) * p
    expected = np.append(law, 1 - law.sum()) * len(lengths)
    assert stats.chisquare(observed, expected).pvalue > 0.001


def test_stationary_starts_are_uniform_and_renewals_have_probability_one_over_b():
    groups = np.repeat([0, 1], [6, 9])
    drawn = block_rows(
        SEED, range(3000), 15, groups, block_size=3, block_scheme="stationary"
    )
    # A group's first row always starts a block, anywhere in the group.
    assert stats.chisquare(np.bincount(drawn[:, 0], minlength=6)).pvalue > 0.001
    assert stats.chisquare(np.bincount(drawn[:, 6] - 6, minlength=9)).pvalue > 0.001
    # Other rows continue the block (next row, wrapping) with probability 2/3,
    # or start anew uniformly (hitting the next row by chance 1/m of the time).
    local = drawn[:, 6:] - 6
    continued = np.diff(local) % 9 == 1
    assert local.min() >= 0
    expected = 2 / 3 + 1 / 3 / 9
    assert abs(continued.mean() - expected) < 0.01


@pytest.mark.parametrize("block_scheme", ["circular", "stationary"])
@pytest.mark.parametrize("groups", [None, [0, 0, 1, 1, 1, 2, 2, 3, 3, 3]])
def test_block_scheme_counts_depend_only_on_seed_and_item(block_scheme, groups):
    kwargs = dict(block_size=2, block_scheme=block_scheme)
    full = bootstrap_counts(SEED, range(12), N_SAMPLES, groups, **kwargs)
    np.testing.assert_array_equal(
        bootstrap_counts(SEED, [7, 3], N_SAMPLES, groups, **kwargs), full[[7, 3]]
    )
    assert not np.array_equal(
        bootstrap_counts(SEED + 1, range(12), N_SAMPLES, groups, **kwargs), full
    )
    assert (full.sum(axis=1) == N_SAMPLES).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(block_size=2, block_scheme="geometric"),
            r"block_scheme must be one of \('moving', 'circular', 'stationary'\), "
            r"got 'geometric' \(with block_size=2\)",
        ),
        (
            dict(block_scheme="circular"),
            r"block_scheme='circular' needs block_size, got block_size=None",
        ),
        (
            dict(block_size=11, block_scheme="stationary"),
            r"block_size=11 but n_samples=10",
        ),
    ],
)
def test_block_scheme_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bootstrap_counts(SEED, [0], N_SAMPLES, **kwargs)
