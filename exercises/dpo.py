"""Exercise `dpo`: response log-probabilities and the DPO loss.

Grade it with `drill check dpo.py`. `sequence_logprobs` and `dpo_loss` are
graded; you may add helpers in this file.

Contract
--------
sequence_logprobs(logits, labels, response_mask) -> (B,) fp32
    logits: (B, T, V) of a causal LM run on the tokens `labels` (B, T) int64,
    the input ids themselves, NOT shifted; response_mask: (B, T) bool, True
    where labels[:, t] is a response token. logits[:, t] predicts
    labels[:, t + 1] (Hugging Face TRL's get_batch_logps), so
    logp[b] = sum over t = 1 .. T-1 with response_mask[b, t] of
              log_softmax(logits[b, t - 1])[labels[b, t]].
    response_mask[:, 0] is ignored (nothing predicts the first token). Where
    the mask is False labels may hold anything, -100 included: never gather
    with them. log_softmax in fp32 (logits may be fp32, fp16 or bf16).
    Gradients reach logits.

dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps,
         ref_rejected_logps, beta) -> (loss, chosen_rewards, rejected_rewards)
    Each input (B,) fp32; beta > 0. TRL's "sigmoid" DPO loss:
    z = beta * ((policy_chosen - policy_rejected) - (ref_chosen - ref_rejected))
    loss = mean over B of -log sigmoid(z), finite and exact for |z| up to 1e4.
    chosen_rewards = beta * (policy_chosen - ref_chosen),
    rejected_rewards = beta * (policy_rejected - ref_rejected), both (B,) and
    DETACHED. loss is 0-dim fp32; its gradients reach the policy log-probs
    (the reference ones come without grad).
Forbidden
    nothing: log_softmax, gather and logsigmoid are the tools.
"""

import torch


def sequence_logprobs(logits, labels, response_mask):
    """The summed log-probability of each row's response tokens under the logits."""
    # Things to think about:
    # - Which position's logits predict labels[:, t]? What predicts labels[:, 0]?
    # - What does gather do with a label of -100?
    # - Sum or mean over a response's tokens?
    # - fp16 logits of size ~15: how precise is a log_softmax computed in fp16?
    raise NotImplementedError("write sequence_logprobs")


def dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    """DPO's sigmoid loss and the implicit rewards of both responses."""
    # Things to think about:
    # - What is torch.log(torch.sigmoid(z)) at z = -1000 in fp32?
    # - Where does beta go?
    # - The rewards are for logging: should a gradient flow through them?
    raise NotImplementedError("write dpo_loss")
