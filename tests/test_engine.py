import functools
import logging
import math
import threading
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import joblib
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from threadpoolctl import threadpool_info, threadpool_limits

import skbatch._engine as engine
from skbatch import Backend, BatchedRidge, _backends, memory
from skbatch._backends.numpy import threads as blas_threads
from skbatch._backends.side_by_side import cpu_workers, map_threads
from skbatch._engine import plan_batches, run_batched, run_parallel
from skbatch._engine.report import collect_stages
from skbatch.oom import _SIMULATED_OOM_LIMIT
from skbatch.random import item_rng
from skbatch.testing import simulate_oom

SEED = 20240611
WIDTH = 5
ITEM_BYTES = WIDTH * 8
BACKENDS = [Backend("numpy"), Backend("torch", "cpu"), Backend("jax", "cpu")]


def _draw(ids, seed=SEED, width=WIDTH):
    """Per-item random vectors, item i from its own stream."""
    out = np.empty((len(ids), width))
    for row, item in enumerate(ids):
        out[row] = item_rng(seed, item).standard_normal(width)
    return out


def _draw_task(ids):
    """Module level, so that loky workers can unpickle it."""
    return _draw(ids) * 2.0


def _reference(n_items):
    """A naive loop over items, no engine."""
    return np.stack([item_rng(SEED, i).standard_normal(WIDTH) for i in range(n_items)])


class Recorder:
    """A kernel that counts calls and items, and a reducer that collects."""

    def __init__(self, backend=None, oom_above=None):
        self.backend = Backend("numpy") if backend is None else backend
        self.oom_above = oom_above
        self.kernel_sizes = []
        self.computed = []
        self.reduced_ids = []
        self.reduced = []

    def kernel(self, ids):
        assert isinstance(ids, np.ndarray) and ids.dtype == np.int64
        self.kernel_sizes.append(len(ids))
        if self.oom_above is not None and len(ids) > self.oom_above:
            raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")
        self.computed.append(ids.copy())
        return self.backend.asarray(_draw(ids), dtype=np.float64) * 2

    def reduce(self, ids, result):
        assert isinstance(result, np.ndarray)
        assert len(ids) == len(result)
        self.reduced_ids.append(ids.copy())
        self.reduced.append(result)

    def result(self):
        return np.concatenate(self.reduced)

    def run(self, n_items, **kwargs):
        kwargs.setdefault("backend", self.backend)
        kwargs.setdefault("device_bytes_per_item", ITEM_BYTES)
        return run_batched(self.kernel, self.reduce, n_items=n_items, **kwargs)

    def assert_exact(self, n_items):
        """Result equals the naive loop; every item reduced once, in order."""
        np.testing.assert_array_equal(self.result(), 2 * _reference(n_items))
        np.testing.assert_array_equal(
            np.concatenate(self.reduced_ids), np.arange(n_items)
        )
        np.testing.assert_array_equal(np.concatenate(self.computed), np.arange(n_items))


# --- batch-size and budget invariance ----------------------------------------


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
@pytest.mark.parametrize("batch_size", [1, 7, 64, 100, "auto"])
def test_results_do_not_depend_on_batch_size(backend, batch_size):
    pytest.importorskip(backend.library)
    n_items = 100
    rec = Recorder(backend)
    plan = rec.run(n_items, batch_size=batch_size, max_memory_gb=1.0)
    rec.assert_exact(n_items)
    expected_size = n_items if batch_size == "auto" else batch_size
    assert plan.batch_size == expected_size
    assert plan.n_batches == math.ceil(n_items / expected_size)
    assert plan.n_kernel_calls == math.ceil(n_items / expected_size)
    assert rec.kernel_sizes == [len(ids) for ids in rec.reduced_ids]
    assert plan.n_oom_recoveries == 0


def test_fixed_batch_size_is_capped_at_n_items():
    rec = Recorder()
    plan = rec.run(10, batch_size=64)
    assert (plan.batch_size, plan.n_batches, plan.n_kernel_calls) == (10, 1, 1)
    rec.assert_exact(10)


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_results_do_not_depend_on_the_budget(backend):
    pytest.importorskip(backend.library)
    n_items = 50
    tiny, large = Recorder(backend), Recorder(backend)
    # Device and host bytes are both charged to RAM on a CPU backend:
    # 80 bytes an item, so a budget of 280 bytes holds 3 items.
    tiny_plan = tiny.run(
        n_items,
        host_bytes_per_item=ITEM_BYTES,
        max_memory_gb=3.5 * 2 * ITEM_BYTES / 1e9,
    )
    large_plan = large.run(n_items, host_bytes_per_item=ITEM_BYTES, max_memory_gb=100.0)
    assert (tiny_plan.batch_size, tiny_plan.n_batches) == (3, 17)
    assert (large_plan.batch_size, large_plan.n_batches) == (n_items, 1)
    tiny.assert_exact(n_items)
    large.assert_exact(n_items)
    np.testing.assert_array_equal(tiny.result(), large.result())


