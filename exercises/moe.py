"""Exercise `moe`: a top-k routed mixture of experts with its load-balancing loss, from scratch.

Grade it with `drill check moe.py`. Only `MoE` is graded; helpers may live in
this file (your SwiGLU from the `swiglu` exercise makes a good expert).

Contract
--------
Parameters (the grader copies its weights in through exactly these paths)
    router: nn.Linear(d_model, n_experts, bias=False).
    experts: nn.ModuleList of n_experts modules, each with w_gate, w_up:
    Linear(d_model, d_ff) and w_down: Linear(d_ff, d_model), bias=False
    (expert(x) = w_down(silu(w_gate(x)) * w_up(x)), as in `swiglu`).
Routing
    x: (B, T, d_model), every (b, t) a token. p = softmax(router(x)) over the
    experts, the router matmul in x's dtype and the softmax in fp32. Each token
    goes to the top_k experts with the largest p. Its weights are those top_k
    probabilities: renormalised to sum to 1 when NORM_TOPK_PROB is True
    (Mixtral), used as they are when it is False (Qwen-MoE, DeepSeek-V2).
    out[token] = sum over its chosen experts e of weight_e * expert_e(x[token]).
Load-balancing loss
    aux = n_experts * sum_e f_e * P_e (Hugging Face Mixtral's
    load_balancing_loss_func, no coefficient, not divided by top_k), where
    f_e = (tokens whose top_k includes e) / tokens and P_e = the mean of p_e
    over the tokens of this call.
Returns
    (out (B, T, d_model) in x's dtype, aux a 0-dim fp32 tensor). An expert's
    output is scaled by its fp32 weight and cast to x's dtype as it is summed.
Gradients
    Must reach x, the router (through the weights and through aux) and every
    expert that received a token: no .detach(), no torch.no_grad(), no NumPy.
Inputs
    The grader's routing never has near ties (each token's k-th and (k+1)-th
    router logits are well apart), so every dtype picks the same experts.
Reported (not failing unless --strict)
    Whether every expert runs on every token: the compute a sparse MoE exists
    to save (the report gives the FLOPs spent next to the routed minimum).
"""

import torch
import torch.nn.functional as F
from torch import nn

NORM_TOPK_PROB = True  # False: use the top-k probabilities without renormalising


class MoE(nn.Module):
    def __init__(self, d_model, d_ff, n_experts, top_k):
        super().__init__()
        # Create router (no bias) and experts, an nn.ModuleList of n_experts
        # modules with w_gate, w_up, w_down (no bias); keep n_experts and top_k.
        raise NotImplementedError("write MoE.__init__")

    def forward(self, x):
        """x: (B, T, d_model) -> (out (B, T, d_model), aux 0-dim fp32)."""
        # Things to think about:
        # - Flatten (B, T) into tokens; route with softmax(router(x).float()).
        # - topk on p gives each token's experts and weights; renormalise them
        #   only if NORM_TOPK_PROB.
        # - Run each expert only on the tokens routed to it (find them with
        #   torch.where, or sort the token/expert pairs by expert), weight its
        #   output and add it back into the right rows (index_add_).
        # - An expert may receive no token at all; that must not break anything.
        # - aux uses the full softmax p (every expert), not the top-k weights;
        #   f_e counts tokens, not token/expert pairs divided by top_k.
        raise NotImplementedError("write MoE.forward")
