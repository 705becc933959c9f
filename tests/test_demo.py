import logging
import re
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from skbatch import _demo
from skbatch.__main__ import main
from skbatch.testing import simulate_oom

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FIGURE_NAMES = [f"{name}.png" for name in _demo.FIGURES]


def _check_pngs(folder):
    for name in FIGURE_NAMES:
        path = folder / name
        assert path.is_file(), name
        content = path.read_bytes()
        assert content.startswith(PNG_SIGNATURE), name
        assert len(content) > 1000, name


@pytest.mark.slow
def test_main_demo_finds_the_true_effects_and_writes_figures(
    tmp_path, capsys, monkeypatch
):
    results = []
    run_demo = _demo.run_demo

    def spy(**kwargs):
        results.append(run_demo(**kwargs))
        return results[-1]

    monkeypatch.setattr(_demo, "run_demo", spy)
    argv = ["demo", "--targets", "500", "--permutations", "100", "--bootstrap"]
    argv += ["100", "--out", str(tmp_path / "figs"), "--verbose", "0"]
    assert main(argv) == 0
    (result,) = results

    assert result.n_targets == 500
    assert result.n_true_effects == 50
    # FWER control: a false positive anywhere has probability <= 5%.
    assert result.n_false_positives <= 1
    assert result.recall >= 0.75
    assert result.n_significant == result.n_recovered + result.n_false_positives
    assert result.median_r2_signal > 0.05 > result.median_r2_noise
    # Bootstrap intervals find most true weights and few of the zero ones.
    assert result.n_weights_detected >= 0.5 * result.n_true_weights > 0
    assert result.n_zero_weights_excluded <= 0.15 * result.n_zero_weights

    names = [step.name.split(":")[0] for step in result.steps]
    assert names == ["BatchedRidge", "PermutationScorer", "BootstrapEstimator"]
    for step in result.steps:
        assert step.device == "numpy"
        assert step.seconds > 0
        assert step.n_batches >= 1
        assert step.peak_memory_gb > 0

    _check_pngs(tmp_path / "figs")
    out, err = capsys.readouterr()
    assert (
        f"true effects recovered: {result.n_recovered} of 50 "
        f"({result.recall:.0%}); false positives: {result.n_false_positives} of 450"
    ) in out
    assert "PermutationScorer: 100 permutations" in out
    assert str(tmp_path / "figs" / "overview.png") in out
    # verbose=0: no progress bar.
    assert err == ""


@pytest.mark.slow
def test_python_m_skbatch_demo(tmp_path):
    out = tmp_path / "demo out"
    command = [sys.executable, "-m", "skbatch", "demo", "--targets", "200"]
    command += ["--samples", "100", "--features", "10", "--permutations", "20"]
    command += ["--bootstrap", "20", "--out", str(out)]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "true effects recovered:" in result.stdout
    assert "200 targets (20 with signal), 100 samples x 10 features" in result.stdout
    _check_pngs(out)
    # verbose=1 names each step and prints each loop's plan and summary in
    # plain lines on stdout, and draws no bar when stderr is not a terminal.
    assert "PermutationScorer: 20 permutations ..." in result.stdout
    assert "[skbatch] permutations: 20 permutations in " in result.stdout
    assert "%|" not in result.stderr


