"""Speculative decoding's verification step (Leviathan et al. 2023; Chen et al. 2023).

A cheap draft model proposed K tokens, each drawn from its distribution q[i];
the target model scored the same positions in one pass, p[i], plus the
position after the last draft, p[K]. Draft i is kept while a uniform falls
below p[i, x] / q[i, x]; the first refusal is replaced by a token from the
part of p that q under-covers, max(0, p - q) normalised, and the step stops.
When every draft is kept, the target's row K gives one token more for free.
The output then follows the target exactly, whatever the draft.

Random numbers are inputs here (uniforms[i] decides draft i, the last one
draws the final token by inverse CDF), so one step is a pure function and
can be graded token for token. The arithmetic is float64 throughout.
"""

from __future__ import annotations

import torch


def inverse_cdf(dist: torch.Tensor, u: float) -> int:
    """The smallest j with cumsum(dist)[j] > u, as torch.searchsorted(cdf, u, right=True); when rounding leaves
    no such j (u at or above the last step), the last j whose probability is positive."""
    cdf = torch.cumsum(dist.double(), 0)
    j = int(torch.searchsorted(cdf, torch.tensor([float(u)], dtype=torch.float64), right=True)[0])
    if j >= dist.numel():
        j = int(torch.nonzero(dist > 0).max())
    return j


def residual(p_row: torch.Tensor, q_row: torch.Tensor) -> torch.Tensor:
    """normalize(max(0, p - q)) in float64: what the target wants that the draft did not offer."""
    r = (p_row.double() - q_row.double()).clamp_min(0.0)
    return r / r.sum()


def speculative_verify(draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                       uniforms: torch.Tensor) -> list[int]:
    """The accepted drafts, then one residual or bonus token: 1 .. K + 1 Python ints."""
    k = int(draft_tokens.numel())
    if draft_probs.shape[0] != k or target_probs.shape[0] != k + 1 or uniforms.numel() != k + 1:
        raise ValueError(f"need q (K, V), p (K + 1, V), uniforms (K + 1,) for K = {k} drafts, got "
                         f"{tuple(draft_probs.shape)}, {tuple(target_probs.shape)}, {tuple(uniforms.shape)}")
    p, q, u = target_probs.double(), draft_probs.double(), uniforms.double()
    out: list[int] = []
    for i in range(k):
        x = int(draft_tokens[i])
        if float(u[i]) < float(p[i, x] / q[i, x]):
            out.append(x)
            continue
        out.append(inverse_cdf(residual(p[i], q[i]), float(u[k])))
        return out
    out.append(inverse_cdf(p[k], float(u[k])))
    return out
