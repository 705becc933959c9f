"""How a fit ran: :class:`FitReport`, one :class:`FitStage` per engine loop.

The engine (``skbatch/_engine/``) builds a stage for each loop it runs and
hands it to :func:`record_stage`; :func:`collect_stages`, opened around every
``fit`` by ``skbatch._estimators.base.atomic_fit``, gathers them. The collectors live in
a :class:`contextvars.ContextVar`, so a fit sees the stages of its own thread
(and of the engine's threads, which copy its context) and no other's.

Inside a fit a stage's clock starts where the previous stage ended (or where
the fit started), not where its loop starts: the input checks and the
decomposition a loop runs on are its seconds too. The fit's last stage also
takes the work after its loop (warnings, results), and its summary line is
printed when the fit ends, so that the stages' seconds, and the verbose lines,
add up to the fit's wall time.
"""

import contextlib
import contextvars
import logging
import time
from dataclasses import dataclass, replace
from operator import attrgetter

from ..backend import Backend
from ..memory import GB

logger = logging.getLogger("skbatch")

# In a log file, where no progress bar shows, a loop prints how far it is at
# least this often (in seconds, once a batch completes): a batch job's log
# shows that it runs, and how long it has left.
PROGRESS_INTERVAL_S = 30.0
# ... and at every tenth of its items, so that 10% and 90% read differently.
PROGRESS_STEPS = 10
# A loop estimated to take less than this (in seconds) says only its plan and
# its summary: its end comes before a line of progress would be read.
PROGRESS_QUIET_S = 10.0
# Seconds in a minute and in an hour, for durations as people read them.
_MINUTE, _HOUR = 60, 3600

# The stage lists of the fits running in this context, outermost first: a
# loop is recorded in each, so a nested fit's loops appear in the enclosing
# fit's report too.
_COLLECTORS = contextvars.ContextVar("skbatch_fit_stages", default=())


class _FitClock:
    """When the latest stage of the fits in this context ended (or the
    innermost fit started), and the summary line of a stage not yet printed:
    a fit's last stage may still take the work after its loop."""

    def __init__(self, verbose):
        self.mark = time.perf_counter()
        self.pending = None
        # The outermost fit's verbosity: the lines of the fits nested in it
        # are printed at least as verbosely, or its lines would not add up.
        self.verbose = verbose

    def flush(self):
        """Print the summary line held back, if any."""
        if self.pending is not None:
            stage, verbose, say = self.pending
            self.pending = None
            say(verbose, stage.format_summary())


# The clock of the fits running in this context (one for nested fits).
_CLOCK = contextvars.ContextVar("skbatch_fit_clock", default=None)


def _count(n, plural):
    """``"1 target"``, ``"2 targets"``, ``"1 batch"``: from the plural noun."""
    if n != 1:
        return f"{n:,} {plural}"
    return f"{n:,} {plural[:-2] if plural.endswith('ches') else plural[:-1]}"