def test_tuple_results_reach_the_reducer_as_numpy():
    pytest.importorskip("torch")
    backend = Backend("torch", "cpu")
    received = []

    def kernel(ids):
        x = backend.asarray(_draw(ids), dtype=np.float64)
        return x, x.sum(dim=1)

    run_batched(
        kernel,
        lambda ids, result: received.append((ids, result)),
        n_items=9,
        backend=backend,
        device_bytes_per_item=ITEM_BYTES,
        batch_size=4,
    )
    assert all(
        isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
        for _, (a, b) in received
    )
    full = np.concatenate([a for _, (a, _) in received])
    sums = np.concatenate([b for _, (_, b) in received])
    np.testing.assert_array_equal(full, _reference(9))
    np.testing.assert_allclose(sums, _reference(9).sum(axis=1), rtol=1e-15)


# --- OOM recovery ------------------------------------------------------------


@pytest.mark.parametrize(
    "n_items, batch_size, max_items, calls, recoveries, reduced_sizes",
    [
        # 16 -> 8, 8 -> 4 x 4 (3 recoveries); then 48 items in batches of 4.
        (64, 16, 5, 16, 3, [4] * 16),
        # 16 -> 8 x 2 (1 recovery); then 48 items in batches of 8.
        (64, 16, 8, 8, 1, [8] * 8),
        # Fits: no recovery.
        (64, 16, 16, 4, 0, [16] * 4),
        # 16 -> 8 x 2 -> 4 x 4 -> 2 x 8 (1 + 2 + 4 recoveries); 34 items by 2.
        (50, 16, 3, 8 + 17, 7, [2] * 25),
        # 10 -> 5 + 5, each 5 -> 2 + 3 (3 recoveries), 3 worked:
        # the other 20 items in batches of 3, 3, 3, 3, 3, 3, 2.
        (30, 10, 3, 4 + 7, 3, [2, 3, 2, 3] + [3] * 6 + [2]),
        # One batch of all 64: 64 -> 32 -> 16 -> 8 -> 4 (1 + 2 + 4 + 8 recoveries).
        (64, "auto", 5, 16, 15, [4] * 16),
    ],
)
def test_simulated_oom_splits_and_remembers_the_size_that_worked(
    n_items, batch_size, max_items, calls, recoveries, reduced_sizes
):
    unsplit = Recorder()
    unsplit.run(n_items, batch_size=n_items)
    rec = Recorder()
    with simulate_oom(max_items=max_items):
        plan = rec.run(n_items, batch_size=batch_size, max_memory_gb=1.0)
    rec.assert_exact(n_items)
    np.testing.assert_array_equal(rec.result(), unsplit.result())
    # Every batch tried is counted: those the kernel saw, and those a
    # (simulated) out-of-memory error stopped, one per recovery.
    assert calls == len(rec.kernel_sizes)
    assert plan.n_kernel_calls == calls + recoveries
    assert plan.n_oom_recoveries == recoveries
    assert [len(ids) for ids in rec.reduced_ids] == reduced_sizes
    # The simulated OOM strikes before the kernel: it only sees batches that fit.
    assert max(rec.kernel_sizes) <= max_items


class RecyclingKernel:
    """Writes each batch into an array it was given back, as a pool would."""

    def __init__(self):
        self.lock = threading.Lock()
        self.made = []  # every array made, kept so that each has its number
        self.free = []
        self.events = []

    def number(self, array):
        return next(i for i, made in enumerate(self.made) if made is array)

    def record(self, kind, array):
        with self.lock:
            self.events.append((kind, self.number(array)))

    def __call__(self, ids):
        with self.lock:
            sizes = [len(array) for array in self.free]
            if len(ids) in sizes:
                out = self.free.pop(sizes.index(len(ids)))
            else:
                out = np.empty(len(ids))
                self.made.append(out)
        out[:] = 2 * ids
        self.record("kernel", out)
        return out

    def recycle(self, result):
        self.record("recycle", result)
        with self.lock:
            self.free.append(result)


