"""A resample is an ordered list of rows, and the refits get it in that order.

skbatch.random draws each replicate's rows in order (iid rows as drawn,
whole clusters as drawn, blocks of consecutive rows as drawn); the batched
linear path reads counts derived from them, and the generic path refits on
the rows in that order, so that an order-dependent estimator (a Delayer in a
pipeline, a time-series model) sees whole blocks of consecutive rows. The
references are structural (blocks of consecutive rows of one run, whole
clusters in their row order) and naive refits on the counted rows.
Also here: group labels must not be missing (NaN, None, pd.NA).
"""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import BaseEstimator, RegressorMixin, TransformerMixin, clone
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

from skbatch import BootstrapEstimator, Delayer, PermutationScorer
from skbatch.random import (
    bootstrap_counts,
    bootstrap_rows,
    check_groups,
    resolve_entropy,
)

SEED = 3
# Runs of unequal length, as fMRI sessions are; 40 rows in all, so that ten
# moving blocks of 4 rows make replicates of the data's length.
RUN_LENGTHS = (13, 7, 10, 10)
N_SAMPLES = sum(RUN_LENGTHS)
RUNS = np.repeat(np.arange(len(RUN_LENGTHS)), RUN_LENGTHS)
BLOCK_SIZE = 4
# Room for the longest cluster-bootstrap replicate: every draw the longest run.
WIDTH = len(RUN_LENGTHS) * max(RUN_LENGTHS)


class RowRecorder(RegressorMixin, BaseEstimator):
    """Records the row ids (X's first column) it is fit on, in order, padded
    with -1 to ``width`` so that every replicate has one shape."""

    def __init__(self, width=WIDTH):
        self.width = width

    def fit(self, X, y):
        self.rows_ = np.full(self.width, -1.0)
        self.rows_[: len(X)] = np.asarray(X)[:, 0]
        self.n_features_in_ = np.asarray(X).shape[1]
        return self

    def predict(self, X):
        return np.zeros(len(X))


def recorded_rows(block_size=None, block_scheme="moving", groups=None, n=12):
    """Each replicate's rows, as the generic path handed them to the refit."""
    X = np.arange(N_SAMPLES, dtype=float)[:, None]
    y = np.random.default_rng(0).standard_normal(N_SAMPLES)
    fitted = BootstrapEstimator(
        RowRecorder(),
        n_bootstrap=n,
        block_size=block_size,
        block_scheme=block_scheme,
        attributes="rows_",
        return_samples=True,
        random_state=SEED,
    ).fit(X, y, groups=groups)
    samples = fitted.results_["rows_"].samples
    return [row[row >= 0].astype(np.int64) for row in samples]


@pytest.mark.parametrize("groups", [None, RUNS], ids=["one-run", "runs"])
def test_moving_blocks_reach_the_refit_whole_and_in_drawn_order(groups):
    counts = bootstrap_counts(
        resolve_entropy(SEED), np.arange(12), N_SAMPLES, groups, block_size=4
    )
    for rows, count in zip(recorded_rows(4, "moving", groups), counts):
        # Ten whole blocks of 4 consecutive rows of one run, one after another.
        blocks = rows.reshape(-1, BLOCK_SIZE)
        assert_array_equal(np.diff(blocks, axis=1), 1)
        if groups is not None:
            assert (RUNS[blocks] == RUNS[blocks[:, :1]]).all()
        # The rows the linear path weights.
        assert_array_equal(np.bincount(rows, minlength=N_SAMPLES), count)


@pytest.mark.parametrize("groups", [None, RUNS], ids=["one-run", "runs"])
def test_circular_blocks_reach_the_refit_whole_wrapping_inside_their_run(groups):
    runs = RUNS if groups is not None else np.zeros(N_SAMPLES, dtype=int)
    lengths = np.bincount(runs)
    starts = np.cumsum(lengths) - lengths
    for rows in recorded_rows(BLOCK_SIZE, "circular", groups):
        # Each run keeps its place and length, cut into blocks of 4 positions
        # (the last one shorter), each block consecutive rows of that run,
        # wrapping from its last row to its first.
        assert_array_equal(runs[rows], runs)
        for start, length in zip(starts, lengths):
            local = rows[start : start + length] - start
            for first in range(0, length, BLOCK_SIZE):
                block = local[first : first + BLOCK_SIZE]
                assert_array_equal(np.diff(block) % length, 1)


def test_circular_example_from_a_user_is_blocks_not_sorted_rows():
    rows = recorded_rows(BLOCK_SIZE, "circular", None, n=2)[0]
    blocks = rows.reshape(-1, BLOCK_SIZE)
    assert_array_equal(np.diff(blocks, axis=1) % N_SAMPLES, 1)


