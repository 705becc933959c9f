"""The resampling layer: schemes behind a registry (skbatch/_resampling).

A scheme turns (entropy, item ids) into each item's rows in drawn order;
skbatch.random's public functions draw through the registered schemes, and
a new scheme is one class and one registry line. The references are the
public functions for the registry's names, and naive loops: itertools'
permutations in lexicographic order, rows counted one item at a time, the
draws of a toy scheme assembled block by block.
"""

import ast
import itertools
import math
import pathlib
import pickle

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import skbatch
from skbatch._resampling import registry
from skbatch._resampling.base import Scheme
from skbatch._resampling.block_bootstrap import BlockBootstrap
from skbatch._resampling.groups import group_rows
from skbatch._resampling.streams import check_items
from skbatch._resampling.streams import integers as _integers
from skbatch.random import (
    bootstrap_counts,
    bootstrap_rows,
    count_permutations,
    permutation_indices,
    resolve_entropy,
)

SEED = 11
ENTROPY = resolve_entropy(SEED)
# Runs of unequal length, as fMRI sessions are, and the same runs' labels
# interleaved and out of order: a group's rows are not consecutive there.
RUN_LENGTHS = (13, 7, 10, 10)
N_SAMPLES = sum(RUN_LENGTHS)
RUNS = np.repeat([3, 0, 2, 1], RUN_LENGTHS)
INTERLEAVED = np.tile([2, 0, 1, 0, 3], N_SAMPLES // 5)
# Consecutive ids and scattered ones: a batch of the engine, or a rerun of a
# few replicates.
ITEMS = (np.arange(6), np.array([9, 2, 40, 41, 1000]))

# Each registered name, the parameters its estimators give, and the public
# function that draws it.
BOOTSTRAPS = {
    "iid": (None, {}),
    "cluster": (RUNS, {}),
    "moving": (RUNS, {"block_size": 4, "block_scheme": "moving"}),
    "circular": (INTERLEAVED, {"block_size": 3, "block_scheme": "circular"}),
    "stationary": (RUNS, {"block_size": 5, "block_scheme": "stationary"}),
}
PERMUTATIONS = {
    "shuffle": (INTERLEAVED, {"permutation_type": "shuffle"}),
    "circular_shift": (RUNS, {"permutation_type": "circular_shift"}),
    "block_shuffle": (RUNS, {"permutation_type": "block_shuffle", "block_size": 3}),
}


def scheme_params(kwargs):
    """The registry's parameters of a scheme: ``block_size`` alone."""
    return {k: v for k, v in kwargs.items() if k == "block_size"}


def test_the_registry_holds_every_scheme_of_the_public_functions():
    names = {*BOOTSTRAPS, *PERMUTATIONS, "exact"}
    assert names <= set(registry.SCHEMES)
    assert registry.BLOCK_SCHEMES == ("moving", "circular", "stationary")
    assert registry.PERMUTATION_TYPES == ("shuffle", "circular_shift", "block_shuffle")
    for cls in registry.SCHEMES.values():
        assert issubclass(cls, Scheme)


def assert_resample_of(name, rows, groups, block_size):
    """``rows`` are a resample of bootstrap ``name``, by its definition."""
    labels = np.zeros(N_SAMPLES) if groups is None else np.asarray(groups)
    if name == "iid":
        assert len(rows) == N_SAMPLES and 0 <= rows.min() and rows.max() < N_SAMPLES
    elif name == "cluster":
        # Whole groups, each in its row order, one after another.
        position = 0
        while position < len(rows):
            group = np.flatnonzero(labels == labels[rows[position]])
            assert_array_equal(rows[position : position + len(group)], group)
            position += len(group)
    elif name == "moving":
        # Whole blocks of consecutive rows of one group.
        blocks = rows.reshape(-1, block_size)
        assert (np.diff(blocks, axis=1) == 1).all()
        assert (labels[blocks] == labels[blocks[:, :1]]).all()
    else:
        # Each group rebuilt at its place from its own rows; circular blocks
        # run on, wrapping around the group, for block_size positions.
        assert_array_equal(labels[rows], labels)
        if name == "circular":
            for label in np.unique(labels):
                own = np.flatnonzero(labels == label)
                rank = np.searchsorted(own, rows[own])
                runs_on = np.diff(rank) % len(own) == 1
                inside = np.arange(1, len(own)) % block_size != 0
                assert runs_on[inside].all()


@pytest.mark.parametrize("name", BOOTSTRAPS)
@pytest.mark.parametrize("items", ITEMS, ids=["batch", "scattered"])
def test_each_bootstrap_draws_as_its_public_function(name, items):
    groups, kwargs = BOOTSTRAPS[name]
    drawn = registry.scheme(name, N_SAMPLES, groups, **scheme_params(kwargs))
    rows = drawn.rows(ENTROPY, items)
    expected = bootstrap_rows(ENTROPY, items, N_SAMPLES, groups, **kwargs)
    assert len(rows) == len(expected) == len(items)
    for got, want in zip(rows, expected):
        assert got.dtype == np.int64
        assert_array_equal(got, want)
        assert_resample_of(name, got, groups, kwargs.get("block_size"))
    # The factory estimators call picks the same scheme from their parameters.
    chosen = registry.bootstrap_scheme(N_SAMPLES, groups, **kwargs)
    assert type(chosen) is registry.SCHEMES[name]


@pytest.mark.parametrize("name", BOOTSTRAPS)
def test_counts_are_the_rows_counted(name):
    groups, kwargs = BOOTSTRAPS[name]
    drawn = registry.scheme(name, N_SAMPLES, groups, **scheme_params(kwargs))
    items = ITEMS[1]
    counts = drawn.counts(ENTROPY, items)
    rows = drawn.rows(ENTROPY, items)
    assert counts.dtype == np.int64 and counts.shape == (len(items), N_SAMPLES)
    for k, item_rows in enumerate(rows):
        naive = np.zeros(N_SAMPLES, dtype=np.int64)
        for row in item_rows:
            naive[row] += 1
        assert_array_equal(counts[k], naive)
    assert_array_equal(
        counts, bootstrap_counts(ENTROPY, items, N_SAMPLES, groups, **kwargs)
    )


@pytest.mark.parametrize("name", PERMUTATIONS)
@pytest.mark.parametrize("items", ITEMS, ids=["batch", "scattered"])
def test_each_permutation_draws_as_its_public_function(name, items):
    groups, kwargs = PERMUTATIONS[name]
    drawn = registry.scheme(name, N_SAMPLES, groups, **scheme_params(kwargs))
    rows = drawn.rows(ENTROPY, items)
    assert rows.dtype == np.int64
    assert_array_equal(
        rows, permutation_indices(ENTROPY, items, N_SAMPLES, groups, **kwargs)
    )
    # Rows move within their group only: a permutation of each group.
    labels = np.asarray(groups)
    for row in rows:
        assert_array_equal(labels[row], labels)
        assert_array_equal(np.sort(row), np.arange(N_SAMPLES))
    for cap in (None, 100, 10**6):
        assert drawn.n_distinct(cap) == count_permutations(
            N_SAMPLES, groups, **kwargs, limit=cap
        )


# Small layouts whose permutations itertools lists: runs of 3 and 2 rows,
# and the same labels interleaved.
SMALL = [(None, 4), ([0, 0, 0, 1, 1], 5), ([1, 0, 1, 0, 1], 5)]


def lexicographic(members, permutation_type, block_size, n_samples):
    """Every permutation of the scheme, the first group's order varying
    fastest, each group's orders in lexicographic order (itertools')."""
    per_group = []
    for rows in members:
        if permutation_type == "circular_shift":
            orders = [np.roll(rows, -shift) for shift in range(len(rows))]
        elif permutation_type == "shuffle":
            orders = [rows[list(p)] for p in itertools.permutations(range(len(rows)))]
        else:
            blocks = [rows[k : k + block_size] for k in range(0, len(rows), block_size)]
            orders = [
                np.concatenate([blocks[b] for b in p])
                for p in itertools.permutations(range(len(blocks)))
            ]
        per_group.append(orders)
    out = []
    # itertools.product varies its last factor fastest: the groups reversed.
    for combination in itertools.product(*per_group[::-1]):
        permutation = np.empty(n_samples, dtype=np.int64)
        for rows, order in zip(members, combination[::-1]):
            permutation[rows] = order
        out.append(permutation)
    return np.array(out)


@pytest.mark.parametrize("groups, n_samples", SMALL)
@pytest.mark.parametrize(
    "permutation_type, block_size",
    [("shuffle", None), ("circular_shift", None), ("block_shuffle", 2)],
)
def test_exact_enumerates_every_permutation_in_lexicographic_order(
    groups, n_samples, permutation_type, block_size
):
    members = group_rows(groups, n_samples)
    expected = lexicographic(members, permutation_type, block_size, n_samples)
    params = {"block_size": block_size} if block_size else {}
    exact = registry.scheme(
        "exact", n_samples, groups, permutation_type=permutation_type, **params
    )
    assert exact.n_distinct() == len(expected)
    rows = exact.rows(ENTROPY, np.arange(len(expected)))
    assert_array_equal(rows, expected)
    # Nothing is drawn: another entropy, the same enumeration.
    assert_array_equal(exact.rows(ENTROPY + 1, [len(expected) - 1]), expected[-1:])
    chosen = registry.permutation_scheme(
        n_samples,
        groups,
        permutation_type=permutation_type,
        block_size=block_size,
        exact=True,
    )
    assert_array_equal(chosen.rows(0, [0, len(expected) - 1]), expected[[0, -1]])
    with pytest.raises(ValueError, match="items must be below"):
        exact.rows(0, [len(expected)])


def test_n_distinct_is_the_product_over_groups():
    sizes = np.array(RUN_LENGTHS)
    shuffle = registry.scheme("shuffle", N_SAMPLES, RUNS)
    assert shuffle.n_distinct() is None  # 13! * 7! * 10!**2 > 2**63
    assert registry.scheme("circular_shift", N_SAMPLES, RUNS).n_distinct() == int(
        np.prod(sizes)
    )
    blocks = registry.scheme("block_shuffle", N_SAMPLES, RUNS, block_size=4)
    n_blocks = -(-sizes // 4)  # 4, 2, 3, 3 blocks
    assert blocks.n_distinct() == math.prod(math.factorial(k) for k in n_blocks)
    assert blocks.n_distinct(cap=100) is None


# --- a new scheme is one class and one registry line --------------------------


class DisjointBlocks(BlockBootstrap):
    """Carlstein's non-overlapping blocks: each group cut into whole blocks
    from its first row, replicates made of as many blocks as moving blocks,
    drawn with replacement among all groups' blocks."""

    def rows(self, entropy, items):
        items = check_items(items)
        size = self.block_size
        blocks = np.concatenate(
            [
                rows[: len(rows) // size * size].reshape(-1, size)
                for rows in self.members
            ]
        )
        count = max(1, (2 * self.n_samples + size) // (2 * size))
        starts = _integers(entropy, items, np.full(count, len(blocks)))
        return blocks[starts].reshape(len(items), count * size)


class DeleteGroup(Scheme):
    """The delete-a-group jackknife: item ``i`` leaves out group ``i`` (of the
    sorted labels), so that items have different numbers of rows."""

    def __init__(self, n_samples, groups):
        super().__init__(n_samples, groups)
        self.members = group_rows(groups, n_samples)

    def rows(self, entropy, items):
        kept = []
        for item in check_items(items):
            left_out = self.members[item % len(self.members)]
            kept.append(np.setdiff1d(np.arange(self.n_samples), left_out))
        return kept


@pytest.fixture
def toy_schemes(monkeypatch):
    monkeypatch.setitem(registry.SCHEMES, "disjoint", DisjointBlocks)
    monkeypatch.setitem(registry.SCHEMES, "delete_group", DeleteGroup)


def test_a_registered_block_scheme_is_a_block_scheme_of_the_public_functions(
    toy_schemes,
):
    items = ITEMS[1]
    kwargs = {"block_size": 3, "block_scheme": "disjoint"}
    rows = bootstrap_rows(ENTROPY, items, N_SAMPLES, RUNS, **kwargs)
    counts = bootstrap_counts(ENTROPY, items, N_SAMPLES, RUNS, **kwargs)
    # Naive: the pooled whole blocks, run after run, each drawn block's rows.
    blocks = []
    for label in np.unique(RUNS):
        run = np.flatnonzero(RUNS == label)
        blocks += [run[k : k + 3] for k in range(0, len(run) - 2, 3)]
    draws = _integers(ENTROPY, items, np.full(13, len(blocks)))  # 40 / 3 rounded
    for k in range(len(items)):
        expected = np.concatenate([blocks[d] for d in draws[k]])
        assert_array_equal(rows[k], expected)
        assert_array_equal(counts[k], np.bincount(expected, minlength=N_SAMPLES))
    assert registry.choices("block_scheme")[-1] == "disjoint"


def test_a_registered_scheme_is_built_by_the_factory(toy_schemes):
    drawn = registry.scheme("delete_group", N_SAMPLES, INTERLEAVED)
    items = [0, 1, 7]
    rows = drawn.rows(ENTROPY, items)
    counts = drawn.counts(ENTROPY, items)
    for k, item in enumerate(items):
        left_out = np.unique(INTERLEAVED)[item % 4]
        assert_array_equal(rows[k], np.flatnonzero(INTERLEAVED != left_out))
        assert_array_equal(counts[k], INTERLEAVED != left_out)
    with pytest.raises(ValueError, match="scheme must be one of .*'delete_group'"):
        registry.scheme("delete-group", N_SAMPLES, INTERLEAVED)


def test_a_bad_layout_is_refused_when_the_scheme_is_built():
    with pytest.raises(ValueError, match="smallest group has 7 rows"):
        registry.scheme("moving", N_SAMPLES, RUNS, block_size=8)
    with pytest.raises(ValueError, match="groups must be 1-D"):
        registry.scheme("shuffle", N_SAMPLES, RUNS[:-1])
    with pytest.raises(ValueError, match="cluster bootstrap draws whole groups"):
        registry.scheme("cluster", N_SAMPLES)
    with pytest.raises(ValueError, match="block_size is only used with"):
        registry.permutation_scheme(N_SAMPLES, RUNS, block_size=2)


def test_a_scheme_pickles_and_draws_the_same_rows():
    # Problems holding a scheme travel to dask workers.
    drawn = registry.scheme("stationary", N_SAMPLES, INTERLEAVED, block_size=4)
    copy = pickle.loads(pickle.dumps(drawn))
    assert_array_equal(copy.rows(ENTROPY, ITEMS[1]), drawn.rows(ENTROPY, ITEMS[1]))


def test_the_resampling_layer_imports_no_estimator():
    package = pathlib.Path(skbatch.__file__).parent
    above = {"ridge", "banded", "bootstrap", "permutation", "_ridge", "_bootstrap"}
    for path in sorted((package / "_resampling").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            # From the package: ``from ..x import`` or ``from skbatch.x import``.
            parts = (node.module or "").split(".")
            if node.level == 0 and parts[0] == "skbatch":
                parts = parts[1:]
            elif node.level != 2:
                continue
            named = {parts[0]} if parts and parts[0] else {a.name for a in node.names}
            assert not named & above, (path.name, node.module)
