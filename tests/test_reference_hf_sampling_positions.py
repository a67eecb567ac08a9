"""The sampling, sinusoidal and ALiBi references against Hugging Face's own code (tests only).

- sampling: transformers' TemperatureLogitsWarper, TopKLogitsWarper,
  TopPLogitsWarper and MinPLogitsWarper, chained in generate()'s order, then
  a softmax. Agreement is exact on the support, on random rows and on the
  edge cases where the wording matters: the token that crosses top_p is kept
  (HF removes ascending cumsum <= 1 - top_p, the same set), at least one
  token always stays, tokens tied at the min-p threshold are kept (HF removes
  probs < min_p * max), tied tokens are kept or removed together by min-p,
  and ties at the k-th logit all stay (HF's `scores < kth`). Ties at the
  top-p crossing are the one place the result depends on sort order: both
  keep exactly as many tokens, which ones may differ (the hidden tests draw
  no ties there).
- sinusoidal: DistilBERT's `create_sinusoidal_embeddings` ("interleaved") and
  Marian's `MarianSinusoidalPositionalEmbedding` ("concat"), base 10000.
- alibi: BLOOM's slopes for every head count to 128, and `build_alibi_tensor`'s
  slope * j bias, which equals the contract's minus -slope * p_i per row.
Skipped as a whole where transformers cannot run (transformers 5 disables
its models on torch < 2.6, e.g. torch 2.4).
"""

from __future__ import annotations

import math

import pytest
import torch

import drill.reference as R

transformers = pytest.importorskip("transformers")
if not transformers.utils.is_torch_available():
    pytest.skip(f"transformers {transformers.__version__} does not support torch {torch.__version__}",
                allow_module_level=True)

