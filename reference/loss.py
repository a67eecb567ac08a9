"""Cross-entropy over the last axis, with ignore_index and label smoothing.

The definition is torch.nn.functional.cross_entropy's (mean reduction):
each position whose target is not `ignore_index` contributes
(1 - ls) * -log p[target] + ls * mean_v(-log p[v]), p = softmax over the
class axis, and the loss is the mean of that over those positions only. The
class axis is the *last* one, as a language model's logits (..., V) have
it (F.cross_entropy wants it at dim 1, so the fused path flattens first).

Computed in fp32 at least whatever the logits' dtype (Hugging Face upcasts
its logits before the loss for the same reason): log p is taken as
x - max - log(sum(exp(x - max))), never as log(softmax(x)), which
underflows to -inf for a logit ~100 below the row's max.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .backend import acc_dtype, resolve


def _check(logits: Tensor, targets: Tensor, ignore_index: int, label_smoothing: float) -> None:
    if logits.dim() < 1 or not logits.is_floating_point():
        raise ValueError(f"cross_entropy logits must be a floating (..., V) tensor, "
                         f"got {logits.dtype}{list(logits.shape)}")
    if tuple(targets.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"cross_entropy targets shape {tuple(targets.shape)} does not match logits' leading "
                         f"shape {tuple(logits.shape[:-1])}")
    if targets.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"cross_entropy targets must hold integer class ids, got {targets.dtype}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy label_smoothing must be in [0, 1], got label_smoothing={label_smoothing}")
    v = logits.shape[-1]
    used = targets[targets != ignore_index]
    if used.numel() and bool(((used < 0) | (used >= v)).any()):
        bad = int(used[(used < 0) | (used >= v)][0])
        raise ValueError(f"cross_entropy target {bad} is not a class id in [0, {v}) nor ignore_index={ignore_index}")


def cross_entropy(
    logits: Tensor, targets: Tensor, ignore_index: int = -100, label_smoothing: float = 0.0, impl: str | None = None
) -> Tensor:
    """Mean cross-entropy of `logits` (..., V) against `targets` (...); a 0-dim tensor of logits.dtype.

    Every position ignored gives NaN (0 / 0), as F.cross_entropy does. "math"
    is the formula above in fp32; "fused" is F.cross_entropy on the fp32
    logits flattened to (N, V). Both round once to logits.dtype.
    """
    _check(logits, targets, ignore_index, label_smoothing)
    acc = acc_dtype(logits.dtype)
    z = logits.to(acc).reshape(-1, logits.shape[-1])
    t = targets.reshape(-1).long()
    if resolve(impl) == "fused":
        loss = F.cross_entropy(z, t, ignore_index=ignore_index, label_smoothing=label_smoothing)
        return loss.to(logits.dtype)
    shifted = z - z.max(dim=-1, keepdim=True).values.detach()  # any constant per row: the max keeps exp <= 1
    logp = shifted - shifted.exp().sum(dim=-1, keepdim=True).log()
    keep = t != ignore_index
    picked = logp.gather(-1, torch.where(keep, t, 0).unsqueeze(-1)).squeeze(-1)  # an ignored id may be any value
    per = -(1.0 - label_smoothing) * picked - label_smoothing * logp.mean(dim=-1)
    loss = torch.where(keep, per, torch.zeros_like(per)).sum() / keep.sum()
    return loss.to(logits.dtype)


def cross_entropy_backward(logits: Tensor, targets: Tensor, ignore_index: int = -100,
                           label_smoothing: float = 0.0) -> Tensor:
    """d cross_entropy(logits, targets, ignore_index, label_smoothing) / d logits, like logits.

    Closed form, in fp32 (fp64 stays fp64): the loss of one kept row is the
    cross-entropy of p = softmax(logits) against the target distribution
    q = (1 - ls) * onehot(target) + ls / V, whose gradient is p - q; the mean
    over the N kept rows divides it by N, and an ignored row gets exactly 0
    (its target, which may be any value, is never used as an index).
    """
    _check(logits, targets, ignore_index, label_smoothing)
    acc = acc_dtype(logits.dtype)
    v = logits.shape[-1]
    z = logits.to(acc).reshape(-1, v)
    t = targets.reshape(-1).long()
    keep = t != ignore_index
    p = torch.softmax(z, dim=-1)
    q = torch.full_like(p, label_smoothing / v)
    q.scatter_add_(-1, torch.where(keep, t, 0).unsqueeze(-1), torch.full_like(p[:, :1], 1.0 - label_smoothing))
    grad = torch.where(keep.unsqueeze(-1), p - q, torch.zeros_like(p)) / keep.sum()
    return grad.reshape(logits.shape).to(logits.dtype)
