"""`drill bench` workloads of the backprop track: a hand-written backward against autograd as the size grows.

The three implementations timed for each exercise:
- fused: PyTorch's fused forward and its backward through autograd. PyTorch
  has no public backward-only entry point, so this call runs the forward too:
  the ratio to your backward overstates your cost by the forward's share
  (about a third of the work for attention, half for the norms).
- math: the reference's own closed form (reference/), backward only.
- learner: your function on the same inputs (for flash_attention_backward,
  `out` and `lse` are computed once, untimed, as the grader does).
Every call returns the gradients joined into one flat tensor, so the bench's
agreement check compares all of them at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from drill.bench.workload_kit import Call, Workload, gen, lm_loss_inputs, randn
from drill.judge.registry import default

LN_EPS = default("layernorm_backward", "eps")
CE_IGNORE_INDEX = default("cross_entropy_backward", "ignore_index")
CE_LABEL_SMOOTHING = default("cross_entropy_backward", "label_smoothing")
FLASH_TILES = (default("flash_attention_backward", "BLOCK_Q"), default("flash_attention_backward", "BLOCK_K"))


def _flat(grads: Any) -> Any:
    import torch

    if isinstance(grads, torch.Tensor):
        return grads
    return torch.cat([g.reshape(-1) for g in grads])


def _autograd(forward: Callable[..., Any], inputs: list[Any], grad_out: Any) -> Call:
    """A call that runs `forward(*inputs)` and autograd's backward with `grad_out`; leaves are made once, untimed.

    `enable_grad` inside the call: the bench's own checks run calls under no_grad.
    """
    import torch

    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]

    def call() -> Any:
        with torch.enable_grad():
            out = forward(*leaves)
            grads = torch.autograd.grad(out, leaves, grad_out)
        return grads[0] if len(grads) == 1 else _flat(grads)

    return call


# -- attention_backward: causal self-attention, T x T -------------------------------------------


def _attn_build(size: int, dims: dict, dtype: Any, device: Any, seed: int = 0) -> dict:
    import torch

    g = gen(seed, device)
    b, h, d = dims["B"], dims["H"], dims["d_head"]
    x = {k: randn(g, b, h, size, d, dtype=dtype, device=device) for k in ("q", "k", "v", "grad_out")}
    x["mask"] = torch.ones(size, size, dtype=torch.bool, device=device).tril()
    return x


def _attn_reference(ref: Any, impl: str, x: dict, dims: dict) -> Call:
    if impl == "fused":
        return _autograd(lambda q, k, v: ref.sdpa(q, k, v, causal=True, impl="fused"), [x["q"], x["k"], x["v"]],
                         x["grad_out"])
    return lambda: _flat(ref.attention_backward(x["q"], x["k"], x["v"], x["grad_out"], x["mask"]))


def _attn_est(size: int, dims: dict, elem: int) -> int:
    """Naive: the scores, P, dP and dS, each T x T in fp32, beside q, k, v, grad_out and the three gradients."""
    b, h, d = dims["B"], dims["H"], dims["d_head"]
    return 8 * b * h * size * d * elem + 4 * b * h * size * size * 4 + size * size


ATTENTION_BACKWARD = Workload(
    exercise="attention_backward",
    size_name="sequence length T (q, k, v, grad_out all of length T, causal mask)",
    size_label="T",
    ladder_cpu=(128, 256, 512, 1024, 2048),
    ladder_cuda=(1024, 2048, 4096, 8192),
    dims_cpu={"B": 1, "H": 4, "d_head": 64},
    dims_cuda={"B": 1, "H": 16, "d_head": 128},
    expected_exponent=2.0,
    expected_note="T^2 compute for everyone; memory ~T^2 for the closed form (P, dP and dS are T x T), ~T for the "
    "fused kernel's backward on CUDA",
    build=_attn_build,
    reference=_attn_reference,
    learner=lambda mod, x, dims: (lambda: _flat(mod.attention_backward(x["q"], x["k"], x["v"], x["grad_out"],
                                                                       x["mask"]))),
    est_bytes=_attn_est,
    tokens=lambda size, dims: dims["B"] * size,
    memory_note="the closed form's T x T P, dP and dS; FlashAttention's backward rebuilds them tile by tile, "
    "which flash_attention_backward asks for and this exercise does not",
)


# -- flash_attention_backward: causal, square, out and lse given ---------------------------------


def _flash_build(size: int, dims: dict, dtype: Any, device: Any, seed: int = 0) -> dict:
    """q, k, v, grad_out, and the forward's out and lse, computed here in fp32 one slab of queries at a time
    (so building a long sequence never holds the T x T scores)."""
    import torch

    g = gen(seed, device)
    b, h, d = dims["B"], dims["H"], dims["d_head"]
    x = {k: randn(g, b, h, size, d, dtype=dtype, device=device) for k in ("q", "k", "v", "grad_out")}
    qf, kf, vf = (x[n].float() for n in ("q", "k", "v"))
    out = torch.empty(b, h, size, d, dtype=torch.float32, device=device)
    lse = torch.empty(b, h, size, dtype=torch.float32, device=device)
    scale, slab = 1.0 / math.sqrt(d), 512
    keys = torch.arange(size, device=device)
    for start in range(0, size, slab):
        rows = torch.arange(start, min(start + slab, size), device=device)
        scores = (qf[:, :, rows] @ kf.transpose(-2, -1)) * scale
        scores = scores.masked_fill(keys[None, :] > rows[:, None], float("-inf"))
        lse[:, :, rows] = torch.logsumexp(scores, dim=-1)
        out[:, :, rows] = torch.softmax(scores, dim=-1) @ vf
    x["out"], x["lse"] = out.to(dtype), lse
    return x


def _flash_reference(ref: Any, impl: str, x: dict, dims: dict) -> Call:
    if impl == "fused":
        return _autograd(lambda q, k, v: ref.sdpa(q, k, v, causal=True, impl="fused"), [x["q"], x["k"], x["v"]],
                         x["grad_out"])
    bq, bk = FLASH_TILES
    return lambda: _flat(ref.flash_attention_backward_tiled(x["q"], x["k"], x["v"], x["out"], x["lse"],
                                                            x["grad_out"], True, block_q=bq, block_k=bk))


def _flash_learner(mod: Any, x: dict, dims: dict) -> Call:
    return lambda: _flat(mod.flash_attention_backward(x["q"], x["k"], x["v"], x["out"], x["lse"], x["grad_out"],
                                                      True))


FLASH_ATTENTION_BACKWARD = Workload(
    exercise="flash_attention_backward",
    size_name="sequence length T (q, k, v, grad_out all of length T, causal; out and lse given)",
    size_label="T",
    ladder_cpu=(256, 512, 1024, 2048),
    ladder_cuda=(1024, 2048, 4096, 8192),
    dims_cpu={"B": 1, "H": 2, "d_head": 64},
    dims_cuda={"B": 1, "H": 16, "d_head": 128},
    expected_exponent=2.0,
    expected_note="T^2 compute (half of it skipped above the diagonal); memory ~T for tiles (yours, the reference's, "
    "the fused kernel's on CUDA)",
    build=_flash_build,
    reference=_flash_reference,
    learner=_flash_learner,
    est_bytes=_attn_est,
    tokens=lambda size, dims: dims["B"] * size,
)


# -- layernorm_backward: N tokens, growing hidden size -------------------------------------------


def _ln_build(size: int, dims: dict, dtype: Any, device: Any, seed: int = 0) -> dict:
    g = gen(seed, device)
    n = dims["N"]
    return {"x": randn(g, n, size, dtype=dtype, device=device),
            "weight": (1.0 + 0.1 * randn(g, size, dtype=dtype, device=device)).to(dtype),
            "bias": randn(g, size, dtype=dtype, device=device, scale=0.1),
            "grad_out": randn(g, n, size, dtype=dtype, device=device)}


def _ln_reference(ref: Any, impl: str, x: dict, dims: dict) -> Call:
    import torch.nn.functional as F

    if impl == "fused":
        size = x["x"].shape[-1]
        return _autograd(lambda a, w, b: F.layer_norm(a, (size,), w, b, LN_EPS), [x["x"], x["weight"], x["bias"]],
                         x["grad_out"])
    return lambda: _flat(ref.layer_norm_backward(x["x"], x["weight"], x["bias"], x["grad_out"], LN_EPS))


LAYERNORM_BACKWARD = Workload(
    exercise="layernorm_backward",
    size_name="hidden size (N tokens fixed)",
    size_label="d_model",
    ladder_cpu=(256, 512, 1024, 2048, 4096),
    ladder_cuda=(1024, 2048, 4096, 8192, 16384),
    dims_cpu={"N": 512},
    dims_cuda={"N": 16384},
    expected_exponent=1.0,
    expected_note="a few reads of x and grad_out: time ~d, bound by memory bandwidth",
    build=_ln_build,
    reference=_ln_reference,
    learner=lambda mod, x, dims: (lambda: _flat(mod.layernorm_backward(x["x"], x["weight"], x["bias"], x["grad_out"],
                                                                       LN_EPS))),
    est_bytes=lambda size, dims, elem: 3 * dims["N"] * size * elem + 6 * dims["N"] * size * 4,
    tokens=lambda size, dims: dims["N"],
    bytes_moved=lambda size, dims, elem: 3 * dims["N"] * size * elem,
    bandwidth_bound=True,
)


# -- cross_entropy_backward: N tokens, growing vocabulary ----------------------------------------


def _ce_build(size: int, dims: dict, dtype: Any, device: Any, seed: int = 0) -> dict:
    return lm_loss_inputs(size, dims, dtype, device, seed, CE_IGNORE_INDEX)


def _ce_reference(ref: Any, impl: str, x: dict, dims: dict) -> Call:
    import torch.nn.functional as F

    if impl == "fused":
        import torch

        one = torch.ones((), dtype=x["logits"].dtype, device=x["logits"].device)
        return _autograd(lambda z: F.cross_entropy(z, x["targets"], ignore_index=CE_IGNORE_INDEX,
                                                   label_smoothing=CE_LABEL_SMOOTHING), [x["logits"]], one)
    return lambda: ref.cross_entropy_backward(x["logits"], x["targets"], CE_IGNORE_INDEX, CE_LABEL_SMOOTHING)


CROSS_ENTROPY_BACKWARD = Workload(
    exercise="cross_entropy_backward",
    size_name="vocabulary size V (N tokens fixed, a tenth of the targets ignored)",
    size_label="V",
    ladder_cpu=(2048, 4096, 8192, 16384, 32768),
    ladder_cuda=(8192, 16384, 32768, 65536, 131072),
    dims_cpu={"N": 256},
    dims_cuda={"N": 8192},
    expected_exponent=1.0,
    expected_note="a read of the N x V logits and a write of their gradient: time ~V, bound by memory bandwidth",
    build=_ce_build,
    reference=_ce_reference,
    learner=lambda mod, x, dims: (lambda: _flat(mod.cross_entropy_backward(x["logits"], x["targets"],
                                                                           CE_IGNORE_INDEX, CE_LABEL_SMOOTHING))),
    est_bytes=lambda size, dims, elem: 2 * dims["N"] * size * elem + 4 * dims["N"] * size * 4,
    tokens=lambda size, dims: dims["N"],
    bytes_moved=lambda size, dims, elem: 2 * dims["N"] * size * elem + dims["N"] * 8,
    bandwidth_bound=True,
)
