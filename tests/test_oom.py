import gc
import weakref

import numpy as np
import pytest

from skbatch import Backend, compute_oom_safe, is_oom_error
from skbatch.oom import _SIMULATED_OOM_LIMIT, ChunkRunner
from skbatch.testing import simulate_oom

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")

LIMITS = [1, 2, 3, 5, 7, 16, 36, 37, 100]
N_ROWS = 37


class XlaRuntimeError(Exception):
    """Stands in for jaxlib's error class, matched by name, not by base class."""


class OutOfMemoryError(Exception):
    """Stands in for cupy.cuda.memory.OutOfMemoryError."""


class _CountingBackend:
    def __init__(self):
        self.n_empty_cache = 0

    def empty_cache(self):
        self.n_empty_cache += 1


def _device_oom():
    return RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")


# --- is_oom_error ------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB"),
        torch.cuda.OutOfMemoryError("no text about it"),
        RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        RuntimeError("CUDA error: out of memory"),
        RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)"),
        XlaRuntimeError("RESOURCE_EXHAUSTED: Failed to allocate request for 2.00GiB"),
        jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Failed to allocate 8 bytes"),
        OutOfMemoryError("Out of memory allocating 1,024 bytes"),
        MemoryError(),
        MemoryError("Unable to allocate 8.00 GiB for an array"),
    ],
    ids=repr,
)
def test_oom_errors_are_recognised(exc):
    assert is_oom_error(exc) is True


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("not enough memory for n_bootstrap=10**9"),
        ValueError("out of memory"),
        KeyError("out of memory"),
        KeyError("x"),
        RuntimeError("CUDA error: device-side assert triggered"),
        XlaRuntimeError("INTERNAL: cuBLAS failed"),
        TypeError("unsupported operand"),
        Exception("something"),
    ],
    ids=repr,
)
def test_other_errors_are_not_oom(exc):
    assert is_oom_error(exc) is False


# --- compute_oom_safe --------------------------------------------------------


def _recording_fn(seen):
    def fn(ids, x):
        seen.append(ids.copy())
        return x * 2.0 + ids[:, None]

    return fn


@pytest.mark.parametrize("max_items", LIMITS)
def test_split_result_equals_unsplit(max_items):
    ids = np.arange(N_ROWS)
    x = np.random.default_rng(max_items).normal(size=(N_ROWS, 3))
    expected = x * 2.0 + ids[:, None]
    seen = []
    with simulate_oom(max_items=max_items):
        result = compute_oom_safe(_recording_fn(seen), ids, x)
    np.testing.assert_array_equal(result, expected)
    # Every row computed exactly once, in order, by chunks that fit.
    np.testing.assert_array_equal(np.concatenate(seen), ids)
    assert max(len(chunk) for chunk in seen) <= max_items
    if max_items >= N_ROWS:
        assert len(seen) == 1


@pytest.mark.parametrize("max_items", [1, 3, 8])
def test_inputs_are_sliced_never_redrawn(max_items):
    x = np.random.default_rng(0).normal(size=(20, 4))
    original = x.copy()
    chunks = []

    def fn(chunk):
        chunks.append(chunk)
        return chunk.sum(axis=1)

    with simulate_oom(max_items=max_items):
        result = compute_oom_safe(fn, x)
    np.testing.assert_array_equal(result, original.sum(axis=1))
    np.testing.assert_array_equal(x, original)
    assert all(np.shares_memory(chunk, x) for chunk in chunks)
    np.testing.assert_array_equal(np.concatenate(chunks), original)


def test_split_sizes_by_halving():
    # 10 -> 5 + 5; each 5 -> 2 + 3, all fit in 3.
    runner = ChunkRunner()
    with simulate_oom(max_items=3):
        pieces = runner.run(lambda a: a, np.arange(10))
    assert [(lo, hi) for lo, hi, _ in pieces] == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert runner.n_recoveries == 3
    assert runner.largest_ok == 3


def test_no_oom_means_one_call_and_no_recovery():
    runner = ChunkRunner()
    pieces = runner.run(lambda a: a + 1, np.arange(6))
    assert len(pieces) == 1
    assert (runner.n_recoveries, runner.largest_ok) == (0, None)


def test_real_oom_in_fn_is_recovered_and_cache_freed():
    calls = []

    def fn(x):
        calls.append(len(x))
        if len(x) > 3:
            raise _device_oom()
        return x**2

    backend = _CountingBackend()
    x = np.arange(8.0)
    result = compute_oom_safe(fn, x, backend=backend)
    np.testing.assert_array_equal(result, x**2)
    # 8 fails, its first half 4 fails -> 2, 2; second half 4 fails -> 2, 2.
    assert calls == [8, 4, 2, 2, 4, 2, 2]
    assert backend.n_empty_cache == 3


