"""One planner for the loops of batches here and on a dask cluster.

``skbatch._engine.BatchPlanner`` cuts the batches of ``run_batched`` and of
``run_on_cluster`` and records their stage; the same problem gives the same
batches, reductions and stage on both.
"""

import dataclasses
import logging

import numpy as np
import pytest

import skbatch._engine as engine
from skbatch import Backend
from skbatch._engine.report import collect_stages
from skbatch.random import item_rng
from skbatch.testing import simulate_oom

N_ITEMS = 23
# Runs of unequal length; each item's AR(1) series restarts at each run.
RUN_LENGTHS = (7, 19, 12)
PHI = 0.8
ITEM_BYTES = 3 * 8
SEED = 20240611


def ar1_runs(item):
    """Item ``item``'s series: AR(1) runs, each restarting, from its own seed."""
    rng = item_rng(SEED, item)
    runs = []
    for length in RUN_LENGTHS:
        series = np.empty(length)
        series[0] = rng.standard_normal() / np.sqrt(1 - PHI**2)
        for t in range(1, length):
            series[t] = PHI * series[t - 1] + rng.standard_normal()
        runs.append(series)
    return runs


def lag1_within_runs(runs):
    """Mean, variance and lag-1 autocorrelation, pairs taken within runs."""
    values = np.concatenate(runs)
    centred = [run - values.mean() for run in runs]
    pairs = sum(float(run[1:] @ run[:-1]) for run in centred)
    n_pairs = sum(len(run) - 1 for run in runs)
    variance = values.var()
    return values.mean(), variance, pairs / n_pairs / variance


class AR1Problem:
    """A problem of the engine: item i's statistics of its AR(1) runs."""

    def __init__(self):
        self.backend = Backend("numpy")

    def __call__(self, ids):
        return np.array([lag1_within_runs(ar1_runs(item)) for item in ids])


def reference():
    """A naive loop over the items, no engine."""
    return np.array([lag1_within_runs(ar1_runs(item)) for item in range(N_ITEMS)])


class Reducer:
    """Records the ids and results handed over, in order."""

    def __init__(self):
        self.ids, self.results = [], []

    def __call__(self, ids, result):
        self.ids.append(np.array(ids))
        self.results.append(np.array(result))


@pytest.fixture
def planners(monkeypatch):
    """The planners the loops make, each with the batches it cut."""
    made = []

    class Recording(engine.BatchPlanner):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.cut = []
            made.append(self)

        def batches(self):
            for ids in super().batches():
                self.cut.append(ids.copy())
                yield ids

    # Both loops build their planner: the local one and the dask one.
    monkeypatch.setattr(engine.local, "BatchPlanner", Recording)
    monkeypatch.setattr(engine.cluster, "BatchPlanner", Recording)
    return made


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with distributed.Client(
        processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None
    ) as client:
        yield client


# max_batch_size=6: an "auto" plan of 4 equal batches, 6, 6, 6 and 5.
SETTINGS = dict(
    n_items=N_ITEMS,
    backend=Backend("numpy"),
    device_bytes_per_item=ITEM_BYTES,
    host_bytes_per_item=ITEM_BYTES,
    max_batch_size=6,
    desc="series",
)


def run_both(client):
    """Run the problem here and on ``client``: (reducer, stage) of each."""
    runs = []
    for run in (
        engine.run_batched,
        lambda *a, **k: engine.run_on_cluster(client, *a, **k),
    ):
        reducer = Reducer()
        with collect_stages() as stages:
            run(AR1Problem(), reducer, **SETTINGS)
        (stage,) = stages
        runs.append((reducer, stage))
    return runs


def test_both_loops_cut_the_same_batches_and_record_the_same_stage(planners, client):
    (here, here_stage), (there, there_stage) = run_both(client)

    assert len(planners) == 2
    local, on_cluster = planners
    sizes = [len(ids) for ids in local.cut]
    assert sizes == [6, 6, 6, 5]
    assert [ids.tolist() for ids in on_cluster.cut] == [
        ids.tolist() for ids in local.cut
    ]
    # Reduced in item order, the naive loop's results.
    for reducer in (here, there):
        assert np.concatenate(reducer.ids).tolist() == list(range(N_ITEMS))
        np.testing.assert_allclose(
            np.concatenate(reducer.results), reference(), rtol=1e-12
        )
    # The same record but for the path and the time taken.
    assert here_stage.path == "batched"
    assert there_stage.path == "cluster"
    assert dataclasses.replace(here_stage, path="cluster", seconds=0.0) == (
        dataclasses.replace(there_stage, seconds=0.0)
    )
    assert here_stage.n_batches == here_stage.n_batches_run == 4


def test_after_an_out_of_memory_split_both_loops_reduce_the_same_items(
    planners, client, caplog
):
    # Logged at DEBUG with verbose=0.
    with caplog.at_level(logging.DEBUG, logger="skbatch"), simulate_oom(max_items=4):
        (here, here_stage), (there, there_stage) = run_both(client)

    local, on_cluster = planners
    # Here, batches after the first split are cut at the chunk that ran (3);
    # on the cluster each batch splits on its worker.
    assert [len(ids) for ids in local.cut] == [6, 3, 3, 3, 3, 3, 2]
    assert [len(ids) for ids in on_cluster.cut] == [6, 6, 6, 5]
    assert any(
        "series: out of memory at 6, continuing with batches of 3" in m
        for m in caplog.messages
    )
    assert (here_stage.n_oom_splits, there_stage.n_oom_splits) == (1, 4)
    # 2 + 6 chunks here; 2 per batch there (the last, of 5: 2 and 3); and
    # the batches that ran out of memory, one per split.
    assert here_stage.n_batches_run == 8 + 1
    assert there_stage.n_batches_run == 8 + 4
    assert [len(ids) for ids in here.ids] == [3] * 7 + [2]
    assert [len(ids) for ids in there.ids] == [3] * 6 + [2, 3]
    for reducer in (here, there):
        assert np.concatenate(reducer.ids).tolist() == list(range(N_ITEMS))
        np.testing.assert_allclose(
            np.concatenate(reducer.results), reference(), rtol=1e-12
        )


def test_the_planner_cuts_consecutive_batches_shrinking_after_a_split(caplog):
    planner = engine.BatchPlanner(
        n_items=16,
        backend=Backend("numpy"),
        device_bytes_per_item=8.0,
        batch_size=4,
        verbose=2,
        desc="items",
    )
    # No split (None), a chunk as large as the batch, then chunks of 3.
    largest_ok = iter([None, 4, 3, 3, 3])
    cut = []
    with caplog.at_level(logging.INFO, logger="skbatch"):
        for ids in planner.batches():
            cut.append(ids.tolist())
            planner.shrink(next(largest_ok))
    expected = [list(range(0, 4)), list(range(4, 8)), list(range(8, 12))]
    expected += [[12, 13, 14], [15]]
    assert cut == expected
    assert caplog.messages == [
        "items: out of memory at 4, continuing with batches of 3"
    ]
    assert planner.plan.n_batches == 4
