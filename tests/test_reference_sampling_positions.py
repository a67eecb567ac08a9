"""The sampling, sinusoidal and ALiBi references against naive implementations written here.

The naive versions are loops over Python numbers (a different formulation
from either reference path), so agreement is evidence, not tautology. The
Hugging Face cross-checks are in test_reference_hf_sampling_positions.py.
"""

from __future__ import annotations

import math

import pytest
import torch

import drill.reference as R

IMPLS = ["fused", "math"]


def naive_filter(row: list[float], temperature: float, top_k, top_p, min_p) -> list[float]:
    """One row: sort, cut, renormalise, with Python floats and the contract's words."""
    x = [v / temperature for v in row]
    order = sorted(range(len(x)), key=lambda j: x[j], reverse=True)
    kept = order[: top_k] if top_k else order
    if top_p is not None and top_p < 1.0:
        z = sum(math.exp(x[j]) for j in kept)
        mass, nucleus = 0.0, []
        for j in kept:
            if mass < top_p:
                nucleus.append(j)
            mass += math.exp(x[j]) / z
        kept = nucleus
    if min_p is not None:
        best = max(x[j] for j in kept)
        kept = [j for j in kept if math.exp(x[j] - best) >= min_p]
    z = sum(math.exp(x[j]) for j in kept)
    return [math.exp(x[j]) / z if j in kept else 0.0 for j in range(len(x))]


OPTIONS = [
    (1.0, None, None, None), (0.6, None, None, None), (2.5, 7, None, None), (1.0, 0, 0.8, None),
    (1.0, 1, None, None), (0.8, 100, 0.5, 0.1), (1.3, None, None, 0.2), (0.9, 12, 0.95, 0.05), (1.0, None, 1.0, 1.0),
]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_filter_logits_matches_the_naive_walk(impl: str, options: tuple) -> None:
    logits = torch.randn(4, 37, generator=torch.Generator().manual_seed(3)) * 2
    got = R.filter_logits(logits, *options, impl=impl)
    want = torch.tensor([naive_filter(row, *options) for row in logits.double().tolist()], dtype=torch.float64)
    assert got.dtype == torch.float32 and torch.equal(got > 0, want > 0)
    assert torch.allclose(got.double(), want, atol=1e-6) and torch.allclose(got.sum(-1), torch.ones(4))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_logits_are_upcast_and_the_result_is_fp32(impl: str, dtype: torch.dtype) -> None:
    logits = (torch.randn(3, 50, generator=torch.Generator().manual_seed(1)) * 3).to(dtype)
    got = R.filter_logits(logits, 0.7, 10, 0.9, 0.05, impl=impl)
    assert got.dtype == torch.float32
    assert torch.allclose(got, R.filter_logits(logits.float(), 0.7, 10, 0.9, 0.05, impl=impl), atol=1e-7)


@pytest.mark.parametrize("impl", IMPLS)
def test_large_logits_stay_finite_and_the_crossing_token_stays(impl: str) -> None:
    big = torch.tensor([[3e4, 2.9e4, -3e4, 0.0]])
    assert torch.equal(R.filter_logits(big, impl=impl), torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    probs = torch.tensor([[0.5, 0.3, 0.2]]).log()
    assert R.keep_mask(probs, top_p=0.6, impl=impl).tolist() == [[True, True, False]]  # 0.3 crosses 0.6: kept
    assert R.keep_mask(probs, top_p=0.01, impl=impl).tolist() == [[True, False, False]]  # at least one


@pytest.mark.parametrize("bad", [
    {"temperature": 0.0}, {"temperature": -1.0}, {"top_k": -1}, {"top_k": 2.5}, {"top_p": 0.0}, {"top_p": 1.5},
    {"min_p": 0.0}, {"min_p": 2.0},
])
def test_options_outside_the_contract_raise(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        R.filter_logits(torch.zeros(1, 4), **bad)


def naive_sinusoidal(positions: list[int], d: int, base: float, layout: str) -> list[list[float]]:
    rows = []
    for p in positions:
        sins = [math.sin(p / base ** (2 * i / d)) for i in range(d // 2)]
        coss = [math.cos(p / base ** (2 * i / d)) for i in range(d // 2)]
        if layout == "interleaved":
            rows.append([v for pair in zip(sins, coss, strict=True) for v in pair])
        else:
            rows.append(sins + coss)
    return rows


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_sinusoidal_matches_the_naive_loops(impl: str, layout: str) -> None:
    positions = [0, 1, 17, 4096, 30001, 9]
    for d, base in [(2, 10000.0), (6, 10000.0), (32, 500000.0), (64, 100.0)]:
        got = R.sinusoidal_positions(torch.tensor(positions), d, base, layout, impl=impl)
        want = torch.tensor(naive_sinusoidal(positions, d, base, layout), dtype=torch.float64)
        assert got.dtype == torch.float32 and got.shape == (len(positions), d)
        assert (got.double() - want).abs().max() <= (1e-6 if impl == "math" else 3e-7 * 30001)


def test_sinusoidal_refuses_what_the_contract_does_not_allow() -> None:
    with pytest.raises(ValueError, match="layout"):
        R.sinusoidal_positions(torch.arange(3), 8, layout="half")
    with pytest.raises(ValueError, match="even"):
        R.sinusoidal_positions(torch.arange(3), 7)
    with pytest.raises(ValueError, match="integer"):
        R.sinusoidal_positions(torch.arange(3.0), 8)


def naive_slopes(n: int) -> list[float]:
    """The paper's released code, rewritten: power-of-two ratio sequence, else recurse on 2m."""
    def pow2(k: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(k) - 3)))
        return [start * start**i for i in range(k)]

    if math.log2(n).is_integer():
        return pow2(n)
    m = 2 ** math.floor(math.log2(n))
    return pow2(m) + naive_slopes(2 * m)[0::2][: n - m]


@pytest.mark.parametrize("impl", IMPLS)
def test_alibi_slopes_match_the_papers_code_for_every_head_count(impl: str) -> None:
    for n in range(1, 130):
        got = R.alibi_slopes(n, impl=impl)
        assert got.dtype == torch.float32 and got.shape == (n,)
        assert torch.allclose(got.double(), torch.tensor(naive_slopes(n), dtype=torch.float64), rtol=2e-6, atol=0), n


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("t_q,t_k", [(4, 4), (2, 9), (1, 6)])
def test_alibi_bias_is_bottom_right_aligned(impl: str, t_q: int, t_k: int) -> None:
    n = 6
    got = R.alibi_bias(n, t_q, t_k, impl=impl)
    slopes = naive_slopes(n)
    want = torch.tensor([[[-slopes[h] * ((t_k - t_q + i) - j) for j in range(t_k)] for i in range(t_q)]
                         for h in range(n)], dtype=torch.float64)
    assert got.dtype == torch.float32 and torch.allclose(got.double(), want, rtol=2e-6, atol=1e-7)
    assert torch.all(got[:, -1, -1] == 0)  # the last query sits at the last key
    causal = R.causal_mask(t_q, t_k)
    assert torch.all(got[:, ~causal] > 0) and torch.all(got[:, causal] <= 0)  # future keys positive


def test_alibi_refuses_more_queries_than_keys() -> None:
    with pytest.raises(ValueError, match="t_q <= t_k"):
        R.alibi_bias(4, 5, 3)
    with pytest.raises(ValueError, match="n_heads"):
        R.alibi_slopes(0)
