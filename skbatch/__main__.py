"""Command line: ``skbatch info`` (also ``python -m skbatch info``)."""

import argparse
import importlib.metadata
import platform
import sys

from .backend import AUTO_GPU_MIN_FLOPS, Backend, resolve_backend
from .memory import memory_budget

_LIBRARIES = (
    "numpy",
    "scipy",
    "scikit-learn",
    "joblib",
    "array-api-compat",
    "psutil",
    "tqdm",
    "torch",
    "jax",
    "dask",
    "distributed",
    "matplotlib",
    "himalaya",
)
_BACKENDS = (
    Backend("numpy"),
    Backend("torch", "cpu"),
    Backend("torch", "cuda:0"),
    Backend("torch", "mps"),
    Backend("jax", "cpu"),
    Backend("jax", "gpu"),
)


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _device_budget(backend):
    try:
        return f"{memory_budget(backend, for_batching=True):.1f} GB"
    except Exception as exc:  # a driver error must not abort the report
        return f"not measurable ({exc})"


def info(out=None):
    """Print versions, usable backends, memory budgets and the auto choice."""
    from . import __version__

    out = sys.stdout if out is None else out
    write = out.write
    write(
        f"skbatch {__version__}  (Python {platform.python_version()}, "
        f"{platform.platform()})\n\nLibraries\n"
    )
    for dist in _LIBRARIES:
        write(f"  {dist:<18}{_version(dist)}\n")
    write("\nBackends\n")
    for backend in _BACKENDS:
        reason = backend.missing_reason()
        if reason is None:
            status = f"usable, batch budget {_device_budget(backend)}"
        else:
            status = f"unavailable: {reason}"
        write(f"  {backend.name:<11}{backend.device:<8}{status}\n")
    write(
        f"\nHost memory budget: {memory_budget(None):.1f} GB "
        f"(batches capped at {memory_budget(None, for_batching=True):.1f} GB)\n"
    )
    small = resolve_backend("auto", flops=0).name
    large = resolve_backend("auto", flops=AUTO_GPU_MIN_FLOPS).name
    write(
        f'device="auto" picks: {small} below {AUTO_GPU_MIN_FLOPS:.0e} flops, '
        f"{large} above\n"
    )


def main(argv=None):
    """Entry point of the ``skbatch`` console script."""
    parser = argparse.ArgumentParser(
        prog="skbatch", description="Batched ridge, bootstrap and permutation tests."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "info", help="versions, usable devices, memory budgets, what 'auto' picks"
    )
    args = parser.parse_args(argv)
    if args.command == "info":
        info()
    return 0


if __name__ == "__main__":
    sys.exit(main())
