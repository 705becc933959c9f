import io
import logging
import pickle
import sys
import types

import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.tree import DecisionTreeRegressor
from tqdm.auto import tqdm

import skbatch._engine
from skbatch import BatchedRidge, BootstrapEstimator, PermutationScorer


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
    monkeypatch.setattr(skbatch._engine, "tqdm", RecordingTqdm)
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
