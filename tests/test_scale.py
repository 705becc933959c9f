"""Scaling out and device placement: dask, Ray, device strings, JAX.

- dask: the generic paths run on a real two-process ``LocalCluster`` through
  ``joblib.parallel_config(backend="dask")``, give the serial results bit for
  bit, and send the data to the cluster once, not with every task.
- Ray: the same through ``ray.util.joblib``, when ray is installed.
- Device strings: ``"cuda:1"`` is carried from the parameter to the device
  queries, recorded in ``backend_``, pickled, and refused on a host without it
  (CUDA is faked: no kernel runs on a GPU here).
- Worker payloads: joblib tasks hold numpy arrays and strings, never a live
  torch or jax array.
- JAX: the three estimators on ``device="jax"`` equal numpy, memory comes
  from ``memory_stats()``, ``RESOURCE_EXHAUSTED`` is recovered from, and
  skbatch neither imports jax at import time nor lets it preallocate a GPU.
"""

import contextlib
import functools
import io
import os
import pickle
import subprocess
import sys
import textwrap

import joblib
import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import BaseEstimator, clone
from sklearn.linear_model import Ridge
from sklearn.neighbors import KNeighborsRegressor
from sklearn.tree import DecisionTreeRegressor

import skbatch._engine as engine
from skbatch import (
    Backend,
    BatchedRidge,
    BootstrapEstimator,
    PermutationScorer,
    memory_budget,
)
from skbatch._engine import run_batched
from skbatch.memory import BATCHING_CAP_GB, DEVICE_FREE_FRACTION, GB

ALPHAS = np.logspace(-2, 3, 6)


def make_data(n_samples=120, n_features=8, n_targets=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_samples, n_features))
    coef = rng.standard_normal((n_features, n_targets))
    Y = X @ coef + rng.standard_normal((n_samples, n_targets))
    return X, Y


def tree_bootstrap(**params):
    """Generic bootstrap path: a non-linear regressor, seeded."""
    return BootstrapEstimator(
        DecisionTreeRegressor(max_depth=4, random_state=0),
        attributes="feature_importances_",
        return_samples=True,
        random_state=7,
        **params,
    )


def tree_permutation(**params):
    """Generic permutation path: a non-linear regressor, per-target p-values.

    A tree, not nearest neighbours: KNeighborsRegressor's own joblib calls
    would go to the cluster too and blur what these tests count.
    """
    return PermutationScorer(
        DecisionTreeRegressor(max_depth=3, random_state=0),
        cv=3,
        multioutput="raw_values",
        return_null=True,
        random_state=11,
        **params,
    )


def assert_same_bootstrap(a, b):
    for name, result in a.results_.items():
        for field, value in result._asdict().items():
            assert_array_equal(value, getattr(b.results_[name], field), err_msg=field)


def assert_same_permutation(a, b):
    for name in (
        "score_",
        "pvalue_",
        "pvalue_fwer_",
        "null_mean_",
        "null_std_",
        "permutation_scores_",
    ):
        assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


# --- dask ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2,
            processes=True,
            threads_per_worker=1,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        # Not the default client: the tests after this module's dask tests
        # compute in this process (fitting with a default client runs the
        # batched paths on the cluster, tests/test_cluster.py).
        distributed.Client(cluster, set_as_default=False) as client,
    ):
        yield client


