"""Contract violations get a clear failure that names the problem (through the real child)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drill.judge.check import check_file
from drill.judge.pool import ChildPool
from drill.judge.runner import Limits

RMS_BODY = '''
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones({shape}))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(x.dtype)
'''

CASES = {
    # name: (exercise, source, diagnosis id, text the detail must contain)
    "missing_attribute": (
        "mha",
        "import torch\nfrom torch import nn\n\nclass MultiHeadAttention(nn.Module):\n"
        "    def __init__(self, d_model, n_heads):\n        super().__init__()\n"
        "        self.q_proj = nn.Linear(d_model, d_model, bias=False)\n"
        "    def forward(self, x, mask=None):\n        return x\n",
        "missing_name",
        "k_proj",
    ),
    "wrong_param_shape": ("rmsnorm", RMS_BODY.format(shape="dim + 1"), "wrong_shape", "weight"),
    "missing_graded_name": ("swiglu", "def ffn_hidden_dim(d_model, multiple_of=256):\n    return 0\n", "missing_name",
                            "SwiGLU"),
    "import_time_exception": ("rmsnorm", "import torch\n\nraise ValueError('boom at import')\n", "exception", "line 3"),
    "learner_exception_line": (
        "attention",
        "import torch\n\ndef scaled_dot_product_attention(q, k, v, mask=None):\n    return q @ v\n",
        "exception",
        "line 4",
    ),
}


@pytest.fixture(scope="module")
def pool(fork_server):
    return fork_server


@pytest.mark.parametrize("name", sorted(CASES))
def test_contract_violation_is_named(name: str, tmp_path: Path, pool: ChildPool) -> None:
    exercise, source, want, needle = CASES[name]
    f = tmp_path / f"{exercise}.py"
    f.write_text(source)
    result = check_file(f, seed=2, limits=Limits(), pool=pool)
    assert result.status in ("fail", "error")
    assert result.diagnosis.id == want, result.diagnosis_detail
    assert needle in result.diagnosis_detail


def test_correct_module_with_good_shape_passes(tmp_path: Path, pool: ChildPool) -> None:
    f = tmp_path / "rmsnorm.py"
    f.write_text(RMS_BODY.format(shape="dim"))
    assert check_file(f, seed=2, pool=pool).status == "pass"