@pytest.mark.parametrize("groups", [None, RUNS], ids=["one-run", "runs"])
def test_stationary_blocks_reach_the_refit_whole_inside_their_run(groups):
    runs = RUNS if groups is not None else np.zeros(N_SAMPLES, dtype=int)
    lengths = np.bincount(runs)
    starts = np.cumsum(lengths) - lengths
    n_blocks = []
    for rows in recorded_rows(BLOCK_SIZE, "stationary", groups, n=40):
        assert_array_equal(runs[rows], runs)
        for start, length in zip(starts, lengths):
            local = rows[start : start + length] - start
            # Blocks (runs of rows following each other, wrapping) of mean
            # length 4: far fewer than the rows, as sorted rows would not be.
            n_blocks.append(1 + np.count_nonzero(np.diff(local) % length != 1))
    # Geometric lengths of mean 4 cut at the runs' ends: 3.9 rows per block
    # in one run of 40, 3.3 in these four runs; sorted rows give 2.4.
    rows_per_block = N_SAMPLES * 40 / np.sum(n_blocks)
    assert 3 < rows_per_block < 5


def test_cluster_bootstrap_refits_whole_clusters_in_drawn_order():
    entropy = resolve_entropy(SEED)
    counts = bootstrap_counts(entropy, np.arange(30), N_SAMPLES, RUNS)
    sorted_replicates = 0
    for rows, count in zip(recorded_rows(None, "moving", RUNS, n=30), counts):
        assert_array_equal(np.bincount(rows, minlength=N_SAMPLES), count)
        # Whole clusters, each in its row order, one after another.
        drawn, position = [], 0
        while position < len(rows):
            run = RUNS[rows[position]]
            members = np.flatnonzero(RUNS == run)
            assert_array_equal(rows[position : position + len(members)], members)
            drawn.append(run)
            position += len(members)
        sorted_replicates += bool(np.all(np.diff(drawn) >= 0))
    # Four clusters drawn four times: in sorted order 35 times in 256.
    assert sorted_replicates < 15


def test_iid_rows_reach_the_refit_as_drawn():
    entropy = resolve_entropy(SEED)
    counts = bootstrap_counts(entropy, np.arange(12), N_SAMPLES)
    recorded = recorded_rows(n=12)
    for rows, count in zip(recorded, counts):
        assert_array_equal(np.bincount(rows, minlength=N_SAMPLES), count)
        assert not np.all(np.diff(rows) >= 0)


@pytest.mark.parametrize(
    "block_size, block_scheme, groups",
    [
        (None, "moving", None),
        (None, "moving", RUNS),
        (BLOCK_SIZE, "moving", RUNS),
        (BLOCK_SIZE, "circular", RUNS),
        (BLOCK_SIZE, "stationary", RUNS),
    ],
)
def test_refits_get_the_rows_of_bootstrap_rows(block_size, block_scheme, groups):
    drawn = bootstrap_rows(
        resolve_entropy(SEED),
        np.arange(12),
        N_SAMPLES,
        groups,
        block_size=block_size,
        block_scheme=block_scheme,
    )
    recorded = recorded_rows(block_size, block_scheme, groups)
    for rows, expected in zip(recorded, drawn):
        assert_array_equal(rows, expected)


class LagRecorder(TransformerMixin, BaseEstimator):
    """Passes X on, recording the pairs (row, its lag-1 feature) it saw."""

    def fit(self, X, y=None):
        self.pairs_ = np.asarray(X)[:, :2].copy()
        return self

    def transform(self, X):
        return X


def test_delayer_in_a_pipeline_sees_true_lags_inside_every_block():
    # Column 0 is the row id (centred, as Delayer's zero fill asks); the
    # Delayer adds its lag-1 copy. Inside a block of consecutive rows the
    # lag is the previous row, except at the first row of each block, which
    # follows another block (or nothing).
    pipeline = make_pipeline(Delayer(delays=(0, 1)), LagRecorder(), Ridge())
    X = np.arange(N_SAMPLES, dtype=float)[:, None] - N_SAMPLES / 2
    y = np.random.default_rng(0).standard_normal(N_SAMPLES)

    def pairs(pipeline):
        return {"pairs_": pipeline[1].pairs_}

    fitted = BootstrapEstimator(
        pipeline,
        n_bootstrap=50,
        block_size=BLOCK_SIZE,
        attributes=pairs,
        return_samples=True,
        random_state=SEED,
    ).fit(X, y, groups=RUNS)
    samples = fitted.results_["pairs_"].samples
    inside = np.arange(N_SAMPLES) % BLOCK_SIZE != 0
    row, lag = samples[:, inside, 0], samples[:, inside, 1]
    true_lags = np.mean(lag == row - 1)
    assert true_lags == 1.0, f"{true_lags:.0%} of lag-1 features are true lags"