@pytest.mark.parametrize("threads", [False, True])
def test_results_come_back_to_the_kernel_once_reduced(threads, two_blas_threads):
    kernel = RecyclingKernel()
    reduced = []

    def reduce(ids, result):
        # The values are the batch's own, not a later batch's written over them.
        np.testing.assert_array_equal(result, 2 * ids)
        kernel.record("reduce", result)
        reduced.append(ids.copy())

    with simulate_oom(max_items=3):
        run_batched(
            kernel,
            reduce,
            n_items=20,
            backend=Backend("numpy"),
            device_bytes_per_item=ITEM_BYTES,
            max_memory_gb=1.0,
            batch_size=5,
            threads=threads,
        )
    np.testing.assert_array_equal(np.concatenate(reduced), np.arange(20))
    # Each array, split batches' pieces included, is written, reduced, then
    # given back, before it is written again.
    for number in range(len(kernel.made)):
        kinds = [kind for kind, made in kernel.events if made == number]
        assert kinds == ["kernel", "reduce", "recycle"] * (len(kinds) // 3)
    # The arrays given back served again.
    assert len(kernel.made) < len(reduced)


@pytest.mark.parametrize("n_items", [40, 3])
def test_the_last_reduction_runs_on_all_the_librarys_threads(n_items, two_blas_threads):
    # Side by side, batches run on one BLAS thread each, and so does the main
    # thread's reduction meanwhile; the last one, with no batch beside it,
    # gets both threads back (the bootstrap accumulator then splits it).
    threads_in_reduce = []

    def reduce(ids, result):
        threads_in_reduce.append(blas_threads())

    run_batched(
        lambda ids: 2.0 * ids,
        reduce,
        n_items=n_items,
        backend=Backend("numpy"),
        device_bytes_per_item=ITEM_BYTES,
        max_memory_gb=1.0,
        batch_size=5,
        threads=True,
    )
    n_batches = -(-n_items // 5)
    assert threads_in_reduce == [1] * (n_batches - 1) + [2]
    assert blas_threads() == 2


def test_oom_raised_by_the_kernel_itself_is_recovered():
    rec = Recorder(oom_above=5)
    plan = rec.run(64, batch_size=16)
    rec.assert_exact(64)
    # 16 fails, 8 fails, 4, 4, 8 fails, 4, 4; then 12 batches of 4.
    assert rec.kernel_sizes == [16, 8, 4, 4, 8, 4, 4] + [4] * 12
    assert plan.n_kernel_calls == 19
    assert plan.n_oom_recoveries == 3


def test_oom_on_one_item_raises_memory_error_saying_what_to_lower():
    rec = Recorder(oom_above=0)
    with pytest.raises(MemoryError, match=r"chunk of 1 item\(s\).*lower max_memory_gb"):
        rec.run(8, batch_size=4)
    assert rec.reduced == []


@pytest.mark.parametrize("threads", [False, True])
def test_non_oom_kernel_errors_propagate(threads, two_blas_threads):
    error = KeyError("kernel bug")

    def kernel(ids):
        if ids[0] >= 8:
            raise error
        return np.zeros((len(ids), 1))

    with simulate_oom(max_items=2), pytest.raises(KeyError) as excinfo:
        run_batched(
            kernel,
            lambda ids, r: None,
            n_items=40,
            backend=Backend("numpy"),
            device_bytes_per_item=8,
            batch_size=4,
            threads=threads,
        )
    assert excinfo.value is error
    # The side-by-side run gave BLAS its threads back.
    assert blas_threads() == 2


def test_verbose_logs_the_plan_and_the_recovery(caplog):
    rec = Recorder()
    with caplog.at_level(logging.INFO, logger="skbatch"), simulate_oom(max_items=5):
        rec.run(64, batch_size=16, verbose=2, desc="replicates")
    messages = [record.getMessage() for record in caplog.records]
    assert any("64 replicates in batches of 16 (4 batches)" in m for m in messages)
    assert any(
        "out of memory at 16, continuing with batches of 4" in m for m in messages
    )


def test_verbose_zero_is_silent(capsys, caplog):
    with caplog.at_level(logging.INFO, logger="skbatch"):
        Recorder().run(20, batch_size=5)
    assert caplog.records == []
    assert capsys.readouterr().err == ""


# --- planning ----------------------------------------------------------------


def test_plan_on_gpu_uses_the_smaller_of_device_and_host_budgets(
    fake_cuda, monkeypatch
):
    import psutil

    torch = pytest.importorskip("torch")

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (10e9, 80e9))
    monkeypatch.setattr(
        psutil, "virtual_memory", lambda: SimpleNamespace(available=4e9)
    )
    # Device: 10 GB x 0.8 = 8 GB -> 8000 items of 1 MB.
    # Host: 4 GB x 0.5 = 2 GB -> 2000 results of 1 MB.
    plan = plan_batches(
        10**5,
        backend=Backend("torch", "cuda:0"),
        device_bytes_per_item=1e6,
        host_bytes_per_item=1e6,
    )
    assert (plan.batch_size, plan.n_batches) == (2000, 50)
    assert plan.budget_gb == pytest.approx(8.0, rel=1e-15)
    plan = plan_batches(
        10**5, backend=Backend("torch", "cuda:0"), device_bytes_per_item=4e6
    )
    assert plan.batch_size == 2000  # now the device is the limit: 8 GB / 4 MB


@pytest.mark.parametrize("max_batch_size, expected", [(7, 7), (100, 50), (None, 50)])
def test_max_batch_size_caps_the_auto_plan(max_batch_size, expected):
    rec = Recorder()
    plan = rec.run(50, max_memory_gb=1.0, max_batch_size=max_batch_size)
    assert (plan.batch_size, plan.n_batches) == (expected, math.ceil(50 / expected))
    assert rec.kernel_sizes == [
        len(ids) for ids in np.array_split(np.arange(50), range(expected, 50, expected))
    ]
    rec.assert_exact(50)


@pytest.mark.parametrize("max_batch_size", [0, -3, True, float("nan")])
def test_bad_max_batch_size_raises_before_the_kernel_runs(max_batch_size):
    rec = Recorder()
    match = rf"max_batch_size must be None or an int >= 1, got {max_batch_size!r}"
    with pytest.raises(ValueError, match=match):
        rec.run(10, max_batch_size=max_batch_size)
    assert rec.kernel_sizes == []


def test_plan_charges_fixed_bytes_first():
    # 1 GB budget, 0.5 GB of data: 0.5 GB left for items of 1 MB.
    plan = plan_batches(
        10**4,
        backend=Backend("numpy"),
        device_bytes_per_item=1e6,
        fixed_bytes=0.5e9,
        max_memory_gb=1.0,
    )
    assert (plan.batch_size, plan.n_batches, plan.budget_gb) == (500, 20, 1.0)


def test_plan_rejects_data_larger_than_the_budget():
    with pytest.raises(
        ValueError, match=r"data alone needs 2 GB .*budget on numpy is 1 GB"
    ):
        plan_batches(
            10,
            backend=Backend("numpy"),
            device_bytes_per_item=8,
            fixed_bytes=2e9,
            max_memory_gb=1.0,
        )


@pytest.fixture
def host_of_10_gb_capped_at_1(monkeypatch):
    """A measured host budget of 10 GB (20 GB available), batches capped at 1 GB."""
    import psutil

    monkeypatch.setattr(
        psutil, "virtual_memory", lambda: SimpleNamespace(available=20e9)
    )
    monkeypatch.setattr(memory, "BATCHING_CAP_GB", 1.0)


def test_the_batching_cap_sizes_batches_but_does_not_refuse_data(
    host_of_10_gb_capped_at_1,
):
    # 5 GB of data fit the 10 GB budget; batches of 1 MB items fill 1 GB.
    plan = plan_batches(
        10**4, backend=Backend("numpy"), device_bytes_per_item=1e6, fixed_bytes=5e9
    )
    assert (plan.batch_size, plan.n_batches) == (1000, 10)
    # Items of 2 GB fit beside the data (5 GB left) though not in the cap: alone.
    plan = plan_batches(
        10, backend=Backend("numpy"), device_bytes_per_item=2e9, fixed_bytes=5e9
    )
    assert (plan.batch_size, plan.n_batches) == (1, 10)
    with pytest.raises(
        ValueError, match=r"data alone needs 11 GB .*budget on numpy is 10 GB"
    ):
        plan_batches(
            10, backend=Backend("numpy"), device_bytes_per_item=8, fixed_bytes=11e9
        )
    # The budget as measured, not what the data leaves of it.
    with pytest.raises(
        ValueError,
        match=r"One item needs 6 GB beside the 5 GB .* \(11 GB together\) but the "
        r"memory budget is 10 GB \(measured",
    ):
        plan_batches(
            10, backend=Backend("numpy"), device_bytes_per_item=6e9, fixed_bytes=5e9
        )


def test_the_batching_cap_does_not_refuse_data_on_a_large_gpu(fake_cuda, monkeypatch):
    """10 GB of data on a 140 GB device run, in batches of at most 8 GB."""
    import psutil

    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (175e9, 180e9))
    monkeypatch.setattr(
        psutil, "virtual_memory", lambda: SimpleNamespace(available=1000e9)
    )
    plan = plan_batches(
        10**5,
        backend=Backend("torch", "cuda:0"),
        device_bytes_per_item=1e6,
        fixed_bytes=10e9,
    )
    # 8 GB / 1 MB = 8000 items at most: 13 batches, of equal sizes.
    assert plan.n_batches == 13
    assert plan.batch_size == math.ceil(10**5 / 13)


