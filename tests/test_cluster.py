"""The batched paths on a dask cluster (``skbatch._engine.run_on_cluster``).

- With a ``distributed.Client`` active, BatchedRidge (LOO, GCV, K-fold) and
  its predictions, the ridge fast path of PermutationScorer and the linear
  path of BootstrapEstimator run their batches on a two-process
  ``LocalCluster`` and give the serial results bit for bit.
- A worker killed mid-fit leaves the result unchanged; data lost for good
  fails saying so; a cluster without workers fails within the timeout.
  Every worker closed mid-fit is handled alike on the generic path, through
  joblib's dask backend.
- Problems pickle as host arrays and device strings, never device arrays.
"""

import contextlib
import pickle
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import joblib
import numpy as np
import pytest
from numpy.testing import assert_array_equal
from sklearn.linear_model import Ridge, RidgeCV
from sklearn.tree import DecisionTreeRegressor

import skbatch._backends.torch as torch_backend
import skbatch._engine as engine
from skbatch import (
    Backend,
    BandedRidge,
    BatchedRidge,
    BootstrapEstimator,
    PermutationScorer,
    memory,
)
from skbatch._engine.targets import TargetColumns
from skbatch._ridge import cv_scheme
from skbatch._ridge.problems import (
    BootstrapRidgeProblem,
    PermutedRidgeProblem,
    RidgeSolver,
    TargetProblem,
)
from skbatch._ridge.spec import ridge_spec
from skbatch.testing import simulate_oom

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

ALPHAS = np.logspace(-2, 3, 6)
# A fit that runs past this on a two-worker cluster is hung, not slow.
FIT_TIMEOUT_S = 120
# Seconds per refit of the tests that close every worker mid-fit: the 40
# refits of their window outlast the closing of the workers (about 0.1 s).
REFIT_S = 0.05
KILL_IN_50_MS = "import os, threading; threading.Timer(0.05, os._exit, (1,)).start()"


def make_data(n_samples=120, n_features=8, n_targets=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_samples, n_features))
    Y = X @ rng.standard_normal((n_features, n_targets))
    return X, Y + rng.standard_normal((n_samples, n_targets))


def two_process_cluster():
    return distributed.LocalCluster(
        n_workers=2,
        processes=True,
        threads_per_worker=1,
        host="127.0.0.1",
        dashboard_address=None,
    )


@pytest.fixture(scope="module")
def client():
    with two_process_cluster() as cluster, distributed.Client(cluster) as client:
        client.wait_for_workers(2, timeout=60)
        yield client


@pytest.fixture
def in_process_client():
    with distributed.Client(
        processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None
    ) as client:
        yield client


def fit_serial_and_on(client, make, *args):
    """``make().fit(*args)`` without the client, and with its tasks recorded."""
    # The module's client is the default one: step outside it for the serial fit.
    with no_client():
        serial = make().fit(*args)
    with distributed.get_task_stream(client=client) as stream:
        on_cluster = make().fit(*args)
    # One task per batch, each run by a worker of the cluster.
    batches = [task for task in stream.data if task["key"].startswith("_run_batch")]
    stages = [stage for stage in on_cluster.fit_report_.stages]
    assert {stage.path for stage in stages} == {"cluster"}
    assert len(batches) == sum(stage.n_batches for stage in stages)
    assert {task["worker"] for task in batches} <= set(
        client.scheduler_info()["workers"]
    )
    return serial, on_cluster


