"""``fit_report_``: how a fit ran, as the engine's loops recorded it."""

import dataclasses
import math
import pickle
import re
import time

import numpy as np
import pytest
from joblib import parallel_config
from sklearn.linear_model import Lasso, Ridge
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

import skbatch._engine
import skbatch._permutation.paths
from skbatch import (
    Backend,
    BatchedRidge,
    BootstrapEstimator,
    FitReport,
    FitStage,
    PermutationScorer,
)
from skbatch._backends.numpy import threads as blas_threads
from skbatch._engine.report import collect_stages
from skbatch.testing import simulate_oom

N_SAMPLES, N_FEATURES = 40, 5


def make_data(n_targets, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N_SAMPLES, N_FEATURES))
    Y = X @ rng.standard_normal((N_FEATURES, n_targets))
    return X, Y + rng.standard_normal(Y.shape)


@pytest.fixture
def one_blas_thread():
    """Batches one after the other, so the plan is the same on every host."""
    with threadpool_limits(1, user_api="blas"):
        yield


def summary(report):
    return [(stage.name, stage.path, stage.n_items) for stage in report.stages]


# --- what each estimator records ---------------------------------------------


@pytest.mark.parametrize("cv", [None, "gcv", 3])
@pytest.mark.parametrize("n_targets, batch", [(64, 16), (50, 7), (10, 64)])
def test_batched_ridge_records_its_target_batches(
    cv, n_targets, batch, one_blas_thread
):
    X, Y = make_data(n_targets)
    model = BatchedRidge(cv=cv, n_targets_batch=batch).fit(X, Y)
    report = model.fit_report_
    assert isinstance(report, FitReport)
    assert report.backend == model.backend_ == Backend("numpy")
    (stage,) = report.stages
    size = min(batch, n_targets)
    assert (stage.name, stage.path, stage.runs_on) == ("targets", "batched", "numpy")
    assert (stage.n_items, stage.batch_size) == (n_targets, size)
    assert stage.n_batches == stage.n_batches_run == math.ceil(n_targets / size)
    assert (stage.n_workers, stage.n_oom_splits) == (1, 0)
    assert stage.seconds >= 0
    assert stage.device_bytes_per_item > 0 and stage.fixed_bytes > 0
    assert stage.planned_peak_bytes == pytest.approx(
        stage.fixed_bytes
        + size * (stage.device_bytes_per_item + stage.host_bytes_per_item)
    )


def test_batched_ridge_with_one_alpha_records_its_two_passes(one_blas_thread):
    # Scores for every alpha, then the coefficients at the shared best one.
    X, Y = make_data(20)
    model = BatchedRidge(cv=3, alpha_per_target=False, n_targets_batch=8).fit(X, Y)
    assert summary(model.fit_report_) == [("targets", "batched", 20)] * 2
    assert [s.n_batches for s in model.fit_report_.stages] == [3, 3]


def test_out_of_memory_splits_are_counted(one_blas_thread):
    X, Y = make_data(64)
    with simulate_oom(max_items=5):
        model = BatchedRidge(n_targets_batch=16).fit(X, Y)
    (stage,) = model.fit_report_.stages
    # The first batch of 16 fails, then its halves of 8 (3 splits, 3 batches
    # run out of memory); the batches of 4 that worked, then the other 48
    # targets in batches of 4.
    assert (stage.batch_size, stage.n_batches) == (16, 4)
    assert (stage.n_oom_splits, stage.n_batches_run) == (3, 3 + 4 + 12)


@pytest.mark.parametrize(
    "estimator, names, path",
    [
        # Fast path: the fit of estimator_ on all data, then the permutations.
        (BatchedRidge(), ["targets", "permutations"], "batched"),
        (Ridge(), ["permutations"], "batched"),
        # Generic path: refits in joblib windows.
        (KNeighborsRegressor(), ["permutations"], "parallel"),
    ],
    ids=["BatchedRidge", "Ridge", "generic"],
)
def test_permutation_scorer_records_its_permutations(estimator, names, path):
    X, Y = make_data(6)
    scorer = PermutationScorer(estimator, n_permutations=30, random_state=0)
    report = scorer.fit(X, Y).fit_report_
    assert [stage.name for stage in report.stages] == names
    stage = report.stages[-1]
    assert (stage.n_items, stage.path) == (30, path)
    assert (stage.n_batches - 1) * stage.batch_size < 30
    assert stage.n_batches * stage.batch_size >= 30


