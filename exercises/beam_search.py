"""Exercise `beam_search`: beam search over a language model, as Hugging Face's generate runs it.

Grade it with `drill check beam_search.py`. `beam_search` is graded; you may
add helpers in this file.

Greedy decoding keeps one prefix; beam search keeps the beam_width best
prefixes by total log-probability and collects the ones that end as finished
hypotheses. This is `generate(num_beams=beam_width, do_sample=False,
early_stopping=False, length_penalty=..., max_new_tokens=..., eos_token_id=...)`
from the prompt [bos_id], for one sequence.

Contract
--------
beam_search(step_logprobs, bos_id, eos_id, beam_width, max_new_tokens,
            length_penalty=1.0) -> (tokens: list[int], score: float)
    step_logprobs(tokens) -> (N, V) log-probs of the next token, for an
        (N, t) int64 batch of prefixes (each row: bos, then its tokens so
        far; the rows are independent, any N >= 1). V >= 2 * beam_width.
    Running beams start as ONE beam, [bos], with log-prob sum S = 0.
    At step s = 1, 2, ...:
    1. Candidates: S_b + logp_b[w] for every running beam b and every token
       w, ranked over all beams together; keep the best 2 * beam_width.
    2. A candidate finishes if w == eos_id or s == max_new_tokens. If it is
       among the first beam_width candidates it becomes a hypothesis with
       score (S_b + logp_b[w]) / s ** length_penalty (s counts the generated
       tokens, eos included, bos not); a finishing candidate ranked lower is
       dropped. Only the beam_width best hypotheses are kept.
    3. The first beam_width candidates that do not finish, in rank order,
       are the next running beams.
    4. Stop after step max_new_tokens, or as soon as beam_width hypotheses
       are kept and the best running beam's S / s ** length_penalty is <= the
       worst kept score.
    Return the best hypothesis: its tokens (bos left out, the final eos kept
    if it has one) as a list of ints, and its score as a float.
length_penalty
    > 0 favours long hypotheses, < 0 short ones, 0 ranks by the plain sum.
Graded
    Tokens exactly, the score within 1e-4, on tiny random models the grader
    passes in (no ties between candidates). Reported, not failing unless
    --strict: one step_logprobs call per step, at most beam_width rows each.
"""

import torch


def beam_search(step_logprobs, bos_id, eos_id, beam_width, max_new_tokens, length_penalty=1.0):
    """The best finished hypothesis: (tokens without bos, its length-penalised score)."""
    # Things to think about:
    # - Which beams exist before the first step, and how many rows should the first call get?
    # - Why 2 * beam_width candidates, and which of them may become hypotheses?
    # - What happens to a candidate that ends with eos: is it ever extended again?
    # - What length goes into the penalty: with bos, without eos?
    # - When may the search stop before max_new_tokens, and what is compared?
    # - Can you score all beams with one step_logprobs call per step?
    raise NotImplementedError("write beam_search")