def test_run_parallel_window_fits_an_item_bigger_than_the_cap(
    host_of_10_gb_capped_at_1,
):
    window = run_parallel(
        _draw_task, lambda ids, result: None, n_items=3, host_bytes_per_item=2e9
    )
    assert window == 1


def test_plan_rejects_an_item_larger_than_the_budget():
    with pytest.raises(ValueError, match=r"needs 2 GB .*budget is 1 GB"):
        plan_batches(
            10, backend=Backend("numpy"), device_bytes_per_item=2e9, max_memory_gb=1.0
        )


# --- bad input: nothing runs -------------------------------------------------


@pytest.mark.parametrize("batch_size", ["auto", 4])
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"n_items": 0}, ValueError, "n_items must be >= 1, got 0"),
        ({"n_items": -5}, ValueError, "n_items must be >= 1, got -5"),
        ({"n_items": 2.5}, TypeError, "n_items must be an int, got 2.5"),
        ({"device_bytes_per_item": -1}, ValueError, "device_bytes_per_item .*got -1"),
        (
            {"device_bytes_per_item": np.nan},
            ValueError,
            "device_bytes_per_item .*got nan",
        ),
        # A negative device figure must not hide behind a positive host one.
        (
            {"device_bytes_per_item": -1, "host_bytes_per_item": 100},
            ValueError,
            "device_bytes_per_item .*got -1",
        ),
        ({"host_bytes_per_item": -8.0}, ValueError, "host_bytes_per_item .*got -8.0"),
        ({"fixed_bytes": -1.0}, ValueError, "fixed_bytes .*got -1.0"),
        ({"max_memory_gb": 0}, ValueError, "max_memory_gb .*got 0"),
    ],
)
def test_bad_input_raises_before_the_kernel_runs(batch_size, kwargs, error, match):
    rec = Recorder()
    kwargs = {"n_items": 10, "batch_size": batch_size, **kwargs}
    with pytest.raises(error, match=match):
        rec.run(**kwargs)
    assert rec.kernel_sizes == []
    assert rec.reduced == []


@pytest.mark.parametrize("batch_size", [0, -1, 2.5, True, "8", None])
def test_bad_batch_size_raises_before_the_kernel_runs(batch_size):
    rec = Recorder()
    with pytest.raises(
        ValueError,
        match=rf"batch_size must be 'auto' or an int >= 1, got {batch_size!r}",
    ):
        rec.run(10, batch_size=batch_size)
    assert rec.kernel_sizes == []


# --- run_parallel ------------------------------------------------------------


