import importlib.metadata
import importlib.util
import io
import re
import subprocess
import sys

import numpy as np
import pytest

import skbatch
import skbatch.__main__
import skbatch.backend
from skbatch.__main__ import info, main
from skbatch.backend import AUTO_GPU_MIN_FLOPS

BACKEND_NAMES = ["numpy", "torch-cpu", "torch-cuda", "torch-mps", "jax-cpu", "jax-gpu"]


def _check_report(text):
    assert re.search(rf"^\s+numpy\s+{re.escape(np.__version__)}$", text, re.MULTILINE)
    assert re.search(
        rf"^\s+scikit-learn\s+{re.escape(importlib.metadata.version('scikit-learn'))}$",
        text,
        re.MULTILINE,
    )
    for name in BACKEND_NAMES:
        assert re.search(rf"^\s+{re.escape(name)}\s", text, re.MULTILINE), name


def test_main_info_returns_0_and_prints_versions_and_backends(capsys, no_gpu):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    _check_report(out)
    assert re.search(
        r"^\s+torch-cuda\s+cuda:0\s+unavailable: torch reports no CUDA", out, re.M
    )
    assert re.search(r"^\s+numpy\s+cpu\s+usable", out, re.MULTILINE)
    assert 'device="auto" picks: numpy: no GPU found' in out
    assert "numpy above" not in out


def test_info_reports_the_auto_choice_with_a_gpu(fake_cuda, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (10e9, 80e9))
    out = io.StringIO()
    info(out=out)
    text = out.getvalue()
    _check_report(text)
    # 10 GB free x 0.8.
    assert re.search(
        r"^\s+torch-cuda\s+cuda:0\s+usable, batch budget 8.0 GB$", text, re.M
    )
    threshold = f"{AUTO_GPU_MIN_FLOPS:.0e}"
    assert f"numpy below {threshold} flops, torch-cuda above" in text


def test_bare_command_prints_help_and_succeeds(capsys):
    # Typing the program's name alone is how a new user asks what it does.
    assert main([]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("usage: skbatch")
    assert "info" in out and "demo" in out
    assert err == ""


def test_version_flag_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as excinfo:
        main(["--version"])
    assert excinfo.value.code == 0
    assert capsys.readouterr().out == f"skbatch {skbatch.__version__}\n"


@pytest.mark.slow
def test_version_matches_the_installed_distribution():
    # The console script and the packaging metadata tell the same version.
    result = subprocess.run(
        [sys.executable, "-m", "skbatch", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["skbatch", skbatch.__version__]


def test_info_prints_the_cheap_facts_before_probing_gpu_libraries(no_gpu, monkeypatch):
    # Importing torch and jax takes seconds: versions and the host budget
    # are already flushed when the first backend is probed.
    flushed_before_probe = []

    class Out(io.StringIO):
        def __init__(self):
            super().__init__()
            self.flushed = ""

        def flush(self):
            self.flushed = self.getvalue()

    out = Out()
    real = skbatch.backend.Backend.missing_reason

    def probe(self):
        flushed_before_probe.append(out.flushed)
        return real(self)

    monkeypatch.setattr(skbatch.backend.Backend, "missing_reason", probe)
    info(out=out)
    first = flushed_before_probe[0]
    assert re.search(rf"^\s+numpy\s+{re.escape(np.__version__)}$", first, re.M)
    assert "Host memory budget:" in first
    assert "torch-cpu" not in first
    assert out.flushed == out.getvalue()


@pytest.mark.slow
def test_python_m_skbatch_info():
    result = subprocess.run(
        [sys.executable, "-m", "skbatch", "info"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    _check_report(result.stdout)


def test_info_shows_the_plan_of_a_probe_fit_on_each_usable_backend(capsys, no_gpu):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    probe = out.split("\nProbe fit ")[1]
    n_samples, n_features, n_targets = skbatch.__main__.PROBE_SHAPE
    assert probe.startswith(
        f"(BatchedRidge, {n_samples} samples x {n_features} features x "
        f"{n_targets:,} targets)\n"
    )
    # The lines verbose=1 prints: the plan, then the summary, of each fit.
    plan = rf"^  targets: {n_targets} targets in \d+ batch(es)? of up to \d+ on %s"
    done = r"^  targets: done in \d+\.\d\d s on %s: \d+ batch(es)?, 0 out-of-memory"
    for name in ("numpy", "torch-cpu"):
        if name == "torch-cpu" and importlib.util.find_spec("torch") is None:
            continue
        assert re.search(plan % name, probe, re.M), name
        assert re.search(done % name, probe, re.M), name
    assert "torch-cuda" not in probe
    if importlib.util.find_spec("jax") is not None:
        assert "  jax-cpu: not probed, jax compiles" in probe
