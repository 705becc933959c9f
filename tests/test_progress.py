import io
import logging
import os
import pickle
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.tree import DecisionTreeRegressor
from tqdm.auto import tqdm

import skbatch
import skbatch._engine
import skbatch._engine.report
from skbatch import BatchedRidge, BootstrapEstimator, PermutationScorer
from skbatch.testing import simulate_oom


class RecordingTqdm(tqdm):
    """tqdm that remembers its instances and the progress they were given."""

    instances = []

    def __init__(self, *args, **kwargs):
        self.progress = 0
        self.label = kwargs.get("desc")
        super().__init__(*args, **kwargs)
        # close() disables every bar: remember whether this one was shown.
        self.shown = not self.disable
        type(self).instances.append(self)

    def update(self, n=1):
        self.progress += n
        return super().update(n)


class TTY(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def bars(monkeypatch):
    monkeypatch.setattr(RecordingTqdm, "instances", [])
    monkeypatch.setattr(skbatch._engine.planner, "tqdm", RecordingTqdm)
    return RecordingTqdm.instances


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 4))
    Y = X @ rng.standard_normal((4, 3)) + rng.standard_normal((40, 3))
    return X, Y


def _estimators():
    return [
        (
            "permutations",
            37,
            PermutationScorer(Ridge(), n_permutations=37, random_state=0, verbose=1),
        ),
        (
            "permutations",
            6,
            PermutationScorer(
                DecisionTreeRegressor(max_depth=2),
                n_permutations=6,
                cv=2,
                random_state=0,
                verbose=1,
            ),
        ),
        (
            "replicates",
            23,
            BootstrapEstimator(Ridge(), n_bootstrap=23, random_state=0, verbose=1),
        ),
        (
            "replicates",
            5,
            BootstrapEstimator(
                DecisionTreeRegressor(max_depth=2),
                n_bootstrap=5,
                attributes=["feature_importances_"],
                random_state=0,
                verbose=1,
            ),
        ),
        ("targets", 3, BatchedRidge(verbose=1)),
    ]


@pytest.mark.parametrize(
    "desc, total, estimator",
    _estimators(),
    ids=["perm-ridge", "perm-generic", "boot-linear", "boot-generic", "ridge"],
)
def test_bar_total_is_the_number_of_items(bars, data, desc, total, estimator):
    X, Y = data
    estimator.fit(X, Y)
    mine = [bar for bar in bars if bar.label == desc]
    assert mine, [bar.label for bar in bars]
    assert mine[0].total == total
    assert mine[0].progress == total
    # Bars live only during fit: nothing to pickle on the estimator.
    assert not any(isinstance(v, tqdm) for v in vars(estimator).values())
    restored = pickle.loads(pickle.dumps(estimator))
    np.testing.assert_allclose(restored.predict(X), estimator.predict(X))


def test_verbose_0_prints_nothing(bars, data, capsys, caplog, monkeypatch):
    monkeypatch.setattr(sys, "stderr", TTY())
    X, Y = data
    with caplog.at_level(logging.INFO, logger="skbatch"):
        PermutationScorer(Ridge(), n_permutations=20, random_state=0).fit(X, Y)
        BootstrapEstimator(Ridge(), n_bootstrap=20, random_state=0).fit(X, Y)
    assert sys.stderr.getvalue() == ""
    assert capsys.readouterr() == ("", "")
    assert caplog.records == []
    assert bars and not any(bar.shown for bar in bars)


def test_verbose_1_shows_the_bar_on_a_terminal(bars, data, monkeypatch):
    terminal = TTY()
    monkeypatch.setattr(sys, "stderr", terminal)
    X, Y = data
    PermutationScorer(Ridge(), n_permutations=20, verbose=1).fit(X, Y)
    assert "permutations:   0%|" in terminal.getvalue()
    assert [(bar.shown, bar.total, bar.progress) for bar in bars] == [(True, 20, 20)]


def test_verbose_1_prints_plain_lines_and_hides_the_bar_in_a_log(bars, data, capsys):
    # A batch job's log: stdout and stderr are files, not terminals.
    X, Y = data
    PermutationScorer(Ridge(), n_permutations=20, verbose=1).fit(X, Y)
    out, err = capsys.readouterr()
    assert err == ""
    assert bars and not any(bar.shown for bar in bars)
    plan, summary = out.splitlines()
    assert plan.startswith("[skbatch] permutations: 20 permutations in ")
    assert "on numpy" in plan and "planned peak" in plan
    assert summary.startswith("[skbatch] permutations: done in ")
    assert "0 out-of-memory splits" in summary


