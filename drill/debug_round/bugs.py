"""The bug library of debug_gpt, as data: where each bug lives, its fixed and planted text, what it breaks.

A bug's `fixed` text occurs exactly once in the template's variant it applies to (a test holds that), so
planting is a text replacement and `plant.py` needs no knowledge of any bug. `planted` is a str, or a dict
keyed by the variant slot's value where the two variants differ ("gelu"/"swiglu"). `function` is the
function the bug lives in: at most one bug per function is planted, and each function has one probe in the
grader, so the count of remaining bugs is the count of planted functions whose probe fails.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PlantedBug:
    id: str
    function: str  # as the probe names it: "CausalSelfAttention.scores", "train_step"
    fixed: str | dict[str, str]
    planted: str | dict[str, str]
    title: str
    breaks: str
    hints: tuple[str, ...]

    def texts(self, mlp: str) -> tuple[str, str]:
        """(fixed, planted) for the file's MLP variant ("gelu" or "swiglu")."""
        fixed = self.fixed[mlp] if isinstance(self.fixed, dict) else self.fixed
        planted = self.planted[mlp] if isinstance(self.planted, dict) else self.planted
        return fixed, planted


LIBRARY: tuple[PlantedBug, ...] = (
    PlantedBug(
        "dgpt_mask_wrong_side", "causal_mask",
        "torch.tril(torch.ones(size, size, dtype=torch.bool))",
        "torch.triu(torch.ones(size, size, dtype=torch.bool))",
        "the causal mask keeps the future, not the past",
        "each position attends to itself and the positions after it, so training sees the answers",
        ("Which keys may query 3 see? Print the mask for a size of 4.",
         "The lower triangle is the past; check which triangle the mask keeps.")),
    PlantedBug(
        "dgpt_mask_zero_fill", "CausalSelfAttention.masked_softmax",
        'att.masked_fill(~mask, float("-inf"))',
        "att.masked_fill(~mask, 0.0)",
        "masked scores filled with 0 instead of -inf",
        "a score of 0 still gets weight exp(0) in the softmax, so the future leaks in",
        ("Look at what the mask fills the hidden scores with.",
         "After the softmax a hidden key must have weight exactly 0: which score gives exp(score) = 0?")),
    PlantedBug(
        "dgpt_softmax_dim", "CausalSelfAttention.masked_softmax",
        "F.softmax(att, dim=-1)",
        "F.softmax(att, dim=-2)",
        "softmax over the queries instead of the keys",
        "each query's weights no longer sum to 1 over the keys it reads",
        ("Sum the attention weights of one query: do they add up to 1?",
         "The scores are (B, H, T_q, T_k): which axis holds the keys?")),
    PlantedBug(
        "dgpt_missing_scale", "CausalSelfAttention.scores",
        "return (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))",
        "return q @ k.transpose(-2, -1)",
        "scores not scaled by 1/sqrt(head_size)",
        "the scores grow with the head size and the softmax saturates",
        ("How large do the scores get as the head size grows?",
         "Scaled dot-product attention divides q.k by the square root of something.")),
    PlantedBug(
        "dgpt_scale_d_model", "CausalSelfAttention.scores",
        "return (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))",
        "return (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.n_embd))",
        "scores scaled by 1/sqrt(n_embd) instead of 1/sqrt(head_size)",
        "the scores are too small by sqrt(n_head): attention is flatter than it should be",
        ("The scale is there, but is it the right size?",
         "The dot product runs over one head's features, not the whole embedding.")),
    PlantedBug(
        "dgpt_head_split_no_transpose", "CausalSelfAttention.split_heads",
        "return x.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)",
        "return x.reshape(B, self.n_head, T, C // self.n_head)",
        "heads split by a reshape alone, without the transpose",
        "the view reinterprets memory: each 'head' gets features of other positions mixed in",
        ("Follow one position's features through split_heads: where do they end up?",
         "A view to (B, H, T, D) is not the same as a view to (B, T, H, D) then swapping two axes.")),
    PlantedBug(
        "dgpt_head_merge_no_transpose", "CausalSelfAttention.merge_heads",
        "return y.transpose(1, 2).contiguous().view(B, T, H * D)",
        "return y.contiguous().view(B, T, H * D)",
        "heads merged by a reshape alone, without the transpose",
        "the outputs of different positions are mixed into one position's features",
        ("Follow one position's output through merge_heads: does it stay that position's?",
         "The heads' outputs are (B, H, T, D); the features of one position must be contiguous first.")),
    PlantedBug(
        "dgpt_missing_residual", "Block.forward",
        "x = x + self.attn(self.ln_1(x))",
        "x = self.attn(self.ln_1(x))",
        "the attention sub-layer has no residual connection",
        "the block's input is thrown away after attention; deep stacks train badly",
        ("What happens to the block's input after the attention sub-layer?",
         "A pre-norm block adds each sub-layer's output to its input.")),
    PlantedBug(
        "dgpt_residual_on_normed", "Block.forward",
        "x = x + self.mlp(self.ln_2(x))",
        "x = self.ln_2(x)\n        x = x + self.mlp(x)",
        "the MLP's residual adds to the normalised input",
        "the residual stream is replaced by its normalised copy, so the block no longer carries its input",
        ("Which tensor does the MLP's residual add to?",
         "In a pre-norm block the norm feeds the sub-layer only; the residual adds to the un-normed stream.")),
    PlantedBug(
        "dgpt_pos_not_added", "GPT.embed",
        "return self.drop(tok_emb + pos_emb)",
        "return self.drop(tok_emb)",
        "the position embeddings are computed but never added",
        "the model cannot tell positions apart (wpe gets no gradient)",
        ("Does wpe ever get a gradient?",
         "Look at what embed returns: every embedding it computes should be in it.")),
    PlantedBug(
        "dgpt_label_not_shifted", "split_batch",
        "return batch[:, :-1], batch[:, 1:]",
        "return batch[:, :-1], batch[:, :-1]",
        "the targets are the inputs, not shifted by one",
        "the model learns to copy its input; the loss falls to near 0 and generation is useless",
        ("If the loss falls suspiciously fast, what is the model asked to predict?",
         "The target of position t is the token at t + 1.")),
    PlantedBug(
        "dgpt_untied_head", "GPT.__init__",
        "        self.lm_head.weight = self.wte.weight\n",
        "",
        "lm_head is not tied to wte",
        "the output projection is a separate matrix, so wte gets no gradient from the logits",
        ("Count the model's parameters: is one matrix there twice?",
         "nanoGPT shares one matrix between the token embedding and the output projection.")),
    PlantedBug(
        "dgpt_dropout_at_eval", "CausalSelfAttention.mix",
        "att = self.attn_dropout(att)",
        "att = F.dropout(att, self.dropout, training=True)",
        "attention dropout runs in eval mode too",
        "eval logits are random: two calls in eval mode differ",
        ("Call the model twice in eval mode on the same input: same logits?",
         "Which dropout call ignores model.eval()?")),
    PlantedBug(
        "dgpt_ln_f_missing", "GPT.forward",
        "        x = self.ln_f(x)\n",
        "",
        "the final LayerNorm is never applied",
        "the logits come from the un-normalised residual stream (ln_f gets no gradient)",
        ("Does every module of the model get a gradient?",
         "Between the last block and lm_head there is one more module.")),
    PlantedBug(
        "dgpt_mlp_activation", "MLP.forward",
        {"gelu": "F.gelu(self.c_fc(x))", "swiglu": "F.silu(self.w_gate(x)) * self.w_up(x)"},
        {"gelu": "F.relu(self.c_fc(x))", "swiglu": "self.w_gate(x) * F.silu(self.w_up(x))"},
        "the MLP's activation is the wrong one or on the wrong branch",
        "ReLU for GELU, or silu on the up branch instead of the gate: another function than the model's",
        ("Check the MLP's non-linearity against the architecture it names.",
         "GPT-2 uses GELU; SwiGLU applies silu to the gate branch only.")),
    PlantedBug(
        "dgpt_out_proj_missing", "CausalSelfAttention.forward",
        "return self.resid_dropout(self.c_proj(y))",
        "return self.resid_dropout(y)",
        "the attention's output projection is skipped",
        "the heads are never mixed back into the model's features (c_proj gets no gradient)",
        ("Does every Linear in the attention get used?",
         "After merging the heads, one projection is still due.")),
    PlantedBug(
        "dgpt_no_zero_grad", "train_step",
        "    optimizer.zero_grad(set_to_none=True)\n",
        "",
        "gradients are never zeroed",
        "every step adds to the previous steps' gradients, so the updates grow and drift",
        ("Where do the gradients of the previous step go?",
         "backward() adds into .grad; something must clear it before each step.")),
    PlantedBug(
        "dgpt_step_before_backward", "train_step",
        "    loss.backward()\n    optimizer.step()\n",
        "    optimizer.step()\n    loss.backward()\n",
        "the optimizer steps before backward",
        "each step uses no gradient (the first) or the previous batch's",
        ("In which order must backward and the optimizer step run?",
         "The step reads .grad: is it filled yet when step() runs?")),
    PlantedBug(
        "dgpt_generate_first_logit", "generate",
        "logits = logits[:, -1, :]",
        "logits = logits[:, 0, :]",
        "generate reads the first position's logits",
        "the next token is predicted from the first token of the context, not the last",
        ("Which position's logits predict the next token?",
         "logits is (B, T, V): the next token comes after the last position.")),
)

