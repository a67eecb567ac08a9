"""The GPU self-test: runs (as a CPU comparison) here, and for real where CUDA exists."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import drill.reference.norm as norm_module
from drill.reference import selftest


@pytest.mark.slow
def test_selftest_passes_on_this_machine(capsys):
    assert selftest.main([]) == 0
    out = capsys.readouterr().out
    if not torch.cuda.is_available():
        assert "CUDA not available" in out
    assert "14/14 passed" in out and "ok   filter_logits" in out


@pytest.mark.slow
def test_selftest_fails_loudly_when_a_fused_part_is_wrong(monkeypatch, capsys):
    real = norm_module.rms_norm

    def off_by_eps(x, weight, eps, impl=None):
        return real(x, weight, eps * 1e4 if impl != "math" else eps, impl=impl)

    monkeypatch.setattr(selftest, "rms_norm", off_by_eps)
    assert selftest.main([]) == 1
    out = capsys.readouterr().out
    assert "FAIL rms_norm" in out and "FAILED: rms_norm" in out


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_selftest_on_cuda_subprocess():
    proc = subprocess.run(
        [sys.executable, "-m", "drill.reference.selftest"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SDPA math kernel disabled" in proc.stdout