@contextlib.contextmanager
def no_client():
    """No dask client is active inside: the engine runs in this process."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "active_dask_client", lambda: None)
        yield


def cluster_stage(model):
    (stage, *_) = [s for s in model.fit_report_.stages if s.path == "cluster"]
    return stage


# --- results identical to a serial fit ----------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("cv", [None, "gcv", 4])
@pytest.mark.parametrize("alpha_per_target", [True, False])
def test_batched_ridge_on_a_cluster_equals_the_serial_fit(client, cv, alpha_per_target):
    X, Y = make_data(n_samples=80, n_features=6, n_targets=300, seed=1)
    X_new = make_data(n_samples=20, n_features=6, seed=2)[0]

    def make():
        return BatchedRidge(
            alphas=ALPHAS,
            cv=cv,
            alpha_per_target=alpha_per_target,
            n_targets_batch=64,
            device="cpu",
        )

    serial, on_cluster = fit_serial_and_on(client, make, X, Y)
    for name in ("coef_", "intercept_", "alpha_", "best_score_"):
        assert_array_equal(getattr(serial, name), getattr(on_cluster, name), name)
    with no_client():
        expected = serial.predict(X_new)
    assert_array_equal(on_cluster.predict(X_new), expected)
    stage = cluster_stage(on_cluster)
    (serial_stage,) = serial.fit_report_.stages[:1]
    # The batches of the serial plan: the same boundaries, the same sums.
    assert (stage.n_items, stage.batch_size, stage.n_batches) == (300, 64, 5)
    assert (serial_stage.batch_size, serial_stage.n_batches) == (64, 5)
    assert (stage.runs_on, stage.n_workers) == ("numpy", 2)


@pytest.mark.slow
@pytest.mark.parametrize("cv", [None, 4])
def test_banded_ridge_on_a_cluster_equals_the_serial_fit(client, cv):
    # Two bands, candidates sharing one QR of X: the search and the refit run
    # as the cluster's tasks.
    X, Y = make_data(n_samples=80, n_features=6, n_targets=200, seed=11)
    Y[:, ::2] += 3 * X[:, :2] @ np.ones((2, 1))

    def make():
        return BandedRidge(
            [0, 0, 1, 1, 1, 1],
            alphas=ALPHAS,
            band_weights=[[0.5, 0.5], [1.0, 0.0], [0.2, 0.8]],
            cv=cv,
            n_targets_batch=64,
            device="cpu",
        )

    serial, on_cluster = fit_serial_and_on(client, make, X, Y)
    assert np.unique(serial.band_weights_, axis=0).shape[0] > 1
    for name in ("coef_", "intercept_", "alpha_", "band_weights_", "best_score_"):
        assert_array_equal(getattr(serial, name), getattr(on_cluster, name), name)
    assert [s.n_batches for s in on_cluster.fit_report_.stages] == [4, 4]


@pytest.mark.slow
def test_permutation_ridge_path_on_a_cluster_equals_the_serial_fit(client):
    X, Y = make_data(n_samples=60, n_features=5, n_targets=4, seed=3)

    def make():
        return PermutationScorer(
            Ridge(alpha=3.0),
            n_permutations=99,
            cv=3,
            multioutput="raw_values",
            return_null=True,
            random_state=0,
            device="cpu",
        )

    serial, on_cluster = fit_serial_and_on(client, make, X, Y)
    for name in ("score_", "pvalue_", "pvalue_fwer_", "null_mean_", "null_std_"):
        assert_array_equal(getattr(serial, name), getattr(on_cluster, name), name)
    assert_array_equal(serial.permutation_scores_, on_cluster.permutation_scores_)
    assert cluster_stage(on_cluster).name == "permutations"


@pytest.mark.slow
def test_bootstrap_linear_path_on_a_cluster_equals_the_serial_fit(client):
    X, Y = make_data(n_samples=50, n_features=4, n_targets=2, seed=4)

    def make():
        return BootstrapEstimator(
            Ridge(alpha=1.0),
            n_bootstrap=200,
            return_samples=True,
            random_state=0,
            device="cpu",
            max_memory_gb=0.002,
        )

    serial, on_cluster = fit_serial_and_on(client, make, X, Y)
    for name, result in serial.results_.items():
        for field, value in result._asdict().items():
            assert_array_equal(value, getattr(on_cluster.results_[name], field), field)
    assert cluster_stage(on_cluster).n_batches > 1


@pytest.mark.slow
def test_a_problem_above_the_batching_cap_is_planned_not_refused(client, monkeypatch):
    # The cap bounds one batch, not the data: X's decomposition, far above
    # this cap, is held by every worker while targets run one batch at a time.
    monkeypatch.setattr(memory, "BATCHING_CAP_GB", 1e-5)
    X, Y = make_data(n_samples=100, n_features=10, n_targets=40, seed=5)

    def make():
        return BatchedRidge(alphas=ALPHAS, device="cpu")

    serial, on_cluster = fit_serial_and_on(client, make, X, Y)
    assert_array_equal(serial.coef_, on_cluster.coef_)
    stage = cluster_stage(on_cluster)
    assert stage.fixed_bytes > memory.BATCHING_CAP_GB * memory.GB
    assert stage.batch_size < 40 and stage.n_batches_run == stage.n_batches


@pytest.mark.slow
def test_verbose_says_the_fit_runs_on_the_cluster(client, capsys):
    X, Y = make_data(n_targets=10)
    BatchedRidge(alphas=ALPHAS, n_targets_batch=10, device="cpu", verbose=1).fit(X, Y)
    out = capsys.readouterr().out
    assert "targets: 10 targets in 1 batch of up to 10 on numpy on a dask " in out
    assert "cluster of 2 worker threads" in out
    assert "targets: done in" in out


def test_workers_sharing_this_process_give_the_serial_result(in_process_client):
    # Worker threads in this process see BLAS on all its threads; a batch that
    # the serial run computes on one thread (side by side) must too, or its
    # products round differently.
    X, Y = make_data(n_samples=200, n_features=20, n_targets=1000, seed=8)

    def make():
        return BatchedRidge(alphas=ALPHAS, device="cpu")

    with no_client():
        serial = make().fit(X, Y)
    on_cluster = make().fit(X, Y)
    assert cluster_stage(on_cluster).n_workers == 1
    assert_array_equal(serial.coef_, on_cluster.coef_)
    assert_array_equal(serial.best_score_, on_cluster.best_score_)


# --- a dask-array y, read on the workers, next to its chunks ------------------


def persisted(client, Y, width):
    """``Y`` as a dask array in chunks of ``width`` columns, held by the workers."""
    with warnings.catch_warnings():
        # The graph holds Y, which dask finds large past 10 MB.
        warnings.filterwarnings("ignore", message="Sending large graph")
        y = client.persist(da.from_array(Y, chunks=(Y.shape[0], width)))
    distributed.wait(y, timeout=FIT_TIMEOUT_S)
    return y


@pytest.mark.parametrize("cv", [None, 4])
@pytest.mark.slow
def test_a_dask_y_on_the_cluster_gives_the_in_memory_serial_fit(client, cv):
    X, Y = make_data(n_samples=60, n_features=5, n_targets=200, seed=9)
    y = persisted(client, Y, 50)

    def make():
        return BatchedRidge(alphas=ALPHAS, cv=cv, n_targets_batch=50, device="cpu")

    with no_client():
        serial = make().fit(X, Y)
    with distributed.get_task_stream(client=client) as stream:
        on_cluster = make().fit(X, y)
    for name in ("coef_", "intercept_", "alpha_", "best_score_"):
        assert_array_equal(getattr(serial, name), getattr(on_cluster, name), name)
    stage = cluster_stage(on_cluster)
    assert (stage.batch_size, stage.n_batches) == (50, 4)
    batches = [task for task in stream.data if task["key"].startswith("_run_batch")]
    assert len(batches) == 4


# A dask cluster's start and its tasks: over 2 s.
@pytest.mark.slow
def test_the_calling_process_never_computes_dask_targets(client, monkeypatch):
    # Chunks made by a graph, not held anywhere yet: the workers compute them.
    X, Y = make_data(n_samples=60, n_features=5, n_targets=120, seed=10)
    y = da.from_array(Y, chunks=(60, 40)) + 0.0
    with no_client():
        serial = BatchedRidge(alphas=ALPHAS, device="cpu").fit(X, Y)

    def refuse(*args, **kwargs):
        raise AssertionError("the targets were computed in the calling process")

    monkeypatch.setattr(TargetColumns, "_read", refuse)
    monkeypatch.setattr(da.Array, "compute", refuse)
    monkeypatch.setattr(da.Array, "__array__", refuse)
    on_cluster = BatchedRidge(alphas=ALPHAS, device="cpu").fit(X, y)
    assert cluster_stage(on_cluster).n_batches == 3
    assert_array_equal(serial.coef_, on_cluster.coef_)
    assert_array_equal(serial.alpha_, on_cluster.alpha_)


@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e200])
def test_a_bad_dask_target_fails_on_the_cluster_as_in_process(client, bad):
    X, Y = make_data(n_samples=60, n_features=5, n_targets=120, seed=11)
    Y[7, 97] = bad
    y = persisted(client, Y, 40)

    def fit():
        with pytest.raises(ValueError) as info:
            BatchedRidge(alphas=ALPHAS, device="cpu").fit(X, y)
        return str(info.value)

    with no_client():
        in_process = fit()
    assert "target 97" in in_process
    assert fit() == in_process


# --- faults -------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_a_worker_killed_mid_fit_leaves_the_result_unchanged(monkeypatch, kind):
    X, Y = make_data(n_samples=1000, n_features=100, n_targets=8000, seed=6)

    def make():
        return BatchedRidge(alphas=ALPHAS, n_targets_batch=250, device="cpu")

    with no_client():
        serial = make().fit(X, Y)
    with two_process_cluster() as cluster, distributed.Client(cluster) as client:
        client.wait_for_workers(2, timeout=60)
        # The victim's chunks die with it: the cluster computes them again
        # from the array's graph.
        y = Y if kind == "numpy" else persisted(client, Y, 250)
        victim = sorted(client.scheduler_info()["workers"])[0]
        submit = client.submit
        n_submits = []

        def submit_then_kill(*args, **kwargs):
            n_submits.append(1)
            if len(n_submits) == 3:
                # Dies 50 ms later, while it computes a batch: builtins only,
                # so that the worker unpickles the call without this module.
                client.run(exec, KILL_IN_50_MS, workers=[victim])
            return submit(*args, **kwargs)

        monkeypatch.setattr(client, "submit", submit_then_kill)
        with ThreadPoolExecutor(1) as pool:
            on_cluster = pool.submit(make().fit, X, y).result(timeout=FIT_TIMEOUT_S)
        assert len(n_submits) >= 32
        assert victim not in client.scheduler_info()["workers"]
    assert_array_equal(serial.coef_, on_cluster.coef_)
    assert_array_equal(serial.alpha_, on_cluster.alpha_)


def _lose_the_data_every_time(monkeypatch):
    """Every batch fails and the data is lost each time: counts resends."""
    resends = []

    def fail(problem, ids, one_thread, inputs=None, simulated_oom=None):
        raise OSError("the worker holding the data died")

    monkeypatch.setattr(engine.cluster, "_run_batch", fail)
    monkeypatch.setattr(engine.cluster._TaskData, "any_lost", lambda self: True)
    monkeypatch.setattr(
        engine.cluster._TaskData, "scatter_lost", lambda self: resends.append(1)
    )
    return resends


def test_data_lost_for_good_fails_saying_so(in_process_client, monkeypatch):
    resends = _lose_the_data_every_time(monkeypatch)
    X, Y = make_data()
    with pytest.raises(
        RuntimeError, match=r"dask workers holding the data .* were lost 3 times"
    ) as info:
        BatchedRidge(alphas=ALPHAS, device="cpu").fit(X, Y)
    assert isinstance(info.value.__cause__, OSError)
    assert len(resends) == engine.cluster.DATA_LOSS_RETRIES


def test_a_task_error_without_lost_data_is_raised_as_is(in_process_client, monkeypatch):
    resends = _lose_the_data_every_time(monkeypatch)
    monkeypatch.setattr(engine.cluster._TaskData, "any_lost", lambda self: False)
    X, Y = make_data()
    with pytest.raises(OSError, match="the worker holding the data died"):
        BatchedRidge(alphas=ALPHAS, device="cpu").fit(X, Y)
    assert resends == []


def test_a_cluster_without_workers_fails_within_the_timeout(monkeypatch):
    monkeypatch.setenv(engine.cluster.DASK_TIMEOUT_ENV, "0.5")
    X, Y = make_data()
    with (
        distributed.LocalCluster(
            n_workers=0, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster),
        pytest.raises(RuntimeError, match=r"no worker for 0.5 s.*SKBATCH_DASK_TIMEOUT"),
    ):
        BatchedRidge(alphas=ALPHAS, device="cpu").fit(X, Y)


@pytest.mark.parametrize("value", ["0", "-3", "soon", "inf", "nan"])
def test_a_bad_timeout_is_refused_before_any_work(
    in_process_client, monkeypatch, value
):
    monkeypatch.setenv("SKBATCH_DASK_TIMEOUT", value)
    scattered = []
    monkeypatch.setattr(in_process_client, "scatter", scattered.append)
    with pytest.raises(ValueError, match=rf"SKBATCH_DASK_TIMEOUT .* got '{value}'"):
        BatchedRidge(alphas=ALPHAS, device="cpu").fit(*make_data())
    assert scattered == []


def test_the_timeout_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv("SKBATCH_DASK_TIMEOUT", raising=False)
    assert engine.dask_timeout() == engine.cluster.DASK_TIMEOUT_S
    monkeypatch.setenv("SKBATCH_DASK_TIMEOUT", "2.5")
    assert engine.dask_timeout() == 2.5


# --- where the engine runs ----------------------------------------------------


def test_fits_inside_a_dask_task_run_where_they_are(in_process_client):
    assert engine.active_dask_client() is in_process_client
    on_worker = in_process_client.submit(engine.active_dask_client, pure=False)
    assert on_worker.result(timeout=FIT_TIMEOUT_S) is None


def test_the_latest_client_is_active_until_closed():
    with distributed.Client(
        processes=False, n_workers=1, dashboard_address=None
    ) as client:
        assert engine.active_dask_client() is client
    assert engine.active_dask_client() is not client


# --- problems travel as host arrays and device strings -------------------------


def _problems(backend):
    """One problem of each class, on ``backend``, with their inputs."""
    X, Y = make_data(n_samples=40, n_features=5, n_targets=3, seed=7)
    dtype = np.float64
    kfold = cv_scheme(3).split(X, Y)
    solver = RidgeSolver(
        X, None, ALPHAS, kfold, backend, dtype, fit_intercept=True, scoring=None
    )
    spec = ridge_spec(RidgeCV(alphas=ALPHAS))

    def inner(X_train, Y_train, train):
        return cv_scheme(spec.cv, spec.scoring).split(X_train, Y_train)

    splits = [(np.arange(20, 40), np.arange(20)), (np.arange(20), np.arange(20, 40))]
    permutation = dict(
        entropy=1, groups=None, permutation_type="shuffle", block_size=None
    )
    return [
        TargetProblem(solver, Y),
        PermutedRidgeProblem(
            X,
            Y,
            splits,
            spec,
            inner,
            backend,
            dtype,
            None,
            n_permutations=10,
            permutation=permutation,
        ),
        BootstrapRidgeProblem(
            X,
            Y,
            1.0,
            fit_intercept=True,
            sample_weight=None,
            groups=None,
            block_size=None,
            entropy=2,
            backend=backend,
            dtype=dtype,
            n_bootstrap=10,
        ),
    ]


def _host(result):
    return [np.asarray(part) for part in engine.planner._to_host(result)]


@pytest.mark.parametrize(
    "backend", [Backend("numpy"), Backend("torch"), Backend("jax")], ids=str
)
@pytest.mark.slow
def test_every_problem_computes_the_same_after_a_round_trip(backend):
    pytest.importorskip(backend.library)
    ids = np.arange(2, 7)
    with backend.context():
        for problem in _problems(backend):
            copy = pickle.loads(pickle.dumps(problem))
            assert copy.backend == backend
            if hasattr(problem, "task_inputs"):
                # Data of the items themselves travels with each task.
                copy = copy.bind(*problem.task_inputs(ids))
            for got, expected in zip(_host(copy(ids)), _host(problem(ids))):
                assert_array_equal(got, expected)


def test_a_cuda_problem_pickles_without_device_arrays(fake_cuda, monkeypatch):
    """On a dask-cuda cluster, arrays are re-created on each worker's card.

    CUDA is faked: "cuda:0" arrays live on torch's CPU, and the test checks
    that no tensor is pickled and that unpickling asks the backend, by its
    device string, for every array.
    """
    import torch

    real_native_device = Backend.native_device
    asked = []

    def native_device(self):
        if self.device.startswith("cuda"):
            asked.append(self.device)
            return torch.device("cpu")
        return real_native_device(self)

    monkeypatch.setattr(Backend, "native_device", native_device)
    # Every tensor of this test stands for one on the card.
    monkeypatch.setattr(torch_backend, "device_of", lambda array: "cuda:0")
    backend = Backend("torch", "cuda")
    problems = _problems(backend)

    def refuse(self, protocol):
        raise AssertionError("a device tensor was pickled")

    monkeypatch.setattr(torch.Tensor, "__reduce_ex__", refuse)
    for problem in problems:
        payload = pickle.dumps(problem)
        asked.clear()
        copy = pickle.loads(payload)
        assert copy.backend == backend and asked and set(asked) == {"cuda:0"}


class Holder(engine.Portable):
    """Module level, so that pickle finds it."""


def test_portable_restores_nested_arrays_and_namespaces():
    torch = pytest.importorskip("torch")
    holder = Holder()
    holder.xp = Backend("torch").xp
    holder.pairs = [(torch.arange(3.0), np.arange(2)), {"a": torch.ones(2)}]
    holder.plain = 3
    state = holder.__getstate__()
    assert not any(isinstance(v, torch.Tensor) for v in _leaves(state))
    copy = pickle.loads(pickle.dumps(holder))
    assert copy.xp is holder.xp and copy.plain == 3
    (first, host), mapping = copy.pairs
    assert isinstance(first, torch.Tensor) and first.dtype == torch.float32
    assert_array_equal(first.numpy(), [0.0, 1.0, 2.0])
    assert isinstance(host, np.ndarray) and isinstance(mapping["a"], torch.Tensor)


def _leaves(value):
    if isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    else:
        yield value


def test_the_problem_sent_to_every_worker_leaves_the_targets_behind():
    # Each task carries its own batch's columns: a worker receives its share
    # of Y, not all of it.
    from skbatch._ridge import RidgeSolver, TargetProblem, cv_scheme

    X, Y = make_data()
    Y = np.tile(Y, (1, 50))
    solver = RidgeSolver(
        X,
        None,
        np.asarray(ALPHAS, dtype=float),
        cv_scheme(None),
        Backend("numpy"),
        np.float64,
        fit_intercept=True,
        scoring=None,
    )
    problem = TargetProblem(solver, Y)
    assert len(pickle.dumps(problem)) < Y.nbytes / 10
    ids = np.arange(3, 9)
    first, block = problem.task_inputs(ids)
    assert block.shape == (Y.shape[0], len(ids))
    bound = pickle.loads(pickle.dumps(problem)).bind(first, block)
    for got, expected in zip(bound(ids), problem(ids)):
        assert_array_equal(got, expected)


def test_simulated_oom_reaches_the_workers(in_process_client):
    """The limit set in this process splits the batches the workers run."""
    X, Y = make_data(n_samples=40, n_features=5, n_targets=30, seed=3)
    with no_client():
        reference = BatchedRidge(alphas=ALPHAS).fit(X, Y)
    with simulate_oom(4):
        split = BatchedRidge(alphas=ALPHAS).fit(X, Y)
    stage = cluster_stage(split)
    assert stage.n_oom_splits > 0
    for name in ("coef_", "alpha_"):
        np.testing.assert_allclose(getattr(split, name), getattr(reference, name))


def _in_process_cluster():
    return distributed.LocalCluster(
        n_workers=2, processes=False, threads_per_worker=1, dashboard_address=None
    )


def _close_every_worker(cluster, client, restart):
    """Every worker of ``cluster`` closed, not retired: the data they hold is
    gone with them; with ``restart``, two others are started."""
    cluster.scale(0)
    while client.scheduler_info()["workers"]:
        time.sleep(0.01)
    if restart:
        cluster.scale(2)


def _fit_closing_every_worker(restart, monkeypatch):
    """A fit on an in-process cluster whose workers all close at its third
    batch (and, with ``restart``, are replaced): the serial fit and it."""
    monkeypatch.setenv(engine.cluster.DASK_TIMEOUT_ENV, "1")
    X, Y = make_data(n_samples=60, n_features=5, n_targets=60, seed=8)

    def make():
        return BatchedRidge(alphas=ALPHAS, n_targets_batch=5, device="cpu")

    with no_client():
        serial = make().fit(X, Y)
    with _in_process_cluster() as cluster, distributed.Client(cluster) as client:
        client.wait_for_workers(2, timeout=FIT_TIMEOUT_S)
        submit = client.submit
        n_submits = []

        def submit_then_close(*args, **kwargs):
            n_submits.append(1)
            if len(n_submits) == 3:
                _close_every_worker(cluster, client, restart)
            return submit(*args, **kwargs)

        monkeypatch.setattr(client, "submit", submit_then_close)
        with ThreadPoolExecutor(1) as pool:
            return serial, pool.submit(make().fit, X, Y).result(timeout=FIT_TIMEOUT_S)


def test_every_worker_closed_mid_fit_and_replaced_leaves_the_result(monkeypatch):
    serial, on_cluster = _fit_closing_every_worker(True, monkeypatch)
    assert_array_equal(serial.coef_, on_cluster.coef_)
    assert_array_equal(serial.alpha_, on_cluster.alpha_)


def test_every_worker_closed_for_good_fails_saying_the_data_was_lost(monkeypatch):
    started = time.perf_counter()
    with pytest.raises(
        RuntimeError,
        match=r"dask workers holding the data .* were lost .* no worker .* 1 s",
    ):
        _fit_closing_every_worker(False, monkeypatch)
    assert time.perf_counter() - started < FIT_TIMEOUT_S


def _bootstrap_closing_every_worker(restart, monkeypatch):
    """A bootstrap of a tree (the generic path, on the cluster through joblib's
    dask backend) whose workers all close at its third refit (and, with
    ``restart``, are replaced): the serial fit and it."""
    monkeypatch.setenv(engine.cluster.DASK_TIMEOUT_ENV, "1")
    X, Y = make_data(n_samples=60, n_features=5, n_targets=1, seed=9)

    def make():
        return BootstrapEstimator(
            DecisionTreeRegressor(max_depth=3, random_state=0),
            n_bootstrap=40,
            attributes="feature_importances_",
            return_samples=True,
            random_state=0,
        )

    serial = make().fit(X, Y[:, 0])
    # Refits slow enough that the window is still running once the workers
    # are closed (the in-process workers share this class).
    fit, third_refit = DecisionTreeRegressor.fit, threading.Event()
    n_refits = []

    def slow_fit(self, *args, **kwargs):
        n_refits.append(1)
        if len(n_refits) == 3:
            third_refit.set()
        time.sleep(REFIT_S)
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(DecisionTreeRegressor, "fit", slow_fit)
    with (
        _in_process_cluster() as cluster,
        distributed.Client(cluster) as client,
        ThreadPoolExecutor(2) as pool,
    ):
        client.wait_for_workers(2, timeout=FIT_TIMEOUT_S)

        def fit_on_the_cluster():
            # In the thread that fits: joblib's configuration is per thread.
            # Its own wait for a worker, 10 s by default, as short as ours.
            with joblib.parallel_config(
                backend="dask", client=client, wait_for_workers_timeout=1
            ):
                return make().fit(X, Y[:, 0])

        def close_at_the_third_refit():
            third_refit.wait(FIT_TIMEOUT_S)
            _close_every_worker(cluster, client, restart)

        # joblib submits the tasks from the client's event loop, which closing
        # the workers needs: they are closed from a thread of their own.
        closed = pool.submit(close_at_the_third_refit)
        try:
            fitted = pool.submit(fit_on_the_cluster).result(timeout=FIT_TIMEOUT_S)
        finally:
            third_refit.set()
            closed.result(timeout=FIT_TIMEOUT_S)
    return serial, fitted


# A dask cluster's start and its tasks: over 2 s.
@pytest.mark.slow
def test_the_generic_path_sends_the_data_again_to_replaced_workers(monkeypatch, caplog):
    serial, on_cluster = _bootstrap_closing_every_worker(True, monkeypatch)
    assert "sending it again" in caplog.text
    for name, result in serial.results_.items():
        for field, value in result._asdict().items():
            assert_array_equal(value, getattr(on_cluster.results_[name], field))


def test_the_generic_path_fails_saying_the_data_was_lost(monkeypatch):
    # A raw TimeoutError came from asking joblib for workers, or from the
    # re-send, both outside the handling of the window's errors.
    started = time.perf_counter()
    with pytest.raises(
        RuntimeError,
        match=r"dask workers holding the data .* were lost .* no worker .* 1 s",
    ):
        _bootstrap_closing_every_worker(False, monkeypatch)
    assert time.perf_counter() - started < FIT_TIMEOUT_S


# --- the client closed mid-fit --------------------------------------------------


_RUN_BATCH = engine.cluster._run_batch


def _slow_third_batch(problem, ids, *args):
    # The third batch of 50 targets takes a second, so that a close from
    # another thread comes while the fit waits for it.
    if ids[0] == 2 * 50:
        time.sleep(1.0)
    return _RUN_BATCH(problem, ids, *args)


def _closing_on_the_third_batch(monkeypatch, client, when):
    """Close ``client`` at the third batch: before submitting it, after, or
    from another thread while the fit waits for it (the batch then takes a
    second, so that the close comes first)."""
    submit = client.submit
    n_submits = []
    closer = []

    def closing_submit(*args, **kwargs):
        n_submits.append(1)
        if len(n_submits) == 3 and when == "before":
            client.close()
        future = submit(*args, **kwargs)
        if len(n_submits) == 3 and when == "after":
            client.close()
        if len(n_submits) == 3 and when == "thread":
            closer.append(threading.Timer(0.2, client.close))
            closer[0].start()
        return future

    monkeypatch.setattr(engine.cluster, "_run_batch", _slow_third_batch)
    monkeypatch.setattr(client, "submit", closing_submit)
    return closer


@pytest.mark.parametrize("when", ["before", "after", "thread"])
def test_a_client_closed_mid_fit_fails_saying_so(monkeypatch, when):
    X, Y = make_data(n_targets=400)
    with distributed.Client(
        processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None
    ) as client:
        closer = _closing_on_the_third_batch(monkeypatch, client, when)
        model = BatchedRidge(alphas=ALPHAS, n_targets_batch=50, device="cpu")
        with pytest.raises(RuntimeError, match="client .* was closed during the fit"):
            model.fit(X, Y)
        for thread in closer:
            thread.join()
        assert client.status == "closed"
    assert not hasattr(model, "coef_")
    assert not hasattr(model, "fit_report_")
    # Without a client the same estimator fits in this process.
    model.fit(X, Y)
    assert_array_equal(model.alpha_, BatchedRidge(alphas=ALPHAS).fit(X, Y).alpha_)
