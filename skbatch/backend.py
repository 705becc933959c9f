"""Where computation runs: the :class:`Backend` value object.

A backend names an array library (numpy, torch or jax) and a device on it.
It is a plain value passed down from the estimators to the engine and the
kernels; there is no process-wide "current backend". Only the two strings
``library`` and ``device`` are pickled, so a fitted model made on a GPU host
unpickles anywhere; computing through a device that the new process lacks
raises :class:`RuntimeError` (run-or-raise), it never falls back to the CPU.
"""

import importlib.util
import os
import platform
import re
import sys
import warnings

import numpy as np

from . import _backends

__all__ = [
    "AUTO_GPU_MIN_FLOPS",
    "Backend",
    "check_gpu_available",
    "resolve_backend",
]

# Below about this many floating-point operations (a second of CPU BLAS work) a
# GPU loses to numpy once importing its library, creating a context and moving
# the data are counted; "auto" keeps such problems on numpy.
AUTO_GPU_MIN_FLOPS = 1e11

# The device-spec table: a backend's names (as library and kind of device),
# the device strings of each library, and what resolve_backend accepts.
_NAMED = {
    "numpy": ("numpy", "cpu"),
    "torch-cpu": ("torch", "cpu"),
    "torch-cuda": ("torch", "cuda"),
    "torch-mps": ("torch", "mps"),
    "jax-cpu": ("jax", "cpu"),
    "jax-gpu": ("jax", "gpu"),
}
_DEVICE_PATTERN = {
    "numpy": re.compile(r"^cpu$"),
    "torch": re.compile(r"^(cpu|mps|cuda(:\d+)?)$"),
    "jax": re.compile(r"^(cpu|gpu(:\d+)?)$"),
}
_ALLOWED_SPECS = (
    "None, 'auto', 'cpu', 'gpu', 'numpy', 'torch', 'jax', 'cuda', 'cuda:N', "
    "'mps', 'torch-cpu', 'torch-cuda', 'torch-mps', 'jax-cpu', 'jax-gpu', "
    "'jax-gpu:N' or a Backend"
)
# Accelerators that "gpu" looks for, in this order; "auto" skips MPS, which
# computes in float32 only.
_GPUS = (("torch", "cuda:0"), ("jax", "gpu:0"), ("torch", "mps"))
_NAME_OF = {spec: name for name, spec in _NAMED.items()}
# Arrays of this library are host data, on no backend's device.
_HOST_LIBRARY = "numpy"
# The one action that fixes a missing device: a fitted model moves (its
# arrays are host numpy), a model still to fit asks for another device.
_MOVE_HINT = (
    "Move the fitted model to a device this host has, explicitly: est.to_device('cpu')."
)
_CHOOSE_HINT = "Pass device='cpu' (or device='auto') to compute on this host."
_mps_warned = False


def _numbered(library, device):
    """Whether ``device`` is a kind of device that ``library`` numbers ("cuda")."""
    return _DEVICE_PATTERN[library].match(f"{device}:0") is not None


def _library_installed(library):
    return importlib.util.find_spec(library) is not None


