import math
import os
import subprocess
import sys
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from skbatch import (
    Backend,
    auto_batch_size,
    auto_n_jobs,
    compute_batch_size,
    get_available_memory_gb,
    memory_budget,
)

torch = pytest.importorskip("torch")


@pytest.fixture
def host_ram(monkeypatch):
    """Set the available host RAM, in bytes, that psutil reports."""

    def set_available(available):
        monkeypatch.setattr(
            psutil, "virtual_memory", lambda: SimpleNamespace(available=available)
        )

    return set_available


@pytest.fixture
def unmeasurable(monkeypatch):
    """Any attempt to measure memory fails the test."""

    def fail(*args, **kwargs):
        raise AssertionError("memory was measured")

    monkeypatch.setattr(psutil, "virtual_memory", fail)
    monkeypatch.setattr(torch.cuda, "mem_get_info", fail)


class _FakeJaxDevice:
    def __init__(self, stats):
        self.stats = stats

    def memory_stats(self):
        if self.stats == "raise":
            raise RuntimeError("memory_stats is not supported")
        return self.stats


# --- memory_budget -----------------------------------------------------------


@pytest.mark.parametrize("for_batching", [False, True])
@pytest.mark.parametrize(
    "backend",
    [None, Backend("numpy"), Backend("torch", "cuda:0"), Backend("jax", "gpu")],
)
def test_explicit_budget_wins_uncapped(unmeasurable, backend, for_batching):
    assert memory_budget(backend, 100.0, for_batching=for_batching) == 100.0
    assert memory_budget(backend, max_memory_gb=0.25, for_batching=for_batching) == 0.25


@pytest.mark.parametrize(
    "value", [0, 0.0, -1.0, -5, float("nan"), float("inf"), -math.inf]
)
def test_explicit_budget_must_be_finite_and_positive(value):
    with pytest.raises(ValueError, match=rf"max_memory_gb must be .*got {value!r}"):
        memory_budget(max_memory_gb=value)


@pytest.mark.parametrize("value", ["2", [1.0]])
def test_explicit_budget_must_be_a_number(value):
    with pytest.raises(
        TypeError, match=rf"max_memory_gb must be .*{type(value).__name__}"
    ):
        memory_budget(max_memory_gb=value)


def test_get_available_memory_gb_is_psutil_available_in_decimal_gb(host_ram):
    host_ram(12_345_678_901)
    assert get_available_memory_gb() == 12.345678901


@pytest.mark.parametrize(
    "backend",
    [
        None,
        Backend("numpy"),
        Backend("torch", "cpu"),
        Backend("jax", "cpu"),
        Backend("torch", "mps"),
    ],
)
def test_measured_host_budget_is_half_the_available_ram(host_ram, backend):
    host_ram(6e9)
    assert memory_budget(backend) == pytest.approx(3.0, rel=1e-15)
    host_ram(64e9)
    assert memory_budget(backend) == pytest.approx(32.0, rel=1e-15)


@pytest.mark.parametrize("available, expected", [(64e9, 8.0), (16e9, 8.0), (10e9, 5.0)])
def test_measured_budget_for_batching_is_capped_at_8_gb(host_ram, available, expected):
    host_ram(available)
    assert memory_budget(for_batching=True) == pytest.approx(expected, rel=1e-15)
    assert memory_budget(for_batching=False) == pytest.approx(
        available / 2e9, rel=1e-15
    )


@pytest.mark.parametrize(
    "free, for_batching, expected",
    [(5e9, False, 4.0), (5e9, True, 4.0), (40e9, False, 32.0), (40e9, True, 8.0)],
)
def test_measured_cuda_budget_is_80_percent_of_free(
    fake_cuda, monkeypatch, free, for_batching, expected
):
    queried = []

    def mem_get_info(device=None):
        queried.append(device)
        return free, 80e9

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    budget = memory_budget(Backend("torch", "cuda:1"), for_batching=for_batching)
    assert budget == pytest.approx(expected, rel=1e-15)
    assert queried == [torch.device("cuda:1")]


