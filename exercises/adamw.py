"""Exercise `adamw`: AdamW as a torch.optim.Optimizer.

Grade it with `drill check adamw.py`. The class `AdamW` is graded; you may add
helpers in this file.

Contract
--------
AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    A subclass of torch.optim.Optimizer. __init__ passes
    dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay) to
    Optimizer.__init__ as the defaults. params is what torch.optim takes: the
    parameters, or a list of param-group dicts; a group's missing options are
    the constructor's.
step(closure=None), decorated @torch.no_grad()
    If a closure is given, call it first, under torch.enable_grad(), and
    return its value (else return None). Then, for every parameter p whose
    p.grad is not None, with ITS GROUP's lr, betas, eps and weight_decay read
    at this call (a scheduler changes group["lr"] between steps), g = p.grad:
        t = state["step"] + 1          p's own count: 1 at p's first step
        p *= 1 - lr * weight_decay     decoupled decay, before the update
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        p -= lr / (1 - beta1 ** t) * m / (sqrt(v) / sqrt(1 - beta2 ** t) + eps)
    This is torch.optim.AdamW (amsgrad=False, maximize=False).
State
    self.state[p], created at p's first step with a gradient: "step" (an int
    or a 0-dim tensor), "exp_avg" (m) and "exp_avg_sq" (v), zero tensors of
    p's shape and dtype; one state per parameter. A parameter whose grad is
    None is skipped entirely: no decay, no state, its count does not advance.
    Parameters are fp32 or bf16 (state and arithmetic in p's dtype).
    state_dict() / load_state_dict() are Optimizer's and must round-trip: the
    grader saves after two steps and loads into a fresh AdamW over copies.
    CS336 a1's order (the step first, eps on the uncorrected sqrt(v), then the
    decay) passes too; the report notes it.
Forbidden
    torch.optim.Adam, torch.optim.AdamW, torch.optim._functional.adam / adamw,
    torch._fused_adam_, torch._fused_adamw_ and every torch._foreach_* op.
"""

import torch


class AdamW(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        raise NotImplementedError("write AdamW.__init__")

    @torch.no_grad()
    def step(self, closure=None):
        """One AdamW update of every parameter that has a gradient; returns closure() if given."""
        # Things to think about:
        # - Where do lr and weight_decay come from: self.defaults, or the group? And after a scheduler runs?
        # - Whose step count is t: the optimizer's, or this parameter's? What if p had no gradient last step?
        # - Does the decay go through m and v (Adam + L2), or straight onto p?
        # - Is eps added to sqrt(v_hat), or inside the root?
        # - What must survive state_dict() and load_state_dict() into a fresh optimizer?
        raise NotImplementedError("write AdamW.step")