@pytest.mark.parametrize(
    "estimator, path",
    [(Ridge(), "batched"), (Lasso(alpha=0.1), "parallel")],
    ids=["linear", "generic"],
)
def test_bootstrap_records_its_replicates(estimator, path):
    X, Y = make_data(3)
    boot = BootstrapEstimator(estimator, n_bootstrap=25, random_state=0).fit(X, Y)
    (stage,) = boot.fit_report_.stages
    assert (stage.name, stage.path, stage.n_items) == ("replicates", path, 25)
    assert (stage.n_batches - 1) * stage.batch_size < 25
    assert stage.n_batches * stage.batch_size >= 25


@pytest.mark.parametrize(
    "make",
    [
        lambda gb: PermutationScorer(Ridge(), n_permutations=40, max_memory_gb=gb),
        lambda gb: BootstrapEstimator(Ridge(), n_bootstrap=40, max_memory_gb=gb),
    ],
    ids=["permutations", "replicates"],
)
def test_a_smaller_budget_gives_smaller_batches(make, one_blas_thread):
    X, Y = make_data(4)
    large = make(1.0).fit(X, Y).fit_report_.stages[-1]
    small = make(5e-4).fit(X, Y).fit_report_.stages[-1]
    assert (large.batch_size, large.n_batches) == (40, 1)
    assert small.batch_size < 40 and small.n_batches > 1
    assert small.planned_peak_bytes <= small.budget_gb * 1e9


@pytest.mark.parametrize(
    "make",
    [
        lambda: PermutationScorer(Ridge(), n_permutations=20),
        lambda: BootstrapEstimator(Ridge(), n_bootstrap=20),
    ],
    ids=["permutations", "replicates"],
)
def test_out_of_memory_splits_are_counted_on_every_batched_path(make, one_blas_thread):
    X, Y = make_data(3)
    plain = make().fit(X, Y).fit_report_.stages[-1]
    with simulate_oom(max_items=2):
        split = make().fit(X, Y).fit_report_.stages[-1]
    assert plain.n_oom_splits == 0
    assert split.n_oom_splits > 0
    assert split.n_batches_run > plain.n_batches_run


# --- nesting, threads, joblib ------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda ridge: PermutationScorer(ridge, n_permutations=20),
        lambda ridge: BootstrapEstimator(ridge, n_bootstrap=20),
    ],
    ids=["PermutationScorer", "BootstrapEstimator"],
)
def test_a_nested_fit_is_in_both_reports_in_order(make):
    X, Y = make_data(12)
    outer = make(BatchedRidge(n_targets_batch=5)).fit(X, Y)
    inner = outer.estimator_.fit_report_
    assert summary(inner) == [("targets", "batched", 12)]
    stages = outer.fit_report_.stages
    assert stages[0] is inner.stages[0]
    # Then the outer fit's own loops (the bootstrap predicts the targets to
    # check its residuals' autocorrelation), its resampling last.
    assert [stage.name for stage in stages[1:-1]] in ([], ["predicted targets"])
    assert stages[-1].name in ("permutations", "replicates")


def test_side_by_side_batches_are_one_stage():
    X, Y = make_data(40)
    with threadpool_limits(2, user_api="blas"):
        assert blas_threads() == 2
        model = BatchedRidge(n_targets_batch=10).fit(X, Y)
    (stage,) = model.fit_report_.stages
    assert (stage.n_workers, stage.n_batches, stage.n_batches_run) == (2, 4, 4)
    # Two batches computing, and the result of a third held for reduction.
    assert stage.planned_peak_bytes == pytest.approx(
        stage.fixed_bytes
        + 2 * 10 * (stage.device_bytes_per_item + stage.host_bytes_per_item)
        + 10 * stage.host_bytes_per_item
    )