def _run_parallel_collect(n_items, **kwargs):
    received = []
    window = run_parallel(
        _draw_task,
        lambda ids, result: received.append((ids.copy(), result)),
        n_items=n_items,
        host_bytes_per_item=ITEM_BYTES,
        **kwargs,
    )
    ids = np.concatenate([ids for ids, _ in received])
    np.testing.assert_array_equal(ids, np.arange(n_items))  # each once, in order
    return window, np.concatenate([result for _, result in received])


@pytest.mark.parametrize("n_jobs", [None, 1, 2])
def test_run_parallel_is_independent_of_n_jobs(n_jobs):
    # A budget of 10 results: 37 items go in windows of 10, 10, 10, 7.
    window, result = _run_parallel_collect(
        37, n_jobs=n_jobs, max_memory_gb=10 * ITEM_BYTES / 1e9
    )
    assert window == 10
    np.testing.assert_array_equal(result, 2 * _reference(37))


@pytest.mark.parametrize("backend", ["threading", "loky", "sequential"])
def test_run_parallel_is_independent_of_the_joblib_backend(backend):
    with joblib.parallel_config(backend=backend):
        window, result = _run_parallel_collect(
            29, n_jobs=2, max_memory_gb=8 * ITEM_BYTES / 1e9
        )
    assert window == 8
    np.testing.assert_array_equal(result, 2 * _reference(29))


def _draw_with_data_task(data, ids):
    """A task carrying an array, as the refits of the generic paths do."""
    return _draw(ids) + data[0, 0]


@pytest.fixture
def parallel_calls(monkeypatch):
    """The n_jobs of every Parallel that run_parallel creates."""
    calls = []

    class RecordingParallel(engine.parallel.Parallel):
        def __init__(self, n_jobs=None, **kwargs):
            calls.append(n_jobs)
            super().__init__(n_jobs=n_jobs, **kwargs)

    monkeypatch.setattr(engine.parallel, "Parallel", RecordingParallel)
    return calls


@pytest.mark.parametrize(
    "n_jobs, config, available, expected",
    [
        # The data is 1 MB a worker; the host budget is half the available RAM.
        (4, {}, 5e6, 2),
        (4, {}, 100e6, 4),
        (-1, {}, 2.5e6, 1),
        # None: joblib.parallel_config's n_jobs.
        (None, {"n_jobs": 4}, 6.5e6, 3),
        (None, {}, 1e3, None),
    ],
)
def test_run_parallel_caps_local_workers_to_fit_their_data(
    parallel_calls, monkeypatch, capsys, n_jobs, config, available, expected
):
    import psutil

    monkeypatch.setattr(
        psutil, "virtual_memory", lambda: SimpleNamespace(available=available)
    )
    data = np.ones((1000, 125))  # 1 MB
    received = []
    with joblib.parallel_config(backend="threading", **config):
        run_parallel(
            functools.partial(_draw_with_data_task, data),
            lambda ids, result: received.append(result),
            n_items=40,
            host_bytes_per_item=ITEM_BYTES,
            n_jobs=n_jobs,
            max_memory_gb=None,
            verbose=1,
        )
    assert parallel_calls == [expected if expected is not None else n_jobs]
    np.testing.assert_array_equal(np.concatenate(received), _reference(40) + 1)
    message = capsys.readouterr().out
    requested = joblib.effective_n_jobs(n_jobs) if not config else 4
    if expected is not None and expected < requested:
        noun = "worker" if expected == 1 else "workers"
        assert f"{expected} {noun} instead of {requested}" in message
        assert "max_memory_gb" in message
    else:
        assert "instead of" not in message


def test_run_parallel_says_nothing_about_workers_when_quiet(parallel_calls, capsys):
    data = np.ones((1000, 125))
    with joblib.parallel_config(backend="threading"):
        run_parallel(
            functools.partial(_draw_with_data_task, data),
            lambda ids, result: None,
            n_items=8,
            host_bytes_per_item=ITEM_BYTES,
            n_jobs=4,
            max_memory_gb=2.5e-3,
        )
    assert parallel_calls == [2]
    assert capsys.readouterr().err == ""


def test_run_parallel_window_is_capped():
    window, result = _run_parallel_collect(5000, n_jobs=1, max_memory_gb=100.0)
    assert window == 4096
    np.testing.assert_array_equal(result, 2 * _reference(5000))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"n_items": 0}, ValueError, "n_items must be >= 1, got 0"),
        ({"host_bytes_per_item": -1.0}, ValueError, "bytes_per_item .*got -1.0"),
        ({"max_memory_gb": -1.0}, ValueError, "max_memory_gb .*got -1.0"),
    ],
)
def test_run_parallel_bad_input_raises_before_any_task(kwargs, error, match):
    calls = []

    def task(ids):
        calls.append(ids)
        return ids

    kwargs = {"n_items": 10, "host_bytes_per_item": 8.0, **kwargs}
    with pytest.raises(error, match=match):
        run_parallel(task, lambda ids, result: calls.append(ids), **kwargs)
    assert calls == []