def test_demo_without_matplotlib_still_reports(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    result = _tiny_demo(tmp_path / "figs", verbose=0)
    assert result.figures == {}
    assert not (tmp_path / "figs").exists()
    report = _demo.format_report(result, (40, 4), 0)
    assert "figures: skipped, matplotlib is not installed" in report
    assert "skbatch[plot]" in report


def _tiny_demo(tmp_path, verbose):
    return _demo.run_demo(
        n_targets=30,
        n_samples=40,
        n_features=4,
        n_permutations=5,
        n_bootstrap=5,
        out=tmp_path,
        verbose=verbose,
    )


@pytest.mark.parametrize("verbose", [0, 2])
def test_demo_logs_only_what_the_user_asked_for(tmp_path, caplog, monkeypatch, verbose):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    logger = logging.getLogger("skbatch")
    before = (logger.level, logger.propagate, logger.handlers[:])
    with caplog.at_level(logging.INFO, logger="skbatch"):
        result = _tiny_demo(tmp_path, verbose)
    assert all(step.n_batches >= 1 for step in result.steps)
    levels = {record.levelno for record in caplog.records}
    assert levels == (set() if verbose == 0 else {logging.INFO})
    # The steps are read from the fits' reports: the logger is left alone.
    assert (logger.level, logger.propagate, logger.handlers[:]) == before


def test_demo_steps_count_the_out_of_memory_splits(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    plain = _tiny_demo(tmp_path, verbose=0)
    with simulate_oom(max_items=2):
        split = _tiny_demo(tmp_path, verbose=0)
    assert len(plain.steps) >= 2
    assert [step.n_oom_recoveries for step in plain.steps] == [0] * len(plain.steps)
    # Every step runs batches of more than two items (targets, permutations,
    # replicates): each splits, and runs more batches.
    for plain_step, split_step in zip(plain.steps, split.steps, strict=True):
        assert split_step.n_oom_recoveries > 0
        assert split_step.n_batches > plain_step.n_batches


def test_demo_reports_the_gpu_peak_when_torch_used_cuda(tmp_path, monkeypatch):
    class FakeCuda:
        """torch.cuda of two cards, torch having used 37.5 GB (no host RSS here)."""

        resets = 0

        def device_count(self):
            return 2

        def reset_peak_memory_stats(self, index):
            FakeCuda.resets += 1

        def max_memory_allocated(self, index):
            return 37.5e9 if index == 1 else 0

    monkeypatch.setattr(_demo, "_cuda", FakeCuda)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    result = _tiny_demo(tmp_path, verbose=0)
    assert FakeCuda.resets == 2 * len(result.steps)
    assert [step.peak_gpu_memory_gb for step in result.steps] == [37.5] * len(
        result.steps
    )
    report = _demo.format_report(result, (40, 4), 0)
    assert "peak RSS  peak GPU" in report
    assert report.count("   37.50GB") == len(result.steps)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--targets", "0"], "--targets: must be an int >= 1, got '0'"),
        (["--permutations", "x"], "--permutations: must be an int >= 1, got 'x'"),
        (["--bootstrap", "1"], "--bootstrap: must be an int >= 2, got '1'"),
        (["--samples", "10"], "--samples: must be an int >= 20, got '10'"),
        (["--device", "tpu"], "--device tpu: device must be one of"),
    ],
)
def test_demo_rejects_bad_options_before_work(argv, message, capsys):
    with pytest.raises(SystemExit) as excinfo:
        main(["demo", *argv])
    assert excinfo.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "device, missing",
    [
        ("cuda", "no CUDA device here"),
        ("cuda:3", "no CUDA device cuda:3 here"),
        ("mps", "no MPS device here"),
        ("gpu", "no GPU here"),
    ],
)
def test_demo_names_a_missing_device_before_fitting(
    device, missing, capsys, fake_cuda, monkeypatch
):
    import torch

    # Two fake CUDA cards: "cuda" and "cuda:1" exist, "cuda:3" does not.
    if device != "cuda:3":
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(
        _demo, "run_demo", lambda **kwargs: pytest.fail("the demo started")
    )
    with pytest.raises(SystemExit) as excinfo:
        main(["demo", "--device", device])
    assert excinfo.value.code == 2
    err = capsys.readouterr().err
    assert f"--device {device}: {missing}; run `skbatch demo --device cpu`" in err
    # Nothing was fitted, so there is no model to move.
    assert "to_device" not in err