@pytest.mark.parametrize("backend", ["threading", "loky"])
def test_joblib_workers_add_no_stage_of_their_own(backend):
    # Generic path (a scoring the fast path lacks): each permutation refits
    # BatchedRidge, whose engine loops belong to the workers' fits.
    X, Y = make_data(6)

    def fit(n_jobs):
        scorer = PermutationScorer(
            BatchedRidge(),
            scoring="explained_variance",
            n_permutations=12,
            n_jobs=n_jobs,
            random_state=0,
        )
        return scorer.fit(X, Y).fit_report_

    in_process = fit(1)
    with parallel_config(backend):
        workers = fit(2)
    assert summary(workers) == summary(in_process)
    *caller, last = workers.stages
    assert (last.name, last.path, last.runs_on) == ("permutations", "parallel", backend)
    assert last.n_workers == 2
    assert in_process.stages[-1].runs_on == "sequential"
    # Before the permutations, this process fit estimator_ and the 5 folds
    # of the observed score (each a fit and a prediction).
    names = ["targets"] + ["targets", "predicted targets"] * 5
    assert [s.name for s in caller] == names


def test_engine_loops_outside_a_fit_are_not_recorded():
    X, Y = make_data(8)
    model = BatchedRidge().fit(X, Y)
    report = model.fit_report_
    with collect_stages() as stages:
        model.predict(X)
    assert [stage.name for stage in stages] == ["predicted targets"]
    assert model.fit_report_ is report
    assert len(report.stages) == 1


# --- atomic, immutable, picklable --------------------------------------------


def test_no_report_after_a_failed_fit():
    X, Y = make_data(4)
    model = BatchedRidge(alphas=[-1.0])
    with pytest.raises(ValueError):
        model.fit(X, Y)
    assert not hasattr(model, "fit_report_")


def test_failed_refit_keeps_the_previous_report(monkeypatch):
    X, Y = make_data(4)
    scorer = PermutationScorer(BatchedRidge(), n_permutations=10).fit(X, Y)
    report = scorer.fit_report_

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    # The fit of estimator_ has run and recorded its stage when the
    # permutations are interrupted.
    monkeypatch.setattr(skbatch._permutation.paths, "run_problem", interrupted)
    with pytest.raises(KeyboardInterrupt):
        scorer.fit(X, Y[:, :2])
    assert scorer.fit_report_ is report
    assert summary(report) == [
        ("targets", "batched", 4),
        ("permutations", "batched", 10),
    ]
    monkeypatch.undo()
    # Nothing of the interrupted fit leaks into the next one.
    assert summary(scorer.fit(X, Y).fit_report_) == summary(report)


def test_report_is_immutable():
    X, Y = make_data(4)
    report = BatchedRidge().fit(X, Y).fit_report_
    assert isinstance(report.stages, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.stages = ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.stages[0].n_items = 0
    assert isinstance(FitReport(Backend("numpy"), [report.stages[0]]).stages, tuple)


def test_report_pickles():
    X, Y = make_data(4)
    model = BootstrapEstimator(BatchedRidge(), n_bootstrap=10).fit(X, Y)
    restored = pickle.loads(pickle.dumps(model))
    assert restored.fit_report_ == model.fit_report_
    assert str(restored.fit_report_) == str(model.fit_report_)


# --- what verbose prints, and the table --------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: BatchedRidge(n_targets_batch=3, verbose=1),
        lambda: PermutationScorer(BatchedRidge(verbose=1), n_permutations=8, verbose=1),
        lambda: BootstrapEstimator(Lasso(alpha=0.1), n_bootstrap=8, verbose=1),
    ],
    ids=["BatchedRidge", "PermutationScorer", "generic bootstrap"],
)
def test_verbose_lines_are_the_report_formatted(make, capsys):
    X, Y = make_data(7)
    with simulate_oom(max_items=2):
        report = make().fit(X, Y).fit_report_
    lines = capsys.readouterr().out.splitlines()
    expected = []
    for stage in report.stages:
        expected += [stage.format_plan(), stage.format_summary()]
    assert lines == [f"[skbatch] {line}" for line in expected]