@dataclass(frozen=True)
class FitStage:
    """One loop of a fit: what the engine planned, and what happened.

    Every heavy loop of a fit (over targets, permutations, bootstrap
    replicates) is one stage. It runs on one of three paths: ``"batched"``,
    where a device kernel processes batches of items sized from the memory
    budget; ``"cluster"``, the same batches run as tasks on the workers of
    an active dask cluster; or ``"parallel"``, where refits of an arbitrary
    estimator run as joblib tasks in windows sized so that the results in
    flight fit the host budget.

    Attributes
    ----------
    name : str
        What the items are: ``"targets"``, ``"permutations"``,
        ``"replicates"``...
    path : {"batched", "cluster", "parallel"}
        The device engine here, the device engine on dask workers, or joblib
        windows.
    runs_on : str
        The backend's name (``"numpy"``, ``"torch-cuda"``...) on the batched
        and cluster paths (on the cluster, each worker's); the joblib backend
        (``"loky"``, ``"threading"``, ``"dask"``...) on the parallel path.
    n_items : int
        Items processed.
    batch_size : int
        Items per batch as planned (batched path), or per window (parallel
        path).
    n_batches : int
        Batches (or windows) planned.
    n_workers : int
        Batches run side by side (batched path), threads of the dask workers
        (cluster path), or joblib workers (parallel path).
    n_batches_run : int
        Batches actually run: more than ``n_batches`` after out-of-memory
        splits, a batch that ran out of memory counted too.
    n_oom_splits : int
        Batches that ran out of memory and were split in halves.
    planned_peak_bytes : float
        Memory the plan allows: ``fixed_bytes`` plus a batch of items per
        worker (batched path) or on each worker (cluster path); the window's
        results plus the copies of the data the local workers hold (parallel
        path).
    budget_gb : float
        Memory budget one batch (or window) was sized against, in GB.
    device_bytes_per_item, host_bytes_per_item : float
        The memory model the plan came from: working set of one item on the
        device, and bytes of its result held on the host until reduced.
    fixed_bytes : float
        Memory used whatever the batch: data and decompositions on the
        device (batched path), or each worker's copy of the task's arrays
        (parallel path).
    seconds : float
        Wall time of the loop and of the fit's work that led to it, since
        the previous stage ended or the fit started (input checks, the
        decompositions the loop runs on); the last stage of a fit also takes
        the fit's work after its loops (warnings, results). The stages of a
        fit add up to its wall time (:attr:`FitReport.seconds`). A loop run
        outside any fit counts its loop alone.

    See Also
    --------
    FitReport : The stages of one fit, as ``fit_report_``.

    Examples
    --------
    >>> from skbatch import FitStage
    >>> stage = FitStage(
    ...     name="targets", path="batched", runs_on="numpy", n_items=1000,
    ...     batch_size=400, n_batches=3, n_workers=1, n_batches_run=3,
    ...     n_oom_splits=0, planned_peak_bytes=2e6, budget_gb=0.01,
    ...     device_bytes_per_item=4000.0, host_bytes_per_item=1000.0,
    ...     fixed_bytes=0.0, seconds=0.5,
    ... )
    >>> print(stage.format_plan())  # doctest: +ELLIPSIS
    targets: 1,000 targets in 3 batches of up to 400 on numpy; planned peak ...
    >>> print(stage.format_summary())
    targets: done in 0.50 s on numpy: 3 batches, 0 out-of-memory splits
    """

    name: str
    path: str
    runs_on: str
    n_items: int
    batch_size: int
    n_batches: int
    n_workers: int
    n_batches_run: int
    n_oom_splits: int
    planned_peak_bytes: float
    budget_gb: float
    device_bytes_per_item: float
    host_bytes_per_item: float
    fixed_bytes: float
    seconds: float

    def format_plan(self):
        """The line ``verbose=1`` prints before the loop.

        Returns
        -------
        line : str
        """
        items = f"{self.name}: {_count(self.n_items, self.name)} in"
        if self.path == "parallel":
            return (
                f"{items} windows of {self.batch_size:,} on "
                f"{_count(self.n_workers, 'joblib workers')}"
            )
        side_by_side = f", {self.n_workers} side by side" if self.n_workers > 1 else ""
        if self.path == "cluster":
            side_by_side = (
                f" on a dask cluster of {_count(self.n_workers, 'worker threads')}"
            )
        return (
            f"{items} {_count(self.n_batches, 'batches')} of up to "
            f"{self.batch_size:,} on {self.runs_on}{side_by_side}; planned peak "
            f"{self.planned_peak_bytes / GB:.3g} GB of a {self.budget_gb:.3g} GB "
            "budget"
        )

    def format_summary(self):
        """The line ``verbose=1`` prints after the loop.

        Returns
        -------
        line : str
        """
        done = f"{self.name}: done in {self.seconds:.2f} s"
        if self.path == "parallel":
            return done
        return (
            f"{done} on {self.runs_on}: {_count(self.n_batches_run, 'batches')}, "
            f"{_count(self.n_oom_splits, 'out-of-memory splits')}"
        )


# Columns of FitReport's table: heading, value, alignment and format; text is
# left-aligned, figures right-aligned.
_COLUMNS = (
    ("stage", attrgetter("name"), "<"),
    ("path", attrgetter("path"), "<"),
    ("on", attrgetter("runs_on"), "<"),
    ("items", attrgetter("n_items"), ">,"),
    ("batch", attrgetter("batch_size"), ">,"),
    ("batches", attrgetter("n_batches_run"), ">,"),
    ("workers", attrgetter("n_workers"), ">"),
    ("OOM splits", attrgetter("n_oom_splits"), ">"),
    ("peak GB", lambda stage: stage.planned_peak_bytes / GB, ">.3g"),
    ("budget GB", attrgetter("budget_gb"), ">.3g"),
    ("seconds", attrgetter("seconds"), ">.2f"),
)