class Backend:
    """An array library and a device on it.

    Parameters
    ----------
    library : {"numpy", "torch", "jax"}
        Array library that runs the computation.
    device : str, default="cpu"
        Device of that library: ``"cpu"`` for all three, ``"cuda"`` /
        ``"cuda:N"`` / ``"mps"`` for torch, ``"gpu"`` / ``"gpu:N"`` for jax.

    Attributes
    ----------
    name : str
        Short name: ``"numpy"``, ``"torch-cpu"``, ``"torch-cuda"``,
        ``"torch-mps"``, ``"jax-cpu"`` or ``"jax-gpu"``.
    is_gpu : bool
        Whether the device is an accelerator.
    xp : module
        The array-API namespace of the library, imported on first use.

    Notes
    -----
    Constructing or unpickling a backend never touches the device. Methods
    that compute (:meth:`asarray`, :meth:`check_available`) raise
    :class:`RuntimeError` when the device is missing in this process.

    Examples
    --------
    >>> from skbatch import Backend
    >>> b = Backend("numpy")
    >>> b.name, b.is_gpu
    ('numpy', False)
    >>> import pickle
    >>> pickle.loads(pickle.dumps(Backend("torch", "cuda:1"))).device
    'cuda:1'
    """

    __slots__ = ("library", "device", "_xp")

    def __init__(self, library, device="cpu"):
        if library not in _backends.LIBRARIES:
            raise ValueError(
                f"library must be one of {_backends.LIBRARIES}, got {library!r}"
            )
        if not isinstance(device, str) or not _DEVICE_PATTERN[library].match(device):
            raise ValueError(
                f"device {device!r} is not a device of {library}; allowed: "
                f"{_DEVICE_PATTERN[library].pattern}"
            )
        self.library = library
        # A bare "cuda" / "gpu" means the first card: recording the index keeps
        # a pickled model on the card it was fitted on.
        self.device = f"{device}:0" if _numbered(library, device) else device
        self._xp = None

    @property
    def name(self):
        return _NAME_OF[self.library, _backends.split_device(self.device)[0]]

    @property
    def is_gpu(self):
        return self.device != "cpu"

    @property
    def xp(self):
        if self._xp is None:
            self._xp = self._library().namespace()
        return self._xp

    def _library(self):
        """The module of :mod:`skbatch._backends` that holds the differences."""
        return _backends.get(self.library)

    def __reduce__(self):
        return (Backend, (self.library, self.device))

    def __eq__(self, other):
        return isinstance(other, Backend) and (self.library, self.device) == (
            other.library,
            other.device,
        )

    def __hash__(self):
        return hash((self.library, self.device))

    def __repr__(self):
        return f"Backend({self.library!r}, {self.device!r})"

    def missing_reason(self):
        """Why this backend cannot compute in this process, or None.

        Returns
        -------
        reason : str or None
            A sentence naming what is missing, or None when usable.

        Examples
        --------
        >>> from skbatch import Backend
        >>> Backend("numpy").missing_reason() is None
        True
        """
        if not _library_installed(self.library):
            return f"{self.library} is not installed"
        return self._library().missing_reason(self.device)

    def check_available(self, *, fitted=True):
        """Raise RuntimeError if this backend cannot compute here.

        Parameters
        ----------
        fitted : bool, default=True
            Whether a fitted model computes here (the fix is to move it with
            ``to_device``) or a device is being chosen for a fit (the fix is
            another ``device``).

        Raises
        ------
        RuntimeError
            Naming the device, what is missing, and the action that fixes it.

        Examples
        --------
        >>> from skbatch import Backend
        >>> Backend("numpy").check_available()
        """
        reason = self.missing_reason()
        if reason is not None:
            hint = _MOVE_HINT if fitted else _CHOOSE_HINT
            raise RuntimeError(
                f"Backend {self.name!r} on device {self.device!r} is not "
                f"available in this process: {reason}. {hint}"
            )
        if self.device == "mps":
            _warn_mps_once()

    def native_device(self):
        """The library's device object (None for numpy)."""
        self.check_available()
        return self._library().native_device(self.device)

    def context(self):
        """Context in which this backend computes.

        For jax this enables 64-bit types locally, so float64 requested by
        the caller is honoured without changing jax's global configuration.
        """
        return self._library().context()

    def asarray(self, x, dtype=None):
        """Convert a host or device array to this backend, on its device.

        Parameters
        ----------
        x : array-like
            Data to convert.
        dtype : numpy dtype or None
            Target dtype, given as a numpy dtype for every library.

        Returns
        -------
        array
            An array of this backend's library on its device.
        """
        dtype = None if dtype is None else np.dtype(dtype)
        return self._library().asarray(x, dtype, self.native_device())

    def empty_cache(self):
        """Release cached device memory (after an out-of-memory error)."""
        self._library().empty_cache(self.device)


def to_numpy(x):
    """Copy any numpy, torch or jax array to a host numpy array.

    Parameters
    ----------
    x : array-like
        numpy array, torch tensor (any device), jax array, or a sequence.

    Returns
    -------
    ndarray
        Host array; numpy input is returned without a copy.

    Examples
    --------
    >>> from skbatch.backend import to_numpy
    >>> to_numpy([1.0, 2.0])
    array([1., 2.])
    """
    return _backends.to_numpy(x)


def backend_of_array(x):
    """The backend an input array lives on, or None for host data.

    Used to return outputs in the library of the input and to refuse arrays
    that sit on another device than the fitted model's.
    """
    library = _backends.library_of(x)
    if library == _HOST_LIBRARY:
        return None
    return Backend(library, _backends.get(library).device_of(x))


def _warn_mps_once():
    global _mps_warned
    if not _mps_warned:
        _mps_warned = True
        warnings.warn(
            "MPS computes in float32: results carry float32 precision.",
            UserWarning,
            stacklevel=3,
        )


def _gpu_driver_absent():
    """True on a Linux host without NVIDIA or ROCm device nodes.

    Lets "auto" skip importing torch and jax (seconds) on CPU-only Linux
    hosts; elsewhere the libraries are asked.
    """
    if not sys.platform.startswith("linux"):
        return False
    return not any(
        os.path.exists(node) for node in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd")
    )


def _first_gpu(include_mps):
    """The first usable accelerator backend, or None."""
    for library, device in _GPUS:
        if device == "mps" and not include_mps:
            continue
        backend = Backend(library, device)
        if _library_installed(library) and backend.missing_reason() is None:
            return backend
    return None