def test_stage_lines_read_as_before():
    stage = FitStage(
        name="targets",
        path="batched",
        runs_on="numpy",
        n_items=20_000,
        batch_size=317,
        n_batches=64,
        n_workers=2,
        n_batches_run=65,
        n_oom_splits=1,
        planned_peak_bytes=9.99e6,
        budget_gb=0.01,
        device_bytes_per_item=1.0,
        host_bytes_per_item=1.0,
        fixed_bytes=0.0,
        seconds=1.234,
    )
    assert stage.format_plan() == (
        "targets: 20,000 targets in 64 batches of up to 317 on numpy, 2 side by "
        "side; planned peak 0.00999 GB of a 0.01 GB budget"
    )
    assert stage.format_summary() == (
        "targets: done in 1.23 s on numpy: 65 batches, 1 out-of-memory split"
    )
    window = dataclasses.replace(
        stage, name="replicates", path="parallel", runs_on="loky", n_workers=1
    )
    assert window.format_plan() == (
        "replicates: 20,000 replicates in windows of 317 on 1 joblib worker"
    )
    assert window.format_summary() == "replicates: done in 1.23 s"


def test_report_table_has_a_row_per_stage():
    X, Y = make_data(6)
    report = PermutationScorer(BatchedRidge(), n_permutations=9).fit(X, Y).fit_report_
    header, *rows = str(report).splitlines()
    assert header.split()[:4] == ["stage", "path", "on", "items"]
    assert [row.split()[:4] for row in rows] == [
        [stage.name, stage.path, stage.runs_on, f"{stage.n_items:,}"]
        for stage in report.stages
    ]
    # Columns line up: every row is as long as the header or shorter.
    assert {len(row) for row in rows} <= {len(header)}


# --- the budget the user gave ------------------------------------------------


@pytest.fixture
def two_blas_threads():
    """Batches side by side, two, whatever the host."""
    with threadpool_limits(2, user_api="blas"):
        yield


def _big_items(n_targets=5000):
    # Permutations of 5,000 targets: one item (a permuted fold of every
    # target) about 0.1 GB, more than half of 0.15 GB; of 1,000, 0.02 GB.
    rng = np.random.default_rng(0)
    return rng.standard_normal((200, 20)), rng.standard_normal((200, n_targets))


def test_every_stage_is_planned_within_the_budget_given(two_blas_threads, monkeypatch):
    # The fit on all data ran under the measured budget (capped at 8 GB) and
    # the permutations planned two items side by side, 0.208 GB for 0.15.
    monkeypatch.setattr(skbatch._engine.planner, "cpu_workers", lambda backend: 2)
    X, Y = _big_items(1000)
    model = PermutationScorer(BatchedRidge(), n_permutations=3, max_memory_gb=0.03).fit(
        X, Y
    )
    stages = model.fit_report_.stages
    assert [stage.name for stage in stages] == ["targets", "permutations"]
    for stage in stages:
        assert stage.budget_gb == 0.03
        # The peak the record derives from its own memory model.
        per_batch = stage.device_bytes_per_item + stage.host_bytes_per_item
        assert stage.planned_peak_bytes >= stage.fixed_bytes + per_batch
        assert stage.planned_peak_bytes <= 0.03 * 1e9
    (permutations,) = [s for s in stages if s.name == "permutations"]
    assert permutations.device_bytes_per_item > 0.015e9
    assert permutations.n_workers == 1
    assert model.estimator_.max_memory_gb == 0.03
    # The estimator given is left as it was.
    assert model.estimator.max_memory_gb is None


def test_the_bootstrap_fit_on_all_data_is_planned_within_the_budget_given():
    X, Y = make_data(30)
    model = BootstrapEstimator(BatchedRidge(), n_bootstrap=5, max_memory_gb=0.05).fit(
        X, Y
    )
    (fit,) = [s for s in model.fit_report_.stages if s.name == "targets"]
    assert fit.budget_gb == 0.05
    assert model.estimator_.max_memory_gb == 0.05


@pytest.mark.parametrize("budget", [0.09, 0.05])
def test_a_refusal_says_the_budget_given_and_what_the_data_holds(budget):
    # It said "budget is 0.0818 GB": the budget less the data's share.
    X, Y = _big_items()
    model = PermutationScorer(BatchedRidge(), n_permutations=3, max_memory_gb=budget)
    with pytest.raises(ValueError) as refused:
        model.fit(X, Y)
    message = str(refused.value)
    assert f"the memory budget is {budget:.3g} GB (max_memory_gb={budget})" in message
    assert "beside the" in message and "the data and decompositions hold" in message
    assert not hasattr(model, "estimator_")


