"""Exercise `lora`: a LoRA adapter around a frozen nn.Linear.

Grade it with `drill check lora.py`. `LoRALinear` is graded (its __init__,
forward and merged); you may add helpers in this file.

Contract
--------
LoRALinear(base: nn.Linear, r: int, alpha: float)  (an nn.Module)
    self.base = base, frozen: requires_grad False on its weight and its bias
    (if it has one), and its values left untouched.
    self.lora_A: an nn.Parameter of shape (r, in_features), initialised as
    nn.Linear initialises its weight: nn.init.kaiming_uniform_(A, a=math.sqrt(5)),
    which is U(-1/sqrt(in_features), 1/sqrt(in_features)), drawn from torch's
    global generator.
    self.lora_B: an nn.Parameter of shape (out_features, r), all zeros.
    Both in base.weight's dtype and on its device. PEFT's layout also passes:
    lora_A = nn.Linear(in, r, bias=False) and lora_B = nn.Linear(r, out,
    bias=False), whose .weight has the shapes above.
    Exactly r * (in_features + out_features) trainable parameters in all.
forward(x) -> tensor
    x: (..., in_features) in the base's dtype. Returns
    base(x) + (alpha / r) * (x @ lora_A.T) @ lora_B.T   in x's dtype.
    Gradients reach x, lora_A and lora_B; base.weight.grad stays None.
    No dropout (PEFT's lora_dropout=0) and no rsLoRA (use_rslora=False).
merged() -> nn.Linear
    A NEW nn.Linear, same shape, a bias iff base has one, in base's dtype, with
    weight = base.weight + (alpha / r) * lora_B @ lora_A (computed in fp32)
    and base's bias: merged()(x) equals self(x). self is not modified.
    This is Hugging Face PEFT's LoRA Linear with its default init.
Forbidden
    Nothing is trapped; `peft` cannot be imported.
"""

import math  # noqa: F401 - kaiming_uniform_'s a = math.sqrt(5)

import torch
from torch import nn


class LoRALinear(nn.Module):
    """base(x) + (alpha / r) * B A x, with the base frozen and only A and B trained."""

    def __init__(self, base: nn.Linear, r: int, alpha: float):
        super().__init__()
        # Things to think about:
        # - Which factor starts at zero, and why does that make the wrapped layer start as the base?
        # - If both started at zero, what would the gradient of each be?
        # - What is U(-1/sqrt(in), 1/sqrt(in)) in terms of nn.init, and which dim of A is "in"?
        # - How many parameters does model.parameters() hand the optimizer with requires_grad True?
        raise NotImplementedError("write LoRALinear.__init__")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # - alpha / r, alpha, alpha / sqrt(r): which one, and why divide by r at all?
        # - Does anything in your forward draw random numbers?
        raise NotImplementedError("write LoRALinear.forward")

    def merged(self) -> nn.Linear:
        # - nn.Linear's weight is (out, in): which product of A and B has that shape?
        # - After merged(), does self(x) still give what it gave before?
        raise NotImplementedError("write LoRALinear.merged")