def test_failed_attempt_memory_is_released_before_retry():
    alive = []

    def fn(x):
        # What a failed attempt's frame holds: freed only if its traceback is.
        assert all(ref() is None for ref in alive), "failed attempt still alive"
        workspace = np.ones(1000)
        alive.append(weakref.ref(workspace))
        if len(x) > 2:
            raise _device_oom()
        return x + workspace[: len(x)]

    gc.disable()  # refcounting alone must free it, as CUDA needs it at once
    try:
        result = compute_oom_safe(fn, np.arange(8.0))
    finally:
        gc.enable()
    np.testing.assert_array_equal(result, np.arange(8.0) + 1)


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda: torch.arange(8.0), Backend("torch", "cpu")),
        (lambda: jax.numpy.arange(8.0), Backend("jax", "cpu")),
        (lambda: np.arange(8.0), None),
    ],
)
def test_compute_oom_safe_frees_the_cache_of_the_arrays_backend(
    monkeypatch, make, expected
):
    freed = []
    monkeypatch.setattr(Backend, "empty_cache", lambda self: freed.append(self))
    x = make()
    with simulate_oom(max_items=2):
        result = compute_oom_safe(lambda v: v * 2, x)
    np.testing.assert_array_equal(np.asarray(result), np.arange(8.0) * 2)
    # 8 -> 4 + 4 -> 2 + 2 + 2 + 2: three splits, the cache freed before each.
    assert freed == ([] if expected is None else [expected] * 3)


def test_tuple_outputs_are_concatenated():
    x = np.arange(12.0).reshape(6, 2)
    with simulate_oom(max_items=2):
        a, b = compute_oom_safe(lambda v: (v.sum(axis=1), v * 3), x)
    np.testing.assert_array_equal(a, x.sum(axis=1))
    np.testing.assert_array_equal(b, x * 3)


def test_torch_outputs_are_concatenated():
    x = torch.arange(10, dtype=torch.float64).reshape(5, 2)
    with simulate_oom(max_items=2):
        result = compute_oom_safe(lambda v: v * 2 + v.sum(dim=1, keepdim=True), x)
    assert isinstance(result, torch.Tensor)
    torch.testing.assert_close(
        result, x * 2 + x.sum(dim=1, keepdim=True), rtol=0, atol=0
    )


def test_oom_at_min_chunk_says_what_to_lower():
    with (
        simulate_oom(max_items=2),
        pytest.raises(
            MemoryError, match=r"chunk of 4 item\(s\).*min_chunk=4.*lower max_memory_gb"
        ) as excinfo,
    ):
        compute_oom_safe(lambda a: a, np.arange(8), min_chunk=4)
    assert is_oom_error(excinfo.value.__cause__)


def test_oom_at_one_item_raises_memory_error_from_the_device_error():
    error = _device_oom()

    def fn(x):
        raise error

    with pytest.raises(
        MemoryError, match=r"chunk of 1 item\(s\).*min_chunk=1"
    ) as excinfo:
        compute_oom_safe(fn, np.arange(4))
    assert excinfo.value.__cause__ is error


@pytest.mark.parametrize(
    "error", [ValueError("bad input"), KeyError("k"), TypeError("t")]
)
def test_non_oom_errors_propagate_unchanged(error):
    calls = []

    def fn(x):
        calls.append(len(x))
        if 5 in x:
            raise error
        return x

    with simulate_oom(max_items=3), pytest.raises(type(error)) as excinfo:
        compute_oom_safe(fn, np.arange(8))
    assert excinfo.value is error
    # 8 -> 4 -> (2 ok, 2 ok); 4 -> 2 holding item 5 fails: no retry of it.
    assert calls == [2, 2, 2]


def test_compute_oom_safe_needs_an_array():
    with pytest.raises(ValueError, match="at least one array"):
        compute_oom_safe(lambda: None)


@pytest.mark.parametrize("min_chunk", [0, -2])
def test_min_chunk_must_be_positive(min_chunk):
    with pytest.raises(ValueError, match=rf"min_chunk must be >= 1, got {min_chunk}"):
        ChunkRunner(min_chunk=min_chunk)


# --- simulate_oom ------------------------------------------------------------


def _n_pieces(n):
    return len(ChunkRunner().run(lambda a: a, np.arange(n)))


def test_simulate_oom_restores_state_after_the_block():
    assert _n_pieces(8) == 1
    with simulate_oom(max_items=2):
        assert _n_pieces(8) == 4
    assert _n_pieces(8) == 1
    assert _SIMULATED_OOM_LIMIT.get() is None


def test_simulate_oom_restores_state_after_an_exception():
    with pytest.raises(KeyError, match="inside"), simulate_oom(max_items=1):
        assert _n_pieces(4) == 4
        raise KeyError("inside")
    assert _n_pieces(4) == 1
    assert _SIMULATED_OOM_LIMIT.get() is None


def test_simulate_oom_nests():
    with simulate_oom(max_items=4):
        with simulate_oom(max_items=1):
            assert _n_pieces(8) == 8
        assert _n_pieces(8) == 2
    assert _n_pieces(8) == 1


def test_simulated_error_looks_like_a_device_oom():
    def fn(x):
        raise AssertionError("fn must not run for a batch over the limit")

    runner = ChunkRunner(min_chunk=5)
    with simulate_oom(max_items=3), pytest.raises(MemoryError) as excinfo:
        runner.run(fn, np.arange(5))
    cause = excinfo.value.__cause__
    assert isinstance(cause, RuntimeError)
    assert "CUDA out of memory" in str(cause)
    assert is_oom_error(cause)


@pytest.mark.parametrize("max_items", [0, -1, 1.5, 2.0, True, "3", None])
def test_simulate_oom_rejects_bad_limits(max_items):
    with pytest.raises(
        ValueError, match=rf"max_items must be an int >= 1, got {max_items!r}"
    ):
        with simulate_oom(max_items=max_items):
            pass
    assert _SIMULATED_OOM_LIMIT.get() is None