@pytest.mark.parametrize(
    "desc, total, estimator",
    _estimators(),
    ids=["perm-ridge", "perm-generic", "boot-linear", "boot-generic", "ridge"],
)
def test_every_estimator_says_its_plan_and_summary(
    data, capsys, desc, total, estimator
):
    X, Y = data
    estimator.fit(X, Y)
    lines = [
        line
        for line in capsys.readouterr().out.splitlines()
        if line.startswith(f"[skbatch] {desc}: ")
    ]
    assert len(lines) == 2, lines
    noun = desc[:-1] if total == 1 else desc
    assert lines[0].startswith(f"[skbatch] {desc}: {total} {noun} in ")
    assert "done in" in lines[1]


def test_one_item_is_singular(data, capsys):
    X, Y = data
    BatchedRidge(verbose=1).fit(X, Y[:, 0])
    out = capsys.readouterr().out
    assert "1 target in 1 batch of" in out and "1 targets" not in out


def test_verbose_1_shows_the_bar_in_a_notebook(bars, data, monkeypatch):
    # In Jupyter, tqdm.auto is the widget class of tqdm.notebook, whose output
    # stream is not a terminal.
    notebook = types.ModuleType("tqdm.notebook")
    notebook.tqdm = RecordingTqdm
    monkeypatch.setitem(sys.modules, "tqdm.notebook", notebook)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    X, Y = data
    PermutationScorer(Ridge(), n_permutations=20, verbose=1).fit(X, Y)
    assert bars and all(bar.shown for bar in bars)


def test_verbose_2_also_logs_the_plan(bars, data, capsys, caplog):
    X, Y = data
    with caplog.at_level(logging.INFO, logger="skbatch"):
        BootstrapEstimator(
            Ridge(), n_bootstrap=30, random_state=0, max_memory_gb=1, verbose=2
        ).fit(X, Y)
    out, err = capsys.readouterr()
    assert "[skbatch] replicates: 30 replicates in" in out
    assert err == ""
    messages = [record.getMessage() for record in caplog.records]
    assert any(
        "30 replicates in batches of" in m and "budget 1 GB on numpy" in m
        for m in messages
    ), messages
    assert any("out-of-memory recoveries" in m for m in messages), messages


def test_verbose_2_logs_the_joblib_windows(bars, data, caplog):
    X, Y = data
    with caplog.at_level(logging.INFO, logger="skbatch"):
        PermutationScorer(
            DecisionTreeRegressor(), n_permutations=5, cv=2, verbose=2
        ).fit(X, Y)
    assert any(
        "5 permutations in windows of 5" in r.getMessage() for r in caplog.records
    )


def test_plan_is_logged_at_debug_without_verbose(data, caplog):
    X, Y = data
    with caplog.at_level(logging.DEBUG, logger="skbatch"):
        BatchedRidge().fit(X, Y)
    messages = [record.getMessage() for record in caplog.records]
    assert messages[0].startswith("targets: 3 targets in batches of ")
    assert all(r.levelno == logging.DEBUG for r in caplog.records)


# --- progress lines in a log file --------------------------------------------


class Clock:
    """A clock for skbatch._engine.report._now: ``step`` more seconds a reading."""

    def __init__(self, step):
        self.step = step
        self.now = 0.0

    def __call__(self):
        self.now += self.step
        return self.now


def progress_lines(out, desc):
    """The progress lines of loop ``desc``: neither its plan nor its summary."""
    return [
        line
        for line in out.splitlines()
        if line.startswith(f"[skbatch] {desc}: ") and " left of an estimated " in line
    ]


def make_progress(total, *, in_log=True, verbose=1):
    said = []
    bar = tqdm(total=total, disable=True)
    progress = skbatch._engine.report.Progress(
        bar,
        total=total,
        desc="permutations",
        verbose=verbose,
        in_log=in_log,
        say=lambda verbose, line: said.append(line),
    )
    return progress, said


def test_a_long_loop_says_its_first_batch_and_every_tenth(monkeypatch):
    clock = Clock(0.0)
    monkeypatch.setattr(skbatch._engine.report, "_now", clock)
    progress, said = make_progress(1000)
    # 50 batches of 20 items, 1 s each: an estimated 50 s.
    for _ in range(50):
        clock.step = 1.0
        progress.update(20)
        clock.step = 0.0
    assert len(said) == 10  # the first batch, then 10%, 20% ... 90%.
    assert said[0] == (
        "permutations: 20 of 1,000 permutations (2%) in 1.0 s, about 49.0 s left "
        "of an estimated 50.0 s"
    )
    assert said[1].startswith("permutations: 100 of 1,000 permutations (10%) in 5.0")
    assert said[-1].startswith("permutations: 900 of 1,000 permutations (90%)")
    assert "about 5.0 s left of an estimated 50.0 s" in said[-1]


