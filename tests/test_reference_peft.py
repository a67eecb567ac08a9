"""drill's LoRA reference and judge held to Hugging Face PEFT itself (the dev extra installs it; drill never
imports it: `peft` is refused in a learner's file and is no runtime dependency)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from drill.judge.specs import lora
from drill.reference.lora import LoRALinear

peft = pytest.importorskip("peft")


class _One(nn.Module):
    def __init__(self, n_in: int, n_out: int, bias: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(n_in, n_out, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def _peft(n_in: int, n_out: int, r: int, alpha: float, bias: bool):
    model = _One(n_in, n_out, bias)
    config = peft.LoraConfig(r=r, lora_alpha=alpha, target_modules=["proj"], lora_dropout=0.0)
    return peft.get_peft_model(model, config)


@pytest.mark.parametrize(("n_in", "n_out", "r", "alpha", "bias"), [(12, 20, 4, 8.0, True), (16, 16, 2, 16.0, False),
                                                                   (9, 5, 1, 4.0, True)])
def test_forward_gradients_merge_and_trainable_count_equal_peft(n_in, n_out, r, alpha, bias) -> None:
    torch.manual_seed(n_in)
    wrapped = _peft(n_in, n_out, r, alpha, bias)
    layer = wrapped.base_model.model.proj
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    assert bool((b == 0).all())  # PEFT's init, as the contract's
    base = nn.Linear(n_in, n_out, bias=bias)
    with torch.no_grad():
        base.weight.copy_(layer.base_layer.weight)
        if bias:
            base.bias.copy_(layer.base_layer.bias)
        b.normal_()
    ref = LoRALinear(base, r, alpha)
    with torch.no_grad():
        ref.lora_A.copy_(a)
        ref.lora_B.copy_(b)
    x = torch.randn(2, 3, n_in, requires_grad=True)
    ours, theirs = ref(x), wrapped(x)
    torch.testing.assert_close(ours, theirs)
    up = torch.randn_like(ours)
    g_ours = torch.autograd.grad((ours * up).sum(), (x, ref.lora_A, ref.lora_B))
    g_theirs = torch.autograd.grad((theirs * up).sum(), (x, a, b))
    for mine, want in zip(g_ours, g_theirs, strict=True):
        torch.testing.assert_close(mine, want)
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    assert trainable == sum(p.numel() for p in ref.parameters() if p.requires_grad) == r * (n_in + n_out)
    merged = ref.merged()
    unloaded = wrapped.merge_and_unload().proj
    torch.testing.assert_close(merged.weight, unloaded.weight)
    assert (merged.bias is None) == (unloaded.bias is None)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_init_judge_passes_peft_own_init(seed: int) -> None:
    """lora's init case (lora_B exactly 0, lora_A's uniform law by a KS test) passes what PEFT itself draws."""
    torch.manual_seed(seed)
    layer = _peft(lora.INIT_IN, lora.INIT_OUT, lora.INIT_R, 16.0, False).base_model.model.proj
    a, b = layer.lora_A["default"].weight.detach(), layer.lora_B["default"].weight.detach()
    verdict = lora.judge_init(torch.cat([a.flatten(), b.flatten()]).float())
    assert verdict.ok, verdict.message
