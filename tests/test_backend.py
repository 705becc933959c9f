import os
import pickle
import pickletools
import subprocess
import sys
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import skbatch._backends.jax
import skbatch.backend
from skbatch import Backend, _backends, check_gpu_available, resolve_backend
from skbatch.backend import (
    AUTO_GPU_MIN_FLOPS,
    auto_prefers_gpu,
    backend_of_array,
    to_numpy,
)

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")

CPU_BACKENDS = [Backend("numpy"), Backend("torch", "cpu"), Backend("jax", "cpu")]
GPU_BACKENDS = [
    Backend("torch", "cuda:0"),
    Backend("torch", "cuda:1"),
    Backend("torch", "mps"),
    Backend("jax", "gpu"),
]


def _pickled_strings(data):
    """Every argument of every opcode of a pickle that carries data."""
    skip = {"PROTO", "FRAME", "MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"}
    return [
        arg
        for opcode, arg, _ in pickletools.genops(data)
        if arg is not None and opcode.name not in skip
    ]


def _forbid_device_queries(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the device was queried")

    for module, name in [
        (torch.cuda, "is_available"),
        (torch.cuda, "device_count"),
        (torch.backends.mps, "is_available"),
        (jax, "devices"),
    ]:
        monkeypatch.setattr(module, name, fail)


# --- the value object --------------------------------------------------------


@pytest.mark.parametrize(
    "library, device, name, is_gpu",
    [
        ("numpy", "cpu", "numpy", False),
        ("torch", "cpu", "torch-cpu", False),
        ("torch", "cuda", "torch-cuda", True),
        ("torch", "cuda:3", "torch-cuda", True),
        ("torch", "mps", "torch-mps", True),
        ("jax", "cpu", "jax-cpu", False),
        ("jax", "gpu", "jax-gpu", True),
        ("jax", "gpu:1", "jax-gpu", True),
    ],
)
def test_backend_name_and_is_gpu(library, device, name, is_gpu):
    backend = Backend(library, device)
    # a bare "cuda" / "gpu" is recorded with the index of the first card
    expected = f"{device}:0" if device in ("cuda", "gpu") else device
    assert (backend.library, backend.device) == (library, expected)
    assert backend.name == name
    assert backend.is_gpu is is_gpu


@pytest.mark.parametrize("library", ["cupy", "Torch", "", None])
def test_backend_rejects_unknown_library(library):
    with pytest.raises(ValueError, match=rf"library must be one of .*got {library!r}"):
        Backend(library)


@pytest.mark.parametrize(
    "library, device",
    [
        ("numpy", "cuda"),
        ("jax", "cuda"),
        ("torch", "gpu"),
        ("torch", "cuda:x"),
        ("jax", 0),
    ],
)
def test_backend_rejects_device_of_another_library(library, device):
    with pytest.raises(
        ValueError, match=rf"device {device!r} is not a device of {library}"
    ):
        Backend(library, device)


def test_backend_equality_and_hash():
    assert Backend("torch", "cuda:1") == Backend("torch", "cuda:1")
    assert Backend("torch", "cuda:1") != Backend("torch", "cuda:0")
    assert Backend("torch", "cpu") != Backend("jax", "cpu")
    assert Backend("numpy") != "numpy"
    assert len({Backend("jax", "cpu"), Backend("jax", "cpu"), Backend("numpy")}) == 2


def test_constructing_and_unpickling_never_touch_the_device(monkeypatch):
    _forbid_device_queries(monkeypatch)
    for backend in CPU_BACKENDS + GPU_BACKENDS:
        clone = pickle.loads(pickle.dumps(backend))
        assert clone == backend
        assert (clone.name, clone.is_gpu) == (backend.name, backend.is_gpu)


# --- pickling ----------------------------------------------------------------


@pytest.mark.parametrize("backend", CPU_BACKENDS + GPU_BACKENDS, ids=repr)
def test_only_strings_are_pickled(backend):
    if backend.library != "numpy" and not backend.is_gpu:
        assert backend.xp is not None  # a cached module must not be pickled
    func, args = backend.__reduce__()
    assert func is Backend
    assert args == (backend.library, backend.device)
    assert all(isinstance(arg, str) for arg in args)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        strings = _pickled_strings(pickle.dumps(backend, protocol=protocol))
        assert all(isinstance(s, str) for s in strings), strings
        assert set(strings) == {
            "skbatch.backend",
            "Backend",
            backend.library,
            backend.device,
        } or set(strings) == {
            "skbatch.backend Backend",
            backend.library,
            backend.device,
        }


@pytest.mark.parametrize("backend", CPU_BACKENDS, ids=repr)
def test_cpu_backends_round_trip_through_pickle_and_compute(backend):
    clone = pickle.loads(pickle.dumps(backend))
    assert clone == backend
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 4)), rng.normal(size=(4, 3))
    with clone.context():
        xa, xb = clone.asarray(a, dtype=np.float64), clone.asarray(b, dtype=np.float64)
        product = clone.xp.matmul(xa, xb)
    assert backend_of_array(product) in (None, clone)
    result = to_numpy(product)
    assert result.dtype == np.float64
    np.testing.assert_allclose(result, a @ b, rtol=1e-12, atol=1e-12)