BY_ID = {b.id: b for b in LIBRARY}

# Pairs never planted together: they cancel or hide each other's effect (both about the mask, or a split and a
# merge whose layouts partly undo each other).
INTERACTIONS = frozenset({
    frozenset({"dgpt_mask_wrong_side", "dgpt_mask_zero_fill"}),
    frozenset({"dgpt_mask_wrong_side", "dgpt_softmax_dim"}),
    frozenset({"dgpt_head_split_no_transpose", "dgpt_head_merge_no_transpose"}),
})

# The functions with a probe, in the file's order (hints and reports follow it).
FUNCTIONS = ("causal_mask", "CausalSelfAttention.split_heads", "CausalSelfAttention.merge_heads",
             "CausalSelfAttention.scores", "CausalSelfAttention.masked_softmax", "CausalSelfAttention.mix",
             "CausalSelfAttention.forward", "MLP.forward", "Block.forward", "GPT.__init__", "GPT.embed",
             "GPT.forward", "split_batch", "train_step", "generate")

MIN_BUGS, MAX_BUGS, DEFAULT_BUGS = 1, 8, 4

# Part 2's named mistakes (the learner's own, never planted).
CACHE_MISTAKES = {
    "dgpt_cache_recomputes": ("the cached decode recomputes the whole context",
                              "each decode step must run the model on the new token only"),
    "dgpt_cache_position": ("the cached decode gives other tokens than the uncached one",
                            "as when the new token's position embedding is taken from 0, not its position"),
}


def compatible(chosen: list[str], candidate: str) -> bool:
    """Whether `candidate` may join `chosen`: another function, and no interacting pair."""
    fn = BY_ID[candidate].function
    return all(BY_ID[c].function != fn and frozenset({c, candidate}) not in INTERACTIONS for c in chosen)
