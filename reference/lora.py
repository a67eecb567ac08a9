"""LoRA around a frozen nn.Linear: Hugging Face PEFT's layer with lora_dropout=0, use_rslora=False and its
default init (lora_A as nn.Linear's weight, kaiming-uniform with a = sqrt(5); lora_B zeros), scaled alpha / r.

The low-rank path is computed in fp32 and cast to x's dtype; `merged()` folds it into a new nn.Linear's weight
(fp32 arithmetic, stored in the base's dtype) and leaves the layer itself alone.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r: int, alpha: float) -> None:
        super().__init__()
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        self.r, self.alpha = int(r), float(alpha)
        self.scaling = self.alpha / self.r
        like = {"dtype": base.weight.dtype, "device": base.weight.device}
        self.lora_A = nn.Parameter(torch.empty(self.r, base.in_features, **like))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, self.r, **like))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))

    def delta_weight(self) -> torch.Tensor:
        """scaling * B @ A in fp32, shaped like base.weight (out, in)."""
        return self.scaling * (self.lora_B.float() @ self.lora_A.float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.base.weight.float()
        b = None if self.base.bias is None else self.base.bias.float()
        xf = x.float()
        out = nn.functional.linear(xf, w, b) + self.scaling * ((xf @ self.lora_A.float().T) @ self.lora_B.float().T)
        return out.to(x.dtype)

    @torch.no_grad()
    def merged(self) -> nn.Linear:
        base = self.base
        out = nn.Linear(base.in_features, base.out_features, bias=base.bias is not None,
                        dtype=base.weight.dtype, device=base.weight.device)
        out.weight.copy_((base.weight.float() + self.delta_weight()).to(base.weight.dtype))
        if base.bias is not None:
            out.bias.copy_(base.bias)
        return out