def _assert_unusable_here(backend, device):
    pattern = rf"{device!r}.*to_device"
    with pytest.raises(RuntimeError, match=pattern):
        backend.check_available()
    with pytest.raises(RuntimeError, match=pattern):
        backend.asarray(np.ones(3))
    with pytest.raises(RuntimeError, match=pattern):
        backend.native_device()
    assert backend.missing_reason() is not None


def test_cuda_made_backend_unpickles_and_raises_without_cuda(fake_cuda, monkeypatch):
    made = resolve_backend("cuda")  # "on the GPU host"
    assert made == Backend("torch", "cuda:0")
    assert made.native_device() == torch.device("cuda:0")
    data = pickle.dumps(made)
    # Now the host has no CUDA.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    loaded = pickle.loads(data)
    assert loaded == made  # restored verbatim, no silent CPU fallback
    assert loaded.name == "torch-cuda"
    _assert_unusable_here(loaded, "cuda:0")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        loaded.check_available()


def test_cuda_made_backend_on_host_with_fewer_cards(fake_cuda, monkeypatch):
    data = pickle.dumps(resolve_backend("cuda:1"))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    loaded = pickle.loads(data)
    _assert_unusable_here(loaded, "cuda:1")
    with pytest.raises(RuntimeError, match="1 CUDA device.*no index 1"):
        loaded.check_available()