def test_measured_jax_gpu_budget_is_80_percent_of_limit_minus_in_use(monkeypatch):
    stats = {"bytes_limit": 10e9, "bytes_in_use": 4e9}
    monkeypatch.setattr(Backend, "native_device", lambda self: _FakeJaxDevice(stats))
    assert memory_budget(Backend("jax", "gpu")) == pytest.approx(4.8, rel=1e-15)
    stats["bytes_limit"] = 100e9
    assert memory_budget(Backend("jax", "gpu"), for_batching=True) == 8.0


@pytest.mark.parametrize("stats", [None, {}, {"bytes_in_use": 1e9}, "raise"])
def test_unmeasurable_device_assumes_4_gb_with_a_warning(monkeypatch, stats):
    monkeypatch.setattr(Backend, "native_device", lambda self: _FakeJaxDevice(stats))
    with pytest.warns(
        UserWarning, match="Cannot measure free memory on jax-gpu.*4.0 GB"
    ):
        budget = memory_budget(Backend("jax", "gpu"))
    assert budget == 4.0


def test_budget_of_an_absent_device_raises(no_gpu):
    with pytest.raises(RuntimeError, match="'cuda:0'.*no CUDA device"):
        memory_budget(Backend("torch", "cuda:0"))


def test_get_available_memory_gb_is_at_least_half_a_gb(host_ram):
    host_ram(0.2e9)
    assert get_available_memory_gb() == 0.5


def test_get_available_memory_gb_falls_back_to_4_gb_when_the_query_fails(
    monkeypatch,
):
    def fail():
        raise OSError("no /proc/meminfo")

    monkeypatch.setattr(psutil, "virtual_memory", fail)
    with pytest.warns(UserWarning, match=r"no /proc/meminfo.*assuming 4.0 GB"):
        assert get_available_memory_gb() == 4.0
    with pytest.warns(UserWarning, match=r"host memory.*assuming 4.0 GB"):
        assert memory_budget() == 4.0


@pytest.fixture
def jax_on_gpu(monkeypatch, host_ram):
    """jax imported and computing on a GPU with 10 GB limit, 3 GB in use."""
    jax = pytest.importorskip("jax")
    host_ram(100e9)
    device = _FakeJaxDevice({"bytes_limit": 10e9, "bytes_in_use": 3e9})
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax, "devices", lambda backend=None: [device])
    return device


