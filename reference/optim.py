"""AdamW with decoupled weight decay, written out: the grader's ground truth for `adamw`.

Follows torch.optim.AdamW with amsgrad=False, maximize=False, one tensor at a
time: the parameter shrinks by lr * weight_decay first, then the moments are
updated and the bias-corrected step is taken with eps added outside the
corrected square root. Every option is read from the parameter's group at the
call, every parameter keeps its own count, and a parameter with no gradient
is left alone entirely. The arithmetic runs in the parameter's dtype, as
PyTorch's does, so bf16 parameters round where PyTorch's round.
"""

from __future__ import annotations

import math

import torch


class AdamW(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"invalid AdamW options: lr={lr}, betas={betas}, eps={eps}, weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                t = state["step"]
                g = p.grad
                m, v = state["exp_avg"], state["exp_avg_sq"]
                p.mul_(1 - lr * wd)
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                step_size = lr / (1 - beta1 ** t)
                denom = (v.sqrt() / math.sqrt(1 - beta2 ** t)).add_(eps)
                p.addcdiv_(m, denom, value=-step_size)
        return loss