def test_simulation_matches_its_ground_truth():
    data = _demo.simulate_encoding_data(20_000, 6, 40, random_state=1)
    signal = data.has_signal
    assert signal.sum() == 4
    assert np.all(data.coef[~signal] == 0)
    assert np.all((data.coef[signal] != 0).sum(axis=1) == 6)
    assert np.all((data.r2[signal] >= 0.1) & (data.r2[signal] <= 0.5))
    # The simulated share of variance explained is the one drawn.
    explained = np.var(data.X @ data.coef.T, axis=0) / np.var(data.Y, axis=0)
    np.testing.assert_allclose(explained[signal], data.r2[signal], atol=0.02)
    # Neighbouring features correlate as documented.
    corr = np.corrcoef(data.X, rowvar=False)
    np.testing.assert_allclose(np.diag(corr, 1), _demo.FEATURE_CORRELATION, atol=0.03)


def test_simulation_is_seeded():
    a = _demo.simulate_encoding_data(30, 4, 10, random_state=3)
    b = _demo.simulate_encoding_data(30, 4, 10, random_state=3)
    np.testing.assert_array_equal(a.Y, b.Y)
    with pytest.raises(ValueError, match="n_samples must be an int >= 20"):
        _demo.simulate_encoding_data(5, 4, 10)


def test_interval_counts_match_a_loop_over_the_weights():
    rng = np.random.default_rng(0)
    true = rng.standard_normal((30, 12)) * (rng.random((30, 12)) < 0.3)
    lower = rng.normal(-0.2, 1, true.shape)
    upper = lower + rng.uniform(0, 1, true.shape)
    counts = _demo.count_intervals_excluding_zero(true, lower, upper)

    expected = dict.fromkeys(counts, 0)
    for t in range(true.shape[0]):
        for f in range(true.shape[1]):
            excludes = lower[t, f] > 0 or upper[t, f] < 0
            if true[t, f] != 0:
                expected["n_true_weights"] += 1
                expected["n_weights_detected"] += excludes
                continue
            expected["n_zero_weights"] += 1
            expected["n_zero_weights_excluded"] += excludes
            neighbours = [g for g in (f - 1, f + 1) if 0 <= g < true.shape[1]]
            if any(true[t, g] != 0 for g in neighbours):
                expected["n_zero_beside"] += 1
                expected["n_zero_beside_excluded"] += excludes
    assert counts == expected


def test_report_explains_zero_weights_whose_interval_excludes_zero():
    result = _demo.DemoResult(
        n_targets=2000,
        n_true_effects=200,
        n_significant=160,
        n_recovered=160,
        n_false_positives=0,
        median_r2_signal=0.17,
        median_r2_noise=-0.01,
        n_weights_detected=866,
        n_true_weights=1288,
        n_zero_weights_excluded=348,
        n_zero_weights=5152,
        n_zero_beside_excluded=199,
        n_zero_beside=2325,
    )
    report = _demo.format_report(result, (300, 40), 0)
    assert "348 of 5152 zero weights" in report
    # 199 / 2325 and (348 - 199) / (5152 - 2325), rounded to percents.
    assert "199 of 2325 (9%) next to a non-zero weight" in report
    assert "149 of 2827 (5%) elsewhere" in report
    assert "ridge shrinks the non-zero weights" in report
    assert "correlated neighbouring\n  features" in report
    assert "about 5% of the time by chance" in report


def test_report_uses_the_singular_for_one():
    step = _demo.StepReport("PermutationScorer: 1 permutation", 1.0, "numpy", 1, 0, 0.1)
    result = _demo.DemoResult(
        n_targets=1,
        n_true_effects=1,
        n_significant=1,
        n_recovered=1,
        n_false_positives=0,
        median_r2_signal=0.3,
        median_r2_noise=float("nan"),
        n_weights_detected=1,
        n_true_weights=1,
        n_zero_weights=0,
        steps=[step],
    )
    report = _demo.format_report(result, (20, 1), 0)
    assert "skbatch demo: 1 target (1 with signal), 20 samples x 1 feature," in report
    assert "1 of 1 true non-zero weight, 0 of 0 zero weights" in report
    assert not re.search(r"\b1 (targets|features|weights|permutations)\b", report)


