"""Exercise `grpo`: GRPO's group-normalised advantages and its clipped policy loss.

Grade it with `drill check grpo.py`. `group_advantages` and `grpo_clip_loss`
are graded; you may add helpers in this file.

Contract
--------
group_advantages(rewards, group_size, normalize_by_std=True, eps=1e-6) -> (N,) fp32
    rewards: (N,) float, N = n_groups * group_size, group_size >= 2. One
    prompt's responses are consecutive: group g is
    rewards[g * group_size : (g + 1) * group_size].
    A = r - mean of r's group; when normalize_by_std, divided by
    (std of the group + eps), the std with Bessel's correction (torch.std's
    default, as TRL's GRPOTrainer). normalize_by_std=False is the mean-only
    advantage (Dr. GRPO's). A group of equal rewards gives 0.
    This is CS336 a5's compute_group_normalized_rewards.

grpo_clip_loss(logp, old_logp, advantages, response_mask, clip_eps) -> 0-dim fp32
    logp: (B, T) log-probs of the sampled tokens under the current policy;
    old_logp: (B, T) the same under the policy that sampled them (a constant);
    advantages: (B,), one per sequence, shared by all its tokens;
    response_mask: (B, T) bool, True on response tokens, at least one per row.
    ratio = exp(logp - old_logp)
    l = -min(ratio * A, clamp(ratio, 1 - clip_eps, 1 + clip_eps) * A)  per token
    loss = mean over the B sequences of sum_t(mask * l) / sum_t(mask)
    (DeepSeekMath's 1/|o_i|: each sequence averaged over its own tokens).
    No KL term. Gradients reach logp.
Forbidden
    nothing: exp, clamp, minimum, mean and std are the tools.
"""

import torch


def group_advantages(rewards, group_size, normalize_by_std=True, eps=1e-6):
    """Each reward minus its group's mean, over (the group's std + eps) when normalize_by_std."""
    # Things to think about:
    # - Which rewards form a group: consecutive ones, or every n_groups-th?
    # - Which std: torch.std's default divides by n - 1. What is it for a group of two?
    # - Every response of a prompt right (or wrong): what is std, and what is 0 / 0?
    # - Where does eps go: next to the std, or under the square root?
    # - Is the result fp32 whatever dtype the rewards come in?
    raise NotImplementedError("write group_advantages")


def grpo_clip_loss(logp, old_logp, advantages, response_mask, clip_eps):
    """The clipped surrogate per token, averaged over each sequence's response tokens, then over sequences."""
    # Things to think about:
    # - advantages is (B,) and logp (B, T): what does ratio * advantages broadcast to, and when does it
    #   run without an error although it is wrong?
    # - What is clamped: the ratio, the advantage, or their product?
    # - min or max, and where does the minus sign go?
    # - A long response and a short one: does each count once, or per token?
    # - Which tokens are the prompt and the padding, and what do they add to the sum and to the length?
    raise NotImplementedError("write grpo_clip_loss")
