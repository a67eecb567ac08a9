"""Numeric and parametric hints go from a nudge to the method towards the worked formula (issue 28 §2).

The first hint of such a card must leave the card's work to the learner: it
may name the quantities or the method, never the formula with the numbers
in. "Formula-like" is read here as a heuristic, not in the validator (it
would refuse honest prose): a first hint with an `=`/`≈` or with two or more
arithmetic operators between operands. The cards whose first hint was the
formula got a new first hint, and the formula moved to a later hint marked
`worked: true` (reading it caps the rating at Hard).
"""

from __future__ import annotations

import re

import pytest

from drill.paths import questions_dir
from drill.quiz.loader import scan
from drill.quiz.schema import Question

_OPERATOR = re.compile(r"(?<=[\w\)\]²³])(\s*)([×*·/^+−-])(\s*)(?=[\w\(√])")


def formula_like(hint: str) -> bool:
    """An equation, or at least two arithmetic operators between operands ('n × n' alone is a shape)."""
    if re.search(r"[=≈]", hint):
        return True
    hyphen = ("", "-", "")  # top-k, fp16-element: a hyphenated word, not a minus
    return sum(1 for m in _OPERATOR.finditer(hint) if m.groups() != hyphen) >= 2


# The cards whose first hint was their formula before issue 28 (their formula is now a later, worked hint).
REWRITTEN = (
    "arch-cross-attention-cache",
    "attn-probs-memory",
    "attn-score-matrix-memory",
    "attn-score-std",
    "beyond-linear-state-vs-kv",
    "beyond-mla-cache-size",
    "beyond-rolling-buffer-slot",
    "block-attn-flop-share",
    "block-embedding-share",
    "block-flops-per-token",
    "block-gqa-layer-param-count",
    "block-llama-layer-params",
    "block-llama3-70b-params",
    "block-params-per-layer",
    "block-tied-embedding-saving",
    "ffn-hidden-width-rule",
    "ffn-llama-hidden-dim",
    "ffn-param-share-llama3",
    "ffn-silu-minimum",
    "ffn-swiglu-param-count",
    "flash-lse-state-size",
    "flash-merge-partials",
    "flash-online-update-value",
    "flash-standard-hbm-traffic",
    "gqa-70b-batch-cache",
    "gqa-70b-bytes-per-token",
    "gqa-bytes-saved",
    "gqa-head-to-group",
    "kv-cache-bytes",
    "kv-llama2-7b-per-token",
    "kv-max-batch-fits",
    "kv-max-context",
    "kv-sliding-window-cache",
    "loss-bits-per-byte",
    "loss-bits-per-byte-param",
    "loss-ce-gradient",
    "loss-label-smoothing-value",
    "loss-underflow-value",
    "mask-causal-pairs",
    "mask-padding-waste",
    "mha-crossover-classic",
    "mha-crossover-swiglu",
    "mha-layer-flops",
    "mha-params-with-bias",
    "moe-active-ffn-params",
    "moe-aux-balanced-value",
    "moe-aux-collapsed-value",
    "moe-every-expert-cost",
    "moe-expected-distinct-experts",
    "moe-expert-capacity",
    "moe-mixtral-active-expert-params",
    "norm-eps-outside-sqrt",
    "norm-gpt2-init-std",
    "norm-layernorm-output",
    "norm-param-count",
    "norm-rmsnorm-backward-value",
    "norm-rmsnorm-output",
    "pit-fp16-exp-overflow",
    "pit-fp16-max",
    "pos-additive-activation",
    "pos-alibi-bias-alignment",
    "pos-alibi-slope",
    "pos-alibi-slope-param",
    "pos-alibi-slopes-non-power-of-two",
    "pos-rope-slowest-period",
    "pos-rope-wavelength",
    "pos-sinusoidal-angle",
    "pos-sinusoidal-i-bug",
    "pos-sinusoidal-value",
    "samp-min-p-count",
    "samp-temperature-value",
    "samp-top-p-renormalised",
    "scale-chinchilla-optimal-size",
    "scale-gpu-hours",
    "scale-llama3-8b-params",
    "scale-llama3-8b-training-flops",
    "scale-lm-head-flops",
    "scale-mfu",
    "scale-tokens-per-parameter",
    "scale-train-flops-param",
    "serve-decode-intensity",
    "serve-paged-waste",
    "serve-prefill-time",
    "serve-ridge-point",
    "serve-roofline-param",
    "serve-speculative-accept-prob",
    "tok-compression-token-drop",
    "tok-embedding-bytes",
    "train-activation-per-layer",
    "train-adam-memory-7b",
    "train-fsdp-per-gpu",
    "train-pipeline-bubble",
    "train-ring-allreduce",
    "train-zero1-memory",
)


@pytest.fixture(scope="module")
def cards() -> dict[str, Question]:
    result = scan(questions_dir(), audit=False)
    assert not result.problems, result.problems[:5]
    return result.bank.by_id()


@pytest.mark.parametrize("hint", [
    "Elements = heads × n × n; then bytes per fp16 element.", "2 × layers × KV heads × d_head × 2 bytes.",
    "Share = 4nd / (24d² + 4nd).", "10,000 − 2 × 4,096.", "r = √((9 + 16)/2)",
])
def test_the_heuristic_flags_a_formula(hint: str) -> None:
    assert formula_like(hint)


@pytest.mark.parametrize("hint", [
    "How many n × n matrices does one layer hold?", "Apply the 8/3 width first, then the rounding.",
    "Which tensors does one decode step read?", "Is the token that crosses top-p kept?",
])
def test_the_heuristic_passes_a_nudge(hint: str) -> None:
    assert not formula_like(hint)


def test_no_numeric_first_hint_is_the_formula(cards: dict[str, Question]) -> None:
    flagged = [f"{q.where} {q.id}: {q.hints[0]!r}" for q in cards.values()
               if q.kind in ("numeric", "parametric") and q.hints and formula_like(q.hints[0])]
    assert not flagged, "first hints that do the card's work (make them a nudge, move the formula later):\n" + \
        "\n".join(flagged)


@pytest.mark.parametrize("card", REWRITTEN)
def test_a_rewritten_card_keeps_its_formula_in_a_later_worked_hint(cards: dict[str, Question], card: str) -> None:
    q = cards[card]
    assert len(q.hints) >= 2 and 0 not in q.worked_hints and q.worked_hints, (q.hints, q.worked_hints)
    assert not q.hint_caps(1) or len(q.hints) == 1  # the nudge alone does not cap
    assert q.hint_caps(q.worked_hints[0] + 1)