from transformers.generation.logits_process import (  # noqa: E402
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

IMPLS = ["fused", "math"]


def hf_probs(logits: torch.Tensor, temperature=1.0, top_k=None, top_p=None, min_p=None) -> torch.Tensor:
    """generate()'s warpers for these options, in its order (it skips T == 1, top_k 0, top_p 1.0)."""
    scores = logits.float()
    if temperature != 1.0:
        scores = TemperatureLogitsWarper(temperature)(None, scores)
    if top_k:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p is not None and top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(None, scores)
    if min_p is not None:
        scores = MinPLogitsWarper(min_p)(None, scores)
    return torch.softmax(scores, dim=-1)


@pytest.mark.parametrize("impl", IMPLS)
def test_random_rows_agree_with_the_warpers(impl: str) -> None:
    g = torch.Generator().manual_seed(11)
    for _ in range(150):
        v = int(torch.randint(2, 400, (1,), generator=g))
        logits = torch.randn(3, v, generator=g) * float(torch.rand(1, generator=g) * 4 + 0.1)
        opts = dict(temperature=float(torch.rand(1, generator=g)) * 2 + 0.2,
                    top_k=int(torch.randint(0, v + 3, (1,), generator=g)),
                    top_p=float(torch.rand(1, generator=g)) * 0.99 + 0.01,
                    min_p=float(torch.rand(1, generator=g)) * 0.5 + 1e-3)
        want, got = hf_probs(logits, **opts), R.filter_logits(logits, **opts, impl=impl)
        assert torch.equal(got > 0, want > 0), opts
        assert (got - want).abs().max() <= 1e-6, opts


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("opts", [{"top_p": 0.6}, {"top_p": 0.01}, {"top_p": 0.85}, {"top_k": 2}, {"min_p": 0.5}],
                         ids=str)
def test_the_crossing_token_and_at_least_one_token(impl: str, opts: dict) -> None:
    logits = torch.tensor([[0.5, 0.3, 0.2]]).log()
    want = hf_probs(logits, **opts)
    got = R.filter_logits(logits, **opts, impl=impl)
    assert torch.equal(got > 0, want > 0) and torch.allclose(got, want, atol=1e-7)
    if "top_p" in opts:  # 0.6: 0.3 crosses it and stays; 0.01: the top token alone; 0.85: 0.2 crosses it
        assert (got > 0).sum().item() == {0.6: 2, 0.01: 1, 0.85: 3}[opts["top_p"]]


@pytest.mark.parametrize("impl", IMPLS)
def test_min_p_keeps_a_token_at_the_threshold_and_ties_together(impl: str) -> None:
    at_max = torch.tensor([[2.0, 2.0, 0.0, 2.0]])  # three tokens tied at the max: each is exactly at min_p = 1.0
    assert (hf_probs(at_max, min_p=1.0) > 0).tolist() == (R.filter_logits(at_max, min_p=1.0, impl=impl) > 0).tolist()
    assert (R.filter_logits(at_max, min_p=1.0, impl=impl) > 0).tolist() == [[True, True, False, True]]
    tied = torch.tensor([[1.0, 0.0, 0.0, -3.0]])
    for m in (0.2, math.exp(-1) * 1.01, 0.9):
        got = R.filter_logits(tied, min_p=m, impl=impl) > 0
        assert got[0, 1] == got[0, 2] and torch.equal(got, hf_probs(tied, min_p=m) > 0)


@pytest.mark.parametrize("impl", IMPLS)
def test_ties_at_the_kth_logit_all_stay_and_top_p_ties_keep_the_same_count(impl: str) -> None:
    tied_k = torch.tensor([[3.0, 1.0, 1.0, 0.0]])
    assert torch.equal(R.filter_logits(tied_k, top_k=2, impl=impl) > 0, hf_probs(tied_k, top_k=2) > 0)
    assert (R.filter_logits(tied_k, top_k=2, impl=impl) > 0).sum() == 3
    tied_p = torch.tensor([[1.0, 1.0, 0.0]])  # 0.42, 0.42, 0.16: top_p 0.3 keeps ONE of the tied pair
    ours, theirs = R.filter_logits(tied_p, top_p=0.3, impl=impl) > 0, hf_probs(tied_p, top_p=0.3) > 0
    assert ours.sum() == theirs.sum() == 1 and not ours[0, 2] and not theirs[0, 2]


def _marian_table(n_pos: int, dim: int) -> torch.Tensor:
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    emb = MarianSinusoidalPositionalEmbedding(n_pos, dim)
    if hasattr(emb, "create_weight"):  # transformers >= 4.48
        return emb.create_weight()
    return emb._init_weight(torch.nn.Parameter(torch.empty(n_pos, dim)))  # older: fills and returns it


def test_interleaved_is_distilbert_and_concat_is_marian() -> None:
    from transformers.models.distilbert.modeling_distilbert import create_sinusoidal_embeddings

    for n_pos, dim in [(50, 16), (300, 64), (7, 2)]:
        distil = torch.empty(n_pos, dim)
        create_sinusoidal_embeddings(n_pos, dim, distil)
        marian = _marian_table(n_pos, dim).detach()
        for impl in IMPLS:
            tol = 1e-6 if impl == "math" else 3e-7 * n_pos
            inter = R.sinusoidal_positions(torch.arange(n_pos), dim, 10000.0, "interleaved", impl=impl)
            concat = R.sinusoidal_positions(torch.arange(n_pos), dim, 10000.0, "concat", impl=impl)
            assert (inter - distil).abs().max() <= tol and (concat - marian).abs().max() <= tol


def test_slopes_are_blooms_for_every_head_count() -> None:
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    for n in range(1, 129):
        bloom = build_alibi_tensor(torch.ones(1, 2), n, torch.float32).reshape(n, 2)[:, 1]  # slope * j at j = 1
        for impl in IMPLS:
            assert torch.allclose(R.alibi_slopes(n, impl=impl), bloom, rtol=1e-5, atol=0), (n, impl)


@pytest.mark.parametrize("n,t_q,t_k", [(8, 6, 6), (12, 3, 10), (6, 1, 9)])
def test_blooms_bias_is_the_contracts_plus_a_row_constant(n: int, t_q: int, t_k: int) -> None:
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    bloom = build_alibi_tensor(torch.ones(1, t_k), n, torch.float32).reshape(n, 1, t_k)  # slope * j
    ours = R.alibi_bias(n, t_q, t_k)
    slopes = R.alibi_slopes(n)[:, None, None]
    p = torch.arange(t_k - t_q, t_k, dtype=torch.float32)[None, :, None]
    assert torch.allclose(ours, bloom - slopes * p, rtol=1e-5, atol=1e-5)
    mask = R.causal_mask(t_q, t_k)
    attend = lambda bias: torch.softmax(bias.masked_fill(~mask, float("-inf")), dim=-1)  # noqa: E731
    assert torch.allclose(attend(ours), attend(bloom.expand(n, t_q, t_k)), atol=1e-6)