def _walk(obj, seen=None):
    """Every object reachable through containers, partials and library objects."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    yield obj
    if isinstance(obj, list | tuple | set):
        children = list(obj)
    elif isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, functools.partial):
        children = [obj.func, *obj.args, *obj.keywords.values()]
    elif type(obj).__module__.split(".")[0] in ("sklearn", "skbatch", "joblib"):
        children = list(getattr(obj, "__dict__", {}).values())
    else:
        children = []
    for child in children:
        yield from _walk(child, seen)


@contextlib.contextmanager
def watch_client(client, monkeypatch, *, current=True):
    """Record what the client scatters and what every submitted task carries.

    With ``current``, the client is dask's default inside the block, where
    ``joblib.parallel_config(backend="dask")`` finds it.
    """
    from distributed import Future

    log = {"scattered": [], "task_arrays": [], "task_futures": 0, "n_submits": 0}
    scatter, submit = client.scatter, client.submit

    def recording_scatter(data, *args, **kwargs):
        log["scattered"].append(data)
        return scatter(data, *args, **kwargs)

    def recording_submit(function, *args, **kwargs):
        log["n_submits"] += 1
        for obj in _walk((function, args, kwargs)):
            if isinstance(obj, np.ndarray):
                log["task_arrays"].append(obj)
            elif isinstance(obj, Future):
                log["task_futures"] += 1
        return submit(function, *args, **kwargs)

    monkeypatch.setattr(client, "scatter", recording_scatter)
    monkeypatch.setattr(client, "submit", recording_submit)
    with client.as_current() if current else contextlib.nullcontext():
        yield log


@pytest.mark.slow
def test_bootstrap_generic_path_on_dask_matches_serial_and_scatters_once(
    dask_client, monkeypatch
):
    from distributed import get_task_stream

    X, Y = make_data(n_samples=300, n_features=40, n_targets=1)
    y = Y[:, 0]
    serial = tree_bootstrap(n_bootstrap=150).fit(X, y)
    # Three windows (64 + 64 + 22 replicates): the data must still travel once.
    monkeypatch.setattr(engine.parallel, "MAX_WINDOW", 64)
    with (
        watch_client(dask_client, monkeypatch) as log,
        get_task_stream(client=dask_client) as stream,
        joblib.parallel_config(backend="dask"),
    ):
        on_dask = tree_bootstrap(n_bootstrap=150).fit(X, y)

    assert_same_bootstrap(serial, on_dask)
    # The replicates ran on the cluster's workers, one Parallel call per window.
    workers = {task["worker"] for task in stream.data}
    assert workers and workers <= set(dask_client.scheduler_info()["workers"])
    assert log["n_submits"] >= 3
    # X and y were scattered in one call, before the first window...
    assert len(log["scattered"]) == 1
    (scattered,) = log["scattered"]
    assert any(np.array_equal(value, X) for value in scattered)
    assert any(np.array_equal(value, y) for value in scattered)
    # ... and every task carries futures to them, never an array bigger than
    # the scatter threshold (its replicate ids are a few bytes).
    assert log["task_futures"] >= log["n_submits"]
    assert max(a.nbytes for a in log["task_arrays"]) <= engine.cluster.SCATTER_MIN_BYTES
    assert sum(a.nbytes for a in log["task_arrays"]) < X.nbytes


@pytest.mark.slow
def test_permutation_generic_path_on_dask_matches_serial(dask_client, monkeypatch):
    X, Y = make_data(n_samples=150, n_features=6, n_targets=3, seed=1)
    serial = tree_permutation(n_permutations=60).fit(X, Y)
    with (
        watch_client(dask_client, monkeypatch) as log,
        joblib.parallel_config(backend="dask"),
    ):
        on_dask = tree_permutation(n_permutations=60).fit(X, Y)
    assert_same_permutation(serial, on_dask)
    assert log["n_submits"] >= 1
    # X, y and the fold indices went out in one scatter.
    assert len(log["scattered"]) == 1
    assert max(a.nbytes for a in log["task_arrays"]) <= engine.cluster.SCATTER_MIN_BYTES


@pytest.mark.slow
def test_dask_worker_count_decides_where_tasks_run(dask_client, monkeypatch):
    from joblib._dask import DaskDistributedBackend

    X, Y = make_data(n_samples=100, n_features=12, n_targets=1, seed=8)
    serial = tree_bootstrap(n_bootstrap=30).fit(X, Y[:, 0])
    # joblib's dask backend ignores n_jobs: n_jobs=1 still runs on the cluster.
    with (
        watch_client(dask_client, monkeypatch) as log,
        joblib.parallel_config(backend="dask"),
    ):
        one_job = tree_bootstrap(n_bootstrap=30, n_jobs=1).fit(X, Y[:, 0])
    assert_same_bootstrap(serial, one_job)
    assert len(log["scattered"]) == 1 and log["n_submits"] >= 1
    # A cluster of one thread: joblib runs the tasks in this process, where a
    # scattered future would arrive unresolved, so nothing may be scattered.
    monkeypatch.setattr(DaskDistributedBackend, "effective_n_jobs", lambda *a, **k: 1)
    with (
        watch_client(dask_client, monkeypatch) as log,
        joblib.parallel_config(backend="dask"),
    ):
        in_process = tree_bootstrap(n_bootstrap=30).fit(X, Y[:, 0])
    assert_same_bootstrap(serial, in_process)
    assert log["scattered"] == [] and log["n_submits"] == 0


@pytest.fixture
def doomed_dask_client():
    """A two-worker cluster of the test's own, for killing its workers."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2,
            processes=True,
            threads_per_worker=1,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster, set_as_default=False) as client,
    ):
        client.wait_for_workers(2, timeout=60)
        yield client