def test_get_available_memory_gb_reads_the_jax_gpu_statistics(jax_on_gpu):
    assert get_available_memory_gb() == pytest.approx(7.0, rel=1e-15)
    # The host budget still comes from the host.
    assert memory_budget() == pytest.approx(50.0, rel=1e-15)
    # compute_batch_size, for jax.lax.map callers, plans from the GPU.
    expected = int(_rule(7.0, None) * 1e9 // 1e6)
    assert compute_batch_size(n_items=10**6, bytes_per_item=1e6) == expected


@pytest.mark.parametrize("stats", [None, {}, {"bytes_in_use": 1e9}, "raise"])
def test_get_available_memory_gb_falls_back_when_jax_has_no_statistics(
    jax_on_gpu, monkeypatch, stats
):
    def memory_stats():
        if stats == "raise":
            raise RuntimeError("memory_stats is not supported")
        return stats

    monkeypatch.setattr(jax_on_gpu, "memory_stats", memory_stats)
    with pytest.warns(UserWarning, match=r"Cannot measure .*assuming 4.0 GB"):
        assert get_available_memory_gb() == 4.0


@pytest.mark.slow
def test_get_available_memory_gb_does_not_import_jax():
    code = (
        "import sys, skbatch; skbatch.get_available_memory_gb(); "
        "assert 'jax' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_failing_cuda_query_falls_back_to_the_host_budget(
    fake_cuda, monkeypatch, host_ram
):
    host_ram(6e9)

    def mem_get_info(device=None):
        raise RuntimeError("CUDA driver error: unknown error")

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    with pytest.warns(UserWarning, match=r"torch-cuda.*unknown error.*host budget"):
        assert memory_budget(Backend("torch", "cuda:0")) == pytest.approx(3.0)


# --- auto_batch_size ---------------------------------------------------------


@given(
    n_items=st.integers(1, 10**7),
    bytes_per_item=st.one_of(
        st.integers(0, 10**10),
        st.floats(0, 1e10, allow_nan=False, allow_infinity=False),
    ),
    budget_gb=st.floats(1e-6, 1e3),
    overhead=st.floats(1.0, 4.0),
)
@example(n_items=10, bytes_per_item=1e-300, budget_gb=1.0, overhead=1.0)  # no overflow
@example(n_items=10, bytes_per_item=5e-324, budget_gb=1e3, overhead=1.0)
def test_auto_batch_size_is_the_largest_batch_that_fits(
    n_items, bytes_per_item, budget_gb, overhead
):
    budget = Fraction(budget_gb * 1e9)
    need = Fraction(bytes_per_item * overhead)
    if need > budget:
        with pytest.raises(ValueError, match="One item needs"):
            auto_batch_size(
                n_items, bytes_per_item, budget_gb=budget_gb, overhead=overhead
            )
        return
    batch, n_batches = auto_batch_size(
        n_items, bytes_per_item, budget_gb=budget_gb, overhead=overhead
    )
    assert isinstance(batch, int) and isinstance(n_batches, int)
    assert 1 <= batch <= n_items
    assert batch * need <= budget
    assert batch == n_items or (batch + 1) * need > budget
    assert n_batches == -(-n_items // batch)
    assert (n_batches - 1) * batch < n_items <= n_batches * batch


def test_auto_batch_size_examples():
    # 0.1 GB / 1 MB = 100 items per batch.
    assert auto_batch_size(1000, 1e6, budget_gb=0.1) == (100, 10)
    assert auto_batch_size(1001, 1e6, budget_gb=0.1) == (100, 11)
    assert auto_batch_size(50, 1e6, budget_gb=0.1) == (50, 1)
    # With overhead 2 an item takes 2 MB.
    assert auto_batch_size(1000, 1e6, budget_gb=0.1, overhead=2.0) == (50, 20)
    # Items that cost nothing all go in one batch.
    assert auto_batch_size(7, 0, budget_gb=1e-9) == (7, 1)


@pytest.mark.parametrize(
    "bytes_per_item, overhead, budget_gb, need, budget",
    [(2e9, 1.0, 1.0, "2 GB", "1 GB"), (1e9, 1.5, 1.2, "1.5 GB", "1.2 GB")],
)
def test_auto_batch_size_item_too_big_names_both_figures(
    bytes_per_item, overhead, budget_gb, need, budget
):
    with pytest.raises(ValueError, match=rf"needs {need} .*budget is {budget}"):
        auto_batch_size(10, bytes_per_item, budget_gb=budget_gb, overhead=overhead)


@pytest.mark.parametrize("n_items", [0, -3])
def test_auto_batch_size_rejects_no_items(n_items):
    with pytest.raises(ValueError, match=rf"n_items must be >= 1, got {n_items}"):
        auto_batch_size(n_items, 8.0, budget_gb=1.0)


@pytest.mark.parametrize("n_items", [2.5, "10", None])
def test_auto_batch_size_rejects_non_integer_items(n_items):
    with pytest.raises(TypeError, match=rf"n_items must be an int, got {n_items!r}"):
        auto_batch_size(n_items, 8.0, budget_gb=1.0)


@pytest.mark.parametrize("bytes_per_item", [-1, -0.5, float("nan"), float("inf")])
def test_auto_batch_size_rejects_bad_bytes_per_item(bytes_per_item):
    with pytest.raises(
        ValueError, match=rf"bytes_per_item must be .*got {bytes_per_item!r}"
    ):
        auto_batch_size(10, bytes_per_item, budget_gb=1.0)


@pytest.mark.parametrize("budget_gb", [0, -1.0, float("nan"), float("inf")])
def test_auto_batch_size_rejects_bad_budget(budget_gb):
    with pytest.raises(ValueError, match=rf"budget_gb must be .*got {budget_gb!r}"):
        auto_batch_size(10, 8.0, budget_gb=budget_gb)


@pytest.mark.parametrize("overhead", [0.5, 0, float("nan"), float("inf")])
def test_auto_batch_size_rejects_bad_overhead(overhead):
    with pytest.raises(ValueError, match=rf"overhead must be .*got {overhead!r}"):
        auto_batch_size(10, 8.0, budget_gb=1.0, overhead=overhead)


# --- compute_batch_size ------------------------------------------------------


@pytest.fixture
def available_gb(host_ram):
    def set_available(gb):
        host_ram(gb * 1e9)

    return set_available


def _rule(available_gb, max_mem):
    """compute_batch_size: floor the available memory, then fraction, margin."""
    fraction = 0.5 if max_mem is None else min(max(max_mem, 0.01), 1.0)
    return max(available_gb, 0.5) * fraction * (1 - 0.3)


@pytest.mark.parametrize(
    "available, max_mem, expected",
    [
        # 10 GB x 0.5 x (1 - 0.3) = 3.5 GB -> 3500 items of 1 MB.
        (10.0, None, 3500),
        (10.0, 0.5, 3500),
        (10.0, 0.2, 1400),
        (10.0, 1.0, 7000),
        # A fraction above 1 is clamped to 1.
        (10.0, 5.0, 7000),
        # A fraction below 0.01 is clamped to 0.01: 10 x 0.01 x 0.7 = 0.07 GB.
        (10.0, 0.001, 70),
        (10.0, 0.0, 70),
        (10.0, -1.0, 70),
        (100.0, 0.0, 700),
        # 2 GB x 0.1 x 0.7 = 0.14 GB: max_mem is honoured, not floored.
        (2.0, 0.1, 140),
        # A busy host plans with 0.5 GB available: 0.5 x 0.5 x 0.7 = 0.175 GB.
        (0.2, None, 175),
        (0.1, None, 175),
        (0.0, None, 175),
    ],
)
def test_compute_batch_size_budget(available_gb, available, max_mem, expected):
    available_gb(available)
    batch = compute_batch_size(n_items=10**6, bytes_per_item=1e6, max_mem=max_mem)
    assert batch == expected == int(_rule(available, max_mem) * 1e9 // 1e6)
    assert isinstance(batch, int)


@pytest.mark.parametrize(
    "n_items, bytes_per_item, min_batch, max_batch, expected",
    [
        (100, 1e3, 64, 8192, 100),  # fits easily: all items
        (10**6, 1e3, 64, 8192, 8192),  # capped at max_batch
        (10**6, 1e12, 64, 8192, 64),  # too big: min_batch
        (10, 1e12, 64, 8192, 10),  # min_batch capped at n_items
        (10**6, 1e12, 16, 32, 16),
        (10**6, 1e3, 16, 32, 32),
        (20, 1e3, 16, 32, 20),
        (10**6, 1e-300, 64, 8192, 8192),  # a negligible item does not overflow
    ],
)
def test_compute_batch_size_clamps(
    available_gb, n_items, bytes_per_item, min_batch, max_batch, expected
):
    available_gb(10.0)
    batch = compute_batch_size(
        n_items=n_items,
        bytes_per_item=bytes_per_item,
        min_batch=min_batch,
        max_batch=max_batch,
    )
    assert batch == expected


@given(
    available=st.floats(0, 1e4),
    n_items=st.integers(1, 10**6),
    bytes_per_item=st.floats(1e-3, 1e12),
    max_mem=st.one_of(st.none(), st.floats(-1, 2)),
    min_batch=st.integers(1, 1000),
    extra=st.integers(0, 10000),
)
def test_compute_batch_size_stays_within_bounds(
    available, n_items, bytes_per_item, max_mem, min_batch, extra
):
    max_batch = min_batch + extra
    with pytest.MonkeyPatch.context() as m:
        m.setattr(
            psutil,
            "virtual_memory",
            lambda: SimpleNamespace(available=available * 1e9),
        )
        batch = compute_batch_size(
            n_items=n_items,
            bytes_per_item=bytes_per_item,
            max_mem=max_mem,
            min_batch=min_batch,
            max_batch=max_batch,
        )
    assert min(min_batch, n_items) <= batch <= min(max_batch, n_items)
    usable = _rule(available, max_mem) * 1e9
    if min(min_batch, n_items) < batch < min(max_batch, n_items):
        # Not clamped: the largest number of items that fits the usable memory.
        assert batch * bytes_per_item <= usable * (1 + 1e-12)
        assert (batch + 1) * bytes_per_item > usable * (1 - 1e-12)


@pytest.mark.parametrize("bytes_per_item", [0, -1.0, float("nan"), float("inf")])
def test_compute_batch_size_rejects_bad_bytes_per_item(bytes_per_item):
    with pytest.raises(
        ValueError, match=rf"bytes_per_item must be .*got {bytes_per_item!r}"
    ):
        compute_batch_size(n_items=10, bytes_per_item=bytes_per_item)


@pytest.mark.parametrize("min_batch, max_batch", [(0, 10), (-1, 10), (20, 10)])
def test_compute_batch_size_rejects_bad_bounds(min_batch, max_batch):
    with pytest.raises(
        ValueError, match=rf"min_batch={min_batch!r}, max_batch={max_batch!r}"
    ):
        compute_batch_size(
            n_items=10, bytes_per_item=8.0, min_batch=min_batch, max_batch=max_batch
        )


def test_compute_batch_size_rejects_no_items():
    with pytest.raises(ValueError, match="n_items must be >= 1, got 0"):
        compute_batch_size(n_items=0, bytes_per_item=8.0)


# --- auto_n_jobs -------------------------------------------------------------


@pytest.fixture
def six_cpus(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 6)


@pytest.mark.parametrize(
    "n_jobs, expected", [(None, 1), (1, 1), (3, 3), (-1, 6), (-2, 5), (-6, 1), (-10, 1)]
)
def test_auto_n_jobs_follows_joblib_convention(six_cpus, n_jobs, expected):
    assert auto_n_jobs(100, n_jobs=n_jobs) == expected


@pytest.mark.parametrize(
    "n_tasks, n_jobs, expected",
    [(2, -1, 2), (2, 8, 2), (1, 4, 1), (0, 4, 1), (None, 4, 4)],
)
def test_auto_n_jobs_never_more_workers_than_tasks(six_cpus, n_tasks, n_jobs, expected):
    assert auto_n_jobs(n_tasks, n_jobs=n_jobs) == expected


@pytest.mark.parametrize(
    "max_memory_gb, bytes_per_worker, expected",
    [
        (6.0, 3e9, 2),  # two workers of 3 GB fit in 6 GB
        (6.0, 2.9e9, 2),
        (6.0, 2e9, 3),
        (6.0, 1e9, 6),  # memory allows 6, the host has 6 cores
        (6.0, 0.5e9, 6),  # memory allows 12, still 6 cores
        (6.0, 7e9, 1),  # not even one fits: still one worker
    ],
)
def test_auto_n_jobs_memory_limited(
    six_cpus, max_memory_gb, bytes_per_worker, expected
):
    assert (
        auto_n_jobs(100, bytes_per_worker, max_memory_gb=max_memory_gb, n_jobs=-1)
        == expected
    )


def test_auto_n_jobs_measures_the_host_budget(six_cpus, host_ram):
    host_ram(16e9)  # budget 8 GB, uncapped measure of half the RAM
    assert auto_n_jobs(100, 2e9, n_jobs=-1) == 4
    host_ram(40e9)  # budget 20 GB: cores are the limit
    assert auto_n_jobs(100, 2e9, n_jobs=-1) == 6


def test_auto_n_jobs_rejects_zero():
    with pytest.raises(ValueError, match="n_jobs == 0"):
        auto_n_jobs(10, n_jobs=0)


def test_auto_n_jobs_uses_real_cpu_count():
    assert auto_n_jobs(10**6, n_jobs=-1) == (os.cpu_count() or 1)
    assert np.issubdtype(type(auto_n_jobs(10, n_jobs=-1)), np.integer)
