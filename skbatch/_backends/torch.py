"""torch on the devices "cpu", "cuda:N" and "mps".

torch is imported inside the functions: importing skbatch must not import it.
"""

import contextlib
import functools

import numpy as np

from . import SPD_CHOLESKY_MIN_SIZE, split_device
from ._threads import SharedLimit

# torch's threads synchronise for every operation, which costs more than the
# small ones of a batch (see skbatch/_backends/side_by_side.py, cpu_workers).
BATCHES_SIDE_BY_SIDE = True
# torch runs every shape through the same kernels.
COMPILES_PER_SHAPE = False


def namespace():
    import array_api_compat.torch as xp

    return xp


def asarray(x, dtype, native):
    import torch

    tdtype = None if dtype is None else getattr(torch, dtype.name)
    if isinstance(x, torch.Tensor):
        return x.to(device=native, dtype=tdtype)
    return torch.as_tensor(np.asarray(x), dtype=tdtype, device=native)


def to_numpy(x):
    return x.detach().cpu().numpy()


def device_of(array):
    device = array.device
    if device.type == "cuda":
        return f"cuda:{device.index or 0}"
    return device.type


def missing_reason(device):
    kind, index = split_device(device)
    if kind == "cpu":
        return None
    import torch

    if kind == "mps":
        if not torch.backends.mps.is_available():
            return "torch reports no MPS device"
        return None
    if not torch.cuda.is_available():
        return "torch reports no CUDA device"
    n_devices = torch.cuda.device_count()
    if index >= n_devices:
        return f"torch sees {n_devices} CUDA device(s), no index {index}"
    return None


def native_device(device):
    import torch

    return torch.device(device)


def device_name(device):
    kind, index = split_device(device)
    if kind == "mps":
        return "Apple MPS"
    import torch

    return torch.cuda.get_device_name(index)


def context():
    return contextlib.nullcontext()


def empty_cache(device):
    kind, _ = split_device(device)
    if kind == "cuda":
        import torch

        torch.cuda.empty_cache()
    elif kind == "mps":
        import torch

        torch.mps.empty_cache()


def uses_host_memory(device):
    # MPS shares the host's unified memory.
    return split_device(device)[0] in ("cpu", "mps")


def free_bytes(native):
    """Free memory of a CUDA device; a failing query raises."""
    import torch

    free, _ = torch.cuda.mem_get_info(native)
    return free


def threads():
    import torch

    return torch.get_num_threads()


def _torch_one_thread():
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    return functools.partial(torch.set_num_threads, previous)


_ONE_THREAD = SharedLimit(_torch_one_thread)


def one_thread():
    """Context in which torch runs on one CPU thread."""
    return _ONE_THREAD.hold()


def out_namespace():
    import torch

    return torch


def take_rows(A, rows, out):
    """``A[rows]`` written into ``out``."""
    import torch

    return torch.index_select(A, 0, rows, out=out)


def solves_by_cholesky(device):
    return split_device(device)[0] == "cuda"


def svd(A):
    """Thin SVD of a matrix."""
    import torch

    return torch.linalg.svd(A, full_matrices=False)


def spd_inverse(A):
    """Inverses of a batch of symmetric positive definite matrices, or None.

    On the CPU through Cholesky factors from ``SPD_CHOLESKY_MIN_SIZE`` on,
    1.4-2.6x faster than ``torch.linalg.inv``'s LU from 24 x 24 to 100 x 100
    (benchmarks/RESULTS.md); smaller matrices, and other devices, by
    ``torch.linalg.inv``. None when a factorisation fails: a matrix not
    positive definite to working precision through Cholesky, a singular one
    through LU.
    """
    import torch

    if A.device.type != "cpu" or A.shape[-1] < SPD_CHOLESKY_MIN_SIZE:
        inverse, info = torch.linalg.inv_ex(A)
        return None if bool(torch.any(info != 0)) else inverse
    factor = cholesky(A)
    return None if factor is None else torch.cholesky_inverse(factor)


def cholesky(A):
    """Lower Cholesky factors of a batch, or None if one factorisation fails."""
    import torch

    factor, info = torch.linalg.cholesky_ex(A)
    return None if bool(torch.any(info != 0)) else factor


def cholesky_solve(factor, B):
    import torch

    return torch.cholesky_solve(B, factor)