def kill_data_holder_after_scatter(client, monkeypatch, *, replicate):
    """Kill the worker holding the data sent by the first scatter.

    With ``replicate`` the data is first copied to the other worker, which
    keeps it; without, the only copy dies with its worker, and the test waits
    until the scheduler knows and the nanny has restarted the worker.
    """
    import time

    scatter = client.scatter
    n_calls = []

    def scatter_then_kill(data, *args, **kwargs):
        futures = scatter(data, *args, **kwargs)
        n_calls.append(1)
        if len(n_calls) > 1:
            return futures
        if replicate:
            client.replicate(futures, n=2)
        (holder, *_), *_ = client.who_has(futures).values()
        (pid,) = client.run(os.getpid, workers=[holder]).values()
        os.kill(pid, 9)
        deadline = time.monotonic() + 60
        # The scheduler notices the death (and the loss of the only copy)...
        while holder in client.scheduler_info()["workers"] or (
            not replicate and all(f.status == "finished" for f in futures)
        ):
            assert time.monotonic() < deadline, "the loss was never noticed"
            time.sleep(0.05)
        # ... and the nanny restarts the worker, so that the fit runs on two.
        client.wait_for_workers(2, timeout=60)
        return futures

    monkeypatch.setattr(client, "scatter", scatter_then_kill)


@pytest.mark.slow
@pytest.mark.parametrize("replicate", [False, True])
@pytest.mark.parametrize(
    "make, assert_same",
    [
        (lambda: tree_bootstrap(n_bootstrap=40), assert_same_bootstrap),
        (lambda: tree_permutation(n_permutations=30), assert_same_permutation),
    ],
    ids=["bootstrap", "permutation"],
)
def test_generic_paths_survive_the_death_of_the_worker_holding_the_data(
    doomed_dask_client, monkeypatch, make, assert_same, replicate
):
    X, Y = make_data(n_samples=200, n_features=10, n_targets=2, seed=3)
    serial = make().fit(X, Y)
    kill_data_holder_after_scatter(doomed_dask_client, monkeypatch, replicate=replicate)
    with (
        watch_client(doomed_dask_client, monkeypatch) as log,
        joblib.parallel_config(backend="dask"),
    ):
        on_dask = make().fit(X, Y)
    assert_same(serial, on_dask)
    assert log["n_submits"] >= 1  # ran on the cluster, not in this process
    # A lost copy is sent again, once; a surviving replica is used as it is.
    assert len(log["scattered"]) == (1 if replicate else 2)


def test_a_window_whose_data_stays_lost_fails_saying_so(monkeypatch):
    class LostForever:
        local = sent = ((), {})
        n_scatters = 0

        def scatter_lost(self):
            self.n_scatters += 1

        def any_lost(self):
            return True

    class FailingParallel:
        n_jobs = 2
        n_calls = 0

        def __call__(self, tasks):
            list(tasks)
            self.n_calls += 1
            raise TypeError("'Future' object is not iterable")

    monkeypatch.setattr(engine.parallel, "_n_workers", lambda parallel: 2)
    data, parallel = LostForever(), FailingParallel()
    with pytest.raises(
        RuntimeError, match=r"dask workers holding the data .* were lost 3 times"
    ) as info:
        engine.parallel._run_window(parallel, print, data, [np.arange(3)])
    assert isinstance(info.value.__cause__, TypeError)
    assert parallel.n_calls == data.n_scatters == engine.cluster.DATA_LOSS_RETRIES + 1


def test_a_task_error_without_lost_data_is_not_retried(monkeypatch):
    class Kept:
        local = sent = ((), {})

        def scatter_lost(self):
            pass

        def any_lost(self):
            return False

    calls = []

    def parallel(tasks):
        calls.append(list(tasks))
        raise ValueError("the estimator's own error")

    parallel.n_jobs = 2
    monkeypatch.setattr(engine.parallel, "_n_workers", lambda parallel: 2)
    with pytest.raises(ValueError, match="the estimator's own error"):
        engine.parallel._run_window(parallel, print, Kept(), [np.arange(3)])
    assert len(calls) == 1