def test_jax_gpu_made_backend_unpickles_and_raises_without_gpu(no_gpu, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(skbatch._backends.jax, "gpu_count", lambda: 1)
        made = resolve_backend("jax-gpu")
        data = pickle.dumps(made)
    loaded = pickle.loads(data)
    assert loaded == Backend("jax", "gpu")
    _assert_unusable_here(loaded, "gpu:0")
    with pytest.raises(RuntimeError, match="jax reports no GPU device"):
        loaded.check_available()


@pytest.mark.slow
def test_gpu_pickle_loads_in_a_fresh_cpu_only_process():
    data = pickle.dumps(Backend("torch", "cuda:0"))
    code = (
        "import pickle, sys\n"
        f"backend = pickle.loads({data!r})\n"
        "print(backend.library, backend.device)\n"
        "try:\n"
        "    backend.asarray([1.0])\n"
        "except RuntimeError as exc:\n"
        "    print('raised', 'to_device' in str(exc), 'cuda:0' in str(exc))\n"
    )
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["torch cuda:0", "raised True True"]


# --- resolve_backend ---------------------------------------------------------


@pytest.mark.parametrize(
    "spec, library, device",
    [
        (None, "numpy", "cpu"),
        ("cpu", "numpy", "cpu"),
        ("numpy", "numpy", "cpu"),
        (" NumPy ", "numpy", "cpu"),
        ("torch", "torch", "cpu"),
        ("torch-cpu", "torch", "cpu"),
        ("jax", "jax", "cpu"),
        ("jax-cpu", "jax", "cpu"),
    ],
)
def test_resolve_cpu_specs(no_gpu, spec, library, device):
    backend = resolve_backend(spec)
    assert (backend.library, backend.device) == (library, device)


@pytest.mark.parametrize(
    "spec, device",
    [
        ("cuda", "cuda:0"),
        ("CUDA", "cuda:0"),
        ("cuda:0", "cuda:0"),
        ("cuda:1", "cuda:1"),
        ("torch-cuda", "cuda:0"),
        ("torch-cuda:1", "cuda:1"),
        ("gpu", "cuda:0"),
    ],
)
def test_resolve_cuda_specs(fake_cuda, spec, device):
    backend = resolve_backend(spec)
    assert (backend.library, backend.device) == ("torch", device)


@pytest.mark.parametrize(
    "spec, device", [("jax-gpu", "gpu:0"), ("jax-gpu:1", "gpu:1"), ("gpu", "gpu:0")]
)
def test_resolve_jax_gpu_specs(no_gpu, monkeypatch, spec, device):
    monkeypatch.setattr(skbatch._backends.jax, "gpu_count", lambda: 2)
    backend = resolve_backend(spec)
    assert (backend.library, backend.device) == ("jax", device)


def test_resolve_returns_a_backend_as_is(no_gpu):
    backend = Backend("torch", "cuda:1")
    assert resolve_backend(backend) is backend


def test_resolve_mps(no_gpu, monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(skbatch.backend, "_mps_warned", True)
    assert resolve_backend("mps") == Backend("torch", "mps")
    assert resolve_backend("torch-mps") == Backend("torch", "mps")
    assert resolve_backend("gpu") == Backend("torch", "mps")


@pytest.mark.parametrize(
    "spec, missing",
    [
        ("gpu", "no CUDA device.*jax reports no GPU device.*no MPS device"),
        ("cuda", "'cuda:0'.*no CUDA device"),
        ("cuda:0", "'cuda:0'.*no CUDA device"),
        ("cuda:1", "'cuda:1'.*no CUDA device"),
        ("torch-cuda", "'cuda:0'.*no CUDA device"),
        ("mps", "'mps'.*no MPS device"),
        ("jax-gpu", "'gpu:0'.*jax reports no GPU device"),
    ],
)
def test_resolve_gpu_specs_raise_without_gpu(no_gpu, spec, missing):
    with pytest.raises(RuntimeError, match=missing):
        resolve_backend(spec)


def test_resolve_raises_when_library_is_missing(no_gpu, monkeypatch):
    monkeypatch.setattr(
        skbatch.backend, "_library_installed", lambda lib: lib != "torch"
    )
    with pytest.raises(RuntimeError, match="'torch-cpu'.*torch is not installed"):
        resolve_backend("torch")
    assert resolve_backend("jax") == Backend("jax", "cpu")


@pytest.mark.parametrize(
    "spec",
    ["tpu", "", "gpu:0", "cuda:x", "numpy-cpu", "torch-mps:1", "jax-cpu:0", "torch-"],
)
def test_resolve_rejects_unknown_strings(no_gpu, spec):
    with pytest.raises(ValueError, match=rf"device must be one of .*got {spec!r}"):
        resolve_backend(spec)


@pytest.mark.parametrize("spec", [0, 1.5, ["cpu"], b"cpu"])
def test_resolve_rejects_non_strings(spec):
    with pytest.raises(
        TypeError, match=rf"device must be a string.*{type(spec).__name__}"
    ):
        resolve_backend(spec)


@pytest.mark.parametrize("flops", [None, 0, 1e3, AUTO_GPU_MIN_FLOPS / 2])
def test_auto_keeps_small_problems_on_numpy_without_querying(monkeypatch, flops):
    _forbid_device_queries(monkeypatch)
    assert resolve_backend("auto", flops=flops) == Backend("numpy")
    assert resolve_backend("AUTO", flops=flops) == Backend("numpy")


@pytest.mark.parametrize("flops", [AUTO_GPU_MIN_FLOPS, 1e15])
def test_auto_sends_large_problems_to_cuda(fake_cuda, flops):
    assert resolve_backend("auto", flops=flops) == Backend("torch", "cuda:0")


def test_auto_large_problem_without_gpu_stays_on_numpy(no_gpu, monkeypatch):
    assert resolve_backend("auto", flops=1e15) == Backend("numpy")
    monkeypatch.setattr(skbatch.backend, "_gpu_driver_absent", lambda: False)
    assert resolve_backend("auto", flops=1e15) == Backend("numpy")


def test_auto_skips_gpu_libraries_without_a_driver(monkeypatch):
    monkeypatch.setattr(skbatch.backend, "_gpu_driver_absent", lambda: True)
    _forbid_device_queries(monkeypatch)
    assert resolve_backend("auto", flops=1e15) == Backend("numpy")


def test_auto_never_chooses_mps(no_gpu, monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_backend("auto", flops=1e15) == Backend("numpy")


def test_auto_uses_jax_gpu_when_torch_has_no_cuda(no_gpu, monkeypatch):
    monkeypatch.setattr(skbatch._backends.jax, "gpu_count", lambda: 1)
    monkeypatch.setattr(skbatch.backend, "_gpu_driver_absent", lambda: False)
    assert resolve_backend("auto", flops=1e15) == Backend("jax", "gpu")


def test_auto_prefers_gpu_is_a_threshold():
    assert not auto_prefers_gpu(None)
    assert not auto_prefers_gpu(np.nextafter(AUTO_GPU_MIN_FLOPS, 0))
    assert auto_prefers_gpu(AUTO_GPU_MIN_FLOPS)


# --- MPS precision warning ---------------------------------------------------


def test_mps_float32_warning_once_per_process(no_gpu, monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(skbatch.backend, "_mps_warned", False)
    with pytest.warns(UserWarning, match="MPS computes in float32") as record:
        resolve_backend("mps")
    assert len([w for w in record if "float32" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resolve_backend("mps")
        resolve_backend("gpu")
        Backend("torch", "mps").check_available()


def test_no_mps_warning_for_other_backends(fake_cuda, monkeypatch):
    monkeypatch.setattr(skbatch.backend, "_mps_warned", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for spec in ("cpu", "torch", "jax", "cuda", "gpu"):
            resolve_backend(spec)
    assert skbatch.backend._mps_warned is False


# --- check_gpu_available -----------------------------------------------------


def test_check_gpu_available_without_gpu_names_the_cpu(no_gpu):
    available, info = check_gpu_available()
    assert available is False
    assert (info["backend"], info["device"]) == ("numpy", "cpu")
    assert isinstance(info["device_name"], str) and info["device_name"]


def test_check_gpu_available_names_the_cpu_without_cpuinfo(no_gpu, monkeypatch):
    import builtins
    import platform

    real_open = builtins.open

    def no_cpuinfo(path, *args, **kwargs):
        if path == "/proc/cpuinfo":
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", no_cpuinfo)
    monkeypatch.setattr(platform, "processor", lambda: "")
    assert check_gpu_available()[1]["device_name"] == "cpu"
    monkeypatch.setattr(platform, "processor", lambda: "arm")
    assert check_gpu_available()[1]["device_name"] == "arm"


def test_check_gpu_available_with_cuda(fake_cuda):
    from conftest import FAKE_CUDA_NAME

    assert check_gpu_available() == (
        True,
        {"backend": "torch-cuda", "device": "cuda:0", "device_name": FAKE_CUDA_NAME},
    )


def test_check_gpu_available_with_mps_only(no_gpu, monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    available, info = check_gpu_available()
    assert available is True
    assert (info["backend"], info["device"]) == ("torch-mps", "mps")


# --- host arrays and array backends ------------------------------------------


def test_to_numpy_numpy_is_not_copied():
    x = np.arange(4.0)
    assert to_numpy(x) is x


def test_to_numpy_torch_tensor_with_grad():
    values = np.random.default_rng(1).normal(size=(3, 2))
    tensor = torch.tensor(values, requires_grad=True)
    out = to_numpy(tensor * 2)
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, values * 2)


def test_to_numpy_jax_array():
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = to_numpy(jax.numpy.asarray(values) + 1)
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, values + 1)


def test_to_numpy_sequence():
    out = to_numpy([[1.0, 2.0], [3.0, 4.0]])
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, np.array([[1.0, 2.0], [3.0, 4.0]]))


def test_backend_of_array():
    assert backend_of_array(torch.zeros(2)) == Backend("torch", "cpu")
    assert backend_of_array(jax.numpy.zeros(2)) == Backend("jax", "cpu")
    assert backend_of_array(np.zeros(2)) is None
    assert backend_of_array([0.0, 1.0]) is None


@pytest.mark.parametrize("backend", CPU_BACKENDS, ids=repr)
def test_asarray_lands_on_the_backend(backend):
    x = backend.asarray(np.arange(3), dtype=np.float32)
    assert backend_of_array(x) in ({None} if backend.library == "numpy" else {backend})
    assert to_numpy(x).dtype == np.float32
    np.testing.assert_array_equal(to_numpy(x), [0.0, 1.0, 2.0])


def test_asarray_converts_between_libraries():
    tensor = Backend("torch", "cpu").asarray(torch.arange(3, dtype=torch.float64))
    assert isinstance(tensor, torch.Tensor)
    back = Backend("numpy").asarray(tensor)
    assert isinstance(back, np.ndarray)
    np.testing.assert_array_equal(back, [0.0, 1.0, 2.0])


def test_missing_device_messages_fit_their_context(no_gpu, monkeypatch):
    # Choosing a device for a fit: nothing to move yet, pick another device.
    with pytest.raises(RuntimeError, match="no CUDA device") as choosing:
        resolve_backend("cuda")
    assert "device='cpu'" in str(choosing.value)
    assert "to_device" not in str(choosing.value)
    # A fitted model whose library is not installed here: say so, and move it.
    monkeypatch.setattr(
        skbatch.backend, "_library_installed", lambda library: library != "torch"
    )
    loaded = pickle.loads(pickle.dumps(Backend("torch", "cpu")))
    with pytest.raises(RuntimeError, match="torch is not installed") as fitted:
        loaded.check_available()
    assert "est.to_device('cpu')" in str(fitted.value)
    with pytest.raises(RuntimeError, match="torch is not installed.*device='cpu'"):
        resolve_backend("torch")


def test_check_gpu_available_with_jax_gpu_only(no_gpu, monkeypatch):
    class FakeGpu:
        device_kind = "Fake jax GPU"

    real_devices = jax.devices

    def devices(backend=None):
        return [FakeGpu()] if backend == "gpu" else real_devices(backend)

    monkeypatch.setattr(jax, "devices", devices)
    assert check_gpu_available() == (
        True,
        {"backend": "jax-gpu", "device": "gpu:0", "device_name": "Fake jax GPU"},
    )


# --- the library modules (skbatch._backends) ---------------------------------

# The surface documented in skbatch/_backends/__init__.py.
SURFACE = [
    "namespace",
    "asarray",
    "to_numpy",
    "device_of",
    "missing_reason",
    "native_device",
    "context",
    "empty_cache",
    "uses_host_memory",
    "threads",
    "one_thread",
    "BATCHES_SIDE_BY_SIDE",
    "COMPILES_PER_SHAPE",
    "out_namespace",
    "take_rows",
    "solves_by_cholesky",
    "svd",
    "spd_inverse",
]
ACCELERATOR_SURFACE = ["device_name", "free_bytes"]
CHOLESKY_SURFACE = ["cholesky", "cholesky_solve"]


@pytest.mark.parametrize("library", _backends.LIBRARIES)
def test_every_library_implements_the_surface(library):
    module = _backends.get(library)
    missing = [name for name in SURFACE if not hasattr(module, name)]
    if library != "numpy":
        missing += [
            name
            for name in ACCELERATOR_SURFACE + CHOLESKY_SURFACE
            if not hasattr(module, name)
        ]
    assert missing == []
    # Every library of the registry is one that Backend accepts, and back.
    assert Backend(library).library == library


@pytest.mark.slow
def test_the_library_modules_import_no_gpu_library():
    code = (
        "import pickle, sys\n"
        "import skbatch._backends as b\n"
        "from skbatch import Backend\n"
        "modules = [b.get(library) for library in b.LIBRARIES]\n"
        "for device in ('cuda:1', 'mps'):\n"
        "    backend = pickle.loads(pickle.dumps(Backend('torch', device)))\n"
        "    print(backend.name)\n"
        "print(pickle.loads(pickle.dumps(Backend('jax', 'gpu'))).name)\n"
        "print(b.library_of([1.0]), b.to_numpy([1.0]))\n"
        "print([m for m in ('torch', 'jax') if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:5] == [
        "torch-cuda",
        "torch-mps",
        "jax-gpu",
        "numpy [1.]",
        "[]",
    ]


def test_library_of_names_the_library_holding_an_array():
    assert _backends.library_of(np.zeros(2)) == "numpy"
    assert _backends.library_of(np.float64(1.0)) == "numpy"
    assert _backends.library_of([1.0, 2.0]) == "numpy"
    assert _backends.library_of(torch.zeros(2)) == "torch"
    assert _backends.library_of(torch.nn.Parameter(torch.zeros(2))) == "torch"
    assert _backends.library_of(jax.numpy.zeros(2)) == "jax"


@pytest.mark.parametrize(
    "backend, host",
    [
        (Backend("numpy"), True),
        (Backend("torch", "cpu"), True),
        (Backend("torch", "mps"), True),  # unified memory
        (Backend("torch", "cuda:1"), False),
        (Backend("jax", "cpu"), True),
        (Backend("jax", "gpu:0"), False),
    ],
    ids=repr,
)
def test_devices_with_their_own_memory(backend, host):
    module = _backends.get(backend.library)
    assert module.uses_host_memory(backend.device) is host


@pytest.mark.parametrize(
    "backend, cholesky",
    [
        (Backend("numpy"), False),
        (Backend("torch", "cpu"), False),
        (Backend("torch", "mps"), False),
        (Backend("torch", "cuda:1"), True),
        (Backend("jax", "cpu"), False),
        (Backend("jax", "gpu:0"), True),
    ],
    ids=repr,
)
def test_batched_cholesky_only_on_cuda_and_jax_gpus(backend, cholesky):
    # skbatch/_kernels/linalg/weighted.py, _solve_spd: on the CPU inverting the
    # small matrices is several times faster than the batched Cholesky solves.
    module = _backends.get(backend.library)
    assert module.solves_by_cholesky(backend.device) is cholesky


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("library", _backends.LIBRARIES)
def test_take_rows_gathers_into_out(library, dtype):
    pytest.importorskip(library)
    module = _backends.get(library)
    A = np.arange(60, dtype=dtype).reshape(6, 10)
    rows = np.array([0, 2, 3, 5])
    backend = Backend(library)
    with backend.context():
        # A slice of columns, as the bootstrap kernel gathers.
        native = backend.asarray(A, None)[:, 2:7]
        out = backend.xp.zeros((4, 5), dtype=native.dtype)
        taken = module.take_rows(native, backend.asarray(rows, None), out)
    assert_array_equal(np.asarray(taken), A[rows, 2:7])
    if module.out_namespace() is not None:
        assert_array_equal(np.asarray(out), A[rows, 2:7])


@pytest.mark.parametrize("shape", [(40, 7), (7, 40)], ids=["tall", "wide"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("library", _backends.LIBRARIES)
def test_svd_is_thin_and_reconstructs(library, dtype, shape):
    pytest.importorskip(library)
    module = _backends.get(library)
    A = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    backend = Backend(library)
    with backend.context():
        native = backend.asarray(A, None)
        U, s, Vt = (np.asarray(part) for part in module.svd(native))
    rank = min(shape)
    assert U.shape == (shape[0], rank) and Vt.shape == (rank, shape[1])
    assert U.dtype == s.dtype == Vt.dtype == np.dtype(dtype)
    rtol = 1e-5 if dtype == np.float32 or library == "jax" else 1e-12
    expected = np.linalg.svd(A.astype(np.float64), compute_uv=False)
    assert_allclose(s, expected, rtol=rtol)
    assert_allclose((U * s) @ Vt, A, atol=rtol * expected[0])
    assert_allclose(U.T @ U, np.eye(rank), atol=10 * rtol)
    assert_array_equal(np.asarray(native), A)


# Either side of the size from which numpy and torch invert through Cholesky.
@pytest.mark.parametrize("size", [8, _backends.SPD_CHOLESKY_MIN_SIZE + 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("library", _backends.LIBRARIES)
def test_spd_inverse_inverts_and_refuses_what_is_not_positive_definite(
    library, dtype, size
):
    pytest.importorskip(library)
    module = _backends.get(library)
    rng = np.random.default_rng(0)
    factor = rng.standard_normal((5, size, size + 4))
    A = (factor @ factor.transpose(0, 2, 1) + np.eye(size)).astype(dtype)
    # A strided batch (every other matrix), as a sliced Gram matrix is.
    given = np.repeat(A, 2, axis=0)[::2]
    singular = given.copy()
    singular[2] = 0
    backend = Backend(library)
    with backend.context():
        native = backend.asarray(given, None)
        inverse = module.spd_inverse(native)
        indefinite = module.spd_inverse(backend.asarray(-given, None))
        zero = module.spd_inverse(backend.asarray(singular, None))
    inverse = np.asarray(inverse)
    expected = np.linalg.inv(A.astype(np.float64))
    rtol = 1e-4 if dtype == np.float32 or library == "jax" else 1e-10
    assert_allclose(inverse, expected, rtol=rtol, atol=rtol * np.abs(expected).max())
    # The input is left as it was.
    assert_array_equal(np.asarray(native), given)
    if library == "jax":
        # jax's LU inverse; it gives no error: the caller's condition test
        # rejects the result.
        assert indefinite is not None
        assert not np.all(np.isfinite(np.asarray(zero)[2]))
        return
    assert zero is None
    if size < _backends.SPD_CHOLESKY_MIN_SIZE:
        # The LU inverse, which inverts an indefinite matrix too.
        assert_allclose(
            np.asarray(indefinite),
            -expected,
            rtol=rtol,
            atol=rtol * np.abs(expected).max(),
        )
    else:
        # Mirrored from one triangle of the Cholesky inverse.
        assert_array_equal(inverse, inverse.transpose(0, 2, 1))
        assert indefinite is None


@pytest.mark.parametrize(
    "backend, freed",
    [
        (Backend("numpy"), []),
        (Backend("torch", "cpu"), []),
        (Backend("torch", "cuda:1"), ["cuda"]),
        (Backend("torch", "mps"), ["mps"]),
        (Backend("jax", "gpu"), []),
    ],
    ids=repr,
)
def test_empty_cache_frees_the_cache_of_the_device(no_gpu, monkeypatch, backend, freed):
    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("cuda"))
    monkeypatch.setattr(torch.mps, "empty_cache", lambda: calls.append("mps"))
    # An absent device has nothing cached: freeing never raises.
    backend.empty_cache()
    assert calls == freed


def test_factorisations_of_cpu_arrays_run_on_one_thread():
    # skbatch/_kernels/linalg/_arrays.py, one_thread: numpy's BLAS and torch on
    # the CPU run a factorisation on one thread, jax schedules its own; counts
    # come back.
    from threadpoolctl import threadpool_limits

    from skbatch._kernels.linalg import one_thread

    def counts():
        return _backends.get("numpy").threads(), torch.get_num_threads()

    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with threadpool_limits(2, user_api="blas"):
            assert counts() == (2, 2)
            with one_thread(np.ones(3)):
                assert counts() == (1, 2)
            with one_thread(torch.ones(3)):
                assert counts() == (2, 1)
            with Backend("jax").context(), one_thread(jax.numpy.ones(3)):
                assert counts() == (2, 2)
            assert counts() == (2, 2)
    finally:
        torch.set_num_threads(previous)