def test_run_parallel_holds_one_window_of_results():
    width = 10_000
    window = 50

    def task(ids):
        return _draw(ids, width=width)

    def peak(n_items):
        total = np.zeros(width)

        def reduce(ids, result):
            total.__iadd__(result.sum(axis=0))

        tracemalloc.start()
        try:
            run_parallel(
                task,
                reduce,
                n_items=n_items,
                host_bytes_per_item=width * 8,
                n_jobs=1,
                max_memory_gb=window * width * 8 / 1e9,
            )
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    one_window = peak(window)
    # A window is 4 MB of results; holding two windows would double the peak.
    assert peak(6 * window) <= 1.3 * one_window


# --- memory does not grow with the number of replicates ----------------------


def test_engine_with_streaming_bootstrap_peak_does_not_grow_with_b():
    from skbatch.streaming import BootstrapAccumulator

    width = 10_000
    # The same budget for both: 16 MB, 200 replicates of 80 kB per batch.
    max_memory_gb = 200 * width * 8 / 1e9

    def kernel(ids):
        return _draw(ids, width=width)

    def run(n_total):
        acc = BootstrapAccumulator((width,), n_total, 0.95)
        plan = run_batched(
            kernel,
            lambda ids, samples: acc.update(samples, ids),
            n_items=n_total,
            backend=Backend("numpy"),
            device_bytes_per_item=width * 8,
            max_memory_gb=max_memory_gb,
        )
        assert plan.batch_size == 200
        return acc

    def peak(n_total):
        tracemalloc.start()
        try:
            run(n_total)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(200), peak(2000)
    # Storing every replicate would take 160 MB at B=2000, 10x more than at
    # B=200; the growth is only the longer tails the accumulator announces.
    assert large < 0.25 * 2000 * width * 8
    needed = BootstrapAccumulator.nbytes_needed
    tail_growth = needed(width, 2000) - needed(width, 200)
    assert large - small <= 1.05 * tail_growth, (small, large, tail_growth)

    # The streamed interval is the exact percentile of all replicates.
    acc = run(200)
    samples = _draw(np.arange(200), width=width)
    lower, upper = acc.interval()
    np.testing.assert_allclose(lower, np.percentile(samples, 2.5, axis=0), rtol=1e-12)
    np.testing.assert_allclose(upper, np.percentile(samples, 97.5, axis=0), rtol=1e-12)


# --- batches side by side on CPU threads --------------------------------------


@pytest.fixture
def two_blas_threads():
    """BLAS on two threads whatever the host, so threads=True runs two workers."""
    with threadpool_limits(2, user_api="blas"):
        assert blas_threads() == 2
        yield


class ThreadedRecorder(Recorder):
    """A kernel that waits until a second batch is in flight beside it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.barrier = threading.Barrier(2, timeout=10)
        self.lock = threading.Lock()
        self.n_calls = 0
        self.threads = set()
        self.library_threads_in_kernel = set()

    def kernel(self, ids):
        with self.lock:
            call = self.n_calls
            self.n_calls += 1
        self.threads.add(threading.get_ident())
        library = _backends.get(self.backend.library)
        self.library_threads_in_kernel.add(library.threads())
        if call < 2:
            # The first two batches meet here: a sequential engine would
            # leave the first waiting, and the barrier would break.
            self.barrier.wait()
        return super().kernel(ids)


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_threads_run_two_batches_at_once_with_the_same_results(library, request):
    request.getfixturevalue(f"two_{'blas' if library == 'numpy' else library}_threads")
    rec = ThreadedRecorder(backend=Backend(library))
    plan = rec.run(40, batch_size=5, threads=True)
    assert not rec.barrier.broken
    assert len(rec.threads) == 2
    # Reduced in item order, each item computed once, values of the naive loop.
    np.testing.assert_array_equal(rec.result(), 2 * _reference(40))
    np.testing.assert_array_equal(np.concatenate(rec.reduced_ids), np.arange(40))
    np.testing.assert_array_equal(np.sort(np.concatenate(rec.computed)), np.arange(40))
    assert plan.n_kernel_calls == 8
    # One library thread per worker while they run; two again afterwards.
    assert rec.library_threads_in_kernel == {1}
    assert _backends.get(library).threads() == 2


@pytest.fixture
def two_torch_threads():
    """torch on two CPU threads whatever the host: its batches go side by side."""
    torch = pytest.importorskip("torch")
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        yield torch
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("cv", [None, 3])
def test_torch_fit_side_by_side_equals_one_batch_at_a_time(two_torch_threads, cv):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((60, 8))
    Y = X @ rng.standard_normal((8, 40)) + rng.standard_normal((60, 40))
    params = dict(
        alphas=np.logspace(-4, 6, 11), cv=cv, device="torch", n_targets_batch=7
    )
    side_by_side = BatchedRidge(**params).fit(X, Y)
    with _backends.get("torch").one_thread():
        one_at_a_time = BatchedRidge(**params).fit(X, Y)
    assert side_by_side.fit_report_.stages[0].n_workers == 2
    assert one_at_a_time.fit_report_.stages[0].n_workers == 1
    np.testing.assert_allclose(
        side_by_side.coef_, one_at_a_time.coef_, rtol=1e-12, atol=1e-12
    )
    np.testing.assert_array_equal(side_by_side.alpha_, one_at_a_time.alpha_)


class ReducingRecorder(Recorder):
    """A reducer that waits, on its first batch, for the third batch's kernel."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.third_started = threading.Event()
        self.third_before_first_reduced = None

    def kernel(self, ids):
        if ids[0] == 10:
            self.third_started.set()
        return super().kernel(ids)

    def reduce(self, ids, result):
        if ids[0] == 0:
            self.third_before_first_reduced = self.third_started.wait(timeout=5)
        super().reduce(ids, result)


