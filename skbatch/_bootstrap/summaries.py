"""What the replicates are reduced to: accumulators and intervals.

One accumulator per bootstrapped attribute
(:class:`~skbatch.streaming.BootstrapAccumulator`, or
:class:`~skbatch.streaming.BCaAccumulator` for ``ci_method="bca"``), the
host memory they hold and its checks, the intervals read from them and the
warning for NaN bounds. The interval rules themselves are
:mod:`skbatch.streaming`'s.
"""

import warnings

import numpy as np

from .._engine.preflight import bca_summary_bytes, gb_up, refuse
from ..exceptions import DegenerateDataWarning
from ..memory import GB, memory_budget
from ..streaming import BCaAccumulator, BootstrapAccumulator, describe_nan


def accumulator_bytes(settings, shapes):
    """Host bytes of the accumulators of ``shapes`` (name -> shape)."""
    if settings.ci_method == "bca":
        keep = bca_keeps_samples(settings, shapes)
        return sum(
            bca_summary_bytes(
                shape,
                settings.n_bootstrap,
                settings.confidence_level,
                keep_samples=keep,
                copy_samples=bool(settings.return_samples),
                n_bounds=1 if settings.alternative != "two-sided" else 2,
            )
            for shape in shapes.values()
        )
    return sum(
        BootstrapAccumulator.nbytes_needed(
            shape,
            settings.n_bootstrap,
            settings.confidence_level,
            keep_samples=bool(settings.return_samples),
            alternative=settings.alternative,
            method=settings.ci_method,
        )
        for shape in shapes.values()
    )


def bca_keeps_samples(settings, shapes):
    """Whether BCa keeps every replicate (one pass) rather than two passes."""
    if settings.return_samples:
        return True
    need = sum(
        BCaAccumulator.nbytes_needed(
            shape, settings.n_bootstrap, settings.confidence_level, keep_samples=True
        )
        for shape in shapes.values()
    )
    budget = memory_budget(None, settings.max_memory_gb)
    return need <= settings.keep_samples_share * budget * GB


def make_accumulators(settings, shapes, estimates):
    """One accumulator per attribute of ``shapes``, for ``settings.ci_method``."""
    if settings.ci_method == "bca":
        keep = bca_keeps_samples(settings, shapes)
        return {
            name: BCaAccumulator(
                shape,
                settings.n_bootstrap,
                settings.confidence_level,
                estimates[name],
                keep_samples=keep,
                alternative=settings.alternative,
            )
            for name, shape in shapes.items()
        }
    return {
        name: BootstrapAccumulator(
            shape,
            settings.n_bootstrap,
            settings.confidence_level,
            keep_samples=bool(settings.return_samples),
            alternative=settings.alternative,
            method=settings.ci_method,
        )
        for name, shape in shapes.items()
    }


def check_host_memory(settings, shapes):
    """Refuse to start when the retained replicates exceed the host budget."""
    need = accumulator_bytes(settings, shapes)
    budget = memory_budget(None, settings.max_memory_gb)
    if need > budget * GB:
        n_elements = sum(int(np.prod(shape)) for shape in shapes.values())
        kept = "every sample" if settings.return_samples else "the percentile tails"
        raise ValueError(
            f"BootstrapEstimator needs {gb_up(need):.3g} GB of host memory to "
            f"keep {kept} of {n_elements} bootstrapped elements over "
            f"n_bootstrap={settings.n_bootstrap} replicates, but the host budget is "
            f"{budget:.3g} GB (max_memory_gb={settings.max_memory_gb!r}). Lower "
            f"n_bootstrap, use fewer targets, set return_samples=False, or "
            f"raise max_memory_gb."
        )


def refuse_replicates(settings, need, budget, where, parts):
    """:func:`skbatch._engine.preflight.refuse` for the replicates' loops."""
    refuse(
        "BootstrapEstimator",
        settings.max_memory_gb,
        "Lower n_bootstrap, set return_samples=False, use fewer targets or "
        "samples, or raise max_memory_gb.",
        need,
        budget,
        where,
        parts,
    )


def refuse_bca(settings, need, budget, where, parts):
    """:func:`skbatch._engine.preflight.refuse` for the BCa jackknife."""
    refuse(
        "BootstrapEstimator",
        settings.max_memory_gb,
        "Use fewer targets or samples, lower n_bootstrap, use "
        "ci_method='percentile', or raise max_memory_gb.",
        need,
        budget,
        where,
        parts,
    )


def warn_if_nan(settings, results, accumulators):
    """One DegenerateDataWarning for every NaN bound or standard error of
    the fit, saying where and why; none when there is none."""
    message = describe_nan(
        {
            name: (
                (result.ci_lower, result.ci_upper, result.standard_error),
                accumulators[name].nan_reasons(result.estimate),
            )
            for name, result in results.items()
        }
    )
    if message is not None:
        warnings.warn(
            f"BootstrapEstimator(ci_method={settings.ci_method!r}): {message}",
            DegenerateDataWarning,
            # warn_if_nan, fit, atomic_fit, the caller.
            stacklevel=4,
        )


def intervals(settings, accumulators, estimates, run_replicates, acceleration):
    """Each attribute's ``(lower, upper)``, once ``run_replicates`` has filled
    ``accumulators``.

    BCa reads its levels at ``acceleration()`` (name -> jackknife
    acceleration) and, when the first pass kept too little, runs the same
    replicates again from their seeds through ``run_replicates(reducers)``.
    """
    if settings.ci_method == "bca":
        acceleration = acceleration()
        second = {
            name: accumulator.second_pass(acceleration[name])
            for name, accumulator in accumulators.items()
        }
        if all(reducer is not None for reducer in second.values()):
            # The same replicates again, from their seeds.
            run_replicates(second)
        return {
            name: accumulator.interval(
                # Samples nobody asked for are sorted in place.
                second[name],
                overwrite_samples=not settings.return_samples,
            )
            for name, accumulator in accumulators.items()
        }
    return {
        name: accumulator.interval(settings.ci_method, estimates[name])
        for name, accumulator in accumulators.items()
    }
