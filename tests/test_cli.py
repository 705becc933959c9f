import importlib.metadata
import io
import re
import subprocess
import sys

import numpy as np
import pytest

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
    threshold = f"{AUTO_GPU_MIN_FLOPS:.0e}"
    assert f'device="auto" picks: numpy below {threshold} flops, numpy above' in out


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


def test_main_requires_a_command(capsys):
    with pytest.raises(SystemExit) as excinfo:
        main([])
    assert excinfo.value.code == 2
    assert "info" in capsys.readouterr().err


def test_python_m_skbatch_info():
    result = subprocess.run(
        [sys.executable, "-m", "skbatch", "info"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    _check_report(result.stdout)