def test_a_step_longer_than_the_interval_still_says_it_runs(monkeypatch):
    clock = Clock(0.0)
    monkeypatch.setattr(skbatch._engine.report, "_now", clock)
    progress, said = make_progress(1000)
    clock.step = 100.0
    progress.update(1)  # the first batch: 100 s, the estimate is 28 h.
    clock.step = skbatch._engine.report.PROGRESS_INTERVAL_S / 3
    for _ in range(5):
        # The same 10% step: a line when a full interval passed since the last.
        progress.update(1)
    assert [line.split(" (")[0] for line in said] == [
        "permutations: 1 of 1,000 permutations",
        "permutations: 4 of 1,000 permutations",
    ]
    assert (
        "in 1 min 40 s, about 27 h 45 min left of an estimated 27 h 46 min" in said[0]
    )


def test_a_short_loop_says_nothing_and_the_last_batch_neither(monkeypatch):
    clock = Clock(0.1)
    monkeypatch.setattr(skbatch._engine.report, "_now", clock)
    progress, said = make_progress(10)
    for _ in range(10):
        progress.update(1)  # 0.1 s each: an estimated 1 s.
    assert said == []
    # The last batch of a long loop prints nothing: its summary follows.
    clock.step = skbatch._engine.report.PROGRESS_INTERVAL_S
    progress, said = make_progress(1)
    progress.update(1)
    assert said == []


def test_reach_counts_items_once(monkeypatch):
    monkeypatch.setattr(skbatch._engine.report, "_now", Clock(1.0))
    progress, _ = make_progress(10, in_log=False)
    progress.reach(4)
    progress.reach(2)  # a window run again
    progress.reach(4)
    progress.reach(7)
    assert progress.done == 7 and progress.n_updates == 2


@pytest.mark.parametrize(
    "seconds, text",
    [(0.25, "0.2 s"), (59.94, "59.9 s"), (59.96, "1 min 00 s"), (187, "3 min 07 s")]
    + [(3599.6, "1 h 00 min"), (7500, "2 h 05 min")],
)
def test_durations_read_as_people_read_them(seconds, text):
    assert skbatch._engine.report.format_duration(seconds) == text


def _in_a_log(make, X, Y, capsys, monkeypatch, *, step=10.0):
    """The stdout of ``make().fit(X, Y)`` when every batch takes ``step`` s."""
    monkeypatch.setattr(skbatch._engine.report, "_now", Clock(step))
    capsys.readouterr()
    make().fit(X, Y)
    return capsys.readouterr().out


@pytest.mark.parametrize(
    "desc, total, make",
    [
        ("targets", 10, lambda: BatchedRidge(n_targets_batch=1, verbose=1)),
        (
            "replicates",
            40,
            lambda: BootstrapEstimator(Ridge(), n_bootstrap=40, verbose=1),
        ),
        (
            "permutations",
            8,
            lambda: PermutationScorer(
                DecisionTreeRegressor(max_depth=2), n_permutations=8, cv=2, verbose=1
            ),
        ),
    ],
    ids=["batched targets", "batched replicates", "joblib windows"],
)
def test_every_loop_reports_progress_in_a_log(capsys, monkeypatch, desc, total, make):
    # capsys: stdout and stderr are not terminals, as in a batch job's log.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 4))
    Y = X @ rng.standard_normal((4, 10)) + rng.standard_normal((40, 10))
    # Batches of 4 at most, the replicates' as the targets'.
    with simulate_oom(max_items=4):
        out = _in_a_log(make, X, Y, capsys, monkeypatch)
    lines = progress_lines(out, desc)
    assert lines, out
    done = [
        int(line.split(": ")[1].split(" of ")[0].replace(",", "")) for line in lines
    ]
    assert done == sorted(set(done)) and 0 < done[0] and done[-1] < total
    assert all(f" of {total:,} {desc} (" in line for line in lines)
    # Plan first, summary last, progress in between.
    mine = [line for line in out.splitlines() if line.startswith(f"[skbatch] {desc}")]
    assert " in " in mine[0] and "done in" in mine[-1]
    assert set(mine[1:-1]) == set(lines)