def test_order_independent_refits_equal_refits_on_counted_rows():
    # A Ridge behind a no-op step takes the generic path; its fit does not
    # depend on the order of the rows, so the replicates are those of a
    # refit on each row repeated by its count (up to round-off).
    rng = np.random.default_rng(1)
    X = rng.standard_normal((N_SAMPLES, 3))
    y = X @ [1.0, -2.0, 0.5] + rng.standard_normal(N_SAMPLES)
    for kwargs in (
        dict(),
        dict(groups=RUNS),
        dict(groups=RUNS, block_size=4),
        dict(groups=RUNS, block_size=4, block_scheme="stationary"),
    ):
        scheme = {k: v for k, v in kwargs.items() if k != "groups"}
        groups = kwargs.get("groups")
        fitted = BootstrapEstimator(
            make_pipeline(FunctionTransformer(), Ridge()),
            n_bootstrap=20,
            attributes=lambda p: {"coef_": p[-1].coef_},
            return_samples=True,
            random_state=SEED,
            **scheme,
        ).fit(X, y, groups=groups)
        counts = bootstrap_counts(
            resolve_entropy(SEED), np.arange(20), N_SAMPLES, groups, **scheme
        )
        naive = [
            clone(Ridge()).fit(X[r], y[r]).coef_
            for r in (np.repeat(np.arange(N_SAMPLES), c) for c in counts)
        ]
        assert_allclose(fitted.results_["coef_"].samples, naive, rtol=1e-10)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(),
        dict(groups=RUNS),
        dict(block_size=3),
        dict(groups=RUNS, block_size=3),
        dict(groups=RUNS, block_size=3, block_scheme="circular"),
        dict(groups=RUNS, block_size=3, block_scheme="stationary"),
    ],
)
def test_counts_are_the_drawn_rows_counted(kwargs):
    entropy = resolve_entropy(SEED)
    groups = kwargs.pop("groups", None)
    items = np.array([0, 5, 6, 7, 2])
    drawn = bootstrap_rows(entropy, items, N_SAMPLES, groups, **kwargs)
    counts = bootstrap_counts(entropy, items, N_SAMPLES, groups, **kwargs)
    assert len(drawn) == len(items)
    for rows, count in zip(drawn, counts):
        assert rows.dtype == np.int64
        assert_array_equal(np.bincount(rows, minlength=N_SAMPLES), count)
    # Item by item, the same rows.
    for item, rows in zip(items, drawn):
        alone = bootstrap_rows(entropy, [item], N_SAMPLES, groups, **kwargs)
        assert_array_equal(alone[0], rows)
    assert bootstrap_rows(entropy, [], N_SAMPLES, groups, **kwargs) == []


# --- missing group labels --------------------------------------------------


class MustNotFit(RegressorMixin, BaseEstimator):
    def fit(self, X, y, **fit_params):
        raise AssertionError("fit called despite missing group labels")

    def predict(self, X):
        return np.zeros(len(X))


def _with_missing(kind):
    labels = RUNS.astype(float)
    if kind == "nan":
        labels[[3, 20]] = np.nan
        return labels
    if kind == "none":
        labels = RUNS.astype(str).astype(object)
        labels[[3, 20]] = None
        return labels
    # pandas is an optional library: the lower-bound run has none.
    pd = pytest.importorskip("pandas")
    series = pd.Series(RUNS, dtype="Int64")
    series[[3, 20]] = pd.NA
    return series


@pytest.mark.parametrize("kind", ["nan", "none", "pd.NA"])
def test_check_groups_refuses_missing_labels(kind):
    with pytest.raises(ValueError, match=r"groups .*2 missing labels") as info:
        check_groups(_with_missing(kind), N_SAMPLES)
    assert "row 3" in str(info.value)


@pytest.mark.parametrize("kind", ["nan", "none", "pd.NA"])
@pytest.mark.parametrize(
    "make",
    [
        lambda: BootstrapEstimator(MustNotFit(), n_bootstrap=5),
        lambda: BootstrapEstimator(MustNotFit(), n_bootstrap=5, block_size=2),
        lambda: PermutationScorer(MustNotFit(), n_permutations=5),
    ],
    ids=["bootstrap", "block-bootstrap", "permutation"],
)
def test_wrappers_refuse_missing_group_labels_before_any_fit(make, kind):
    X = np.random.default_rng(0).standard_normal((N_SAMPLES, 2))
    y = np.random.default_rng(1).standard_normal(N_SAMPLES)
    with pytest.raises(ValueError, match=r"groups .*2 missing labels"):
        make().fit(X, y, groups=_with_missing(kind))


def test_delayer_refuses_missing_group_labels():
    X = np.arange(N_SAMPLES, dtype=float)[:, None]
    with pytest.raises(ValueError, match=r"groups .*2 missing labels"):
        Delayer(delays=(1,)).fit_transform(X, groups=_with_missing("nan"))


def test_check_groups_keeps_labels_that_are_present():
    labels = np.array(["a", "b", "a"], dtype=object)
    assert_array_equal(check_groups(labels, 3), labels)
    assert_array_equal(check_groups([0.5, 1.5, 0.5], 3), [0.5, 1.5, 0.5])
