"""The shipped bank covers what issue 5 promises: size, kinds, topics, and every
interview-drill question of the seed texts as a recall card.

The seed texts live outside the repository, so the drill questions are listed
here by their gist with the id of the card that carries each; renaming or
dropping one of those cards fails this test.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from drill.quiz.kinds.recall import RecallQuestion
from drill.quiz.loader import load_bank

TOPICS = {
    "block", "attention", "mha", "positional", "masking", "normalization", "ffn", "gqa", "flash", "kv_cache",
    "architectures", "moe", "pitfalls", "tokenization", "sampling", "loss", "scaling", "serving", "training",
    "beyond_attention", "post_training", "quantization", "peft", "optimizers", "long_context", "decoding",
    "serving_structures", "evaluation",
}

# seed drill question (gist) -> card id
SEED_DRILLS = {
    # seed 003, "Interview drill" sections
    "explain a Transformer block in 60 seconds": "block-explain-in-60s",
    "why the residual connection is load-bearing": "block-residual-load-bearing",
    "why the Transformer replaced the RNN": "block-why-replaced-rnn",
    "what the FFN does that attention can't": "ffn-what-mlp-adds",
    "attention or MLP: which is more expensive": "mha-attn-vs-mlp-cost",
    "layer norm, not batch norm": "norm-ln-vs-bn",
    "why the 2017 paper scaled embeddings by sqrt(d)": "block-embedding-sqrt-d",
    "what to change in the block for a 2026 model": "block-2026-changes",
    "why divide by sqrt(d_k)": "attn-why-sqrt-dk",
    "why multiple heads": "mha-why-multiple-heads",
    "why attention is O(n^2)": "attn-why-quadratic",
    "how the causal mask works": "mask-causal-how",
    "self- vs cross-attention": "mask-self-vs-cross",
    "your MHA vs nn.MultiheadAttention": "mha-vs-nn-multiheadattention",
    "why positional encoding at all": "pos-why-needed",
    "walk through the sinusoidal encoding": "pos-sinusoidal-walkthrough",
    "RoPE in 90 seconds": "pos-rope-90-seconds",
    "RoPE on q and k but not v": "pos-rope-qk-not-v",
    "2k-context model needed at 32k": "pos-extend-2k-to-32k",
    "ALiBi vs RoPE": "pos-alibi-vs-rope",
    "does RoPE change the 1/sqrt(d_k) scaling": "pos-rope-and-sqrt-dk",
    "pre-norm instead of post-norm": "norm-prenorm-vs-postnorm",
    "what RMSNorm drops": "norm-rmsnorm-drops",
    "derive the 8d/3 hidden size": "ffn-derive-8-thirds",
    "why a gate improves the FFN": "ffn-why-gate-helps",
    "how GQA reduces memory": "gqa-how-it-saves-memory",
    "is FlashAttention approximate": "flash-exact-or-approximate",
    "what limits long-context inference": "kv-long-context-bottlenecks",
    "what MoE is and when it is wrong": "moe-what-and-when-wrong",
    # seed 000, section 10
    "prove the sqrt(d_k) scaling keeps gradients alive": "attn-sqrt-dk-proof",
    "RoPE relative vs sinusoidal absolute": "pos-rope-vs-sinusoidal-relative",
    "pre-LN vs post-LN": "norm-postln-abandoned",
    "KV cache trade-offs": "kv-compute-memory-tradeoff",
}


@pytest.fixture(scope="module")
def bank(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return load_bank(None, cache_dir=tmp_path_factory.mktemp("cache"))


def test_bank_size_and_mix(bank) -> None:  # type: ignore[no-untyped-def]
    kinds = Counter(q.kind for q in bank.questions)
    assert len(bank.questions) >= 150
    assert kinds["choice"] >= 30 and kinds["numeric"] >= 20 and kinds["parametric"] >= 10, kinds


def test_readme_states_the_bank_size_and_topic_count(bank) -> None:  # type: ignore[no-untyped-def]
    """The README's headline numbers are the bank's, not a memory of them."""
    readme = Path(__file__).resolve().parents[1].joinpath("README.md").read_text()
    match = re.search(r"(\d+) interview questions \(YAML bank, (\d+) topics\)", readme)
    assert match, "README lost its 'N interview questions (YAML bank, M topics)' line"
    assert (int(match.group(1)), int(match.group(2))) == (len(bank.questions), len(set(bank.topics())))


def test_most_cards_have_hints(bank) -> None:  # type: ignore[no-untyped-def]
    with_hints = sum(1 for q in bank.questions if q.hints)
    assert with_hints >= 0.6 * len(bank.questions), f"{with_hints} of {len(bank.questions)} cards have hints"


def test_every_seed_topic_has_a_file(bank) -> None:  # type: ignore[no-untyped-def]
    assert {q.topic for q in bank.questions} == TOPICS
    shipped = {p.stem for p in Path(__file__).resolve().parents[1].joinpath("questions").glob("*.yaml")}
    assert shipped == TOPICS | {"spot_bug"}  # spot_bug.yaml: each of its questions names one of the topics


@pytest.mark.parametrize(("gist", "qid"), sorted(SEED_DRILLS.items()))
def test_seed_drill_question_is_a_recall_card(bank, gist: str, qid: str) -> None:  # type: ignore[no-untyped-def]
    by_id = {q.id: q for q in bank.questions}
    assert qid in by_id, f"seed drill question {gist!r} lost its card {qid}"
    card = by_id[qid]
    assert isinstance(card, RecallQuestion)
    assert 2 <= len(card.key_points) <= 5
    assert card.common_wrong, f"{qid} needs the seed's common wrong answer"