@pytest.mark.parametrize(
    "item_share, side_by_side", [(0.3, 2), (0.45, 2), (0.55, 1), (0.9, 1)]
)
def test_items_bigger_than_their_share_of_the_budget_run_alone(
    item_share, side_by_side, monkeypatch
):
    monkeypatch.setattr(skbatch._engine.planner, "cpu_workers", lambda backend: 2)
    planner = skbatch._engine.BatchPlanner(
        n_items=10,
        backend=Backend("numpy"),
        device_bytes_per_item=item_share * 1e9,
        fixed_bytes=0.05e9,
        max_memory_gb=1.05,
        threads=True,
    )
    assert planner.n_side_by_side == side_by_side
    planner.start(
        "batched", planner.n_side_by_side, planner.n_side_by_side, where=("",)
    )
    assert planner.stage.planned_peak_bytes <= 1.05e9


# --- stages add up to the fit's wall time -----------------------------------

# Seconds the patched decomposition sleeps: far above the loops' own time,
# so a report that leaves the decomposition out misses most of the fit.
SLOW_DECOMPOSITION_S = 0.4


@pytest.fixture
def slow_decomposition(monkeypatch):
    """Every design decomposition (the ridge solver's SVDs, or the covariance
    path's eigendecompositions) takes 0.4 s more."""
    from skbatch._ridge import covariance, problems

    for solver in (problems.RidgeSolver, covariance.CovarianceSolver):

        def slow(self, *args, _decompose=solver.__init__, **kwargs):
            time.sleep(SLOW_DECOMPOSITION_S)
            _decompose(self, *args, **kwargs)

        monkeypatch.setattr(solver, "__init__", slow)


@pytest.fixture
def slow_checks_after_the_loops(monkeypatch):
    """The warnings checked after the loops take 0.3 s more."""
    from skbatch._ridge import batched

    check = batched.warn_if_autocorrelated

    def slow(*args, **kwargs):
        time.sleep(0.3)
        return check(*args, **kwargs)

    monkeypatch.setattr(batched, "warn_if_autocorrelated", slow)


def _done_in(text):
    """The seconds of every "done in" line."""
    return [float(s) for s in re.findall(r": done in ([0-9.]+) s", text)]


@pytest.mark.parametrize(
    "make",
    [
        lambda: BatchedRidge(verbose=1),
        lambda: BatchedRidge(cv=3, verbose=1),
        lambda: PermutationScorer(BatchedRidge(), n_permutations=20, verbose=1),
        lambda: BootstrapEstimator(BatchedRidge(), n_bootstrap=20, verbose=1),
        lambda: BootstrapEstimator(
            make_pipeline(StandardScaler(), BatchedRidge()),
            attributes="named_steps.batchedridge.coef_",
            n_bootstrap=4,
            verbose=1,
        ),
    ],
    ids=["loo", "kfold", "PermutationScorer", "BootstrapEstimator", "generic"],
)
def test_stage_seconds_and_verbose_lines_add_up_to_the_wall_time(
    make, slow_decomposition, slow_checks_after_the_loops, capsys
):
    X, Y = make_data(30)
    model = make()
    started = time.perf_counter()
    model.fit(X, Y)
    wall = time.perf_counter() - started
    report = model.fit_report_
    assert wall > SLOW_DECOMPOSITION_S + 0.3
    assert sum(stage.seconds for stage in report.stages) == pytest.approx(
        wall, rel=0.05
    )
    assert report.seconds == pytest.approx(wall, rel=0.05)
    # One line per stage, the nested fit's too (at the outer verbosity).
    printed = _done_in(capsys.readouterr().out)
    assert len(printed) == len(report.stages)
    assert sum(printed) == pytest.approx(wall, rel=0.05)
    # A nested fit's own report adds up to its own fit.
    inner = getattr(model, "estimator_", None)
    if hasattr(inner, "fit_report_"):
        assert inner.fit_report_.seconds < report.seconds
        assert inner.fit_report_.seconds >= SLOW_DECOMPOSITION_S