@dataclass(frozen=True)
class FitReport:
    """A read-only record of how a fit ran, published as ``fit_report_``.

    Every estimator of skbatch sets ``fit_report_`` at the end of a
    successful ``fit``; a fit that fails leaves the previous report (or
    none) in place, like every other fitted attribute. The stages are the
    loops the engine ran during the fit, in order, those of a nested fit
    (the estimator a :class:`PermutationScorer` or a
    :class:`BootstrapEstimator` fits on all the data) included. The refits
    that joblib workers run are one ``"parallel"`` stage of the fit that
    sent them.

    Attributes
    ----------
    backend : Backend
        Where the estimator computes (its ``backend_``).
    stages : tuple of FitStage
        The engine's loops, in the order they ran. Their seconds add up to
        the fit's wall time: each counts the work that led to its loop (the
        decomposition it runs on), the last the work after it.

    See Also
    --------
    FitStage : One loop: its plan, memory model and what happened.

    Examples
    --------
    >>> import numpy as np
    >>> from skbatch import BatchedRidge
    >>> rng = np.random.default_rng(0)
    >>> X, Y = rng.standard_normal((50, 5)), rng.standard_normal((50, 300))
    >>> report = BatchedRidge(n_targets_batch=100).fit(X, Y).fit_report_
    >>> report.backend
    Backend('numpy', 'cpu')
    >>> [(s.name, s.n_items, s.batch_size, s.n_batches) for s in report.stages]
    [('targets', 300, 100, 3)]
    >>> print(report)  # doctest: +ELLIPSIS
    stage    path     on     items  batch  batches  workers  OOM splits ...
    targets  batched  numpy    300    100        3 ...
    """

    backend: Backend
    stages: tuple

    def __post_init__(self):
        # A list given by mistake would leave the record mutable.
        object.__setattr__(self, "stages", tuple(self.stages))

    @property
    def seconds(self):
        """The fit's wall time: the sum of its stages' seconds.

        Returns
        -------
        seconds : float
        """
        return float(sum(stage.seconds for stage in self.stages))

    def __str__(self):
        cells = [[heading for heading, _, _ in _COLUMNS]]
        cells += [
            [format(value(stage), spec[1:]) for _, value, spec in _COLUMNS]
            for stage in self.stages
        ]
        widths = [max(len(row[k]) for row in cells) for k in range(len(_COLUMNS))]
        return "\n".join(
            "  ".join(
                f"{cell:{spec[0]}{width}}"
                for cell, width, (_, _, spec) in zip(row, widths, _COLUMNS)
            ).rstrip()
            for row in cells
        )


@contextlib.contextmanager
def collect_stages(verbose=0):
    """Gather the stages the engine records inside the block, into a list.

    ``verbose`` is the fit's: at ``verbose >= 1`` the summary lines of the
    stages of fits nested in the block are printed too.

    Blocks nest: an inner block's stages are also in the outer block's list.
    When the block ends, its last stage takes the block's time that no
    stage counted (the work after the last loop), in every list holding it,
    and its summary line is printed.
    """
    stages = []
    clock = _CLOCK.get()
    clock_token = None
    if clock is None:
        clock = _FitClock(verbose)
        clock_token = _CLOCK.set(clock)
    else:
        clock.flush()
        clock.mark = time.perf_counter()
    started = clock.mark
    token = _COLLECTORS.set((*_COLLECTORS.get(), stages))
    try:
        yield stages
        _close(stages, time.perf_counter() - started, clock)
    finally:
        _COLLECTORS.reset(token)
        if clock_token is not None:
            clock.flush()
            _CLOCK.reset(clock_token)


def _close(stages, seconds, clock):
    """Give the block's last stage the ``seconds`` no stage counted."""
    uncounted = seconds - sum(stage.seconds for stage in stages)
    if stages and uncounted > 0:
        last = stages[-1]
        total = replace(last, seconds=last.seconds + uncounted)
        for collected in _COLLECTORS.get():
            for k, stage in enumerate(collected):
                if stage is last:
                    collected[k] = total
        if clock.pending is not None and clock.pending[0] is last:
            clock.pending = (total, *clock.pending[1:])
    clock.flush()
    clock.mark = time.perf_counter()


def loop_started():
    """When the clock of a loop starting now starts: where the previous stage
    of the fit ended (or the fit started), now outside a fit. Prints the
    summary line held back for the previous stage."""
    clock = _CLOCK.get()
    if clock is None:
        return time.perf_counter()
    clock.flush()
    return clock.mark


def stage_finished(stage, verbose, say):
    """Print the summary line of ``stage`` (``say(verbose, line)``), or hold
    it back inside a fit, where the stage may still take the fit's work after
    its loop."""
    clock = _CLOCK.get()
    if clock is None:
        say(verbose, stage.format_summary())
        return
    clock.flush()
    clock.pending = (stage, max(verbose, clock.verbose), say)


@contextlib.contextmanager
def stages_not_collected():
    """Record nothing of the block into the open collectors.

    For joblib tasks: whether they run in this thread (one worker), in other
    threads or elsewhere, the fits they run are no stages of the caller's.
    """
    token = _COLLECTORS.set(())
    clock_token = _CLOCK.set(None)
    try:
        yield
    finally:
        _CLOCK.reset(clock_token)
        _COLLECTORS.reset(token)


