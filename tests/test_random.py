import itertools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skbatch.random import (
    bootstrap_counts,
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