@pytest.mark.slow
def test_batched_paths_inside_a_joblib_dask_context_run_on_the_cluster(
    dask_client, monkeypatch
):
    # The client of joblib's dask backend counts as active, as for the generic
    # paths: the batches go to its workers, and the results do not change.
    X, Y = make_data()
    ridge = BatchedRidge(alphas=ALPHAS, device="cpu").fit(X, Y)
    boot = BootstrapEstimator(
        Ridge(), n_bootstrap=40, random_state=0, device="cpu", return_samples=True
    ).fit(X, Y)
    with (
        watch_client(dask_client, monkeypatch, current=False) as log,
        joblib.parallel_config(backend="dask", client=dask_client),
    ):
        ridge_dask = BatchedRidge(alphas=ALPHAS, device="cpu").fit(X, Y)
        boot_dask = BootstrapEstimator(
            Ridge(), n_bootstrap=40, random_state=0, device="cpu", return_samples=True
        ).fit(X, Y)
    for name in ("coef_", "intercept_", "alpha_", "best_score_"):
        assert_array_equal(getattr(ridge, name), getattr(ridge_dask, name))
    assert_same_bootstrap(boot, boot_dask)
    stages = [*ridge_dask.fit_report_.stages, *boot_dask.fit_report_.stages]
    assert [stage.path for stage in stages] == ["cluster"] * len(stages)
    # One problem sent per loop; each batch a task holding its ids, not data.
    assert len(log["scattered"]) == len(stages)
    assert log["n_submits"] == sum(stage.n_batches for stage in stages)
    assert max(a.nbytes for a in log["task_arrays"]) < X.nbytes


def test_generic_path_results_do_not_depend_on_task_size(monkeypatch):
    # What makes dask equal serial bit for bit: the reducer sees the same
    # blocks whatever the number of workers, so the running moments round the
    # same way (the tasks here are 1 and 3 replicates long).
    X, Y = make_data(n_samples=80, n_features=5, n_targets=1, seed=2)
    reference = tree_bootstrap(n_bootstrap=100).fit(X, Y[:, 0])
    for per_worker in (1, 100):
        monkeypatch.setattr(engine.parallel, "TASKS_PER_WORKER", per_worker)
        with joblib.parallel_config(backend="threading"):
            other = tree_bootstrap(n_bootstrap=100, n_jobs=2).fit(X, Y[:, 0])
        assert_same_bootstrap(reference, other)


# --- Ray ----------------------------------------------------------------------


@pytest.mark.slow
def test_generic_paths_on_ray_match_serial():
    ray = pytest.importorskip("ray")
    from ray.util.joblib import register_ray

    X, Y = make_data(n_samples=150, n_features=6, n_targets=3, seed=3)
    serial_boot = tree_bootstrap(n_bootstrap=40).fit(X, Y[:, 0])
    serial_perm = tree_permutation(n_permutations=30).fit(X, Y)
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        register_ray()
        with joblib.parallel_config(backend="ray"):
            boot = tree_bootstrap(n_bootstrap=40).fit(X, Y[:, 0])
            perm = tree_permutation(n_permutations=30).fit(X, Y)
    finally:
        ray.shutdown()
    assert_same_bootstrap(serial_boot, boot)
    assert_same_permutation(serial_perm, perm)


# --- device strings, end to end (CUDA faked) ------------------------------------


@pytest.fixture
def cuda_runs_on_cpu(fake_cuda, monkeypatch):
    """Fake CUDA devices whose "kernels" run on torch's CPU.

    Every device object skbatch asks for is recorded by the backend's device
    string, and the free memory query by its device, so a test sees which
    card the computation was sent to.
    """
    import torch

    seen = {"devices": [], "mem_get_info": []}
    real_native_device = Backend.native_device

    def native_device(self):
        if self.library == "torch" and self.device.startswith("cuda"):
            self.check_available()
            seen["devices"].append(self.device)
            return torch.device("cpu")
        return real_native_device(self)

    def mem_get_info(device=None):
        seen["mem_get_info"].append(device)
        return 2 * 10**9, 4 * 10**9

    monkeypatch.setattr(Backend, "native_device", native_device)
    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    return seen