def record_stage(stage):
    """Append ``stage`` to every collector open in this context; the next
    stage's clock starts now."""
    for stages in _COLLECTORS.get():
        stages.append(stage)
    clock = _CLOCK.get()
    if clock is not None:
        clock.mark = time.perf_counter()


def _now():
    """The clock progress is timed by (a function, so tests can replace it)."""
    return time.perf_counter()


def format_duration(seconds):
    """``"4.2 s"``, ``"3 min 07 s"``, ``"2 h 05 min"``: as a log reader reads it."""
    if round(seconds, 1) < _MINUTE:
        return f"{seconds:.1f} s"
    seconds = round(seconds)
    if seconds < _HOUR:
        return f"{seconds // _MINUTE} min {seconds % _MINUTE:02d} s"
    return f"{seconds // _HOUR} h {seconds % _HOUR // _MINUTE:02d} min"


class Progress:
    """How far one engine loop is: its bar, its lines in a log, its log records.

    The engine opens one per loop (``with Progress(...) as progress``) and
    calls :meth:`update` as batches complete. It never outlives the loop,
    so no estimator holds one (a bar does not pickle).

    - The tqdm ``bar`` is updated in every case (a disabled bar ignores it).
    - With ``in_log`` (``verbose >= 1`` where the bar does not show: stdout
      or stderr is a file, as in a batch job), a plain line on stdout says
      the items done of the total, the time elapsed, the time left (elapsed
      time times items left over items done) and the estimated cost of the
      loop (elapsed plus left). It is printed once a batch completes if
      ``PROGRESS_INTERVAL_S`` seconds passed since the last line (the plan
      line counts), or if the loop is estimated to take
      ``PROGRESS_QUIET_S`` or more and the batch is its first or reaches a
      new ``PROGRESS_STEPS``-th of the items. A loop estimated to take less
      says only its plan and its summary; the last batch prints nothing,
      the summary follows.
    - Every batch is logged on the ``"skbatch"`` logger, at INFO with
      ``verbose >= 2`` and at DEBUG otherwise, for whoever configures it.

    Parameters
    ----------
    bar : tqdm.tqdm
        The loop's progress bar, shown or not.
    total : int
        Items of the loop.
    desc : str
        What the items are (``"permutations"``...), the lines' prefix.
    verbose : int
        The estimator's ``verbose``.
    in_log : bool
        Print plain progress lines.
    say : callable
        ``say(verbose, line)``, how the engine prints a line.
    """

    def __init__(self, bar, *, total, desc, verbose, in_log, say):
        self.bar = bar
        self.total = total
        self.desc = desc
        self.verbose = verbose
        self.in_log = in_log
        self.say = say
        self.done = 0
        self.n_updates = 0
        self.steps_done = 0
        self.started = self.last_line = _now()

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc_info):
        return self.bar.__exit__(*exc_info)

    def reach(self, done):
        """Record ``done`` items done in all; a count already passed is ignored.

        For loops that may run a window of items again (a lost dask worker):
        its items are counted once.
        """
        if done > self.done:
            self.update(done - self.done)

    def update(self, n):
        """Record ``n`` more items done, and say so where it is due."""
        self.bar.update(n)
        self.done += n
        self.n_updates += 1
        now = _now()
        elapsed = now - self.started
        left = elapsed * (self.total - self.done) / self.done
        logger.log(
            logging.INFO if self.verbose >= 2 else logging.DEBUG,
            "%s: batch of %d done, %d of %d (%.0f%%) in %s, about %s left",
            self.desc,
            n,
            self.done,
            self.total,
            100 * self.done / self.total,
            format_duration(elapsed),
            format_duration(left),
        )
        steps = self.done * PROGRESS_STEPS // self.total
        new_step = steps > self.steps_done or self.n_updates == 1
        self.steps_done = steps
        if not self.in_log or self.done >= self.total:
            return
        long = elapsed + left >= PROGRESS_QUIET_S
        if (new_step and long) or now - self.last_line >= PROGRESS_INTERVAL_S:
            self.last_line = now
            self.say(self.verbose, self.format_line(elapsed, left))

    def format_line(self, elapsed, left):
        """The progress line: done of total, elapsed, left, estimated cost.

        Parameters
        ----------
        elapsed, left : float
            Seconds since the loop started, and estimated to its end.

        Returns
        -------
        line : str
        """
        return (
            f"{self.desc}: {self.done:,} of {_count(self.total, self.desc)} "
            f"({100 * self.done / self.total:.0f}%) in {format_duration(elapsed)}, "
            f"about {format_duration(left)} left of an estimated "
            f"{format_duration(elapsed + left)}"
        )