def test_step_names_use_the_singular_for_one(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    result = _demo.run_demo(
        n_targets=30,
        n_samples=40,
        n_features=4,
        n_permutations=1,
        n_bootstrap=2,
        out=tmp_path,
        verbose=0,
    )
    names = [step.name for step in result.steps]
    assert "PermutationScorer: 1 permutation" in names


@pytest.mark.parametrize(
    "n_features, title", [(30, "largest 20 of 30 weights"), (8, "all 8 weights")]
)
def test_bootstrap_panel_says_which_weights_it_shows(n_features, title):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from skbatch import BootstrapEstimator
    from skbatch.plotting import DEFAULT_TOP_K

    assert DEFAULT_TOP_K == 20
    data = _demo.simulate_encoding_data(60, n_features, 20, random_state=0)
    significant = data.has_signal
    boot = BootstrapEstimator(
        _demo.BatchedRidge(_demo.ALPHAS), n_bootstrap=5, random_state=0
    ).fit(data.X, data.Y[:, significant])
    n = int(significant.sum())
    scorer = SimpleNamespace(score_=np.ones(20), pvalue_fwer_=np.ones(20) / 2)
    ax = Figure().add_subplot()
    _demo._plot_intervals(ax, data, scorer, boot, significant)
    target = np.flatnonzero(significant)[0]
    assert n >= 1
    assert ax.get_title() == f"BootstrapEstimator: target {target}, {title}"


def test_captions_explain_the_p_value_floor_and_the_zero_weights():
    result = _demo.DemoResult(
        n_targets=2000,
        n_true_effects=200,
        n_significant=150,
        n_recovered=150,
        n_false_positives=0,
        median_r2_signal=0.2,
        median_r2_noise=-0.01,
        n_zero_weights_excluded=300,
        n_zero_weights=4800,
        n_zero_beside_excluded=120,
        n_zero_beside=1000,
    )
    scorer = SimpleNamespace(n_permutations=200)
    boot = SimpleNamespace(confidence_level=0.95)
    captions = _demo.figure_captions(result, scorer, boot, 60, 240)
    assert set(captions) == set(_demo.FIGURES) - {"overview"}
    floor = -np.log10(1 / 201)  # the smallest p-value of 200 permutations
    assert f"stops at {floor:.2f}" in captions["permutation_test"]
    assert "1/(200 + 1) = 0.005" in captions["permutation_test"]
    intervals = captions["bootstrap_intervals"]
    assert "about 5% of the zero weights exclude 0 by chance" in intervals
    assert "ridge shrinks" in intervals and "correlated" in intervals
    assert "300 of 4800 (6%) zero weights" in intervals
    assert "120 of 1000 (12%) of those next to a non-zero weight" in intervals
    assert "60 rows" in captions["ridge_scores"]
    none = _demo.figure_captions(result, scorer, None, 60, 240)
    assert "No target was significant" in none["bootstrap_intervals"]


def test_every_figure_carries_its_captions_and_the_floor(tmp_path, monkeypatch):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    drawn = {}
    save = Figure.savefig

    def recording_savefig(figure, path, **kwargs):
        drawn[path.name] = figure
        return save(figure, path, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording_savefig)
    result = _tiny_demo(tmp_path, verbose=0)
    assert sorted(drawn) == sorted(FIGURE_NAMES)
    texts = {name: [t.get_text() for t in fig.texts] for name, fig in drawn.items()}
    for name in ("ridge_scores", "permutation_test", "bootstrap_intervals"):
        (caption,) = texts[f"{name}.png"]
        assert caption.startswith(texts["overview.png"][_demo.FIGURES.index(name)])
        # Wrapped to the panel's width.
        assert max(map(len, caption.splitlines())) <= _demo.CAPTION_WIDTH
    assert "1/(5 + 1)" in texts["permutation_test.png"][0].replace("\n", " ")
    # The panel draws the floor, log10(5 + 1), where its caption says.
    (ax,) = drawn["permutation_test.png"].axes
    floors = [line for line in ax.lines if line.get_linestyle() == ":"]
    assert [line.get_ydata()[0] for line in floors] == [np.log10(6)]
    assert ax.get_ylim()[1] > np.log10(6)
    assert result.figures