def test_device_index_is_honoured_end_to_end(cuda_runs_on_cpu):
    X, Y = make_data()
    ridge = BatchedRidge(alphas=ALPHAS, dtype="float64")
    boot = BootstrapEstimator(Ridge(), n_bootstrap=30, random_state=0)
    perm = PermutationScorer(Ridge(), n_permutations=20, random_state=0)
    fitted = {}
    for device in ("cpu", "cuda:1"):
        cuda_runs_on_cpu["devices"].clear()
        fitted[device] = [
            clone(estimator).set_params(device=device).fit(X, Y)
            for estimator in (ridge, boot, perm)
        ]
    for estimator in fitted["cuda:1"]:
        assert estimator.backend_ == Backend("torch", "cuda:1")
    # Every device object the computation asked for was card 1's, and batches
    # were sized from the free memory of a card.
    assert set(cuda_runs_on_cpu["devices"]) == {"cuda:1"}
    assert cuda_runs_on_cpu["mem_get_info"]
    (ridge_np, boot_np, perm_np), (ridge_gpu, boot_gpu, perm_gpu) = fitted.values()
    assert_allclose(ridge_gpu.coef_, ridge_np.coef_, rtol=1e-8, atol=1e-10)
    assert_allclose(
        boot_gpu.results_["coef_"].standard_error,
        boot_np.results_["coef_"].standard_error,
        rtol=1e-8,
    )
    assert_array_equal(perm_gpu.pvalue_, perm_np.pvalue_)


def test_bare_cuda_records_card_zero(cuda_runs_on_cpu):
    X, Y = make_data()
    model = BatchedRidge(alphas=ALPHAS, device="cuda").fit(X, Y)
    assert model.backend_.device == "cuda:0"
    assert model.dtype_ == np.float32  # "auto" dtype on a GPU


def test_to_device_records_the_index_pickles_and_refuses_without_gpu(
    fake_cuda, monkeypatch
):
    import torch

    X, Y = make_data()
    model = BatchedRidge(alphas=ALPHAS, device="cpu").fit(X, Y)
    expected = model.predict(X)
    assert model.to_device("cuda:1") is model
    assert model.backend_ == Backend("torch", "cuda:1")
    assert model.backend_.name == "torch-cuda"
    blob = pickle.dumps(model)

    # Another host: no GPU at all. Loading works; computing names the card.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    loaded = pickle.loads(blob)
    assert loaded.backend_.device == "cuda:1"
    with pytest.raises(RuntimeError, match=r"'cuda:1'.*to_device\('cpu'\)"):
        loaded.predict(X)
    assert_allclose(loaded.to_device("cpu").predict(X), expected, rtol=0, atol=0)


def test_to_device_to_a_missing_index_raises(fake_cuda):
    X, Y = make_data()
    model = BatchedRidge(alphas=ALPHAS, device="cpu").fit(X, Y)
    with pytest.raises(RuntimeError, match=r"'cuda:2'.*no index 2"):
        model.to_device("cuda:2")
    assert model.backend_ == Backend("numpy")  # unchanged


def test_wrappers_move_with_their_fitted_estimator(fake_cuda):
    X, Y = make_data()
    boot = BootstrapEstimator(
        BatchedRidge(alphas=1.0), n_bootstrap=10, random_state=0, device="cpu"
    ).fit(X, Y)
    perm = PermutationScorer(
        BatchedRidge(alphas=ALPHAS, device="cpu"),
        n_permutations=5,
        random_state=0,
        device="cpu",
    ).fit(X, Y)
    for wrapper in (boot, perm):
        loaded = pickle.loads(pickle.dumps(wrapper.to_device("cuda:1")))
        assert loaded.backend_.device == "cuda:1"
        assert loaded.estimator_.backend_.device == "cuda:1"


@pytest.mark.slow
def test_cuda_pickle_refuses_to_predict_in_a_process_without_gpu(fake_cuda, tmp_path):
    X, Y = make_data()
    model = BatchedRidge(alphas=ALPHAS, device="cpu").fit(X, Y).to_device("cuda:1")
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps(model))
    np.save(tmp_path / "X.npy", X)
    script = textwrap.dedent(
        f"""
        import pickle, numpy as np
        model = pickle.loads(open({str(path)!r}, "rb").read())
        assert model.backend_.device == "cuda:1"
        try:
            model.predict(np.load({str(tmp_path / "X.npy")!r}))
        except RuntimeError as exc:
            print(exc)
        else:
            raise SystemExit("predicted on a host without cuda:1")
        """
    )
    # The child hides every real GPU, whatever this host has.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "'cuda:1'" in out.stdout and "to_device('cpu')" in out.stdout