def auto_prefers_gpu(flops):
    """The size rule of ``device="auto"``: go to a GPU for this much work?

    Parameters
    ----------
    flops : float or None
        Estimated floating-point operations of the fit; None means unknown.

    Returns
    -------
    bool
        True when the problem is large enough (``flops >=
        AUTO_GPU_MIN_FLOPS``) for a GPU to beat numpy after transfers.

    Examples
    --------
    >>> from skbatch.backend import auto_prefers_gpu
    >>> auto_prefers_gpu(1e6), auto_prefers_gpu(1e12)
    (False, True)
    """
    return flops is not None and flops >= AUTO_GPU_MIN_FLOPS


def resolve_backend(spec=None, *, flops=None):
    """Turn a device specification into a :class:`Backend`.

    Parameters
    ----------
    spec : str, Backend or None, default=None
        ``None`` or ``"cpu"`` or ``"numpy"``: numpy. ``"torch"`` /
        ``"jax"``: that library on the CPU. ``"cuda"``, ``"cuda:N"``,
        ``"mps"``: torch on that device. ``"gpu"``: the first of torch CUDA,
        jax GPU and torch MPS that is present. Names such as
        ``"torch-cuda"`` or ``"jax-gpu:1"`` are accepted too. ``"auto"``:
        numpy for small problems, a CUDA GPU (torch, then jax) for large
        ones when present; the size rule is :func:`auto_prefers_gpu`.
        ``"auto"`` never selects MPS, which computes in float32 only. A
        ``Backend`` is returned as is.
    flops : float or None, default=None
        Estimated work, used by ``"auto"`` only.

    Returns
    -------
    backend : Backend
        The resolved backend.

    Raises
    ------
    ValueError
        For an unknown specification.
    RuntimeError
        When the requested library or device is missing. There is never a
        silent fallback to the CPU.

    Examples
    --------
    >>> from skbatch import resolve_backend
    >>> resolve_backend("cpu").name
    'numpy'
    >>> resolve_backend("auto", flops=1e3).name
    'numpy'
    """
    if isinstance(spec, Backend):
        return spec
    if spec is not None and not isinstance(spec, str):
        raise TypeError(
            f"device must be a string, a Backend or None, got "
            f"{type(spec).__name__}: {spec!r}. Allowed: {_ALLOWED_SPECS}"
        )
    key = "cpu" if spec is None else spec.strip().lower()
    if key in ("cpu", "numpy"):
        return Backend("numpy")
    if key == "auto":
        if auto_prefers_gpu(flops) and not _gpu_driver_absent():
            gpu = _first_gpu(include_mps=False)
            if gpu is not None:
                return gpu
        return Backend("numpy")
    if key == "gpu":
        gpu = _first_gpu(include_mps=True)
        if gpu is None:
            raise RuntimeError(
                "device='gpu' was requested but no GPU is usable: "
                + "; ".join(Backend(*gpu).missing_reason() for gpu in _GPUS)
                + ". Use device='cpu' to run on the CPU."
            )
        gpu.check_available(fitted=False)
        return gpu
    if key in _backends.LIBRARIES:
        backend = Backend(key, "cpu")
    elif key == "mps" or re.match(r"^cuda(:\d+)?$", key):
        backend = Backend("torch", key)
    else:
        name, _, index = key.partition(":")
        library, device = _NAMED.get(name, (None, None))
        if library is None or (index and not _numbered(library, device)):
            raise ValueError(f"device must be one of {_ALLOWED_SPECS}, got {spec!r}")
        backend = Backend(library, f"{device}:{index}" if index else device)
    backend.check_available(fitted=False)
    return backend


def check_gpu_available():
    """Whether a GPU is usable, and which.

    Returns
    -------
    available : bool
        True when torch CUDA, jax GPU or torch MPS can compute here.
    info : dict
        Strings under the keys ``backend`` (backend name), ``device``
        (device string) and ``device_name`` (the hardware's name): those of
        the GPU, else ``"numpy"``, ``"cpu"`` and the CPU's name (``"cpu"``
        when the system does not tell it).

    Examples
    --------
    >>> from skbatch import check_gpu_available
    >>> available, info = check_gpu_available()
    >>> sorted(info)
    ['backend', 'device', 'device_name']
    """
    gpu = _first_gpu(include_mps=True)
    if gpu is None:
        return False, {"backend": "numpy", "device": "cpu", "device_name": _cpu_name()}
    device_name = gpu._library().device_name(gpu.device)
    return True, {"backend": gpu.name, "device": gpu.device, "device_name": device_name}


def _cpu_name():
    """The processor's model name, or "cpu" when the system does not tell it."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or "cpu"