def test_threads_compute_while_the_main_thread_reduces(two_blas_threads):
    """A third batch computes while the first is reduced, in item order still.

    With one batch per thread in flight, the third batch would only be sent
    once the first was reduced, and the reducer's wait would time out.
    """
    rec = ReducingRecorder()
    with collect_stages() as stages:
        rec.run(25, batch_size=5, threads=True)
    assert rec.third_before_first_reduced
    np.testing.assert_array_equal(np.concatenate(rec.reduced_ids), np.arange(25))
    np.testing.assert_array_equal(rec.result(), 2 * _reference(25))
    (stage,) = stages
    # Two batches computing and the result of a third held for the reducer.
    assert stage.planned_peak_bytes == 2 * 5 * ITEM_BYTES


def test_held_results_count_in_the_plan():
    """Host bytes of a result held for reduction shrink the batches that fit."""
    budget = dict(
        backend=Backend("numpy"),
        device_bytes_per_item=3e6,
        host_bytes_per_item=1e6,
        max_memory_gb=0.8,
        n_workers=2,
    )
    alone = plan_batches(1000, **budget)
    held = plan_batches(1000, n_held=1, **budget)
    # 0.8 GB over two workers: 100 items of 4 MB each, or 88 of 4.5 MB.
    assert alone.batch_size == 100
    assert held.batch_size == math.ceil(1000 / math.ceil(1000 / (0.4e9 // 4.5e6)))
    assert held.batch_size * (2 * 4e6 + 1e6) <= 0.8e9


def test_auto_batches_are_of_equal_sizes():
    plan = plan_batches(
        100, backend=Backend("numpy"), device_bytes_per_item=1.0, max_batch_size=30
    )
    # At most 30 per batch: 4 batches of 25, not three of 30 and one of 10.
    assert (plan.batch_size, plan.n_batches) == (25, 4)


def test_threads_split_a_small_auto_plan_among_workers(two_blas_threads):
    rec = ThreadedRecorder()
    plan = rec.run(9, max_memory_gb=1.0, threads=True)
    assert plan.batch_size == 5 and plan.n_batches == 2
    assert len(rec.threads) == 2
    rec_sequential = Recorder()
    assert rec_sequential.run(9, max_memory_gb=1.0).n_batches == 1


def test_threads_see_simulated_oom_and_recover(two_blas_threads):
    rec = Recorder()
    with simulate_oom(max_items=3):
        plan = rec.run(40, batch_size=8, threads=True)
    np.testing.assert_array_equal(rec.result(), 2 * _reference(40))
    np.testing.assert_array_equal(np.concatenate(rec.reduced_ids), np.arange(40))
    assert plan.n_oom_recoveries > 0
    assert max(rec.kernel_sizes) <= 3


def test_threads_are_for_numpy_and_torch_on_the_cpu(two_blas_threads):
    assert cpu_workers(Backend("numpy")) == 2
    assert cpu_workers(Backend("jax", "cpu")) == 1
    with threadpool_limits(1, user_api="blas"):
        assert cpu_workers(Backend("numpy")) == 1


def test_torch_batches_go_side_by_side_on_the_cpu_only(two_torch_threads):
    assert cpu_workers(Backend("torch", "cpu")) == 2
    with _backends.get("torch").one_thread():
        assert cpu_workers(Backend("torch", "cpu")) == 1
    # A GPU is one device, whatever the CPU threads; the backend is only
    # named, not used.
    assert cpu_workers(Backend("torch", "cuda:0")) == 1
    assert cpu_workers(Backend("torch", "mps")) == 1


def test_map_threads_keeps_order_and_context(two_blas_threads):
    barrier = threading.Barrier(2, timeout=10)

    def task(item):
        if item < 2:
            barrier.wait()  # the first two tasks run at once
        return item, _SIMULATED_OOM_LIMIT.get(), blas_threads()

    with simulate_oom(max_items=7):
        results = map_threads(task, list(range(6)), Backend("numpy"))
    assert results == [(item, 7, 1) for item in range(6)]
    assert blas_threads() == 2


def test_map_threads_runs_torch_tasks_on_one_torch_thread_each():
    torch = pytest.importorskip("torch")
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    barrier = threading.Barrier(2, timeout=10)

    def task(item):
        if item < 2:
            barrier.wait()
        return item, torch.get_num_threads()

    try:
        results = map_threads(task, list(range(4)), Backend("torch", "cpu"))
        assert results == [(item, 1) for item in range(4)]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(previous)


def test_only_the_main_thread_runs_batches_side_by_side(two_blas_threads):
    """Another thread's limits could race with ours: it runs batches in turn."""
    found = {}

    def other_thread():
        found["workers"] = cpu_workers(Backend("numpy"))
        rec = Recorder()
        found["plan"] = rec.run(9, max_memory_gb=1.0, threads=True)
        found["result"] = rec.result()

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join(timeout=30)
    assert found["workers"] == 1
    assert found["plan"].n_batches == 1
    np.testing.assert_array_equal(found["result"], 2 * _reference(9))
    assert blas_threads() == 2


# --- thread limits under concurrent fits ----------------------------------------


def _thread_counts():
    return [(pool["filepath"], pool["num_threads"]) for pool in threadpool_info()]


# The grids are small on purpose, their edge in the way of every fit.
@pytest.mark.filterwarnings("ignore::skbatch.AlphaEdgeWarning")
@pytest.mark.slow
def test_concurrent_fits_restore_the_thread_counts():
    """Overlapping limits from several threads leave the original counts."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((500, 100))
    Y = X @ rng.standard_normal((100, 3)) + rng.standard_normal((500, 3))
    reference = BatchedRidge().fit(X, Y).coef_
    original = _thread_counts()
    search = GridSearchCV(BatchedRidge(), {"alphas": [[0.1, 1.0], [10.0]]}, n_jobs=4)
    serial_search = clone(search).set_params(n_jobs=None).fit(X, Y)
    for _ in range(20):
        with ThreadPoolExecutor(4) as pool:
            fits = list(pool.map(lambda _: BatchedRidge().fit(X, Y), range(4)))
        assert _thread_counts() == original
        with joblib.parallel_backend("threading"):
            search.fit(X, Y)
        assert _thread_counts() == original
        # Equal up to rounding: a fit's BLAS may run on one thread or two.
        for fit in fits:
            np.testing.assert_allclose(fit.coef_, reference, rtol=1e-10)
        np.testing.assert_allclose(
            search.best_estimator_.coef_,
            serial_search.best_estimator_.coef_,
            rtol=1e-10,
        )


def test_tasks_run_in_this_process_resolve_dask_futures():
    # A cluster that shrank to one worker while a window was dispatched: joblib
    # then runs the tasks here, with the futures of the scattered data.
    distributed = pytest.importorskip("distributed")
    with distributed.Client(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as client:
        data, offset = client.scatter([np.arange(5.0), 10.0])
        rows = engine.cluster._resolved(
            lambda data, ids, offset: data[ids] + offset,
            data,
            np.array([1, 3]),
            offset=offset,
        )
    np.testing.assert_array_equal(rows, [11.0, 13.0])


# --- stages recorded for fit_report_ -----------------------------------------


def test_run_batched_records_its_stage_in_every_open_collector():
    rec = Recorder()
    with collect_stages() as outer:
        with collect_stages() as inner, simulate_oom(max_items=5):
            rec.run(64, batch_size=16, desc="replicates", fixed_bytes=100.0)
        Recorder().run(8, batch_size=8)
    (stage,) = inner
    assert outer == [stage, outer[1]]
    # 16 -> 8 -> 4 on the first batch (3 splits), then batches of 4: as many
    # as the kernel saw, and the 3 that ran out of memory.
    assert (stage.name, stage.path, stage.runs_on) == ("replicates", "batched", "numpy")
    assert (stage.n_items, stage.batch_size, stage.n_batches) == (64, 16, 4)
    assert len(rec.kernel_sizes) == 16
    assert stage.n_batches_run == 16 + 3
    assert stage.n_oom_splits == 3
    assert (stage.fixed_bytes, stage.device_bytes_per_item) == (100.0, ITEM_BYTES)
    assert stage.planned_peak_bytes == 100.0 + 16 * ITEM_BYTES
    assert outer[1].n_items == 8


def test_run_batched_side_by_side_records_one_stage(two_blas_threads):
    rec = Recorder()
    with collect_stages() as stages:
        rec.run(40, batch_size=10, threads=True)
    (stage,) = stages
    assert (stage.n_workers, stage.n_batches, stage.n_batches_run) == (2, 4, 4)
    assert stage.planned_peak_bytes == 2 * 10 * ITEM_BYTES


def test_engine_loops_record_nothing_outside_a_collector():
    Recorder().run(10, batch_size=3)
    with collect_stages() as stages:
        pass
    assert stages == []


def _task_running_the_engine(ids):
    """A task whose work goes through the engine, as a refit of BatchedRidge."""
    out = np.empty((len(ids), WIDTH))

    def reduce(rows, result):
        out[rows] = result

    run_batched(
        lambda rows: _draw(ids[rows]) * 2.0,
        reduce,
        n_items=len(ids),
        backend=Backend("numpy"),
        device_bytes_per_item=ITEM_BYTES,
        batch_size=2,
    )
    return out


@pytest.mark.parametrize("backend, n_jobs", [("sequential", 1), ("threading", 2)])
def test_run_parallel_records_one_stage_whatever_its_tasks_run(backend, n_jobs):
    received = []
    with collect_stages() as stages, joblib.parallel_config(backend=backend):
        window = run_parallel(
            _task_running_the_engine,
            lambda ids, result: received.append(result),
            n_items=37,
            host_bytes_per_item=ITEM_BYTES,
            n_jobs=n_jobs,
            max_memory_gb=10 * ITEM_BYTES / 1e9,
        )
    np.testing.assert_array_equal(np.concatenate(received), 2 * _reference(37))
    (stage,) = stages
    assert (stage.name, stage.path, stage.runs_on) == ("items", "parallel", backend)
    assert (stage.n_items, stage.batch_size, stage.n_workers) == (37, window, n_jobs)
    assert stage.n_batches == stage.n_batches_run == math.ceil(37 / window)
    assert stage.planned_peak_bytes == window * ITEM_BYTES
    assert stage.n_oom_splits == 0