# --- worker payloads ------------------------------------------------------------


def _device_objects(payload):
    """torch / jax objects that pickling ``payload`` would send."""
    found = []

    class Checker(pickle.Pickler):
        def reducer_override(self, obj):
            if not isinstance(obj, type):
                root = type(obj).__module__.split(".")[0]
                if root in ("torch", "jax", "jaxlib"):
                    found.append(type(obj))
            return NotImplemented

    Checker(io.BytesIO()).dump(payload)
    return found


_SCALARS = (str, int, float, bool, type(None), np.generic)


def _check_payload(obj, path="task"):
    """numpy arrays, scalars, strings, estimators and sklearn callables only."""
    root = type(obj).__module__.split(".")[0]
    assert root not in ("torch", "jax", "jaxlib"), f"{path} is a {type(obj)}"
    if isinstance(obj, np.ndarray):
        assert obj.dtype != object, f"{path} is an object array"
    elif isinstance(obj, _SCALARS):
        pass
    elif isinstance(obj, list | tuple):
        for k, item in enumerate(obj):
            _check_payload(item, f"{path}[{k}]")
    elif isinstance(obj, dict):
        for key, item in obj.items():
            _check_payload(item, f"{path}[{key!r}]")
    elif isinstance(obj, functools.partial):
        _check_payload([obj.func, obj.args, obj.keywords], f"{path}.partial")
    elif isinstance(obj, BaseEstimator):
        _check_payload(obj.get_params(deep=False), f"{path}.params")
    elif callable(obj) and getattr(obj, "__module__", root).split(".")[0] in (
        "sklearn",
        "skbatch",
    ):
        # Task functions, metrics and scorers, with what they hold.
        _check_payload(dict(getattr(obj, "__dict__", {})), f"{path}.__dict__")
    else:
        raise AssertionError(f"{path} is a {type(obj)}")


@pytest.fixture
def recorded_tasks(monkeypatch):
    calls = []
    real_delayed = engine.parallel.delayed

    def delayed(function):
        wrapped = real_delayed(function)

        def record(*args, **kwargs):
            calls.append((function, args, kwargs))
            return wrapped(*args, **kwargs)

        return record

    monkeypatch.setattr(engine.parallel, "delayed", delayed)
    return calls


def _as_library(library, *arrays):
    if library == "torch":
        import torch

        return [torch.asarray(a) for a in arrays]
    import jax

    with jax.enable_x64(True):
        return [jax.numpy.asarray(a) for a in arrays]


@pytest.mark.parametrize(
    "library", ["torch", pytest.param("jax", marks=pytest.mark.slow)]
)
def test_tasks_carry_numpy_and_device_strings_never_device_arrays(
    library, recorded_tasks
):
    pytest.importorskip(library)
    X, Y = make_data(n_samples=60, n_features=4, n_targets=2, seed=4)
    w = np.linspace(0.5, 1.5, len(X))
    X_dev, Y_dev, w_dev = _as_library(library, X, Y, w)
    fits = [
        lambda: tree_bootstrap(n_bootstrap=8, device=library).fit(X_dev, Y_dev),
        # An estimator that itself computes on the device, refit in each task.
        lambda: BootstrapEstimator(
            BatchedRidge(alphas=ALPHAS, device=library),
            attributes=("coef_", "alpha_"),
            tune_per_replicate=True,
            n_bootstrap=4,
            random_state=0,
            device=library,
        ).fit(X_dev, Y_dev),
        lambda: PermutationScorer(
            KNeighborsRegressor(), n_permutations=6, random_state=0, device=library
        ).fit(X_dev, Y_dev),
        # Fit parameters send ridge to the generic path; the weights are a
        # device array too.
        lambda: PermutationScorer(
            BatchedRidge(alphas=ALPHAS, device=library),
            n_permutations=4,
            random_state=0,
            device=library,
        ).fit(X_dev, Y_dev, sample_weight=w_dev),
    ]
    for fit in fits:
        recorded_tasks.clear()
        fit()
        assert recorded_tasks, "the generic path did not run through joblib"
        for function, args, kwargs in recorded_tasks:
            payload = (function, args, kwargs)
            _check_payload(payload)
            assert _device_objects(payload) == []
            pickle.loads(pickle.dumps(payload))
    # The device travels as a string inside the estimator's parameters.
    devices = [
        value.get_params()["device"]
        for *_, kwargs in recorded_tasks
        for value in kwargs.values()
        if isinstance(value, BatchedRidge)
    ]
    assert devices and set(devices) == {library}


