"""Exercise `ppo_gae`: generalised advantage estimation and PPO's clipped loss.

Grade it with `drill check ppo_gae.py`. `gae` and `ppo_clip_loss` are
graded; you may add helpers in this file.

Contract
--------
gae(rewards, values, dones, last_value, gamma, lam) -> (advantages, returns)
    rewards, values: (B, T) float; dones: (B, T) bool, dones[:, t] True when
    step t ENDED its episode (no bootstrap from s_{t+1}, nothing carried
    across it); last_value: (B,), V(s_T), the value of the state after the
    last step. With V_T = last_value, a reverse scan over t = T-1 .. 0:
        delta_t = r_t + gamma * V_{t+1} * (1 - done_t) - V_t
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1},   A_T = 0
    returns = A + values. Each (B, T) fp32. Termination and truncation are
    not told apart. Gradients are not graded (it runs under no_grad).

ppo_clip_loss(logp, old_logp, advantages, clip_eps, mask=None) -> 0-dim fp32
    logp, old_logp, advantages: one shape (any). ratio = exp(logp - old_logp);
    l = -min(ratio * A, clamp(ratio, 1 - clip_eps, 1 + clip_eps) * A).
    mask None: the mean of l over every element. A bool mask of the same
    shape: sum(l * mask) / sum(mask), ONE mean over the whole batch (TRL's
    PPO masked_mean). Advantages are used as given (normalise them outside,
    as CleanRL does). Gradients reach logp.
Forbidden
    nothing.
"""

import torch


def gae(rewards, values, dones, last_value, gamma, lam):
    """(advantages, returns), each (B, T) fp32, by the reverse scan above."""
    # Things to think about:
    # - A_t needs A_{t+1}: which way does the loop run, and what is A after the last step?
    # - Which value follows step T-1, and which follows step t < T-1?
    # - A done at step t: what must it cut, the bootstrap, the carry, or both?
    # - dones[:, t] or dones[:, t + 1] at step t? (This layout is not CleanRL's.)
    # - What are the returns the value function is trained on?
    raise NotImplementedError("write gae")


def ppo_clip_loss(logp, old_logp, advantages, clip_eps, mask=None):
    """PPO's clipped surrogate, negated, averaged over every element or over the mask's True ones."""
    # Things to think about:
    # - What is clamped: the ratio, the advantage, or their product? min or max?
    # - With a mask: one mean over the batch, or a mean per row first?
    # - Should the advantages be normalised here?
    # - What happens when mask is None?
    raise NotImplementedError("write ppo_clip_loss")
