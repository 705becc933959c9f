"""Fixtures that stage the device situation of a host without touching one.

``no_gpu`` makes torch and jax report no accelerator even on a GPU host, so
tests are deterministic; ``fake_cuda`` (on top of it) makes torch report two
CUDA devices, which is enough for everything that only *queries* CUDA
(resolving, pickling, memory maths) on a CPU-only CI machine.
"""

import pytest

import skbatch.backend

FAKE_CUDA_NAME = "Fake CUDA Device"
FAKE_CUDA_COUNT = 2


@pytest.fixture
def no_gpu(monkeypatch):
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    real_devices = jax.devices

    def cpu_only_devices(backend=None):
        # What jax itself raises on a host without a GPU plugin.
        if backend in ("gpu", "cuda", "rocm"):
            raise RuntimeError(f"Unknown backend: '{backend}' requested")
        return real_devices(backend)

    monkeypatch.setattr(jax, "devices", cpu_only_devices)


@pytest.fixture
def fake_cuda(no_gpu, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: FAKE_CUDA_COUNT)
    monkeypatch.setattr(skbatch.backend, "_gpu_driver_absent", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: FAKE_CUDA_NAME)