# --- JAX ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jax_and_numpy_fits():
    pytest.importorskip("jax")
    X, Y = make_data(n_samples=70, n_features=6, n_targets=3, seed=5)
    fits = {}
    for device in ("cpu", "jax"):
        fits[device] = (
            BatchedRidge(alphas=ALPHAS, device=device).fit(X, Y),
            BootstrapEstimator(
                Ridge(alpha=2.0),
                n_bootstrap=40,
                random_state=0,
                return_samples=True,
                device=device,
            ).fit(X, Y),
            PermutationScorer(
                BatchedRidge(alphas=ALPHAS),
                n_permutations=30,
                multioutput="raw_values",
                return_null=True,
                random_state=0,
                device=device,
            ).fit(X, Y),
        )
    return fits


@pytest.mark.slow
def test_jax_estimators_equal_numpy_in_float64(jax_and_numpy_fits):
    import jax.numpy as jnp

    ridge, boot, perm = jax_and_numpy_fits["jax"]
    ridge_np, boot_np, perm_np = jax_and_numpy_fits["cpu"]
    for fitted in (ridge, boot, perm):
        assert fitted.backend_ == Backend("jax", "cpu")
    assert ridge.dtype_ == np.float64
    tol = dict(rtol=1e-6, atol=1e-8)
    for name in ("coef_", "intercept_", "best_score_"):
        assert_allclose(getattr(ridge, name), getattr(ridge_np, name), **tol)
    assert_array_equal(ridge.alpha_, ridge_np.alpha_)
    for name, result in boot.results_.items():
        for field in ("standard_error", "ci_lower", "ci_upper", "samples"):
            expected = getattr(boot_np.results_[name], field)
            assert_allclose(getattr(result, field), expected, **tol)
    assert_allclose(perm.permutation_scores_, perm_np.permutation_scores_, **tol)
    assert_allclose(perm.score_, perm_np.score_, **tol)
    assert_array_equal(perm.pvalue_, perm_np.pvalue_)
    # x64 was enabled for the fits only: jax's global default is untouched.
    assert jnp.zeros(1).dtype == jnp.float32


class FakeJaxDevice:
    platform = "gpu"
    device_kind = "Fake GPU"

    def __init__(self, id, stats):
        self.id = id
        self.stats = stats

    def memory_stats(self):
        return self.stats


@pytest.fixture
def fake_jax_gpus(no_gpu, monkeypatch):
    import jax

    devices = [
        FakeJaxDevice(0, {"bytes_limit": 16 * 10**9, "bytes_in_use": 6 * 10**9}),
        FakeJaxDevice(1, {"bytes_limit": 40 * 10**9, "bytes_in_use": 35 * 10**9}),
    ]
    real_devices = jax.devices

    def gpu_devices(backend=None):
        if backend in ("gpu", "cuda"):
            return devices
        return real_devices(backend)

    monkeypatch.setattr(jax, "devices", gpu_devices)
    return devices


