"""RMSNorm: x / sqrt(mean(x^2) + eps) * weight, over the last dim.

Unlike LayerNorm there is no mean subtraction and no bias: Llama keeps only the
rescaling, which is cheaper and trains as well. The sum of squares is
accumulated in fp32 because in fp16 it overflows past 65504 (a 4096-wide
activation of magnitude ~4 already gets there) and in bf16 it loses the small
terms. `eps` is explicit everywhere: models disagree (1e-5 vs 1e-6), and a
wrong eps is a real, silent bug.

LayerNorm (`layer_norm`) also centres: (x - mean) / sqrt(var + eps) * weight +
bias with the population variance, computed from the centred values (two
passes), never as E[x^2] - E[x]^2, which cancels catastrophically when the
mean is large against the spread.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import _compat
from .backend import acc_dtype, note_kernel, resolve


def _check_eps(eps: float, what: str = "RMSNorm") -> None:
    if not eps > 0:
        raise ValueError(f"{what} eps must be > 0, got eps={eps}")


def rms_norm(x: Tensor, weight: Tensor, eps: float, impl: str | None = None) -> Tensor:
    """RMS-normalise x over its last dim and scale by `weight` (dim,); returns x.dtype.

    "math" does everything in fp32 and rounds once. "fused" uses `F.rms_norm`
    (which also upcasts internally), or liger-kernel on CUDA when installed
    and DRILL_USE_LIGER=1; both may round the normalised value to x.dtype before the weight multiply,
    as Hugging Face does, so in half precision they differ from "math" by an ulp.
    """
    _check_eps(eps)
    if weight.shape != x.shape[-1:]:
        raise ValueError(f"RMSNorm weight shape {tuple(weight.shape)} does not match last dim {x.shape[-1]}")
    if resolve(impl) == "math":
        note_kernel("rms_norm", "math", x.device.type)
        acc = acc_dtype(x.dtype)
        xf = x.to(acc)
        inv_rms = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
        return (xf * inv_rms * weight.to(acc)).to(x.dtype)
    liger = _compat.use_liger(x, "rms_norm")
    w = weight.to(x.dtype)
    if liger is not None:
        note_kernel("rms_norm", "liger-kernel", x.device.type)
        shape = x.shape
        # in_place=False: liger would otherwise overwrite the incoming gradient,
        # which the residual branch still needs.
        out = liger.apply(x.reshape(-1, shape[-1]).contiguous(), w, eps, 0.0, "llama", False)
        return out.reshape(shape)
    if _compat.has_fused_rms_norm():
        note_kernel("rms_norm", "F.rms_norm", x.device.type)
        if x.dtype in (torch.float16, torch.bfloat16) and not _compat.fused_rms_norm_upcasts():
            return F.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)
        return F.rms_norm(x, (x.shape[-1],), w, eps).to(x.dtype)
    return rms_norm(x, weight, eps, impl="math")


def rms_norm_backward(x: Tensor, weight: Tensor, grad_out: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """(grad_x like x, grad_weight (d,) like weight): the gradients of sum(rms_norm(x, weight, eps) * grad_out).

    Closed form, in fp32 (fp64 stays fp64): with r = 1/sqrt(mean(x**2) + eps),
    x_hat = x * r and g = grad_out * weight, grad_x = r * (g - x_hat *
    mean(g * x_hat)) (the second term is the path through r: every x_i moves
    the RMS), and grad_weight sums grad_out * x_hat over every leading dim.
    """
    _check_eps(eps)
    if weight.shape != x.shape[-1:] or grad_out.shape != x.shape:
        raise ValueError(f"rms_norm_backward: x {tuple(x.shape)}, weight {tuple(weight.shape)} and grad_out "
                         f"{tuple(grad_out.shape)} do not fit together")
    acc = acc_dtype(x.dtype)
    xf, gf, wf = x.to(acc), grad_out.to(acc), weight.to(acc)
    r = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    x_hat = xf * r
    g = gf * wf
    grad_x = r * (g - x_hat * (g * x_hat).mean(dim=-1, keepdim=True))
    grad_weight = (gf * x_hat).reshape(-1, x.shape[-1]).sum(dim=0)
    return grad_x.to(x.dtype), grad_weight.to(weight.dtype)


class RMSNorm(nn.Module):
    """RMSNorm module with a learnable `weight` (initialised to ones), HF-compatible name."""

    def __init__(self, dim: int, eps: float = 1e-6, impl: str | None = None) -> None:
        super().__init__()
        if dim <= 0:
            raise ValueError(f"RMSNorm dim must be positive, got dim={dim}")
        _check_eps(eps)
        self.eps = eps
        self.impl = impl
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps, impl=self.impl)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def layer_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float, impl: str | None = None) -> Tensor:
    """LayerNorm over x's last dim with `weight` and `bias` (each (dim,) or None); returns x.dtype.

    "math": mean, then the population variance of the centred values, in fp32
    (float64 stays float64), weight and bias applied there, rounded once.
    "fused": `F.layer_norm`, which on half inputs also normalises and applies
    weight and bias in fp32 and rounds once (measured against "math" in the
    tests; this is the contract's choice for where weight and bias are applied).
    """
    _check_eps(eps, "LayerNorm")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and p.shape != x.shape[-1:]:
            raise ValueError(f"LayerNorm {name} shape {tuple(p.shape)} does not match last dim {x.shape[-1]}")
    if resolve(impl) == "fused":
        note_kernel("layer_norm", "F.layer_norm", x.device.type)

        def cast(p: Tensor | None) -> Tensor | None:
            return None if p is None else p.to(x.dtype)

        return F.layer_norm(x, (x.shape[-1],), cast(weight), cast(bias), eps)
    note_kernel("layer_norm", "math", x.device.type)
    acc = acc_dtype(x.dtype)
    xf = x.to(acc)
    centred = xf - xf.mean(dim=-1, keepdim=True)
    out = centred * torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        out = out * weight.to(acc)
    if bias is not None:
        out = out + bias.to(acc)
    return out.to(x.dtype)


def layer_norm_backward(
    x: Tensor, weight: Tensor, bias: Tensor, grad_out: Tensor, eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    """(dx like x, dweight like weight, dbias like bias): the gradients of sum(layer_norm(x, w, b, eps) * grad_out).

    Closed form, in fp32 (fp64 stays fp64). Centring removes the mean of the
    upstream gradient and the scale by 1/sigma removes its component along
    xhat, so with rstd = 1/sqrt(var + eps), xhat = (x - mean) * rstd and
    g = grad_out * weight: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
    dweight and dbias sum grad_out * xhat and grad_out over every leading dim;
    bias never reaches dx.
    """
    _check_eps(eps, "LayerNorm")
    d = x.shape[-1:]
    if weight.shape != d or bias.shape != d or grad_out.shape != x.shape:
        raise ValueError(f"layer_norm_backward: x {tuple(x.shape)}, weight {tuple(weight.shape)}, bias "
                         f"{tuple(bias.shape)} and grad_out {tuple(grad_out.shape)} do not fit together")
    acc = acc_dtype(x.dtype)
    xf, gf = x.to(acc), grad_out.to(acc)
    centred = xf - xf.mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps)
    xhat = centred * rstd
    g = gf * weight.to(acc)
    dx = rstd * (g - g.mean(dim=-1, keepdim=True) - xhat * (g * xhat).mean(dim=-1, keepdim=True))
    rows = gf.reshape(-1, x.shape[-1])
    dweight = (rows * xhat.reshape(-1, x.shape[-1])).sum(dim=0)
    return dx.to(x.dtype), dweight.to(weight.dtype), rows.sum(dim=0).to(bias.dtype)


class LayerNorm(nn.Module):
    """LayerNorm module with `weight` (ones) and `bias` (zeros), the names nn.LayerNorm and Hugging Face use."""

    def __init__(self, dim: int, eps: float = 1e-5, impl: str | None = None) -> None:
        super().__init__()
        if dim <= 0:
            raise ValueError(f"LayerNorm dim must be positive, got dim={dim}")
        _check_eps(eps, "LayerNorm")
        self.eps = eps
        self.impl = impl
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps, impl=self.impl)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"
