"""Command line: ``skbatch info`` and ``skbatch demo`` (or ``python -m skbatch``)."""

import argparse
import importlib.metadata
import importlib.util
import platform
import sys
import warnings

import numpy as np

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

# Samples, features and targets of the fit `skbatch info` runs on each usable
# backend: enough targets to be planned in batches, few enough to add tens
# of milliseconds.
PROBE_SHAPE = (50, 5, 200)


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


def _probe(backend):
    """What a small BatchedRidge fit on ``backend`` reports, as verbose prints it.

    jax is not probed: it compiles its kernels for every new shape, which
    takes seconds.
    """
    from .ridge import BatchedRidge

    if backend.library == "jax":
        return [
            f"{backend.name}: not probed, jax compiles for every new shape, which "
            "takes seconds"
        ]
    n_samples, n_features, n_targets = PROBE_SHAPE
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n_samples, n_features))
    Y = rng.standard_normal((n_samples, n_targets))
    try:
        # Noise targets choose an edge alpha, which BatchedRidge warns about.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = BatchedRidge(device=backend).fit(X, Y).fit_report_
    except Exception as exc:  # a driver error must not abort the report
        return [f"{backend.name}: probe fit failed: {exc}"]
    return [
        line
        for stage in report.stages
        for line in (stage.format_plan(), stage.format_summary())
    ]


def _auto_choice():
    """What ``device="auto"`` picks, below and above the GPU threshold."""
    small = resolve_backend("auto", flops=0).name
    large = resolve_backend("auto", flops=AUTO_GPU_MIN_FLOPS).name
    if large == small:
        return f"{small}: no GPU found"
    return f"{small} below {AUTO_GPU_MIN_FLOPS:.0e} flops, {large} above"


def info(out=None):
    """Print versions, memory budgets, usable backends and the auto choice.

    What is cheap to know comes first and is flushed at once; probing the
    GPU libraries (importing torch and jax takes seconds) comes last, and a
    library that is not installed is not probed. Last, the plan a small fit
    gets on each usable backend, read from its ``fit_report_``.
    """
    from . import __version__

    out = sys.stdout if out is None else out
    write = out.write
    write(
        f"skbatch {__version__}  (Python {platform.python_version()}, "
        f"{platform.platform()})\n\nLibraries\n"
    )
    for dist in _LIBRARIES:
        write(f"  {dist:<18}{_version(dist)}\n")
    write(
        f"\nHost memory budget: {memory_budget(None):.1f} GB "
        f"(batches capped at {memory_budget(None, for_batching=True):.1f} GB)\n"
        "\nBackends\n"
    )
    out.flush()
    usable = []
    for backend in _BACKENDS:
        reason = backend.missing_reason()
        if reason is None:
            usable.append(backend)
            status = f"usable, batch budget {_device_budget(backend)}"
        else:
            status = f"unavailable: {reason}"
        write(f"  {backend.name:<11}{backend.device:<8}{status}\n")
        out.flush()
    write(f'\ndevice="auto" picks: {_auto_choice()}\n')
    n_samples, n_features, n_targets = PROBE_SHAPE
    write(
        f"\nProbe fit (BatchedRidge, {n_samples} samples x {n_features} features x "
        f"{n_targets:,} targets)\n"
    )
    for backend in usable:
        for line in _probe(backend):
            write(f"  {line}\n")
        out.flush()


def main(argv=None):
    """Entry point of the ``skbatch`` console script.

    Parameters
    ----------
    argv : list of str, default=None
        Command-line arguments; None reads ``sys.argv``.

    Returns
    -------
    status : int
        0 on success; a command-line error exits with status 2.
    """
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="skbatch", description="Batched ridge, bootstrap and permutation tests."
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )
    commands = parser.add_subparsers(dest="command")
    commands.add_parser(
        "info", help="versions, usable devices, memory budgets, what 'auto' picks"
    )
    demo = _add_demo_parser(commands)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
    elif args.command == "info":
        info()
    elif args.command == "demo":
        from . import _demo

        problem = _device_problem(args.device)
        if problem is not None:
            demo.error(f"--device {args.device}: {problem}")
        _demo.main(args)
    return 0


def _device_problem(spec):
    """Why the demo cannot compute on ``spec`` here, or None.

    Checked before any fit, so the message speaks of this command rather
    than of moving a fitted model.
    """
    try:
        resolve_backend(spec)
    except (TypeError, ValueError) as exc:
        return str(exc)
    except RuntimeError:
        key = spec.strip().lower()
        library = "jax" if key.startswith("jax") else "torch"
        if key != "gpu" and importlib.util.find_spec(library) is None:
            missing = f"{library} is not installed (pip install 'skbatch[{library}]')"
        elif "cuda" in key:
            _, _, index = key.partition(":")
            missing = f"no CUDA device {'cuda:' + index + ' ' if index else ''}here"
        elif "mps" in key:
            missing = "no MPS device here"
        else:
            missing = "no GPU here"
        return f"{missing}; run `skbatch demo --device cpu`"
    return None


def _int_at_least(minimum):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(
                f"must be an int >= {minimum}, got {text!r}"
            )
        return value

    return parse


def _add_demo_parser(commands):
    from . import _demo

    demo = commands.add_parser(
        "demo",
        help="ridge, permutation test and bootstrap on a simulated encoding model",
        description=(
            "Simulate an encoding model (many targets, a tenth of them driven by "
            "the features), fit BatchedRidge with a per-target alpha, test every "
            "target with PermutationScorer (family-wise corrected), bootstrap the "
            "weights of the significant ones, compare with the ground truth, "
            "print the cost of each step and write figures."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    demo.add_argument(
        "--targets",
        type=_int_at_least(1),
        default=_demo.N_TARGETS,
        help="simulated responses (voxels)",
    )
    demo.add_argument(
        "--samples",
        type=_int_at_least(_demo.MIN_DEMO_SAMPLES),
        default=_demo.N_SAMPLES,
        help="simulated stimuli (rows)",
    )
    demo.add_argument(
        "--features",
        type=_int_at_least(1),
        default=_demo.N_FEATURES,
        help="stimulus features",
    )
    demo.add_argument(
        "--permutations",
        type=_int_at_least(1),
        default=_demo.N_PERMUTATIONS,
        help="permutations of the test",
    )
    demo.add_argument(
        "--bootstrap",
        type=_int_at_least(2),
        default=_demo.N_BOOTSTRAP,
        help="bootstrap replicates",
    )
    demo.add_argument(
        "--device",
        default="auto",
        help="auto, cpu, torch, jax, cuda, cuda:N, mps or gpu",
    )
    demo.add_argument("--out", default="skbatch-demo", help="folder of the figures")
    demo.add_argument("--seed", type=_int_at_least(0), default=0, help="random seed")
    demo.add_argument(
        "--verbose",
        type=int,
        choices=(0, 1, 2),
        default=1,
        help="0: quiet; 1: progress bars on a terminal; 2: also log batch plans",
    )
    return demo


if __name__ == "__main__":
    sys.exit(main())