def test_jax_memory_budget_comes_from_memory_stats(fake_jax_gpus):
    # (limit - in use) x 0.8, of the card the device string names.
    assert memory_budget(Backend("jax", "gpu")) == pytest.approx(
        10 * DEVICE_FREE_FRACTION
    )
    assert memory_budget(Backend("jax", "gpu:1")) == pytest.approx(
        5 * DEVICE_FREE_FRACTION
    )
    # For batching, a measured budget is capped.
    fake_jax_gpus[0].stats = {"bytes_limit": 100 * 10**9, "bytes_in_use": 0}
    assert memory_budget(Backend("jax", "gpu"), for_batching=True) == BATCHING_CAP_GB
    plan = engine.plan_batches(
        10**6, backend=Backend("jax", "gpu:1"), device_bytes_per_item=10**6
    )
    assert plan.batch_size == int(5 * DEVICE_FREE_FRACTION * GB // 10**6)


def test_jax_device_without_memory_stats_falls_back_with_a_warning(fake_jax_gpus):
    fake_jax_gpus[0].stats = None
    with pytest.warns(UserWarning, match="Cannot measure free memory on jax-gpu"):
        assert memory_budget(Backend("jax", "gpu")) == 4.0


class XlaRuntimeError(RuntimeError):
    """Named like jaxlib's error class, which skbatch does not import."""


def _jax_resource_exhausted(cls, n_items, limit):
    return cls(
        f"RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
        f"{n_items * 8 * 10**6} bytes (batch of {n_items}, limit {limit})."
    )


@pytest.mark.parametrize("error", ["local XlaRuntimeError", "jax JaxRuntimeError"])
def test_jax_resource_exhausted_is_recovered_by_splitting(error):
    jax = pytest.importorskip("jax")
    cls = XlaRuntimeError if error.startswith("local") else jax.errors.JaxRuntimeError
    backend = Backend("jax")
    limit = 5

    def run(max_items):
        out = {}

        def kernel(ids):
            if max_items is not None and len(ids) > max_items:
                raise _jax_resource_exhausted(cls, len(ids), max_items)
            xp = backend.xp
            values = backend.asarray(ids, np.float64)
            return xp.stack([xp.sin(values), values**2], axis=1)

        def reduce(ids, block):
            assert isinstance(block, np.ndarray) and block.dtype == np.float64
            out.update(zip(ids.tolist(), block))

        plan = run_batched(
            kernel,
            reduce,
            n_items=40,
            backend=backend,
            device_bytes_per_item=8,
            batch_size=16,
        )
        return np.stack([out[i] for i in range(40)]), plan

    unsplit, plan = run(None)
    assert plan.n_oom_recoveries == 0
    recovered, plan = run(limit)
    assert plan.n_oom_recoveries > 0
    assert_array_equal(recovered, unsplit)


@pytest.mark.slow
def test_batched_ridge_on_jax_recovers_from_resource_exhausted(monkeypatch):
    pytest.importorskip("jax")
    from skbatch._ridge.problems import RidgeSolver

    X, Y = make_data(n_targets=12, seed=6)
    reference = BatchedRidge(alphas=ALPHAS, device="jax").fit(X, Y)
    real = RidgeSolver.select_and_fit
    sizes = []

    def select_and_fit(self, Y_batch):
        sizes.append(Y_batch.shape[1])
        if Y_batch.shape[1] > 3:
            raise _jax_resource_exhausted(XlaRuntimeError, Y_batch.shape[1], 3)
        return real(self, Y_batch)

    monkeypatch.setattr(RidgeSolver, "select_and_fit", select_and_fit)
    recovered = BatchedRidge(alphas=ALPHAS, device="jax").fit(X, Y)
    # 12 and the halves of 6 ran out of memory; batches of 3 did all the work.
    assert sizes[0] == 12
    assert sum(size for size in sizes if size <= 3) == 12
    for name in ("coef_", "intercept_", "alpha_", "best_score_"):
        assert_allclose(getattr(recovered, name), getattr(reference, name), rtol=1e-12)


def _python(code, env=None):
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(process):
    stdout, stderr = process.communicate(timeout=180)
    assert process.returncode == 0, stderr
    return stdout.strip()


@pytest.mark.slow
def test_importing_skbatch_imports_neither_jax_nor_torch():
    code = """
        import sys
        import skbatch
        from skbatch import BatchedRidge, BootstrapEstimator, PermutationScorer
        BatchedRidge(device="cpu").fit([[0.0], [1.0], [2.0]], [0.0, 1.0, 2.0])
        print([m for m in ("jax", "torch", "distributed") if m in sys.modules])
    """
    assert _result(_python(code)) == "[]"


_USE_JAX = """
    import os, sys
    {before}
    from skbatch import Backend
    Backend("jax").asarray([1.0, 2.0])
    assert "jax" in sys.modules
    print(os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "<unset>"))
"""


@pytest.mark.slow
def test_jax_preallocation_is_off_unless_the_user_chose():
    pytest.importorskip("jax")
    variable = "XLA_PYTHON_CLIENT_PREALLOCATE"
    base = {k: v for k, v in os.environ.items() if k != variable}
    cases = {
        # skbatch imports jax: no preallocation.
        "false": _python(_USE_JAX.format(before=""), base),
        # The user's value is kept.
        "true": _python(_USE_JAX.format(before=""), {**base, variable: "true"}),
        # The user imported jax first: the choice is theirs, nothing is set.
        "<unset>": _python(_USE_JAX.format(before="import jax"), base),
    }
    for expected, process in cases.items():
        assert _result(process) == expected