def test_the_bar_on_a_terminal_replaces_the_lines(bars, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stderr", TTY())
    monkeypatch.setattr(sys, "stdout", TTY())
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((30, 3)), rng.standard_normal((30, 6))
    monkeypatch.setattr(skbatch._engine.report, "_now", Clock(10.0))
    BatchedRidge(n_targets_batch=1, verbose=1).fit(X, Y)
    assert progress_lines(sys.stdout.getvalue(), "targets") == []
    assert [(bar.shown, bar.progress) for bar in bars] == [(True, 6)]


def test_stdout_to_a_file_gets_the_lines_while_the_terminal_has_the_bar(
    bars, capsys, monkeypatch
):
    # python job.py > log: the bar on the terminal, the lines in the log.
    monkeypatch.setattr(sys, "stderr", TTY())
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((30, 3)), rng.standard_normal((30, 6))
    out = _in_a_log(
        lambda: BatchedRidge(n_targets_batch=1, verbose=1), X, Y, capsys, monkeypatch
    )
    assert len(progress_lines(out, "targets")) == 5
    assert [bar.shown for bar in bars] == [True]


def test_verbose_2_logs_every_batch(data, caplog, capsys):
    X, Y = data
    with caplog.at_level(logging.INFO, logger="skbatch"), simulate_oom(max_items=7):
        BootstrapEstimator(Ridge(), n_bootstrap=30, verbose=2).fit(X, Y)
    batches = [
        record
        for record in caplog.records
        if record.getMessage().startswith("replicates: batch of ")
    ]
    # Every batch said once, with the count so far.
    sizes = [int(r.getMessage().split()[3]) for r in batches]
    done = [r.getMessage().split(", ")[1].split(" (")[0] for r in batches]
    assert len(batches) >= 5 and max(sizes) <= 7
    assert done == [f"{total} of 30" for total in np.cumsum(sizes)]
    assert done[-1] == "30 of 30"
    assert all(r.levelno == logging.INFO for r in batches)
    assert "about" in batches[0].getMessage() and "left" in batches[0].getMessage()


def test_every_batch_is_logged_at_debug_without_verbose(data, caplog, capsys):
    X, Y = data
    with caplog.at_level(logging.DEBUG, logger="skbatch"):
        BatchedRidge(n_targets_batch=1).fit(X, Y)
    batches = [r for r in caplog.records if "batch of 1 done" in r.getMessage()]
    assert len(batches) == 3
    assert all(r.levelno == logging.DEBUG for r in batches)
    assert capsys.readouterr().out == ""


def test_the_cluster_loop_reports_progress_in_a_log(capsys, monkeypatch):
    distributed = pytest.importorskip("distributed")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 4))
    Y = X @ rng.standard_normal((4, 6)) + rng.standard_normal((40, 6))
    with distributed.Client(
        processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None
    ):
        out = _in_a_log(
            lambda: BatchedRidge(n_targets_batch=1, device="cpu", verbose=1),
            X,
            Y,
            capsys,
            monkeypatch,
        )
    assert "on a dask cluster" in out
    lines = progress_lines(out, "targets")
    assert lines and all(" of 6 targets (" in line for line in lines)


# A job of about this many seconds, long enough for its loop to say how far it
# is in a log, short enough for the slow suite.
JOB_SECONDS = 20

SLOW_JOB = f"""
import time
import numpy as np
from sklearn.linear_model import Ridge
from skbatch import PermutationScorer


class SlowRidge(Ridge):
    def fit(self, X, y, sample_weight=None):
        time.sleep({JOB_SECONDS} / 404)
        return super().fit(X, y, sample_weight=sample_weight)


rng = np.random.default_rng(0)
X = rng.standard_normal((60, 3))
y = X @ rng.standard_normal(3) + rng.standard_normal(60)
# 1 + 200 permutations, 2 folds each: 402 fits, and the one on all data.
PermutationScorer(SlowRidge(), n_permutations=200, cv=2, verbose=1).fit(X, y)
"""


@pytest.mark.slow
def test_a_20_second_job_says_how_far_it_is_in_its_log_file(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SLOW_JOB)
    log = tmp_path / "job.log"
    # The job imports the skbatch these tests import.
    env = {**os.environ, "PYTHONPATH": str(Path(skbatch.__file__).parents[1])}
    with open(log, "w") as stdout:
        subprocess.run(
            [sys.executable, str(script)],
            stdout=stdout,
            stderr=subprocess.STDOUT,
            check=True,
            timeout=10 * JOB_SECONDS,
            env=env,
        )
    out = log.read_text()
    assert "\r" not in out  # no progress bar in a file
    lines = progress_lines(out, "permutations")
    assert len(lines) >= 2, out
    percents = [int(line.split("(")[1].split("%")[0]) for line in lines]
    assert percents == sorted(percents) and percents[-1] < 100
    assert all(" of 200 permutations (" in line for line in lines)
    assert out.splitlines()[-1].startswith("[skbatch] permutations: done in ")
